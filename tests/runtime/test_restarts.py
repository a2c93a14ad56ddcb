"""Restart policies and the backoff cap, worked through on the scheduling core.

Retry ``k`` (1 for the first) of a failed attempt waits ``backoff_base_s * 2**(k-1)``, at most
``backoff_max_s``, from the failure's time; a requeue after a success (``always``) waits for
nothing; every requeue by the policy counts against ``max_retries``.
"""

from __future__ import annotations

from events import catalogue as c
from services.scheduling.core import SchedulingCore
from services.domain.policy import PolicyConfig
from services.domain.jobs import JobState
from tests.helpers import Feed, accepted, node


def _alloc() -> list[c.NodeAllocation]:
    return [c.NodeAllocation(node="n1")]


def _requeues(out: list[c.Event]) -> list[c.JobRequeued]:
    return [e for e in out if isinstance(e, c.JobRequeued)]


def _run_attempt(f: Feed, job_id: str, attempt: int, ok: bool) -> c.JobRequeued | None:
    """Schedule ``attempt``, end it, let the core answer; the requeue it decided, if any."""
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=attempt, allocations=_alloc()))
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=attempt, node="n1"))
    end = (c.JobSucceeded(job_id=job_id, attempt=attempt) if ok
           else c.JobFailed(job_id=job_id, attempt=attempt, exit_code=3, reason="exit code 3"))
    f.evt("agent", end, dt=5.0)
    failed_at = f.time
    requeues = _requeues(f.settle())
    assert len(requeues) <= 1
    if requeues:
        assert requeues[0].ts == failed_at  # decided at the end's time, which the delay counts from
    return requeues[0] if requeues else None


def test_backoff_doubles_from_the_base_and_stops_at_the_cap():
    """Defaults (base 10 s, max 600 s): 10, 20, 40, 80, 160, 320, then 640 -> 600, 1,280 -> 600."""
    cfg = PolicyConfig()
    assert [cfg.backoff_s(k) for k in range(1, 9)] == [10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 600.0, 600.0]
    cfg = PolicyConfig(backoff_base_s=3.0, backoff_max_s=20.0)
    assert [cfg.backoff_s(k) for k in range(1, 6)] == [3.0, 6.0, 12.0, 20.0, 20.0]  # 24 and 48 capped


def test_restart_always_requeues_after_success_at_once_and_after_failure_with_backoff():
    """``always`` with max_retries 3: attempt 1 succeeds -> retry 1 at once; attempt 2 fails ->
    retry 2 after 10 * 2^(2-1) = 20 s; attempt 3 succeeds -> retry 3 at once; attempt 4 succeeds
    and the retries are used up: it stays SUCCEEDED."""
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("svc", restart_policy="always", max_retries=3))
    f.settle()
    delays, reasons = [], []
    for attempt, ok in ((1, True), (2, False), (3, True), (4, True)):
        requeued = _run_attempt(f, "svc", attempt, ok)
        delays.append(None if requeued is None else requeued.not_before_ts - requeued.ts)
        reasons.append(None if requeued is None else requeued.reason)
        if requeued is not None:
            assert requeued.attempt == attempt
            assert f.state.jobs.get("svc").state is JobState.PENDING
        f.evt("clock", c.ClockTicked(now_ts=0.0), dt=100.0)
    assert delays == [0.0, 20.0, 0.0, None]
    assert reasons[:3] == ["attempt 1 succeeded", "attempt 2 failed: exit code 3", "attempt 3 succeeded"]
    assert f.state.jobs.get("svc").state is JobState.SUCCEEDED


def test_only_always_requeues_a_success():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    for policy in ("never", "on-failure", "always"):
        f.evt("submission", accepted(policy, restart_policy=policy, max_retries=1))
    f.settle()
    got = {policy: _run_attempt(f, policy, 1, ok=True) for policy in ("never", "on-failure", "always")}
    assert got["never"] is None and got["on-failure"] is None
    assert got["always"] is not None and got["always"].not_before_ts == got["always"].ts
    assert f.state.jobs.get("never").state is JobState.SUCCEEDED
    assert f.state.jobs.get("on-failure").state is JobState.SUCCEEDED


def test_backoff_max_caps_the_delay_and_the_job_stays_failed_after_the_retry_limit():
    """``PolicyConfigured(backoff_base_s=10, backoff_max_s=60)``, on-failure, max_retries 5, every
    attempt fails: retries wait 10, 20, 40, then 80 -> 60 and 160 -> 60; the sixth failure is
    not retried and the job stays FAILED. The capped retry is not a candidate 59 s after the
    failure, and is at 60 s."""
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.admin("policy", c.PolicyConfigured(backoff_base_s=10.0, backoff_max_s=60.0))
    f.evt("submission", accepted("flaky", restart_policy="on-failure", max_retries=5))
    f.settle()
    delays = []
    for attempt in range(1, 7):
        requeued = _run_attempt(f, "flaky", attempt, ok=False)
        delays.append(None if requeued is None else requeued.not_before_ts - requeued.ts)
        if attempt == 4:  # the first capped one: watch the gate
            assert requeued is not None
            f.evt("placement", c.PlacementCycleCompleted(cycle=f.state.cycle, scheduled=0, basis_seq=f.seq))
            f.evt("clock", c.ClockTicked(now_ts=0.0), dt=requeued.not_before_ts - f.time - 1.0)  # 59 s after
            assert not any(isinstance(e, c.SchedulingCycleCompleted) and "flaky" in e.candidates for e in f.settle())
            f.evt("clock", c.ClockTicked(now_ts=0.0), dt=1.0)  # 60 s: the backoff is over
            cycles = [e for e in f.settle() if isinstance(e, c.SchedulingCycleCompleted)]
            assert cycles and cycles[-1].candidates == ["flaky"]
        f.evt("clock", c.ClockTicked(now_ts=0.0), dt=100.0)
    assert delays == [10.0, 20.0, 40.0, 60.0, 60.0, None]
    assert f.state.jobs.get("flaky").state is JobState.FAILED
    assert "flaky" not in f.state.retries  # the job has settled: its count went with it
    assert f.decide() == []  # nothing left to do for it
