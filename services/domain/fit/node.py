"""Does a job fit on a node, with which devices, and how well. Pure.

``fit_node`` runs the filter plugins of ``services.domain.fit.plugins`` in
order and stops at the first failure (that failure is the node's reason in a
"blocked" explanation): usable, node selector, required node affinity,
taints, advance reservations, capacity in total (else the job can never run
there, whatever finishes), inter-job affinity and anti-affinity, free now.

Device choice: among the free devices that match (type, variant, memory),
take them from one interconnect (NVLink) group if one has enough, the
smallest such group; within the chosen set, from one NUMA node if one has
enough (the NUMA node with the fewest such devices that still suffices, so
larger groups stay whole), else in (NUMA, id) order.

The score of a fitting node is the profile's weighted sum of the score
plugins (``Fit.parts``); the node index ranks by it, then by node name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from events import catalogue as c
from events.resources import format_cpus, format_memory
from services.domain.fit.plugins import (Profile, describe_requirement, describe_taint, requirement_holds,
                                        untolerated)
from services.domain.cluster import Cluster, Node, Request, device_matches, device_sort_key

__all__ = ["Overlay", "Fit", "fit_node", "describe_gpus", "Context", "AdvanceReservation", "Topology", "explain",
           "hold_room", "release_room"]


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

    __slots__ = ("node", "req", "devices", "score", "filter", "detail", "parts")

    def __init__(self, node: str, req: Request, devices: list[str] | None = None, score: tuple[object, ...] = (),
                 filter: str = "", detail: tuple[object, ...] = (), parts: dict[str, float] | None = None) -> None:
        self.node = node
        self.req = req
        self.devices = devices
        self.score = score  # (-weighted sum, node): smallest first
        self.filter = filter
        self.detail = detail
        self.parts = parts or {}  # score plugin -> its score in [0, 1]

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


class Topology:
    """Which jobs run in which topology domain (a node, or the nodes sharing a label value), for the
    inter-job affinity filters; jobs placed earlier in the same decision count."""

    def __init__(self, cluster: Cluster, specs: dict[str, c.JobSpec]) -> None:
        self.cluster = cluster
        self.on_node: dict[str, list[c.JobSpec]] = {}
        for name in sorted(cluster.nodes):
            node = cluster.nodes[name]
            self.on_node[name] = [specs[j] for j in node.jobs if j in specs]
        self._domains: dict[str, dict[str, list[c.JobSpec]]] = {}

    def add(self, node: str, spec: c.JobSpec) -> None:
        self.on_node.setdefault(node, []).append(spec)
        self._domains.clear()

    @property
    def has_anti_affinity(self) -> bool:
        return any(s.affinity and s.affinity.job_anti_affinity for specs in self.on_node.values() for s in specs)

    def domain(self, node: str, key: str) -> str | None:
        if key == "node":
            return node
        found = self.cluster.nodes.get(node)
        return found.labels.get(key) if found is not None else None

    def members(self, key: str, value: str) -> list[c.JobSpec]:
        by_value = self._domains.get(key)
        if by_value is None:
            by_value = {}
            for name, specs in self.on_node.items():
                d = self.domain(name, key)
                if d is not None and specs:
                    by_value.setdefault(d, []).extend(specs)
            self._domains[key] = by_value
        return by_value.get(value, [])

    def anyone(self, labels: tuple[tuple[str, str], ...]) -> bool:
        return any(_matches(s.labels, labels) for specs in self.on_node.values() for s in specs)

    def anti_terms(self) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
        """(node, labels to match, topology key) of every anti-affinity term of a running job."""
        out = []
        for name, specs in self.on_node.items():
            for s in specs:
                for t in (s.affinity.job_anti_affinity if s.affinity else ()):
                    out.append((name, tuple(sorted(t.match_labels.items())), t.topology_key))
        return out


def _matches(labels: dict[str, str] | tuple[tuple[str, str], ...], wanted: tuple[tuple[str, str], ...]) -> bool:
    have = dict(labels) if isinstance(labels, tuple) else labels
    return all(have.get(k) == v for k, v in wanted)


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


def explain(filter: str, detail: tuple[object, ...], req: Request) -> str:
    """The text of a failure: what the node has against what the job needs."""
    if filter == "NodeReady":
        return f"node {detail[0]}"
    if filter == "NodeSelector":
        return f"labels do not match the node selector {detail[0]}={detail[1]}"
    if filter == "NodeAffinity":
        return f"node affinity {describe_requirement(detail[0])} not met"  # type: ignore[arg-type]
    if filter == "Taints":
        return f"taint {detail[0]} not tolerated"
    if filter == "Preemption":
        return f"held for {detail[0]}, which preempted jobs there"
    if filter == "Reservation":
        return f"reserved for account {detail[0]} ({detail[1]})"
    if filter == "JobAffinity":
        return f"no job with {detail[0]} in its {detail[1]}"
    if filter == "JobAntiAffinity":
        return f"a job with {detail[0]} runs in its {detail[1]}"
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


def _labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels) or "any labels"


def fit_node(node: Node, req: Request, overlay: Overlay, ctx: Context = DEFAULT_CONTEXT) -> Fit:
    name = node.name
    # 1. usable
    if not node.schedulable:
        return Fit(name, req, filter="NodeReady", detail=(node.status,))
    holders = ctx.held.get(name)
    if holders and ctx.job_id not in holders:
        return Fit(name, req, filter="Preemption", detail=(", ".join(sorted(holders)),))
    # 2. where it may go
    labels = node.labels
    for key, value in req.selector:
        if labels.get(key) != value:
            return Fit(name, req, filter="NodeSelector", detail=(key, value))
    for requirement in req.required:
        if not requirement_holds(labels, requirement):
            return Fit(name, req, filter="NodeAffinity", detail=(requirement,))
    if node.taints:
        bad = untolerated(req.tolerations, node.taints, ("NoSchedule", "NoExecute"))
        if bad:
            return Fit(name, req, filter="Taints", detail=(describe_taint(bad[0]),))
    for held in ctx.reservations:
        if name in held.nodes and held.excludes(ctx.account, ctx.start_ts, ctx.end_ts):
            return Fit(name, req, filter="Reservation", detail=(held.account, held.name))
    # 3. capacity in total
    gpus = node.gpus
    if req.gpus:
        matching = sum(1 for d in gpus.values() if device_matches(d, req))
        if req.gpus > matching:
            return Fit(name, req, filter="GpuCapacity", detail=(matching,))
    if req.cpus_milli > node.cpus_milli:
        return Fit(name, req, filter="CpuCapacity", detail=(node.cpus_milli,))
    if req.memory_bytes > node.memory_bytes:
        return Fit(name, req, filter="MemoryCapacity", detail=(node.memory_bytes,))
    # 4. who runs nearby
    topo = ctx.topology
    if topo is not None:
        failed = _topology_filters(topo, name, req)
        if failed is not None:
            return Fit(name, req, filter=failed[0], detail=failed[1])
    # 5. free now
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
    chosen = _choose_devices(free_matching, req.gpus) if req.gpus else []
    parts = _scores(node, req, chosen, len(free_all), free_cpus)
    w = ctx.profile.weights
    total = (w["binpack"] * parts["binpack"] + w["spread"] * parts["spread"] + w["numa"] * parts["numa"]
             + w["interconnect"] * parts["interconnect"] + w["fragmentation"] * parts["fragmentation"]
             + w["taints"] * parts["taints"] + w["node_affinity"] * parts["node_affinity"])
    devices = sorted((d.id for d in chosen), key=device_sort_key)
    return Fit(name, req, devices=devices, score=(-total, name), parts=parts)


def _topology_filters(topo: Topology, name: str, req: Request) -> tuple[str, tuple[object, ...]] | None:
    for wanted, key in req.affinity:
        domain = topo.domain(name, key)
        if domain is not None and any(_matches(s.labels, wanted) for s in topo.members(key, domain)):
            continue
        if not topo.anyone(wanted) and _matches(req.labels, wanted):
            continue  # the first of its group: nothing to be near yet
        return "JobAffinity", (_labels_text(wanted), key)
    for wanted, key in req.anti_affinity:
        domain = topo.domain(name, key)
        if domain is not None and any(_matches(s.labels, wanted) for s in topo.members(key, domain)):
            return "JobAntiAffinity", (_labels_text(wanted), key)
    for other, wanted, key in topo.anti_terms():
        if _matches(req.labels, wanted):
            mine, theirs = topo.domain(name, key), topo.domain(other, key)
            if mine is not None and mine == theirs:
                return "JobAntiAffinity", (_labels_text(wanted), key)
    return None


def _scores(node: Node, req: Request, chosen: list[c.GpuDevice], free_gpus: int, free_cpus: int) -> dict[str, float]:
    total_gpus = len(node.gpus)
    gpus_after = free_gpus - req.gpus
    cpus_after = free_cpus - req.cpus_milli
    if req.gpus:
        binpack = (total_gpus - gpus_after) / total_gpus
    else:
        binpack = (node.cpus_milli - cpus_after) / node.cpus_milli if node.cpus_milli else 1.0
    idle = free_gpus == total_gpus and free_cpus == node.cpus_milli
    fills = gpus_after == 0 if total_gpus else cpus_after == 0
    fragmentation = 1.0 - (0.5 if idle and not fills else 0.0) - (0.5 if not req.gpus and gpus_after > 0 else 0.0)
    single = len(chosen) <= 1
    numa = 1.0 if single or len({d.numa_node for d in chosen}) == 1 else 0.0
    links = {d.interconnect for d in chosen}
    interconnect = 1.0 if single or (len(links) == 1 and "" not in links) else 0.0
    taints = 0.0 if node.taints and untolerated(req.tolerations, node.taints, ("PreferNoSchedule",)) else 1.0
    if req.preferred:
        node_affinity = sum(1 for r in req.preferred if requirement_holds(node.labels, r)) / len(req.preferred)
    else:
        node_affinity = 1.0
    return {"binpack": binpack, "spread": 1.0 - binpack, "numa": numa, "interconnect": interconnect,
            "fragmentation": fragmentation, "taints": taints, "node_affinity": node_affinity}


def _choose_devices(free: list[c.GpuDevice], count: int) -> list[c.GpuDevice]:
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
