"""Job dependencies: when a dependency is met, still pending, or can never be met. Pure.

=================  ===========================  ====================================
kind               met when the other job       can never be met when it
=================  ===========================  ====================================
``after``          has started                  ended without ever starting
``after-ok``       succeeded                    ended any other way, for good
``after-not-ok``   ended other than succeeding  succeeded, for good
``after-any``      ended                        (always met in the end)
``after-checkpoint`` recorded its first checkpoint ended for good without one
                   (``JobCheckpointed``, or a
                   ``JobPreempted`` with a reference)
=================  ===========================  ====================================

A settled job keeps only its outcome; whether it ever checkpointed is kept
beside it (``JobTable.checkpointed``), so ``after-checkpoint`` is still met
after the job has ended.

"For good": a failed or preempted job that its restart policy will requeue
has not ended yet (``requeue_pending``), so its dependants keep waiting.

The other job may not be submitted yet: a workflow can arrive in any order,
so the dependant waits for it ("not submitted yet"). A job that was rejected
never runs, so a dependency on it can never be met.

A dependency on an **array** (its submitted id, ``jobs.arrays``) is on all
its tasks, as if the array were one job that succeeded only if every task
did (Slurm's rule for a whole array):

=================  ===========================  ====================================
kind               met when                     can never be met when
=================  ===========================  ====================================
``after``          every task has started       a task ended without starting
``after-ok``       every task succeeded         a task ended otherwise, for good
``after-not-ok``   every task ended, one not ok every task succeeded, for good
``after-any``      every task ended             (always met in the end)
``after-checkpoint`` every task checkpointed    a task ended for good without one
=================  ===========================  ====================================

Under partition leaders (docs/scaling.md) the other job may be another partition's, which this
leader skips: ``foreign`` (``services/domain/foreign.py``) answers for it what the job table would.

A job may also give up waiting: ``dependency_timeout_s`` (``expired``) ends it
when its dependencies are not all met that long after acceptance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from events import catalogue as c
from services.domain.jobs import Job, JobState, JobTable, TERMINAL

if TYPE_CHECKING:
    from services.domain.foreign import ForeignJobs

__all__ = ["dependency_status", "dependency_expired", "MET", "WAITING", "NEVER"]

MET, WAITING, NEVER = "met", "waiting", "never"

_NOT_OK = TERMINAL - {JobState.SUCCEEDED}


def dependency_status(dep: c.Dependency, jobs: JobTable, requeue_pending: set[str] | dict[str, object],
                      foreign: ForeignJobs | None = None) -> tuple[str, str]:
    """(MET | WAITING | NEVER, reason) for one dependency (``foreign``: a partition leader's other jobs)."""
    tasks = jobs.arrays.get(dep.job_id)
    if tasks:
        return _array_status(dep, [_get(t, jobs, foreign) for t in tasks], requeue_pending, jobs)  # type: ignore[misc]
    if foreign is not None:
        tasks = foreign.arrays.get(dep.job_id)
        if tasks:
            return _array_status(dep, [foreign.get(t) for t in tasks], requeue_pending, jobs)  # type: ignore[misc]
    other = _get(dep.job_id, jobs, foreign)
    if other is None:
        return WAITING, f"waiting for {dep.job_id}: not submitted yet"
    state = other.state
    if state is JobState.REJECTED:
        return NEVER, f"{dep.job_id} was rejected"
    ended = state in TERMINAL and dep.job_id not in requeue_pending
    started = other.started_ts > 0 or state is JobState.RUNNING
    match dep.kind:
        case "after":
            if started:
                return MET, ""
            if ended:
                return NEVER, f"{dep.job_id} ended {state.value} without starting"
        case "after-ok":
            if state is JobState.SUCCEEDED and ended:
                return MET, ""
            if ended:
                return NEVER, f"{dep.job_id} ended {state.value}, not SUCCEEDED (after-ok)"
        case "after-not-ok":
            if ended and state in _NOT_OK:
                return MET, ""
            if ended:
                return NEVER, f"{dep.job_id} SUCCEEDED (after-not-ok)"
        case "after-any":
            if ended:
                return MET, ""
        case "after-checkpoint":
            if _checkpointed(other, jobs):
                return MET, ""
            if ended:
                return NEVER, f"{dep.job_id} ended {state.value} without a checkpoint (after-checkpoint)"
            return WAITING, f"waiting for {dep.job_id}'s first checkpoint (after-checkpoint)"
    return WAITING, f"waiting for {dep.job_id} ({dep.kind})"


def _get(job_id: str, jobs: JobTable, foreign: ForeignJobs | None) -> Job | None:
    job = jobs.get(job_id)
    if job is None and foreign is not None:
        return foreign.get(job_id)
    return job


def _checkpointed(job: Job, jobs: JobTable) -> bool:
    return job.checkpoint_ref is not None or job.job_id in jobs.checkpointed


def dependency_expired(job: Job, jobs: JobTable, requeue_pending: set[str] | dict[str, object],
                       now: float, datasets: set[str] | frozenset[str] = frozenset(),
                       foreign: ForeignJobs | None = None) -> tuple[c.Dependency, str] | None:
    """A pending job's ``dependency_timeout_s`` is over and a dependency is still not met: (the first
    such dependency, the reason). Counted from acceptance (through holds); None otherwise. A dataset
    not announced (``after_datasets``, not in ``datasets``) is named as ``Dependency(kind="after-data",
    job_id=<dataset>)``."""
    spec = job.spec
    if spec is None or spec.dependency_timeout_s is None or now < job.accepted_ts + spec.dependency_timeout_s:
        return None
    for dep in spec.dependencies:
        status, why = dependency_status(dep, jobs, requeue_pending, foreign)
        if status != MET:
            return dep, f"timeout: dependencies not met within {spec.dependency_timeout_s:g} s of acceptance ({why})"
    for name in spec.after_datasets:
        if name not in datasets:
            return (c.Dependency(kind="after-data", job_id=name),
                    f"timeout: dependencies not met within {spec.dependency_timeout_s:g} s of acceptance "
                    f"(dataset {name} not announced)")
    return None


def _array_status(dep: c.Dependency, tasks: list[Job], requeue_pending: set[str] | dict[str, object],
                  jobs: JobTable) -> tuple[str, str]:
    """The array's status: the first task (in index order) that decides it names the reason."""
    ended = [t.state in TERMINAL and t.job_id not in requeue_pending for t in tasks]
    count = len(tasks)
    left = count - sum(ended)
    match dep.kind:
        case "after":
            for task, over in zip(tasks, ended, strict=True):
                if over and not task.started_ts > 0:
                    return NEVER, f"{task.job_id} ended {task.state.value} without starting (after on array {dep.job_id})"
            waiting = sum(1 for t in tasks if not (t.started_ts > 0 or t.state is JobState.RUNNING))
            if not waiting:
                return MET, ""
            return WAITING, f"waiting for {dep.job_id}: {waiting} of {count} tasks not started (after)"
        case "after-ok":
            for task, over in zip(tasks, ended, strict=True):
                if over and task.state is not JobState.SUCCEEDED:
                    return NEVER, (f"{task.job_id} ended {task.state.value}, not SUCCEEDED "
                                   f"(after-ok on array {dep.job_id})")
        case "after-checkpoint":
            for task, over in zip(tasks, ended, strict=True):
                if over and not _checkpointed(task, jobs):
                    return NEVER, (f"{task.job_id} ended {task.state.value} without a checkpoint "
                                   f"(after-checkpoint on array {dep.job_id})")
            waiting = sum(1 for t in tasks if not _checkpointed(t, jobs))
            if not waiting:
                return MET, ""
            return WAITING, f"waiting for {dep.job_id}: {waiting} of {count} tasks not checkpointed (after-checkpoint)"
        case "after-not-ok":
            if not left:
                if any(t.state is not JobState.SUCCEEDED for t in tasks):
                    return MET, ""
                return NEVER, f"all {count} tasks of {dep.job_id} SUCCEEDED (after-not-ok)"
    if not left:
        return MET, ""
    return WAITING, f"waiting for {dep.job_id}: {left} of {count} tasks not ended ({dep.kind})"
