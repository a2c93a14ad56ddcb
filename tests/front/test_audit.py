"""``horizon audit``: a mixed workload's log, written into a real nats-server's stream, is reproduced
decision by decision; a forged, a tampered or a disguised decision is caught, and only it.

The log comes from the simulator (the five cores at virtual time, in process), so these tests
audit with ``--virtual-time``; one test audits a live stack's log with the defaults of ``horizon up``.
The 5,000-job run of the issue is marked ``slow`` (run it with ``pytest -m slow tests/front/test_audit.py -s``;
its figures are in docs/benchmarks.md).

The hash seed: the preemption core sums the costs of a victim set in the set's iteration order
(``PreemptionCore._set_cost``), which depends on ``PYTHONHASHSEED``, so two equally cheap victim sets
can compare differently in two processes (docs/audit.md, known limits). Until that is fixed, a log
audited by another process is generated, and audited, under one pinned seed (``PINNED``); the
in-process audits share the seed of the process that simulated.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pickle
import random
import socket
import subprocess
import sys
import time
from typing import Any

import msgspec
import nats
import pytest

from events import catalogue as c
from events.codec import decode, encode
from events.subjects import event_subject
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.domain.protocol import Record
from services.runtime.replay import audit
from events.subjects import DECISION_SERVICES
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from tests.e2e import job_json, publish_all, read_log, wait_until

pytestmark = pytest.mark.timeout(300)

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
PINNED = {**os.environ, "PYTHONHASHSEED": "0"}
SETTINGS = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=8)  # audit's defaults
CONFIG = [c.AccountConfigured(account="a", shares=2.0), c.AccountConfigured(account="b", shares=1.0)]


def mixed_workload(n: int, seed: int = 11) -> list[SimJob]:
    """Priorities (critical ones preempt), gangs of whole nodes, arrays, dependencies, failures with
    restarts, scheduling timeouts; about 0.8 of 16 x 8 GPUs offered, so queues form and backfill."""
    rng = random.Random(seed)
    jobs: list[SimJob] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(1 / 28.0)
        run = float(rng.choice([30, 60, 120, 300, 600, 1800]))
        kw: dict[str, Any] = {
            "priority_class": rng.choices(["critical", "high", "normal", "low", "scavenger"], [3, 10, 50, 25, 12])[0],
            "account": rng.choice(["a", "b", "c"]), "user": rng.choice(["u1", "u2"]),
        }
        if rng.random() < 0.08:
            k = rng.choice([2, 3, 4])
            kw.update(gpus=8 * k, nodes=k)
        else:
            kw.update(gpus=rng.choice([1, 1, 2, 4, 8]))
        if rng.random() < 0.05:
            kw.update(array=f"0-{rng.randint(1, 5)}%2")
        if jobs and rng.random() < 0.06:
            dep = rng.choice(jobs[-30:]).job_id
            kw.update(dependencies=((rng.choice(["after-ok", "after-any", "after-not-ok"]), dep),))
        if rng.random() < 0.07:
            kw.update(fail_attempts=rng.choice([1, 2, 5]), restart_policy="on-failure", max_retries=2)
        if rng.random() < 0.05:
            kw.update(scheduling_timeout_s=rng.choice([30.0, 60.0, 600.0]))
        jobs.append(SimJob(f"j{i:05d}", round(t, 1), run, run * rng.choice([1.0, 1.5, 2.0, 4.0]), **kw))
    return jobs


@functools.lru_cache(maxsize=2)
def simulated_log(n: int) -> tuple[Record, ...]:
    bus = InProcessBus(make_cores(SETTINGS), keep_records=True)
    asyncio.run(simulate(mixed_workload(n), local_nodes(16, gpus_per_node=8, prefix="n"), SETTINGS, bus,
                         config=CONFIG))
    return tuple(bus.records)


@pytest.fixture(scope="session")
def pinned_log(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``simulated_log(n)`` made by a process with the pinned hash seed (the one the CLI runs with)."""
    directory = tmp_path_factory.mktemp("audit-logs")

    def make(n: int) -> tuple[Record, ...]:
        path = directory / f"log-{n}.pickle"
        if not path.exists():
            subprocess.run([sys.executable, "-m", "tests.front.test_audit", str(n), str(path)], env=PINNED, check=True,
                           timeout=1800)
        return tuple(pickle.loads(path.read_bytes()))

    return make


