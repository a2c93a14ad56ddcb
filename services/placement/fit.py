"""Does a job fit on a node, with which devices, and how well. Pure.

``fit_node`` checks, in this order, and stops at the first failure (that
failure is the node's reason in a "blocked" explanation):

1. the node is usable (ready, not cordoned, draining, lost or removed);
2. it has enough CPUs, memory and matching GPUs *in total* (else the job can
   never run there, whatever finishes);
3. it has enough of them *free* now.

Device choice: among the free devices that match (type, variant, memory),
take them from one NUMA node if one has enough (the NUMA node with the fewest
such devices that still suffices, so larger groups stay whole), else in
(NUMA, id) order.

Best fit (the score, lower is better): free GPUs left on the node after
placing, then free CPUs left, then the node name. Packing GPU jobs onto the
fullest node that fits keeps whole nodes free for large jobs; a CPU-only job
lands on the node with the fewest free GPUs, keeping GPU nodes for GPU work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import catalogue as c
from events.resources import format_cpus, format_memory
from services.state.cluster import Node, Request, device_matches, device_sort_key

__all__ = ["Overlay", "Fit", "fit_node", "describe_gpus"]


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
class Fit:
    allocation: c.NodeAllocation | None
    score: tuple[object, ...] = ()
    reason: str = ""
    filter: str = ""


def describe_gpus(req: Request) -> str:
    model = req.gpu_type or ""
    if req.gpu_variant:
        model += f"-{req.gpu_variant}"
    what = f"{model} GPUs" if model else "GPUs"
    if req.gpu_memory_bytes:
        what += f" with >= {format_memory(req.gpu_memory_bytes)}"
    return what


def fit_node(node: Node, req: Request, overlay: Overlay) -> Fit:
    # 1. usable
    if not node.schedulable:
        return Fit(None, reason=f"node {node.status}", filter="NodeReady")
    # 2. capacity in total
    matching = [d for d in node.gpus.values() if device_matches(d, req)] if req.gpus else []
    if req.gpus > len(matching):
        return Fit(None, reason=f"has {len(matching)} {describe_gpus(req)}, needs {req.gpus}", filter="GpuCapacity")
    if req.cpus_milli > node.cpus_milli:
        return Fit(None, reason=f"has {format_cpus(node.cpus_milli)} CPUs, needs {format_cpus(req.cpus_milli)}",
                   filter="CpuCapacity")
    if req.memory_bytes > node.memory_bytes:
        return Fit(None, reason=f"has {format_memory(node.memory_bytes)} memory, needs {format_memory(req.memory_bytes)}",
                   filter="MemoryCapacity")
    # 3. free now
    taken = overlay.devices.get(node.name, ())
    freed = overlay.freed.get(node.name, ())
    free_cpus = node.free_cpus_milli - overlay.cpus_milli.get(node.name, 0)
    free_mem = node.free_memory_bytes - overlay.memory_bytes.get(node.name, 0)
    used = node.used_devices
    free_all = [d for d in node.gpus.values() if (d.id not in used or d.id in freed) and d.id not in taken]
    free_matching = [d for d in free_all if device_matches(d, req)] if req.gpus else []
    if req.gpus > len(free_matching):
        return Fit(None, reason=f"too few free {describe_gpus(req)} (needs {req.gpus})", filter="GpuFree")
    if req.cpus_milli > free_cpus:
        return Fit(None, reason=f"too few free CPUs (needs {format_cpus(req.cpus_milli)})", filter="CpuFree")
    if req.memory_bytes > free_mem:
        return Fit(None, reason=f"too little free memory (needs {format_memory(req.memory_bytes)})", filter="MemoryFree")
    devices = _choose_devices(free_matching, req.gpus)
    alloc = c.NodeAllocation(
        node=node.name,
        device_ids=devices,
        cpus_milli=req.cpus_milli,
        memory_bytes=req.memory_bytes,
        tasks=req.tasks_per_node,
    )
    score = (len(free_all) - req.gpus, free_cpus - req.cpus_milli, node.name)
    return Fit(alloc, score=score)


def _choose_devices(free: list[c.GpuDevice], count: int) -> list[str]:
    if count == 0:
        return []
    by_numa: dict[int, list[c.GpuDevice]] = {}
    for d in free:
        by_numa.setdefault(d.numa_node, []).append(d)
    fitting = [(len(ds), numa) for numa, ds in by_numa.items() if len(ds) >= count]
    if fitting:
        _, numa = min(fitting)
        chosen = sorted(by_numa[numa], key=lambda d: device_sort_key(d.id))[:count]
    else:
        chosen = sorted(free, key=lambda d: (d.numa_node, device_sort_key(d.id)))[:count]
    return sorted((d.id for d in chosen), key=device_sort_key)
