"""Scheduling: the queue, its order, and when to run a cycle. Pure.

The queue is every PENDING job (held jobs wait aside). Order: the configured
``Policy`` (``services.scheduling.policy``): priority class first (critical,
high, normal, low, scavenger), then first come first served by default, or
SJF, F1 or the multifactor priority; the acceptance sequence breaks every
tie, so replays cannot disagree.

A **cycle** is the scheduler's decision "these are the candidates, in this
order" (``SchedulingCycleCompleted``). Placement then places every candidate
that fits and skips those that do not, so a job that does not fit never
blocks the jobs behind it (seed 003's lesson). Cycles are triggered by
events, and batched:

1. a new cycle is decided only once placement has finished the previous one
   (``PlacementCycleCompleted``), so a burst of 10,000 submissions that
   arrives while a cycle is being placed becomes the next single cycle;
2. and only if something that could change the outcome has happened since
   the last cycle's basis: a job became pending (accepted, released,
   requeued, re-prioritised), resources were freed, a node changed, or the
   last cycle was cut at ``max_candidates`` and placed something.

Jobs that certainly cannot start are left out of the candidates, so a head
of unplaceable jobs never pushes placeable ones past ``max_candidates``:

* a job that fits on no node at all (``PlacementBlocked.fits_nowhere``) until
  the set of nodes changes;
* a job that was a candidate and stayed pending at basis ``b`` (placement's
  basis for that cycle), while nothing that could let it start has happened
  since ``b`` (no job ended or left the queue, no node changed, no job joined
  the queue and so possibly changed the head), except the first such job in
  order: it is the head whose reservation backfilling must respect.

At virtual time (simulation) a cycle is decided only on a ``ClockTicked``
(when the tick is the last event applied): the simulator publishes
everything that happens at an instant, then the tick, so one cycle sees the
whole instant, however the events were batched.

Dependencies (``services.scheduling.dependencies``): a job is a candidate only
once all its dependencies are met; one that can never be met ends the job
with ``JobDependencyNeverSatisfied`` and the reason.

Restarts: a failed job whose restart policy allows another attempt is
requeued (``JobRequeued``) until ``max_retries`` retries are used, not before
``backoff_base_s * 2**(retry-1)`` (capped at ``backoff_max_s``) after the
failure; a job whose node was lost or that was preempted is requeued at once
and that does not count as a retry.

Fair share and quotas (``services.scheduling.fairshare``,
``services.scheduling.quotas``): the scheduler charges each attempt's billing
rate to its association from ``JobScheduled`` until the attempt ends, ranks
associations by Fair Tree for the multifactor priority, and admits a
candidate only within its accounts' quotas (or by borrowing, marked in the
cycle's ``borrowing`` list). Arrays: at most ``array_max_running`` tasks of an
array hold resources or are candidates at once.

Scheduling timeout: a job still pending ``scheduling_timeout_s`` after it was
accepted (or requeued) ends ``UNSCHEDULABLE`` with the reason it was waiting.
Time moves with the log; a live cluster's ticker (``ClockTicked``, published
by inventory) makes sure it moves when nothing else happens.

Configuration: ``AccountConfigured``, ``FairShareConfigured`` and
``PolicyConfigured`` on ``horizon.in._admin.*`` are folded here; one that
cannot be applied is answered with ``ConfigRejected`` and the reason.

Snapshots: ``dump``/``load`` write and read the whole state (format version
and configuration checked), so a restart replays only the tail of the log.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple, Protocol

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG, parse_subject
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.scheduling.dependencies import MET, NEVER, dependency_status
from services.scheduling.fairshare import Account, FairShare, association
from services.scheduling.policy import Context, PolicyConfig, make_policy
from services.scheduling.quotas import BLOCKED, BORROW, Amount, Quotas, amount_of
from services.state.config import config_rejected
from services.state.jobs import HOLDS_RESOURCES, TERMINAL, Job, JobState, JobTable, Transition

__all__ = ["SchedulingCore", "SchedulingState", "SNAPSHOT_FORMAT", "Waiting", "WAITING_KINDS"]

SNAPSHOT_FORMAT = 2  # 2: settled jobs kept as outcomes, arrays written out

_NODE_EVENTS = (
    c.NodeRegistered,
    c.NodeReady,
    c.NodeUncordoned,
    c.NodeRemoved,
    c.NodeLost,
    c.NodeCordoned,
    c.NodeDraining,
    c.NodeTaintsChanged,
    c.ProfileConfigured,  # placement's configuration: what fits where may change
    c.ReservationConfigured,
)
_CONFIG_VERBS = {c.AccountConfigured: "account", c.FairShareConfigured: "fairshare", c.PolicyConfigured: "policy"}


@dataclass(slots=True)
class Charge:
    """What one running attempt is charged: to which association, at which rate, how much."""

    leaf: str
    rate: float
    amount: Amount


class SchedulingState(CoreState):
    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.config = config or PolicyConfig()
        self.fairshare = FairShare()
        self.quotas = Quotas()
        self.cycle = 0  # last cycle decided (folded from our own events)
        self.cycle_basis = 0
        self.cycle_truncated = False
        self.cycle_candidates: list[str] = []
        self.placed_cycle = 0  # last cycle placement reported done
        self.dirty_seq = 0  # last sequence that could change a cycle's outcome
        self.capacity_seq = 0  # last sequence at which capacity was added (a job ended, a node changed)
        self.nodes_seq = 0  # last node event
        self.tick_seq = 0  # last ClockTicked
        self.blocked_basis: dict[str, int] = {}  # pending job -> basis of its last "blocked" outcome
        self.fits_nowhere: dict[str, int] = {}  # pending job -> basis at which no node could ever hold it
        self.charges: dict[str, Charge] = {}  # job holding resources -> its charge
        self.retries: dict[str, int] = {}  # job -> retries used (failures, or restarts of "always")
        self.requeue_now: set[str] = set()  # ended jobs to requeue without counting a retry (node lost, preempted)
        self.to_requeue: dict[str, Job] = {}
        self.deadlines: dict[str, float] = {}  # pending job -> when its scheduling timeout expires
        self.config_rejections: dict[int, tuple[str, str]] = {}  # request seq -> (verb, reason)
        # Derived from the above (rebuilt after a snapshot is loaded):
        self.pending: dict[str, Job] = {}
        self.gated: set[str] = set()  # pending jobs that have dependencies
        self.dependents: dict[str, set[str]] = {}  # job -> jobs that depend on it
        self.array_running: dict[str, int] = {}  # array -> tasks holding resources
        self.throttled: set[str] = set()  # pending tasks of arrays with a running limit
        self.deadline_heap: list[tuple[float, str]] = []
        self.wakeups: list[tuple[float, str]] = []  # (not before, job) of requeued jobs in backoff


class _Snapshot(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    seq: int
    now: float
    config: dict[str, object]
    jobs: list[Job]
    settled: dict[str, int]
    arrays: dict[str, list[str]]
    accounts: list[Account]
    fairshare: dict[str, object]
    in_use: dict[str, Amount]
    waiting: dict[str, int]
    counters: list[int]
    cycle_candidates: list[str]
    blocked_basis: dict[str, int]
    fits_nowhere: dict[str, int]
    charges: dict[str, Charge]
    retries: dict[str, int]
    requeue_now: list[str]
    to_requeue: list[str]
    deadlines: dict[str, float]
    config_rejections: dict[int, tuple[str, str]]


@dataclass
class SchedulingCore:
    name: ClassVar[str] = "scheduling"
    max_candidates: int = 10_000
    policy: str = "multifactor"  # until a PolicyConfigured says otherwise
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    snapshot_every: int = 50_000  # events between snapshots (0: never)
    _config: PolicyConfig = field(init=False, repr=False)

    def __post_init__(self) -> None:
        make_policy(self.policy)  # fail early on an unknown name
        self._config = PolicyConfig(policy=self.policy)

    def initial(self) -> SchedulingState:
        return SchedulingState(self._config)

    # ------------------------------------------------------------------ evolve

    def evolve(self, state: SchedulingState, event: Event, record: Record) -> SchedulingState:
        seq = record.seq
        match event:
            case c.SchedulingCycleCompleted(cycle=cycle, basis_seq=basis):
                state.cycle = max(state.cycle, cycle)
                state.cycle_basis = basis
                state.cycle_truncated = len(event.candidates) >= self.max_candidates
                state.cycle_candidates = list(event.candidates)
                return state
            case c.PlacementCycleCompleted(cycle=cycle, scheduled=scheduled, basis_seq=basis):
                state.placed_cycle = max(state.placed_cycle, cycle)
                if cycle == state.cycle:
                    # Every candidate still pending was blocked at placement's basis: it stays
                    # certainly blocked until capacity is added (placement repeats no unchanged
                    # explanation, so this is where the scheduler learns it).
                    for job_id in state.cycle_candidates:
                        if job_id in state.pending:
                            state.blocked_basis[job_id] = max(state.blocked_basis.get(job_id, 0), basis)
                    state.cycle_candidates = []
                    if scheduled and state.cycle_truncated:
                        state.dirty_seq = seq
                return state
            case c.JobRequeued(job_id=job_id):
                state.to_requeue.pop(job_id, None)
                state.requeue_now.discard(job_id)
            case c.PlacementBlocked(job_id=job_id, basis_seq=basis):
                if job_id in state.pending:
                    state.blocked_basis[job_id] = basis
                    if event.fits_nowhere:
                        state.fits_nowhere[job_id] = basis
                    else:
                        state.fits_nowhere.pop(job_id, None)
            case c.ClockTicked():
                state.tick_seq = seq
                self._wake(state, seq)
                return state
            case c.ConfigRejected(request_seq=request_seq) if event.source == self.name:
                state.config_rejections.pop(request_seq, None)
                return state
            case c.AccountConfigured() | c.FairShareConfigured() | c.PolicyConfigured():
                self._configure(state, event, record)
                return state
            case c.JobFailed(job_id=job_id, node_lost=True):
                job = state.jobs.get(job_id)
                if job is not None and job.attempt == event.attempt and job.state in HOLDS_RESOURCES:
                    state.requeue_now.add(job_id)
            case c.JobPreempted(job_id=job_id):
                job = state.jobs.get(job_id)
                if job is not None and job.attempt == event.attempt and job.state in HOLDS_RESOURCES:
                    state.requeue_now.add(job_id)
        if isinstance(event, _NODE_EVENTS):
            state.dirty_seq = state.capacity_seq = state.nodes_seq = seq
            return state
        tr = state.jobs.apply(event, seq, state.now)
        if tr is not None:
            self._track(state, tr, seq)
        elif isinstance(event, c.JobPriorityChanged) and event.job_id in state.pending:
            state.dirty_seq = seq  # the order changed
        self._wake(state, seq)
        return state

    def _wake(self, state: SchedulingState, seq: int) -> None:
        """A requeued job whose backoff is over joins the candidates again: that needs a cycle."""
        while state.wakeups and state.wakeups[0][0] <= state.now:
            at, job_id = heapq.heappop(state.wakeups)
            job = state.pending.get(job_id)
            if job is not None and job.not_before_ts == at:  # not an entry a later requeue made stale
                state.dirty_seq = seq

    def _configure(self, state: SchedulingState, event: Event, record: Record) -> None:
        subject = parse_subject(record.subject)
        verb = _CONFIG_VERBS[type(event)]
        if subject is None or subject.kind != "admin":
            state.config_rejections[record.seq] = (verb, f"{type(event).__name__} is accepted only on "
                                                         f"horizon.in._admin.{verb}, not {record.subject}")
            return
        fs = state.fairshare
        match event:
            case c.AccountConfigured():
                why = fs.check_account(event)
                if why is None:
                    fs.configure_account(event, state.now)
                    self._recount_quotas(state)  # the account may have moved in the tree
            case c.FairShareConfigured():
                why = fs.check_settings(event)
                if why is None:
                    fs.configure(event, state.now)
            case c.PolicyConfigured():
                why = state.config.check(event)
                if why is None:
                    state.config = state.config.updated(event)
        if why is not None:
            state.config_rejections[record.seq] = (verb, why)
        else:
            state.dirty_seq = state.capacity_seq = record.seq  # standings or limits changed

    @staticmethod
    def _recount_quotas(state: SchedulingState) -> None:
        quotas, fs = state.quotas, state.fairshare
        quotas.in_use, quotas.waiting = {}, {}
        for charge in state.charges.values():
            quotas.charge(fs, charge.leaf, charge.amount, +1)
        for job in state.pending.values():
            assert job.spec is not None
            quotas.wait(fs, association(job.spec), +1)

    def _track(self, state: SchedulingState, tr: Transition, seq: int) -> None:
        job = tr.job
        spec = job.spec
        if tr.before is None and spec is not None:
            for dep in spec.dependencies:
                state.dependents.setdefault(dep.job_id, set()).add(job.job_id)
        if job.job_id in state.dependents or (spec is not None and spec.array in state.dependents):
            state.dirty_seq = seq  # its dependants may now be ready, or never
        if spec is None:
            if tr.after in TERMINAL:
                state.jobs.settle(job.job_id)
            return
        if tr.after is JobState.PENDING:
            self._enter_pending(state, job, tr.before)
            # A newcomer may rank before the head and take over the reservation, which can
            # let jobs through that the old head held back: reconsider them all.
            state.dirty_seq = state.capacity_seq = seq
        elif tr.before is JobState.PENDING:
            self._leave_pending(state, job)
            if tr.after is JobState.SCHEDULED:
                self._charge(state, job)
            else:
                # Held or ended while waiting: if it was the head, its reservation is gone and
                # jobs that were held back by it may start now.
                state.dirty_seq = state.capacity_seq = seq
        if isinstance(tr.before, JobState) and tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
            self._uncharge(state, job)
            state.dirty_seq = state.capacity_seq = seq  # capacity freed
        if tr.after in TERMINAL:
            state.deadlines.pop(job.job_id, None)
        if tr.after in (JobState.FAILED, JobState.SUCCEEDED, JobState.PREEMPTED):
            if job.job_id in state.requeue_now:
                state.to_requeue[job.job_id] = job
            elif self._may_retry(state, job, tr.after):
                state.retries[job.job_id] = state.retries.get(job.job_id, 0) + 1
                state.to_requeue[job.job_id] = job
        if tr.after in TERMINAL and job.job_id not in state.to_requeue:
            self._settle(state, job)

    @staticmethod
    def _settle(state: SchedulingState, job: Job) -> None:
        """The job has ended for good: keep only its outcome (``JobTable.settle``), so the state
        (and each snapshot) does not grow with the jobs that have come and gone."""
        assert job.spec is not None
        for dep in job.spec.dependencies:
            waiting = state.dependents.get(dep.job_id)
            if waiting is not None:
                waiting.discard(job.job_id)
                if not waiting:
                    del state.dependents[dep.job_id]
        state.retries.pop(job.job_id, None)
        state.requeue_now.discard(job.job_id)
        state.jobs.settle(job.job_id)

    def _enter_pending(self, state: SchedulingState, job: Job, before: JobState | None) -> None:
        spec = job.spec
        assert spec is not None
        state.pending[job.job_id] = job
        leaf = state.fairshare.leaf_for(spec, state.now).name
        state.quotas.wait(state.fairshare, leaf, +1)
        if spec.dependencies:
            state.gated.add(job.job_id)
        if spec.array_max_running:
            state.throttled.add(job.job_id)
        if job.not_before_ts > state.now:
            heapq.heappush(state.wakeups, (job.not_before_ts, job.job_id))
        if spec.scheduling_timeout_s is not None:
            if before is not JobState.HELD:  # the clock runs from acceptance or requeue, through holds
                state.deadlines[job.job_id] = state.now + spec.scheduling_timeout_s
            heapq.heappush(state.deadline_heap, (state.deadlines[job.job_id], job.job_id))

    def _leave_pending(self, state: SchedulingState, job: Job) -> None:
        assert job.spec is not None
        state.pending.pop(job.job_id, None)
        state.quotas.wait(state.fairshare, association(job.spec), -1)
        state.gated.discard(job.job_id)
        state.throttled.discard(job.job_id)
        state.blocked_basis.pop(job.job_id, None)
        state.fits_nowhere.pop(job.job_id, None)
        if job.state is not JobState.HELD:
            state.deadlines.pop(job.job_id, None)
        while state.deadline_heap and state.deadline_heap[0][1] not in state.pending:
            heapq.heappop(state.deadline_heap)

    def _charge(self, state: SchedulingState, job: Job) -> None:
        spec = job.spec
        assert spec is not None
        fs = state.fairshare
        charge = Charge(fs.leaf_for(spec, state.now).name, fs.rate_of(spec), amount_of(spec))
        state.charges[job.job_id] = charge
        fs.start(charge.leaf, charge.rate, state.now)
        state.quotas.charge(fs, charge.leaf, charge.amount, +1)
        if spec.array is not None:
            state.array_running[spec.array] = state.array_running.get(spec.array, 0) + 1

    def _uncharge(self, state: SchedulingState, job: Job) -> None:
        charge = state.charges.pop(job.job_id, None)
        if charge is None:
            return
        fs = state.fairshare
        fs.stop(charge.leaf, charge.rate, state.now)
        state.quotas.charge(fs, charge.leaf, charge.amount, -1)
        array = job.spec.array if job.spec else None
        if array is not None:
            left = state.array_running.get(array, 0) - 1
            if left > 0:
                state.array_running[array] = left
            else:
                state.array_running.pop(array, None)

    @staticmethod
    def _may_retry(state: SchedulingState, job: Job, outcome: JobState) -> bool:
        spec = job.spec
        if spec is None or outcome is JobState.PREEMPTED:
            return outcome is JobState.PREEMPTED
        if state.retries.get(job.job_id, 0) >= spec.max_retries:
            return False
        if outcome is JobState.FAILED:
            return spec.restart_policy in ("on-failure", "always")
        return spec.restart_policy == "always"

    # ------------------------------------------------------------------ order and candidates

    def context(self, state: SchedulingState) -> Context:
        """The cycle's context: "now", the configuration, fair-share factors and account boosts."""
        policy = make_policy(state.config.policy)
        if not policy.dynamic:
            return Context(state.now, state.config)
        fs = state.fairshare
        boosts = {a.name: a.priority_boost for a in fs.accounts.values() if a.priority_boost}
        return Context(state.now, state.config, fs.factors(state.now), boosts)

    def ordered_queue(self, state: SchedulingState, limit: int | None = None,
                      ctx: Context | None = None) -> list[Job]:
        """Pending jobs in scheduling order (all of them, or the first ``limit``)."""
        ctx = ctx or self.context(state)
        key = make_policy(state.config.policy).key
        jobs = state.pending.values()
        if limit is None or limit >= len(state.pending):
            return sorted(jobs, key=lambda j: key(j, ctx))
        return heapq.nsmallest(limit, jobs, key=lambda j: key(j, ctx))

    def ready(self, state: SchedulingState, job: Job) -> bool:
        """All of the job's dependencies are met."""
        deps = job.spec.dependencies if job.spec else ()
        return all(dependency_status(d, state.jobs, state.to_requeue)[0] == MET for d in deps)

    def candidates(self, state: SchedulingState) -> tuple[list[Job], list[str]]:
        """The first ``max_candidates`` pending jobs in order that may start now, and which of them
        only by borrowing. Left out: jobs certainly blocked (but the head), jobs whose
        dependencies are not met, in restart backoff, over their array's running limit, or over
        a quota."""
        ctx = self.context(state)
        blocked, nowhere, gated = state.blocked_basis, state.fits_nowhere, state.gated
        fs, quotas = state.fairshare, state.quotas
        limited = quotas.limited(fs)
        backoff = bool(state.wakeups)
        if not blocked and not gated and not limited and not backoff and not state.throttled:
            return self.ordered_queue(state, self.max_candidates, ctx), []
        out: list[Job] = []
        borrowing: list[str] = []
        cycle_use: dict[str, Amount] = {}
        array_use: dict[str, int] = {}
        head_kept = False
        for job in self.ordered_queue(state, ctx=ctx):
            job_id, spec = job.job_id, job.spec
            assert spec is not None
            if backoff and job.not_before_ts > state.now:
                continue
            if job_id in gated and not self.ready(state, job):
                continue
            if nowhere.get(job_id, -1) >= state.nodes_seq:
                continue
            if job_id in state.throttled:
                array = spec.array or ""
                if state.array_running.get(array, 0) + array_use.get(array, 0) >= spec.array_max_running:
                    continue
            verdict = ""
            if limited:
                x = amount_of(spec)
                verdict, _why = quotas.admit(fs, association(spec), x, cycle_use)
                if verdict == BLOCKED:
                    continue
            if blocked.get(job_id, -1) >= state.capacity_seq:
                if head_kept:
                    continue
                head_kept = True
            out.append(job)
            if verdict == BORROW:
                borrowing.append(job_id)
            if limited:
                quotas.add_cycle(fs, association(spec), x, cycle_use)
            if job_id in state.throttled:
                array_use[spec.array or ""] = array_use.get(spec.array or "", 0) + 1
            if len(out) >= self.max_candidates:
                break
        return out, borrowing

    # ------------------------------------------------------------------ why a job waits

    def why_waiting(self, state: SchedulingState, job: Job) -> str:
        """Why a pending or held job has not started: the sentence of ``waiting`` (what a timeout's
        ``JobUnschedulable`` and ``horizon show`` give)."""
        return self.waiting(state, job).why

    def waiting(self, state: SchedulingState, job: Job, ctx: Context | None = None) -> Waiting:
        """Why one job waits (see ``WAITING_KINDS``). Where it stands in the order is found by one
        scan of the queue, and only for the kinds that name it; for a whole queue use
        ``waiting_all``, which sorts once."""
        return self._waiting(state, job, _Scan(self, state, job, ctx))

    def waiting_all(self, state: SchedulingState, ordered: list[Job] | None = None,
                    ctx: Context | None = None) -> dict[str, Waiting]:
        """Why each pending job (``ordered``: the queue in scheduling order, from ``ordered_queue``)
        and each held job waits, by job id: the same answers as ``waiting``, in O(n) after the sort."""
        if ordered is None:
            ordered = self.ordered_queue(state, ctx=ctx)
        order = _Ordered(ordered, state)
        out = {job.job_id: self._waiting(state, job, order) for job in ordered}
        for job in state.jobs.jobs.values():
            if job.state is JobState.HELD:
                out[job.job_id] = self._waiting(state, job, order)
        return out

    def _waiting(self, state: SchedulingState, job: Job, order: _Order) -> Waiting:
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
            status, why = dependency_status(dep, state.jobs, state.to_requeue)
            if status != MET:
                return Waiting("dependency", why)
        if job.not_before_ts > state.now:
            after = f" ({job.reason})" if job.reason and not job.last_block else ""
            return Waiting("backoff", f"restart backoff until t={job.not_before_ts:.0f}{after}")
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
            verdict, why = state.quotas.admit(state.fairshare, association(spec), amount_of(spec), {})
            if verdict == BLOCKED:
                return Waiting("quota", why)
        # 3. placement's verdict, when it has tried the job since it became pending
        if job.last_block:
            if any(r.filter == "Backfill" for r in job.last_block):
                return Waiting("reservation", job.reason)
            if job.reserved_at is not None:  # the head: backfilling keeps its nodes for it
                nodes = ",".join(job.reserved_nodes) or "nodes to be chosen"
                return Waiting("resources", f"{job.reason}; reserved to start at t={job.reserved_at:.0f} on {nodes}")
            return Waiting("resources", job.reason)
        if job.reserved_at is not None:
            nodes = ",".join(job.reserved_nodes) or "nodes to be chosen"
            return Waiting("resources", f"reserved to start at t={job.reserved_at:.0f} on {nodes}")
        # 4. not tried yet: where it stands
        ahead, head, holder, blocker = order.ahead(job)
        behind = f"{ahead} job{'s' if ahead != 1 else ''} ahead of it" if ahead else "first in the queue"
        if head is not None:
            behind += f" (head: {head.job_id})"
        if holder is not None and holder.reserved_at is not None:
            behind += f"; {holder.job_id} holds a reservation from t={holder.reserved_at:.0f}"
        if state.placed_cycle < state.cycle and order.in_cycle(job_id):
            return Waiting("placing", f"candidate of scheduling cycle {state.cycle}, not placed yet: {behind}")
        if job_id in state.blocked_basis:
            # a candidate that placement passed over without a word: strict order (no backfill)
            # stopped at a job ahead of it that did not fit
            stop = f"behind {blocker.job_id}, which does not fit now" if blocker is not None else "behind the head"
            return Waiting("priority", f"strict order (no backfill): {stop}; {behind}")
        if state.cycle_truncated and job.accepted_seq <= state.cycle_basis:
            # pending at the last cycle's basis and left out by nothing above: the cycle was full
            return Waiting("priority", f"{behind}; a cycle offers only the first {self.max_candidates} "
                                       "jobs that may start")
        return Waiting("cycle", f"waiting for the next scheduling cycle: {behind}")

    # ------------------------------------------------------------------ decide

    def decide(self, state: SchedulingState) -> list[Event]:
        out: list[Event] = []
        # 1. requeue what the restart policy allows (in job order, deterministic)
        for job_id in sorted(state.to_requeue):
            job = state.to_requeue[job_id]
            delay = 0.0
            if job.state is JobState.FAILED and job_id not in state.requeue_now:
                delay = state.config.backoff_s(state.retries.get(job_id, 1))
            out.append(
                c.JobRequeued(
                    id=f"scheduling/JobRequeued/{job_id}/{job.attempt}",
                    ts=state.now,
                    correlation_id=job_id,
                    source=self.name,
                    job_id=job_id,
                    attempt=job.attempt,
                    reason=f"attempt {job.attempt} {job.state.value.lower()}: {job.reason}".rstrip(": "),
                    not_before_ts=state.now + delay,
                    basis_seq=state.seq,
                    checkpoint_ref=job.checkpoint_ref,
                )
            )
        # 2. pending jobs a dependency can never satisfy end now, with the reason
        for job_id in sorted(state.gated):
            job = state.pending[job_id]
            for dep in job.spec.dependencies if job.spec else ():
                status, why = dependency_status(dep, state.jobs, state.to_requeue)
                if status == NEVER:
                    out.append(c.JobDependencyNeverSatisfied(
                        id=f"scheduling/JobDependencyNeverSatisfied/{job_id}", ts=state.now, correlation_id=job_id,
                        source=self.name, job_id=job_id, dependency=dep, reason=why, basis_seq=state.seq,
                    ))
                    break
        # 3. scheduling timeouts
        if state.deadline_heap and state.deadline_heap[0][0] <= state.now:
            # (a job held and released has two entries for its one deadline: answer it once)
            for deadline, job_id in sorted({e for e in state.deadline_heap if e[0] <= state.now}):
                job = state.pending.get(job_id)
                if job is None or state.deadlines.get(job_id) != deadline or job.spec is None:
                    continue
                out.append(c.JobUnschedulable(
                    id=f"scheduling/JobUnschedulable/{job_id}/{job.attempt}", ts=state.now, correlation_id=job_id,
                    source=self.name, job_id=job_id, basis_seq=state.seq,
                    reason=f"not started within {job.spec.scheduling_timeout_s:g} s: {self.why_waiting(state, job)}",
                ))
        # 4. configuration that could not be applied
        out.extend(config_rejected(self.name, state.config_rejections, state.now, state.seq))
        # 5. a cycle, if placement is done with the last one and something changed since
        # At virtual time a cycle is decided on the tick itself: the simulator has
        # published everything of the instant before it, and nothing follows it.
        ticked = not self.virtual_time or state.tick_seq == state.seq
        if state.placed_cycle >= state.cycle and state.dirty_seq > state.cycle_basis and state.pending and ticked:
            candidates, borrowing = self.candidates(state)
            cycle = state.cycle + 1
            if not candidates:
                return out
            out.append(
                c.SchedulingCycleCompleted(
                    id=f"scheduling/SchedulingCycleCompleted/{cycle}",
                    ts=state.now,
                    correlation_id=str(cycle),
                    source=self.name,
                    cycle=cycle,
                    basis_seq=state.seq,
                    candidates=[j.job_id for j in candidates],
                    queued=len(state.pending),
                    borrowing=borrowing,
                )
            )
        return out

    # ------------------------------------------------------------------ snapshots

    def _fingerprint(self) -> str:
        return f"scheduling/{SNAPSHOT_FORMAT}/{self.policy}/{self.max_candidates}/{int(self.virtual_time)}"

    def dump(self, state: SchedulingState) -> bytes:
        """The whole state, as bytes (derived indexes are rebuilt by ``load``). Maps whose order
        means nothing are written sorted, so equal states give equal bytes however they were built."""
        fs = state.fairshare
        snap = _Snapshot(
            format=SNAPSHOT_FORMAT, fingerprint=self._fingerprint(), seq=state.seq, now=state.now,
            config=msgspec.structs.asdict(state.config) if isinstance(state.config, msgspec.Struct)
            else dict(vars(state.config)),
            jobs=list(state.jobs.jobs.values()), settled=_sorted(state.jobs.settled),
            arrays=_sorted(state.jobs.arrays), accounts=list(fs.accounts.values()),
            fairshare={"half_life_s": fs.half_life_s, "gpu_weight": fs.gpu_weight, "cpu_weight": fs.cpu_weight,
                       "memory_weight": fs.memory_weight, "dominant_share": fs.dominant_share},
            in_use=_sorted(state.quotas.in_use), waiting=_sorted(state.quotas.waiting),
            counters=[state.cycle, state.cycle_basis, int(state.cycle_truncated), state.placed_cycle, state.dirty_seq,
                      state.capacity_seq, state.nodes_seq, state.tick_seq],
            cycle_candidates=state.cycle_candidates, blocked_basis=_sorted(state.blocked_basis),
            fits_nowhere=_sorted(state.fits_nowhere), charges=_sorted(state.charges), retries=_sorted(state.retries),
            requeue_now=sorted(state.requeue_now), to_requeue=sorted(state.to_requeue),
            deadlines=_sorted(state.deadlines), config_rejections=_sorted(state.config_rejections),
        )
        return msgspec.msgpack.encode(snap)

    def load(self, data: bytes) -> SchedulingState | None:
        """The state a ``dump`` wrote, or None when it is from another format or configuration."""
        try:
            snap = msgspec.msgpack.decode(data, type=_Snapshot)
        except msgspec.DecodeError:
            return None  # another format's layout
        if snap.format != SNAPSHOT_FORMAT or snap.fingerprint != self._fingerprint():
            return None
        state = SchedulingState(PolicyConfig(**snap.config))  # type: ignore[arg-type]
        state.seq, state.now = snap.seq, snap.now
        state.jobs.restore(snap.jobs, snap.settled, snap.arrays)
        fs = state.fairshare
        fs.accounts = {a.name: a for a in snap.accounts}
        for name, value in snap.fairshare.items():
            setattr(fs, name, value)
        state.quotas.in_use, state.quotas.waiting = snap.in_use, snap.waiting
        (state.cycle, state.cycle_basis, truncated, state.placed_cycle, state.dirty_seq, state.capacity_seq,
         state.nodes_seq, state.tick_seq) = snap.counters
        state.cycle_truncated = bool(truncated)
        state.cycle_candidates, state.blocked_basis, state.fits_nowhere = (
            snap.cycle_candidates, snap.blocked_basis, snap.fits_nowhere)
        state.charges, state.retries, state.requeue_now = snap.charges, snap.retries, set(snap.requeue_now)
        state.to_requeue = {j: state.jobs.jobs[j] for j in snap.to_requeue}
        state.deadlines, state.config_rejections = snap.deadlines, snap.config_rejections
        self._rebuild(state)
        return state

    @staticmethod
    def _rebuild(state: SchedulingState) -> None:
        for job in state.jobs.jobs.values():
            spec = job.spec
            if spec is None:
                continue
            for dep in spec.dependencies:
                state.dependents.setdefault(dep.job_id, set()).add(job.job_id)
            if job.state is JobState.PENDING:
                state.pending[job.job_id] = job
                if spec.dependencies:
                    state.gated.add(job.job_id)
                if spec.array_max_running:
                    state.throttled.add(job.job_id)
                if job.not_before_ts > state.now:
                    state.wakeups.append((job.not_before_ts, job.job_id))
            if job.job_id in state.charges and spec.array is not None:
                state.array_running[spec.array] = state.array_running.get(spec.array, 0) + 1
        for job_id, deadline in state.deadlines.items():
            if job_id in state.pending:
                state.deadline_heap.append((deadline, job_id))
        heapq.heapify(state.wakeups)
        heapq.heapify(state.deadline_heap)


