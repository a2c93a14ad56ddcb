"""The scheduler's fold: the queue, fair share, quotas and restarts, from the log. Pure.

``QueueFold`` is what the scheduling service, the preemption service (its
inner view of jobs, accounts and quotas) and the projections (the queue, why
each job waits, the priority breakdown) all fold, so they agree on every
record. It decides nothing: the scheduling service (``services/scheduling/core.py``)
adds ``decide``. Concerns live beside it: ``order.py`` (order and candidates),
``waiting.py`` (why a job waits), ``codec.py`` (snapshots).

What the fold keeps:

* the queue: every PENDING job (held jobs wait aside), its dependencies, its
  restart backoff and scheduling deadline, its array's running count;
* the cycle counters: the last cycle decided and placed, and the sequences at
  which something happened that could change a cycle's outcome (``dirty_seq``),
  added capacity (``capacity_seq``) or changed the nodes (``nodes_seq``);
* placement's verdicts: jobs blocked at a basis, jobs that fit nowhere;
* fair share and quotas (``services.domain.fairshare``, ``services.domain.quotas``):
  each attempt's billing rate is charged to its association from
  ``JobScheduled`` until the attempt ends;
* restarts: which ended jobs the restart policy requeues (a lost node or a
  preemption requeues at once and counts no retry);
* configuration: ``AccountConfigured``, ``FairShareConfigured`` and
  ``PolicyConfigured`` on ``horizon.in._admin.*``; one that cannot be applied
  is kept until the scheduler answers it with ``ConfigRejected``;
* partitions (``services.domain.partitions``): their priority tiers order the
  queue, and the scheduler answers the partition configuration every fold
  refuses alike (``PartitionConfigured``, ``PartitionPolicyConfigured``);
* licenses (``services.domain.licenses``): the totals an operator defines
  (``LicenseConfigured``, answered alike) and what the jobs holding resources
  hold, from ``JobScheduled`` until the attempt ends.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import EVENTS_ONLY, WHOLE_LOG, parse_subject, valid_token
from services.domain.fairshare import association
from services.domain.jobs import FAILURES, HOLDS_RESOURCES, TERMINAL, Job, JobState, Transition
from services.domain.policy import Context, PolicyConfig, make_policy
from services.domain.protocol import Record
from services.domain.queue import codec, never, order, waiting
from services.domain.queue.state import Charge, SchedulingState
from services.domain.queue.waiting import Waiting
from services.domain.quotas import amount_of
from services.domain.restart import retry_granted

__all__ = ["QueueFold", "SCHEDULER", "MAX_CANDIDATES", "MAX_CANDIDATES_BEFORE_RECORDED"]

SCHEDULER = "scheduling"  # the service whose decisions and answers this fold follows

_NODE_EVENTS = (
    c.NodeRegistered,
    c.NodeReady,
    c.NodeUncordoned,
    c.NodeRemoved,
    c.NodeLost,
    c.NodeCordoned,
    c.NodeDraining,
    c.NodeTaintsChanged,
    c.NodeDatasetsChanged,  # changes scores, not what fits; folded so that every fold of nodes agrees
    c.NodeOvercommitChanged,  # what fits where
    c.ProfileConfigured,  # placement's configuration: what fits where may change
    c.ReservationConfigured,
)
_CONFIG_VERBS = {c.AccountConfigured: "account", c.FairShareConfigured: "fairshare", c.PolicyConfigured: "policy"}
_PARTITION_VERBS = {c.PartitionConfigured: "partition", c.PartitionPolicyConfigured: "partition-policy"}
_PARTITION_INPUTS = (c.NodeRegistered, c.NodeRemoved, c.ProfileConfigured)  # what partitions match against



def _reservation(state: SchedulingState, event: c.ReservationConfigured) -> None:
    """Remember when an advance reservation's window ends (placement alone checks and applies it; one
    it refuses only costs a cycle at its end); a cancelled one is forgotten."""
    if event.cancelled:
        state.reservation_ends.pop(event.name, None)
    elif event.end_ts > state.now:
        state.reservation_ends[event.name] = event.end_ts


def _requeues(job: Job) -> bool:
    """Whether a job is requeued when its node is lost or it is preempted (Slurm's --requeue, the
    default; a job of --no-requeue ends then)."""
    return job.spec is None or job.spec.requeue


# The most jobs a cycle offers (Slurm's ``default_queue_depth`` is the same kind of cap). A cycle's time
# is placement's for its candidates: at 12,500 nodes and a backlog of 250,000 (docs/benchmarks.md §2) the
# cycle's p99 was 2.6 s at 10,000, 1.5-1.7 s at 5,000 and 0.68-0.73 s at 2,500, all at the same rate;
# at 1,000 the rate fell by a tenth (more cycles, each with its round trip). The cap a cycle was cut at
# is in its event (``max_candidates``).
MAX_CANDIDATES = 2_500
MAX_CANDIDATES_BEFORE_RECORDED = 10_000  # the cap of logs whose cycles do not say theirs


@dataclass
class QueueFold:
    max_candidates: int = MAX_CANDIDATES  # jobs a cycle offers at most
    policy: str = "multifactor"  # until a PolicyConfigured says otherwise
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    layout_subjects: tuple[str, ...] = EVENTS_ONLY  # layout 2: operator inputs come relayed
    _config: PolicyConfig = field(init=False, repr=False)

    def __post_init__(self) -> None:
        make_policy(self.policy)  # fail early on an unknown name
        self._config = PolicyConfig(policy=self.policy)

    def initial(self) -> SchedulingState:
        return SchedulingState(self._config)

    # ------------------------------------------------------------------ evolve

    def evolve(self, state: SchedulingState, event: Event, record: Record) -> SchedulingState:
        self.fold(state, event, record)
        return state

    def fold(self, state: SchedulingState, event: Event, record: Record) -> Transition | None:
        """``evolve``, returning the job's transition in the table, if the event caused one: a fold that
        shares this state's job table (the preemption fold's ledger) follows the jobs by it."""
        seq = record.seq
        match event:
            case c.SchedulingCycleCompleted(cycle=cycle, basis_seq=basis):
                state.cycle = max(state.cycle, cycle)
                state.cycle_basis = basis
                state.cycle_truncated = len(event.candidates) >= (event.max_candidates or self.max_candidates)
                state.cycle_candidates = list(event.candidates)
                return None
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
                return None
            case c.JobCheckpointed(job_id=job_id):
                job = state.jobs.jobs.get(job_id)
                if job is not None and job.checkpoint_ref is None and (
                        job_id in state.dependents or (job.spec is not None and job.spec.array in state.dependents)):
                    state.dirty_seq = seq  # its first checkpoint: after-checkpoint dependants may be ready
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
                return None
            case c.ConfigRejected(request_seq=request_seq) if event.source == SCHEDULER:
                state.config_rejections.pop(request_seq, None)
                return None
            case c.AccountConfigured() | c.FairShareConfigured() | c.PolicyConfigured():
                self._configure(state, event, record)
                return None
            case c.DatasetAvailable(dataset=name):
                subject = parse_subject(record.subject)
                if subject is None or subject.kind != "admin":
                    state.config_rejections[record.input_seq] = ("dataset", "DatasetAvailable is accepted only on "
                                                    "horizon.in._admin.dataset")
                elif not valid_token(name):
                    state.config_rejections[record.input_seq] = ("dataset",
                                                                 f"{name!r} is not a dataset name (letters, digits, ._-)")
                elif name not in state.datasets:
                    state.datasets.add(name)
                    state.dirty_seq = seq  # jobs waiting for it may be ready
                return None
            case c.LicenseConfigured():
                why = state.licenses.apply(event, record.subject)
                if why is not None:
                    state.config_rejections[record.input_seq] = ("license", why)
                else:  # jobs waiting for it may start now (or never, until it is back)
                    state.dirty_seq = state.capacity_seq = seq
                return None
            case c.PartitionConfigured() | c.PartitionPolicyConfigured():
                # Every fold of partitions applies the same check; the scheduler answers the operator.
                why = state.partitions.apply(event, record.subject)
                if why is not None:
                    state.config_rejections[record.input_seq] = (_PARTITION_VERBS[type(event)], why)
                else:  # which nodes a job may use, or the tiers' order, may have changed
                    state.dirty_seq = state.capacity_seq = state.nodes_seq = seq
                return None
            case c.JobFailed(job_id=job_id, node_lost=True):
                job = state.jobs.get(job_id)
                if job is not None and job.attempt == event.attempt and job.state in HOLDS_RESOURCES \
                        and _requeues(job):
                    state.requeue_now.add(job_id)
            case c.JobPreempted(job_id=job_id):
                job = state.jobs.get(job_id)
                if job is not None and job.attempt == event.attempt and job.state in HOLDS_RESOURCES \
                        and _requeues(job):
                    state.requeue_now.add(job_id)
        if isinstance(event, _PARTITION_INPUTS):
            state.partitions.apply(event, record.subject)
        if isinstance(event, _NODE_EVENTS):
            state.dirty_seq = state.capacity_seq = state.nodes_seq = seq
            if isinstance(event, c.ReservationConfigured):
                _reservation(state, event)
            return None
        moved = state.pending.get(event.job_id) if isinstance(event, c.JobPriorityChanged) else None
        if moved is not None:
            state.queue_index.remove(moved)  # its group may change with its class or nice
        tr = state.jobs.apply(event, seq, state.now)
        if moved is not None:
            state.queue_index.add(moved)
        if isinstance(event, c.JobResized):
            track_growable(state, event.job_id)
            self._rebill(state, event.job_id)
            if event.nodes < event.previous_nodes:
                state.dirty_seq = state.capacity_seq = seq  # a shrink frees nodes (for its preemptor)
        if tr is not None:
            self._track(state, tr, seq)
        elif isinstance(event, c.JobPriorityChanged) and event.job_id in state.pending:
            state.dirty_seq = seq  # the order changed
        changed = tr.job if tr is not None else (
            state.jobs.jobs.get(event.job_id) if isinstance(event, c.JobRequeued | c.JobCheckpointed) else None)
        if changed is not None:
            never.recheck(state, changed)  # whether the jobs depending on it can still start
        self._wake(state, seq)
        return tr

    def _wake(self, state: SchedulingState, seq: int) -> None:
        """A requeued job whose backoff is over joins the candidates again: that needs a cycle. So do
        the jobs an advance reservation kept off its nodes once its window is over: its end adds
        capacity as a node change does (no event marks it; the log's time passing it does)."""
        while state.wakeups and state.wakeups[0][0] <= state.now:
            at, job_id = heapq.heappop(state.wakeups)
            job = state.pending.get(job_id)
            if job is not None and job.not_before_ts == at:  # not an entry a later requeue made stale
                state.dirty_seq = seq
        if state.reservation_ends and min(state.reservation_ends.values()) <= state.now:
            for name in [n for n, end in state.reservation_ends.items() if end <= state.now]:
                del state.reservation_ends[name]
            state.dirty_seq = state.capacity_seq = state.nodes_seq = seq

    def _configure(self, state: SchedulingState, event: Event, record: Record) -> None:
        subject = parse_subject(record.subject)
        verb = _CONFIG_VERBS[type(event)]
        if subject is None or subject.kind != "admin":
            state.config_rejections[record.input_seq] = (verb, f"{type(event).__name__} is accepted only on "
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
                    if state.config.policy != state.queue_index.policy:  # another policy groups jobs otherwise
                        state.queue_index.rebuild(state.pending.values(), state.config.policy)
        if why is not None:
            state.config_rejections[record.input_seq] = (verb, why)
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
        if spec is not None and spec.elastic:
            track_growable(state, job.job_id)
        state.singletons.track(state.jobs, tr)
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
        if tr.after in FAILURES or tr.after in (JobState.SUCCEEDED, JobState.PREEMPTED):
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
        state.queue_index.add(job)
        leaf = state.fairshare.leaf_for(spec, state.now).name
        state.quotas.wait(state.fairshare, leaf, +1)
        if spec.dependencies or spec.singleton or spec.after_datasets:
            state.gated.add(job.job_id)
        if spec.array_max_running:
            state.throttled.add(job.job_id)
        if spec.licenses:
            state.licensed.add(job.job_id)
        if spec.deadline_ts or (spec.dependency_timeout_s is not None and (spec.dependencies or spec.after_datasets)):
            state.expiring.add(job.job_id)
            heapq.heappush(state.expiry_heap, (never.expiry(job), job.job_id))
        if job.not_before_ts > state.now:
            heapq.heappush(state.wakeups, (job.not_before_ts, job.job_id))
        wait = waiting_limit(spec)
        if wait is not None:
            if before is not JobState.HELD or job.job_id not in state.deadlines:
                # the clock runs from acceptance or requeue, through holds (from the release for a job
                # submitted held)
                state.deadlines[job.job_id] = state.now + wait
            heapq.heappush(state.deadline_heap, (state.deadlines[job.job_id], job.job_id))

    def _leave_pending(self, state: SchedulingState, job: Job) -> None:
        assert job.spec is not None
        state.pending.pop(job.job_id, None)
        state.queue_index.remove(job)
        state.quotas.wait(state.fairshare, association(job.spec), -1)
        state.gated.discard(job.job_id)
        state.throttled.discard(job.job_id)
        state.licensed.discard(job.job_id)
        state.expiring.discard(job.job_id)
        state.blocked_basis.pop(job.job_id, None)
        state.fits_nowhere.pop(job.job_id, None)
        if job.state is not JobState.HELD:
            state.deadlines.pop(job.job_id, None)
        while state.deadline_heap and state.deadline_heap[0][1] not in state.pending:
            heapq.heappop(state.deadline_heap)
        never.forget_expired(state)

    def _charge(self, state: SchedulingState, job: Job) -> None:
        spec = job.spec
        assert spec is not None
        fs = state.fairshare
        # Quotas hold an elastic job's most (the room it may grow into); fair share bills what it holds.
        charge = Charge(fs.leaf_for(spec, state.now).name, fs.rate_of(held_shape(job)), amount_of(spec))
        state.charges[job.job_id] = charge
        fs.start(charge.leaf, charge.rate, state.now)
        state.quotas.charge(fs, charge.leaf, charge.amount, +1)
        if spec.licenses:
            state.licenses.charge(spec.licenses, +1)
        if spec.array is not None:
            state.array_running[spec.array] = state.array_running.get(spec.array, 0) + 1

    @staticmethod
    def _rebill(state: SchedulingState, job_id: str) -> None:
        """An elastic job was resized: fair share bills its new size from now on."""
        charge = state.charges.get(job_id)
        job = state.jobs.jobs.get(job_id)
        if charge is None or job is None or job.spec is None:
            return
        rate = state.fairshare.rate_of(held_shape(job))
        if rate != charge.rate:
            state.fairshare.stop(charge.leaf, charge.rate, state.now)
            state.fairshare.start(charge.leaf, rate, state.now)
            charge.rate = rate

    def _uncharge(self, state: SchedulingState, job: Job) -> None:
        charge = state.charges.pop(job.job_id, None)
        if charge is None:
            return
        fs = state.fairshare
        fs.stop(charge.leaf, charge.rate, state.now)
        state.quotas.charge(fs, charge.leaf, charge.amount, -1)
        if job.spec is not None and job.spec.licenses:
            state.licenses.charge(job.spec.licenses, -1)
        array = job.spec.array if job.spec else None
        if array is not None:
            left = state.array_running.get(array, 0) - 1
            if left > 0:
                state.array_running[array] = left
            else:
                state.array_running.pop(array, None)

    @staticmethod
    def _may_retry(state: SchedulingState, job: Job, outcome: JobState) -> bool:
        # (services/domain/restart.py: inventory forgets a job by the same answer)
        spec = job.spec
        if spec is None:
            return outcome is JobState.PREEMPTED and _requeues(job)
        return retry_granted(spec, outcome, state.retries.get(job.job_id, 0))

    # ------------------------------------------------------------------ the other concerns, bound

    def context(self, state: SchedulingState) -> Context:
        """The cycle's context: "now", the configuration, fair-share factors and account boosts."""
        return order.context(state)

    def ordered_queue(self, state: SchedulingState, limit: int | None = None,
                      ctx: Context | None = None) -> list[Job]:
        """Pending jobs in scheduling order (all of them, or the first ``limit``)."""
        return order.ordered_queue(state, limit, ctx)

    def ready(self, state: SchedulingState, job: Job) -> bool:
        """All of the job's dependencies are met."""
        return order.ready(state, job)

    def candidates(self, state: SchedulingState) -> tuple[list[Job], list[str]]:
        """The first ``max_candidates`` pending jobs in order that may start now, and which only by borrowing."""
        return order.candidates(state, self.max_candidates)

    def why_waiting(self, state: SchedulingState, job: Job) -> str:
        """Why a pending or held job has not started, as a sentence (``waiting.why_waiting``)."""
        return waiting.why_waiting(state, job, self.max_candidates)

    def waiting(self, state: SchedulingState, job: Job, ctx: Context | None = None) -> Waiting:
        """Why one job waits (``waiting.waiting``)."""
        return waiting.waiting(state, job, self.max_candidates, ctx)

    def waiting_all(self, state: SchedulingState, ordered: list[Job] | None = None,
                    ctx: Context | None = None) -> dict[str, Waiting]:
        """Why each pending and held job waits, by job id (``waiting.waiting_all``)."""
        return waiting.waiting_all(state, self.max_candidates, ordered, ctx)

    def fingerprint(self) -> str:
        """What a snapshot must have been folded with to be loaded by this fold."""
        return f"scheduling/{codec.SNAPSHOT_FORMAT}/{self.policy}/{self.max_candidates}/{int(self.virtual_time)}"

    def dump(self, state: SchedulingState) -> bytes:
        """The whole state as bytes (``codec.dump``)."""
        return codec.dump(state, self.fingerprint())

    def load(self, data: bytes) -> SchedulingState | None:
        """The state a ``dump`` wrote, or None when it is from another format or configuration."""
        return codec.load(data, self.fingerprint())


def waiting_limit(spec: c.JobSpec) -> float | None:
    """How long a job may stay pending before it ends ``UNSCHEDULABLE``: its scheduling timeout, or a
    gang's assembly timeout (``assembly_timeout_s``), the shorter of the two (None: for ever)."""
    limits = [t for t in (spec.scheduling_timeout_s, assembly_limit(spec)) if t is not None]
    return min(limits) if limits else None


def assembly_limit(spec: c.JobSpec) -> float | None:
    """The assembly timeout of a gang (a job of more than one node at its least), else None."""
    return spec.assembly_timeout_s if spec.least_nodes > 1 else None


def track_growable(state: SchedulingState, job_id: str) -> None:
    """``growable``: the elastic jobs holding resources on fewer nodes than their most (they call for a
    cycle when room frees, though nothing is pending: services/placement/growth.py)."""
    job = state.jobs.jobs.get(job_id)
    if (job is not None and job.spec is not None and job.spec.elastic and job.state in HOLDS_RESOURCES
            and 0 < len(job.allocations) < job.spec.nodes):
        state.growable.add(job_id)
    else:
        state.growable.discard(job_id)


def held_shape(job: Job) -> c.JobSpec:
    """The job's spec at the size it holds: an elastic job's nodes are its allocation's, a rigid
    job's spec itself."""
    spec = job.spec
    assert spec is not None
    if spec.elastic and job.allocations and len(job.allocations) != spec.nodes:
        return msgspec.structs.replace(spec, nodes=len(job.allocations))
    return spec
