"""The pending jobs a dependency can never satisfy, kept as the jobs they wait for change. Pure.

The scheduler ends such a job (``JobDependencyNeverSatisfied``, ``services/scheduling/core.py``'s
step 2) with the first of its dependencies that can never be met and why. Whether one can is a
function of the job it names (or of its array's tasks): their states, the requeues waiting for
them and their checkpoints (``services.domain.dependencies.dependency_status``). So instead of
asking it of every waiting job in every decision round (a backlog of workflows is a million
questions a round), the fold asks it again for the jobs that depend on one that has just changed:
a transition (a task's changes its array too), a checkpoint, a requeue taken. ``state.never`` is
then exactly what asking everyone would find; ``codec.load`` rebuilds it with the other derived
fields. Likewise the pending jobs a dependency timeout or a deadline may end wait in a heap by the
time theirs comes (``expiry``), so a round asks only those whose time has come.
"""

from __future__ import annotations

import heapq
import math

from events import catalogue as c
from services.domain.dependencies import NEVER, dependency_status
from services.domain.jobs import Job
from services.domain.queue.state import SchedulingState

__all__ = ["first_never", "recheck", "recheck_dependants", "rebuild", "expiry", "forget_expired"]


def first_never(state: SchedulingState, job: Job) -> tuple[c.Dependency, str] | None:
    """The first of ``job``'s dependencies that can never be met, and why (None: none)."""
    for dep in job.spec.dependencies if job.spec else ():
        status, why = dependency_status(dep, state.jobs, state.to_requeue, state.foreign)
        if status == NEVER:
            return dep, why
    return None


def _ask(state: SchedulingState, job_id: str) -> None:
    job = state.pending.get(job_id)
    found = first_never(state, job) if job is not None and job_id in state.gated else None
    if found is None:
        state.never.pop(job_id, None)
    else:
        state.never[job_id] = found


def recheck(state: SchedulingState, job: Job) -> None:
    """``job`` changed (or entered or left the queue): ask again for it and for the jobs depending
    on it or on its array."""
    _ask(state, job.job_id)
    for target in (job.job_id, job.spec.array if job.spec is not None else None):
        if target is not None:
            for job_id in state.dependents.get(target, ()):
                _ask(state, job_id)


def recheck_dependants(state: SchedulingState, job_id: str, array: str | None) -> None:
    """A job this fold does not hold changed (another partition's, ``services/domain/foreign.py``): ask
    again for the jobs depending on it or on its array."""
    for target in (job_id, array):
        if target is not None:
            for dependant in state.dependents.get(target, ()):
                _ask(state, dependant)


def rebuild(state: SchedulingState) -> None:
    state.never = {}
    for job_id in state.gated:
        _ask(state, job_id)


def expiry(job: Job) -> float:
    """The first "now" at which a job of ``state.expiring`` may end by its dependency timeout or its
    deadline (the scheduler's step 2b asks only the jobs whose time has come): ``now >= accepted_ts +
    dependency_timeout_s`` for the one, ``now + time_limit_s > deadline_ts`` for the other, the least
    float for which that sum is past (float addition never decreases as "now" grows)."""
    spec = job.spec
    assert spec is not None
    due = math.inf
    if spec.dependency_timeout_s is not None:
        due = job.accepted_ts + spec.dependency_timeout_s
    if spec.deadline_ts:
        limit, deadline = spec.time_limit_s, spec.deadline_ts
        t = deadline - limit
        while t + limit > deadline:
            t = math.nextafter(t, -math.inf)
        while not t + limit > deadline:
            t = math.nextafter(t, math.inf)
        due = min(due, t)
    return due


def forget_expired(state: SchedulingState) -> None:
    """Drop the heap's entries of jobs no longer waiting to expire: those on top, and all of them
    when they outnumber the living (so the heap does not grow with the jobs that came and went)."""
    heap = state.expiry_heap
    while heap and heap[0][1] not in state.expiring:
        heapq.heappop(heap)
    if len(heap) > 2 * len(state.expiring) + 64:
        heap[:] = sorted({entry for entry in heap if entry[1] in state.expiring})
