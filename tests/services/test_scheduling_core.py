"""Scheduling's pure core: order, cycle batching, requeue."""

from __future__ import annotations

from events import catalogue as c
from services.scheduling.core import SchedulingCore
from tests.helpers import Feed, accepted, node


def test_order_is_class_then_first_come_first_served():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("low-1", priority_class="low"))
    f.evt("submission", accepted("norm-1"))
    f.evt("submission", accepted("crit-1", priority_class="critical"))
    f.evt("submission", accepted("norm-2"))
    [cycle] = f.settle()
    assert isinstance(cycle, c.SchedulingCycleCompleted)
    assert cycle.candidates == ["crit-1", "norm-1", "norm-2", "low-1"]
    assert (cycle.cycle, cycle.queued, cycle.basis_seq) == (1, 4, 5)


def test_a_burst_waits_for_placement_and_becomes_one_cycle():
    f = Feed(SchedulingCore())
    f.evt("submission", accepted("j0"))
    [first] = f.settle()
    for i in range(1, 1001):
        f.evt("submission", accepted(f"j{i}"))
        assert f.decide() == []  # placement has not finished cycle 1
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1, basis_seq=3))
    f.evt("placement", c.JobScheduled(job_id="j0", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    [second] = f.settle()
    assert second.cycle == 2 and len(second.candidates) == 1000 and second.candidates[0] == "j1"
    f.evt("placement", c.PlacementCycleCompleted(cycle=2, scheduled=0, basis_seq=second.basis_seq))
    assert f.decide() == []  # nothing changed since: no third cycle


def test_candidates_are_capped_and_a_capped_cycle_that_placed_something_continues():
    f = Feed(SchedulingCore(max_candidates=10))
    for i in range(25):
        f.evt("submission", accepted(f"j{i:02d}"))
    [cycle] = f.settle()
    assert len(cycle.candidates) == 10 and cycle.queued == 25
    for i in range(10):
        f.evt("placement", c.JobScheduled(job_id=f"j{i:02d}", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=10))
    [nxt] = f.settle()
    assert nxt.candidates[0] == "j10" and len(nxt.candidates) == 10


def test_a_cycle_says_its_cap_and_a_fold_reads_cut_cycles_by_the_cap_they_say():
    assert SchedulingCore().max_candidates == 2_500  # the default (services/domain/queue/fold.py)
    f = Feed(SchedulingCore(max_candidates=10))
    for i in range(10):
        f.evt("submission", accepted(f"j{i:02d}"))
    [cycle] = f.settle()
    assert cycle.max_candidates == 10 and len(cycle.candidates) == 10
    assert f.state.cycle_truncated  # exactly the cap: cut there
    # a cycle from a log before the field (max_candidates 0) was cut at its own scheduler's cap, not ours
    wide = Feed(SchedulingCore(max_candidates=10))
    wide.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, basis_seq=1, candidates=[f"k{i}" for i in range(10)],
                                                      max_candidates=20))
    assert not wide.state.cycle_truncated
    old = Feed(SchedulingCore(max_candidates=10))
    old.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, basis_seq=1, candidates=[f"k{i}" for i in range(10)]))
    assert old.state.cycle_truncated


