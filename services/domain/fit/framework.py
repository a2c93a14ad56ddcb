"""The placement framework, shaped like the Kubernetes scheduler's: filter plugins in a fixed order,
then score plugins weighed by the job's profile. Pure.

A ``Filter`` says once per job whether it applies at all (``relevant``), then looks at one node for
one request (a ``Cycle``) and returns ``None`` (pass) or the detail of its failure; the first failure is the node's reason ("4 nodes: has 8 GPUs, needs 16").
A ``Score`` rates a node that passed them all in [0, 1], higher is better; the node's score is
``sum(weight * score)`` over ``SCORES`` in their order, and equal scores break by node name.

To add a plugin: write it in ``filters/`` or ``scores/`` (one file per plugin or small group) and
list it below, where its place in the order is decided. Everything else (the profile's weight names
and defaults, which filters can never pass until the nodes change, the reasons' text) is derived
from these two lists.

Filters, in order:

==================  ==================================================================
``Partition``        in the job's partition, and that partition is not down
``NodeReady``        ready, not cordoned, draining, lost or removed
``Preemption``       not holding room that a preemption freed for another job
``NodeSelector``     the node's labels include every ``node_selector`` pair
``NodeAffinity``     every required ``NodeSelectorRequirement`` holds (In, NotIn, Exists,
                     DoesNotExist, Gt, Lt)
``Constraint``       the node has the features of the job's ``--constraint``
``NodeName``         the node is in the job's node list and not excluded
``Taints``           every ``NoSchedule``/``NoExecute`` taint of the node is tolerated
``Reservation``      an advance reservation of another account does not hold the node
                     while the job would run
capacity             enough CPUs, memory, matching GPUs in total (``GpuCapacity`` ...)
``JobAffinity``      each affinity term: a running job matching its labels in the node's
                     topology domain
``JobAntiAffinity``  no running job matching a term in the domain (symmetric)
``Exclusive``        nothing runs on the node (a job of ``--exclusive``)
free                 enough of them free now (``GpuFree``, ``CpuFree``, ``MemoryFree``)
==================  ==================================================================

Scores and default weights: binpack 10, spread 0, numa 2, interconnect 2,
fragmentation 5, taints 20, node_affinity 5, locality 10, cost 0: pack, but do
not break a whole node or split a job over NUMA nodes or NVLink groups for a
little more packing, and stay off ``PreferNoSchedule`` nodes unless nothing
else fits; go where the job's datasets are (``scores/data.py``); price is off
until a profile weighs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from events.vocabulary import SCORE_WEIGHTS
from services.domain.cluster import Request
from services.domain.fit.filters.capacity import CpuCapacity, GpuCapacity, MemoryCapacity
from services.domain.fit.filters.free import CpuFree, GpuFree, MemoryFree
from services.domain.fit.filters.labels import NodeAffinity, NodeSelector
from services.domain.fit.filters.node import NodeReady, Preemption
from services.domain.fit.filters.partition import Partition
from services.domain.fit.filters.reservation import Reservation
from services.domain.fit.filters.slurm import Constraint, Exclusive, NodeName
from services.domain.fit.filters.taints import Taints
from services.domain.fit.filters.topology import JobAffinity, JobAntiAffinity
from services.domain.fit.scores.data import Cost, Locality
from services.domain.fit.scores.devices import Interconnect, Numa
from services.domain.fit.scores.fragmentation import Fragmentation
from services.domain.fit.scores.packing import Binpack, Spread
from services.domain.fit.scores.preferences import PreferNoScheduleTaints, PreferredNodeAffinity

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle, Where

__all__ = ["Filter", "Score", "FILTERS", "SCORES", "SCORE_PLUGINS", "DEFAULT_WEIGHTS", "NEVER_FILTERS", "explain"]


class Filter(Protocol):
    name: str  # the BlockReason's filter
    never: bool  # failing it does not change as jobs end: only the nodes themselves changing can

    def relevant(self, req: Request, ctx: Where) -> bool:
        """Whether it has anything to check for this job in this context, on any node (Kubernetes'
        PreFilter "skip"); asked once per job and context, not per node."""
        ...

    def check(self, cyc: Cycle) -> tuple[object, ...] | None:
        """``None`` if the node passes, else the detail of the failure (for ``explain``)."""
        ...

    def explain(self, detail: tuple[object, ...], req: Request) -> str: ...


class Score(Protocol):
    name: str  # the weight's key in a profile
    default_weight: float

    def score(self, cyc: Cycle) -> float: ...


FILTERS: tuple[Filter, ...] = (
    Partition(), NodeReady(), Preemption(),
    NodeSelector(), NodeAffinity(), Constraint(), NodeName(), Taints(), Reservation(),
    GpuCapacity(), CpuCapacity(), MemoryCapacity(),
    JobAffinity(), JobAntiAffinity(), Exclusive(),
    GpuFree(), CpuFree(), MemoryFree(),
)
SCORES: tuple[Score, ...] = (
    Binpack(), Spread(), Numa(), Interconnect(), Fragmentation(), PreferNoScheduleTaints(), PreferredNodeAffinity(),
    Locality(), Cost(),
)

SCORE_PLUGINS: tuple[str, ...] = tuple(s.name for s in SCORES)
assert SCORE_PLUGINS == SCORE_WEIGHTS, "the weights a ProfileConfigured may name (events/vocabulary.py)"
DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType({s.name: s.default_weight for s in SCORES})
# Filters whose failure does not go away when jobs end: a job every node rejects for one of
# these fits nowhere until the nodes themselves change.
NEVER_FILTERS = frozenset(f.name for f in FILTERS if f.never)
_BY_NAME: Mapping[str, Filter] = MappingProxyType({f.name: f for f in FILTERS})
assert len(_BY_NAME) == len(FILTERS) and len(set(SCORE_PLUGINS)) == len(SCORES), "plugin names must be unique"


def explain(filter: str, detail: tuple[object, ...], req: Request) -> str:
    """The text of a failure: what the node has against what the job needs."""
    plugin = _BY_NAME.get(filter)
    return plugin.explain(detail, req) if plugin is not None else filter
