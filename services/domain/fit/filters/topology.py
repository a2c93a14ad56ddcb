"""Inter-job affinity in a topology domain (the node, or the nodes sharing a label such as ``rack``):
``JobAffinity`` wants a running job matching each term there (the first job of a group that matches
its own term passes); ``JobAntiAffinity`` wants none, and no running job whose own anti-affinity term
matches this job there (symmetric). Both pass when the decision tracks no topology."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.cluster import Request
from services.domain.fit.topology import labels_match, labels_text

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where


class JobAffinity:
    name = "JobAffinity"
    never = False

    def relevant(self, req: Request, ctx: Where) -> bool:
        return ctx.topology is not None and bool(req.affinity)

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        topo = cyc.ctx.topology
        if topo is None:
            return None
        req, name = cyc.req, cyc.node.name
        for wanted, key in req.affinity:
            domain = topo.domain(name, key)
            if domain is not None and any(labels_match(s.labels, wanted) for s in topo.members(key, domain)):
                continue
            if not topo.anyone(wanted) and labels_match(req.labels, wanted):
                continue  # the first of its group: nothing to be near yet
            return (labels_text(wanted), key)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"no job with {detail[0]} in its {detail[1]}"


class JobAntiAffinity:
    name = "JobAntiAffinity"
    never = False

    def relevant(self, req: Request, ctx: Where) -> bool:
        return ctx.topology is not None

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        topo = cyc.ctx.topology
        if topo is None:
            return None
        req, name = cyc.req, cyc.node.name
        for wanted, key in req.anti_affinity:
            domain = topo.domain(name, key)
            if domain is not None and any(labels_match(s.labels, wanted) for s in topo.members(key, domain)):
                return (labels_text(wanted), key)
        for other, wanted, key in topo.anti_terms():
            if labels_match(req.labels, wanted):
                mine, theirs = topo.domain(name, key), topo.domain(other, key)
                if mine is not None and mine == theirs:
                    return (labels_text(wanted), key)
        return None

    def explain(self, detail: tuple[object, ...], req: Request) -> str:
        return f"a job with {detail[0]} runs in its {detail[1]}"
