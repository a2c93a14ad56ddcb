"""Scale-out by partition (docs/scaling.md): a scheduling and a placement leader per partition.

1. Pure cores: a partition leader decides only for its partition's jobs, under its own token
   and ids, and places only its partner's cycles; fair share is global (a tenant heavy in
   partition a comes after a light one in partition b, exactly as one scheduler orders them);
   another leader's open cycle counts against a quota; a snapshot keeps the open cycles.
2. Against a real nats-server: two pairs of leaders run their partitions' jobs on their own
   nodes and ``horizon audit`` reproduces every decision; two leaders racing for one account's
   quota never start more than it allows (the second's cycle is fenced out and decided again);
   a partition leader restarted (from its snapshot) decides nothing twice.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import Any

import msgspec
import nats
import pytest

from events import catalogue as c
from events.subjects import leader_token, service_of
from services.nodes.spec import local_nodes
from services.front.registry import SERVICES, leader_cores, make_core, split_partitions
from services.front.host.stack import Stack
from services.runtime.jetstream import JetStreamLog
from services.placement.partitioned import PartitionedPlacementCore
from services.runtime.lease import Lease
from services.runtime.replay import IMPOSTOR, audit
from services.scheduling.core import SchedulingCore
from services.scheduling.fence import PartitionedSchedulingRunner
from services.scheduling.partitioned import PartitionedSchedulingCore
from tests.e2e import events_of, read_log, wait_until
from tests.helpers import Feed, accepted, node

pytestmark = pytest.mark.timeout(60)

GPU = 8


def part(name: str, nodes: list[str]) -> c.PartitionConfigured:
    return c.PartitionConfigured(name=name, nodes=nodes)


def cluster(f: Feed) -> None:
    """Nodes a1 a2 (partition a) and b1 b2 (partition b), 8 GPUs each."""
    for n in ("a1", "a2", "b1", "b2"):
        f.evt("agent", node(n, gpus=GPU))
        f.evt("inventory", c.NodeReady(node=n, basis_seq=1))
    f.admin("partition", part("a", ["a1", "a2"]))
    f.admin("partition", part("b", ["b1", "b2"]))


# ------------------------------------------------------------------------------ 1. pure cores


def test_leader_tokens_name_the_service_and_its_partitions():
    assert leader_token("scheduling", ("b", "a")) == "scheduling-a-b" and leader_token("placement", ()) == "placement"
    assert service_of("scheduling-a-b") == "scheduling" and service_of("placement") == "placement"
    assert service_of("agent") == "agent"
    with pytest.raises(ValueError, match="one leader"):
        leader_token("preemption", ("a",))
    assert split_partitions("a-b", {"a", "b"}) == ("a", "b")
    assert split_partitions("gpu-big", {"gpu-big", "gpu"}) == ("gpu-big",)
    cores = leader_cores({"scheduling-a-b", "placement-x", "agent"}, {"a", "b", "x"})
    assert [(core.name, core.partitions) for core in cores] == [("placement-x", ("x",)),
                                                               ("scheduling-a-b", ("a", "b"))]


def test_a_partition_leader_schedules_only_its_partitions_jobs_under_its_own_ids():
    f = Feed(PartitionedSchedulingCore(partitions=("b",)))
    cluster(f)
    for job_id, p in (("ja", "a"), ("jb", "b"), ("jb2", "b")):
        f.evt("submission", accepted(job_id, gpus=1, partition=p))
    [cycle] = [e for e in f.settle() if isinstance(e, c.SchedulingCycleCompleted)]
    assert cycle.candidates == ["jb", "jb2"] and cycle.queued == 2 and cycle.cycle == 1
    assert cycle.id == "scheduling-b/SchedulingCycleCompleted/1" and cycle.source == "scheduling-b"
    # another leader's cycle 1 does not count as this one's: it waits for its own partner
    f.evt("scheduling-a", c.SchedulingCycleCompleted(cycle=1, candidates=["ja"], basis_seq=f.seq))
    f.evt("placement-a", c.PlacementCycleCompleted(cycle=1, basis_seq=f.seq))
    f.evt("submission", accepted("jb3", gpus=1, partition="b"))
    assert f.decide() == []  # its cycle 1 is not placed yet
    f.evt("placement-b", c.PlacementCycleCompleted(cycle=1, basis_seq=f.seq))
    [cycle2] = f.settle()
    assert isinstance(cycle2, c.SchedulingCycleCompleted) and cycle2.cycle == 2 and "ja" not in cycle2.candidates


def test_a_partition_placement_leader_places_only_its_partners_cycles_on_its_nodes():
    f = Feed(PartitionedPlacementCore(partitions=("b",)))
    cluster(f)
    for job_id, p in (("ja", "a"), ("jb", "b")):
        f.evt("submission", accepted(job_id, gpus=GPU, partition=p))
    f.evt("scheduling-a", c.SchedulingCycleCompleted(cycle=1, candidates=["ja"], basis_seq=f.seq))
    assert f.decide() == []  # not its partner's
    f.evt("scheduling-b", c.SchedulingCycleCompleted(cycle=1, candidates=["jb"], basis_seq=f.seq))
    out = f.settle()
    [placed] = [e for e in out if isinstance(e, c.JobScheduled)]
    assert placed.job_id == "jb" and placed.allocations[0].node in ("b1", "b2")
    assert placed.id == "placement-b/JobScheduled/jb/1" and placed.causation_id == "scheduling-b/SchedulingCycleCompleted/1"
    assert out[-1].id == "placement-b/PlacementCycleCompleted/1"


def test_a_node_two_leaders_partitions_share_is_placed_on_by_neither_and_by_one_leader_of_both():
    def shared(partitions: tuple[str, ...]) -> Feed:
        f = Feed(PartitionedPlacementCore(partitions=partitions))
        for n in ("a1", "s1", "b1"):
            f.evt("agent", node(n, gpus=GPU))
            f.evt("inventory", c.NodeReady(node=n, basis_seq=1))
        f.admin("partition", part("a", ["a1", "s1"]))
        f.admin("partition", part("b", ["b1", "s1"]))
        for job_id in ("j1", "j2"):
            f.evt("submission", accepted(job_id, gpus=GPU, partition="a"))
        return f

    f = shared(("a",))
    f.evt("scheduling-a", c.SchedulingCycleCompleted(cycle=1, candidates=["j1", "j2"], basis_seq=f.seq))
    out = f.settle()
    assert {e.job_id: e.allocations[0].node for e in out if isinstance(e, c.JobScheduled)} == {"j1": "a1"}
    [blocked] = [e for e in out if isinstance(e, c.PlacementBlocked)]
    assert blocked.job_id == "j2" and any(r.reason == "not in partition a" for r in blocked.reasons)
    f = shared(("a", "b"))  # one leader of both may use it
    f.evt("scheduling-a-b", c.SchedulingCycleCompleted(cycle=1, candidates=["j1", "j2"], basis_seq=f.seq))
    placed = {e.job_id: e.allocations[0].node for e in f.settle() if isinstance(e, c.JobScheduled)}
    assert placed == {"j1": "a1", "j2": "s1"}


def usage_history(f: Feed) -> None:
    """Tenant heavy ran 16 GPUs for two hours in partition a; light ran nothing."""
    for i, n in enumerate(("a1", "a2")):
        job_id = f"heavy-{i}"
        f.evt("submission", accepted(job_id, tenant="heavy", account="heavy", gpus=GPU, partition="a"))
        f.evt("placement-a", c.JobScheduled(job_id=job_id, cycle=1, basis_seq=f.seq, time_limit_s=86400,
                                            allocations=[c.NodeAllocation(node=n, device_ids=[f"gpu{g}" for g in range(GPU)])]))
        f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=n))
    for i in range(2):
        f.evt("agent", c.JobSucceeded(job_id=f"heavy-{i}", attempt=1), dt=3600.0 if i == 0 else 0.0)
    f.evt("submission", accepted("heavy-b", tenant="heavy", account="heavy", gpus=1, partition="b"))
    f.evt("submission", accepted("light-b", tenant="light", account="light", gpus=1, partition="b"))


def cycles(events: list[c.Event]) -> list[c.SchedulingCycleCompleted]:
    return [e for e in events if isinstance(e, c.SchedulingCycleCompleted)]


def test_fair_share_is_as_of_the_ledger_a_tenant_heavy_in_a_waits_behind_a_light_one_in_b():
    """Leader b skips a's jobs; a's ledger entry tells it what heavy used (services/domain/ledger.py)."""
    a = Feed(PartitionedSchedulingCore(partitions=("a",)))
    cluster(a)
    usage_history(a)
    entries = [e for e in a.settle() if isinstance(e, c.UsageCharged)]
    assert [r.association for r in entries[0].rows] == ["heavy/-"] and entries[0].id == "scheduling-a/UsageCharged/1"
    heavy = entries[0].rows[0]
    assert heavy.rate == 0 and heavy.usage == pytest.approx(2 * GPU * 3600, rel=0.01)  # two nodes' GPUs for an hour
    b = Feed(PartitionedSchedulingCore(partitions=("b",)))
    for r in a.records:  # the same log, a's entry included
        b.state = _fold(b.core, b.state, r)
    assert "heavy-0" not in b.state.jobs.jobs and "heavy-b" in b.state.pending  # a's jobs were skipped
    [cycle] = cycles(b.decide())
    assert cycle.candidates == ["light-b", "heavy-b"]  # heavy was submitted first
    # exactly one scheduler's order at the same basis, restricted to partition b
    one = Feed(SchedulingCore())
    for r in a.records:
        one.state = _fold(one.core, one.state, r)
    [whole] = cycles(one.decide())
    assert [j for j in whole.candidates if j.endswith("-b")] == cycle.candidates
    # as of the ledger: the leaves the entry named, with the usage it gave (a's, all of heavy's)
    ledger = b.state.ledger.tree
    exact = one.state.fairshare
    assert ledger.usage_at(ledger.accounts["heavy/-"], b.state.now) == pytest.approx(
        exact.usage_at(exact.accounts["heavy/-"], b.state.now), rel=1e-9)
    assert ledger.factors(b.state.now) == {"heavy/-": 0.5, "light/-": 1.0}


def test_without_an_entry_a_leader_knows_nothing_of_another_partitions_usage():
    """Before a's first entry lands, b has no usage of heavy: both tenants rank as newcomers, and
    the order is the submission order (fair share as of the ledger, docs/scaling.md)."""
    f = Feed(PartitionedSchedulingCore(partitions=("b",)))
    cluster(f)
    usage_history(f)
    [cycle] = cycles(f.decide())
    assert cycle.candidates == ["heavy-b", "light-b"]


def _fold(core: Any, state: Any, record: Any) -> Any:
    from services.runtime.service import fold_record

    return fold_record(core, state, record)[0]


def quota_feed(partitions: tuple[str, ...]) -> Feed:
    f = Feed(PartitionedSchedulingCore(partitions=partitions))
    cluster(f)
    f.admin("account", c.AccountConfigured(account="q", quota=c.Quota(running_jobs=1)))
    return f


def test_another_leaders_open_cycle_counts_against_the_quota_until_it_is_placed():
    f = quota_feed(("b",))
    f.evt("submission", accepted("qa", tenant="q", account="q", gpus=1, partition="a"))
    f.evt("submission", accepted("qb", tenant="q", account="q", gpus=1, partition="b"))
    f.evt("scheduling-a", c.SchedulingCycleCompleted(cycle=1, candidates=["qa"], basis_seq=f.seq))
    assert cycles(f.settle()) == []  # qa is admitted by a, not yet placed: q's one running job is taken
    assert f.core.charges_quota(f.state, ["qb"])
    f.evt("placement-a", c.PlacementCycleCompleted(cycle=1, basis_seq=f.seq, blocked=1))  # qa did not fit
    [cycle] = cycles(f.decide())
    assert cycle.candidates == ["qb"]
    # a snapshot keeps another leader's open cycle
    f.evt("scheduling-a", c.SchedulingCycleCompleted(cycle=2, candidates=["qa"], basis_seq=f.seq))
    again = f.core.load(f.core.dump(f.state))
    assert again is not None and again.open_cycles == {"scheduling-a": (2, ["qa"])}
    assert cycles(f.core.decide(again)) == []


class FoldsEverything(PartitionedSchedulingCore):
    """The leader as it was before it skipped: every record folded (fair share still as of the ledger)."""

    def skips(self, state: Any, record: Any) -> bool:
        return False

    def _foreign(self, state: Any, event: Any) -> bool:
        return False


class PlacesFoldingEverything(PartitionedPlacementCore):
    def skips(self, state: Any, record: Any) -> bool:
        return False

    def evolve(self, state: Any, event: Any, record: Any) -> Any:
        from services.placement.core import PlacementCore
        from events.subjects import event_owner

        if isinstance(event, c.SchedulingCycleCompleted) and event_owner(record.subject) != self.partner:
            return state
        if isinstance(event, c.PlacementCycleCompleted) and event_owner(record.subject) != self.name:
            return state
        return PlacementCore.evolve(self, state, event, record)


def test_a_leader_that_skips_other_partitions_decides_exactly_as_one_that_folds_them():
    """Two partitions' jobs of one tenant (one association: fair share cannot differ) arrive, run and end in
    turns, both pairs deciding; at every step leader b that skips a's records (before decoding them, through
    ``fold_record``) decides what a leader b folding every record decides, and so does its placement, and
    a's jobs never enter b's tables."""
    from services.runtime.service import fold_record

    log = Feed(PartitionedSchedulingCore(partitions=("a",)))  # leader a, writing the shared log
    cluster(log)
    cores = [(PartitionedSchedulingCore(partitions=("b",)), FoldsEverything(partitions=("b",))),
             (PartitionedPlacementCore(partitions=("b",)), PlacesFoldingEverything(partitions=("b",)))]
    states = [[core.initial() for core in pair] for pair in cores]
    seen = 0
    skipped = 0

    def catch_up() -> list[list[Any]]:
        nonlocal seen, skipped
        for r in log.records[seen:]:
            for (skipping, folding), st in zip(cores, states, strict=True):
                skipped += skipping.skips(st[0], r)
                st[0] = fold_record(skipping, st[0], r)[0]
                st[1] = fold_record(folding, st[1], r)[0]
        seen = len(log.records)
        return [[core.decide(st) for core, st in zip(pair, sts, strict=True)] for pair, sts in zip(cores, states, strict=True)]

    def publish(events: list[c.Event], service: str) -> None:
        for e in events:
            log.evt(service, e, dt=0.5)

    for round_ in range(6):
        for k in range(3):
            for p in ("a", "b"):
                log.evt("submission", accepted(f"{p}{round_}-{k}", gpus=4, partition=p))
        log.settle()  # leader a's cycle (and ledger entries)
        (sched, sched_all), (place, place_all) = catch_up()
        assert sched == sched_all and place == place_all
        publish(sched, "scheduling-b")
        (sched, sched_all), (place, place_all) = catch_up()
        assert place == place_all
        publish(place, "placement-b")
        catch_up()
        placed = [e for e in log.records if e.subject.startswith("horizon.evt.placement-b.JobScheduled.")]
        for r in placed[-2:]:  # some of b's jobs end, and a's too (a's placement is not run: its ends only)
            job_id = r.subject.rsplit(".", 1)[1]
            log.evt("agent", c.JobSucceeded(job_id=job_id, attempt=1), dt=30.0)
        log.evt("agent", c.JobSucceeded(job_id=f"a{round_}-0", attempt=1), dt=1.0)
        (sched, sched_all), (place, place_all) = catch_up()
        assert sched == sched_all and place == place_all
        if sched:
            publish(sched, "scheduling-b")
    assert skipped > 0 and len([r for r in log.records if ".placement-b.JobScheduled." in r.subject]) >= 6
    for st in (states[0][0], states[1][0]):
        assert not any(j.startswith("a") for j in st.jobs.jobs) and any(j.startswith("b") for j in st.jobs.jobs)
    assert len(states[0][1].jobs.jobs) + len(states[0][1].jobs.settled) > len(states[0][0].jobs.jobs) + len(states[0][0].jobs.settled)


# ------------------------------------------------------------------------------ 2. live


NODES = local_nodes(4, gpus_per_node=4, prefix="n")  # n-00 n-01: partition a; n-02 n-03: partition b


def job(job_id: str, partition: str, tenant: str = "acme", **kw: Any) -> bytes:
    body = {"type": "JobSubmitted", "job_id": job_id, "tenant": tenant, "command": ["true"],
            "resources": {"gpus": 1}, "sim_runtime_s": 0.05, "partitions": [partition], **kw}
    return json.dumps(body).encode()


async def admin(nc: Any, verb: str, event: c.Event) -> None:
    await nc.jetstream().publish(f"horizon.in._admin.{verb}", msgspec.json.encode(event),
                                 headers={"Nats-Msg-Id": f"admin/{verb}/{getattr(event, 'name', '') or getattr(event, 'account', '')}"})


async def two_pairs(url: str, tmp_path: Any) -> Stack:
    stack = Stack(url, tmp_path, nodes=NODES, executor="sim", lease_ttl_s=5, tick_interval_s=None)
    setup = await JetStreamLog.open(url, name="horizon-setup")  # the streams, as `horizon up` makes them
    await setup.close()
    await stack.start_service("submission")
    await stack.start_service("inventory")
    for p in ("a", "b"):
        await stack.start_service("scheduling", partitions=(p,))
        await stack.start_service("placement", partitions=(p,))
    nc = await nats.connect(url)
    await admin(nc, "partition", c.PartitionConfigured(name="a", nodes=["n-00", "n-01"], default=True))
    await admin(nc, "partition", c.PartitionConfigured(name="b", nodes=["n-02", "n-03"]))
    await nc.close()
    await stack.start_agent()
    return stack


async def test_two_partition_pairs_run_their_jobs_on_their_nodes_and_the_audit_reproduces_them(nats_server, tmp_path):
    stack = await two_pairs(nats_server.url, tmp_path)
    js_nc = await nats.connect(nats_server.url)
    js = js_nc.jetstream()
    jobs = [(f"{p}-{i}", p) for i in range(6) for p in ("a", "b")]
    try:
        for job_id, p in jobs:
            await js.publish("horizon.in.acme.submit", job(job_id, p), headers={"Nats-Msg-Id": job_id})
        await succeeded(nats_server.url, {j for j, _ in jobs})
    finally:
        await js_nc.close()
        await stack.stop()
    records = await read_log(nats_server.url)
    owners = Counter(r.subject.split(".")[2] for r in records if r.subject.startswith("horizon.evt."))
    assert owners["scheduling"] == owners["placement"] == 0
    for r in records:
        if ".JobScheduled." in r.subject or ".SchedulingCycleCompleted." in r.subject:
            e = msgspec.json.decode(r.data)
            p = r.subject.split(".")[2].split("-", 1)[1]
            if "candidates" in e:
                assert all(j.startswith(p + "-") for j in e["candidates"]), r.subject
            else:
                assert e["job_id"].startswith(p + "-")
                nodes = {a["node"] for a in e["allocations"]}
                assert nodes <= ({"n-00", "n-01"} if p == "a" else {"n-02", "n-03"}), (e["job_id"], nodes)
    code, body = await audit_json(nats_server.url)
    assert code == 0 and body["mismatches"] == [], json.dumps(body["mismatches"][:2], indent=1)
    assert body["reproduced"] == body["decisions"] > 0
    assert {"scheduling-a", "scheduling-b", "placement-a", "placement-b"} <= set(body["services"])
    # each scheduling leader's fair-share ledger entries are among the decisions reproduced
    ledgers = {r.subject.split(".")[2] for r in records if ".UsageCharged." in r.subject}
    assert ledgers == {"scheduling-a", "scheduling-b"}, ledgers
    # Audited without the leaders' cores (the whole-cluster ones only), their decisions are not
    # replayed here, and not taken for impostors of the services they lead for.
    whole = audit(records, [make_core(name) for name in SERVICES])
    assert not [m for m in whole.mismatches if m["kind"] == IMPOSTOR], whole.mismatches[:2]
    checked = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.front.cli.main", "check", "--nats",
                                                   nats_server.url, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    said = (await checked.communicate())[0].decode()
    assert checked.returncode == 0, said  # the invariants hold, and every decision is reproduced


async def succeeded(url: str, jobs: set[str]) -> None:
    """Until every job in ``jobs`` has succeeded (polling the log; at most 30 s)."""
    ended: set[str] = set()
    for _ in range(300):
        ended |= {e.job_id for e in events_of(await read_log(url)) if isinstance(e, c.JobSucceeded)}
        if ended >= jobs:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"jobs that did not succeed: {sorted(jobs - ended)}")


async def audit_json(url: str) -> tuple[int, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.front.cli.main", "audit", "--nats", url, "--json",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert out, err.decode()
    return proc.returncode or 0, json.loads(out.decode().strip().splitlines()[-1])


async def test_two_leaders_racing_for_one_quota_never_start_more_than_it_allows(nats_server, tmp_path):
    """q may run one job. Leader b decides a cycle admitting qb and is held at the publish; leader
    a then admits qa, which is placed. b's cycle, decided before a's landed, is refused by the
    fence on every leader's cycles; b reads a's, counts qa, and qb waits."""
    stack = await two_pairs(nats_server.url, tmp_path)
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await admin(nc, "account", c.AccountConfigured(account="q", quota=c.Quota(running_jobs=1)))
    b = stack.parts["scheduling-b"].obj
    gate, held = asyncio.Event(), asyncio.Event()
    real = b.log.publish_fenced

    async def gated(items: Any, fence: Any) -> Any:
        if any(".SchedulingCycleCompleted." in i.subject for i in items) and not gate.is_set():
            held.set()
            await gate.wait()
        return await real(items, fence)

    b.log.publish_fenced = gated
    try:
        await js.publish("horizon.in.q.submit", job("qb", "b", tenant="q", account="q", sim_runtime_s=3600), headers={"Nats-Msg-Id": "qb"})
        await wait_until(held.is_set, 20, "leader b to decide a cycle admitting qb")
        await js.publish("horizon.in.q.submit", job("qa", "a", tenant="q", account="q", sim_runtime_s=3600), headers={"Nats-Msg-Id": "qa"})

        async def scheduled() -> list[str]:
            return [e.job_id for e in events_of(await read_log(nats_server.url)) if isinstance(e, c.JobScheduled)]

        for _ in range(200):
            if await scheduled():
                break
            await asyncio.sleep(0.1)
        assert await scheduled() == ["qa"]
        gate.set()
        await wait_until(lambda: b.stats.fenced >= 1, 20, "b's stale cycle to be fenced out")
        await wait_until(lambda: b.state.seq >= b.awaiting and b.idle_seq >= b.awaiting, 20, "b to settle")
        assert await scheduled() == ["qa"]  # qb waits: q's one running job is qa's
        waiting = b.core.why_waiting(b.state, b.state.pending["qb"])
        assert "quota" in waiting, waiting
    finally:
        await nc.close()
        await stack.stop()
    code, body = await audit_json(nats_server.url)
    assert code == 0 and body["mismatches"] == [], json.dumps(body["mismatches"][:2], indent=1)
    # and b's refused cycle is nowhere in the log
    cycles = [r for r in await read_log(nats_server.url) if r.subject.startswith("horizon.evt.scheduling-b.")]
    assert all("qb" not in msgspec.json.decode(r.data).get("candidates", ()) for r in cycles)
    # horizon check: no account over its quota at any point of the log, and every decision reproduced
    checked = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.front.cli.main", "check", "--nats",
                                                   nats_server.url, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    said = (await checked.communicate())[0].decode()
    assert checked.returncode == 0, said


async def snapshotting_leader(url: str) -> tuple[PartitionedSchedulingRunner, asyncio.Task[None], JetStreamLog]:
    """Partition a's scheduling leader, snapshotting every 10 records."""
    log_ = await JetStreamLog.open(url, name="scheduling-a-test", create=False)
    core = PartitionedSchedulingCore(partitions=("a",), snapshot_every=10)
    runner = PartitionedSchedulingRunner(log_, core, lease=Lease(log_.nc, core.name, ttl_s=5))
    task = asyncio.create_task(runner.run())
    await runner.ready.wait()
    return runner, task, log_


