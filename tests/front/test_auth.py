"""deploy/nats/auth.conf on a real nats-server: who may publish and read what (docs/reliability.md, Security).

Refusals come back in three ways, and each test asserts the one that applies:

* a tenant's account has no route to a subject it was not given (another tenant's inputs, any
  ``horizon.evt.>``): a request gets "no responders", a plain publish goes nowhere;
* a tenant's account has no JetStream: every ``$JS.API`` request is answered "JetStream not
  enabled for account" (10039), about an account that owns no stream;
* a user of the HORIZON account publishing outside its permissions: the server answers
  ``-ERR 'Permissions Violation for Publish to ...'``, which nats-py hands to the error callback
  (the publish itself raises nothing).

And in every case the log is read afterwards (as the operator) to show the message is not in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import PUBLISHERS, admin_subject, input_subject, job_key, tenant_view
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import LogError
from services.runtime.natsserver import NatsServer
from services.front.host.stack import Stack
from services.submission.intake import IntakeServer
from tests.e2e import read_log, wait_until

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
AUTH_CONF = ROOT / "deploy" / "nats" / "auth.conf"
# The part of the stack -> its user in auth.conf; the clock runs inside inventory.
PART_USER = {"submission": "submission", "scheduling": "scheduling", "placement": "placement",
             "preemption": "preemption", "inventory": "inventory", "projections": "projections", "agent": "agent",
             "clock": "inventory"}
SERVICE_USERS = ("submission", "scheduling", "placement", "preemption", "inventory", "agent", "projections")


def url(server: NatsServer, user: str) -> str:
    """The user's URL with auth.conf's development password (``dev-<user>-CHANGE-ME``)."""
    return f"nats://{user}:dev-{user}-CHANGE-ME@{server.host}:{server.port}"


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(store_dir=tmp_path / "js", port=0, config=AUTH_CONF)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def admin_log(auth_server: NatsServer) -> AsyncIterator[JetStreamLog]:
    """The operator's connection; it creates the streams, as `horizon up` or a first service would."""
    log = await JetStreamLog.open(url(auth_server, "admin"), name="test-admin")
    try:
        yield log
    finally:
        await log.close()


@dataclass
class Client:
    nc: Any
    errors: list[str] = field(default_factory=list)

    def refused(self, subject: str) -> bool:
        return any(f'permissions violation for publish to "{subject.lower()}"' in e.lower() for e in self.errors)


@pytest.fixture
async def connect_as(auth_server: NatsServer) -> AsyncIterator[Any]:
    clients: list[Client] = []

    async def make(user: str) -> Client:
        client = Client(None)

        async def on_error(exc: Exception) -> None:
            client.errors.append(str(exc))

        client.nc = await nats.connect(url(auth_server, user), error_cb=on_error, max_reconnect_attempts=0)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.nc.close()


@pytest.fixture
async def intake(auth_server: NatsServer) -> AsyncIterator[IntakeServer]:
    """The submission service's intake, as its user: the one door of tenants' inputs into the log
    (auth.conf imports horizon.intake.<tenant>.* into each tenant as horizon.in.<tenant>.*)."""
    nc = await nats.connect(url(auth_server, "submission"))
    server = IntakeServer(nc)
    task = asyncio.create_task(server.serve(asyncio.Event().wait()))
    await asyncio.sleep(0.05)
    await nc.flush()
    try:
        yield server
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await nc.close()


async def log_subjects(server: NatsServer) -> list[str]:
    return [r.subject for r in await read_log(url(server, "admin"))]


def submitted(job_id: str, tenant: str, **kw: Any) -> bytes:
    kw.setdefault("command", ["true"])  # an empty command is rejected
    return encode(c.JobSubmitted(id=job_id, job_id=job_id, tenant=tenant, resources=c.ResourceRequest(gpus=1), **kw))


async def test_wrong_password_is_refused(auth_server: NatsServer) -> None:
    with pytest.raises(Exception) as caught:
        await nats.connect(f"nats://alice:guess@{auth_server.host}:{auth_server.port}", max_reconnect_attempts=0,
                           allow_reconnect=False, connect_timeout=2)
    assert "authorization violation" in str(caught.value).lower()


