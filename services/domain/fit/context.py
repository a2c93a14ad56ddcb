"""What a node's fit is judged against besides the node and the request. Pure.

``Overlay``: the changes to the ledger that a decision is considering.
``Context``: the profile, the job's window, its account, advance reservations, where jobs run, the
room held for preemptors. ``Cycle``: one (node, request) evaluation, the state the filter plugins
fill in for the ones after them and for the score plugins (as the Kubernetes framework's CycleState).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from events import catalogue as c
from services.domain.cluster import Node, Request
from services.domain.fit.profile import Profile

if TYPE_CHECKING:
    from services.domain.fit.topology import Topology

__all__ = ["Overlay", "AdvanceReservation", "Context", "DEFAULT_CONTEXT", "Cycle", "hold_room", "release_room"]


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


@dataclass(slots=True)
class Context:
    """What a placement knows besides the node and the request: the profile, when the job would
    run (now or a reservation's time, until its time limit), its account, the advance
    reservations and, for inter-job (anti-)affinity, where jobs run."""

    profile: Profile = field(default_factory=Profile)
    start_ts: float = 0.0
    end_ts: float = math.inf
    account: str = ""
    reservations: tuple[AdvanceReservation, ...] = ()
    topology: Topology | None = None
    job_id: str = ""
    held: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> preemptors its freed room is held for


DEFAULT_CONTEXT = Context()


class Cycle:
    """One node judged for one request: the inputs, and what the filters found on the way (free
    devices, CPUs and memory) for the filters after them and for the scores."""

    __slots__ = ("node", "req", "overlay", "ctx", "free_all", "free_matching", "free_cpus", "free_mem", "chosen")

    def __init__(self, node: Node, req: Request, overlay: Overlay, ctx: Context) -> None:
        self.node = node
        self.req = req
        self.overlay = overlay
        self.ctx = ctx
        self.free_all: list[c.GpuDevice] = []  # free GPUs of any kind
        self.free_matching: list[c.GpuDevice] = []  # free GPUs the request may take
        self.free_cpus = 0
        self.free_mem = 0
        self.chosen: list[c.GpuDevice] = []  # the devices it would take (set once every filter passed)


def hold_room(held: dict[str, frozenset[str]], allocations: Iterable[c.NodeAllocation], for_job: str) -> None:
    """A victim is being preempted for ``for_job``: the nodes it runs on are held for that job
    (``fit_node`` refuses them to anyone else) until it starts or ends (``release_room``).
    Placement and preemption fold this alike, so a preemption plan never counts on room held
    for another preemptor."""
    for alloc in allocations:
        held[alloc.node] = held.get(alloc.node, frozenset()) | {for_job}


def release_room(held: dict[str, frozenset[str]], job_id: str) -> None:
    """``job_id`` left the queue (it started, or ended waiting): what was held for it is free."""
    for node in [n for n, holders in held.items() if job_id in holders]:
        rest = held[node] - {job_id}
        if rest:
            held[node] = rest
        else:
            del held[node]
