"""Soft preferences: ``taints`` is 1 unless the node has a ``PreferNoSchedule`` taint the job does not
tolerate (weight 20: stay off such nodes unless nothing else fits); ``node_affinity`` is the fraction
of the job's preferred node requirements the node meets (weight 5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.fit.filters.labels import requirement_holds
from services.domain.taints import untolerated

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle


class PreferNoScheduleTaints:
    name = "taints"
    default_weight = 20.0

    def score(self, cyc: Cycle) -> float:
        node = cyc.node
        return 0.0 if node.taints and untolerated(cyc.req.tolerations, node.taints, ("PreferNoSchedule",)) else 1.0


class PreferredNodeAffinity:
    name = "node_affinity"
    default_weight = 5.0

    def score(self, cyc: Cycle) -> float:
        preferred = cyc.req.preferred
        if not preferred:
            return 1.0
        return sum(1 for r in preferred if requirement_holds(cyc.node.labels, r)) / len(preferred)
