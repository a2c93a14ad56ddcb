"""Free now: enough of the matching GPUs, CPUs and memory are free on the node, given the ledger and
the decision's overlay (``GpuFree``, ``CpuFree``, ``MemoryFree``). They leave what they counted in
the cycle for the scores (``free_all``, ``free_matching``, ``free_cpus``, ``free_mem``). An unhealthy
GPU is never free, nor is what work its backend did not place holds (``Node.foreign``).

CPUs and memory are free against the node's capacity for a guaranteed job, against capacity x its
overcommit ratio for a burstable or best-effort one (``services/domain/qos.py``), all the requests on
the node counted either way: ``free = room - used - foreign - overlay``. With ratios of 1 (the default) the
two are the same."""

from __future__ import annotations

from typing import TYPE_CHECKING

from events.resources import format_cpus, format_memory
from services.domain.cluster import Request, device_matches
from services.domain.fit.filters.capacity import describe_gpus
from services.domain.qos import overcommitted

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where


class GpuFree:
    name = "GpuFree"
    never = False

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True  # also counts the free GPUs, for the scores

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node, req, overlay = cyc.node, cyc.req, cyc.overlay
        name = node.name
        gpus = node.gpus
        if gpus:
            taken = overlay.devices.get(name, ())
            freed = overlay.freed.get(name, ())
            used = node.used_devices
            cyc.free_all = [d for d in gpus.values() if (d.id not in used or d.id in freed) and d.id not in taken]
            if node.unhealthy_gpus:
                cyc.free_all = [d for d in cyc.free_all if not d.health]
            if node.foreign is not None and node.foreign.devices:
                foreign = node.foreign_devices
                cyc.free_all = [d for d in cyc.free_all if d.id not in foreign]
        if req.gpus:
            cyc.free_matching = [d for d in cyc.free_all if device_matches(d, req)]
            if req.gpus > len(cyc.free_matching):
                return ()
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"too few free {describe_gpus(req)} (needs {req.gpus})"


class CpuFree:
    name = "CpuFree"
    never = False

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node = cyc.node
        room = node.cpus_milli if cyc.req.guaranteed else overcommitted(node.cpus_milli, node.cpu_overcommit)
        cyc.cpu_room = room
        cyc.free_cpus = room - node.used_cpus_milli - node.foreign_cpus_milli - cyc.overlay.cpus_milli.get(node.name, 0)
        return () if cyc.req.cpus_milli > cyc.free_cpus else None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"too few free CPUs (needs {format_cpus(req.cpus_milli)}{_class(req)})"


class MemoryFree:
    name = "MemoryFree"
    never = False

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node = cyc.node
        room = node.memory_bytes if cyc.req.guaranteed else overcommitted(node.memory_bytes, node.memory_overcommit)
        cyc.free_mem = (room - node.used_memory_bytes - node.foreign_memory_bytes
                        - cyc.overlay.memory_bytes.get(node.name, 0))
        if cyc.req.whole_memory:  # all of it (Slurm's --mem=0): none may be in use
            return () if cyc.free_mem < node.memory_bytes else None
        return () if cyc.req.memory_bytes > cyc.free_mem else None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        if req.whole_memory:
            return "memory in use by other jobs (--mem=0 needs all of it)"
        return f"too little free memory (needs {format_memory(req.memory_bytes)}{_class(req)})"


def _class(req: Request) -> str:
    return "" if req.guaranteed else "; not guaranteed: packed against capacity x overcommit"