def test_freed_capacity_triggers_a_cycle_and_failures_requeue_by_policy():
    f = Feed(SchedulingCore())
    f.evt("submission", accepted("retry", restart_policy="on-failure", max_retries=1))
    f.evt("submission", accepted("waiting"))
    f.settle()
    f.evt("placement", c.JobScheduled(job_id="retry", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1))
    assert f.decide() == []
    f.evt("agent", c.JobFailed(job_id="retry", attempt=1, exit_code=2, reason="exit code 2"))
    out = f.settle()
    assert isinstance(out[0], c.JobRequeued) and out[0].attempt == 1
    assert out[0].not_before_ts == out[0].ts + 10.0  # first retry: the base backoff
    assert isinstance(out[1], c.SchedulingCycleCompleted) and out[1].candidates == ["waiting"]
    # the requeue folds back: pending again, but in backoff: not a candidate until 10 s later
    f.evt("placement", c.PlacementCycleCompleted(cycle=2, scheduled=0))
    [cycle3] = f.settle()
    assert cycle3.candidates == ["waiting"]
    f.evt("placement", c.PlacementCycleCompleted(cycle=3, scheduled=0))
    assert f.decide() == []
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=10.0)  # time passes: the backoff is over
    [cycle4] = f.settle()
    assert cycle4.candidates == ["retry", "waiting"]  # first again: older
    f.evt("placement", c.JobScheduled(job_id="retry", attempt=2, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("agent", c.JobFailed(job_id="retry", attempt=2, exit_code=2))
    assert not any(isinstance(e, c.JobRequeued) for e in f.settle())  # retries used up


def test_certainly_blocked_jobs_do_not_crowd_out_the_queue_behind_them():
    f = Feed(SchedulingCore(max_candidates=3, policy="fcfs"))
    for i in range(3):
        f.evt("submission", accepted(f"big{i}", gpus=64, priority_class="high"))
    for i in range(2):
        f.evt("submission", accepted(f"wide{i}", gpus=8, priority_class="high"))
    f.evt("submission", accepted("small"))
    f.evt("submission", accepted("tiny"))
    [first] = f.settle()
    assert first.candidates == ["big0", "big1", "big2"]
    for i in range(3):  # no node has 64 GPUs: they fit nowhere, until the set of nodes changes
        f.evt("placement", c.PlacementBlocked(job_id=f"big{i}", cycle=1, basis_seq=first.basis_seq + 1, fits_nowhere=True,
                                              reasons=[c.BlockReason(reason="has 8 GPUs, needs 64", nodes=1)]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=0, blocked=3, basis_seq=first.basis_seq + 1))
    f.evt("submission", accepted("newer", priority_class="low"))
    [second] = f.settle()
    assert second.candidates == ["wide0", "wide1", "small"]
    # placement starts "small"; the wide ones stay pending: blocked at placement's basis
    f.evt("placement", c.JobScheduled(job_id="small", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=2, scheduled=1, blocked=2, basis_seq=f.seq))
    [third] = f.settle()  # the cut cycle placed something: go on; only the first blocked job stays, as the head
    assert third.candidates == ["wide0", "tiny", "newer"]
    f.evt("placement", c.PlacementCycleCompleted(cycle=3, scheduled=0, blocked=3, basis_seq=f.seq))
    f.evt("agent", c.JobSucceeded(job_id="small", attempt=1))  # capacity comes back: all but the nowhere-fitting
    [fourth] = f.settle()
    assert fourth.candidates == ["wide0", "wide1", "tiny"]
    f.evt("placement", c.PlacementCycleCompleted(cycle=4, scheduled=0, blocked=3, basis_seq=f.seq))
    f.evt("inventory", c.NodeReady(node="n9"))  # a node changed: the big ones are candidates again
    [fifth] = f.settle()
    assert fifth.candidates == ["big0", "big1", "big2"]


def test_policies_order_within_a_class():
    from services.domain.policy import Context, make_policy
    from services.domain.jobs import Job, JobState
    from tests.helpers import spec

    def job(job_id, seq, submit, est, gpus):
        return Job(job_id, spec(gpus=gpus, time_limit_s=est), JobState.PENDING, accepted_seq=seq, accepted_ts=submit)

    jobs = [job("a", 1, 100.0, 3600, 4), job("b", 2, 200.0, 60, 64), job("c", 3, 300.0, 600, 1)]
    order = {name: [j.job_id for j in sorted(jobs, key=lambda j: make_policy(name).key(j, Context(1000.0)))]
             for name in ("fcfs", "sjf", "f1", "multifactor")}
    assert order["fcfs"] == ["a", "b", "c"]
    assert order["sjf"] == ["b", "c", "a"]
    # F1 = log10(est)*size + 870*log10(submit): a 1740+14.2=1754.2, b 2001.9+113.8=2115.7, c 2155.1+2.8=2157.9
    assert order["f1"] == ["a", "b", "c"]
    # multifactor (default weights; class and fair share equal for all three), age + estimate + size:
    # b 1.32 + 4000*3600/3660 + 500/(1+log2 64) = 1.32+3934.43+71.43 = 4007.2
    # c 0.99 + 4000*3600/4200 + 500/1 = 0.99+3428.57+500 = 3929.6
    # a 1.49 + 4000*3600/7200 + 500/(1+2) = 1.49+2000+166.67 = 2168.2
    assert order["multifactor"] == ["b", "c", "a"]


def test_dependencies_gate_candidates_and_end_jobs_they_can_never_satisfy():
    from events import catalogue as c
    from tests.helpers import spec

    def acc(job_id, *deps):
        return c.JobAccepted(id=f"submission/JobAccepted/{job_id}", job_id=job_id, correlation_id=job_id,
                             source="submission", basis_seq=1,
                             spec=spec(dependencies=tuple(c.Dependency(kind=k, job_id=d) for k, d in deps)))

    f = Feed(SchedulingCore())
    f.evt("submission", acc("a"))
    f.evt("submission", acc("ok", ("after-ok", "a")))
    f.evt("submission", acc("notok", ("after-not-ok", "a")))
    f.evt("submission", acc("any", ("after-any", "a")))
    f.evt("submission", acc("started", ("after", "a")))
    [cycle] = f.settle()
    assert cycle.candidates == ["a"]
    f.evt("placement", c.JobScheduled(job_id="a", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1, basis_seq=f.seq))
    f.evt("agent", c.JobStarted(job_id="a", attempt=1, node="n1"))
    [second] = f.settle()
    assert second.candidates == ["started"]  # "after" is met once a has started
    f.evt("placement", c.PlacementCycleCompleted(cycle=2, scheduled=0, basis_seq=f.seq))
    f.evt("agent", c.JobFailed(job_id="a", attempt=1, exit_code=1, reason="exit code 1"))
    out = f.settle()
    never = [e for e in out if isinstance(e, c.JobDependencyNeverSatisfied)]
    assert [(e.job_id, e.reason) for e in never] == [("ok", "a ended FAILED, not SUCCEEDED (after-ok)")]
    cycles = [e for e in out if isinstance(e, c.SchedulingCycleCompleted)]
    assert cycles[0].candidates == ["notok", "any", "started"]
    assert f.state.jobs.get("ok").state.value == "DEPENDENCY_NEVER_SATISFIED"
    assert f.decide() == []


def _alloc(node: str = "n1") -> list[c.NodeAllocation]:
    return [c.NodeAllocation(node=node)]


def test_scheduling_timeout_ends_the_job_unschedulable_with_its_last_reason():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1", gpus=8))
    f.evt("submission", accepted("wide", gpus=8, scheduling_timeout_s=60.0))
    f.evt("submission", accepted("patient", gpus=8))
    [cycle] = f.settle()
    f.evt("placement", c.JobScheduled(job_id="patient", attempt=1, allocations=_alloc()))
    f.evt("placement", c.PlacementBlocked(job_id="wide", cycle=1, reasons=[
        c.BlockReason(reason="only 0 free GPUs", nodes=1, filter="GpuCapacity")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1, blocked=1))
    assert f.decide() == []
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=50.0)  # 55 s after acceptance: not yet
    assert f.decide() == []
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=10.0)  # 65 s
    [gone] = f.settle()
    assert isinstance(gone, c.JobUnschedulable) and gone.job_id == "wide"
    assert gone.reason == "not started within 60 s: 1 nodes: only 0 free GPUs"
    assert f.state.jobs.get("wide").state.value == "UNSCHEDULABLE"
    assert f.decide() == []


def test_restart_backoff_doubles_and_node_loss_requeues_without_using_a_retry():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("flaky", restart_policy="on-failure", max_retries=3))
    f.evt("submission", accepted("once", restart_policy="never"))
    f.settle()
    delays = []
    for attempt in (1, 2, 3, 4):
        f.evt("placement", c.JobScheduled(job_id="flaky", attempt=attempt, allocations=_alloc()))
        f.evt("agent", c.JobFailed(job_id="flaky", attempt=attempt, exit_code=1))
        requeues = [e for e in f.settle() if isinstance(e, c.JobRequeued)]
        delays.append(requeues[0].not_before_ts - requeues[0].ts if requeues else None)
        f.evt("clock", c.ClockTicked(now_ts=0.0), dt=100.0)
    assert delays == [10.0, 20.0, 40.0, None]  # three retries, doubling; then it stays FAILED
    # a lost node requeues even a "never" job, at once, and that is not a retry
    f.evt("placement", c.JobScheduled(job_id="once", attempt=1, allocations=_alloc()))
    f.evt("inventory", c.JobFailed(job_id="once", attempt=1, reason="node n1 lost", node_lost=True))
    [requeued] = [e for e in f.settle() if isinstance(e, c.JobRequeued)]
    assert requeued.not_before_ts == requeued.ts and "node n1 lost" in requeued.reason
    f.evt("placement", c.JobScheduled(job_id="once", attempt=2, allocations=_alloc()))
    f.evt("agent", c.JobFailed(job_id="once", attempt=2, exit_code=1))
    assert not [e for e in f.settle() if isinstance(e, c.JobRequeued)]


