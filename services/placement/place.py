"""One job's placement: the best nodes for it now, or why it cannot run (the reasons per node group). Pure.

``place_job`` runs the filter plugins of the job's profile on every kind of node (``NodeIndex``)
against the ledger plus what this decision has already placed (the ``Overlay``), and scores the
nodes that pass (``services/domain/fit/``). If enough nodes fit (all of a multi-node gang, as
many as fit of an elastic one but at least its ``min_nodes``, or none), it takes the best-scoring
ones: a gang inside one interconnect domain (a node label of ``TOPOLOGY_LABELS``: NVLink domain,
then rack) when one has room.

**A gang never spans two backends.** Horizon may take its nodes from several backends at once (its
own agents, a Slurm partition, a Kubernetes cluster: ``Node.backend``); each runs its own share of
a job, and none can run a job with another's nodes (a Slurm job on an agent's node, one pod's
world across two clusters). So a multi-node job takes all its nodes from one backend: the backend
that holds the most of them (all of a gang; of an elastic gang, the largest size that fits there),
then the best summed score of the nodes it would take, then the backend's name. With every node of
one backend, this is the choice it always was. A gang that fits on no backend alone waits, and says
so (``Gang``: how many fit on each); one that no backend could ever hold is ``fits_nowhere``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from events import catalogue as c
from services.domain.cluster import Cluster, Node, Request
from services.domain.cluster import backend_name as cluster_backend_name
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.features import formula_text
from services.domain.fit.filters.slurm import constraint_of
from services.domain.fit.framework import NEVER_FILTERS, explain
from services.domain.fit.node import Fit
from services.domain.fit.profile import TOPOLOGY_LABELS
from services.placement.index import NodeIndex

__all__ = ["Placed", "place_job", "gang_nodes", "best_nodes", "backend_name", "by_backend", "holds_gang",
           "gang_names"]


@dataclass
class Placed:
    allocations: list[c.NodeAllocation] | None
    reasons: list[c.BlockReason] = field(default_factory=list)
    fits_nowhere: bool = False


def place_job(cluster: Cluster, req: Request, overlay: Overlay, index: NodeIndex | None = None,
              ctx: Context | None = None, memo: dict[Request, dict[tuple[object, ...], Fit]] | None = None) -> Placed:
    """Allocations for one job on the best nodes, or the reasons per node group.

    With an ``index`` (built on the same overlay), nodes are evaluated once per
    kind; without one, one by one. Both give the same answer. ``memo``: the
    decision's fits per request and kind of node (``NodeIndex.evaluate``).
    """
    ctx = ctx or Context()
    if index is None:
        index = NodeIndex(cluster, overlay, ctx)
    if req.nodes > 1 and req.constraint and constraint_of(req.constraint).matching:
        return _place_matching(cluster, req, overlay, index, ctx, memo)
    fitting: list[tuple[Fit, list[str]]] = []
    failures: dict[tuple[str, tuple[object, ...]], int] = {}
    usable: dict[str, int] = {}  # backend -> its nodes that could hold the job if they were empty (and ready)
    for fit, members in index.evaluate(req, ctx, memo):
        if fit.devices is not None:
            fitting.append((fit, members))
        else:
            key = (fit.filter, fit.detail)
            failures[key] = failures.get(key, 0) + len(members)
        if fit.filter not in NEVER_FILTERS:
            for backend, names in _split(cluster, members):
                usable[backend] = usable.get(backend, 0) + len(names)
    need = req.min_nodes or req.nodes  # an elastic gang starts at the largest size that fits, its least at worst
    chosen = _take(cluster, fitting, req.nodes, need)
    if chosen is not None:
        return Placed([fit.allocation_on(name) for name, fit in chosen])
    fit_count = sum(len(m) for _, m in fitting)
    grouped: dict[tuple[str, str], int] = {}
    for (flt, detail), count in failures.items():
        key = (flt, explain(flt, detail, req))
        grouped[key] = grouped.get(key, 0) + count
    reasons = [c.BlockReason(reason=reason, nodes=count, filter=flt) for (flt, reason), count in sorted(grouped.items())]
    apart = req.nodes > 1 and len(usable) > 1 and max(usable.values()) < need <= sum(usable.values())
    if req.nodes > 1 and (fit_count >= need or apart):
        reasons.append(_apart(cluster, fitting, usable, need, fit_count >= need))
    elif req.nodes > 1 and fit_count:
        reasons.append(c.BlockReason(
            reason=f"only {fit_count} of the {need} nodes the gang needs at least fit" if req.min_nodes else
                   f"only {fit_count} of the {req.nodes} nodes the gang needs fit", nodes=fit_count, filter="Gang"))
    if not reasons:
        reasons.append(c.BlockReason(reason="no nodes registered", nodes=0, filter="NodeReady"))
    return Placed(None, reasons, fits_nowhere=max(usable.values(), default=0) < need)


def _apart(cluster: Cluster, fitting: list[tuple[Fit, list[str]]], usable: dict[str, int], need: int,
           now: bool) -> c.BlockReason:
    """Why a gang waits whose nodes are there, but not on one backend: enough fit now (``now``), or
    enough could hold it once empty, each count per backend."""
    if now:
        counts = {b: sum(len(m) for _, m in group) for b, group in by_backend(cluster, fitting).items()}
        what = "fit now"
    else:
        counts, what = usable, "could ever hold it"
    each = ", ".join(f"{counts.get(b, 0)} on {b}" for b in sorted(usable.keys() | counts.keys()))
    return c.BlockReason(reason=f"the gang needs {need} nodes of one backend and a gang never spans two: of the nodes "
                                f"that {what}, {each}", nodes=sum(counts.values()), filter="Gang")


def _place_matching(cluster: Cluster, req: Request, overlay: Overlay, index: NodeIndex, ctx: Context,
                    memo: dict[Request, dict[tuple[object, ...], Fit]] | None) -> Placed:
    """A gang whose constraint has ``[a|b]``: all its nodes take one alternative, the first (in the
    order written) that places it now; else the reasons of the first alternative."""
    tried: list[Placed] = []
    for alternative in constraint_of(req.constraint).alternatives:
        placed = place_job(cluster, dataclasses.replace(req, constraint=formula_text(alternative)), overlay, index,
                           ctx, memo)
        if placed.allocations is not None:
            return placed
        tried.append(placed)
    return Placed(None, tried[0].reasons, fits_nowhere=all(p.fits_nowhere for p in tried))


def gang_nodes(cluster: Cluster, fitting: list[tuple[Fit, list[str]]], count: int) -> list[tuple[str, Fit]]:
    """A gang's nodes: the best ``count`` inside one interconnect domain when one has room (the
    finest label of ``TOPOLOGY_LABELS`` first; among domains, the best summed score, then the
    name), else the best ``count`` anywhere."""
    every = [(fit.score[:-1], name, fit) for fit, members in fitting for name in members]
    every.sort(key=lambda e: (e[0], e[1]))
    for label in TOPOLOGY_LABELS:
        domains: dict[str, list[tuple[tuple[object, ...], str, Fit]]] = {}
        for entry in every:
            value = cluster.nodes[entry[1]].labels.get(label)
            if value is not None:
                domains.setdefault(value, []).append(entry)
        options = []
        for value, entries in domains.items():
            if len(entries) >= count:
                best = entries[:count]
                options.append((sum(e[0][0] for e in best), value, best))  # type: ignore[misc]
        if options:
            _, _, best = min(options, key=lambda o: (o[0], o[1]))
            return [(name, fit) for _, name, fit in best]
    return [(name, fit) for _, name, fit in every[:count]]


def best_nodes(cluster: Cluster, fitting: list[tuple[Fit, list[str]]], count: int) -> list[tuple[str, Fit]]:
    """The ``count`` nodes a job takes among ``fitting``: a gang's (``gang_nodes``, within one backend; none
    if no backend has ``count``) or the single best."""
    return (_take(cluster, fitting, count, count) or []) if count > 1 else NodeIndex.best(fitting, 1)


def backend_name(node: Node) -> str:
    """The backend that offers a node, by name ("agent": Horizon's own node agent)."""
    return cluster_backend_name(node.backend)


def _split(cluster: Cluster, members: list[str]) -> list[tuple[str, list[str]]]:
    """``members`` by backend, in order.

    Every list placement passes here is a group of the node index or a part of one, and the index
    keys its groups by the node's backend among the rest of its hardware (``index._hardware``): one
    part, the first node's backend, without asking every member. Asking every member cost each
    candidate a walk of every node of the cluster (12,500 nodes: ~6 ms a job, 160 jobs/s). A list
    whose first and last nodes' backends differ is split node by node."""
    if not members:
        return []
    first = backend_name(cluster.nodes[members[0]])
    if len(members) == 1 or backend_name(cluster.nodes[members[-1]]) == first:
        return [(first, members)]
    parts: dict[str, list[str]] = {}
    for name in members:
        parts.setdefault(backend_name(cluster.nodes[name]), []).append(name)
    return sorted(parts.items())


def by_backend(cluster: Cluster, fitting: list[tuple[Fit, list[str]]]) -> dict[str, list[tuple[Fit, list[str]]]]:
    """The fitting groups of each backend (each group's nodes in their order)."""
    out: dict[str, list[tuple[Fit, list[str]]]] = {}
    for fit, members in fitting:
        for backend, names in _split(cluster, members):
            out.setdefault(backend, []).append((fit, names))
    return out


def holds_gang(cluster: Cluster, names: set[str] | list[str], count: int) -> bool:
    """Whether ``count`` of ``names`` are of one backend (any ``count`` of one node or less)."""
    if count <= 1 or len(names) < count:
        return len(names) >= count
    counts: dict[str, int] = {}
    for name in names:  # stops at the gang's size: one backend's cluster looks at ``count`` nodes
        backend = cluster.nodes[name].backend
        counts[backend] = counts.get(backend, 0) + 1
        if counts[backend] >= count:
            return True
    return False


def gang_names(cluster: Cluster, names: set[str] | list[str], count: int) -> list[str]:
    """The first ``count`` of ``names`` by name that are of one backend (the first backend to have that
    many, in name order); of a cluster of one backend, the first ``count`` names. Fewer if none has."""
    ordered = sorted(names)
    if count <= 1:
        return ordered[:count]
    buckets: dict[str, list[str]] = {}
    for name in ordered:
        bucket = buckets.setdefault(cluster.nodes[name].backend, [])
        bucket.append(name)
        if len(bucket) == count:
            return bucket
    return ordered[:count]


def _take(cluster: Cluster, fitting: list[tuple[Fit, list[str]]], most: int,
          least: int) -> list[tuple[str, Fit]] | None:
    """The nodes a job of ``most`` nodes (at least ``least``) takes among ``fitting``, or None.

    One node: the best anywhere. A gang: within one backend, ``most`` of them if some backend has that
    many, else the most some backend has, at least ``least`` (an elastic gang). Among the backends
    that offer the largest size: the best (smallest) sum of the taken nodes' scores, then the
    backend's name. Inside the backend, ``gang_nodes`` (interconnect domains first).
    """
    if most <= 1:
        return NodeIndex.best(fitting, 1) if fitting and least <= 1 else None
    options: list[tuple[tuple[int, float, str], list[tuple[str, Fit]]]] = []
    for backend, group in by_backend(cluster, fitting).items():
        size = min(sum(len(m) for _, m in group), most)
        if size < max(least, 1):
            continue
        nodes = gang_nodes(cluster, group, size) if size > 1 else NodeIndex.best(group, 1)
        score = math.fsum(float(fit.score[0]) for _, fit in nodes)  # type: ignore[arg-type]
        options.append(((-size, score, backend), nodes))
    return min(options, key=lambda o: o[0])[1] if options else None