async def test_a_tenant_puts_inputs_in_the_log_only_under_its_own_tenant(auth_server, admin_log, connect_as,
                                                                        intake) -> None:
    alice = await connect_as("alice")
    js = alice.nc.jetstream(timeout=2)
    ack = await js.publish("horizon.in.acme.submit", submitted("a-1", "acme"), headers={"Nats-Msg-Id": "a-1"})
    assert ack.stream == "HORIZON" and ack.seq == 1

    # Submitting as globex, or as an operator: no route out of acme's account for those subjects.
    for subject in ("horizon.in.globex.submit", "horizon.in.globex.cancel", "horizon.in._admin.node",
                    "horizon.in._admin.cancel"):
        with pytest.raises(nats.js.errors.NoStreamResponseError):  # nats-py's "no responders" for a js.publish
            await js.publish(subject, submitted("a-2", "globex"), headers={"Nats-Msg-Id": f"x-{subject}"})
        await alice.nc.publish(subject, submitted("a-3", "globex"))  # fire and forget: goes nowhere either
    await alice.nc.flush()
    assert await log_subjects(auth_server) == ["horizon.in.acme.submit"]


async def test_a_tenant_cannot_publish_a_decision(auth_server, admin_log, connect_as) -> None:
    alice = await connect_as("alice")
    forged = encode(c.JobScheduled(id="placement/JobScheduled/a-1/1", job_id="a-1", attempt=1, source="placement"))
    for subject in ("horizon.evt.placement.JobScheduled.a-1", "horizon.evt.submission.JobAccepted.a-1"):
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await alice.nc.jetstream(timeout=2).publish(subject, forged, headers={"Nats-Msg-Id": subject})
        await alice.nc.publish(subject, forged)
    await alice.nc.flush()
    assert await log_subjects(auth_server) == []


async def test_a_tenant_cannot_reach_the_jetstream_api(auth_server, admin_log, connect_as) -> None:
    await admin_log.publish("horizon.in.acme.submit", submitted("a-1", "acme"), msg_id="a-1")
    alice = await connect_as("alice")
    for api_subject in ("$JS.API.INFO", "$JS.API.STREAM.INFO.HORIZON", "$JS.API.STREAM.LIST",
                        "$JS.API.STREAM.DELETE.HORIZON", "$JS.API.STREAM.PURGE.HORIZON",
                        "$JS.API.STREAM.UPDATE.HORIZON", "$JS.API.STREAM.MSG.GET.HORIZON",
                        "$JS.API.STREAM.MSG.DELETE.HORIZON", "$JS.API.CONSUMER.CREATE.HORIZON"):
        reply = await alice.nc.request(api_subject, b"{}", timeout=2)
        error = json.loads(reply.data)["error"]
        assert (error["err_code"], error["description"]) == (10039, "JetStream not enabled for account"), api_subject
    with pytest.raises(nats.errors.NoRespondersError):  # direct get is no API call in acme's account at all
        await alice.nc.request("$JS.API.DIRECT.GET.HORIZON", b'{"seq": 1}', timeout=2)
    info = await admin_log.js.stream_info("HORIZON")
    assert info.state.messages == 1  # still there, untouched
    # Nothing published in HORIZON reaches acme's subscribers either.
    seen: list[str] = []

    async def on_msg(msg: Any) -> None:
        seen.append(msg.subject)

    await alice.nc.subscribe(">", cb=on_msg)
    await alice.nc.flush()
    await admin_log.publish("horizon.in.globex.submit", submitted("g-1", "globex"), msg_id="g-1")
    await asyncio.sleep(0.2)
    assert seen == []


async def test_each_service_publishes_only_its_own_events(auth_server, admin_log, connect_as) -> None:
    """Every event type of events/subjects.py PUBLISHERS: its publishers' users may put it in the log, no
    other user of the HORIZON account (the operator included) may."""
    clients = {user: await connect_as(user) for user in (*SERVICE_USERS, "admin")}
    allowed: list[str] = []
    refused: list[tuple[str, str]] = []
    for event_type, publishers in sorted(PUBLISHERS.items()):
        owners = {PART_USER[p] for p in publishers}
        for publisher in publishers:
            subject = f"horizon.evt.{publisher}.{event_type}.probe"
            ack = await clients[PART_USER[publisher]].nc.jetstream(timeout=2).publish(
                subject, b"{}", headers={"Nats-Msg-Id": subject})
            assert ack.seq > 0
            allowed.append(subject)
        subject = f"horizon.evt.{publishers[0]}.{event_type}.forged"
        for user, client in clients.items():
            if user not in owners:
                await client.nc.publish(subject, b"{}", reply=client.nc.new_inbox())
                refused.append((user, subject))
    for client in clients.values():
        await client.nc.flush()
    await asyncio.sleep(0.2)  # the -ERR lines arrive after the flush's PONG at the latest; give the callbacks a turn
    missing = [(user, subject) for user, subject in refused if not clients[user].refused(subject)]
    assert missing == []
    assert len(refused) > 5 * len(PUBLISHERS)
    assert sorted(await log_subjects(auth_server)) == sorted(allowed)


