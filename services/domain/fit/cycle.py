"""What one node is judged against for one request, below the profiles and the plugin registry. Pure.

``Overlay``: the changes to the ledger that a decision is considering. ``Where``: what the filters
read of the job's context (``services/domain/fit/context.py``'s ``Context`` is one). ``Cycle``: one
(node, request) evaluation, the state the filter plugins fill in for the ones after them and for
the score plugins (as the Kubernetes framework's CycleState). The plugins import this module, and it
imports none of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from events import catalogue as c
from services.domain.cluster import Node, Request
from services.domain.fit.topology import Topology

__all__ = ["Overlay", "AdvanceReservation", "PartitionView", "Where", "Cycle"]


@dataclass(slots=True)
class Overlay:
    """Changes to the ledger that a decision is considering: resources taken by placements
    made earlier in the same decision, and (for reservations) resources given back by
    running jobs expected to have ended by some future time."""

    cpus_milli: dict[str, int] = field(default_factory=dict)  # net taken (negative: freed)
    memory_bytes: dict[str, int] = field(default_factory=dict)
    devices: dict[str, set[str]] = field(default_factory=dict)  # taken
    freed: dict[str, set[str]] = field(default_factory=dict)  # in the ledger, but given back

    def take(self, alloc: c.NodeAllocation) -> None:
        n = alloc.node
        self.cpus_milli[n] = self.cpus_milli.get(n, 0) + alloc.cpus_milli
        self.memory_bytes[n] = self.memory_bytes.get(n, 0) + alloc.memory_bytes
        self.devices.setdefault(n, set()).update(alloc.device_ids)

    def give(self, alloc: c.NodeAllocation) -> None:
        n = alloc.node
        self.cpus_milli[n] = self.cpus_milli.get(n, 0) - alloc.cpus_milli
        self.memory_bytes[n] = self.memory_bytes.get(n, 0) - alloc.memory_bytes
        taken = self.devices.get(n)
        for device in alloc.device_ids:
            if taken is not None and device in taken:
                taken.discard(device)  # placed in this decision, ended by then
            else:
                self.freed.setdefault(n, set()).add(device)

    def copy(self) -> Overlay:
        return Overlay(
            dict(self.cpus_milli),
            dict(self.memory_bytes),
            {n: set(s) for n, s in self.devices.items()},
            {n: set(s) for n, s in self.freed.items()},
        )


@dataclass(frozen=True, slots=True)
class AdvanceReservation:
    """Nodes held for ``account`` from ``start_ts`` to ``end_ts`` (``ReservationConfigured``)."""

    name: str
    account: str
    nodes: frozenset[str]
    start_ts: float
    end_ts: float

    def excludes(self, account: str, start: float, end: float) -> bool:
        """Whether a job of ``account`` running from ``start`` to ``end`` may not use these nodes."""
        return account != self.account and start < self.end_ts and end > self.start_ts


@dataclass(frozen=True, slots=True)
class PartitionView:
    """What placement needs of a job's partition (``services/domain/partitions.py``): its nodes now
    and its state (``exists`` False: removed since the job was accepted)."""

    name: str
    nodes: frozenset[str]
    state: str = "up"
    exists: bool = True


class Where(Protocol):
    """What a filter may read of the job's context: its window, account, the advance reservations,
    where jobs run (inter-job affinity), the room held for preemptors and the job's partition."""

    start_ts: float
    end_ts: float
    account: str
    reservations: tuple[AdvanceReservation, ...]
    topology: Topology | None
    job_id: str
    held: Mapping[str, frozenset[str]]
    partition: PartitionView | None


class Cycle:
    """One node judged for one request: the inputs, and what the filters found on the way (free
    devices, CPUs and memory) for the filters after them and for the scores."""

    __slots__ = ("node", "req", "overlay", "ctx", "free_all", "free_matching", "free_cpus", "free_mem", "chosen",
                 "cpu_room")

    def __init__(self, node: Node, req: Request, overlay: Overlay, ctx: Where) -> None:
        self.node = node
        self.req = req
        self.overlay = overlay
        self.ctx = ctx
        self.free_all: list[c.GpuDevice] = []  # free GPUs of any kind
        self.free_matching: list[c.GpuDevice] = []  # free GPUs the request may take
        self.free_cpus = 0
        self.free_mem = 0
        self.chosen: list[c.GpuDevice] = []  # the devices it would take (set once every filter passed)
        self.cpu_room = node.cpus_milli  # the CPUs its requests are packed against (x overcommit unless guaranteed)
