"""The tenant boundary, tried as a hostile tenant would, under `horizon up --auth` with two tenants
(issue 17; docs/tenants.md). One `up --auth --executor sim` for the module; acme is the hostile
tenant, globex the one it tries to hurt. Each check goes through a tenant's own connection (the URL
`horizon tenant add NAME --json` prints), as a client in any language would.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from events import catalogue as c
from events.codec import encode
from tests.front.test_cli_up import free_port, interrupt

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(300)


class AuthUp:
    """`horizon up --auth --executor sim` and its two tenants."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.err = open(data_dir.parent / "up.err", "a")
        self.proc = subprocess.Popen([*HORIZON, "up", "--auth", "--executor", "sim", "--port", str(self.port),
                                      "--data-dir", str(data_dir)], stdout=subprocess.PIPE, stderr=self.err,
                                     text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        assert f"127.0.0.1:{self.port}" in first, (first, self.log())
        self.urls = {name: json.loads(self.cli("tenant", "add", name, "--json", "--data-dir", str(data_dir),
                                               ok=True).stdout)["nats_url"] for name in ("acme", "globex")}

    def log(self) -> str:
        return (self.data_dir.parent / "up.err").read_text() + (self.data_dir / "horizon.log").read_text(
            errors="replace") if (self.data_dir / "horizon.log").exists() else ""

    def cli(self, *args: str, tenant: str | None = None, ok: bool = False) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HORIZON_")}
        if tenant is not None:
            env["HORIZON_NATS_URL"] = self.urls[tenant]
        done = subprocess.run([*HORIZON, *args], capture_output=True, text=True, timeout=120, env=env)
        if ok:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        interrupt(self.proc)
        self.err.close()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthUp]:
    stack = AuthUp(tmp_path_factory.mktemp("auth") / "data")
    try:
        yield stack
    finally:
        stack.stop()


class Tenant:
    """A tenant's own connection: its inputs (requests answered by the PubAck) and its feed."""

    def __init__(self, name: str, nc: Any) -> None:
        self.name, self.nc = name, nc
        self.events: list[dict[str, Any]] = []
        self.sub: Any = None

    @classmethod
    async def connect(cls, up: AuthUp, name: str) -> Tenant:
        tenant = cls(name, await nats.connect(up.urls[name]))

        async def keep(msg: Any) -> None:
            tenant.events.append(json.loads(msg.data))

        tenant.sub = await tenant.nc.subscribe("horizon.evt.>", cb=keep)
        await tenant.nc.flush()
        return tenant

    async def send(self, verb: str, data: bytes, headers: dict[str, str] | None = None,
                   subject: str | None = None) -> dict[str, Any]:
        reply = await self.nc.request(subject or f"horizon.in.{self.name}.{verb}", data, headers=headers, timeout=10)
        return json.loads(reply.data)  # type: ignore[no-any-return]

    async def submit(self, job_id: str, headers: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
        kw.setdefault("sim_runtime_s", 0.2)
        kw.setdefault("tenant", self.name)
        event = c.JobSubmitted(job_id=job_id, ts=time.time(), **kw)
        return await self.send("submit", encode(event), {"Nats-Msg-Id": job_id, **(headers or {})})

    def caused_by(self, seq: int) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("causation_id") == f"seq:{seq}"]

    async def wait(self, what: Any, timeout: float, label: str) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for event in self.events:
                if what(event):
                    return event
            await asyncio.sleep(0.02)
        raise AssertionError(f"{self.name}: no {label} within {timeout} s; its feed: {self.events[-5:]}")

    async def close(self) -> None:
        await self.nc.close()


async def scheduled_within(tenant: Tenant, job_id: str, timeout: float) -> float:
    """Submit ``job_id`` and return how long until its JobScheduled reached the tenant's feed."""
    start = time.monotonic()
    ack = await tenant.submit(job_id)
    assert "error" not in ack, ack
    key = f"{tenant.name}:{job_id}"
    await tenant.wait(lambda e: e.get("type") == "JobScheduled" and e.get("job_id") == key, timeout,
                      f"JobScheduled of {job_id}")
    return time.monotonic() - start


