"""Preemption: one round of the cheapest victims, never within minimum runtime or past the limit,
fair-share reclaim of borrowed quota, gangs whole, rate limits, and the whole log afterwards."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from events.codec import decode
from events.subjects import admin_subject
from services.agent.app import local_nodes
from services.preemption.core import PreemptionCore
from services.runtime.check import check_log
from services.sim.driver import InProcessBus, SimSettings, make_cores, simulate
from services.sim.traces import SimJob
from tests.helpers import Feed, accepted, node

HOUR = 3600.0


def _sim(jobs: list[SimJob], nodes: int = 2, config: list[tuple[str, c.Event]] = ()):
    settings_ = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=8)
    bus = InProcessBus(make_cores(settings_), keep_records=True)

    async def go():
        await bus.publish([(admin_subject(verb), ev) for verb, ev in config])
        return await simulate(jobs, local_nodes(nodes, gpus_per_node=8, prefix="n"), settings_, bus)

    run = asyncio.run(go())
    events = [decode(r.data) for r in bus.records]
    return run, events, bus.records


def test_a_critical_job_on_a_full_cluster_preempts_the_cheapest_victims_once():
    # one node: an 8-GPU job; the other: eight 1-GPU jobs started at different times (0..700 s)
    jobs = [SimJob("wide", 0.0, 4 * HOUR, 4 * HOUR, gpus=8)]
    jobs += [SimJob(f"small{i}", 100.0 * i, 4 * HOUR, 4 * HOUR, gpus=1) for i in range(8)]
    jobs += [SimJob("urgent", 1000.0, 600.0, 600.0, gpus=4, priority_class="critical")]
    run, events, records = _sim(jobs)
    requests = [e for e in events if isinstance(e, c.PreemptionRequested)]
    # one round: four 1-GPU jobs (4 GPUs lost) rather than the 8-GPU one; the youngest (least work lost)
    assert sorted(e.job_id for e in requests) == ["small4", "small5", "small6", "small7"]
    assert len({e.basis_seq for e in requests}) == 1 and all(e.for_job == "urgent" for e in requests)
    assert run.results["urgent"].start_s == 1000.0  # at once: the victims' GPUs were held for it
    assert run.results["urgent"].attempts[0].nodes == run.results["small7"].attempts[0].nodes  # where it freed room
    for i in range(4, 8):  # victims requeued and finished later, as attempt 2
        attempts = run.results[f"small{i}"].attempts
        assert [a.outcome for a in attempts] == ["PREEMPTED", "SUCCEEDED"]
    assert all(r.state == "SUCCEEDED" for r in run.results.values())
    report = check_log(records)
    assert report.ok, report.problems[:3]
    # the requeue kept each victim's age: its acceptance time is unchanged
    requeued = [e for e in events if isinstance(e, c.JobRequeued)]
    assert sorted(e.job_id for e in requeued) == ["small4", "small5", "small6", "small7"]


def test_equal_classes_and_low_classes_do_not_preempt():
    jobs = [SimJob(f"n{i}", 0.0, HOUR, HOUR, gpus=8) for i in range(2)]
    jobs += [SimJob("normal", 10.0, 60.0, 60.0, gpus=8), SimJob("low", 10.0, 60.0, 60.0, gpus=8, priority_class="low")]
    _, events, _ = _sim(jobs)
    assert not [e for e in events if isinstance(e, c.PreemptionRequested)]


# ---------------------------------------------------------------------------------------------


@st.composite
def running_clusters(draw):
    """Running jobs of random class, age, minimum runtime and preemption history; one critical job waits."""
    f = Feed(PreemptionCore())
    t0 = f.time
    nodes = draw(st.integers(1, 4))
    for n in range(nodes):
        f.evt("agent", node(f"n{n}", gpus=8))
        f.evt("inventory", c.NodeReady(node=f"n{n}", basis_seq=1))
    count = draw(st.integers(1, 16))
    placed: dict[str, int] = {}
    for j in range(count):
        n = draw(st.integers(0, nodes - 1))
        gpus = draw(st.sampled_from([1, 2, 4]))
        used = placed.get(f"n{n}", 0)
        if used + gpus > 8:
            continue
        placed[f"n{n}"] = used + gpus
        job_id = f"r{j}"
        f.evt("submission", accepted(job_id, gpus=gpus, priority_class=draw(st.sampled_from(["high", "normal", "low"])),
                                     min_runtime_s=float(draw(st.sampled_from([0, 60, 3600, 86400])))))
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(
            node=f"n{n}", device_ids=[f"gpu{used + k}" for k in range(gpus)], cpus_milli=1000, memory_bytes=1 << 30)]))
        f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=f"n{n}"), dt=draw(st.sampled_from([1.0, 120.0])))
        for _ in range(draw(st.sampled_from([0, 0, 3]))):  # preempted three times already: at the limit
            f.state.preempted[job_id] = f.state.preempted.get(job_id, 0) + 1
    f.evt("submission", accepted("vip", gpus=draw(st.sampled_from([2, 8])), priority_class="critical"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["vip"], basis_seq=1))
    f.evt("placement", c.PlacementBlocked(job_id="vip", cycle=1, reasons=[c.BlockReason(reason="full", nodes=nodes)]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    return f, t0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(running_clusters())
def test_never_a_victim_within_its_minimum_runtime_or_past_its_preemption_limit(scenario):
    f, _t0 = scenario
    core, state = f.core, f.state
    chosen = [e.job_id for e in core.decide(state) if isinstance(e, c.PreemptionRequested)]
    assert chosen == core.plan(state, "vip").victims  # the decision is the plan
    for job_id in chosen:
        victim = state.jobs.get(job_id)
        assert state.now - victim.started_ts >= victim.spec.min_runtime_s
        assert state.preempted.get(job_id, 0) < state.config.max_preemptions
        assert victim.spec.priority_class != "critical"


def test_the_property_is_not_vacuous():
    """The same kind of cluster, but every job eligible: it does preempt."""
    f = Feed(PreemptionCore())
    f.evt("agent", node("n0", gpus=8))
    f.evt("inventory", c.NodeReady(node="n0", basis_seq=1))
    f.evt("submission", accepted("old", gpus=8, min_runtime_s=3600.0))
    f.evt("placement", c.JobScheduled(job_id="old", attempt=1, allocations=[c.NodeAllocation(
        node="n0", device_ids=[f"gpu{k}" for k in range(8)], cpus_milli=1000, memory_bytes=1 << 30)]))
    f.evt("agent", c.JobStarted(job_id="old", attempt=1, node="n0"))
    f.evt("submission", accepted("vip", gpus=8, priority_class="critical"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["vip"], basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    assert core_victims(f) == []  # within its minimum runtime
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=3600.0)
    assert core_victims(f) == ["old"]


def core_victims(f: Feed) -> list[str]:
    return [e.job_id for e in f.decide() if isinstance(e, c.PreemptionRequested)]


# ---------------------------------------------------------------------------------------------


def test_fair_share_reclaim_preempts_only_borrowed_jobs_down_to_the_borrowers_quota():
    config = [
        ("account", c.AccountConfigured(account="org")),
        ("account", c.AccountConfigured(account="a", parent="org", quota=c.Quota(gpus=8), borrowing=True)),
        ("account", c.AccountConfigured(account="b", parent="org", quota=c.Quota(gpus=8))),
    ]
    jobs = [SimJob(f"a{i:02d}", 0.0, 4 * HOUR, 4 * HOUR, gpus=4, account="a", user="u") for i in range(4)]
    jobs += [SimJob(f"b{i:02d}", HOUR, HOUR, HOUR, gpus=4, account="b", user="u") for i in range(2)]
    run, events, records = _sim(jobs, nodes=2, config=config)
    borrowed = {e.job_id for e in events if isinstance(e, c.JobScheduled) and e.borrowed and e.attempt == 1}
    assert len(borrowed) == 2  # a's own quota is 8 of its 16 GPUs
    requests = [e for e in events if isinstance(e, c.PreemptionRequested)]
    assert {e.job_id for e in requests} == borrowed  # exactly the borrowed ones: a is back at its quota
    assert all("borrowed" in e.reason for e in requests)
    assert all(run.results[f"b{i:02d}"].start_s == HOUR for i in range(2))  # b gets its quota back at once
    assert check_log(records).ok


def test_gang_victims_go_whole_and_a_gang_preemptor_takes_all_its_nodes_or_nobody():
    # a 2-node low-priority gang on n0+n1, normal singles on n2, n3
    jobs = [SimJob("gang", 0.0, 4 * HOUR, 4 * HOUR, gpus=16, nodes=2, priority_class="low")]
    jobs += [SimJob(f"s{i}", 0.0, 4 * HOUR, 4 * HOUR, gpus=8) for i in range(2)]
    # a critical 3-node gang: needs the low gang's two nodes and one single's node
    jobs += [SimJob("boss", 600.0, 600.0, 600.0, gpus=24, nodes=3, priority_class="critical")]
    # a high 4-node gang that could only take everything but the critical one holds: preempts nobody
    jobs += [SimJob("big", 700.0, 600.0, 600.0, gpus=32, nodes=4, priority_class="high")]
    run, events, records = _sim(jobs, nodes=4)
    requests = [e for e in events if isinstance(e, c.PreemptionRequested)]
    first_round = [e for e in requests if e.for_job == "boss"]
    # 24 GPUs: the low gang (two nodes at once) and one 8-GPU single, not both singles and the gang (32)
    assert sorted(e.job_id for e in first_round) in (["gang", "s0"], ["gang", "s1"])
    assert [a.outcome for a in run.results["gang"].attempts][0] == "PREEMPTED"
    assert len(run.results["boss"].attempts[0].nodes) == 3  # all of its nodes at once
    assert not [e for e in requests if e.for_job == "big" and e.job_id == "boss"]  # the critical job is not a victim of high
    # While boss runs, big cannot have four nodes (boss holds three and is no victim of high): it
    # preempts nobody, although placement left it blocked and the normal single it could preempt
    # ran all along; only once boss has ended does it preempt, and then it takes its four nodes.
    boss_end = run.results["boss"].attempts[0].end_s
    survivor = next(s for s in ("s0", "s1") if s not in {e.job_id for e in first_round})
    assert run.results[survivor].attempts[0].end_s >= boss_end  # running, and of a class big may preempt
    assert any(isinstance(e, c.PlacementBlocked) and e.job_id == "big" and r.time < boss_end
               for e, r in zip(events, records))
    for_big = [(e, r.time) for e, r in zip(events, records) if isinstance(e, c.PreemptionRequested) and e.for_job == "big"]
    assert for_big and all(t >= boss_end for _, t in for_big)
    assert [e.job_id for e, _ in for_big] == [survivor]
    assert len(run.results["big"].attempts[0].nodes) == 4 and run.results["big"].start_s == boss_end


def test_rate_limits_hold_a_round_back_whole():
    core = PreemptionCore()
    f = Feed(core)
    f.evt("agent", node("n0", gpus=8))
    f.evt("inventory", c.NodeReady(node="n0", basis_seq=1))
    f.admin("preemption", c.PreemptionConfigured(per_minute=1))
    f.admin("preemption", c.PreemptionConfigured(rules={"low": ["critical"]}))  # refused: not a lower class
    for i in range(2):
        f.evt("submission", accepted(f"r{i}", gpus=4, priority_class="low"))
        f.evt("placement", c.JobScheduled(job_id=f"r{i}", attempt=1, allocations=[c.NodeAllocation(
            node="n0", device_ids=[f"gpu{4 * i + k}" for k in range(4)], cpus_milli=1000, memory_bytes=1 << 30)]))
        f.evt("agent", c.JobStarted(job_id=f"r{i}", attempt=1, node="n0"))
    f.evt("submission", accepted("vip", gpus=8, priority_class="critical"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["vip"], basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    out = f.settle()
    [rejected] = [e for e in out if isinstance(e, c.ConfigRejected)]
    assert "may only preempt lower classes" in rejected.reason
    assert not [e for e in out if isinstance(e, c.PreemptionRequested)]  # 2 victims > 1 per minute: nobody
    plan = core.plan(f.state, "vip")
    assert plan.victims == ["r0", "r1"] and plan.cost[0] == 8.0
    f.admin("preemption", c.PreemptionConfigured(per_minute=2))
    assert sorted(e.job_id for e in f.decide() if isinstance(e, c.PreemptionRequested)) == ["r0", "r1"]


def test_room_held_for_one_preemptor_is_not_counted_by_another():
    """Victims stopped for ``first`` leave room on n0 that placement holds for it; a second
    preemptor's plan must not take that room as free (nor make room there): it preempts on n1."""
    f = Feed(PreemptionCore())
    for n in ("n0", "n1"):
        f.evt("agent", node(n, gpus=8))
        f.evt("inventory", c.NodeReady(node=n, basis_seq=1))
    for job_id, n, first_gpu in (("l0", "n0", 0), ("l1", "n0", 4), ("l2", "n1", 0), ("l3", "n1", 4)):
        f.evt("submission", accepted(job_id, gpus=4, priority_class="low"))
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(
            node=n, device_ids=[f"gpu{first_gpu + k}" for k in range(4)], cpus_milli=1000, memory_bytes=1 << 30)]))
        f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=n))
    f.evt("submission", accepted("first", gpus=4, priority_class="critical"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["first"], basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    [request] = [e for e in f.decide() if isinstance(e, c.PreemptionRequested)]
    f.evt("preemption", request)
    f.evt("agent", c.JobPreempted(job_id=request.job_id, attempt=1, for_job="first"))
    held_node = "n0" if request.job_id in ("l0", "l1") else "n1"
    assert f.state.held == {held_node: frozenset({"first"})}
    # a second critical job arrives before ``first`` is placed: the free room is not its room
    f.evt("submission", accepted("second", gpus=4, priority_class="critical"))
    plan = f.core.plan(f.state, "second")
    other = "n1" if held_node == "n0" else "n0"
    assert plan.victims and plan.nodes == [other]
    # once ``first`` starts, its room is no longer held
    f.evt("placement", c.JobScheduled(job_id="first", attempt=1, allocations=[c.NodeAllocation(
        node=held_node, device_ids=[f"gpu{k}" for k in range(4)], cpus_milli=1000, memory_bytes=1 << 30)]))
    assert f.state.held == {}
