"""Does a job fit on a node, with which devices, and how well. Pure.

``fit_node`` (or a ``Fitter``, for many nodes) runs the filter plugins (``framework.FILTERS``) that
apply to the job in order and stops at the first failure
(that failure is the node's reason in a "blocked" explanation), then chooses the devices and weighs
the score plugins (``framework.SCORES``) with the profile's weights.

Device choice: among the free devices that match (type, variant, memory),
take them from one interconnect (NVLink) group if one has enough, the
smallest such group; within the chosen set, from one NUMA node if one has
enough (the NUMA node with the fewest such devices that still suffices, so
larger groups stay whole), else in (NUMA, id) order.

The node index ranks fitting nodes by the weighted sum (``Fit.parts`` holds each plugin's score),
then by node name.
"""

from __future__ import annotations

from events import catalogue as c
from services.domain.cluster import Node, Request, device_sort_key
from services.domain.fit.context import Context, DEFAULT_CONTEXT
from services.domain.fit.cycle import Cycle, Overlay
from services.domain.fit.framework import FILTERS, SCORES

__all__ = ["Fit", "Fitter", "fit_node", "choose_devices"]



class Fit:
    """One node's answer for one request: fits (with devices and a score), or the first failure.

    The failure text is built only when asked for (``framework.explain``): most failures
    of a large cluster are counted per group, never shown one by one.
    """

    __slots__ = ("node", "req", "devices", "score", "filter", "detail", "parts", "cpus_milli", "memory_bytes")

    def __init__(self, node: str, req: Request, devices: list[str] | None = None, score: tuple[object, ...] = (),
                 filter: str = "", detail: tuple[object, ...] = (), parts: dict[str, float] | None = None,
                 cpus_milli: int | None = None, memory_bytes: int | None = None) -> None:
        self.node = node
        self.req = req
        self.devices = devices
        self.score = score  # (-weighted sum, node): smallest first
        self.filter = filter
        self.detail = detail
        self.parts = parts or {}  # score plugin -> its score in [0, 1]
        # What the allocation holds when it is not the request's: a whole node's CPUs (--exclusive),
        # its whole memory (--mem=0). Nodes of one kind have the same, so a group's fit serves them all.
        self.cpus_milli = req.cpus_milli if cpus_milli is None else cpus_milli
        self.memory_bytes = req.memory_bytes if memory_bytes is None else memory_bytes

    @property
    def ok(self) -> bool:
        return self.devices is not None

    def allocation_on(self, node: str) -> c.NodeAllocation:
        """This fit's allocation on ``node`` (the node it was computed on, or any node of its kind)."""
        req = self.req
        return c.NodeAllocation(node=node, device_ids=list(self.devices or ()), cpus_milli=self.cpus_milli,
                                memory_bytes=self.memory_bytes, tasks=req.tasks_per_node)


class Fitter:
    """One job's request in one context, judged node after node: the filters that apply to it are
    chosen once (``Filter.relevant``), then each node runs them in order and, if it passes, is scored."""

    __slots__ = ("req", "ctx", "checks", "scores")

    def __init__(self, req: Request, ctx: Context = DEFAULT_CONTEXT) -> None:
        self.req = req
        self.ctx = ctx
        self.checks = tuple((f.name, f.check) for f in FILTERS if f.relevant(req, ctx))
        weights = ctx.profile.weights
        self.scores = tuple((s.name, s.score, weights[s.name]) for s in SCORES)

    def __call__(self, node: Node, overlay: Overlay) -> Fit:
        req = self.req
        cyc = Cycle(node, req, overlay, self.ctx)
        for name, check in self.checks:
            detail = check(cyc)
            if detail is not None:
                return Fit(node.name, req, filter=name, detail=detail)
        if req.exclusive:  # the whole node: every GPU it has (all free: nothing runs there), as Slurm
            chosen = sorted(cyc.free_all, key=lambda d: device_sort_key(d.id))
        else:
            chosen = choose_devices(cyc.free_matching, req.gpus) if req.gpus else []
        cyc.chosen = chosen
        parts: dict[str, float] = {}
        total = 0.0
        for name, score, weight in self.scores:
            part = parts[name] = score(cyc)
            total += weight * part
        devices = sorted((d.id for d in chosen), key=device_sort_key)
        return Fit(node.name, req, devices=devices, score=(-total, node.name), parts=parts,
                   cpus_milli=node.cpus_milli if req.exclusive else None,
                   memory_bytes=node.memory_bytes if req.whole_memory else None)


def fit_node(node: Node, req: Request, overlay: Overlay, ctx: Context = DEFAULT_CONTEXT) -> Fit:
    """One node's ``Fit`` for ``req``; to judge many nodes for one job, make one ``Fitter``."""
    return Fitter(req, ctx)(node, overlay)


def choose_devices(free: list[c.GpuDevice], count: int) -> list[c.GpuDevice]:
    """``count`` of the ``free`` devices: from the smallest interconnect group that has enough, then
    from the NUMA node with the fewest that still suffices, else in (NUMA, id) order."""
    if count == 0:
        return []
    by_link: dict[str, list[c.GpuDevice]] = {}
    for d in free:
        if d.interconnect:
            by_link.setdefault(d.interconnect, []).append(d)
    linked = [(len(ds), link) for link, ds in by_link.items() if len(ds) >= count]
    if linked:
        _, link = min(linked)
        free = by_link[link]
    by_numa: dict[int, list[c.GpuDevice]] = {}
    for d in free:
        by_numa.setdefault(d.numa_node, []).append(d)
    fitting = [(len(ds), numa) for numa, ds in by_numa.items() if len(ds) >= count]
    if fitting:
        _, numa = min(fitting)
        return sorted(by_numa[numa], key=lambda d: device_sort_key(d.id))[:count]
    return sorted(free, key=lambda d: (d.numa_node, device_sort_key(d.id)))[:count]
