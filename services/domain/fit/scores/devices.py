"""Where the chosen devices sit: ``numa`` is 1 if they share one NUMA node, ``interconnect`` 1 if
they share one interconnect (NVLink) group; both 1 for a job of at most one GPU. Weight 2 each: a
little packing is not worth splitting a job."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle


class Numa:
    name = "numa"
    default_weight = 2.0

    def score(self, cyc: Cycle) -> float:
        chosen = cyc.chosen
        return 1.0 if len(chosen) <= 1 or len({d.numa_node for d in chosen}) == 1 else 0.0


class Interconnect:
    name = "interconnect"
    default_weight = 2.0

    def score(self, cyc: Cycle) -> float:
        chosen = cyc.chosen
        if len(chosen) <= 1:
            return 1.0
        links = {d.interconnect for d in chosen}
        return 1.0 if len(links) == 1 and "" not in links else 0.0
