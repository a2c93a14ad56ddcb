"""Placement: where each candidate of a scheduling cycle runs, and what waits. Pure.

For the latest cycle it has not handled, placement walks the candidates in
the scheduler's order. For each job still pending:

1. it evaluates every node with ``fit_node`` against the ledger plus what
   this decision has already placed (the ``Overlay``);
2. if enough nodes fit (all of a multi-node gang, or none), it takes the
   best-scoring ones and emits ``JobScheduled`` with the exact allocation;
3. otherwise it emits ``PlacementBlocked`` with the reasons grouped per node
   ("4 nodes: has 8 GPUs, needs 16"), when they differ from the job's last
   explanation;

and closes with ``PlacementCycleCompleted``.

What a job that does not fit means for the jobs behind it is the
``backfill`` mode:

``none``
    strict order: the first job that does not fit now stops the cycle (what
    "FCFS without backfilling" means in the literature).
``easy`` (default)
    EASY backfilling. The first job that does not fit now (the head) gets a
    reservation: the earliest time, by the running jobs' time limits, at which
    enough nodes would fit it, and the nodes they would be. A later job starts
    now only if it does not delay that reservation: it ends (by its own time
    limit) by the reservation's time, or after it starts enough nodes still
    fit the head at that time. Jobs after the head that do not fit simply
    wait.
``shadow``
    EASY without the "extra nodes" rule: a later job starts now only if it
    ends strictly before the head's reservation time (what RLScheduler's
    simulator calls backfilling; kept to compare with their published table).
``greedy``
    every job that fits starts, in order, with no reservation (fast, but a big
    job can starve behind a stream of small ones).

In every mode a job that fits on no node even when the cluster is empty
(``fits_nowhere``: 16 GPUs on 8-GPU nodes) blocks nobody and gets no
reservation: it waits for the set of nodes to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG
from services.placement.fit import Fit, Overlay, explain, fit_node
from services.placement.index import NodeIndex
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.state.cluster import Cluster, Request, fold_cluster, request_of
from services.state.jobs import JobState, JobTable

__all__ = ["PlacementCore", "PlacementState", "place_job", "Reservation", "BACKFILL_MODES"]

BACKFILL_MODES = ("none", "easy", "shadow", "greedy")
_CAPACITY_FILTERS = frozenset({"GpuCapacity", "CpuCapacity", "MemoryCapacity"})


class PlacementState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.cluster = Cluster()
        self.cycle = 0
        self.candidates: list[str] = []
        self.borrowing: frozenset[str] = frozenset()  # candidates the scheduler admitted by borrowing quota
        self.done_cycle = 0


@dataclass
class Placed:
    allocations: list[c.NodeAllocation] | None
    reasons: list[c.BlockReason] = field(default_factory=list)
    fits_nowhere: bool = False


def place_job(cluster: Cluster, req: Request, overlay: Overlay, index: NodeIndex | None = None) -> Placed:
    """Allocations for one job on the best nodes, or the reasons per node group.

    With an ``index`` (built on the same overlay), nodes are evaluated once per
    kind; without one, one by one. Both give the same answer.
    """
    if index is None:
        index = NodeIndex(cluster, overlay)
    fitting: list[tuple[Fit, list[str]]] = []
    failures: dict[tuple[str, tuple[object, ...]], int] = {}
    usable = total = 0
    for fit, members in index.evaluate(req):
        total += len(members)
        if fit.devices is not None:
            fitting.append((fit, members))
        else:
            key = (fit.filter, fit.detail)
            failures[key] = failures.get(key, 0) + len(members)
        if fit.filter not in _CAPACITY_FILTERS:
            usable += len(members)  # these nodes could hold the job if they were empty (and ready)
    fit_count = sum(len(m) for _, m in fitting)
    if fit_count >= req.nodes:
        chosen = NodeIndex.best(fitting, req.nodes)
        return Placed([fit.allocation_on(name) for name, fit in chosen])
    grouped: dict[tuple[str, str], int] = {}
    for (flt, detail), count in failures.items():
        key = (flt, explain(flt, detail, req))
        grouped[key] = grouped.get(key, 0) + count
    reasons = [c.BlockReason(reason=reason, nodes=count, filter=flt) for (flt, reason), count in sorted(grouped.items())]
    if req.nodes > 1 and fit_count:
        reasons.append(c.BlockReason(reason=f"only {fit_count} of the {req.nodes} nodes the gang needs fit",
                                     nodes=fit_count, filter="Gang"))
    if not reasons:
        reasons.append(c.BlockReason(reason="no nodes registered", nodes=0, filter="NodeReady"))
    return Placed(None, reasons, fits_nowhere=usable < req.nodes)


@dataclass
class Reservation:
    """The head job's reservation: at ``start_ts``, ``fitting`` nodes could hold it (it needs ``need``).

    ``at_start`` is the ledger as it is expected to be at ``start_ts`` (running
    jobs that will have ended given back, backfilled jobs still running taken).
    """

    job_id: str
    req: Request
    start_ts: float
    at_start: Overlay
    fitting: set[str]
    need: int
    shadow_only: bool = False

    def admits(self, cluster: Cluster, allocs: list[c.NodeAllocation], end_ts: float) -> bool:
        """Can a job holding ``allocs`` until ``end_ts`` start now without delaying the head?"""
        if self.shadow_only:
            return end_ts < self.start_ts
        if end_ts <= self.start_ts:
            return True
        trial = self.at_start.copy()
        for alloc in allocs:
            trial.take(alloc)
        still = set(self.fitting)
        for alloc in allocs:
            if alloc.node in still and not fit_node(cluster.nodes[alloc.node], self.req, trial).ok:
                still.discard(alloc.node)
        if len(still) < self.need:
            return False
        self.at_start, self.fitting = trial, still
        return True


@dataclass
class PlacementCore:
    name: ClassVar[str] = "placement"
    backfill: str = "easy"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG

    def __post_init__(self) -> None:
        if self.backfill not in BACKFILL_MODES:
            raise ValueError(f"unknown backfill mode {self.backfill!r}; modes: {', '.join(BACKFILL_MODES)}")

    def initial(self) -> PlacementState:
        return PlacementState()

    def evolve(self, state: PlacementState, event: Event, record: Record) -> PlacementState:
        match event:
            case c.SchedulingCycleCompleted(cycle=cycle, candidates=candidates):
                if cycle > state.cycle:
                    state.cycle, state.candidates = cycle, list(candidates)
                    state.borrowing = frozenset(event.borrowing)
                return state
            case c.PlacementCycleCompleted(cycle=cycle):
                state.done_cycle = max(state.done_cycle, cycle)
                return state
        fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        return state

    # ------------------------------------------------------------------ reservations

    def reserve(
        self, state: PlacementState, job_id: str, req: Request, overlay: Overlay,
        placed_now: list[tuple[float, str, list[c.NodeAllocation]]],
    ) -> Reservation | None:
        """The earliest time the head fits, walking running jobs' expected ends in order."""
        now = state.now
        ending: list[tuple[float, str, list[c.NodeAllocation]]] = list(placed_now)
        seen: set[str] = set()
        for node in state.cluster.sorted_nodes():
            for holder in node.jobs:
                if holder in seen:
                    continue
                seen.add(holder)
                job = state.jobs.get(holder)
                if job is None or job.spec is None:
                    continue
                ending.append((max(now, job.scheduled_ts + job.spec.time_limit_s), holder, job.allocations))
        ending.sort(key=lambda e: (e[0], e[1]))
        hyp = overlay.copy()
        nodes = [n for n in state.cluster.sorted_nodes() if not n.removed]
        fitting = {n.name for n in nodes if fit_node(n, req, hyp).ok}
        for end, _holder, allocations in ending:
            for alloc in allocations:
                hyp.give(alloc)
            for alloc in allocations:
                node = state.cluster.nodes.get(alloc.node)
                if node is not None and not node.removed and fit_node(node, req, hyp).ok:
                    fitting.add(alloc.node)
            if len(fitting) >= req.nodes:
                return Reservation(job_id, req, end, hyp, fitting, req.nodes)
        return None

    # ------------------------------------------------------------------ decide

    def decide(self, state: PlacementState) -> list[Event]:
        if state.cycle <= state.done_cycle:
            return []
        out: list[Event] = []
        overlay = Overlay()
        index = NodeIndex(state.cluster, overlay)
        cycle = state.cycle
        now = state.now
        scheduled = blocked = 0
        reservation: Reservation | None = None
        placed_now: list[tuple[float, str, list[c.NodeAllocation]]] = []
        # Within one decision free capacity only shrinks, so a request shape that did
        # not fit stays unfit for the rest of the cycle: remember it, skip the scan.
        unfit: dict[Request, Placed] = {}
        stopped_by: str | None = None
        common = {"ts": now, "source": self.name, "causation_id": f"scheduling/SchedulingCycleCompleted/{cycle}"}
        for job_id in state.candidates:
            job = state.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.spec is None:
                continue
            if stopped_by is not None:
                continue  # strict order: nothing passes the blocked head
            req = request_of(job.spec)
            placed = unfit.get(req) or place_job(state.cluster, req, overlay, index)
            if placed.allocations is None:
                unfit[req] = placed
            reasons, earliest, reserved = placed.reasons, None, []
            if placed.allocations is not None:
                end = now + job.spec.time_limit_s
                if reservation is None or reservation.admits(state.cluster, placed.allocations, end):
                    for alloc in placed.allocations:
                        overlay.take(alloc)
                        index.moved(alloc.node)
                    placed_now.append((end, job_id, placed.allocations))
                    attempt = job.attempt + 1
                    out.append(c.JobScheduled(
                        id=f"placement/JobScheduled/{job_id}/{attempt}", correlation_id=job_id, job_id=job_id,
                        attempt=attempt, allocations=placed.allocations, basis_seq=state.seq, cycle=cycle,
                        time_limit_s=job.spec.time_limit_s, backfilled=reservation is not None,
                        borrowed=job_id in state.borrowing, **common,
                    ))
                    scheduled += 1
                    continue
                reasons = [c.BlockReason(
                    reason=f"starting now would delay the reservation of {reservation.job_id} "
                           f"at {reservation.start_ts:.0f}", nodes=len(placed.allocations), filter="Backfill")]
            elif not placed.fits_nowhere:
                if self.backfill == "none":
                    stopped_by = job_id
                elif self.backfill in ("easy", "shadow") and reservation is None:
                    reservation = self.reserve(state, job_id, req, overlay, placed_now)
                    if reservation is not None:
                        reservation.shadow_only = self.backfill == "shadow"
                        earliest = reservation.start_ts
                        reserved = sorted(reservation.fitting)[: req.nodes]
            blocked += 1
            explanation = tuple(reasons)
            if explanation != job.last_block or earliest is not None:
                out.append(c.PlacementBlocked(
                    id=f"placement/PlacementBlocked/{job_id}/{cycle}", correlation_id=job_id, job_id=job_id,
                    cycle=cycle, basis_seq=state.seq, reasons=reasons, earliest_start_ts=earliest,
                    reserved_nodes=reserved, fits_nowhere=placed.fits_nowhere, **common,
                ))
        out.append(c.PlacementCycleCompleted(
            id=f"placement/PlacementCycleCompleted/{cycle}", correlation_id=str(cycle), cycle=cycle,
            basis_seq=state.seq, scheduled=scheduled, blocked=blocked, ts=now, source=self.name,
        ))
        return out
