"""`horizon up --auth` as a process, with `horizon tenant add` and the operator commands beside it
(docs/tenants.md, "Running with accounts"). One `up` per module: each start costs seconds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest

from events.subjects import job_key
from services.front.host.auth import Registry, user_url
from tests.e2e import read_log

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
HORIZON = [sys.executable, "-m", "services.front.cli.main"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # type: ignore[no-any-return]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without a NATS URL, tenant or TLS setting of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORIZON_NATS_URL", "HORIZON_TENANT", "HORIZON_TLS_"))}
    return {**env, **extra}


def horizon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HORIZON, *args], cwd=ROOT, env=env or clean_env(), capture_output=True, text=True,
                          timeout=90)


@dataclass
class Up:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    first_line: str
    out: Path
    err: Path

    @property
    def admin_url(self) -> str:
        return user_url("tls" if self.first_line.startswith("tls") else "nats", "admin",
                        Registry.read_users(self.data_dir)["admin"], "127.0.0.1", self.port)

    def secrets(self) -> list[str]:
        users = list(Registry.read_users(self.data_dir).values())
        tenants_file = self.data_dir / "auth" / "tenants.json"
        tenants = json.loads(tenants_file.read_text()) if tenants_file.exists() else {}
        tokens = [(self.data_dir / "auth" / name).read_text().strip() for name in ("dashboard-token", "metrics-token")]
        return users + [t["password"] for t in tenants.values()] + tokens

    def printed(self) -> str:
        """Everything up printed and logged so far."""
        return "".join(p.read_text(errors="replace") for p in (self.out, self.err, self.data_dir / "horizon.log",
                                                                self.data_dir / "nats-server.log") if p.exists())


def start_up(where: Path, *options: str) -> Up:
    port = free_port()
    data_dir = where / "h"
    out, err = where / "up.out", where / "up.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(data_dir), "--nodes", "2",
                                 "--gpus-per-node", "2", *options], cwd=ROOT, env=clean_env(), stdout=stdout,
                                stderr=stderr)
    deadline = time.monotonic() + 90
    while not out.read_text().endswith("\n"):
        assert proc.poll() is None, err.read_text()
        assert time.monotonic() < deadline, err.read_text()
        time.sleep(0.1)
    return Up(proc, data_dir, port, out.read_text().splitlines()[0], out, err)


def stop_up(up: Up) -> int:
    if up.proc.poll() is None:
        up.proc.send_signal(signal.SIGINT)
    return up.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    running = start_up(tmp_path_factory.mktemp("up-auth"), "--auth")
    try:
        yield running
    finally:
        stop_up(running)


@pytest.fixture(scope="module")
def tenants(up: Up) -> dict[str, str]:
    """acme's and globex's URLs, from `horizon tenant add NAME --json`."""
    urls = {}
    for name in ("acme", "globex"):
        done = horizon("tenant", "add", name, "--json", "--data-dir", str(up.data_dir))
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer == {"tenant": name, "nats_url": answer["nats_url"]}
        urls[name] = answer["nats_url"]
    return urls


def test_up_auth_prints_its_url_and_keeps_the_credentials_in_the_data_dir(up: Up, tenants: dict[str, str]):
    assert up.first_line == f"nats://127.0.0.1:{up.port}"
    auth = up.data_dir / "auth"
    assert stat.S_IMODE(auth.stat().st_mode) == 0o700
    for path in auth.rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "horizon tenant add" in up.err.read_text()
    printed = up.printed()
    assert not [s for s in up.secrets() if s in printed]  # never in its output or its logs


async def test_a_tenants_url_alone_connects_as_that_tenant(up: Up, tenants: dict[str, str]):
    again = horizon("tenant", "add", "acme", "--json", "--data-dir", str(up.data_dir))
    assert again.returncode == 0 and json.loads(again.stdout)["nats_url"] == tenants["acme"]  # idempotent
    for name, url in tenants.items():
        assert url.startswith(f"nats://{name}:") and url.endswith(f"@127.0.0.1:{up.port}")
        nc = await nats.connect(url)
        try:
            answer = json.loads((await nc.request("horizon.query.jobs", b"{}", timeout=5)).data)
            assert "jobs" in answer, answer
        finally:
            await nc.close()
    plain = horizon("tenant", "add", "initech", "--data-dir", str(up.data_dir))
    assert plain.returncode == 0, plain.stderr
    env_file = up.data_dir / "auth" / "tenants" / "initech.env"
    assert str(env_file) in plain.stdout and "initech:" not in plain.stdout  # the path, not the password
    assert "HORIZON_NATS_URL='nats://initech:" in env_file.read_text()
    refused = horizon("tenant", "add", "_admin", "--data-dir", str(up.data_dir))
    assert refused.returncode == 2 and "may not start with '_'" in refused.stderr


async def test_a_tenant_sees_nothing_of_horizon_but_its_doors(up: Up, tenants: dict[str, str]):
    acme = await nats.connect(tenants["acme"])
    admin = await nats.connect(up.admin_url)
    try:
        seen: list[str] = []

        async def on_msg(msg: Any) -> None:
            seen.append(msg.subject)

        everything = await acme.subscribe(">", cb=on_msg)
        await acme.flush()
        # What the stack publishes in HORIZON (heartbeats, globex's feed) never reaches acme; its own feed does.
        await admin.publish("horizon.hb.node-00", b"{}")
        await admin.publish("horizon.tenant.globex.evt.submission.JobAccepted.g-9", b"{}")
        await admin.publish("horizon.tenant.acme.evt.submission.JobAccepted.a-9", b"{}")
        await admin.flush()
        for _ in range(50):  # acme's own copy arrives (within 5 s on a loaded machine) ...
            if seen:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)  # ... and nothing else does
        assert seen == ["horizon.evt.submission.JobAccepted.a-9"]
        await everything.unsubscribe()  # (it would answer acme's own requests below)
        # No door to another tenant's intake, to JetStream, or to the operators' views.
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await acme.jetstream(timeout=2).publish("horizon.in.globex.submit", b"{}", headers={"Nats-Msg-Id": "x"})
        reply = json.loads((await acme.request("$JS.API.STREAM.INFO.HORIZON", b"", timeout=2)).data)
        assert reply["error"]["err_code"] == 10039  # JetStream not enabled for the account
        for subject in ("horizon.query.nodes", "horizon.query.config", "horizon.in._admin.account",
                        "horizon.validate.globex"):
            with pytest.raises(nats.errors.NoRespondersError):
                await acme.request(subject, b"{}", timeout=2)
    finally:
        await acme.close()
        await admin.close()
    assert not any(r.subject.startswith("horizon.in.globex.") for r in await read_log(up.admin_url))


async def test_a_tenant_submits_through_the_intake_and_reads_its_jobs_and_output(up: Up, tenants: dict[str, str]):
    """`horizon submit --nats URL`: the tenant comes from the URL's user; the job runs; the tenant lists it
    and reads its output (`horizon logs`, through its door horizon.logs.<node>); the other tenant does not."""
    acme = clean_env(HORIZON_NATS_URL=tenants["acme"])
    done = horizon("submit", "--json", "--gpus", "1", "--job-id", "hello", "--", "echo", "hello-from-acme", env=acme)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["job_id"] == "hello"
    deadline = time.monotonic() + 60
    while True:
        listed = horizon("jobs", "--json", env=acme)
        assert listed.returncode == 0, listed.stderr
        rows = {r["job_id"]: r for r in json.loads(listed.stdout)}
        if rows.get("hello", {}).get("state") == "SUCCEEDED":
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)
    output = horizon("logs", "hello", env=acme)
    assert output.returncode == 0 and output.stdout == "hello-from-acme\n", output
    globex = clean_env(HORIZON_NATS_URL=tenants["globex"])
    theirs = horizon("jobs", "--json", env=globex)
    assert theirs.returncode == 0 and "hello" not in {r["job_id"] for r in json.loads(theirs.stdout)}
    assert horizon("logs", "hello", env=globex).returncode == 1
    # Each part ran as its own user: the job went through every service, and no user stepped outside
    # its permissions (admin, the only user allowed more than one service's subjects, may publish no event).
    records = await read_log(up.admin_url)
    services = {r.subject.split(".")[2] for r in records
                if r.subject.startswith("horizon.evt.") and json.loads(r.data).get("job_id") == job_key("acme", "hello")}
    assert {"submission", "placement", "agent"} <= services, services
    assert "Violation" not in (up.data_dir / "nats-server.log").read_text()
    assert "restarting" not in (up.data_dir / "horizon.log").read_text()


async def test_account_set_tenant_finds_the_operator_in_the_data_dir(up: Up, tenants: dict[str, str]):
    done = horizon("account", "set", "research", "--tenant", "acme", "--tenant", "globex", "--shares", "2",
                   "--data-dir", str(up.data_dir), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] is True
    configured = {}
    for record in await read_log(up.admin_url):
        if record.subject == "horizon.in._admin.account":
            body = json.loads(record.data)
            configured[body["account"]] = body.get("tenants")
    # tenant add bound an account of the same name to each tenant
    assert (configured["acme"], configured["globex"]) == (["acme"], ["globex"])
    assert configured["research"] == ["acme", "globex"]
    done = horizon("node", "uncordon", "node-01", "--data-dir", str(up.data_dir))  # the node commands likewise
    assert done.returncode == 0, done.stderr
    # A tenant is no operator: its URL cannot configure anything.
    refused = horizon("account", "set", "research", "--nats", tenants["acme"], "--json")
    assert refused.returncode == 1


def test_metrics_under_accounts_answer_the_operator_and_a_scrape_credential_only(up: Up, tenants: dict[str, str]):
    """Issue 31: /metrics answered anyone who reached the port, its series naming tenants. Under
    accounts it takes ``Authorization: Bearer`` with the dashboard's token or the scrape credential
    ``DIR/auth/metrics-token`` (Prometheus's ``authorization: credentials_file``)."""
    import re
    import urllib.error
    import urllib.request

    base = re.search(r"Metrics \(Prometheus\): (http://127\.0\.0\.1:\d+/metrics)", up.err.read_text()).group(1)
    assert "metrics-token" in up.err.read_text()

    def scrape(token: str | None, scheme: str = "Bearer") -> tuple[int, str]:
        request = urllib.request.Request(base, headers={"Authorization": f"{scheme} {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    auth = up.data_dir / "auth"
    scrape_token, dashboard_token = ((auth / name).read_text().strip() for name in ("metrics-token", "dashboard-token"))
    assert stat.S_IMODE((auth / "metrics-token").stat().st_mode) == 0o600
    password = tenants["acme"].split(":")[2].split("@")[0]
    for token, scheme in ((None, "Bearer"), ("wrong", "Bearer"), (password, "Bearer"), (scrape_token, "Basic"),
                          (scrape_token + "x", "Bearer")):
        status, text = scrape(token, scheme)
        assert status == 401 and "horizon_" not in text, (token, status)
    for token in (scrape_token, dashboard_token):
        status, text = scrape(token)
        assert status == 200 and "horizon_consumer_lag" in text


def test_a_tenant_runs_the_slurm_commands_through_its_queries(up: Up, tenants: dict[str, str]):
    """Issue 31: a tenant's account has no JetStream, and squeue read each job's spec from the stream:
    as a tenant it ended in a traceback (ServiceUnavailableError: JetStream not enabled for account)
    once it had an array's pending tasks to group; scontrol show job could not show a job, scancel
    waited 10 s for an answer its feed had brought (named by the log's key). They work through the
    queries now; the operator's commands (sinfo, check, audit) say so in one line."""
    acme = clean_env(HORIZON_NATS_URL=tenants["acme"])
    done = horizon("submit", "--job-id", "sweep", "--array", "0-5", "--gpus", "2", "--", "sleep", "300", env=acme)
    assert done.returncode == 0, done.stderr
    try:
        deadline = time.monotonic() + 30
        while True:  # two tasks run (2 nodes x 2 GPUs), four wait: squeue groups those
            listed = horizon("squeue", env=acme)
            assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
            grouped = re.search(r"\b(\d+)_\[2-5\]", listed.stdout)  # the array's number (issue 34), its pending tasks
            if grouped:
                number = grouped.group(1)
                break
            assert time.monotonic() < deadline, listed.stdout
            time.sleep(0.3)
        fields = horizon("squeue", "-r", "-o", "%i %q %F %K", "-t", "PD", env=acme)
        assert fields.returncode == 0 and f"{number}_5 normal {number} 5" in fields.stdout, fields
        shown = horizon("scontrol", "show", "job", "sweep_5", env=acme)
        assert shown.returncode == 0 and f"ArrayJobId={number} ArrayTaskId=5" in shown.stdout, shown
        assert "JobState=PENDING" in shown.stdout
        history = horizon("sacct", "-j", "sweep_0", "--noheader", "-o", "JobID,State", env=acme)
        assert history.returncode == 0 and f"{number}_0" in history.stdout, history
        cancelled = horizon("scancel", "-v", "sweep_5", env=acme)
        assert cancelled.returncode == 0 and "Cancelled job sweep_5" in cancelled.stderr, cancelled
        for command, says in ((("sinfo",), "partitions is the operator's"), (("check",), "no JetStream"),
                              (("audit",), "no JetStream"), (("nodes",), "nodes is the operator's")):
            refused = horizon(*command, env=acme)
            assert refused.returncode == 1 and says in refused.stderr and "Traceback" not in refused.stderr, refused
            assert tenants["acme"].split("@")[0] not in refused.stderr  # never the password
    finally:
        horizon("cancel", "sweep", env=acme)
