"""The scheduler's state as bytes and back: snapshots of ``QueueFold``. Pure.

``dump`` writes the whole state (maps whose order means nothing sorted, so equal
states give equal bytes however they were built); ``load`` reads it back and
rebuilds the derived indexes, or returns None for another format or another
configuration (the fingerprint), and the reader then folds the whole log.
"""

from __future__ import annotations

import heapq

import msgspec

from events import catalogue as c
from services.domain.fairshare import Account
from services.domain.job_rows import JobColumns, columns, restore_columns
from services.domain.jobs import HOLDS_RESOURCES, JobState
from services.domain.licenses import Licenses
from services.domain.partitions import Partitions, PartitionsData
from services.domain.policy import PolicyConfig
from services.domain.queue import never
from services.domain.queue.state import Charge, SchedulingState
from services.domain.quotas import Amount

__all__ = ["SNAPSHOT_FORMAT", "dump", "load"]

SNAPSHOT_FORMAT = 8  # 2: settled jobs kept as outcomes, arrays written out; 3: wakeups due, not yet folded;
# 4: partitions; 5: the log's layout (an older snapshot may have been folded past a marker its code ignored);
# 6: jobs as rows, specs without their defaults (services/domain/job_rows.py: 1,233 -> ~140 B per queued job);
# 7: jobs as columns, each distinct spec once (job_rows.JobColumns: a restart decodes a few specs, not 1M);
# 8: the columns keep each job's number and array task apart as well as its name



