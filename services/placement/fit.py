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
from functools import lru_cache

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


class Fit:
    """One node's answer for one request: fits (with devices and a score), or the first failure.

    The failure text is built only when asked for (``reason``): most failures
    of a large cluster are counted per group, never shown one by one.
    """

    __slots__ = ("node", "req", "devices", "score", "filter", "detail")

    def __init__(self, node: str, req: Request, devices: list[str] | None = None, score: tuple[object, ...] = (),
                 filter: str = "", detail: tuple[object, ...] = ()) -> None:
        self.node = node
        self.req = req
        self.devices = devices
        self.score = score
        self.filter = filter
        self.detail = detail

    @property
    def ok(self) -> bool:
        return self.devices is not None

    def allocation_on(self, node: str) -> c.NodeAllocation:
        """This fit's allocation on ``node`` (the node it was computed on, or any node of its kind)."""
        req = self.req
        return c.NodeAllocation(node=node, device_ids=list(self.devices or ()), cpus_milli=req.cpus_milli,
                                memory_bytes=req.memory_bytes, tasks=req.tasks_per_node)


@lru_cache(maxsize=4096)
def describe_gpus(req: Request) -> str:
    model = req.gpu_type or ""
    if req.gpu_variant:
        model += f"-{req.gpu_variant}"
    what = f"{model} GPUs" if model else "GPUs"
    if req.gpu_memory_bytes:
        what += f" with >= {format_memory(req.gpu_memory_bytes)}"
    return what


def explain(filter: str, detail: tuple[object, ...], req: Request) -> str:
    """The text of a failure: what the node has against what the job needs."""
    if filter == "NodeReady":
        return f"node {detail[0]}"
    if filter == "GpuCapacity":
        return f"has {detail[0]} {describe_gpus(req)}, needs {req.gpus}"
    if filter == "CpuCapacity":
        return f"has {format_cpus(detail[0])} CPUs, needs {format_cpus(req.cpus_milli)}"  # type: ignore[arg-type]
    if filter == "MemoryCapacity":
        return f"has {format_memory(detail[0])} memory, needs {format_memory(req.memory_bytes)}"  # type: ignore[arg-type]
    if filter == "GpuFree":
        return f"too few free {describe_gpus(req)} (needs {req.gpus})"
    if filter == "CpuFree":
        return f"too few free CPUs (needs {format_cpus(req.cpus_milli)})"
    if filter == "MemoryFree":
        return f"too little free memory (needs {format_memory(req.memory_bytes)})"
    return filter


def fit_node(node: Node, req: Request, overlay: Overlay) -> Fit:
    name = node.name
    # 1. usable
    if not node.schedulable:
        return Fit(name, req, filter="NodeReady", detail=(node.status,))
    # 2. capacity in total
    gpus = node.gpus
    if req.gpus:
        matching = sum(1 for d in gpus.values() if device_matches(d, req))
        if req.gpus > matching:
            return Fit(name, req, filter="GpuCapacity", detail=(matching,))
    if req.cpus_milli > node.cpus_milli:
        return Fit(name, req, filter="CpuCapacity", detail=(node.cpus_milli,))
    if req.memory_bytes > node.memory_bytes:
        return Fit(name, req, filter="MemoryCapacity", detail=(node.memory_bytes,))
    # 3. free now
    free_cpus = node.cpus_milli - node.used_cpus_milli - overlay.cpus_milli.get(name, 0)
    free_mem = node.memory_bytes - node.used_memory_bytes - overlay.memory_bytes.get(name, 0)
    if gpus:
        taken = overlay.devices.get(name, ())
        freed = overlay.freed.get(name, ())
        used = node.used_devices
        free_all = [d for d in gpus.values() if (d.id not in used or d.id in freed) and d.id not in taken]
    else:
        free_all = []
    if req.gpus:
        free_matching = [d for d in free_all if device_matches(d, req)]
        if req.gpus > len(free_matching):
            return Fit(name, req, filter="GpuFree")
    else:
        free_matching = []
    if req.cpus_milli > free_cpus:
        return Fit(name, req, filter="CpuFree")
    if req.memory_bytes > free_mem:
        return Fit(name, req, filter="MemoryFree")
    devices = _choose_devices(free_matching, req.gpus) if req.gpus else []
    return Fit(name, req, devices=devices, score=(len(free_all) - req.gpus, free_cpus - req.cpus_milli, name))


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
