"""Which of the machine's cores an attempt is pinned to. Pure.

Placement gives a job CPUs as a quantity (``cpus_milli`` per node); the agent
turns it into cores for the attempt's cpuset: as many whole cores as the
quantity rounds up to, the least used first, and among equals those on the
NUMA node of the job's GPUs (data moves between a GPU and its host memory
without crossing the socket link), then the lowest numbers.

A node's CPUs are numbered ``0..n-1``; on a real node CPU ``i`` is the
machine's ``i``-th usable core. A development node (``horizon up --nodes 4``)
may declare more CPUs than the machine has: its CPU ``i`` is the machine's
core ``i mod cores``, so its jobs are still pinned, to shared cores.

The quota (``cpu.cfs_quota_us``) enforces the quantity; the cpuset says where.
Two jobs share a core only when every core is taken (a node of 2 CPUs running
four jobs of 0.5 CPU).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["Machine", "CoreAllocator"]


@dataclass(frozen=True)
class Machine:
    """The machine's usable cores and the NUMA node of each."""

    cores: tuple[int, ...]
    numa: dict[int, int] = field(default_factory=dict)

    def numa_of(self, core: int) -> int:
        return self.numa.get(core, 0)


class CoreAllocator:
    """Cores per attempt on one agent's nodes (see the module doc)."""

    def __init__(self, machine: Machine, node_cpus: dict[str, int]) -> None:
        self.machine = machine
        self.node_cpus = dict(node_cpus)  # node -> its CPUs (whole)
        self.taken: dict[tuple[str, str, int], tuple[str, tuple[int, ...]]] = {}  # (node, job, attempt) -> cpus

    def core_of(self, cpu: int) -> int:
        return self.machine.cores[cpu % len(self.machine.cores)]

    def _load(self, node: str) -> dict[int, int]:
        load = {cpu: 0 for cpu in range(max(1, self.node_cpus.get(node, len(self.machine.cores))))}
        for (owner, _job, _attempt), (_n, cpus) in self.taken.items():
            if owner == node:
                for cpu in cpus:
                    load[cpu] = load.get(cpu, 0) + 1
        return load

    def take(self, node: str, job: str, attempt: int, cpus_milli: int, numa: Iterable[int] = ()) -> tuple[int, ...]:
        """The node CPUs for this attempt (and remember them until ``release``)."""
        key = (node, job, attempt)
        if key in self.taken:
            return self.taken[key][1]
        wanted = max(1, math.ceil(cpus_milli / 1000))
        near = set(numa)
        load = self._load(node)
        order = sorted(load, key=lambda cpu: (load[cpu], bool(near) and self.machine.numa_of(self.core_of(cpu)) not in near,
                                              cpu))
        chosen = tuple(sorted(order[:wanted]))
        self.taken[key] = (node, chosen)
        return chosen

    def hold(self, node: str, job: str, attempt: int, cpus: Sequence[int]) -> None:
        """Remember CPUs an attempt already runs on (one adopted after an agent restart)."""
        self.taken[(node, job, attempt)] = (node, tuple(cpus))

    def release(self, node: str, job: str, attempt: int) -> None:
        self.taken.pop((node, job, attempt), None)

    def machine_cores(self, cpus: Iterable[int]) -> tuple[int, ...]:
        """The machine's cores behind node CPUs (what the cpuset names)."""
        return tuple(sorted({self.core_of(cpu) for cpu in cpus}))

    def numa_nodes(self, cores: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({self.machine.numa_of(core) for core in cores}))