async def write_log(url: str, records: tuple[Record, ...]) -> None:
    """The records into the server's empty stream, at the same sequences (each under its event id)."""
    log = await JetStreamLog.open(url, name="test-writer")
    try:
        items = [Outgoing(r.subject, r.data, decode(r.data).id) for r in records]
        acks = []
        for i in range(0, len(items), 4000):
            acks += await log.publish_many(items[i:i + 4000])
        assert [a.seq for a in acks] == [r.seq for r in records] and not any(a.duplicate for a in acks)
    finally:
        await log.close()


async def horizon(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(subprocess.run, [*HORIZON, *args], capture_output=True, text=True,
                                   timeout=timeout, env=PINNED)


async def audit_json(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    out = await horizon("audit", "--nats", url, "--json", *args)
    assert "Traceback" not in out.stderr, out.stderr
    try:
        return out.returncode, json.loads(out.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {out.returncode}): {out.stdout[:500]} {out.stderr[:500]}") from None


async def publish(url: str, subject: str, body: dict[str, Any] | bytes, msg_id: str) -> int:
    nc = await nats.connect(url)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        ack = await nc.jetstream().publish(subject, data, headers={"Nats-Msg-Id": msg_id})
        return int(ack.seq)
    finally:
        await nc.close()


def service_records(records: tuple[Record, ...]) -> int:
    return sum(1 for r in records if r.subject.split(".")[1:3] in (["evt", s] for s in DECISION_SERVICES))


def events(records: tuple[Record, ...]) -> list[c.Event]:
    return [decode(r.data) for r in records]


# --------------------------------------------------------------------------- the acceptance, at 500 jobs


async def test_a_mixed_workload_is_reproduced_and_a_forged_then_a_tampered_decision_are_caught(nats_server,
                                                                                               pinned_log):
    records = await asyncio.to_thread(pinned_log, 500)
    evs = events(records)
    kinds = {e.event_type for e in evs}
    # the workload is what it says: preemption, backfill, gangs, arrays, dependencies, restarts, timeouts
    assert {"PreemptionRequested", "JobPreempted", "JobRequeued", "JobFailed", "JobDependencyNeverSatisfied",
            "JobUnschedulable", "PlacementBlocked"} <= kinds
    scheduled = [e for e in evs if isinstance(e, c.JobScheduled)]
    assert any(e.backfilled for e in scheduled) and any(len(e.allocations) > 1 for e in scheduled)
    assert any(isinstance(e, c.JobAccepted) and e.spec.array for e in evs)
    assert any(isinstance(e, c.JobAccepted) and e.spec.priority_class == "critical" for e in evs)
    await write_log(nats_server.url, records)

    code, body = await audit_json(nats_server.url, "--virtual-time")
    assert code == 0 and body["mismatches"] == []
    assert body["decisions"] == body["reproduced"] == service_records(records) > 2000
    assert body["config"] == {"policy": "multifactor", "backfill_mode": "easy", "virtual_time": True}
    assert body["hint"] is None and body["services"]["preemption"]["reproduced"] > 0

    # A client publishes a JobScheduled of its own under placement's subject, with a made-up allocation
    # and a plausible basis in the middle of the log.
    victim = next(e for e in evs if isinstance(e, c.JobAccepted)).job_id
    forged = {"type": "JobScheduled", "id": f"placement/JobScheduled/{victim}/7", "ts": 1.0, "source": "placement",
              "correlation_id": victim, "job_id": victim, "attempt": 7, "basis_seq": len(records) // 2,
              "allocations": [{"node": "n-00", "device_ids": ["gpu0", "gpu1"], "cpus_milli": 1000,
                               "memory_bytes": 1048576}]}
    forged_seq = await publish(nats_server.url, f"horizon.evt.placement.JobScheduled.{victim}", forged, "forged-1")
    code, after = await audit_json(nats_server.url, "--virtual-time")
    assert code != 0
    assert after["decisions"] == body["decisions"] + 1 and after["reproduced"] == body["reproduced"]
    [m] = after["mismatches"]
    assert (m["seq"], m["service"], m["type"], m["job"], m["kind"]) == (forged_seq, "placement", "JobScheduled",
                                                                        victim, "not-decided")
    assert m["recorded"]["allocations"][0]["device_ids"] == ["gpu0", "gpu1"] and m["replayed"] is None
    assert m["reason"].startswith("not decided by replay")

    # The same id again with a changed allocation (a tampered copy; another Nats-Msg-Id gets it stored).
    real = next(r for r in records if decode(r.data).event_type == "JobScheduled"
                and len(decode(r.data).allocations) == 1)
    original = json.loads(real.data)
    node = "n-15" if original["allocations"][0]["node"] != "n-15" else "n-14"
    tampered = dict(original, allocations=[dict(original["allocations"][0], node=node)])
    tampered_seq = await publish(nats_server.url, real.subject, tampered, "tampered-1")
    code, last = await audit_json(nats_server.url, "--virtual-time", "--from", str(tampered_seq))
    assert code != 0 and last["decisions"] == 1 and last["reproduced"] == 0
    [m] = last["mismatches"]
    assert (m["seq"], m["kind"], m["id"], m["basis_seq"]) == (tampered_seq, "different", original["id"],
                                                              original["basis_seq"])
    assert m["differs"] == ["allocations"] and m["replayed"] == original
    assert f"a second version of the decision at seq {real.seq}" in m["reason"]

    # One job's story: the forged decision is marked, the rest reproduced.
    out = await horizon("audit", "--nats", nats_server.url, "--virtual-time", "--job", victim)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    lines = out.stdout.splitlines()
    assert any(f"{forged_seq}" in line and "NOT REPRODUCED" in line and "scheduled (attempt 7" in line
               for line in lines), out.stdout
    assert any("accepted:" in line and "[reproduced]" in line for line in lines)
    assert any("submitted by" in line and "[input]" in line for line in lines)


async def test_a_jobs_story_tells_why_it_waited_ran_where_it_ran_and_was_preempted(nats_server, pinned_log):
    records = await asyncio.to_thread(pinned_log, 500)
    evs = events(records)
    pre = next(e for e in evs if isinstance(e, c.JobPreempted) and "_" not in e.job_id)  # not an array's task
    await write_log(nats_server.url, records)
    code, body = await audit_json(nats_server.url, "--virtual-time", "--job", pre.job_id)
    assert code == 0 and body["mismatches"] == [] and body["decisions"] == body["reproduced"] > 0
    story = body["story"]
    texts = [line["text"] for line in story]
    assert texts[0].startswith("submitted by") and texts[1].startswith("accepted:")
    assert any(t.startswith("cycle ") and "candidate" in t for t in texts)
    assert any(t.startswith("scheduled (attempt 1") for t in texts)
    assert any(t.startswith("preemption requested (for ") for t in texts)
    assert any(t.startswith(f"preempted (attempt {pre.attempt}) for {pre.for_job}") for t in texts)
    assert any(t.startswith(f"requeued after attempt {pre.attempt}") for t in texts)
    decisions = [line for line in story if line["type"] not in ("JobSubmitted", "JobStarted", "JobPreempted",
                                                                "JobSucceeded", "JobFailed")]
    assert decisions and all(line["verdict"] == "reproduced" for line in decisions)
    assert {line["verdict"] for line in story} <= {"reproduced", "input", "report (agent)"}

    # The preemptor's story names the victims it made room with.
    code, body = await audit_json(nats_server.url, "--virtual-time", "--job", pre.for_job)
    assert code == 0
    assert any(line["text"].startswith(f"preempting {pre.job_id}") for line in body["story"])

    # A blocked job: per-filter reasons, and a reservation for some
    blocked = [e for e in evs if isinstance(e, c.PlacementBlocked) and e.reserved_nodes]
    code, body = await audit_json(nats_server.url, "--virtual-time", "--job", blocked[0].job_id)
    assert code == 0
    texts = [line["text"] for line in body["story"]]
    assert any(t.startswith("blocked in cycle") and "reservation: " in t for t in texts)
    assert any(t.startswith("blocked in cycle") and "too few free GPUs" in t for t in texts)

    out = await horizon("audit", "--nats", nats_server.url, "--virtual-time", "--job", "no-such-job")
    assert out.returncode == 1 and "no job no-such-job in the log" in out.stderr and "Traceback" not in out.stderr


# --------------------------------------------------------------------------- disguises, in process


def _forged(records: tuple[Record, ...], subject: str, event: c.Event | bytes) -> list[Record]:
    seq = records[-1].seq + 1
    data = event if isinstance(event, bytes) else encode(event)
    return [*records, Record(seq, subject, data, records[-1].time)]


def test_decisions_in_disguise_are_each_caught_once():
    records = simulated_log(500)
    cores = lambda: make_cores(SETTINGS)  # noqa: E731 - fresh cores for every audit
    end = records[-1].seq
    job = next(decode(r.data) for r in records if decode(r.data).event_type == "JobAccepted").job_id
    made_up = c.JobScheduled(id=f"placement/JobScheduled/{job}/9", source="placement", correlation_id=job,
                             job_id=job, attempt=9, basis_seq=end,
                             allocations=[c.NodeAllocation(node="n-01", device_ids=["gpu3"])])
    real = next(r for r in records if decode(r.data).event_type == "PlacementBlocked")
    cases = {
        # a decision type on an agent's subject: every service folds it all the same
        "wrong-publisher": _forged(records, f"horizon.evt.agent.JobScheduled.{job}",
                                   msgspec.structs.replace(made_up, source="agent/n-01", basis_seq=0)),
        # a report that claims to come from a decision service
        "wrong-publisher ": _forged(records, f"horizon.evt.agent.JobSucceeded.{job}",
                                    c.JobSucceeded(id="x", source="submission", correlation_id=job, job_id=job,
                                                   attempt=1)),
        "no-basis": _forged(records, event_subject("placement", made_up),
                            msgspec.structs.replace(made_up, basis_seq=0)),
        "basis-not-before": _forged(records, event_subject("placement", made_up),
                                    msgspec.structs.replace(made_up, basis_seq=end + 5)),
        "undecodable": _forged(records, f"horizon.evt.placement.JobScheduled.{job}", b"{not json"),
        "duplicate": _forged(records, real.subject, real.data),
        "not-decided": _forged(records, event_subject("placement", made_up), made_up),
        "bytes": _forged(records, real.subject, real.data.replace(b'"v":1,', b'"v":1,"extra":true,', 1)),
    }
    for kind, log in cases.items():
        report = audit(log, cores(), first=end + 1)
        assert [(m["seq"], m["kind"]) for m in report.mismatches] == [(end + 1, kind.strip())], (kind, report.mismatches)
        assert report.decisions == 1 and report.reproduced == 0
    # the same forged decision, audited with the whole log: still only itself
    report = audit(cases["not-decided"], cores())
    assert [m["seq"] for m in report.mismatches] == [end + 1]
    assert report.decisions == service_records(records) + 1 == report.reproduced + 1


def test_a_decision_tampered_in_place_or_deleted_is_caught():
    records = simulated_log(500)
    end = records[-1].seq
    # in place: an attacker with the store rewrites a recorded allocation
    i, real = next((i, r) for i, r in enumerate(records) if decode(r.data).event_type == "JobScheduled"
                   and decode(r.data).allocations[0].device_ids)
    event = decode(real.data)
    alloc = msgspec.structs.replace(event.allocations[0], device_ids=list(reversed(event.allocations[0].device_ids))
                                    if len(event.allocations[0].device_ids) > 1 else ["gpu7"])
    changed = Record(real.seq, real.subject, encode(msgspec.structs.replace(event, allocations=[alloc])), real.time)
    report = audit([*records[:i], changed, *records[i + 1:]], make_cores(SETTINGS), last=real.seq)
    assert [(m["seq"], m["kind"]) for m in report.mismatches] == [(real.seq, "different")]
    assert "allocations" in report.mismatches[0]["reason"]
    # deleted: a decision removed from the stream leaves a gap, and replay decides what is missing
    report = audit([*records[:i], *records[i + 1:]], make_cores(SETTINGS), first=real.seq, last=end)
    kinds = {(m["kind"], m["seq"], m["id"]) for m in report.mismatches}
    assert ("gap", None, None) in kinds
    assert ("unpublished", None, event.id) in kinds


def test_a_decision_written_before_fields_were_added_is_reproduced_and_only_that():
    """A log's JobAccepted from before JobSpec had uid, gid and groups lacks them; it decodes to what
    replay decides (the new fields at their defaults), so it is reproduced. The same record with its
    fields in another order, or with a field no version wrote, is still a mismatch."""
    records = simulated_log(200)
    i, real = next((i, r) for i, r in enumerate(records) if decode(r.data).event_type == "JobAccepted")
    added = b',"uid":null,"gid":null,"groups":[]'
    assert added in real.data
    older = Record(real.seq, real.subject, real.data.replace(added, b"", 1), real.time)
    report = audit([*records[:i], older, *records[i + 1:]], make_cores(SETTINGS), last=real.seq)
    assert report.mismatches == [] and report.reproduced == report.decisions
    body = json.loads(older.data)
    reordered = Record(real.seq, real.subject, json.dumps(dict(reversed(list(body.items())))).encode(), real.time)
    extra = Record(real.seq, real.subject, older.data.replace(b'"v":1,', b'"v":1,"extra":true,', 1), real.time)
    for changed in (reordered, extra):
        report = audit([*records[:i], changed, *records[i + 1:]], make_cores(SETTINGS), last=real.seq)
        assert [(m["seq"], m["kind"]) for m in report.mismatches] == [(real.seq, "bytes")]


def test_a_live_log_is_replayed_with_the_cap_its_cycles_say():
    """The scheduler's cap on a cycle's candidates is in each cycle (``max_candidates``); the audit
    configures the replayed scheduler with the first one, and a log from before the field (0) with the
    cap of that time, 10,000: a cycle of 10,000 candidates was cut there, and so is its replay."""
    from services.front.audit.config import AuditConfig, audit_cores, cycle_cap
    from services.domain.queue.fold import MAX_CANDIDATES

    def cycle(cap: int) -> Record:
        event = c.SchedulingCycleCompleted(id="scheduling/SchedulingCycleCompleted/1", source="scheduling",
                                           correlation_id="1", cycle=1, basis_seq=1, candidates=["j"],
                                           max_candidates=cap)
        return Record(2, event_subject("scheduling", event), encode(event), 1.0)

    accepted = Record(1, "horizon.evt.submission.JobAccepted.j", b"{}", 1.0)
    assert cycle_cap([accepted]) is None  # no cycle yet: the scheduler's default
    assert cycle_cap([accepted, cycle(0)]) == 10_000
    assert cycle_cap([accepted, cycle(5_000), cycle(7)]) == 5_000  # the first one
    cores = {core.name: core for core in audit_cores(AuditConfig(), [accepted, cycle(0)])}
    assert cores["scheduling"].max_candidates == 10_000
    assert {core.name: core for core in audit_cores(AuditConfig(), [])}["scheduling"].max_candidates == MAX_CANDIDATES


# --------------------------------------------------------------------------- errors, and a live log


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_cli_answers_in_one_line_when_it_cannot_audit(nats_server, pinned_log):
    out = await horizon("audit", "--nats", f"nats://127.0.0.1:{_free_port()}")
    assert out.returncode == 1 and "cannot reach NATS" in out.stderr and "Traceback" not in out.stderr
    out = await horizon("audit", "--nats", nats_server.url)
    assert out.returncode == 1 and "no Horizon log" in out.stderr and "Traceback" not in out.stderr
    log = await JetStreamLog.open(nats_server.url, name="test")
    await log.close()
    out = await horizon("audit", "--nats", nats_server.url, "--json")
    assert out.returncode == 1 and "is empty: nothing to audit" in out.stderr and out.stdout == ""
    await write_log(nats_server.url, (await asyncio.to_thread(pinned_log, 500))[:40])
    out = await horizon("audit", "--nats", nats_server.url, "--from", "41")
    assert out.returncode == 1 and "--from 41 is past the end of the log" in out.stderr
    out = await horizon("audit", "--nats", nats_server.url)  # a simulator's log audited as a live one
    assert out.returncode == 1 and "hint: this log was written by the simulator" in out.stdout
    out = await horizon("audit", "--nats", nats_server.url, "--virtual-time")
    assert out.returncode == 0 and "OK: all" in out.stdout and "virtual time" in out.stdout


async def test_a_live_stacks_log_is_reproduced_with_the_defaults_of_horizon_up(nats_server, tmp_path):
    from services.front.host.stack import Stack

    stack = Stack(nats_server.url, tmp_path, nodes=local_nodes(2, gpus_per_node=4), executor="sim")
    await stack.start()
    nc = await nats.connect(nats_server.url)
    ended: set[str] = set()

    async def on_end(msg: Any) -> None:
        ended.add(json.loads(msg.data)["job_id"])

    for kind in ("JobSucceeded", "JobFailed", "JobCancelled", "JobRejected"):
        await nc.subscribe(f"horizon.evt.*.{kind}.*", cb=on_end)
    jobs = [(f"live-{i:02d}", {"resources": {"gpus": 1 + i % 4}, "sim_runtime_s": 0.1 * (i % 3),
                               "priority_class": "normal",  # no preemption: see the module's docstring
                               "restart_policy": "on-failure" if i % 6 == 0 else "never", "max_retries": 1,
                               "sim_exit_code": 1 if i % 6 == 0 else 0}) for i in range(24)]
    jobs.append(("live-gang", {"resources": {"gpus": 4}, "nodes": 2, "sim_runtime_s": 0.1}))
    try:
        await publish_all(nc.jetstream(), [("horizon.in.acme.submit", job_json(j, **f), j) for j, f in jobs])
        await wait_until(lambda: {j for j, _ in jobs} <= ended, 60, "every job to end")
    finally:
        await nc.close()
        await stack.stop()
    records = await read_log(nats_server.url)
    code, body = await audit_json(nats_server.url)
    assert code == 0 and body["mismatches"] == [], body["mismatches"][:2]
    # each leased service claimed the lead (services/runtime/claim.py), counted apart from decisions. Once
    # each on a quiet machine; a loaded one (CI) can see a lease lapse and its new term claim again (and
    # a claim whose ack timed out is retried, fenced on the stored one), so the count is the log's own.
    claims = [r for r in records if r.subject.endswith(".LeadershipClaimed.lease")]
    assert {r.subject.split(".")[2] for r in claims} == set(DECISION_SERVICES)
    assert body["leader_claims"] == len(claims) >= len(DECISION_SERVICES)
    assert body["decisions"] == body["reproduced"] == (service_records(tuple(records)) - body["observations"]
                                                       - body["leader_claims"])
    assert body["config"] == {"policy": "multifactor", "backfill_mode": "easy", "virtual_time": False}
    assert body["hint"] is None
    out = await horizon("audit", "--nats", nats_server.url, "--job", "live-gang")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "scheduled (attempt 1" in out.stdout and "2 nodes x 1 task of 4 GPUs" in out.stdout
    assert "[reproduced]" in out.stdout and "[report (agent)]" in out.stdout


# --------------------------------------------------------------------------- the scale


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_five_thousand_jobs_are_reproduced_and_one_forged_decision_is_the_only_mismatch(nats_server,
                                                                                              pinned_log):
    started = time.perf_counter()
    records = await asyncio.to_thread(pinned_log, 5000)
    simulated = time.perf_counter() - started
    await write_log(nats_server.url, records)
    started = time.perf_counter()
    code, body = await audit_json(nats_server.url, "--virtual-time")
    audited = time.perf_counter() - started
    assert code == 0 and body["mismatches"] == []
    assert body["decisions"] == body["reproduced"] == service_records(records)
    job = next(e.job_id for e in map(decode, (r.data for r in records)) if isinstance(e, c.JobAccepted))
    forged = {"type": "JobScheduled", "id": f"placement/JobScheduled/{job}/9", "source": "placement",
              "correlation_id": job, "job_id": job, "attempt": 9, "basis_seq": len(records) // 3,
              "allocations": [{"node": "n-03", "device_ids": ["gpu0"]}]}
    seq = await publish(nats_server.url, f"horizon.evt.placement.JobScheduled.{job}", forged, "forged-5000")
    code, after = await audit_json(nats_server.url, "--virtual-time")
    assert code != 0 and [m["seq"] for m in after["mismatches"]] == [seq]
    per_service = ", ".join(f"{name} {tally['decisions']}" for name, tally in body["services"].items())
    print(f"\n5,000 jobs: {len(records)} records, {body['decisions']} decisions ({per_service}); "
          f"simulated in {simulated:.1f} s, `horizon audit --json` {audited:.1f} s (wall, with start-up and reading)")


if __name__ == "__main__":  # python -m tests.front.test_audit N PATH: simulated_log(N), pickled (the pinned_log fixture)
    with open(sys.argv[2], "wb") as out:
        pickle.dump(simulated_log(int(sys.argv[1])), out)
