"""Why a pending or held job has not started: a kind, a sentence, and Slurm's reason code. Pure.

The reasons are checked in the order ``candidates`` (``order.py``) leaves jobs
out, then placement's verdict, then where the job stands in the order. Each
sentence names what the job waits for: the job it depends on, the limit, the
time, the job whose reservation it would delay, the head. ``horizon queue --why``,
``horizon show`` and a timeout's ``JobUnschedulable`` give the sentence; Slurm's
commands (``squeue``'s REASON, ``scontrol show job``'s ``Reason=``) give the code,
which tools that drive Slurm read: ``Resources``, ``Priority``, ``Dependency``, ...
(``SLURM_REASONS``, one per kind, and the finer ones: ``BeginTime`` and
``JobHeldUser``, a quota's ``AssocGrp...``/``QOSGrp...`` limit, ``PartitionDown``; ``Licenses``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from services.domain.dependencies import MET, dependency_status
from services.domain.fairshare import association
from services.domain.jobs import HOLDS_RESOURCES, Job, JobState
from services.domain.policy import Context
from services.domain.queue.index import QueueIndex, count_before, merged
from services.domain.queue.order import context, ordered_queue, queue_key
from services.domain.queue.state import SchedulingState
from services.domain.quotas import BLOCKED, amount_of
from services.domain.timestamps import at, when

__all__ = ["WAITING_KINDS", "SLURM_REASONS", "Waiting", "slurm_reason", "why_waiting", "waiting", "waiting_all"]


WAITING_KINDS = (
    "held",  # aside until released (Slurm: JobHeldUser / JobHeldAdmin)
    "dependency",  # a job it depends on has not done what it waits for; names it (Dependency)
    "backoff",  # a requeued job's restart backoff, until a time (BeginTime)
    "fits-nowhere",  # no node could hold it even empty: placement's verdict (BadConstraints)
    "array-limit",  # its array's running limit, %N (JobArrayTaskLimit)
    "quota",  # an account's quota, naming the limit (AssocGrp*Limit / QOS limits)
    "licenses",  # a license it needs is not free, naming it and its count (Licenses)
    "reservation",  # it fits now, but would delay the reservation of the job it names (Priority, backfill)
    "resources",  # placement's per-filter verdict, with its reservation if it has one (Resources)
    "placing",  # a candidate of the cycle placement is working on
    "cycle",  # not tried yet: the next cycle will offer it; how many jobs are ahead, the head
    "priority",  # not offered: jobs ahead of it fill the cycle, or strict order stops before it (Priority)
)


# Slurm's reason code of each kind (slurm/slurm.h's job_state_reason, as squeue prints it); a kind's
# finer code, where the kind has one, is set where the reason is found (``_reason``).
SLURM_REASONS = {
    "held": "JobHeldUser",
    "dependency": "Dependency",  # singleton too, as Slurm's
    "backoff": "BeginTime",  # --begin, and a requeued job's restart backoff (Slurm requeues with a begin time)
    "fits-nowhere": "BadConstraints",
    "array-limit": "JobArrayTaskLimit",
    "quota": "AssocGrpCpuLimit",  # the limit's own: AssocGrpGRES, QOSGrpJobsLimit, ... (quotas.slurm_code)
    "licenses": "Licenses",
    "reservation": "Priority",  # it would delay a job ahead of it: Slurm's backfill says Priority
    "resources": "Resources",  # PartitionDown when its partition is down
    "placing": "None",  # being placed: nothing holds it back
    "cycle": "None",  # not tried yet: Slurm's reason until its scheduler has looked at a job
    "priority": "Priority",
}


class Waiting(NamedTuple):
    """Why a job waits: a kind from ``WAITING_KINDS``, a sentence, and Slurm's reason code ("": the
    kind's, ``SLURM_REASONS``; ``slurm_reason`` gives it)."""

    kind: str
    why: str
    code: str = ""


def slurm_reason(kind: str, code: str = "") -> str:
    """The reason code Slurm's commands show for a waiting job of ``kind``: its own ``code`` if it has
    one, else the kind's (``SLURM_REASONS``); ``None`` for no kind, as Slurm's."""
    return code or SLURM_REASONS.get(kind, "None")