async def test_no_service_may_delete_purge_or_rewrite_the_log(auth_server, admin_log, connect_as) -> None:
    await admin_log.publish("horizon.in.acme.submit", submitted("a-1", "acme"), msg_id="a-1")
    rewrites = ("$JS.API.STREAM.DELETE.HORIZON", "$JS.API.STREAM.PURGE.HORIZON", "$JS.API.STREAM.UPDATE.HORIZON",
                "$JS.API.STREAM.MSG.DELETE.HORIZON", "$JS.API.STREAM.DELETE.HORIZON_DLQ",
                "$JS.API.STREAM.DELETE.HORIZON_SNAPSHOTS", "$JS.API.STREAM.PURGE.HORIZON_DLQ")
    # ... nor submit or command as a tenant or an operator: inputs come from those, through the intake
    # (the submission service's, which alone of the services stores them) or from the operator
    inputs = ("horizon.in.acme.submit", "horizon.in._admin.node")
    forbidden = {user: (*rewrites, *(inputs if user != "submission" else ())) for user in SERVICE_USERS}
    clients = {user: await connect_as(user) for user in SERVICE_USERS}
    answers: list[str] = []

    async def on_answer(msg: Any) -> None:
        answers.append(msg.subject)

    # ... nor take another service's leader lease (services/runtime/lease.py), nor drop the lease bucket.
    leases = {user: [f"$KV.HORIZON_LEASES.{other}" for other in SERVICE_USERS if other != user]
              + ["$JS.API.STREAM.DELETE.KV_HORIZON_LEASES", "$JS.API.STREAM.PURGE.KV_HORIZON_LEASES"]
              for user in SERVICE_USERS}
    for user, client in clients.items():
        inbox = client.nc.new_inbox()
        await client.nc.subscribe(inbox, cb=on_answer)
        for subject in (*forbidden[user], *leases[user]):
            await client.nc.publish(subject, b"{}", reply=inbox)
    for client in clients.values():
        await client.nc.flush()
    await asyncio.sleep(0.3)
    missing = [(user, subject) for user, client in clients.items() for subject in (*forbidden[user], *leases[user])
               if not client.refused(subject)]
    assert missing == []
    assert answers == []  # neither JetStream nor a stream answered any of them
    info = await admin_log.js.stream_info("HORIZON")
    assert (info.state.messages, info.state.first_seq) == (1, 1)
    assert sorted([s.config.name for s in await admin_log.js.streams_info()]) == ["HORIZON", "HORIZON_DLQ",
                                                                                  "HORIZON_SNAPSHOTS"]


@dataclass
class UserStack(Stack):
    """The stack with every part on its own connection, as its own user of auth.conf; each part also runs
    ``JetStreamLog.open``'s stream set-up (create=True) under that user, as `horizon service` does."""

    server: NatsServer | None = None

    async def _connect(self, name: str) -> Any:
        assert self.server is not None
        user = PART_USER[name.split("#", 1)[0]]  # "scheduling#2": another instance of scheduling
        return await JetStreamLog.open(url(self.server, user), name=f"horizon-{name}",
                                       settings=self.settings, create=True)


async def query_as(client: Client, view: str, request: dict[str, Any]) -> dict[str, Any]:
    reply = await client.nc.request(f"horizon.query.{view}", json.dumps(request).encode(), timeout=5)
    return json.loads(reply.data)  # type: ignore[no-any-return]


