"""Capacity in total: enough matching GPUs (type, variant, memory), CPUs and memory on the node when
it is empty (``GpuCapacity``, ``CpuCapacity``, ``MemoryCapacity``). A node failing these can never
take the job, whatever finishes. An unhealthy GPU (``GpuDevice.health`` set) is no capacity."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from events.resources import format_cpus, format_memory
from services.domain.cluster import Request, device_matches

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where

__all__ = ["GpuCapacity", "CpuCapacity", "MemoryCapacity", "describe_gpus"]


@lru_cache(maxsize=4096)
def describe_gpus(req: Request) -> str:
    model = req.gpu_type or ""
    if req.gpu_variant:
        model += f"-{req.gpu_variant}"
    what = f"{model} GPUs" if model else "GPUs"
    if req.gpu_memory_bytes:
        what += f" with >= {format_memory(req.gpu_memory_bytes)}"
    return what


class GpuCapacity:
    name = "GpuCapacity"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return req.gpus > 0

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        req = cyc.req
        if req.gpus:
            matching = sum(1 for d in cyc.node.gpus.values() if device_matches(d, req) and not d.health)
            if req.gpus > matching:
                return (matching,)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"has {detail[0]} {describe_gpus(req)}, needs {req.gpus}"


class CpuCapacity:
    name = "CpuCapacity"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node = cyc.node
        return (node.cpus_milli,) if cyc.req.cpus_milli > node.cpus_milli else None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"has {format_cpus(detail[0])} CPUs, needs {format_cpus(req.cpus_milli)}"  # type: ignore[arg-type]


class MemoryCapacity:
    name = "MemoryCapacity"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node = cyc.node
        return (node.memory_bytes,) if cyc.req.memory_bytes > node.memory_bytes else None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"has {format_memory(detail[0])} memory, needs {format_memory(req.memory_bytes)}"  # type: ignore[arg-type]
