"""Partitions (``Partition``): a job runs only on the nodes of its partition, and not while the
partition is down (``services/domain/partitions.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.cluster import Request

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where


class Partition:
    name = "Partition"
    never = True  # only an operator's configuration or the nodes changing can change it

    def relevant(self, req: Request, ctx: Where) -> bool:
        return ctx.partition is not None

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        part = cyc.ctx.partition
        if part is None:  # a job of no partition may use any node
            return None
        if not part.exists:
            return ("removed", part.name)
        if cyc.node.name not in part.nodes:
            return ("outside", part.name)
        if part.state == "down":
            return ("down", part.name)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        what, name = detail
        if what == "outside":
            return f"not in partition {name}"
        if what == "down":
            return f"partition {name} is down"
        return f"partition {name} is not defined (removed since the job was accepted)"
