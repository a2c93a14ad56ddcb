"""Elastic gangs grow: a running job of ``--nodes MIN-MAX`` takes free nodes toward its most. Pure.

An elastic job (``JobSpec.min_nodes`` < ``nodes``) starts on as many of its ``nodes`` as fit, at
least ``min_nodes`` (``place.py``). It grows only in a placement cycle that left **no candidate
blocked**: the jobs the scheduler offered come first, and room a waiting job wants is never taken
for growth (nor is room held for a preemptor, or a node of an advance reservation the job may not
use: the same filters as a new placement). Then every elastic job below its most, in job id order,
takes the best of the nodes that fit it now, apart from those it holds, up to its most, and
placement emits ``JobResized`` with the whole new allocation (the old nodes first, in their order,
so the first node, where the job was launched, stays first). The job keeps its end: the new nodes
are judged for the time it has left. It grows only onto nodes of its own backend (a gang never
spans two, ``place.py``): the nodes of the others are excluded as its own are.

The scheduler decides a cycle also when nothing is pending but an elastic job is below its most
and room was freed (``services/domain/queue/fold.py``), so growth does not wait for a submission.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from events import catalogue as c
from services.domain.cluster import Cluster, request_of
from services.domain.envelope import Decider, decision_id
from services.domain.fit.context import Context
from services.domain.fit.cycle import AdvanceReservation, Overlay
from services.domain.fit.profile import Profile
from services.domain.fit.topology import Topology
from services.domain.jobs import HOLDS_RESOURCES, JobTable
from services.domain.partitions import Partitions
from services.placement.index import NodeIndex
from services.placement.place import place_job

__all__ = ["Room", "grow", "track_elastic", "below_most"]


def below_most(jobs: JobTable, job_id: str) -> bool:
    """Whether the job is elastic, holds resources and runs on fewer nodes than its most."""
    job = jobs.jobs.get(job_id)
    return (job is not None and job.spec is not None and job.spec.elastic and job.state in HOLDS_RESOURCES
            and 0 < len(job.allocations) < job.spec.nodes)


def track_elastic(elastic: set[str], jobs: JobTable, job_id: str) -> None:
    """Keep ``elastic`` (the jobs that may grow) in step with the job table after an event about ``job_id``."""
    if below_most(jobs, job_id):
        elastic.add(job_id)
    else:
        elastic.discard(job_id)


@dataclass(frozen=True)
class Room:
    """What growth is judged against: placement's state at this decision."""

    cluster: Cluster
    jobs: JobTable
    profiles: Mapping[str, Profile]
    held: Mapping[str, frozenset[str]]
    partitions: Partitions
    advance: tuple[AdvanceReservation, ...]
    now: float
    seq: int


def grow(room: Room, elastic: set[str], overlay: Overlay, index: NodeIndex, topology: Topology | None, cycle: int,
         source: str) -> list[c.Event]:
    """``JobResized`` for every elastic job below its most that more nodes fit now (see the module doc)."""
    out: list[c.Event] = []
    now = room.now
    parts = room.partitions
    memberships = parts.memberships() if parts else {}
    decide = Decider("placement", ts=now, source=source,
                     causation_id=decision_id("scheduling", c.SchedulingCycleCompleted, cycle))
    for job_id in sorted(elastic):
        job = room.jobs.jobs[job_id]
        spec = job.spec
        assert spec is not None
        profile = room.profiles.get(spec.profile)
        if profile is None:
            continue
        have = [a.node for a in job.allocations]
        base = request_of(spec)
        req = dataclasses.replace(base, nodes=spec.nodes - len(have), min_nodes=1,
                                  exclude=base.exclude | frozenset(have) | _elsewhere(room.cluster, have[0]))
        if req.topological and topology is None:
            continue  # its affinity is judged where jobs run: it grows in a cycle that looked (rare; it may wait)
        end = (job.scheduled_ts or now) + job.limit_s
        ctx = Context(profile, now, max(end, now), spec.account, room.advance, topology, job_id=job_id, held=room.held,
                      partition=parts.view(spec.partition), memberships=memberships)
        placed = place_job(room.cluster, req, overlay, index, ctx)
        if placed.allocations is None:
            continue
        for alloc in placed.allocations:
            overlay.take(alloc)
            index.moved(alloc.node)
            if topology is not None:
                topology.add(alloc.node, spec)
        allocations = [*job.allocations, *placed.allocations]
        out.append(decide(
            c.JobResized, job_id, job.attempt, cycle, correlation_id=job_id, job_id=job_id, attempt=job.attempt,
            allocations=allocations, nodes=len(allocations), previous_nodes=len(have), basis_seq=room.seq,
            cycle=cycle, reason=f"grew from {len(have)} to {len(allocations)} of its {spec.nodes} nodes: "
                                f"{', '.join(a.node for a in placed.allocations)} free after cycle {cycle}"))
    return out


def _elsewhere(cluster: Cluster, first: str) -> frozenset[str]:
    """The nodes of backends other than that of the job's first node (none on a cluster of one backend)."""
    node = cluster.nodes.get(first)
    backend = node.backend if node is not None else ""
    return frozenset(name for name, n in cluster.nodes.items() if n.backend != backend)