def _sorted(mapping: dict) -> dict:  # type: ignore[type-arg]
    return dict(sorted(mapping.items()))


# ---------------------------------------------------------------------------- why a job waits

WAITING_KINDS = (
    "held",  # aside until released (Slurm: JobHeldUser / JobHeldAdmin)
    "dependency",  # a job it depends on has not done what it waits for; names it (Dependency)
    "backoff",  # a requeued job's restart backoff, until a time (BeginTime)
    "fits-nowhere",  # no node could hold it even empty: placement's verdict (BadConstraints)
    "array-limit",  # its array's running limit, %N (JobArrayTaskLimit)
    "quota",  # an account's quota, naming the limit (AssocGrp*Limit / QOS limits)
    "reservation",  # it fits now, but would delay the reservation of the job it names (Priority, backfill)
    "resources",  # placement's per-filter verdict, with its reservation if it has one (Resources)
    "placing",  # a candidate of the cycle placement is working on
    "cycle",  # not tried yet: the next cycle will offer it; how many jobs are ahead, the head
    "priority",  # not offered: jobs ahead of it fill the cycle, or strict order stops before it (Priority)
)


class Waiting(NamedTuple):
    """Why a job waits: a kind from ``WAITING_KINDS`` (like squeue's REASON code) and a sentence."""

    kind: str
    why: str


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

    def __init__(self, core: SchedulingCore, state: SchedulingState, job: Job, ctx: Context | None) -> None:
        self.core, self.state, self.job, self.ctx = core, state, job, ctx
        self._found: tuple[int, Job | None, Job | None, Job | None, int] | None = None

    def _scan(self) -> tuple[int, Job | None, Job | None, Job | None, int]:
        if self._found is None:
            ctx = self.ctx or self.core.context(self.state)
            key = make_policy(self.state.config.policy).key
            mine = key(self.job, ctx)
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

    def ahead(self, job: Job) -> tuple[int, Job | None, Job | None, Job | None]:
        return self._scan()[:4]

    def array_ahead(self, job: Job) -> int:
        return self._scan()[4]

    def in_cycle(self, job_id: str) -> bool:
        return job_id in self.state.cycle_candidates
