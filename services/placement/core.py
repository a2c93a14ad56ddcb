"""Placement: where each candidate of a scheduling cycle runs. Pure.

For the latest cycle it has not handled, placement walks the candidates in
the scheduler's order and, for each job still pending:

1. evaluates every node with ``fit_node`` against the ledger plus what this
   same decision has already placed (the ``Overlay``);
2. if at least ``nodes`` nodes fit, takes the best-scoring ones (all or
   nothing for a multi-node gang) and emits ``JobScheduled`` with the exact
   allocation and the ``basis_seq``;
3. otherwise groups the nodes' reasons ("4 nodes: has 8 GPUs, needs 16") and
   emits ``PlacementBlocked`` when the explanation differs from the last one
   recorded for that job (an unchanged explanation is not repeated);

and closes with ``PlacementCycleCompleted``. A candidate that does not fit
is skipped, never waited for: the jobs behind it are still placed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import STREAM_SUBJECTS
from services.placement.fit import Fit, Overlay, fit_node
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.state.cluster import Cluster, request_of
from services.state.jobs import JobState, JobTable

__all__ = ["PlacementCore", "PlacementState", "place_job"]


class PlacementState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.cluster = Cluster()
        self.cycle = 0
        self.candidates: list[str] = []
        self.done_cycle = 0


def place_job(cluster: Cluster, spec: c.JobSpec, overlay: Overlay) -> tuple[list[c.NodeAllocation] | None, list[c.BlockReason]]:
    """Allocations for one job on the best nodes, or ``None`` and the reasons per node group."""
    req = request_of(spec)
    fits: list[Fit] = []
    failures: dict[tuple[str, str], int] = {}
    for node in cluster.sorted_nodes():
        if node.removed:
            continue
        fit = fit_node(node, req, overlay)
        if fit.allocation is not None:
            fits.append(fit)
        else:
            key = (fit.filter, fit.reason)
            failures[key] = failures.get(key, 0) + 1
    if len(fits) >= req.nodes:
        fits.sort(key=lambda f: f.score)
        return [f.allocation for f in fits[: req.nodes]], []  # type: ignore[misc]
    reasons = [c.BlockReason(reason=reason, nodes=count, filter=flt) for (flt, reason), count in sorted(failures.items())]
    if req.nodes > 1 and fits:
        reasons.append(c.BlockReason(reason=f"only {len(fits)} of the {req.nodes} nodes the gang needs fit",
                                     nodes=len(fits), filter="Gang"))
    if not reasons:
        reasons.append(c.BlockReason(reason="no nodes registered", nodes=0, filter="NodeReady"))
    return None, reasons


@dataclass
class PlacementCore:
    name: ClassVar[str] = "placement"
    virtual_time: bool = False
    subjects: tuple[str, ...] = STREAM_SUBJECTS

    def initial(self) -> PlacementState:
        return PlacementState()

    def evolve(self, state: PlacementState, event: Event, record: Record) -> PlacementState:
        match event:
            case c.SchedulingCycleCompleted(cycle=cycle, candidates=candidates):
                if cycle > state.cycle:
                    state.cycle, state.candidates = cycle, list(candidates)
                return state
            case c.PlacementCycleCompleted(cycle=cycle):
                state.done_cycle = max(state.done_cycle, cycle)
                return state
        if state.cluster.apply(event, record.seq):
            return state
        tr = state.jobs.apply(event, record.seq, state.now)
        if tr is not None:
            state.cluster.on_transition(tr)
        return state

    def decide(self, state: PlacementState) -> list[Event]:
        if state.cycle <= state.done_cycle:
            return []
        out: list[Event] = []
        overlay = Overlay()
        cycle = state.cycle
        scheduled = blocked = 0
        # Within one decision free capacity only shrinks, so a request shape that did
        # not fit stays unfit for the rest of the cycle: remember it, skip the scan.
        unfit: dict[object, list[c.BlockReason]] = {}
        for job_id in state.candidates:
            job = state.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.spec is None:
                continue
            shape = request_of(job.spec)
            if shape in unfit:
                allocations, reasons = None, unfit[shape]
            else:
                allocations, reasons = place_job(state.cluster, job.spec, overlay)
                if allocations is None:
                    unfit[shape] = reasons
            if allocations is not None:
                for alloc in allocations:
                    overlay.take(alloc)
                attempt = job.attempt + 1
                out.append(
                    c.JobScheduled(
                        id=f"placement/JobScheduled/{job_id}/{attempt}",
                        ts=state.now,
                        causation_id=f"scheduling/SchedulingCycleCompleted/{cycle}",
                        correlation_id=job_id,
                        source=self.name,
                        job_id=job_id,
                        attempt=attempt,
                        allocations=allocations,
                        basis_seq=state.seq,
                        cycle=cycle,
                        time_limit_s=job.spec.time_limit_s,
                    )
                )
                scheduled += 1
                continue
            blocked += 1
            if tuple(reasons) != job.last_block:
                out.append(
                    c.PlacementBlocked(
                        id=f"placement/PlacementBlocked/{job_id}/{cycle}",
                        ts=state.now,
                        causation_id=f"scheduling/SchedulingCycleCompleted/{cycle}",
                        correlation_id=job_id,
                        source=self.name,
                        job_id=job_id,
                        cycle=cycle,
                        basis_seq=state.seq,
                        reasons=reasons,
                    )
                )
        out.append(
            c.PlacementCycleCompleted(
                id=f"placement/PlacementCycleCompleted/{cycle}",
                ts=state.now,
                correlation_id=str(cycle),
                source=self.name,
                cycle=cycle,
                basis_seq=state.seq,
                scheduled=scheduled,
                blocked=blocked,
            )
        )
        return out
