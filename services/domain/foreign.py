"""What a partition leader keeps of the jobs it skips: their outcomes, for its own jobs' dependencies and
singletons (docs/scaling.md, "What a leader keeps of other partitions' jobs"). Pure.

A scheduling leader of some partitions skips the records of other partitions' jobs before it decodes
them (``services/domain/leaders.py``). Its own jobs may still depend on those jobs (``--dependency
afterok:<job of partition b>``), and a singleton job of its own waits while a job of its tenant, user and
name runs or waits ahead of it in any partition. So from each record it skips it keeps what one
scheduler's job table would say of that job to ``dependency_status`` and to ``Singletons``, and no more:

* ``codes``: per foreign job, one int (``_STATE`` .. ``_ATTEMPT_SHIFT`` below): its state, whether it
  ever started, whether it ever checkpointed, whether its restart policy will requeue it ("requeue
  pending": it has not ended for good), whether it has settled, what its restart policy and retries
  left are, and its attempt. It follows ``JobTable.apply``'s transitions and ``QueueFold``'s requeue
  rules (``requeue_now``, ``_may_retry``) exactly, so ``get`` answers what ``JobTable.get`` would with
  the job's requeue pending as ``to_requeue`` says it. A job that has settled (ended, no requeue to
  follow) ignores every later event, as a settled job of the table does.
* ``arrays``: a foreign array's tasks in acceptance order (a dependency on a whole array).
* ``live``: per foreign job not settled, its (tenant, user, name), interned, and the sequence of its
  acceptance: what a singleton job needs (``Singletons`` holds the foreign members of the keys it
  watches, ``members``).

``apply`` reads only the fields a ``Peek`` reads (the job id, the attempt, ``node_lost``,
``out_of_memory``, ``checkpoint_ref``; an acceptance's hold, array, restart policy, retries, requeue,
tenant, user, name), so the skip path and ``evolve`` (a decoded event has the same attributes) fold
the same way. ``apply`` is idempotent for one record: every change it makes is guarded by the state it
leaves, so asking it twice changes nothing more.
"""

from __future__ import annotations

from typing import Any

from services.domain.jobs import HOLDS_RESOURCES, LIVE, STATES, Job, JobState, JobTable

__all__ = ["ForeignJobs", "MOVES", "NOTHING", "CHANGED", "MOVED"]

NOTHING, CHANGED, MOVED = 0, 1, 2  # what ``apply`` did: nothing; a checkpoint or requeue flag; a transition

_INDEX = {state: i for i, state in enumerate(STATES)}
_STATE = 0xF  # bits 0-3: the state's index in STATES
_STARTED = 1 << 4
_CHECKPOINTED = 1 << 5
_PENDING = 1 << 6  # its restart policy requeues it (QueueFold's to_requeue): not ended for good
_SETTLED = 1 << 7  # ended for good: later events change nothing (as JobTable.settle)
_REQUEUE = 1 << 8  # spec.requeue: a lost node or a preemption requeues it
_POLICY_SHIFT = 9  # bits 9-10: restart policy
_LEFT_SHIFT = 11  # bits 11-18: retries left (max_retries is at most events.vocabulary.MAX_RETRIES, 100)
_LEFT_MASK = 0xFF
_FLAGS = (1 << 19) - 1
_OUTCOME = _STATE | _STARTED | _CHECKPOINTED  # what a settled job keeps
_ATTEMPT_SHIFT = 19  # bits 19-: the attempt (a code stays one machine digit below 2**30: 2,048 attempts)
_RETRIES = _LEFT_MASK << _LEFT_SHIFT
_POLICIES = {"never": 0, "on-failure": 1, "always": 2}
_ON_FAILURE, _ALWAYS = 1, 2

_PENDING_I, _HELD_I = _INDEX[JobState.PENDING], _INDEX[JobState.HELD]
_SCHEDULED_I, _RUNNING_I = _INDEX[JobState.SCHEDULED], _INDEX[JobState.RUNNING]
_SUCCEEDED_I, _PREEMPTED_I = _INDEX[JobState.SUCCEEDED], _INDEX[JobState.PREEMPTED]
_FAILED_I, _OOM_I, _CANCELLED_I = _INDEX[JobState.FAILED], _INDEX[JobState.OUT_OF_MEMORY], _INDEX[JobState.CANCELLED]
_WAITING = frozenset({_PENDING_I, _HELD_I})
_HOLDING = frozenset(_INDEX[s] for s in HOLDS_RESOURCES)
_LIVE = frozenset(_INDEX[s] for s in LIVE)
_REQUEUEABLE = frozenset({_FAILED_I, _OOM_I, _PREEMPTED_I, _SUCCEEDED_I})
_ENDED_WAITING = {"JobUnschedulable": _INDEX[JobState.UNSCHEDULABLE],
                  "JobDependencyNeverSatisfied": _INDEX[JobState.DEPENDENCY_NEVER_SATISFIED]}