class _Snapshot(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    seq: int
    now: float
    config: dict[str, object]
    jobs: JobColumns
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
    # Pending jobs whose backoff is over but whose wakeup the fold has not taken yet: it wakes
    # only on some records (not on node, cycle or configuration events), so "now" can pass a
    # backoff before the wakeup sets ``dirty_seq``. ``load`` cannot tell these from the jobs
    # already woken, which the live heap no longer holds.
    wakeups_due: list[str]
    partitions: PartitionsData
    # Settled jobs that had checkpointed (after-checkpoint); absent in snapshots written before it
    checkpointed: list[str] = []
    # Datasets announced available (DatasetAvailable); absent in snapshots written before it
    datasets: list[str] = []
    # Advance reservations' ends not yet passed; absent in snapshots written before it
    reservation_ends: dict[str, float] = {}
    # Licenses defined (LicenseConfigured), by name; absent in snapshots written before them (what jobs
    # hold is rebuilt from the jobs holding resources)
    licenses: dict[str, int] = {}
    # The log's layout as folded: [layout, the marker's seq, the last input applied through a relay]
    layout: list[int] = []



def dump(state: SchedulingState, fingerprint: str) -> bytes:
    """The whole state, as bytes (derived indexes are rebuilt by ``load``). Maps whose order
    means nothing are written sorted, so equal states give equal bytes however they were built."""
    fs = state.fairshare
    snap = _Snapshot(
        format=SNAPSHOT_FORMAT, fingerprint=fingerprint, seq=state.seq, now=state.now,
        config=msgspec.structs.asdict(state.config) if isinstance(state.config, msgspec.Struct)
        else dict(vars(state.config)),
        # settled in the order the fold settled the jobs (the log's, so a restore continues it as a full
        # fold does): sorting a million ids took 0.5-2.7 s of every dump, most of a dump late in a burst
        jobs=columns(state.jobs.jobs), settled=state.jobs.settled,  # type: ignore[arg-type]
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
        wakeups_due=_wakeups_due(state), partitions=state.partitions.data(),
        checkpointed=sorted(state.jobs.checkpointed), datasets=sorted(state.datasets),
        reservation_ends=_sorted(state.reservation_ends), licenses=state.licenses.data(),
        layout=[state.layout, state.layout_seq, state.relayed_seq],
    )
    return msgspec.msgpack.encode(snap)

def load(data: bytes, fingerprint: str) -> SchedulingState | None:
    """The state a ``dump`` wrote, or None when it is from another format or configuration."""
    try:
        snap = msgspec.msgpack.decode(data, type=_Snapshot)
    except msgspec.DecodeError:
        return None  # another format's layout
    if snap.format != SNAPSHOT_FORMAT or snap.fingerprint != fingerprint:
        return None
    state = SchedulingState(PolicyConfig(**snap.config))  # type: ignore[arg-type]
    state.seq, state.now = snap.seq, snap.now
    if snap.layout:
        state.layout, state.layout_seq, state.relayed_seq = snap.layout
    specs = restore_columns(state.jobs, snap.jobs)
    state.jobs.settled, state.jobs.arrays = snap.settled, snap.arrays
    state.jobs.checkpointed, state.datasets = set(snap.checkpointed), set(snap.datasets)
    state.reservation_ends = dict(snap.reservation_ends)
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
    state.partitions = Partitions.from_data(snap.partitions)
    state.licenses = Licenses(snap.licenses)
    _rebuild(state, set(snap.wakeups_due), specs, snap.jobs.spec_of)
    return state

def _wakeups_due(state: SchedulingState) -> list[str]:
    """The heap's entries that are due and would still wake their job (the fold skips stale ones)."""
    due: set[str] = set()
    for at, job_id in state.wakeups:
        job = state.pending.get(job_id)
        if at <= state.now and job is not None and job.not_before_ts == at:
            due.add(job_id)
    return sorted(due)

class _Kind:
    """What ``_rebuild`` asks of a spec, asked once per distinct spec (``JobColumns``)."""

    __slots__ = ("plain", "gated", "throttled", "licensed", "expiring", "elastic", "group")

    def __init__(self, state: SchedulingState, spec: c.JobSpec) -> None:
        self.gated = bool(spec.dependencies or spec.singleton or spec.after_datasets)
        self.throttled = bool(spec.array_max_running)
        self.licensed = bool(spec.licenses)
        self.expiring = bool(spec.deadline_ts or (spec.dependency_timeout_s is not None
                                                   and (spec.dependencies or spec.after_datasets)))
        self.elastic = spec.elastic
        # a job of a plain spec is pending, or holds resources, and that is all there is to it
        self.plain = not (self.gated or self.throttled or self.licensed or self.expiring or self.elastic
                          or spec.dependencies or spec.array is not None)
        self.group = state.queue_index.spec_group(spec)  # (a policy's group never reads the name)


def _rebuild(state: SchedulingState, wakeups_due: set[str], specs: list[c.JobSpec], spec_of: list[int]) -> None:
    """The derived indexes from the jobs: ``specs`` (the distinct ones) and ``spec_of`` (each job's, in
    the table's order) as ``job_rows.restore_columns`` returned them, so that what depends on the spec
    alone is asked once per spec."""
    kinds = [_Kind(state, spec) for spec in specs]
    pending, charges, now = state.pending, state.charges, state.now
    jobs = [(job, kinds[at]) for job, at in zip(state.jobs.jobs.values(), spec_of) if at >= 0]
    waiting = [(job, kind) for job, kind in jobs if job.state is JobState.PENDING]  # in the table's order
    if len(waiting) == len(state.jobs.jobs):  # every job is waiting (a backlog): the table's map as it is
        pending.update(state.jobs.jobs)
    else:
        pending.update([(job.job_id, job) for job, _ in waiting])
    groups = [kind.group for _, kind in waiting]
    state.wakeups.extend([(job.not_before_ts, job.job_id) for job, _ in waiting
                          if job.not_before_ts > now or job.job_id in wakeups_due])
    # the jobs of the other kinds (a plain one is pending, above, or holds resources, and that is all)
    for job, kind in ([(job, kind) for job, kind in jobs if not kind.plain]
                      if not all(kind.plain for kind in kinds) else ()):
        spec = job.spec
        assert spec is not None
        job_id = job.job_id
        for dep in spec.dependencies:
            state.dependents.setdefault(dep.job_id, set()).add(job_id)
        if job.state is JobState.PENDING:
            if kind.gated:
                state.gated.add(job_id)
            if kind.throttled:
                state.throttled.add(job_id)
            if kind.licensed:
                state.licensed.add(job_id)
            if kind.expiring:
                state.expiring.add(job_id)
                state.expiry_heap.append((never.expiry(job), job_id))
        if kind.elastic and job.state in HOLDS_RESOURCES and 0 < len(job.allocations) < spec.nodes:
            state.growable.add(job_id)
        if job_id in charges and spec.array is not None:
            state.array_running[spec.array] = state.array_running.get(spec.array, 0) + 1
        if job_id in charges and kind.licensed:
            state.licenses.charge(spec.licenses, +1)
    for job_id, deadline in state.deadlines.items():
        if job_id in pending:
            state.deadline_heap.append((deadline, job_id))
    if any(spec.singleton for spec in specs):  # (a fresh state's singletons are empty: nothing to walk)
        state.singletons.rebuild(state.jobs)
    state.queue_index.rebuild(pending.values(), state.config.policy, groups)
    never.rebuild(state)
    heapq.heapify(state.wakeups)
    heapq.heapify(state.deadline_heap)
    heapq.heapify(state.expiry_heap)


def _sorted(mapping: dict) -> dict:  # type: ignore[type-arg]
    return dict(sorted(mapping.items()))
