"""A placement leader for some partitions only: scale-out by partition (docs/scaling.md). Pure.

``PartitionedPlacementCore`` folds the whole log as ``PlacementCore`` does (every node, every job
holding resources, whoever placed it), and places the cycles of its partner only,
``scheduling-<partitions>``, whose candidates are its partitions' jobs; the ``Partition`` filter
keeps each of them on its partition's nodes. It publishes under ``placement-<partitions>`` with ids
``placement-<partitions>/...`` (two leaders' cycle 7 are two events), and an elastic job grows
only by its own partition's leader.

It folds only its partitions' jobs (``services/domain/leaders.py``): a job of another partition is
skipped at its ``JobAccepted``, and every later event of a job not in its table is skipped before it
is decoded (``skips``) or, decoded (audit), in ``evolve``. No other leader's job is ever on its nodes
(below), so what it places is what it placed folding every job; only the runtime history its
estimates read (each user's last run times) is of its own partitions' jobs.

Two leaders never place on one node: a leader places only on the nodes whose every partition is
one of its own (``OwnNodes``): a node that a partition of another leader (or of no leader) shares
is used by none, so each node has at most one leader deciding on it, from a fold that sees the
other leaders' placements as they land. Partitions that share nodes belong under one leader
(``--partition a --partition b``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import event_owner, leader_token, partner_token
from services.domain.fit.cycle import PartitionView
from services.domain.leaders import ACCEPTED, JOB_EVENTS, peek
from services.domain.partitions import Partitions
from services.domain.protocol import Record
from services.placement.core import PlacementCore, PlacementState

__all__ = ["PartitionedPlacementCore", "OwnNodes"]


class OwnNodes(Partitions):
    """The partitions as a leader of ``covered`` places by: a partition's nodes less those that a
    partition outside ``covered`` shares (the ``Partition`` filter then keeps its jobs off them)."""

    def __init__(self, covered: frozenset[str]) -> None:
        super().__init__()
        self.covered = covered

    def view(self, name: str) -> PartitionView | None:
        cached = self._views.get(name)
        if cached is not None:
            return cached
        found = super().view(name)
        if found is None or not found.exists:
            return found
        memberships = self.memberships()
        nodes = frozenset(n for n in found.nodes if memberships.get(n, frozenset()) <= self.covered)
        if nodes != found.nodes:
            found = PartitionView(found.name, nodes, found.state)
            if name in self._views:
                self._views[name] = found
        return found


@dataclass
class PartitionedPlacementCore(PlacementCore):
    """``PlacementCore`` placing the cycles of ``scheduling-<partitions>`` only, under its own token."""

    partitions: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.partitions:
            raise ValueError("a partitioned placement leader needs at least one partition")
        self.partitions = tuple(sorted(set(self.partitions)))
        self.name = leader_token("placement", self.partitions)  # type: ignore[misc]
        self.partner = partner_token(self.name)
        self._covered = frozenset(self.partitions)

    def initial(self) -> PlacementState:
        state = super().initial()
        state.partitions = OwnNodes(self._covered)
        return state

    def skips(self, state: PlacementState, record: Record) -> bool:
        """Whether ``evolve`` would skip this record (a job of another partition), from a peek."""
        found = peek(record)
        if found is None:
            return False
        if found.type == ACCEPTED:
            return found.spec is None or found.spec.partition not in self._covered
        return found.job_id not in state.jobs.jobs

    def evolve(self, state: PlacementState, event: Event, record: Record) -> PlacementState:
        if isinstance(event, c.JobAccepted):
            if event.spec.partition not in self._covered:
                return state  # another leader's job
        elif event.event_type in JOB_EVENTS and getattr(event, "job_id", "") and event.job_id not in state.jobs.jobs:  # type: ignore[attr-defined]
            return state  # a job not in its table: another partition's
        if isinstance(event, c.SchedulingCycleCompleted) and event_owner(record.subject) != self.partner:
            return state  # another leader's cycle
        if isinstance(event, c.PlacementCycleCompleted) and event_owner(record.subject) != self.name:
            return state
        return super().evolve(state, event, record)

    def decide(self, state: PlacementState) -> list[Event]:
        out = []
        for event in super().decide(state):
            job_id = getattr(event, "job_id", None)
            if job_id is not None:
                job = state.jobs.get(job_id)
                if job is None or job.spec is None or job.spec.partition not in self._covered:
                    continue  # another leader's job (an elastic job growing)
            changes: dict[str, Any] = {"id": self.name + event.id[event.id.index("/"):]}
            cause = event.causation_id or ""
            if cause.startswith("scheduling/"):
                changes["causation_id"] = self.partner + cause[len("scheduling"):]
            out.append(msgspec.structs.replace(event, **changes))
        return out