async def stop(task: asyncio.Task[None], log_: JetStreamLog) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await log_.close()


async def test_a_partition_leader_restarted_from_its_snapshot_decides_nothing_twice(nats_server, tmp_path):
    stack = await two_pairs(nats_server.url, tmp_path)
    old = stack.parts.pop("scheduling-a")  # a's scheduling leader, replaced by one that snapshots often
    await stop(old.task, old.log)
    runner, task, log_ = await snapshotting_leader(nats_server.url)
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    first = [(f"a-{i}", "a") for i in range(6)] + [("b-0", "b"), ("b-1", "b")]
    then = [(f"a-{i}", "a") for i in range(6, 10)] + [("b-2", "b")]
    try:
        for job_id, p in first:
            await js.publish("horizon.in.acme.submit", job(job_id, p), headers={"Nats-Msg-Id": job_id})
        await succeeded(nats_server.url, {j for j, _ in first})
        await runner.flush_snapshots()
        assert runner.stats.snapshots_saved >= 1
        decided = runner.stats.decisions
        await stop(task, log_)
        runner, task, log_ = await snapshotting_leader(nats_server.url)
        assert runner.stats.restored_from_seq > 0  # from the snapshot, open cycles and all
        await wait_until(lambda: runner.leading and runner.idle_seq >= runner.awaiting, 20, "the new leader to rest")
        assert runner.stats.decisions == 0 and decided > 0  # nothing left to decide: nothing decided again
        for job_id, p in then:
            await js.publish("horizon.in.acme.submit", job(job_id, p), headers={"Nats-Msg-Id": job_id})
        await succeeded(nats_server.url, {j for j, _ in then})
    finally:
        await nc.close()
        await stop(task, log_)
        await stack.stop()
    records = await read_log(nats_server.url)
    ids = Counter(msgspec.json.decode(r.data)["id"] for r in records if r.subject.startswith("horizon.evt."))
    assert [i for i, n in ids.items() if n > 1] == []
    starts = Counter(e.job_id for e in events_of(records) if isinstance(e, c.JobScheduled))
    assert set(starts.values()) == {1} and len(starts) == len(first) + len(then)
    code, body = await audit_json(nats_server.url)
    assert code == 0 and body["mismatches"] == [], json.dumps(body["mismatches"][:2], indent=1)
