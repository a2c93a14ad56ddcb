"""The job table: every job's state, folded from the log. Pure; shared by the service cores.

States and the events that move a job between them (anything else is
ignored, so replays, duplicates and races settle by log order alone):

=============  ==========================================================
from           event -> to
=============  ==========================================================
(none)         JobAccepted -> PENDING (HELD if its spec says ``hold``);  JobRejected -> REJECTED
PENDING        JobHeld -> HELD;  JobScheduled(attempt+1) -> SCHEDULED
HELD           JobReleased -> PENDING
SCHEDULED      JobStarted -> RUNNING
SCHEDULED,     JobSucceeded -> SUCCEEDED;  JobFailed -> FAILED (OUT_OF_MEMORY
RUNNING        if out_of_memory);  JobPreempted -> PREEMPTED  (each only for
               the current attempt)
FAILED,        JobRequeued -> PENDING (the next JobScheduled is attempt+1)
OUT_OF_MEMORY,
PREEMPTED,
SUCCEEDED
PENDING, HELD  JobCancelled -> CANCELLED;  JobUnschedulable -> UNSCHEDULABLE;
               JobDependencyNeverSatisfied -> DEPENDENCY_NEVER_SATISFIED
SCHEDULED,     JobCancelled(current attempt) -> CANCELLED
RUNNING
=============  ==========================================================

A ``JobCancelled`` decided while the job looked pending (attempt N) can land
after a ``JobScheduled`` of attempt N+1 that slipped in before it. It does
not end that attempt here (its devices would be freed while the process may
still run); the agent of that attempt treats it as a stop request, stops the
process and reports ``JobCancelled`` for attempt N+1, which ends the job.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from enum import Enum

import msgspec

from events import catalogue as c

__all__ = ["JobState", "Job", "JobTable", "Transition", "devices_held", "LIVE", "TERMINAL", "FAILURES", "HOLDS_RESOURCES", "STATES"]


class JobState(str, Enum):
    PENDING = "PENDING"
    HELD = "HELD"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"
    UNSCHEDULABLE = "UNSCHEDULABLE"
    DEPENDENCY_NEVER_SATISFIED = "DEPENDENCY_NEVER_SATISFIED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # a failure: killed for going over its memory limit (last: STATES indices hold)


HOLDS_RESOURCES = frozenset({JobState.SCHEDULED, JobState.RUNNING})
LIVE = frozenset({JobState.PENDING, JobState.HELD, JobState.SCHEDULED, JobState.RUNNING})
# The failures: a restart policy of on-failure requeues either.
FAILURES = frozenset({JobState.FAILED, JobState.OUT_OF_MEMORY})
# FAILED, OUT_OF_MEMORY and PREEMPTED are terminal unless a JobRequeued follows.
TERMINAL = frozenset(
    {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.OUT_OF_MEMORY,
        JobState.PREEMPTED,
        JobState.CANCELLED,
        JobState.REJECTED,
        JobState.UNSCHEDULABLE,
        JobState.DEPENDENCY_NEVER_SATISFIED,
    }
)


STATES = tuple(JobState)  # a settled job's outcome is stored as its index here (see ``JobTable.settle``)
_INDEX = {state: i for i, state in enumerate(STATES)}


@dataclass(slots=True)
class Job:
    job_id: str
    spec: c.JobSpec | None
    state: JobState
    accepted_seq: int = 0
    accepted_ts: float = 0.0
    attempt: int = 0
    allocations: tuple[c.NodeAllocation, ...] = ()
    scheduled_ts: float = 0.0
    started_ts: float = 0.0
    ended_ts: float = 0.0
    reason: str = ""
    exit_code: int | None = None
    last_block: tuple[c.BlockReason, ...] = ()
    borrowed: bool = False  # the current attempt runs on quota borrowed from an idle sibling account
    reserved_at: float | None = None  # placement's reservation for it (backfilling): when ...
    reserved_nodes: tuple[str, ...] = ()  # ... and on which nodes
    checkpoint_ref: str | None = None  # the latest checkpoint an attempt reported (kept across requeues)
    not_before_ts: float = 0.0  # a requeued job waits until then (restart backoff), a new one until its begin_ts
    time_limit_s: float = 0.0  # the current attempt's limit, as placement gave it (0: the spec's)

    @property
    def limit_s(self) -> float:
        """The time limit of the current attempt: placement's (shorter than the spec's when backfill
        used the job's ``time_min_s``), else the spec's."""
        return self.time_limit_s or (self.spec.time_limit_s if self.spec is not None else 0.0)


@dataclass(frozen=True, slots=True)
class Transition:
    job: Job
    before: JobState | None
    after: JobState


def devices_held(allocations: tuple[c.NodeAllocation, ...],
                 devices: dict[str, list[str]]) -> tuple[c.NodeAllocation, ...]:
    """The allocations with the GPUs a backend says the attempt really holds (``JobStarted.devices``):
    on each node it names, as many as placement gave there (a different count changes nothing)."""
    out = []
    for alloc in allocations:
        real = devices.get(alloc.node)
        if real is not None and len(real) == len(alloc.device_ids) and list(real) != list(alloc.device_ids):
            alloc = msgspec.structs.replace(alloc, device_ids=list(real))
        out.append(alloc)
    return tuple(out) if out != list(allocations) else allocations


class JobTable:
    """``apply`` folds one event and returns the transition it caused, or ``None``.

    **Settled jobs.** A core that knows a job has ended for good (no requeue
    can follow) may ``settle`` it: the ``Job`` is dropped and only its outcome
    is kept (``settled``: job id -> ``STATES`` index * 2 + started), which is
    all that dependencies on it and duplicate detection need. ``get`` answers
    for a settled job with a bare ``Job`` (no spec) in its final state; no
    event moves it any more. So a long-running table holds a few bytes per
    finished job instead of its spec and history (the scheduling core's
    snapshots stay small as the log grows: ``docs/benchmarks.md`` §4).
    """

    # Whether it keeps what only dependencies read: each array's tasks, and which settled jobs had
    # checkpointed (a table for another purpose leaves them out: inventory's, services/inventory/jobs.py).
    for_dependencies = True

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.arrays: dict[str, list[str]] = {}  # array job id -> its tasks' job ids, in acceptance order
        self.settled: dict[str, int] = {}  # job id -> STATES index * 2 + (1 if it ever started)
        self.checkpointed: set[str] = set()  # settled jobs that had recorded a checkpoint (after-checkpoint)

    def shape(self, spec: c.JobSpec) -> c.JobSpec:
        """The spec as the table holds it: ``compact`` (a table that reads only some of a spec's fields
        may hold a smaller one, shared by the jobs that agree on them: services/inventory/jobs.py; one
        object for the jobs whose specs are equal: ``job_specs.SharedSpecJobs``). It must return a spec
        equal to ``spec`` in every field the table's readers read, and never change a spec it returned."""
        return compact(spec)

    def get(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        if job is not None:
            return job
        code = self.settled.get(job_id)
        if code is None:
            return None
        return Job(job_id, None, STATES[code >> 1], started_ts=float(code & 1))

    def known(self, job_id: str) -> bool:
        return job_id in self.jobs or job_id in self.settled

    def settle(self, job_id: str) -> None:
        """Forget a job that has ended for good, keeping its outcome (see the class docstring)."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return
        assert job.state in TERMINAL, f"{job_id} is {job.state.value}, not ended"
        started = job.started_ts > 0 or job.state is JobState.RUNNING
        self.settled[job_id] = _INDEX[job.state] * 2 + int(started)
        if job.checkpoint_ref is not None and self.for_dependencies:
            self.checkpointed.add(job_id)

    def apply(self, event: c.Event, seq: int, time: float) -> Transition | None:
        match event:
            case c.JobAccepted(job_id=job_id, spec=spec):
                if self.known(job_id):
                    return None
                held = self.shape(spec)  # (compact: the same spec, interned in place)
                first = JobState.HELD if spec.hold else JobState.PENDING  # submitted held (Slurm's --hold)
                begin = held.begin_ts if held.begin_ts == spec.begin_ts else spec.begin_ts  # (a shared spec's)
                job = Job(job_id, held, first, accepted_seq=seq, accepted_ts=event.submitted_ts or time,
                          not_before_ts=begin)  # --begin: waits like a restart's backoff
                self.jobs[job_id] = job
                if spec.array is not None and self.for_dependencies:
                    self.arrays.setdefault(spec.array, []).append(job_id)
                return Transition(job, None, first)
            case c.JobRejected(job_id=job_id, reason=reason):
                if self.known(job_id):
                    return None
                job = Job(job_id, None, JobState.REJECTED, reason=reason, ended_ts=time)
                self.jobs[job_id] = job
                return Transition(job, None, JobState.REJECTED)
            case c.JobHeld(job_id=job_id):
                return self._move(job_id, {JobState.PENDING}, JobState.HELD, time)
            case c.JobReleased(job_id=job_id):
                return self._move(job_id, {JobState.HELD}, JobState.PENDING, time)
            case c.JobPriorityChanged(job_id=job_id, priority_class=pc, nice=nice):
                job = self.jobs.get(job_id)
                if job is not None and job.state in LIVE and job.spec is not None:
                    job.spec = self.shape(_with(job.spec, priority_class=pc, nice=nice))  # a new spec, shaped
                return None
            case c.JobScheduled(job_id=job_id, attempt=attempt, allocations=allocs):
                job = self.jobs.get(job_id)
                if job is None or job.state is not JobState.PENDING or attempt != job.attempt + 1:
                    return None
                job.attempt = attempt
                job.allocations = tuple(allocs)
                job.scheduled_ts = time
                job.reason = ""
                job.last_block = ()
                job.reserved_at, job.reserved_nodes = None, ()
                job.borrowed = event.borrowed
                job.time_limit_s = event.time_limit_s
                return self._set(job, JobState.SCHEDULED)
            case c.JobResized(job_id=job_id, allocations=allocs):
                # An elastic job's new allocation (no transition: it still holds resources).
                if self.resize_applies(event):
                    self.jobs[job_id].allocations = tuple(allocs)
                return None
            case c.JobStarted(job_id=job_id, attempt=attempt):
                job = self.jobs.get(job_id)
                if job is None or job.state is not JobState.SCHEDULED or attempt != job.attempt:
                    return None
                job.started_ts = time
                if event.devices:  # its backend chose other GPUs than placement: the ledger follows them
                    job.allocations = devices_held(job.allocations, event.devices)
                return self._set(job, JobState.RUNNING)
            case c.JobSucceeded(job_id=job_id, attempt=attempt, exit_code=code):
                return self._end(job_id, attempt, JobState.SUCCEEDED, time, "", code)
            case c.JobFailed(job_id=job_id, attempt=attempt, exit_code=code, reason=reason):
                ended = JobState.OUT_OF_MEMORY if event.out_of_memory else JobState.FAILED
                return self._end(job_id, attempt, ended, time, reason, code)
            case c.JobPreempted(job_id=job_id, attempt=attempt):
                job = self.jobs.get(job_id)
                if job is not None and event.checkpoint_ref and attempt == job.attempt:
                    job.checkpoint_ref = event.checkpoint_ref
                why = f"preempted for {event.for_job}" if event.for_job else (event.reason or "evicted")
                return self._end(job_id, attempt, JobState.PREEMPTED, time, why, None)
            case c.JobCheckpointed(job_id=job_id, attempt=attempt, checkpoint_ref=ref):
                job = self.jobs.get(job_id)
                if job is not None and attempt == job.attempt and ref:
                    job.checkpoint_ref = ref
                return None
            case c.JobRequeued(job_id=job_id, attempt=attempt, reason=reason):
                job = self.jobs.get(job_id)
                requeueable = (JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.PREEMPTED, JobState.SUCCEEDED)
                if job is None or job.state not in requeueable or attempt != job.attempt:
                    return None
                job.reason = reason
                job.allocations = ()
                job.borrowed = False
                job.time_limit_s = 0.0  # the next attempt's limit is placement's to give
                job.not_before_ts = event.not_before_ts
                return self._set(job, JobState.PENDING)
            case c.JobCancelled(job_id=job_id, reason=reason, attempt=attempt):
                job = self.jobs.get(job_id)
                if job is None or job.state not in LIVE:
                    return None
                if job.state in HOLDS_RESOURCES and attempt != job.attempt:
                    return None  # a stale cancel: the agent stops the running attempt (see above)
                job.reason = reason or "cancelled"
                job.ended_ts = time
                return self._set(job, JobState.CANCELLED)
            case c.JobUnschedulable(job_id=job_id, reason=reason):
                return self._terminal(job_id, JobState.UNSCHEDULABLE, reason, time)
            case c.JobDependencyNeverSatisfied(job_id=job_id, reason=reason):
                return self._terminal(job_id, JobState.DEPENDENCY_NEVER_SATISFIED, reason, time)
            case c.PlacementBlocked(job_id=job_id, reasons=reasons):
                job = self.jobs.get(job_id)
                if job is not None and job.state is JobState.PENDING:
                    job.last_block = tuple(reasons)
                    job.reason = "; ".join(f"{r.nodes} nodes: {r.reason}" for r in reasons)
                    job.reserved_at = event.earliest_start_ts
                    job.reserved_nodes = tuple(event.reserved_nodes)
                return None
        return None

    def resize_applies(self, event: c.JobResized) -> bool:
        """Whether a ``JobResized`` changes the job: its attempt holds resources, and the event was decided
        on the allocation it has now (``previous_nodes`` is its size; a growth keeps it as its first nodes
        and adds others, a shrink keeps some of them, the first node, where it was launched, among them). A resize decided on an allocation that has changed since (placement's growth and
        preemption's shrink may cross in the log) changes nothing: every fold agrees."""
        job = self.jobs.get(event.job_id)
        if job is None or job.state not in HOLDS_RESOURCES or event.attempt != job.attempt or not event.allocations:
            return False
        held = [a.node for a in job.allocations]
        new = [a.node for a in event.allocations]
        if not held or new[0] != held[0] or len(set(new)) != len(new) or event.previous_nodes != len(held):
            return False
        return new[: len(held)] == held if len(new) > len(held) else set(new) <= set(held)

    # -- helpers

    def _set(self, job: Job, state: JobState) -> Transition:
        before = job.state
        job.state = state
        return Transition(job, before, state)

    def _move(self, job_id: str, allowed: set[JobState], to: JobState, time: float) -> Transition | None:
        job = self.jobs.get(job_id)
        if job is None or job.state not in allowed:
            return None
        return self._set(job, to)

    def _end(
        self, job_id: str, attempt: int, to: JobState, time: float, reason: str, code: int | None
    ) -> Transition | None:
        job = self.jobs.get(job_id)
        if job is None or job.state not in HOLDS_RESOURCES or attempt != job.attempt:
            return None
        job.ended_ts = time
        job.reason = reason
        job.exit_code = code
        return self._set(job, to)

    def _terminal(self, job_id: str, to: JobState, reason: str, time: float) -> Transition | None:
        job = self.jobs.get(job_id)
        if job is None or job.state not in (JobState.PENDING, JobState.HELD):
            return None
        job.reason = reason
        job.ended_ts = time
        return self._set(job, to)


_SHARED_STRINGS = ("tenant", "account", "user", "qos", "profile", "gpu_type", "gpu_variant", "priority_class",
                   "restart_policy")


class _NoEntries(dict):  # type: ignore[type-arg]
    """The one empty map every compacted spec shares; it refuses to be changed."""

    __slots__ = ()

    def _read_only(self, *_args: object, **_kw: object) -> None:
        raise TypeError("a job spec's maps are read-only")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _read_only  # type: ignore[assignment]


_NO_ENTRIES = _NoEntries()
_MAPS = ("env", "node_selector", "labels", "licenses")


class _SharedEnvironment(dict):  # type: ignore[type-arg]
    """A submitting environment held once for every spec that carries an equal one; read-only."""

    __slots__ = ("__weakref__",)

    def _read_only(self, *_args: object, **_kw: object) -> None:
        raise TypeError("a job spec's maps are read-only")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _read_only  # type: ignore[assignment]

    def __copy__(self) -> _SharedEnvironment:  # read-only: a copy is itself
        return self

    def __deepcopy__(self, _memo: object) -> _SharedEnvironment:
        return self

    def __reduce__(self) -> tuple[type, tuple[dict[str, str]]]:  # pickled as the plain map it holds
        return (dict, (dict(self),))


# Content hash -> the one map of that content that some spec still holds (gone with the last of them).
_ENVIRONMENTS: weakref.WeakValueDictionary[int, _SharedEnvironment] = weakref.WeakValueDictionary()


def _shared_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the map every spec with an equal submitting environment holds.

    sbatch copies the submitting shell's environment into each job (Slurm's --export=ALL): a few KB that
    are the same for every job one shell or one workflow tool submits, and for every task of an array.
    Held once, a queued job costs what it did before it carried one (its other fields)."""
    if isinstance(env, _SharedEnvironment):
        return env
    key = hash(frozenset(env.items()))
    known = _ENVIRONMENTS.get(key)
    if known is not None and dict.__eq__(known, env):
        return known
    shared = _SharedEnvironment(env)
    if known is None:  # a collision of two contents keeps the first shared, the second a map of its own
        _ENVIRONMENTS[key] = shared
    return shared


# A command line -> the one tuple of it the specs share (the tasks of an array, a workflow tool's
# workers, a sweep: a million queued jobs of a few commands). Bounded: cleared when full, so a log of
# a million distinct commands holds each in its own spec only, as before.
_COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {}
_COMMANDS_MAX = 4_096


def _shared_command(command: tuple[str, ...]) -> tuple[str, ...]:
    known = _COMMANDS.get(command)
    if known is not None:
        return known
    if len(_COMMANDS) >= _COMMANDS_MAX:
        _COMMANDS.clear()
    _COMMANDS[command] = command
    return command


def compact(spec: c.JobSpec) -> c.JobSpec:
    """The same spec with its low-cardinality strings interned and its empty maps shared, in place.

    Decoding makes a new string object for every field of every event; a
    million queued jobs of a hundred accounts would otherwise hold a million
    copies of each account name. (Measured with ``horizon bench --only memory``.)
    An empty ``dict`` field is a 64-byte object of its own in every spec (three
    of them: 192 of the 1,176 resident bytes per queued job measured); they all
    become one shared, read-only empty map. A submitting environment (sbatch's
    ``--export``, a few KB) is held once for all the specs that carry an equal one, and so
    is a command line (72 bytes for ``python train.py``).
    The spec is frozen for every reader; swapping a value for an equal one is
    invisible to them, and doing it in place spares a 512-byte copy per job.
    """
    for name in _MAPS:
        value = getattr(spec, name)
        if not value and value is not _NO_ENTRIES:
            msgspec.structs.force_setattr(spec, name, _NO_ENTRIES)
    if spec.submit_env is not None:
        msgspec.structs.force_setattr(spec, "submit_env", _shared_environment(spec.submit_env))
    if spec.command and type(spec.command) is tuple:  # (as decoded; a spec built in memory may hold a list)
        command = _shared_command(spec.command)
        if command is not spec.command:
            msgspec.structs.force_setattr(spec, "command", command)
    for name in _SHARED_STRINGS:
        value = getattr(spec, name)
        if isinstance(value, str):
            shared = sys.intern(value)
            if shared is not value:
                msgspec.structs.force_setattr(spec, name, shared)
    return spec


def _with(spec: c.JobSpec, **changes: object) -> c.JobSpec:
    return msgspec.structs.replace(spec, **changes)
