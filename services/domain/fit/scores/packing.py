"""``binpack``: the node's utilisation after placing, ``(G - g)/G`` for a GPU job (``G`` healthy GPUs,
``g`` free after), ``(C - c)/C`` otherwise (CPUs; ``C`` the CPUs its requests are packed against: the
node's, times its overcommit ratio for a job that is not guaranteed). ``spread``: ``1 - binpack``. Packing is on by default
(weight 10), spreading off (0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle


def utilisation_after(cyc: Cycle) -> float:
    node, req = cyc.node, cyc.req
    if req.gpus:
        total_gpus = len(node.gpus) - node.unhealthy_gpus
        return (total_gpus - (len(cyc.free_all) - req.gpus)) / total_gpus if total_gpus else 1.0
    cpus_after = cyc.free_cpus - req.cpus_milli
    room = cyc.cpu_room  # the node's CPUs, x its overcommit ratio for a job that is not guaranteed
    return (room - cpus_after) / room if room else 1.0


class Binpack:
    name = "binpack"
    default_weight = 10.0

    def score(self, cyc: Cycle) -> float:
        return utilisation_after(cyc)


class Spread:
    name = "spread"
    default_weight = 0.0

    def score(self, cyc: Cycle) -> float:
        return 1.0 - utilisation_after(cyc)
