"""What one submission cannot tell alone: the checks against the log and the round. Pure.

The account's class limit and the tenants it is open to, dependencies on rejected jobs, array task
ids already taken, and dependency cycles among jobs still waiting (named in the reason: "cycle
c -> a -> b -> c"); and, for an input the server authenticated, the user a job runs as. ``Round``
is what one decision round has admitted so far, for the submissions after it in the same round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from events import catalogue as c
from events.arrays import parse_array, task_id
from services.domain.jobs import JobState
from services.submission.normalise import Rejection
from services.submission.state import SubmissionState

__all__ = ["Round", "check_against_log", "run_as", "remaining_tasks"]


@dataclass
class Round:
    """What one decision round has admitted so far, for the submissions after it in the same round."""

    decided: set[str] = field(default_factory=set)  # job, task and array ids given a verdict
    tasks: int = 0  # tasks of new arrays accepted in this round
    load: dict[str, tuple[int, int]] = field(default_factory=dict)  # tenant -> (jobs, array tasks) accepted
    rejected: set[str] = field(default_factory=set)
    deps: dict[str, tuple[str, ...]] = field(default_factory=dict)  # accepted id -> what it depends on
    referenced: set[str] = field(default_factory=set)
    numbers: dict[str, int] = field(default_factory=dict)  # scope -> the highest job number given this round

    def add(self, submitted_id: str, jobs: list[tuple[str, c.JobSpec]]) -> None:
        if not jobs:
            return
        deps = tuple(d.job_id for d in jobs[0][1].dependencies)
        self.decided.add(submitted_id)
        self.deps[submitted_id] = deps
        for job_id, _ in jobs:
            self.decided.add(job_id)
            self.deps[job_id] = deps
        self.referenced.update(deps)



def check_against_log(state: SubmissionState, sub: c.JobSubmitted, jobs: list[tuple[str, c.JobSpec]], round_: Round,
                      operator: bool = False) -> None:
    """What one submission cannot tell alone: the account's class limit, rejected dependencies,
    task ids taken, cycles."""
    if not operator:  # every task of an array has the same account and class
        state.check_account(jobs[0][1])
        state.check_class(jobs[0][1])
    for i, dep in enumerate(sub.dependencies):
        other = state.jobs.get(dep.job_id)
        if dep.job_id in round_.rejected or (other is not None and other.state is JobState.REJECTED):
            raise Rejection(f"dependencies[{i}].job_id", f"{dep.job_id!r} was rejected, so it will never run")
    if sub.array is not None:
        for job_id, _ in jobs:
            if job_id in state.verdicts or job_id in round_.decided or job_id in state.jobs.jobs:
                raise Rejection("array", f"task {job_id!r} would take the id of an existing job; "
                                "submit the array under another job id")
    targets = {job_id for job_id, _ in jobs} | {sub.job_id}
    deps = tuple(d.job_id for d in sub.dependencies)
    cycle = _find_cycle(state, round_, sub.job_id, deps, targets)
    if cycle is not None:
        last = cycle[-1]
        tail = "" if last == sub.job_id else f" (a task of {sub.job_id})"
        raise Rejection("dependencies", f"cycle {' -> '.join(cycle)}{tail}: each job depends on the next, "
                        "so none of them could ever start")


def remaining_tasks(state: SubmissionState, sub: c.JobSubmitted) -> list[tuple[str, c.JobSpec]]:
    """The tasks of an array cut short that are not accepted yet, with the spec its first tasks got."""
    template = state.jobs.jobs[state.jobs.arrays[sub.job_id][0]].spec
    assert template is not None
    return [(task_id(sub.job_id, i), msgspec.structs.replace(template, array_index=i))
            for i in parse_array(sub.array).indices if task_id(sub.job_id, i) not in state.jobs.jobs]


def run_as(state: SubmissionState, tenant: str, user: str,
            jobs: list[tuple[str, c.JobSpec]]) -> list[tuple[str, c.JobSpec]]:
    """The jobs of an input the server authenticated as ``tenant``'s ``user``: their ``user`` is that
    one (a body naming another is refused, never taken), and they run as its Unix identity
    (``UserConfigured``); a user without one, or mapped to root without the operator's say, is refused."""
    if user == "-":
        raise Rejection("user", "the intake could not tell which user sent this (the server's import of "
                                "the intake lacks `share: true`); ask the operator")
    claimed = jobs[0][1].user if jobs else ""
    if claimed and claimed != user:
        raise Rejection("user", f"user {claimed!r} is not who sent this: you are {user!r} (under accounts a job runs "
                                f"as the user the server authenticated; leave --user out)")
    identity = state.users.get((tenant, user))
    if identity is None:
        raise Rejection("user", f"user {user!r} of tenant {tenant!r} has no Unix identity to run as; an operator "
                                f"gives it one with `horizon user add {user} --tenant {tenant} --unix-user NAME`")
    if identity.uid == 0 and not identity.allow_root:
        raise Rejection("user", f"user {user!r} of tenant {tenant!r} is mapped to uid 0 (root), which the operator "
                                f"did not allow (`horizon user add ... --allow-root`)")
    run_as = {"user": user, "uid": identity.uid, "gid": identity.gid, "groups": tuple(identity.groups)}
    return [(job_id, msgspec.structs.replace(spec, **run_as)) for job_id, spec in jobs]


def _waiting_edges(state: SubmissionState, round_: Round, job_id: str) -> tuple[str, ...]:
    """The dependencies of ``job_id`` if it still waits for them, else none.

    Only a job that has not started yet can wait for ever: one that started had its
    dependencies met, one that ended no longer waits, and an id not submitted yet
    depends on nothing so far. An array waits while any of its tasks does.
    """
    if job_id in round_.deps:
        return round_.deps[job_id]
    jobs = state.jobs
    members = [job_id] if job_id in jobs.jobs else jobs.arrays.get(job_id, [])
    for member in members:
        job = jobs.jobs[member]
        if job.spec is not None and job.attempt == 0 and job.state in (JobState.PENDING, JobState.HELD):
            return tuple(d.job_id for d in job.spec.dependencies)
    return ()


def _find_cycle(state: SubmissionState, round_: Round, job_id: str, deps: tuple[str, ...],
                targets: set[str]) -> list[str] | None:
    """A path ``job_id -> d -> ... -> t`` (t in ``targets``: the job or one of its tasks), or None.

    Depth first in dependency order, so the cycle named is the same in every replay. Only
    an id something already depends on (a forward reference) can close a cycle, so the
    usual submission, naming jobs older than itself, costs one set lookup.
    """
    if not any(t in state.referenced or t in round_.referenced for t in targets):
        return None
    path = [job_id]
    stack = [iter(deps)]
    seen: set[str] = set()
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            path.pop()
            continue
        if nxt in targets:
            return [*path, nxt]
        if nxt in seen:
            continue
        seen.add(nxt)
        path.append(nxt)
        stack.append(iter(_waiting_edges(state, round_, nxt)))
    return None