class _Order(Protocol):
    def ahead(self, job: Job) -> tuple[int, Job | None, Job | None, Job | None]:
        """(pending jobs before it in the order, the head, the first of them holding a reservation,
        the first of them with a placement verdict)."""
        ...

    def array_ahead(self, job: Job) -> int:
        """Pending tasks of its array before it in the order."""
        ...

    def in_cycle(self, job_id: str) -> bool:
        """Whether the job is a candidate of the last cycle decided."""
        ...


class _Ordered:
    """``_Order`` of a whole queue already sorted: every answer a lookup."""

    def __init__(self, ordered: list[Job], state: SchedulingState) -> None:
        self.candidates = set(state.cycle_candidates)
        self.position = {job.job_id: i for i, job in enumerate(ordered)}
        self.ordered = ordered
        self.first_holder = next((i for i, j in enumerate(ordered) if j.reserved_at is not None), len(ordered))
        self.first_blocked = next((i for i, j in enumerate(ordered) if j.last_block), len(ordered))
        self.tasks_before: dict[str, int] = {}
        seen: dict[str, int] = {}
        for job in ordered:
            array = job.spec.array if job.spec is not None else None
            if array is not None:
                self.tasks_before[job.job_id] = seen.get(array, 0)
                seen[array] = seen.get(array, 0) + 1

    def ahead(self, job: Job) -> tuple[int, Job | None, Job | None, Job | None]:
        i = self.position[job.job_id]
        head = self.ordered[0] if i > 0 else None
        holder = self.ordered[self.first_holder] if self.first_holder < i else None
        blocker = self.ordered[self.first_blocked] if self.first_blocked < i else None
        return i, head, holder, blocker

    def array_ahead(self, job: Job) -> int:
        return self.tasks_before.get(job.job_id, 0)

    def in_cycle(self, job_id: str) -> bool:
        return job_id in self.candidates


class _Scan:
    """``_Order`` for one job: a single pass comparing sort keys (no sort), done when first asked."""

    def __init__(self, state: SchedulingState, job: Job, ctx: Context | None) -> None:
        self.state, self.job, self.ctx = state, job, ctx
        self._found: tuple[int, Job | None, Job | None, Job | None, int] | None = None

    def _scan(self) -> tuple[int, Job | None, Job | None, Job | None, int]:
        if self._found is None:
            ctx = self.ctx or context(self.state)
            key = queue_key(self.state)
            mine = key(self.job, ctx)
            index = self.state.queue_index
            if index.policy == self.state.config.policy and len(index) == len(self.state.pending):
                self._found = self._indexed(index, key, ctx, mine)
                return self._found
            array = self.job.spec.array if self.job.spec is not None else None
            count = tasks = 0
            head = holder = blocker = None  # (key, job) of the first of each
            for other in self.state.pending.values():
                if other is self.job:
                    continue
                k = key(other, ctx)
                if not k < mine:
                    continue
                count += 1
                if head is None or k < head[0]:
                    head = (k, other)
                if other.reserved_at is not None and (holder is None or k < holder[0]):
                    holder = (k, other)
                if other.last_block and (blocker is None or k < blocker[0]):
                    blocker = (k, other)
                if array is not None and other.spec is not None and other.spec.array == array:
                    tasks += 1
            self._found = (count, head[1] if head else None, holder[1] if holder else None,
                           blocker[1] if blocker else None, tasks)
        return self._found

    def _indexed(self, index: QueueIndex, key: Callable[[Job, Context], tuple[float | int, ...]], ctx: Context,
                 mine: tuple[float | int, ...]) -> tuple[int, Job | None, Job | None, Job | None, int]:
        """What the scan finds, from the queue index (``index.py``): the count by a binary search of each
        run, the head from the runs' heads; the keys of the jobs with a placement verdict and of the
        job's array's tasks only (a timeout's reason in a backlog of a million jobs)."""
        state, me = self.state, self.job
        count = count_before(index, key, ctx, mine)
        head = next(merged(index, key, ctx, state.pending), None) if count else None
        holder = blocker = None  # (key, job) of the first of each
        for other in state.pending.values():
            if other is me or (other.reserved_at is None and not other.last_block):
                continue
            k = key(other, ctx)
            if not k < mine:
                continue
            if other.reserved_at is not None and (holder is None or k < holder[0]):
                holder = (k, other)
            if other.last_block and (blocker is None or k < blocker[0]):
                blocker = (k, other)
        array = me.spec.array if me.spec is not None else None
        tasks = 0
        for task_id in state.jobs.arrays.get(array, ()) if array is not None else ():
            other = state.pending.get(task_id)
            if other is not None and other is not me and other.spec is not None and other.spec.array == array \
                    and key(other, ctx) < mine:
                tasks += 1
        return count, head, holder[1] if holder else None, blocker[1] if blocker else None, tasks

    def ahead(self, job: Job) -> tuple[int, Job | None, Job | None, Job | None]:
        return self._scan()[:4]

    def array_ahead(self, job: Job) -> int:
        return self._scan()[4]

    def in_cycle(self, job_id: str) -> bool:
        return job_id in self.state.cycle_candidates