async def test_squatted_decision_ids_and_job_ids_hurt_no_one(up):
    acme, globex = await Tenant.connect(up, "acme"), await Tenant.connect(up, "globex")
    try:
        await scheduled_within(globex, "warm-up", 10)
        # 200 of placement's (and scheduling's, submission's) own deterministic ids, and globex's next job ids
        squats = [f"placement/PlacementCycleCompleted/{n}" for n in range(1, 201)]
        squats += [f"scheduling/SchedulingCycleCompleted/{n}" for n in range(1, 101)]
        squats += ["submission/JobAccepted/globex:eval-7", "eval-7", "in/globex/eval-7", "g-next"]
        acks = await asyncio.gather(*(acme.send("submit", b"{}", {"Nats-Msg-Id": squat}) for squat in squats))
        assert all("error" not in a and not a.get("duplicate") for a in acks), acks[:3]
        assert await scheduled_within(globex, "g-next", 10) < 2.0
        # acme takes the id first with a real job, then globex submits the same id: both are accepted and run
        await acme.submit("eval-7", {"Nats-Msg-Id": "acme-eval-7"})  # its own squat holds "eval-7" in acme's namespace
        done = up.cli("submit", "--json", "--job-id", "eval-7", "--sim-runtime", "0.2", "--", "true", tenant="globex")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["job_id"] == "eval-7"
        await globex.wait(lambda e: e.get("type") == "JobSucceeded" and e.get("job_id") == "globex:eval-7", 20,
                          "globex's eval-7 succeeding")
        await acme.wait(lambda e: e.get("type") == "JobSucceeded" and e.get("job_id") == "acme:eval-7", 20,
                        "acme's eval-7 succeeding")
        assert not [e for e in globex.events if str(e.get("job_id", "")).startswith("acme:")]
    finally:
        await acme.close()
        await globex.close()


async def test_never_committed_atomic_batches_stop_no_service(up):
    acme, globex = await Tenant.connect(up, "acme"), await Tenant.connect(up, "globex")
    try:
        seqs = []
        for n in range(60):
            ack = await acme.send("submit", encode(c.JobSubmitted(job_id=f"batch-{n}", tenant="acme", sim_runtime_s=1)),
                                  {"Nats-Batch-Id": f"b{n}", "Nats-Batch-Sequence": "1", "Nats-Msg-Id": f"batch-{n}"})
            seqs.append(ack["seq"])
        for n in range(5):  # and some without waiting for an answer, as a publisher that never commits would
            await acme.nc.publish("horizon.in.acme.submit", b"{}", headers={"Nats-Batch-Id": f"q{n}",
                                                                            "Nats-Batch-Sequence": "1"})
        assert await scheduled_within(globex, "after-batches", 10) < 2.0
        assert up.alive()
        # each opened batch was answered to its sender: the header is refused, nothing of it runs
        verdict = await acme.wait(lambda e: e.get("causation_id") == f"seq:{seqs[-1]}", 10, "the batch's verdict")
        assert verdict["type"] == "InputRejected" and "Nats-Batch-Id" in verdict["reason"]
        assert verdict["path"] == "headers"
        done = up.cli("jobs", "--json", tenant="acme", ok=True)
        assert not [r for r in json.loads(done.stdout) if r["job_id"].startswith("batch-")]
    finally:
        await acme.close()
        await globex.close()


def test_an_account_of_another_tenant_is_rejected_naming_it(up):
    done = up.cli("submit", "--json", "--account", "globex", "--priority-class", "low", "--sim-runtime", "1",
                  "--", "true", tenant="acme")
    assert done.returncode != 0
    assert "'globex'" in done.stderr and "not open to tenant 'acme'" in done.stderr
    assert json.loads(done.stdout)["state"] == "REJECTED"
    own = up.cli("submit", "--json", "--account", "acme", "--sim-runtime", "0.2", "--", "true", tenant="acme")
    assert own.returncode == 0, own.stderr


def _neutral(text: str, *ids: str) -> str:
    for job_id in ids:
        text = text.replace(job_id, "<id>")
    return re.sub(r"\d+(\.\d+)?", "<n>", text)


async def test_nothing_tells_a_tenant_whether_another_tenants_job_exists(up):
    acme, globex = await Tenant.connect(up, "acme"), await Tenant.connect(up, "globex")
    try:
        await globex.submit("g-real", sim_runtime_s=0.3)
        await globex.wait(lambda e: e.get("type") == "JobSucceeded" and e.get("job_id") == "globex:g-real", 20,
                          "g-real succeeding")
        # dependencies: on globex's real job and on a job nobody has
        for job_id, dep in (("dep-real", "g-real"), ("dep-none", "g-none")):
            await acme.submit(job_id, dependencies=[c.Dependency(job_id=dep, kind="after-ok")])
        await asyncio.sleep(1.0)
        rows = {r["job_id"]: r for r in json.loads(up.cli("queue", "--json", "--why", tenant="acme", ok=True).stdout)}
        assert rows["dep-real"]["state"] == rows["dep-none"]["state"] == "PENDING"
        assert rows["dep-none"]["why"]["why"] == "waiting for g-none: not submitted yet"  # by acme's own ids
        real = _neutral(json.dumps({k: v for k, v in rows["dep-real"].items() if k != "job_id"}), "dep-real", "g-real")
        none = _neutral(json.dumps({k: v for k, v in rows["dep-none"].items() if k != "job_id"}), "dep-none", "g-none")
        assert real == none
        shown = [_neutral(up.cli("show", job_id, tenant="acme", ok=True).stdout, job_id, dep)
                 for job_id, dep in (("dep-real", "g-real"), ("dep-none", "g-none"))]
        assert shown[0] == shown[1]
        # the Msg-Id globex's job was published with, and one nobody used: the same kind of ack
        acks = [await acme.send("cancel", encode(c.JobCancelRequested(job_id=j, tenant="acme")), {"Nats-Msg-Id": m})
                for j, m in (("g-real", "g-real"), ("g-none", "g-none"))]
        assert [sorted(a) for a in acks] == [["seq", "stream"], ["seq", "stream"]]
        answers = [await acme.wait(lambda e, s=a["seq"]: e.get("causation_id") == f"seq:{s}", 10, "cancel answer")
                   for a in acks]
        assert [a["type"] for a in answers] == ["RequestRejected", "RequestRejected"]
        assert _neutral(answers[0]["reason"], "g-real") == _neutral(answers[1]["reason"], "g-none")
        # a body naming globex, sent on acme's subject: answered to acme; globex sees nothing of it
        before = len(json.loads(up.cli("jobs", "--json", tenant="globex", ok=True).stdout))
        heard = len(globex.events)
        ack = await acme.submit("forged", tenant="globex")
        verdict = await acme.wait(lambda e: e.get("causation_id") == f"seq:{ack['seq']}", 10, "forged's verdict")
        assert verdict["type"] == "JobRejected" and verdict["field"] == "tenant" and verdict["tenant"] == "acme"
        await asyncio.sleep(0.5)
        assert len(json.loads(up.cli("jobs", "--json", tenant="globex", ok=True).stdout)) == before
        assert [e for e in globex.events[heard:] if "forged" in json.dumps(e)] == []
        # globex's jobs are not acme's to see
        assert up.cli("show", "g-real", tenant="acme").returncode != 0
    finally:
        await acme.close()
        await globex.close()


