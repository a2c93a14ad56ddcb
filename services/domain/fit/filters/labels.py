"""Where a job may go by the node's labels: its node selector (``NodeSelector``) and its required node
affinity (``NodeAffinity``: In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from services.domain.cluster import Request, Requirement

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where

__all__ = ["NodeSelector", "NodeAffinity", "requirement_holds", "describe_requirement"]


def requirement_holds(labels: Mapping[str, str], req: Requirement) -> bool:
    key, op, values = req
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            a, b = float(value), float(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def describe_requirement(req: Requirement) -> str:
    key, op, values = req
    return f"{key} {op} [{', '.join(values)}]" if values else f"{key} {op}"


class NodeSelector:
    name = "NodeSelector"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return bool(req.selector)

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        labels = cyc.node.labels
        for key, value in cyc.req.selector:
            if labels.get(key) != value:
                return (key, value)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"labels do not match the node selector {detail[0]}={detail[1]}"


class NodeAffinity:
    name = "NodeAffinity"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return bool(req.required)

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        labels = cyc.node.labels
        for requirement in cyc.req.required:
            if not requirement_holds(labels, requirement):
                return (requirement,)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"node affinity {describe_requirement(detail[0])} not met"  # type: ignore[arg-type]
