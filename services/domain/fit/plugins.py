"""Placement plugins: the filters a node must pass and the scores that rank the nodes that do. Pure.

As in the Kubernetes scheduler framework, a job's placement runs a fixed
pipeline of **filter** plugins (a node failing any of them is out, with that
filter's reason) and then weighs **score** plugins over the nodes left; the
weights belong to a **profile** (``ProfileConfigured``), and a job names its
profile (``JobSpec.profile``). Every score is in [0, 1], higher is better; a
node's score is ``sum(weight * score)``; equal scores break by node name.

Filters, in order (the first failure is the node's reason):

==================  ==================================================================
``NodeReady``        ready, not cordoned, draining, lost or removed
``NodeSelector``     the node's labels include every ``node_selector`` pair
``NodeAffinity``     every required ``NodeSelectorRequirement`` holds (In, NotIn, Exists,
                     DoesNotExist, Gt, Lt)
``Taints``           every ``NoSchedule``/``NoExecute`` taint of the node is tolerated
``Reservation``      an advance reservation of another account does not hold the node
                     while the job would run (it must end, by its time limit, before the
                     window opens)
capacity             enough CPUs, memory, matching GPUs in total (``GpuCapacity`` ...)
``JobAffinity``      each affinity term: a running job matching its labels in the node's
                     topology domain (``node``, or the value of a node label such as
                     ``rack``); the first job of a group that matches its own term passes
``JobAntiAffinity``  no running job matching a term in the domain, and no running job whose
                     own anti-affinity term matches this job there (symmetric)
free                 enough of them free now (``GpuFree``, ``CpuFree``, ``MemoryFree``)
==================  ==================================================================

Scores (worked tables in ``tests/test_placement_plugins.py``), with ``G`` GPUs
on the node, ``g`` free after placing, ``C``/``c`` the same for CPUs:

``binpack``        utilisation after placing: ``(G - g)/G`` for a GPU job, ``(C - c)/C`` otherwise
``spread``         ``1 - binpack``
``numa``           1 if the job's devices share one NUMA node (or it takes at most one GPU)
``interconnect``   1 if its devices share one interconnect (NVLink) group (or at most one GPU)
``fragmentation``  1, minus 1/2 if the job breaks into an idle node it does not fill, minus 1/2
                   if a CPU-only job lands on a node with free GPUs (keeps them for GPU work)
``taints``         1 unless the node has a ``PreferNoSchedule`` taint the job does not tolerate
``node_affinity``  the fraction of the job's preferred node requirements the node meets

Defaults: binpack 10, spread 0, numa 2, interconnect 2, fragmentation 5,
taints 20, node_affinity 5: pack, but do not break a whole node or split a
job over NUMA nodes or NVLink groups for a little more packing, and stay off
``PreferNoSchedule`` nodes unless nothing else fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from events import catalogue as c
from services.domain.config import check_weights
from services.domain.taints import taint_text as describe_taint
from services.domain.taints import tolerates, untolerated

__all__ = ["Profile", "SCORE_PLUGINS", "DEFAULT_WEIGHTS", "BACKFILL_MODES", "check_profile", "profile_from",
           "tolerates", "untolerated", "describe_taint", "requirement_holds", "TOPOLOGY_LABELS", "NEVER_FILTERS"]

SCORE_PLUGINS = ("binpack", "spread", "numa", "interconnect", "fragmentation", "taints", "node_affinity")
DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType({
    "binpack": 10.0, "spread": 0.0, "numa": 2.0, "interconnect": 2.0, "fragmentation": 5.0, "taints": 20.0,
    "node_affinity": 5.0,
})
BACKFILL_MODES = ("none", "easy", "shadow", "greedy", "conservative")
# Node labels naming interconnect domains, finest first: a gang prefers to stay inside one.
TOPOLOGY_LABELS = ("nvlink-domain", "rack")
# Filters whose failure does not go away when jobs end: a job every node rejects for one of
# these fits nowhere until the nodes themselves change.
NEVER_FILTERS = frozenset({"GpuCapacity", "CpuCapacity", "MemoryCapacity", "NodeSelector", "NodeAffinity", "Taints"})


@dataclass(frozen=True)
class Profile:
    name: str = "default"
    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)  # every plugin's weight
    backfill: str = "easy"
    reservation_depth: int = 16


def check_profile(ev: c.ProfileConfigured) -> str | None:
    if not ev.name or len(ev.name) > 128:
        return f"name: {ev.name!r} must be 1-128 characters"
    bad = check_weights(ev.weights, SCORE_PLUGINS)
    if bad:
        return bad
    if ev.backfill not in BACKFILL_MODES:
        return f"backfill: {ev.backfill!r} is not one of {', '.join(BACKFILL_MODES)}"
    if not 1 <= ev.reservation_depth <= 1000:
        return f"reservation_depth: {ev.reservation_depth} must be between 1 and 1000"
    return None


def profile_from(ev: c.ProfileConfigured) -> Profile:
    return Profile(ev.name, MappingProxyType({**DEFAULT_WEIGHTS, **ev.weights}), ev.backfill, ev.reservation_depth)


# ---------------------------------------------------------------------------------------- node affinity

Requirement = tuple[str, str, tuple[str, ...]]  # key, operator, values


def requirement_holds(labels: Mapping[str, str], req: Requirement) -> bool:
    key, op, values = req
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            a, b = float(value), float(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def describe_requirement(req: Requirement) -> str:
    key, op, values = req
    return f"{key} {op} [{', '.join(values)}]" if values else f"{key} {op}"
