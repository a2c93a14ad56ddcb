"""Every ``NoSchedule``/``NoExecute`` taint of the node is tolerated by the job (``Taints``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.cluster import Request
from services.domain.taints import taint_text, untolerated

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where


class Taints:
    name = "Taints"
    never = True

    def relevant(self, req: Request, ctx: Where) -> bool:
        return True  # depends on the node

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        node = cyc.node
        if node.taints:
            bad = untolerated(cyc.req.tolerations, node.taints, ("NoSchedule", "NoExecute"))
            if bad:
                return (taint_text(bad[0]),)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"taint {detail[0]} not tolerated"