def why_waiting(state: SchedulingState, job: Job, max_candidates: int) -> str:
    """Why a pending or held job has not started: the sentence of ``waiting`` (what a timeout's
    ``JobUnschedulable`` and ``horizon show`` give)."""
    return waiting(state, job, max_candidates).why

def waiting(state: SchedulingState, job: Job, max_candidates: int, ctx: Context | None = None) -> Waiting:
    """Why one job waits (see ``WAITING_KINDS``). Where it stands in the order is found by one
    scan of the queue, and only for the kinds that name it; for a whole queue use
    ``waiting_all``, which sorts once."""
    return _waiting(state, job, _Scan(state, job, ctx), max_candidates)

def waiting_all(state: SchedulingState, max_candidates: int, ordered: list[Job] | None = None,
                ctx: Context | None = None) -> dict[str, Waiting]:
    """Why each pending job (``ordered``: the queue in scheduling order, from ``ordered_queue``)
    and each held job waits, by job id: the same answers as ``waiting``, in O(n) after the sort."""
    if ordered is None:
        ordered = ordered_queue(state, ctx=ctx)
    order = _Ordered(ordered, state)
    out = {job.job_id: _waiting(state, job, order, max_candidates) for job in ordered}
    for job in state.jobs.jobs.values():
        if job.state is JobState.HELD:
            out[job.job_id] = _waiting(state, job, order, max_candidates)
    return out

def _waiting(state: SchedulingState, job: Job, order: _Order, max_candidates: int) -> Waiting:
    """The reason (``_reason``), with what ends the wait if nothing else does: a dependency timeout
    while a dependency is not met, a deadline (Slurm's --deadline) the job must start in time for."""
    reason = _reason(state, job, order, max_candidates)
    spec = job.spec
    if spec is None:
        return reason
    why = reason.why
    if reason.kind == "dependency" and spec.dependency_timeout_s is not None and (spec.dependencies
                                                                                 or spec.after_datasets):
        why += f"; gives up {at(job.accepted_ts + spec.dependency_timeout_s)} (dependency timeout)"
    if spec.deadline_ts and state.now + spec.time_limit_s <= spec.deadline_ts:
        why += (f"; must start by {when(spec.deadline_ts - spec.time_limit_s)} to end by its deadline "
                f"{when(spec.deadline_ts)} (--deadline)")
    return Waiting(reason.kind, why, reason.code) if why != reason.why else reason


def _placing_licenses(state: SchedulingState, job_id: str) -> dict[str, int]:
    """The licenses the other candidates of the cycle placement is working on ask for: they are
    taken before this job's turn comes (they join what jobs hold once placed)."""
    if state.placed_cycle >= state.cycle or job_id in state.cycle_candidates:
        return {}
    taken: dict[str, int] = {}
    for other in state.cycle_candidates:
        job = state.pending.get(other)
        if job is not None and job.spec is not None and job.spec.licenses:
            for name, count in job.spec.licenses.items():
                taken[name] = taken.get(name, 0) + count
    return taken


