"""Leader leases, hot standbys and fencing, against a real nats-server (small TTLs: 1-2 s).

1. The lease alone: acquire, renew, lapse, takeover, release, a lapsed holder's renewal refused.
2. The fence (``publish_fenced``) as a contract of both logs: all or none, only on the expected
   last sequence of a subject filter, chained across atomic-batch parts, duplicates refused.
3. Runners: two instances of scheduling, placement or preemption in a working stack, the leader crashes mid-burst, the
   standby takes over within the TTL, every job runs, no decision is stored twice, the whole
   log checks; a deposed leader (paused past its lease) cannot store a stale decision, even
   after the duplicate window has passed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import nats
import pytest

from events import catalogue as c
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from services.runtime.claim import LeaderClaim
from services.runtime.jetstream import JetStreamLog, StreamSettings
from services.runtime.lease import Lease
from services.runtime.log import FENCED_BATCH_MAX, Fence, LogConflict, Outgoing
from services.runtime.replay import replay_decisions
from services.runtime.service import ServiceRunner
from services.front.host.stack import Stack
from services.front.registry import make_core
from services.submission.core import SubmissionCore
from tests.e2e import events_of, read_log, wait_until

pytestmark = pytest.mark.timeout(120)


async def until(predicate, timeout: float, what: str) -> float:
    """Wait for ``predicate``; the seconds it took."""
    start = time.monotonic()
    await wait_until(predicate, timeout, what, interval=0.02)
    return time.monotonic() - start


# ---------------------------------------------------------------------------- 1. the lease


async def test_one_holder_renews_and_a_standby_takes_over_only_after_the_lease_lapses(nats_server):
    nc_a, nc_b = await nats.connect(nats_server.url), await nats.connect(nats_server.url)
    a, b = Lease(nc_a, "scheduling", ttl_s=1, holder="a"), Lease(nc_b, "scheduling", ttl_s=1, holder="b")
    keep_a = asyncio.create_task(a.keep())
    await until(lambda: a.held, 5, "a to take the free lease")
    keep_b = asyncio.create_task(b.keep())
    first = a.revision
    await asyncio.sleep(3.0)  # three TTLs: a renews about every 0.33 s, b keeps asking
    assert a.held and not b.held and a.revision > first + 5
    revision, record, deleted = await b.current()
    assert record is not None and record.holder == "a" and record.ttl_s == 1 and not deleted

    a.abandon()  # a stops renewing without a word (a crash, a pause)
    keep_a.cancel()
    paused_at = time.monotonic()
    took = await until(lambda: b.held, 5, "b to take the lapsed lease")
    assert not a.held  # a's own view lapsed too: at most ttl - margin after its last renewal
    assert took <= 1.0 + 1.0, f"takeover {took:.2f} s after a stopped, ttl 1 s"
    assert a.deadline < paused_at + 1.0  # a counted itself the holder for less than one TTL
    assert not await a.renew()  # a wakes up: its revision is gone, the lease is lost
    assert b.held and (await b.current())[1].holder == "b"

    b.abandon()  # a graceful stop: no more renewals, then the lease handed over at once
    keep_b.cancel()
    await asyncio.gather(keep_a, keep_b, return_exceptions=True)
    await b.release()
    assert not b.held
    assert await a.try_acquire() and a.held
    await nc_a.close()
    await nc_b.close()


async def test_the_lease_ttl_is_whole_seconds(nats_server):
    nc = await nats.connect(nats_server.url)
    with pytest.raises(ValueError, match="whole number of seconds"):
        Lease(nc, "placement", ttl_s=0.5)  # type: ignore[arg-type]
    await nc.close()


# ---------------------------------------------------------------------------- 2. the fence


def decision(i: int, service: str = "svc") -> Outgoing:
    return Outgoing(f"horizon.evt.{service}.Thing.t{i}", b'{"i":%d}' % i, f"{service}/Thing/{i}")


async def stored(log, from_seq: int = 1) -> list:
    return [r for batch in [b async for b in log.read(from_seq)] for r in batch]


async def test_a_fenced_round_is_stored_whole_or_not_at_all(event_log):
    log = event_log
    own = "horizon.evt.svc.>"
    assert await log.last_seq(own) == 0
    await log.publish("horizon.in.t.submit", b"x", msg_id="in-1")  # inputs do not move the fence
    acks = await log.publish_fenced([decision(i) for i in range(5)], Fence(own, 0))
    assert [a.seq for a in acks] == [2, 3, 4, 5, 6] and not any(a.duplicate for a in acks)
    assert await log.last_seq(own) == 6 and await log.last_seq() == 6
    await log.publish("horizon.in.t.submit", b"y", msg_id="in-2")
    await log.publish("horizon.evt.other.Thing.x", b"z", msg_id="other-1")  # nor do other services

    with pytest.raises(LogConflict):  # a publisher that has not seen seq 6 (a deposed leader)
        await log.publish_fenced([decision(i) for i in range(10, 13)], Fence(own, 3))
    with pytest.raises(LogConflict):  # nor one message alone
        await log.publish_fenced([decision(20)], Fence(own, 0))
    assert await log.last_seq() == 8  # nothing of either was stored

    with pytest.raises(LogConflict):  # a batch repeating a stored msg id is refused whole
        await log.publish_fenced([decision(30), decision(4)], Fence(own, 6))
    assert await log.last_seq() == 8
    one = await log.publish_fenced([decision(4)], Fence(own, 6))  # alone, it is a duplicate, as by publish
    assert one[0].duplicate and one[0].seq == 6
    assert [r.seq for r in await stored(log, 9)] == []

    acks = await log.publish_fenced([decision(40)], Fence(own, 6))
    assert acks[0].seq == 9 and not acks[0].duplicate


async def test_a_fenced_batch_outwaits_atomic_batches_left_open_by_someone_else(js_log, nats_server):
    """60 batches opened and never committed make the server refuse new atomic batches ("incomplete")
    for a few seconds: the fenced publish waits it out instead of giving up (issue 17)."""
    nc = await nats.connect(nats_server.url)
    try:
        for n in range(60):
            await nc.publish("horizon.in.t.submit", b"{}", headers={"Nats-Batch-Id": f"open-{n}",
                                                                    "Nats-Batch-Sequence": "1"})
        await nc.flush()
    finally:
        await nc.close()
    start = time.monotonic()
    acks = await js_log.publish_fenced([decision(i) for i in range(3)], Fence("horizon.evt.svc.>", 0))
    assert [a.seq for a in acks] == [1, 2, 3]
    assert time.monotonic() - start < 30


async def test_a_round_longer_than_one_atomic_batch_chains_its_fences(event_log):
    log = event_log
    own = "horizon.evt.svc.>"
    items = [decision(i) for i in range(FENCED_BATCH_MAX + 3)]
    acks = await log.publish_fenced(items, Fence(own, 0))
    assert [a.seq for a in acks] == list(range(1, FENCED_BATCH_MAX + 4))
    records = await stored(log)
    assert [r.msg_id for r in records] == [i.msg_id for i in items]


# ---------------------------------------------------------------------------- 3. runners


def job_json(job_id: str, **fields) -> bytes:
    fields.setdefault("command", ["true"])  # an empty command is rejected
    return json.dumps({"type": "JobSubmitted", "job_id": job_id, "tenant": "acme", **fields}).encode()


async def submit(js, jobs: list[str], **fields) -> None:
    for i in range(0, len(jobs), 100):
        await asyncio.gather(*[js.publish("horizon.in.acme.submit", job_json(j, **fields), headers={"Nats-Msg-Id": j})
                               for j in jobs[i:i + 100]])


async def crash(stack: Stack, name: str) -> None:
    """The leader crashes: its connection goes first, so it neither renews nor releases its lease."""
    crashed = stack.parts.pop(name)
    await crashed.log.nc.close()
    crashed.task.cancel()
    await asyncio.gather(crashed.task, return_exceptions=True)


async def start_with_standby(stack: Stack, name: str) -> tuple[ServiceRunner, ServiceRunner]:
    leader = stack.parts[name].obj
    await until(lambda: leader.leading, 10, f"{name} to lead")
    standby = (await stack.start_service(name, key=f"{name}#2")).obj
    assert not standby.leading and standby.stats.takeovers == 0
    return leader, standby


def assert_took_over(standby: ServiceRunner, took: float, ttl: int) -> None:
    assert took <= ttl + 1.5, f"the standby took over {took:.2f} s after the crash (ttl {ttl} s)"
    assert standby.stats.takeovers == 1 and standby.stats.decide_rounds > 0


def assert_nothing_decided_twice(records) -> list:
    events = events_of(records)
    decided = Counter(e.id for e in events if e.source in ("submission", "scheduling", "placement", "inventory",
                                                         "preemption"))
    assert [i for i, n in decided.items() if n > 1] == []
    result = check_log(records)
    assert result.ok, result.problems[:5]
    return events


@pytest.mark.parametrize("service", ["scheduling", "placement"])
async def test_the_standby_takes_over_a_crashed_leader_mid_burst_and_nothing_is_done_twice(nats_server, tmp_path,
                                                                                           service):
    ttl = 2
    stack = Stack(nats_server.url, tmp_path, nodes=local_nodes(8, gpus_per_node=8), executor="sim", lease_ttl_s=ttl)
    await stack.start()
    try:
        _, standby = await start_with_standby(stack, service)

        nc = await nats.connect(nats_server.url)
        scheduled: Counter[str] = Counter()

        async def on_scheduled(msg):
            scheduled[json.loads(msg.data)["job_id"]] += 1

        await nc.subscribe("horizon.evt.placement.JobScheduled.*", cb=on_scheduled)
        jobs = [f"j-{i:03d}" for i in range(300)]
        burst = asyncio.create_task(submit(nc.jetstream(), jobs, resources={"gpus": 1}, sim_runtime_s=0.05))
        await until(lambda: len(scheduled) >= 60, 60, "the burst to get going")

        await crash(stack, service)
        took = await until(lambda: standby.leading, ttl + 5, "the standby to take over")
        await burst
        await until(lambda: len(scheduled) == len(jobs), 90, "every job to be scheduled")
        await asyncio.sleep(0.5)  # a second decision for any job would have arrived by now
        await nc.close()
        print(f"takeover {took:.2f} s after the crash (ttl {ttl} s)")
        assert_took_over(standby, took, ttl)
        assert set(scheduled.values()) == {1}
    finally:
        await stack.stop()

    records = await read_log(nats_server.url)
    events = assert_nothing_decided_twice(records)
    cycles = Counter(e.cycle for e in events if isinstance(e, c.SchedulingCycleCompleted))
    assert set(cycles.values()) == {1}
    attempts = Counter((e.job_id, e.attempt) for e in events if isinstance(e, c.JobScheduled))
    assert len(attempts) == len(jobs) and set(attempts.values()) == {1}
    report = replay_decisions(make_core(service), records)
    assert report.mismatches == [] and report.reproduced == report.decisions > 0


async def test_the_preemption_standby_takes_over_mid_round_and_no_victim_is_preempted_twice(nats_server, tmp_path):
    """A full cluster of normal jobs (four accounts, so the per-account rate limit stays out of
    the way), then critical ones that each need a victim: a first wave, the preemption leader
    crashes, a second wave; the standby carries on from the log: every critical job starts,
    each victim attempt is asked to stop once, and nothing is decided twice."""
    ttl = 2
    stack = Stack(nats_server.url, tmp_path, nodes=local_nodes(4, gpus_per_node=8), executor="sim", lease_ttl_s=ttl)
    await stack.start()
    try:
        _, standby = await start_with_standby(stack, "preemption")
        nc = await nats.connect(nats_server.url)
        started: set[str] = set()
        requested: Counter[tuple[str, int]] = Counter()

        async def on_started(msg):
            started.add(json.loads(msg.data)["job_id"])

        async def on_requested(msg):
            body = json.loads(msg.data)
            requested[(body["job_id"], body["attempt"])] += 1

        await nc.subscribe("horizon.evt.agent.JobStarted.*", cb=on_started)
        await nc.subscribe("horizon.evt.preemption.PreemptionRequested.*", cb=on_requested)
        js = nc.jetstream()
        background = [f"bg-{a}-{i}" for a in "abcd" for i in range(8)]
        for account in "abcd":
            await submit(js, [j for j in background if j.startswith(f"bg-{account}-")], account=account,
                         resources={"gpus": 1}, sim_runtime_s=3600)
        await until(lambda: set(background) <= started, 60, "the cluster to fill with normal jobs")
        urgent = [f"urgent-{i:02d}" for i in range(24)]
        first, second = urgent[:8], urgent[8:]  # each holds its GPU, so each needs a victim of its own
        await submit(js, first, priority_class="critical", resources={"gpus": 1}, sim_runtime_s=3600)
        await until(lambda: len(requested) >= len(first), 60, "the first wave's preemptions")
        await crash(stack, "preemption")
        # the second wave arrives while nobody leads: only the standby can preempt for it
        await submit(js, second, priority_class="critical", resources={"gpus": 1}, sim_runtime_s=3600)
        took = await until(lambda: standby.leading, ttl + 5, "the standby to take over")
        await until(lambda: set(urgent) <= started, 90, "every critical job to start")
        await asyncio.sleep(0.5)  # a second request for any victim would have arrived by now
        await nc.close()
        assert_took_over(standby, took, ttl)
        assert set(requested.values()) == {1}
    finally:
        await stack.stop()

    records = await read_log(nats_server.url)
    events = assert_nothing_decided_twice(records)
    victims = Counter((e.job_id, e.attempt) for e in events if isinstance(e, c.PreemptionRequested))
    assert len(victims) >= len(urgent) and set(victims.values()) == {1}
    report = replay_decisions(make_core("preemption"), records)
    assert report.mismatches == [] and report.reproduced == report.decisions > 0


async def test_a_deposed_leader_cannot_store_a_stale_decision(nats_server):
    """A leader pauses past its lease (here: its renewals stop while it still believes it leads);
    the standby takes over and decides; the old leader then decides on its stale state. The
    duplicate window (1 s here) has passed, so only the fence stands between its decision and the log."""
    settings = StreamSettings(duplicate_window_s=1.0)
    setup = await JetStreamLog.open(nats_server.url, name="setup", settings=settings)
    await setup.close()
    frozen = time.monotonic()
    old_log = await JetStreamLog.open(nats_server.url, name="old", create=False)
    new_log = await JetStreamLog.open(nats_server.url, name="new", create=False)
    # The old leader's clock is frozen: it never notices that its lease lapsed, like a process
    # paused between checking its lease and publishing.
    old = ServiceRunner(old_log, SubmissionCore(), lease=Lease(old_log.nc, "submission", ttl_s=1, holder="old",
                                                               clock=lambda: frozen))
    await old.start()
    await until(lambda: old.leading, 5, "the old leader to lead")
    new = ServiceRunner(new_log, SubmissionCore(), lease=Lease(new_log.nc, "submission", ttl_s=1, holder="new"))
    await new.start()
    js = new_log.nc.jetstream()
    await submit(js, ["first"], resources={"cpus": 1})
    await until(lambda: "first" in old.state.verdicts and "first" in new.state.verdicts, 10, "first's verdict")

    # 1. The old leader pauses: it stops reading and renewing, and still believes it leads.
    await old._follower.stop()
    old._follower = None
    old.lease.abandon()
    old._lease_task.cancel()
    await until(lambda: new.leading, 5, "the standby to take over")
    assert old.leading  # its frozen clock says so

    # 2. The new leader decides on a job the old one never hears about.
    await submit(js, ["second"], resources={"cpus": 1})
    await until(lambda: "second" in new.state.verdicts, 10, "the new leader's verdict on second")
    await asyncio.sleep(1.5)  # past the duplicate window: a second JobAccepted would be stored

    # 3. The old leader wakes with the submission but not the new leader's answer, and decides.
    records = await stored(new_log)
    submitted = [r for r in records if r.subject == "horizon.in.acme.submit" and r.seq > old.state.seq]
    assert len(submitted) == 1
    end_before = await new_log.last_seq()
    await old._on_batch(submitted)
    assert old.stats.fenced == 1 and old.stats.decisions == 1  # first only; the stale round was refused
    assert await new_log.last_seq() == end_before

    verdicts = Counter(e.job_id for e in events_of(await stored(new_log))
                       if isinstance(e, (c.JobAccepted, c.JobRejected)))
    assert verdicts == {"first": 1, "second": 1}

    await new.stop()
    await old.stop()
    # Without the fence the stale decision would have been stored (the duplicate window is over):
    record = next(r for r in await stored(new_log) if r.subject.startswith("horizon.evt.submission.")
                  and r.subject.endswith(".second"))
    ack = await old_log.publish(record.subject, record.data, msg_id=record.msg_id)
    assert not ack.duplicate
    await old_log.close()
    await new_log.close()


async def test_a_successor_s_claim_fences_out_every_later_decision_of_the_leader_before_it(event_log):
    """``LeaderClaim`` (services/runtime/claim.py): a claim is stored only on the last one it read; a
    later claim refuses the earlier claimer's decisions at once, single or batched, and supersedes it
    when applied. The fence is one literal subject, whatever the service's decisions are named."""
    first, second = LeaderClaim("placement", "one"), LeaderClaim("placement", "two")
    assert first.subject == "horizon.evt.placement.LeadershipClaimed.lease"
    assert await first.take(event_log) == 1
    decision = Outgoing("horizon.evt.placement.JobScheduled.j1", b"{}", "placement/JobScheduled/j1/1")
    assert [a.seq for a in await event_log.publish_fenced([decision], first.fence())] == [2]
    stale = LeaderClaim("placement", "three")
    stale_last = await event_log.last_seq(stale.subject)
    assert await second.take(event_log) == 3  # fenced on claim 1: stored
    # a claim fenced on a claim that is no longer the last is refused
    with pytest.raises(LogConflict):
        await event_log.publish_fenced([Outgoing(stale.subject, b"{}", "late-claim")], Fence(stale.subject, stale_last))
    late = [Outgoing(f"horizon.evt.placement.JobScheduled.j{i}", b"{}", f"placement/JobScheduled/j{i}/1") for i in (2, 3)]
    for items in ([late[0]], late):  # one, and an atomic batch
        with pytest.raises(LogConflict):
            await event_log.publish_fenced(items, first.fence())
    assert await event_log.last_seq() == 3
    claims = [r for r in [r async for batch in event_log.read(1) for r in batch] if r.subject == first.subject]
    assert [c_.seq for c_ in claims] == [1, 3]
    first.saw(claims[0])
    assert first.seq == 1  # its own claim
    first.saw(claims[1])
    assert first.seq == 0  # superseded: it must claim again before it decides
    second.saw(claims[0])
    assert second.seq == 3  # an earlier claim supersedes nothing


def test_a_claim_moves_a_core_s_seq_and_not_its_now():
    """A claim among a run's records changes no decision: only ``seq`` moves (services/domain/protocol.py),
    so a replay of the log without the claims (``horizon whatif``) decides at the same times."""
    from events.codec import encode
    from services.domain.protocol import Record, fold_event

    core = SubmissionCore()
    state = core.initial()
    state.now = 100.0
    claim = c.LeadershipClaimed(id="submission/LeadershipClaimed/0/h", ts=500.0, source="submission",
                                correlation_id=c.CLAIM_TOKEN, holder="h")
    record = Record(7, LeaderClaim("submission", "h").subject, encode(claim), 500.0)
    state = fold_event(core, state, record, claim)
    assert state.seq == 7 and state.now == 100.0