async def test_every_malformed_input_of_the_fuzz_corpus_gets_a_verdict_on_the_senders_feed(up):
    from tests.property.test_fuzz_inputs import fuzzed_batch

    acme = await Tenant.connect(up, "acme")
    try:
        corpus = fuzzed_batch(100) + fuzzed_batch(100, typed=True)
        sent = []
        for i, (subject, data) in enumerate(corpus):
            parts = subject.split(".")
            if parts[2] == "_admin":
                continue  # an operator's subject: a tenant has no door to it
            ack = await acme.send(parts[3], data, {"Nats-Msg-Id": f"fuzz-{i}"})
            assert "error" not in ack, (subject, ack)
            sent.append((ack["seq"], subject, data))
        assert len(sent) > 100
        deadline = time.monotonic() + 60
        missing = sent
        while missing and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            missing = [s for s in sent if not acme.caused_by(s[0])]
        assert missing == [], missing[:3]
        kinds: dict[str, int] = {}
        for seq, _, _ in sent:
            for event in acme.caused_by(seq):
                kinds[event["type"]] = kinds.get(event["type"], 0) + 1
                assert event["type"] != "InputRejected" or event["reason"]
        assert kinds.get("InputRejected", 0) > 0, kinds
        print(f"{len(sent)} fuzzed inputs, every one answered on acme's feed: {kinds}")
        # the CLI says so too: a rejected submission exits non-zero with its reason
        done = up.cli("submit", "--json", "--gpus", "99", "--", "true", tenant="acme")
        assert done.returncode != 0 and "rejected" in done.stderr
        assert up.alive()
    finally:
        await acme.close()


@pytest.mark.slow  # 20,000 submissions (~35 s): run with -m slow, as docs/benchmarks.md lists
async def test_a_tenant_lists_twenty_thousand_jobs(up):
    acme = await Tenant.connect(up, "acme")
    n = 20_000
    # past a tenant's default limits (1,000 inputs at once, 100 a second, 10,000 waiting jobs): lifted
    # for acme while it sends them (docs/tenants.md, Limits and fairness)
    data = ("--data-dir", str(up.data_dir))
    up.cli("tenant", "set", "acme", "--max-inputs-per-s", "0", "--max-pending-jobs", "0", *data, ok=True)
    try:
        start = time.monotonic()
        for first in range(0, n, 500):
            acks = await asyncio.gather(*(
                acme.send("submit", encode(c.JobSubmitted(job_id=f"many-{i}", tenant="acme", sim_runtime_s=3600,
                                                         command=["true"])), {"Nats-Msg-Id": f"many-{i}"})
                for i in range(first, min(n, first + 500))))
            assert all("error" not in a for a in acks), acks[:2]
        submitted = time.monotonic() - start
        deadline = time.monotonic() + 180
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            done = up.cli("jobs", "--json", tenant="acme", ok=True)
            rows = [r for r in json.loads(done.stdout) if r["job_id"].startswith("many-")]
            if len(rows) == n:
                break
            await asyncio.sleep(2)
        assert len(rows) == n
        assert len({r["job_id"] for r in rows}) == n and all(r["state"] for r in rows)
        print(f"{n} jobs submitted through the intake in {submitted:.1f} s; listed in full by horizon jobs --json")
    finally:
        up.cli("tenant", "set", "acme", *data, ok=True)
        await acme.close()
