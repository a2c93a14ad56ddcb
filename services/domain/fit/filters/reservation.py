"""Advance reservations (``Reservation``): a window held for another account keeps the job off the
node unless it would end, by its time limit, before the window opens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.cluster import Request
from services.domain.timestamps import when

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where


class Reservation:
    name = "Reservation"
    never = False

    def relevant(self, req: Request, ctx: Where) -> bool:
        return bool(ctx.reservations)

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        ctx = cyc.ctx
        name = cyc.node.name
        for held in ctx.reservations:
            if name in held.nodes and held.excludes(ctx.account, ctx.start_ts, ctx.end_ts):
                return (held.account, held.name, held.start_ts, held.end_ts)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        # the window, so that a person sees when it opens and when it is over
        return f"reserved for account {detail[0]} ({detail[1]}) from {when(detail[2])} to {when(detail[3])}"