async def test_the_stack_runs_under_its_users_and_tenants_see_only_their_jobs(auth_server, admin_log, connect_as,
                                                                             tmp_path) -> None:
    stack = UserStack(url(auth_server, "admin"), tmp_path / "stack", nodes=local_nodes(2, gpus_per_node=2),
                      executor="sim", server=auth_server)
    await stack.start()
    try:
        alice, bob = await connect_as("alice"), await connect_as("bob")
        # Each tenant's account sees horizon.evt.> as its feed: the events about its own jobs.
        feeds: dict[str, list[dict[str, Any]]] = {"alice": [], "bob": []}
        for who, client in (("alice", alice), ("bob", bob)):
            async def on_event(msg: Any, who: str = who) -> None:
                feeds[who].append({**json.loads(msg.data), "subject": msg.subject})

            await client.nc.subscribe("horizon.evt.>", cb=on_event)
            await client.nc.flush()
        # alice submits the way `horizon submit` does (services/front/client/client.py publish_input).
        from services.front.client.client import publish_input

        # the operator maps each login to the Unix user its jobs run as (`horizon user map`, a hand-written
        # configuration's way; `horizon user add` under up --auth): nobody, for simulated jobs
        admin = await connect_as("admin")
        for tenant, name in (("acme", "alice"), ("globex", "bob")):
            await publish_input(admin.nc, admin_subject("user"),
                                c.UserConfigured(tenant=tenant, name=name, uid=65534, gid=65534), msg_id=f"user-{name}")

        await publish_input(alice.nc, input_subject("acme", "submit"),
                            c.JobSubmitted(id="a-1", job_id="a-1", tenant="acme", resources=c.ResourceRequest(gpus=1),
                                           sim_runtime_s=0.2), msg_id="a-1")
        await publish_input(bob.nc, input_subject("globex", "submit"),
                            c.JobSubmitted(id="g-1", job_id="g-1", tenant="globex", resources=c.ResourceRequest(gpus=1),
                                           sim_runtime_s=30), msg_id="g-1")
        # ... and follows her job through her tenant's view of the jobs projection.
        states: dict[str, str] = {}

        async def poll() -> None:
            for job_id, who in (("a-1", alice), ("g-1", bob)):
                job = (await query_as(who, "job", {"job_id": job_id}))["job"]
                states[job_id] = job["state"] if job else ""

        async def done() -> bool:
            await poll()
            return states.get("a-1") == "SUCCEEDED" and states.get("g-1") == "RUNNING"

        deadline = asyncio.get_running_loop().time() + 30
        while not await done():
            assert asyncio.get_running_loop().time() < deadline, f"states {states}; failed parts {stack.failed()}"
            await asyncio.sleep(0.1)
        assert stack.failed() == []

        # Each tenant sees its own jobs, and another tenant's job as unknown.
        assert [j["job_id"] for j in (await query_as(alice, "jobs", {}))["jobs"]] == ["a-1"]
        assert [j["job_id"] for j in (await query_as(bob, "jobs", {}))["jobs"]] == ["g-1"]
        other = await query_as(bob, "job", {"job_id": "a-1"})
        assert (other["job"], other["events"], other["attempts"]) == (None, [], [])
        assert "may list only its own jobs" in (await query_as(alice, "jobs", {"tenant": "globex"}))["error"]
        allocations = {who: json.dumps(await query_as(client, "allocations", {})) for who, client in
                       (("alice", alice), ("bob", bob))}
        assert '"g-1"' in allocations["bob"] and '"g-1"' not in allocations["alice"]
        assert "error" not in (await query_as(alice, "queue", {}))
        for view in ("decisions", "nodes", "usage", "priority", "config"):  # not given to tenants
            with pytest.raises(nats.errors.NoRespondersError):
                await query_as(alice, view, {})

        # alice cannot cancel bob's job: not on globex's subject (no route), and on her own subject
        # submission refuses a job that is not acme's.
        with pytest.raises(LogError, match="may publish only under its own tenant"):
            await publish_input(alice.nc, "horizon.in.globex.cancel",
                                c.JobCancelRequested(id="c-1", job_id="g-1", tenant="globex"), msg_id="c-1")
        seq = await publish_input(alice.nc, "horizon.in.acme.cancel",
                                  c.JobCancelRequested(id="c-2", job_id="g-1", tenant="acme"), msg_id="c-2")
        answers: list[dict[str, Any]] = []

        def answered() -> bool:  # as `horizon cancel` waits: its answer in the tenant's feed
            answers[:] = [e for e in feeds["alice"] if e.get("causation_id") == f"seq:{seq}"]
            return bool(answers)

        await wait_until(answered, 15, "the answer to alice's cancel in her feed")
        assert [a["type"] for a in answers] == ["RequestRejected"]
        assert "no job 'g-1' in tenant 'acme'" in answers[0]["reason"]
        await poll()
        assert states["g-1"] == "RUNNING"

        # The feeds: alice saw her job's story and her own refused request; bob his job only, not the
        # request alice made about it.
        await asyncio.sleep(0.2)
        # (a job's id in the log is its tenant's key, <tenant>:<id>, when it came through the intake)
        assert {(e["type"], tenant_view("acme", e["job_id"])) for e in feeds["alice"]} >= {
            ("JobAccepted", "a-1"), ("JobScheduled", "a-1"), ("JobStarted", "a-1"), ("JobSucceeded", "a-1")}
        assert {tenant_view("acme", e["job_id"]) for e in feeds["alice"] if e["type"] != "RequestRejected"} == {"a-1"}
        assert {tenant_view("globex", e["job_id"]) for e in feeds["bob"]} == {"g-1"}
        assert "RequestRejected" not in {e["type"] for e in feeds["bob"]}
        assert all(e["subject"] == f"horizon.evt.{e['subject'].split('.')[2]}.{e['type']}.{e['job_id']}"
                   for e in feeds["alice"] + feeds["bob"])

        # The CLI as alice, unchanged: submit gets its verdict, cancel its answer, both from her feed;
        # bob's job is not hers to cancel.
        async def horizon(*args: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "HORIZON_NATS_URL": url(auth_server, "alice"), "HORIZON_TENANT": "acme"}
            return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "services.front.cli.main", *args],
                                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

        done = await horizon("submit", "--job-id", "cli-1", "--gpus", "1", "--sim-runtime", "60", "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["state"] == "PENDING", done
        done = await horizon("cancel", "cli-1", "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["type"] in ("JobCancelled", "JobStopRequested"), done
        done = await horizon("cancel", "g-1")
        assert done.returncode == 1 and "no job 'g-1' in tenant 'acme'" in done.stderr, done
        done = await horizon("submit", "--tenant", "globex", "--job-id", "cli-2", "--gpus", "1", "--", "true")
        assert done.returncode == 1 and "may publish only under its own tenant" in done.stderr, done
        assert "Traceback" not in done.stderr
        # Validation (the submission instances' queue group): her own tenant's subject only.
        done = await horizon("submit", "--check", "--gpus", "1", "--", "true")
        assert done.returncode == 0 and "would be accepted" in done.stdout, done
        with pytest.raises(nats.errors.NoRespondersError):
            await alice.nc.request("horizon.validate.globex", b"{}", timeout=2)

        # The operator may what no tenant may: configure the cluster and act on any tenant's job.
        async def as_admin(*args: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "HORIZON_NATS_URL": url(auth_server, "admin")}
            return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "services.front.cli.main", *args],
                                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

        done = await as_admin("account", "set", "research", "--shares", "2", "--quota-gpus", "2", "--json")
        assert done.returncode == 0, done
        done = await as_admin("node", "cordon", "node-01", "--reason", "maintenance")
        assert done.returncode == 0, done
        # (the operator names a tenant's job by its key in the log, <tenant>:<id>)
        done = await as_admin("cancel", "--admin", job_key("globex", "g-1"), "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["type"] in ("JobCancelled", "JobStopRequested"), done
        await wait_until(lambda: any(e["type"] == "JobCancelled" and tenant_view("globex", e["job_id"]) == "g-1"
                                     for e in feeds["bob"]), 15,
                         "bob's job cancelled by the operator, in bob's feed")
        nodes = await as_admin("nodes", "--json")
        assert nodes.returncode == 0, nodes
        assert {n["node"]: n["state"] for n in json.loads(nodes.stdout)}["node-01"] == "cordoned", nodes.stdout

        # The log holds the story of a-1 told by the right services, and no input on globex's cancel subject.
        records = await read_log(url(auth_server, "admin"))
        story = [(r.subject.split(".")[2], json.loads(r.data)["type"]) for r in records
                 if r.subject.startswith("horizon.evt.") and json.loads(r.data).get("job_id") == job_key("acme", "a-1")]
        for step in [("submission", "JobAccepted"), ("placement", "JobScheduled"), ("agent", "JobStarted"),
                     ("agent", "JobSucceeded")]:
            assert step in story, story
        assert not any(r.subject == "horizon.in.globex.cancel" for r in records)
        admin_inputs = {r.subject for r in records if r.subject.startswith("horizon.in._admin.")}
        assert {"horizon.in._admin.account", "horizon.in._admin.node", "horizon.in._admin.cancel"} <= admin_inputs
        # No part ever stepped outside its permissions (what the tenants tried above had no route at all).
        assert auth_server.log_file is not None
        violations = [ln for ln in auth_server.log_file.read_text().splitlines() if "Violation" in ln]
        assert violations == []
    finally:
        await stack.stop()


async def test_horizon_service_connects_with_credentials(auth_server, admin_log, tmp_path) -> None:
    """`horizon service NAME --nats nats://user:password@host:port`, as a process; the password is not printed."""
    env = {**os.environ, "HORIZON_NATS_URL": url(auth_server, "preemption")}
    proc = subprocess.Popen([sys.executable, "-m", "services.front.cli.main", "service", "preemption",
                             "--data-dir", str(tmp_path / "svc")], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stderr is not None
        lines: list[bytes] = []
        while not any(b"running against" in line for line in lines):
            line = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 30)
            assert line, b"".join(lines).decode()  # it exited
            lines.append(line)
        assert b"preemption running against nats://preemption:***@" in lines[-1], lines
        await asyncio.sleep(1.0)
        assert proc.poll() is None, "it stopped on its own"  # connected, caught up, running under its user
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _out, err = await asyncio.to_thread(proc.communicate, timeout=15)
    assert b"CHANGE-ME" not in b"".join(lines) + err
    assert b"Violation" not in auth_server.log_file.read_bytes()  # type: ignore[union-attr]


@pytest.mark.parametrize("service", ["submission", "scheduling", "placement", "preemption", "inventory"])
async def test_a_service_keeps_and_prunes_its_snapshots_under_its_user(auth_server, admin_log, service) -> None:
    """The snapshot path (services/runtime/snapshots.py) needs more of the JetStream API than reading: chunks
    and manifest, the latest manifest, pruning. Under its user: save twice, load the newest, the first pruned.
    Every decision service takes snapshots."""
    log = await JetStreamLog.open(url(auth_server, service), name=f"test-{service}")
    try:
        first, second = os.urandom(700_000), os.urandom(300_000)
        await log.save_snapshot(service, 0, first)
        await log.save_snapshot(service, 0, second)
        assert await log.load_snapshot(service) == (0, second)
        info = await admin_log.js.stream_info("HORIZON_SNAPSHOTS")
        assert info.state.messages == 2  # the second's one chunk and manifest: the first's two chunks and manifest pruned
    finally:
        await log.close()


def make_certs(where: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it (deploy/nats/TLS.md)."""
    ca_key, ca, key, csr, cert, ext = (where / n for n in ("ca.key", "ca.pem", "server.key", "server.csr",
                                                           "server.pem", "san.ext"))
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for args in (["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=Horizon test CA"],
                 ["req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost"],
                 ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                  "-days", "1", "-extfile", ext]):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
    return ca, cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
async def test_tls_with_the_same_accounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auth.conf plus a tls block (deploy/nats/TLS.md): a client that trusts the CA (SSL_CERT_FILE, read by the
    default SSL context nats-py makes for tls:// URLs) connects with its user; one that does not is refused."""
    ca, cert, key = make_certs(tmp_path)
    conf = tmp_path / "tls.conf"
    shutil.copy(AUTH_CONF, tmp_path / "auth.conf")  # nats-server includes relative to the including file
    conf.write_text(f'include "auth.conf"\ntls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n  timeout: 2\n}}\n')
    server = NatsServer(store_dir=tmp_path / "js", port=0, config=conf).start()
    try:
        tls_url = f"tls://admin:dev-admin-CHANGE-ME@localhost:{server.port}"
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(Exception) as caught:  # the system's trust store does not know our CA
            await nats.connect(tls_url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
        assert "certificate verify failed" in repr(caught.value) or "CERTIFICATE_VERIFY_FAILED" in repr(caught.value)

        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        log = await JetStreamLog.open(tls_url, name="test-tls")
        door = await nats.connect(f"tls://submission:dev-submission-CHANGE-ME@localhost:{server.port}")
        intake = asyncio.create_task(IntakeServer(door).serve(asyncio.Event().wait()))
        await asyncio.sleep(0.05)
        await door.flush()
        try:
            alice = await nats.connect(f"tls://alice:dev-alice-CHANGE-ME@localhost:{server.port}")
            ack = await alice.jetstream(timeout=2).publish("horizon.in.acme.submit", submitted("t-1", "acme"),
                                                           headers={"Nats-Msg-Id": "t-1"})
            assert ack.seq == 1
            await alice.close()
            assert [r.subject async for batch in log.read(1) for r in batch] == ["horizon.in.acme.submit"]
        finally:
            intake.cancel()
            await door.close()
            await log.close()
    finally:
        server.stop()