def test_an_array_never_has_more_candidates_and_running_tasks_than_its_limit():
    f = Feed(SchedulingCore(policy="fcfs"))
    f.evt("agent", node("n1"))
    for i in range(5):
        f.evt("submission", accepted(f"arr_{i}", array="arr", array_index=i, array_max_running=2))
    f.evt("submission", accepted("other"))
    [cycle] = f.settle()
    assert cycle.candidates == ["arr_0", "arr_1", "other"]
    f.evt("placement", c.JobScheduled(job_id="arr_0", attempt=1, allocations=_alloc()))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1))
    assert f.decide() == []  # arr_1 and "other" did not fit: nothing changed since
    assert f.state.array_running == {"arr": 1}
    f.evt("agent", c.JobSucceeded(job_id="arr_0", attempt=1))  # capacity back, and a task slot
    [cycle2] = f.settle()
    assert cycle2.candidates == ["arr_1", "arr_2", "other"]


def test_a_snapshot_loads_into_the_same_state_and_a_foreign_one_is_refused():
    core = SchedulingCore()
    f = Feed(core)
    f.evt("agent", node("n1"))
    f.admin("account", c.AccountConfigured(account="a", quota=c.Quota(gpus=4), borrowing=True))
    for i in range(4):
        f.evt("submission", accepted(f"j{i}", account="a", user="u", scheduling_timeout_s=600.0))
    f.settle()
    f.evt("placement", c.JobScheduled(job_id="j0", attempt=1, allocations=_alloc()))
    data = core.dump(f.state)
    restored = core.load(data)
    assert restored is not None and core.dump(restored) == data
    assert restored.pending.keys() == f.state.pending.keys() and restored.deadline_heap == sorted(f.state.deadline_heap)
    assert core.decide(restored) == core.decide(f.state)
    assert SchedulingCore(policy="fcfs").load(data) is None  # another configuration: full replay instead
    assert core.load(b"\x93\x01\x02") is None


