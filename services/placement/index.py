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

**Kept across decisions.** Building the index walks every node (77.7 ms for 12,500 idle nodes), so
placement keeps one (``PlacementState.index``, derived state: never in a snapshot, built again at
the first decision after a restore) and files again only what changed: the fold ``touch``es the
nodes an event changes (the node an event names; the nodes of an allocation taken, given back or
changed), ``begin`` files them again for the next decision (and the nodes whose advance
reservations, held room or partitions changed), and ``end`` puts back the nodes the decision's
overlay moved. The groups are then those a fresh build would make (each group's nodes sorted; the
order of the groups themselves differs, and nothing reads it: every choice is by (score, name)),
so a cycle costs what changed, not the size of the cluster.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator

from services.domain.fit.context import Context, DEFAULT_CONTEXT
from services.domain.fit.cycle import Overlay
from services.domain.fit.node import Fit, Fitter
from services.domain.cluster import Cluster, Node, Request

__all__ = ["NodeIndex", "held_by"]


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


_NO_HOLDS: frozenset[str] = frozenset()


def held_by(ctx: Context) -> dict[str, frozenset[str]]:
    """Node -> what sets it apart in ``ctx``: the advance reservations naming it, the preemptors its
    room is held for, the partitions it is in (a partition's job tells its nodes apart)."""
    out: dict[str, set[str]] = {}
    for r in ctx.reservations:
        for name in r.nodes:
            out.setdefault(name, set()).add(r.name)
    for name, preemptors in ctx.held.items():
        out.setdefault(name, set()).update(f"preemption:{p}" for p in preemptors)
    for name, partitions in ctx.memberships.items():
        out.setdefault(name, set()).update(f"partition:{p}" for p in partitions)
    return {name: frozenset(tags) for name, tags in out.items()}


def _basis(ctx: Context) -> tuple[object, ...]:
    """What ``held_by`` reads of a context (the held room copied: the fold changes it in place)."""
    return ctx.reservations, dict(ctx.held), ctx.memberships


class NodeIndex:
    def __init__(self, cluster: Cluster, overlay: Overlay, ctx: Context = DEFAULT_CONTEXT) -> None:
        self.cluster = cluster
        self.overlay = overlay
        self.ctx = ctx
        self._basis = _basis(ctx)
        self._held = held_by(ctx)
        self._hardware: dict[str, tuple[object, ...]] = {}
        self._key_of: dict[str, tuple[object, ...]] = {}
        self.groups: dict[tuple[object, ...], list[str]] = {}  # key -> node names, sorted
        self.dirty: set[str] = set()  # nodes the fold changed since the last ``begin``
        self._moved: set[str] = set()  # nodes the current decision's overlay moved (``end`` files them back)
        for name in sorted(cluster.nodes):
            node = cluster.nodes[name]
            if node.removed:
                continue
            self._hardware[name] = _hardware(node, self._held.get(name, _NO_HOLDS))
            key = self._key(node)
            self._key_of[name] = key
            self.groups.setdefault(key, []).append(name)

    # -------------------------------------------------------------- kept across decisions

    def touch(self, name: str) -> None:
        """The fold changed node ``name`` (its state, hardware or ledger): file it again at ``begin``."""
        self.dirty.add(name)

    def begin(self, overlay: Overlay, ctx: Context) -> NodeIndex:
        """Ready for a decision on ``overlay`` (empty) in ``ctx``: every node changed since the last one
        filed again, as a fresh build would file it."""
        self.end()
        self.overlay, self.ctx = overlay, ctx
        basis = _basis(ctx)
        if basis != self._basis:
            held = held_by(ctx)
            self.dirty.update(n for n in held.keys() | self._held.keys() if held.get(n) != self._held.get(n))
            self._held, self._basis = held, basis
        for name in self.dirty:
            self._refile(name, hardware=True)
        self.dirty.clear()
        return self

    def end(self) -> None:
        """The decision is over: its overlay is dropped and the nodes it moved are filed as the ledger has them."""
        self.overlay = Overlay()
        for name in self._moved:
            self._refile(name)
        self._moved.clear()

    def _refile(self, name: str, hardware: bool = False) -> None:
        node = self.cluster.nodes.get(name)
        old = self._key_of.get(name)
        if node is None or node.removed:
            if old is not None:
                self._unfile(name, old)
                del self._key_of[name], self._hardware[name]
            return
        if hardware or old is None:
            self._hardware[name] = _hardware(node, self._held.get(name, _NO_HOLDS))
        new = self._key(node)
        if new == old:
            return
        if old is not None:
            self._unfile(name, old)
        bisect.insort(self.groups.setdefault(new, []), name)
        self._key_of[name] = new

    def _unfile(self, name: str, key: tuple[object, ...]) -> None:
        members = self.groups[key]
        members.pop(bisect.bisect_left(members, name))
        if not members:
            del self.groups[key]

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
        if name not in self._key_of:
            return
        self._moved.add(name)
        self._refile(name)

    def evaluate(self, req: Request, ctx: Context | None = None,
                 memo: dict[Request, dict[tuple[object, ...], Fit]] | None = None) -> Iterator[tuple[Fit, list[str]]]:
        """One ``Fit`` per group (computed on its first node), with the group's nodes; node by node
        when the answer depends on the jobs around each node.

        ``memo``: the fits of earlier jobs of this decision by request and group key, for a caller
        whose contexts tell no two jobs of one request apart (no advance reservation, held room or
        inter-job affinity: the conditions of ``core._Cycle.unfit``). A group's key is everything its
        nodes answer by but their names, so a request's fit on a key is the same whichever job asks
        and whichever node of the group it is computed on (the scores the index ranks by leave the
        name out; every allocation is made on the node chosen)."""
        ctx = ctx or self.ctx
        topo = ctx.topology
        one_by_one = topo is not None and (req.topological or topo.has_anti_affinity)
        if memo is not None and not one_by_one and not req.named:
            known = memo.setdefault(req, {})
            fitter = None  # made only if some kind of node is new to this request
            for key, members in self.groups.items():
                found = known.get(key)
                if found is None:
                    fitter = fitter or Fitter(req, ctx)
                    found = known[key] = fitter(self.cluster.nodes[members[0]], self.overlay)
                yield found, members
            return
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
