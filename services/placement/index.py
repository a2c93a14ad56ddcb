"""The node index: placement asks one node per *kind of node*, not every node per job.

Two nodes of the same backend (``Node.backend``: a gang never spans two, ``place.py``) with the same
hardware (CPUs, memory, GPU devices with their ids,
models, memory, NUMA and interconnect layout and health, overcommit ratios), the same labels and taints,
the same advance reservations, the same partitions and the same free resources right now (free
CPUs, free memory, the same set of free device ids) and the same state
(ready, cordoned, ...) answer every request identically: same fit, same
devices, same score except the node name that breaks ties. (A request with
inter-job affinity, or any request while some running job has an
anti-affinity term, depends on which jobs run where: it is evaluated node by
node; a request naming nodes, by ``--nodelist`` or ``--exclude``, is answered
per group once for its named members and once for the others.) The index keeps
nodes grouped by that signature, so ``place`` evaluates a node's fit once per
group, and a cluster of 1,000 identical 8-GPU nodes is a handful of groups
(the idle ones, and one per distinct fill level) instead of 1,000 scans.

Groups change as a decision places jobs: ``moved(node)`` re-files a node
after the overlay took resources on it. Choosing the best nodes merges the
fitting groups in (score, name) order, which is exactly the order a full
scan would sort by, so the index changes speed, never decisions (the tests
compare both on random clusters).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator

from services.domain.fit.context import Context, DEFAULT_CONTEXT
from services.domain.fit.cycle import Overlay
from services.domain.fit.node import Fit, Fitter
from services.domain.cluster import Cluster, Node, Request

__all__ = ["NodeIndex"]


def _hardware(node: Node, held: frozenset[str]) -> tuple[object, ...]:
    kind = node.kind
    if kind is None:  # computed once per node (and again when its taints, datasets or overcommit change)
        devices = tuple(sorted((d.id, d.type, d.variant, d.memory_bytes, d.numa_node, d.interconnect, d.health)
                               for d in node.gpus.values()))
        labels = tuple(sorted(node.labels.items()))
        taints = tuple(sorted((t.key, t.value, t.effect) for t in node.taints))
        node.kind = kind = (node.cpus_milli, node.memory_bytes, devices, labels, taints, tuple(sorted(node.datasets)),
                            node.cpu_overcommit, node.memory_overcommit, node.backend)
    return (kind, held) if held else kind


class NodeIndex:
    def __init__(self, cluster: Cluster, overlay: Overlay, ctx: Context = DEFAULT_CONTEXT) -> None:
        self.cluster = cluster
        self.overlay = overlay
        self.ctx = ctx
        held_by: dict[str, set[str]] = {}
        for r in ctx.reservations:
            for name in r.nodes:
                held_by.setdefault(name, set()).add(r.name)
        for name, preemptors in ctx.held.items():
            held_by.setdefault(name, set()).update(f"preemption:{p}" for p in preemptors)
        for name, partitions in ctx.memberships.items():  # a partition's job tells its nodes apart
            held_by.setdefault(name, set()).update(f"partition:{p}" for p in partitions)
        self._hardware: dict[str, tuple[object, ...]] = {}
        self._key_of: dict[str, tuple[object, ...]] = {}
        self.groups: dict[tuple[object, ...], list[str]] = {}  # key -> node names, sorted
        for name in sorted(cluster.nodes):
            node = cluster.nodes[name]
            if node.removed:
                continue
            self._hardware[name] = _hardware(node, frozenset(held_by.get(name, ())))
            key = self._key(node)
            self._key_of[name] = key
            self.groups.setdefault(key, []).append(name)

    def _key(self, node: Node) -> tuple[object, ...]:
        name = node.name
        o = self.overlay
        taken = o.devices.get(name, ())
        freed = o.freed.get(name, ())
        used = node.used_devices
        free = frozenset(d for d in node.gpus if (d not in used or d in freed) and d not in taken)
        if node.foreign is not None:
            free -= node.foreign_devices
        return (
            self._hardware[name],
            node.schedulable,
            node.status if not node.schedulable else "",
            node.free_cpus_milli - o.cpus_milli.get(name, 0),
            node.free_memory_bytes - o.memory_bytes.get(name, 0),
            free,
        )

    def moved(self, name: str) -> None:
        """Re-file ``name`` after the overlay changed what is free on it."""
        old = self._key_of.get(name)
        if old is None:
            return
        new = self._key(self.cluster.nodes[name])
        if new == old:
            return
        members = self.groups[old]
        members.pop(bisect.bisect_left(members, name))
        if not members:
            del self.groups[old]
        bisect.insort(self.groups.setdefault(new, []), name)
        self._key_of[name] = new

    def evaluate(self, req: Request, ctx: Context | None = None) -> Iterator[tuple[Fit, list[str]]]:
        """One ``Fit`` per group (computed on its first node), with the group's nodes; node by node
        when the answer depends on the jobs around each node."""
        ctx = ctx or self.ctx
        topo = ctx.topology
        one_by_one = topo is not None and (req.topological or topo.has_anti_affinity)
        fit = Fitter(req, ctx)
        for members in self.groups.values():
            if one_by_one:
                for name in members:
                    yield fit(self.cluster.nodes[name], self.overlay), [name]
            elif req.named:
                # A node list or exclusions tell nodes of one kind apart by name: one fit for the
                # named ones of the group, one for the others (each computed on its first node).
                allowed = [n for n in members if (not req.nodelist or n in req.nodelist) and n not in req.exclude]
                others = [n for n in members if n not in allowed] if len(allowed) < len(members) else []
                for part in (allowed, others):
                    if part:
                        yield fit(self.cluster.nodes[part[0]], self.overlay), part
            else:
                yield fit(self.cluster.nodes[members[0]], self.overlay), members

    @staticmethod
    def best(fitting: list[tuple[Fit, list[str]]], count: int) -> list[tuple[str, Fit]]:
        """The ``count`` best nodes by (score, name) across fitting groups, with their group's fit."""
        streams = [((fit.score[:-1], name), name, fit) for fit, members in fitting for name in members[:count]]
        return [(name, fit) for _, name, fit in heapq.nsmallest(count, streams, key=lambda s: s[0])]