def test_the_end_of_an_advance_reservation_makes_the_jobs_it_kept_out_candidates_again():
    """Issue 30: a job kept off every node by another account's reservation waited after the window
    ended, its verdict "reserved for account ml" shown on, until something else called a cycle.
    Given a reservation of n1 for ml until t0+40 and a job of another account blocked by it, when
    the log's time passes the end, then the scheduler offers the job again; the end survives a
    snapshot; a cancelled reservation wakes nobody."""
    core = SchedulingCore()
    f = Feed(core)
    f.evt("agent", node("n1"))
    t0 = f.time
    f.admin("reservation", c.ReservationConfigured(name="maint", account="ml", nodes=["n1"], start_ts=t0,
                                                   end_ts=t0 + 40))
    f.admin("reservation", c.ReservationConfigured(name="gone", account="ml", nodes=["n1"], start_ts=t0,
                                                   end_ts=t0 + 10))
    f.admin("reservation", c.ReservationConfigured(name="gone", account="ml", cancelled=True))
    f.evt("submission", accepted("wr"))
    [cycle] = f.settle()
    assert cycle.candidates == ["wr"]
    f.evt("placement", c.PlacementBlocked(job_id="wr", cycle=1, basis_seq=cycle.basis_seq, reasons=[
        c.BlockReason(filter="Reservation", nodes=1, reason="reserved for account ml (maint)")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=0, basis_seq=cycle.basis_seq))
    assert f.state.reservation_ends == {"maint": t0 + 40}
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=20.0)  # within the window (and past the cancelled one's end)
    assert f.decide() == []
    restored = core.load(core.dump(f.state))
    assert restored is not None and restored.reservation_ends == {"maint": t0 + 40}
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=20.0)  # the window is over
    [again] = f.settle()
    assert again.cycle == 2 and again.candidates == ["wr"]
    assert f.state.reservation_ends == {}
