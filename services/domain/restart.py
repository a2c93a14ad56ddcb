"""Whether a job that has just ended will be requeued: the restart policy as scheduling applies it. Pure.

Scheduling alone decides requeues (``JobRequeued``), and says nothing when a job is not requeued. A
fold that keeps jobs for another purpose (inventory's ledger) may forget a job that has ended only
when no ``JobRequeued`` can follow, so it must know scheduling's answer at the ending itself. Both
ask these functions, so the two cannot disagree:

* a job stopped by the world (its node lost: ``JobFailed.node_lost``; or preempted or evicted:
  ``JobPreempted``) is requeued at once unless its spec says ``--no-requeue``, without counting a
  retry;
* otherwise a failure is retried under ``restart_policy`` ``on-failure`` or ``always``, a success
  under ``always``, each while fewer than ``max_retries`` retries have been granted (counted per job,
  forgotten when it ends for good).
"""

from __future__ import annotations

from events import catalogue as c
from services.domain.jobs import FAILURES, TERMINAL, JobState, Transition

__all__ = ["requeued_at_once", "retry_granted", "ends_for_good"]


def requeued_at_once(event: c.Event, spec: c.JobSpec | None) -> bool:
    """Whether ``event``, ending a job's current attempt, is one scheduling requeues it after without
    counting a retry (its node lost, or it was preempted or evicted; ``--requeue``, the default)."""
    stopped = isinstance(event, c.JobPreempted) or (isinstance(event, c.JobFailed) and event.node_lost)
    return stopped and (spec is None or spec.requeue)


def retry_granted(spec: c.JobSpec, outcome: JobState, retries: int) -> bool:
    """Whether the restart policy requeues a job that ended with ``outcome`` after ``retries`` retries
    (``PREEMPTED``: when its spec allows a requeue)."""
    if outcome is JobState.PREEMPTED:
        return spec.requeue
    if retries >= spec.max_retries:
        return False
    if outcome in FAILURES:
        return spec.restart_policy in ("on-failure", "always")
    return outcome is JobState.SUCCEEDED and spec.restart_policy == "always"


def ends_for_good(tr: Transition, event: c.Event, retries: dict[str, int]) -> bool:
    """Whether the transition ``event`` caused ends its job for good: terminal, and no ``JobRequeued``
    can follow. A retry it grants is counted in ``retries`` (job id -> retries granted), as scheduling
    counts them; the caller forgets the job's count when it ends for good."""
    if tr.after not in TERMINAL:
        return False
    job = tr.job
    spec = job.spec
    if spec is None or not (tr.after in FAILURES or tr.after in (JobState.SUCCEEDED, JobState.PREEMPTED)):
        return True
    if requeued_at_once(event, spec):
        return False
    if retry_granted(spec, tr.after, retries.get(job.job_id, 0)):
        retries[job.job_id] = retries.get(job.job_id, 0) + 1
        return False
    return True
