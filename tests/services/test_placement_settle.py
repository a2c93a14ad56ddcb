"""Placement forgets a job that has ended for good (``restart.ends_for_good``), and only such a job.

A forgotten job keeps its outcome (``JobTable.settle``); its spec and history go, so placement's
state no longer grows with every job ever run. Every job scheduling may still requeue (the only way
an ended job comes back) is kept: placement settles exactly the jobs scheduling settles, at every
record of logs the simulator writes with the real cores.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from events import catalogue as c
from services.placement.core import PlacementCore
from services.runtime.service import fold_record
from services.scheduling.core import SchedulingCore
from tests.helpers import Feed, accepted, node, ready
from tests.services.test_snapshot_scheduling import PROPERTY, sim_job, simulated_log, trace


def _cluster() -> Feed:
    f = Feed(PlacementCore())
    ready(f, node("n0", gpus=2))
    return f


def _run(f: Feed, job_id: str, cycle: int, **spec: object) -> None:
    f.evt("submission", accepted(job_id, **spec))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=cycle, candidates=[job_id], queued=1, basis_seq=f.seq))
    out = f.settle()
    assert any(isinstance(e, c.JobScheduled) and e.job_id == job_id for e in out), out
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=f.state.jobs.jobs[job_id].attempt, node="n0"))


def test_a_job_that_succeeded_is_forgotten_keeping_its_outcome():
    f = _cluster()
    _run(f, "j1", 1)
    f.evt("agent", c.JobSucceeded(job_id="j1", attempt=1, node="n0", exit_code=0))
    assert "j1" not in f.state.jobs.jobs and f.state.jobs.get("j1").state.value == "SUCCEEDED"
    assert not f.state.cluster.nodes["n0"].jobs  # its resources were given back first


def test_a_job_that_may_be_requeued_is_kept_and_placed_again():
    f = _cluster()
    _run(f, "r1", 1, restart_policy="on-failure", max_retries=1)
    f.evt("agent", c.JobFailed(job_id="r1", attempt=1, node="n0", exit_code=1, reason="boom"))
    assert "r1" in f.state.jobs.jobs  # scheduling may retry it
    _run(f, "p1", 2)
    f.evt("preemption", c.JobPreempted(job_id="p1", attempt=1, for_job="x"))
    assert "p1" in f.state.jobs.jobs  # --requeue (the default): requeued at once
    _run(f, "l1", 3)
    f.evt("inventory", c.JobFailed(job_id="l1", attempt=1, node="n0", reason="lost", node_lost=True))
    assert "l1" in f.state.jobs.jobs  # its node was lost: requeued at once
    f.evt("scheduling", c.JobRequeued(job_id="r1", attempt=1, reason="retry"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=4, candidates=["r1"], queued=1, basis_seq=f.seq))
    assert any(isinstance(e, c.JobScheduled) and e.job_id == "r1" and e.attempt == 2 for e in f.settle())


def test_a_job_that_can_never_come_back_is_forgotten_however_it_ended():
    f = _cluster()
    _run(f, "n1", 1, requeue=False)
    f.evt("preemption", c.JobPreempted(job_id="n1", attempt=1, for_job="x"))
    _run(f, "f1", 2)
    f.evt("agent", c.JobFailed(job_id="f1", attempt=1, node="n0", exit_code=1, reason="boom"))
    f.evt("submission", accepted("c1"))
    f.evt("submission", c.JobCancelled(job_id="c1", reason="asked"))
    f.evt("submission", c.JobRejected(job_id="x1", tenant="acme", reason="bad"))
    _run(f, "r2", 3, restart_policy="on-failure", max_retries=1)  # retried once, then out of retries
    f.evt("agent", c.JobFailed(job_id="r2", attempt=1, node="n0", exit_code=1, reason="boom"))
    assert "r2" in f.state.jobs.jobs and f.state.retries == {"r2": 1}
    f.evt("scheduling", c.JobRequeued(job_id="r2", attempt=1, reason="retry"))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=4, candidates=["r2"], queued=1, basis_seq=f.seq))
    f.settle()
    f.evt("agent", c.JobStarted(job_id="r2", attempt=2, node="n0"))
    f.evt("agent", c.JobFailed(job_id="r2", attempt=2, node="n0", exit_code=1, reason="boom"))
    assert not ({"n1", "f1", "c1", "x1", "r2"} & f.state.jobs.jobs.keys()) and not f.state.retries
    assert {"n1", "f1", "c1", "x1", "r2"} <= f.state.jobs.settled.keys()


@PROPERTY
@given(jobs=st.lists(sim_job, min_size=1, max_size=12),
       deps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                               st.sampled_from(["after-ok", "after-any", "after-not-ok"])), max_size=4),
       policy=st.sampled_from(["fcfs", "multifactor"]), quotas=st.booleans())
def test_placement_settles_exactly_the_jobs_scheduling_settles(jobs, deps, policy, quotas):
    records = simulated_log(trace(jobs, deps), policy, quotas)
    placement, scheduling = PlacementCore(virtual_time=True), SchedulingCore(policy=policy, virtual_time=True)
    p, s = placement.initial(), scheduling.initial()
    for record in records:
        p, _, _ = fold_record(placement, p, record)
        s, _, _ = fold_record(scheduling, s, record)
        assert p.jobs.settled == s.jobs.settled, f"at seq {record.seq}"
        assert p.retries == s.retries, f"at seq {record.seq}"


def test_a_preemption_request_landing_after_its_victim_ended_holds_no_room():
    """The one change settling makes to what placement does: the victim is forgotten when it ends, so a
    ``PreemptionRequested`` decided while it ran and landing after its end holds nothing for the
    preemptor (the room is free already; before, the victim's old node was held for it)."""
    f = _cluster()
    _run(f, "v1", 1)
    f.evt("submission", accepted("p1", gpus=2))
    f.evt("agent", c.JobSucceeded(job_id="v1", attempt=1, node="n0", exit_code=0))
    f.evt("preemption", c.PreemptionRequested(job_id="v1", attempt=1, for_job="p1"))
    assert not f.state.held
