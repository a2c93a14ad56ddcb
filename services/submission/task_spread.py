"""Tasks spread over as many nodes as they need: Slurm's ``--ntasks`` without ``--nodes``. Pure.

Slurm gives such a job as many nodes as its tasks need, laying out more tasks on a node than on
another when they fit so (``-n 10`` on 4-CPU nodes: 4, 4 and 2). A Horizon gang has one shape,
``nodes`` x ``tasks_per_node``, each node holding the same; so submission chooses, for the
partition the job would run in, the fewest nodes ``k`` that could hold ``ntasks`` tasks at
``p = ceil(ntasks / k)`` a node, and the job runs ``ntasks`` of the ``k x p`` slots
(``JobSpec.ntasks``; ``services/domain/steps.py`` ``task_layout``: the first nodes full, at least one
task on each). Taking the smallest ``p`` for those ``k`` nodes holds at most ``k - 1`` slots more
than the tasks, where filling nodes to the brim would hold up to a node's worth more:

    128 tasks of 1 CPU on 48-CPU nodes: k = 1 (p 128) and k = 2 (p 64) fit no node; k = 3, p = 43
    fits, so 3 nodes of 43 slots run 43, 43 and 42 tasks (Slurm: 48, 48 and 32), holding 129 CPUs.

It is decided on what the partition's registered nodes could ever hold (``Capacity``), as every
submission check, not on what is free now (Slurm looks at the nodes free when it starts the job):
the same submission gets the same shape on replay. With no node registered yet the tasks go on as
few nodes as ``MAX_TASKS_PER_NODE`` allows; where no spread fits at all, the widest one is kept, so
that the rejection names what no node has (a task too large for any node, too few nodes).
"""

from __future__ import annotations

import math
from msgspec.structs import replace

from events import catalogue as c
from events.vocabulary import MAX_TASKS_PER_NODE
from services.submission.asked import Asked
from services.submission.capacity import Capacity
from services.submission.rejection import Rejection

__all__ = ["spread_tasks"]


def spread_tasks(sub: c.JobSubmitted, asked: Asked, memory: int, capacity: Capacity | None, *,
                 max_nodes: int, max_gpus: int) -> Asked:
    """``asked`` with the nodes and tasks per node ``sub.ntasks`` tasks spread over (see the module
    doc), and the memory of each task: ``memory``, or its share of ``sub.memory_per_node``."""
    ntasks = asked.ntasks
    most = max(1, min(ntasks, max_nodes))

    def shaped(k: int) -> Asked:
        p = math.ceil(ntasks / k)
        m = math.ceil(sub.memory_per_node / p) if sub.memory_per_node is not None else memory
        return replace(asked, nodes=k, least=k, tasks_per_node=p, memory_bytes=m, memory_given=True)

    if capacity is None or not capacity.nodes:  # 1. nothing registered yet
        chosen = shaped(min(most, math.ceil(ntasks / MAX_TASKS_PER_NODE)))
    else:  # 2. the fewest nodes that could each hold their share
        chosen, last_p = shaped(most), 0
        for k in range(1, most + 1):
            p = math.ceil(ntasks / k)
            if p == last_p or p > MAX_TASKS_PER_NODE:
                continue  # the same share on more nodes cannot fit better; too many for one node
            last_p = p
            here = shaped(k)
            if capacity.holding(here.need(here.memory_bytes)) >= k:
                chosen = here
                break
    total_gpus = (chosen.node_gpus or chosen.gpus * chosen.tasks_per_node) * chosen.nodes
    if total_gpus > max_gpus:
        raise Rejection("resources.gpus", f"{ntasks} tasks spread over {chosen.nodes} nodes hold {total_gpus} GPUs in "
                                          f"total, above the limit of {max_gpus} per job")
    return chosen
