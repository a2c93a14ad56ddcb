"""Preemption: one round of the cheapest victims, never within minimum runtime or past the limit,
fair-share reclaim of borrowed quota, gangs whole, rate limits, and the whole log afterwards."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from events.codec import decode
from events.subjects import admin_subject
from services.nodes.spec import local_nodes
from services.preemption.core import PreemptionCore
from services.front.host.check import check_log
from services.front.registry import make_core
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from tests.helpers import Feed, accepted, node, ready

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


def _attempts(f: Feed, job_id: str, alloc: c.NodeAllocation, preempted: int, dt: float = 1.0) -> None:
    """An accepted job's attempts 1..``preempted`` each preempted (for someone) and requeued, as the
    log tells it; then its next attempt placed and started ``dt`` seconds later."""
    for attempt in range(1, preempted + 2):
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=attempt, allocations=[alloc]), dt=0.0)
        if attempt <= preempted:
            f.evt("agent", c.JobStarted(job_id=job_id, attempt=attempt, node=alloc.node), dt=0.0)
            f.evt("agent", c.JobPreempted(job_id=job_id, attempt=attempt, for_job=f"earlier{attempt}"), dt=0.0)
            f.evt("scheduling", c.JobRequeued(job_id=job_id, attempt=attempt, basis_seq=1), dt=0.0)
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=preempted + 1, node=alloc.node), dt=dt)


@st.composite
def running_clusters(draw):
    """Running jobs of random class, age, minimum runtime and preemption history (real JobPreempted
    events, up to and past a random limit); one critical job waits."""
    f = Feed(PreemptionCore())
    t0 = f.time
    limit = draw(st.integers(1, 3))
    f.admin("preemption", c.PreemptionConfigured(max_preemptions=limit))
    nodes = draw(st.integers(1, 4))
    for n in range(nodes):
        f.evt("agent", node(f"n{n}", gpus=8))
        f.evt("inventory", c.NodeReady(node=f"n{n}", basis_seq=1))
    count = draw(st.integers(1, 16))
    placed: dict[str, int] = {}
    history: dict[str, int] = {}
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
        history[job_id] = draw(st.sampled_from([0, 0, 1, 2, 3]))
        _attempts(f, job_id, c.NodeAllocation(node=f"n{n}", device_ids=[f"gpu{used + k}" for k in range(gpus)],
                                              cpus_milli=1000, memory_bytes=1 << 30),
                  preempted=history[job_id], dt=draw(st.sampled_from([1.0, 120.0])))
    assert {j: f.state.preempted.get(j, 0) for j in history} == history  # the core counted what the log says
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
    """The same kind of cluster, but each bar lifted in turn: it does preempt. ``old`` is within
    its minimum runtime for an hour; ``worn``, younger (cheaper), has been preempted 3 times."""
    f = Feed(PreemptionCore())
    for n in ("n0", "n1"):
        f.evt("agent", node(n, gpus=8))
        f.evt("inventory", c.NodeReady(node=n, basis_seq=1))
    f.evt("submission", accepted("old", gpus=8, min_runtime_s=3600.0))
    f.evt("placement", c.JobScheduled(job_id="old", attempt=1, allocations=[c.NodeAllocation(
        node="n0", device_ids=[f"gpu{k}" for k in range(8)], cpus_milli=1000, memory_bytes=1 << 30)]))
    f.evt("agent", c.JobStarted(job_id="old", attempt=1, node="n0"))
    f.evt("submission", accepted("worn", gpus=8))
    _attempts(f, "worn", c.NodeAllocation(node="n1", device_ids=[f"gpu{k}" for k in range(8)], cpus_milli=1000,
                                          memory_bytes=1 << 30), preempted=3, dt=60.0)
    assert f.state.preempted == {"worn": 3}
    f.evt("submission", accepted("vip", gpus=8, priority_class="critical"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["vip"], basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    assert core_victims(f) == []  # old within its minimum runtime, worn at the limit (3)
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=3600.0)
    assert core_victims(f) == ["old"]
    f.admin("preemption", c.PreemptionConfigured(max_preemptions=4))
    assert core_victims(f) == ["worn"]  # under the new limit, the cheaper one


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
    for_big = [(e, r.time) for e, r in zip(events, records)
               if isinstance(e, c.PreemptionRequested) and e.for_job == "big"]
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


# --------------------------------------------------------------------------------------------- pure, fed by hand


def _cluster(*names: str) -> Feed:
    f = Feed(PreemptionCore())
    for name in names:
        f.evt("agent", node(name, gpus=8))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
    return f


def _running(f: Feed, job_id: str, on: str, first_gpu: int, gpus: int, dt: float = 1.0, **kw) -> None:
    """``job_id`` accepted, placed on GPUs ``first_gpu``.. of ``on`` and started ``dt`` seconds later."""
    f.evt("submission", accepted(job_id, gpus=gpus, **kw), dt=0.0)
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(
        node=on, device_ids=[f"gpu{first_gpu + k}" for k in range(gpus)], cpus_milli=1000, memory_bytes=1 << 30)]),
        dt=0.0)
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=on), dt=dt)


def _left_blocked(f: Feed, cycle: int, *job_ids: str) -> None:
    """A scheduling cycle offered ``job_ids`` and placement completed it without placing them."""
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=cycle, candidates=list(job_ids), basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=cycle, blocked=len(job_ids)))


def _preempted(f: Feed, request: c.PreemptionRequested) -> None:
    """The agent stopped the victim and scheduling requeued it."""
    f.evt("agent", c.JobPreempted(job_id=request.job_id, attempt=request.attempt, for_job=request.for_job))
    f.evt("scheduling", c.JobRequeued(job_id=request.job_id, attempt=request.attempt, basis_seq=1), dt=0.0)


def _requests(events: list[c.Event]) -> list[c.PreemptionRequested]:
    return [e for e in events if isinstance(e, c.PreemptionRequested)]


def test_the_per_account_limit_counts_each_victim_account_apart():
    """Two of account a's jobs per minute: a second set of two more of a's waits, while a set
    whose victim is of account b goes ahead in the same minute (the cluster-wide 60 is far off)."""
    f = _cluster("n0", "n1")
    f.admin("preemption", c.PreemptionConfigured(per_account_per_minute=2))
    for i in range(2):  # b's jobs ran for long (dear), a's just started (cheap)
        _running(f, f"b{i}", "n1", 4 * i, 4, account="b", priority_class="low")
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=1000.0)
    for i in range(4):
        _running(f, f"a{i}", "n0", 2 * i, 2, account="a", priority_class="low")
    for vip in ("vip1", "vip2"):
        f.evt("submission", accepted(vip, gpus=4, priority_class="critical", account="ops"))
    _left_blocked(f, 1, "vip1", "vip2")
    first = f.decide()
    # vip1 takes a2, a3; vip2's cheapest set is then a0, a1: 2 + 2 of account a > 2, so it waits whole
    assert [(e.job_id, e.for_job) for e in _requests(first)] == [("a2", "vip1"), ("a3", "vip1")]
    assert f.core.plan(f.state, "vip2", taken={"a2", "a3"}).victims == ["a0", "a1"]
    for event in first:
        f.evt("preemption", event, dt=0.001)
    # n0 is now held for vip1: vip2's cheapest set is b1, and b has lost no job this minute
    assert [(e.job_id, e.for_job) for e in _requests(f.decide())] == [("b1", "vip2")]


def test_a_round_held_back_by_the_limit_goes_ahead_when_the_window_slides_by_log_time():
    f = _cluster("n0")
    f.admin("preemption", c.PreemptionConfigured(per_account_per_minute=2))
    for i in range(4):
        _running(f, f"r{i}", "n0", 2 * i, 2, account="a", priority_class="low")
    f.evt("submission", accepted("vip1", gpus=4, priority_class="critical"))
    _left_blocked(f, 1, "vip1")
    first = _requests(f.settle())
    assert sorted(e.job_id for e in first) == ["r2", "r3"]
    asked_at = f.time
    for request in first:
        _preempted(f, request)
    f.evt("placement", c.JobScheduled(job_id="vip1", attempt=1, allocations=[c.NodeAllocation(
        node="n0", device_ids=[f"gpu{k}" for k in range(4, 8)], cpus_milli=1000, memory_bytes=1 << 30)]))
    f.evt("submission", accepted("vip2", gpus=4, priority_class="critical"))
    _left_blocked(f, 2, "vip2")
    assert f.core.plan(f.state, "vip2").victims == ["r0", "r1"]
    assert _requests(f.decide()) == []  # two more of a's within the minute: it waits
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=asked_at + 59.5 - f.time)
    assert _requests(f.decide()) == []  # still inside the 60 s of log time
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=1.0)
    later = _requests(f.decide())
    assert sorted(e.job_id for e in later) == ["r0", "r1"] and all(e.for_job == "vip2" for e in later)
    assert all(e.ts == f.state.now == asked_at + 60.5 for e in later)  # decided at the time of the log


def _a_victim_asks_again(for_job: str) -> Feed:
    """``mid`` (high) is stopped and requeued — preempted for ``boss``, or evicted (``for_job`` "") —
    while ``boss`` takes its node; placement then leaves ``mid`` blocked, and ``old`` (low) runs."""
    f = _cluster("n0", "n1")
    _running(f, "old", "n1", 0, 8, priority_class="low", dt=10_000.0)  # dear: it has run for hours
    _running(f, "mid", "n0", 0, 8, priority_class="high")
    f.evt("submission", accepted("boss", gpus=8, priority_class="critical"))
    request = c.PreemptionRequested(job_id="mid", attempt=1, for_job=for_job, grace_period_s=30.0, basis_seq=1)
    if for_job:
        _left_blocked(f, 1, "boss")
        [request] = _requests(f.settle())  # boss preempts the cheaper one, mid
        assert (request.job_id, request.for_job) == ("mid", "boss")
    else:
        f.evt("inventory", request)  # a NoExecute taint on n0, say
    _preempted(f, request)
    f.evt("placement", c.JobScheduled(job_id="boss", attempt=1, allocations=[c.NodeAllocation(
        node="n0", device_ids=[f"gpu{k}" for k in range(8)], cpus_milli=1000, memory_bytes=1 << 30)]))
    _left_blocked(f, 2, "mid")
    assert f.core.plan(f.state, "mid").victims == ["old"]  # by class alone, mid could preempt old
    return f


def test_a_job_preempted_for_another_does_not_preempt_in_turn_until_it_runs_again():
    f = _a_victim_asks_again(for_job="boss")
    assert _requests(f.decide()) == []  # no cascade
    f.evt("agent", c.JobSucceeded(job_id="old", attempt=1, exit_code=0))
    f.evt("placement", c.JobScheduled(job_id="mid", attempt=2, allocations=[c.NodeAllocation(
        node="n1", device_ids=[f"gpu{k}" for k in range(8)], cpus_milli=1000, memory_bytes=1 << 30)]))
    assert "mid" not in f.state.no_cascade  # it runs again: the bar is lifted


def test_an_evicted_job_is_not_barred_it_was_preempted_for_nobody():
    f = _a_victim_asks_again(for_job="")
    assert [(e.job_id, e.for_job) for e in _requests(f.decide())] == [("old", "mid")]


def test_a_preemptor_asks_once_per_round_and_again_only_when_a_later_cycle_leaves_it_blocked():
    f = _cluster("n0", "n1")
    for i, n in enumerate(("n0", "n0", "n1", "n1")):
        _running(f, f"l{i}", n, 4 * (i % 2), 4, priority_class="low")
    f.evt("submission", accepted("boss", gpus=8, priority_class="critical"))
    _left_blocked(f, 1, "boss")
    first = _requests(f.settle())
    assert sorted(e.job_id for e in first) == ["l2", "l3"]  # the youngest node
    _left_blocked(f, 2, "boss")
    assert f.core.plan(f.state, "boss").victims == ["l0", "l1"]  # what it would take, were it free to
    assert _requests(f.decide()) == []  # its victims are still stopping: it waits for them
    f.evt("inventory", c.NodeCordoned(node="n1"))  # meanwhile its room becomes useless
    for request in first:
        _preempted(f, request)
    assert f.state.held == {"n1": frozenset({"boss"})}
    assert f.core.plan(f.state, "boss").victims == ["l0", "l1"]
    assert _requests(f.decide()) == []  # they stopped: the next placement cycle is to place it there
    _left_blocked(f, 3, "boss")  # it leaves it blocked: now it preempts again
    assert sorted(e.job_id for e in _requests(f.decide())) == ["l0", "l1"]


def test_the_ledger_follows_its_views_one_table_and_holds_room_as_placement_does():
    """Preemption folds one job table, its scheduler's view's: each event applied to it once, and a job
    that ended for good settled as scheduling and placement settle it. So a ``PreemptionRequested`` that
    lands after its victim ended holds none of the victim's old GPUs for the preemptor in preemption's
    fold, as in placement's (which holds the room the preemptor then gets)."""
    feeds = [Feed(PreemptionCore()), Feed(make_core("placement"))]
    alloc = c.NodeAllocation(node="n1", device_ids=[f"gpu{i}" for i in range(8)], cpus_milli=8000,
                             memory_bytes=2**30)
    for f in feeds:
        ready(f, node("n1"))
        f.evt("submission", accepted("victim", gpus=8))
        f.evt("placement", c.JobScheduled(job_id="victim", attempt=1, allocations=[alloc]))
        f.evt("agent", c.JobStarted(job_id="victim", attempt=1, node="n1"))
        f.evt("submission", accepted("urgent", gpus=8, priority_class="critical"))
        f.evt("agent", c.JobSucceeded(job_id="victim", attempt=1, node="n1"))  # ends before the request lands
        f.evt("preemption", c.PreemptionRequested(job_id="victim", attempt=1, for_job="urgent"))
    pre, placed = feeds[0].state, feeds[1].state
    assert pre.jobs is pre.sched.jobs
    assert "victim" in pre.jobs.settled and "victim" not in pre.jobs.jobs
    assert pre.jobs.settled == placed.jobs.settled and list(pre.jobs.jobs) == list(placed.jobs.jobs) == ["urgent"]
    assert pre.held == placed.held == {}
    assert pre.cluster.nodes["n1"].used_devices == placed.cluster.nodes["n1"].used_devices == {}
    assert not pre.stopping
