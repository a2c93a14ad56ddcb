"""Job dependencies: when a dependency is met, still pending, or can never be met. Pure.

=================  ===========================  ====================================
kind               met when the other job       can never be met when it
=================  ===========================  ====================================
``after``          has started                  ended without ever starting
``after-ok``       succeeded                    ended any other way, for good
``after-not-ok``   ended other than succeeding  succeeded, for good
``after-any``      ended                        (always met in the end)
=================  ===========================  ====================================

"For good": a failed or preempted job that its restart policy will requeue
has not ended yet (``requeue_pending``), so its dependants keep waiting.
"""

from __future__ import annotations

from events import catalogue as c
from services.state.jobs import JobState, JobTable, TERMINAL

__all__ = ["dependency_status", "MET", "WAITING", "NEVER"]

MET, WAITING, NEVER = "met", "waiting", "never"

_NOT_OK = TERMINAL - {JobState.SUCCEEDED}


def dependency_status(dep: c.Dependency, jobs: JobTable, requeue_pending: set[str] | dict[str, object]) -> tuple[str, str]:
    """(MET | WAITING | NEVER, reason) for one dependency."""
    other = jobs.get(dep.job_id)
    if other is None:
        return NEVER, f"{dep.job_id} is unknown"
    state = other.state
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
    return WAITING, f"waiting for {dep.job_id} ({dep.kind})"
