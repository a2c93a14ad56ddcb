"""One job's placement: the best nodes for it now, or why it cannot run (the reasons per node group). Pure.

``place_job`` runs the filter plugins of the job's profile on every kind of node (``NodeIndex``)
against the ledger plus what this decision has already placed (the ``Overlay``), and scores the
nodes that pass (``services/domain/fit/``). If enough nodes fit (all of a multi-node gang, as
many as fit of an elastic one but at least its ``min_nodes``, or none), it takes the best-scoring
ones: a gang inside one interconnect domain (a node label of ``TOPOLOGY_LABELS``: NVLink domain,
then rack) when one has room.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from events import catalogue as c
from services.domain.cluster import Cluster, Request
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.features import formula_text
from services.domain.fit.filters.slurm import constraint_of
from services.domain.fit.framework import NEVER_FILTERS, explain
from services.domain.fit.node import Fit
from services.domain.fit.profile import TOPOLOGY_LABELS
from services.placement.index import NodeIndex

__all__ = ["Placed", "place_job", "gang_nodes", "best_nodes"]


@dataclass
class Placed:
    allocations: list[c.NodeAllocation] | None
    reasons: list[c.BlockReason] = field(default_factory=list)
    fits_nowhere: bool = False


def place_job(cluster: Cluster, req: Request, overlay: Overlay, index: NodeIndex | None = None,
              ctx: Context | None = None) -> Placed:
    """Allocations for one job on the best nodes, or the reasons per node group.

    With an ``index`` (built on the same overlay), nodes are evaluated once per
    kind; without one, one by one. Both give the same answer.
    """
    ctx = ctx or Context()
    if index is None:
        index = NodeIndex(cluster, overlay, ctx)
    if req.nodes > 1 and req.constraint and constraint_of(req.constraint).matching:
        return _place_matching(cluster, req, overlay, index, ctx)
    fitting: list[tuple[Fit, list[str]]] = []
    failures: dict[tuple[str, tuple[object, ...]], int] = {}
    usable = 0
    for fit, members in index.evaluate(req, ctx):
        if fit.devices is not None:
            fitting.append((fit, members))
        else:
            key = (fit.filter, fit.detail)
            failures[key] = failures.get(key, 0) + len(members)
        if fit.filter not in NEVER_FILTERS:
            usable += len(members)  # these nodes could hold the job if they were empty (and ready)
    fit_count = sum(len(m) for _, m in fitting)
    if fit_count >= req.nodes:
        return Placed([fit.allocation_on(name) for name, fit in best_nodes(cluster, fitting, req.nodes)])
    need = req.min_nodes or req.nodes  # an elastic gang starts at the largest size that fits, its least at worst
    if fit_count >= need:
        return Placed([fit.allocation_on(name) for name, fit in best_nodes(cluster, fitting, fit_count)])
    grouped: dict[tuple[str, str], int] = {}
    for (flt, detail), count in failures.items():
        key = (flt, explain(flt, detail, req))
        grouped[key] = grouped.get(key, 0) + count
    reasons = [c.BlockReason(reason=reason, nodes=count, filter=flt) for (flt, reason), count in sorted(grouped.items())]
    if req.nodes > 1 and fit_count:
        reasons.append(c.BlockReason(
            reason=f"only {fit_count} of the {need} nodes the gang needs at least fit" if req.min_nodes else
                   f"only {fit_count} of the {req.nodes} nodes the gang needs fit", nodes=fit_count, filter="Gang"))
    if not reasons:
        reasons.append(c.BlockReason(reason="no nodes registered", nodes=0, filter="NodeReady"))
    return Placed(None, reasons, fits_nowhere=usable < need)



def _place_matching(cluster: Cluster, req: Request, overlay: Overlay, index: NodeIndex, ctx: Context) -> Placed:
    """A gang whose constraint has ``[a|b]``: all its nodes take one alternative, the first (in the
    order written) that places it now; else the reasons of the first alternative."""
    tried: list[Placed] = []
    for alternative in constraint_of(req.constraint).alternatives:
        placed = place_job(cluster, dataclasses.replace(req, constraint=formula_text(alternative)), overlay, index,
                           ctx)
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
    """The ``count`` nodes a job takes among ``fitting``: a gang's (``gang_nodes``) or the single best."""
    return gang_nodes(cluster, fitting, count) if count > 1 else NodeIndex.best(fitting, 1)