# The events that may move a job's code (every other event of a job, e.g. PlacementBlocked, moves nothing)
MOVES = frozenset({"JobScheduled", "JobStarted", "JobSucceeded", "JobFailed", "JobPreempted", "JobCheckpointed",
                   "JobRequeued", "JobCancelled", "JobHeld", "JobReleased", *_ENDED_WAITING})

Key = tuple[str, str, str]


class ForeignJobs:
    def __init__(self) -> None:
        self.codes: dict[str, int] = {}  # foreign job -> its code (module docstring)
        self.arrays: dict[str, list[str]] = {}  # foreign array -> its tasks, in acceptance order
        self.task_array: dict[str, str] = {}  # foreign task -> its array (derived from ``arrays``)
        self.live: dict[str, tuple[Key, int]] = {}  # foreign job not settled -> (tenant, user, name), accepted seq
        self._keys: dict[Key, Key] = {}  # interned keys (many jobs share one)
        self.settled_last: tuple[str, tuple[Key, int]] | None = None  # the last job ``apply`` settled, and its entry

    # ------------------------------------------------------------------ fold

    def accept(self, job_id: str, spec: Any, seq: int, table: JobTable) -> int:
        """A foreign job's ``JobAccepted`` (``spec``: a ``JobSpec`` or a peek at one; ``table``: the leader's
        own jobs)."""
        if job_id in self.codes or job_id in table.jobs or job_id in table.settled:
            return NOTHING  # a duplicate: the first acceptance holds
        code = (_HELD_I if spec.hold else _PENDING_I) | (_REQUEUE if spec.requeue else 0)
        if spec.max_retries > 0 and spec.restart_policy != "never":
            code |= _POLICIES.get(spec.restart_policy, 0) << _POLICY_SHIFT | min(spec.max_retries, _LEFT_MASK) << _LEFT_SHIFT
        self.codes[job_id] = code
        if spec.array is not None:
            self.arrays.setdefault(spec.array, []).append(job_id)
            self.task_array[job_id] = spec.array
        key = (spec.tenant, spec.user, spec.name)
        self.live[job_id] = (self._keys.setdefault(key, key), seq)
        return MOVED

    def apply(self, kind: str, job_id: str, event: Any) -> int:
        """A later event of a foreign job (``event``: the decoded event or a ``Peek``): NOTHING, CHANGED
        (a first checkpoint, a requeue flag cleared) or MOVED (a transition, as ``JobTable.apply``'s).
        The three events every job has come first, the others after (one scheduler's rules each)."""
        code = self.codes.get(job_id)
        if code is None or code & _SETTLED:
            return NOTHING
        state = code & _STATE
        if kind == "JobScheduled":
            attempt = event.attempt
            if state != _PENDING_I or attempt != (code >> _ATTEMPT_SHIFT) + 1:
                return NOTHING
            self.codes[job_id] = (code & _FLAGS & ~_STATE) | _SCHEDULED_I | attempt << _ATTEMPT_SHIFT
            return MOVED
        if kind == "JobStarted":
            if state != _SCHEDULED_I or event.attempt != code >> _ATTEMPT_SHIFT:
                return NOTHING
            self.codes[job_id] = (code & ~_STATE) | _RUNNING_I | _STARTED
            return MOVED
        if kind == "JobSucceeded" or kind == "JobFailed":
            if state not in _HOLDING or event.attempt != code >> _ATTEMPT_SHIFT:
                return NOTHING
            if kind == "JobSucceeded":
                new, lost = _SUCCEEDED_I, False
            else:
                new, lost = _OOM_I if event.out_of_memory else _FAILED_I, event.node_lost
            code = (code & ~_STATE) | new
            return self._end(job_id, _requeue(code, new, lost) if lost or code & _RETRIES else code)
        return self._other(kind, job_id, event, code, state)

    def _other(self, kind: str, job_id: str, event: Any, code: int, state: int) -> int:
        """``apply`` for the events most jobs never have."""
        attempt = code >> _ATTEMPT_SHIFT
        if kind == "JobPreempted":
            if event.checkpoint_ref and event.attempt == attempt:
                code |= _CHECKPOINTED
            if state in _HOLDING and event.attempt == attempt:
                return self._end(job_id, _requeue((code & ~_STATE) | _PREEMPTED_I, _PREEMPTED_I, True))
            if code != self.codes[job_id]:
                self.codes[job_id] = code
                return CHANGED
            return NOTHING
        if kind == "JobCheckpointed":
            if event.attempt == attempt and event.checkpoint_ref and not code & _CHECKPOINTED:
                self.codes[job_id] = code | _CHECKPOINTED
                return CHANGED
            return NOTHING
        new = -1
        if kind == "JobRequeued":
            was = code
            code &= ~_PENDING  # the requeue is taken (QueueFold pops to_requeue whatever the attempt)
            if state in _REQUEUEABLE and event.attempt == attempt:
                new = _PENDING_I
            elif code != was:
                self.codes[job_id] = code
                return CHANGED
        elif kind == "JobCancelled":
            if state in _LIVE and not (state in _HOLDING and event.attempt != attempt):
                new = _CANCELLED_I
        elif kind == "JobHeld":
            if state == _PENDING_I:
                new = _HELD_I
        elif kind == "JobReleased":
            if state == _HELD_I:
                new = _PENDING_I
        elif kind in _ENDED_WAITING:
            if state in _WAITING:
                new = _ENDED_WAITING[kind]
        if new < 0:
            return NOTHING
        if new in _LIVE:
            self.codes[job_id] = (code & ~_STATE) | new
            return MOVED
        return self._end(job_id, (code & ~_STATE) | new)

    def _end(self, job_id: str, code: int) -> int:
        """The job left LIVE with ``code``: settled unless its requeue is pending (``QueueFold._settle``);
        a settled job keeps its outcome only (no event moves it any more)."""
        if not code & _PENDING:
            code = (code & _OUTCOME) | _SETTLED  # below 256: one of Python's shared small ints
            entry = self.live.pop(job_id, None)
            if entry is not None:
                self.settled_last = (job_id, entry)
                if len(self._keys) > 2 * len(self.live) + 64:
                    self._keys = {key: key for key, _seq in self.live.values()}
        self.codes[job_id] = code
        return MOVED

    # ------------------------------------------------------------------ read

    def get(self, job_id: str) -> Job | None:
        """The job as ``JobTable.get`` would answer for ``dependency_status``: a bare ``Job`` (no spec) in its
        state, started or not, checkpointed or not; a job whose requeue is pending as not ended (PENDING,
        which every dependency kind reads alike: not ended, and started only if it had)."""
        code = self.codes.get(job_id)
        if code is None:
            return None
        state = JobState.PENDING if code & _PENDING else STATES[code & _STATE]
        return Job(job_id, None, state, started_ts=1.0 if code & _STARTED else 0.0,
                   checkpoint_ref="" if code & _CHECKPOINTED else None)

    def state_of(self, job_id: str) -> JobState | None:
        code = self.codes.get(job_id)
        return None if code is None else STATES[code & _STATE]

    def key_of(self, job_id: str) -> tuple[Key, int] | None:
        """The (tenant, user, name) and acceptance sequence of a job not settled, or of the one ``apply``
        settled last (its singleton watchers must still see it go)."""
        entry = self.live.get(job_id)
        if entry is None and self.settled_last is not None and self.settled_last[0] == job_id:
            return self.settled_last[1]
        return entry

    def members(self, keys: set[Key] | dict[Key, Any]) -> dict[Key, dict[str, Job]]:
        """The live foreign jobs of these (tenant, user, name) keys, as ``Singletons`` holds its members:
        bare ``Job``s with their state and acceptance sequence (one pass over the live foreign jobs)."""
        out: dict[Key, dict[str, Job]] = {}
        if not keys:
            return out
        for job_id, (key, seq) in self.live.items():
            if key in keys:
                state = self.codes[job_id] & _STATE
                if state in _LIVE:
                    out.setdefault(key, {})[job_id] = Job(job_id, None, STATES[state], accepted_seq=seq)
        return out

    # ------------------------------------------------------------------ snapshots

    def data(self) -> list[Any]:
        """What a snapshot carries (maps in their own order: the order they were folded in)."""
        return [self.codes, self.arrays, [[job_id, *key, seq] for job_id, (key, seq) in self.live.items()]]

    @classmethod
    def from_data(cls, data: list[Any]) -> ForeignJobs:
        out = cls()
        out.codes, out.arrays = dict(data[0]), {a: list(t) for a, t in data[1].items()}
        out.task_array = {task: array for array, tasks in out.arrays.items() for task in tasks}
        for job_id, tenant, user, name, seq in data[2]:
            key = (tenant, user, name)
            out.live[job_id] = (out._keys.setdefault(key, key), seq)
        return out


def _requeue(code: int, ended: int, requeue_now: bool) -> int:
    """The code of a job that has just ended ``ended`` (FAILED, OUT_OF_MEMORY, SUCCEEDED, PREEMPTED): whether
    its restart policy requeues it, as ``QueueFold._track`` decides by ``services/domain/restart.py``'s rules
    (a lost node or a preemption requeues a job of ``requeue`` without counting a retry; a failure, or a
    success under "always", takes a retry while some are left), on the code's bits instead of a spec."""
    if not code & _RETRIES and not requeue_now:
        return code  # no retries left (or none asked): it has ended for good
    if requeue_now and code & _REQUEUE:
        return code | _PENDING
    if ended == _PREEMPTED_I:
        return code
    left = (code >> _LEFT_SHIFT) & _LEFT_MASK
    policy = (code >> _POLICY_SHIFT) & 3
    if left and (policy in (_ON_FAILURE, _ALWAYS) if ended != _SUCCEEDED_I else policy == _ALWAYS):
        return (code & ~(_LEFT_MASK << _LEFT_SHIFT)) | (left - 1) << _LEFT_SHIFT | _PENDING
    return code
