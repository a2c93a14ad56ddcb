"""``fragmentation``: 1, minus 1/2 if the job breaks into an idle node it does not fill, minus 1/2 if a
CPU-only job lands on a node with free GPUs (keeps them for GPU work). Weight 5."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle


class Fragmentation:
    name = "fragmentation"
    default_weight = 5.0

    def score(self, cyc: Cycle) -> float:
        node, req = cyc.node, cyc.req
        total_gpus = len(node.gpus) - node.unhealthy_gpus
        free_gpus = len(cyc.free_all)
        gpus_after = free_gpus - req.gpus
        cpus_after = cyc.free_cpus - req.cpus_milli
        idle = free_gpus == total_gpus and cyc.free_cpus == cyc.cpu_room  # (x overcommit when not guaranteed)
        fills = gpus_after == 0 if total_gpus else cpus_after == 0
        return 1.0 - (0.5 if idle and not fills else 0.0) - (0.5 if not req.gpus and gpus_after > 0 else 0.0)
