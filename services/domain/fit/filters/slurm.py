"""Slurm's directives as filters: node features (``Constraint``, ``--constraint``), named nodes
(``NodeName``, ``--nodelist`` / ``--exclude``) and whole nodes (``Exclusive``, ``--exclusive``).

A node's features are its GPU models, the names in its ``features`` label and its labels set to
``true`` (``services/domain/features.py``). ``Constraint`` lets a node pass when it satisfies any
alternative of the expression; that all nodes of a gang take the same alternative of a ``[a|b]``
is the placement's part (``services/placement/place.py``), which places the gang once per
alternative. ``Exclusive`` wants a node nothing runs on; the fit then gives the job all of the
node's CPUs and GPUs (``services/domain/fit/node.py``), so nothing else fits beside it while it
runs, as Slurm allocates an exclusive job.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from services.domain.cluster import Node, Request
from services.domain.features import Constraint as Parsed
from services.domain.features import describe, holds, node_features, parse_constraint

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where

__all__ = ["Constraint", "NodeName", "Exclusive", "constraint_of", "features_of"]


@lru_cache(maxsize=4096)
def constraint_of(text: str) -> Parsed:
    """The parsed expression (submission accepted it, so it parses)."""
    return parse_constraint(text)


def features_of(node: Node) -> frozenset[str]:
    return _features(tuple(sorted(node.labels.items())), tuple(sorted({(d.type, d.variant or "")
                                                                          for d in node.gpus.values()})))


@lru_cache(maxsize=4096)
def _features(labels: tuple[tuple[str, str], ...], models: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return node_features(dict(labels), [(t, v or None) for t, v in models])


class Constraint:
    name = "Constraint"
    never = True  # a node's features change only when it registers again

    def relevant(self, req: Request, ctx: Where) -> bool:
        return bool(req.constraint)

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        if not cyc.req.constraint or holds(constraint_of(cyc.req.constraint).any_of, features_of(cyc.node)):
            return None
        return ()

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"does not have the features {describe(constraint_of(req.constraint).any_of)} (--constraint)"


class NodeName:
    name = "NodeName"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return req.named

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        name, req = cyc.node.name, cyc.req
        if req.nodelist and name not in req.nodelist:
            return ("unlisted",)
        if name in req.exclude:
            return ("excluded",)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return "not in the job's node list (--nodelist)" if detail[0] == "unlisted" else "excluded (--exclude)"


class Exclusive:
    name = "Exclusive"
    never = False  # the jobs on it end

    def relevant(self, req: Request, ctx: Where) -> bool:
        return req.exclusive

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        # Every allocation holds CPUs (submission refuses a job of none), so a node whose CPUs are
        # all free, by the ledger, the decision's overlay and its backend's own work, has nothing on it.
        node = cyc.node
        held = node.used_cpus_milli + node.foreign_cpus_milli + cyc.overlay.cpus_milli.get(node.name, 0)
        if cyc.req.exclusive and held > 0:
            return ()
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return "other jobs run there (--exclusive needs an empty node)"