def _reason(state: SchedulingState, job: Job, order: _Order, max_candidates: int) -> Waiting:
    """The reason, checked in the order ``candidates`` leaves jobs out, then placement's verdict,
    then where the job stands. Each sentence says what it waits for and names it: the job it
    depends on, the limit, the time, the job whose reservation it would delay, the head."""
    spec = job.spec
    if spec is None:
        return Waiting("", "")
    job_id = job.job_id
    # 1. aside: held jobs are no candidates at all (the fold does not keep the hold's reason)
    if job.state is JobState.HELD:
        return Waiting("held", "held: not a candidate until released (horizon release)")
    # 2. what ``candidates`` leaves out, in the same order
    for dep in spec.dependencies:
        status, why = dependency_status(dep, state.jobs, state.to_requeue, state.foreign)
        if status != MET:
            return Waiting("dependency", why)
    for name in spec.after_datasets:
        if name not in state.datasets:
            return Waiting("dependency", f"waiting for dataset {name} to be announced available (afterdata)")
    other = state.singletons.blocker(job)
    if other is not None:
        doing = "runs" if other.state in HOLDS_RESOURCES else "waits ahead of it"
        return Waiting("dependency", f"singleton: {other.job_id}, of the same name and user, {doing}")
    if job.not_before_ts > state.now:
        if job.attempt == 0 and spec.begin_ts:
            return Waiting("backoff", f"begins {at(job.not_before_ts)} (--begin)", "BeginTime")
        after = f" ({job.reason})" if job.reason and not job.last_block else ""
        return Waiting("backoff", f"restart backoff until {when(job.not_before_ts)}{after}")
    if state.fits_nowhere.get(job_id, -1) >= state.nodes_seq:
        return Waiting("fits-nowhere", job.reason or "no node could hold it even empty: "
                                                     "waits for the set of nodes to change")
    if spec.array_max_running:
        array, limit = spec.array or "", spec.array_max_running
        running = state.array_running.get(array, 0)
        if running >= limit:
            return Waiting("array-limit", f"array {spec.array} (%{limit}): {running} tasks running, "
                                          "the array's limit")
        ahead = order.array_ahead(job)
        if running + ahead >= limit:
            return Waiting("array-limit", f"array {spec.array} (%{limit}): {running} tasks running and "
                                          f"{ahead} queued ahead of this one, the array's limit")
    if state.quotas.limited(state.fairshare):
        verdict, why, code = state.quotas.judge(state.fairshare, association(spec), amount_of(spec), {})
        if verdict == BLOCKED:
            return Waiting("quota", why, code)
    if spec.licenses and job.state is JobState.PENDING:
        why = state.licenses.judge(spec.licenses, _placing_licenses(state, job_id))
        if why:
            return Waiting("licenses", why, "Licenses")
    # 3. placement's verdict, when it has tried the job since it became pending
    if job.last_block:
        if any(r.filter == "Backfill" for r in job.last_block):
            return Waiting("reservation", job.reason)
        down = "PartitionDown" if any(r.filter == "Partition" and r.reason.endswith(" is down")
                                      for r in job.last_block) else ""
        if job.reserved_at is not None:  # the head: backfilling keeps its nodes for it
            nodes = ",".join(job.reserved_nodes) or "nodes to be chosen"
            return Waiting("resources", f"{job.reason}; reserved to start {at(job.reserved_at)} on {nodes}", down)
        return Waiting("resources", job.reason, down)
    if job.reserved_at is not None:
        nodes = ",".join(job.reserved_nodes) or "nodes to be chosen"
        return Waiting("resources", f"reserved to start {at(job.reserved_at)} on {nodes}")
    # 4. not tried yet: where it stands
    ahead, head, holder, blocker = order.ahead(job)
    behind = f"{ahead} job{'s' if ahead != 1 else ''} ahead of it" if ahead else "first in the queue"
    if head is not None:
        behind += f" (head: {head.job_id})"
    if holder is not None and holder.reserved_at is not None:
        behind += f"; {holder.job_id} holds a reservation from {when(holder.reserved_at)}"
    if state.placed_cycle < state.cycle and order.in_cycle(job_id):
        return Waiting("placing", f"candidate of scheduling cycle {state.cycle}, not placed yet: {behind}")
    if job_id in state.blocked_basis:
        # a candidate that placement passed over without a word: strict order (no backfill)
        # stopped at a job ahead of it that did not fit
        stop = f"behind {blocker.job_id}, which does not fit now" if blocker is not None else "behind the head"
        return Waiting("priority", f"strict order (no backfill): {stop}; {behind}")
    if state.cycle_truncated and job.accepted_seq <= state.cycle_basis:
        # pending at the last cycle's basis and left out by nothing above: the cycle was full
        return Waiting("priority", f"{behind}; a cycle offers only the first {max_candidates} "
                                   "jobs that may start")
    return Waiting("cycle", f"waiting for the next scheduling cycle: {behind}")
