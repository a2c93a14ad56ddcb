"""Is the node usable at all: ready and schedulable (``NodeReady``), and not holding room freed by a
preemption for another job (``Preemption``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.cluster import Request

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where


class NodeReady:
    name = "NodeReady"
    never = False  # a node comes back, is uncordoned

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node = cyc.node
        return None if node.schedulable else (node.status,)

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"node {detail[0]}"


class Preemption:
    name = "Preemption"
    never = False  # the preemptor starts or ends, the room is released

    def relevant(self, req: Request, ctx: Where) -> bool:
        return bool(ctx.held)

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        holders = cyc.ctx.held.get(cyc.node.name)
        if holders and cyc.ctx.job_id not in holders:
            return (", ".join(sorted(holders)),)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"held for {detail[0]}, which preempted jobs there"
