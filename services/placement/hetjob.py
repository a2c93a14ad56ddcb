"""A heterogeneous job's placement: every component at once, or none. Pure.

A heterogeneous job (Slurm's hetjob, ``services/domain/hetjob.py``) is several gangs of different
shapes that start together. ``place_hetjob`` places them in order, in one decision:

1. component 0 with ``place_job`` (its best nodes, as any gang: one interconnect domain when one has
   room), against the cycle's overlay;
2. each next component the same way, against the overlay plus what the components before it took,
   and never on a node an earlier component took (each component has nodes of its own: a node holds
   one allocation of a job);
3. if some component does not fit, nothing is placed: the job waits, and its reasons are that
   component's, each prefixed ``component k:``. ``fits_nowhere`` when that component could never fit.

The allocations are component 0's, then component 1's, ... (what ``by_component`` cuts them back into).
Taking the components in order is greedy, as Slurm's scheduler is: a component that takes nodes a later
one needed makes the job wait rather than be tried in another arrangement, so it is deterministic and
costs one search per component.

**Where.** All components run on the nodes of Horizon's own node agents: the Slurm and Kubernetes
backends run each job as one shape (one ``sbatch``, one pod template), so a heterogeneous job never
goes there (and so never spans two backends, the rule every gang keeps: ``place.py``).

**Backfill.** A waiting heterogeneous job gets no reservation (a reservation is of one shape): under
a mode that stops at the first job that waits (``none``) it stops the cycle as any job, under the others
later jobs may start ahead of it. docs/slurm.md, "Heterogeneous jobs", says so.
"""

from __future__ import annotations

import dataclasses

import msgspec

from events import catalogue as c
from services.domain.cluster import BACKEND_LABEL, Cluster, Request, request_of
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.hetjob import component_specs
from services.placement.place import Placed, backend_name, place_job

__all__ = ["place_hetjob", "HET_BACKEND"]

HET_BACKEND = "agent"  # the backend whose nodes run heterogeneous jobs: Horizon's own node agents


def _on_agents(req: Request) -> Request:
    """The request kept to the agents' nodes (their label ``horizon.io/backend=agent``)."""
    selector = dict(req.selector)
    selector[BACKEND_LABEL] = HET_BACKEND
    return dataclasses.replace(req, selector=tuple(sorted(selector.items())))


def place_hetjob(cluster: Cluster, spec: c.JobSpec, overlay: Overlay, ctx: Context) -> Placed:
    """Every component of ``spec`` placed (allocations in component order), or none with the reasons
    of the first component that does not fit (see the module doc)."""
    shapes = component_specs(spec)
    if not any(backend_name(node) == HET_BACKEND for node in cluster.nodes.values() if not node.removed):
        return Placed(None, [c.BlockReason(
            reason="a heterogeneous job runs on the nodes of Horizon's own node agents, and none is registered "
                   "(the Slurm and Kubernetes backends run jobs of one shape)", nodes=0, filter="Hetjob")],
            fits_nowhere=True)
    trial = overlay.copy()  # what the components placed so far take, on top of the cycle's
    taken: set[str] = set()
    allocations: list[c.NodeAllocation] = []
    for k, shape in enumerate(shapes):
        own = _on_agents(request_of(shape))
        req = dataclasses.replace(own, exclude=own.exclude | taken) if taken else own
        placed = place_job(cluster, req, trial, None, ctx)
        if placed.allocations is None:
            reasons = [msgspec.structs.replace(r, reason=f"component {k}: {r.reason}") for r in placed.reasons]
            # Whether it could ever fit is the component's own answer, without the nodes the components
            # before it took for now (an excluded node counts as one that never fits).
            never = placed.fits_nowhere if not taken else place_job(cluster, own, trial, None, ctx).fits_nowhere
            return Placed(None, reasons, fits_nowhere=never)
        for alloc in placed.allocations:
            trial.take(alloc)
            taken.add(alloc.node)
        allocations.extend(placed.allocations)
    return Placed(allocations)
