"""The decision services the host composes, each as it registered itself (``services/<name>/part.py``).

The one place that names every service: ``horizon up``, ``horizon service``,
the audit and the benches take the list from here, and ask each part what is
special about it (``services/runtime/parts.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from events.subjects import partition_token
from services.runtime.parts import PartSettings, ServicePart

__all__ = ["SERVICES", "PARTITIONED", "make_core", "service_part", "leader_cores"]


class _Parts(Mapping[str, Any]):
    """Service name -> ``services/<name>/part.py``'s ``attribute``, that module imported when first asked
    for: a process running one service (``horizon service placement``) imports that service alone, not
    all five (each brings its core, its fold and its apps: most of a second of a process's start)."""

    def __init__(self, names: tuple[str, ...], attribute: str) -> None:
        self._names = names
        self._attribute = attribute

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return getattr(importlib.import_module(f"services.{name}.part"), self._attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


# In start order (and the order `horizon up --processes` lists them).
SERVICES: Mapping[str, ServicePart] = _Parts(("submission", "scheduling", "placement", "preemption", "inventory"),
                                             "PART")


def make_core(name: str, *, policy: str = "multifactor", backfill: str = "easy",
              max_candidates: int | None = None) -> Any:
    """A service's core with the cluster's policy configuration (queue policy, backfill mode, and the
    scheduler's cap on a cycle's candidates: None for its default)."""
    if name not in SERVICES:
        raise ValueError(f"unknown service {name!r}; services: {', '.join(SERVICES)}")
    return SERVICES[name].make_core(PartSettings(policy=policy, backfill=backfill, max_candidates=max_candidates))


# The services that may run one leader per partition (or group of partitions): docs/scaling.md.
PARTITIONED: Mapping[str, Callable[[tuple[str, ...]], ServicePart]] = _Parts(("scheduling", "placement"),
                                                                             "partitioned")


def service_part(name: str, partitions: tuple[str, ...] = ()) -> ServicePart:
    """Service ``name``'s part: the whole cluster's, or the leader of ``partitions``."""
    if name not in SERVICES:
        raise ValueError(f"unknown service {name!r}; services: {', '.join(SERVICES)}")
    if not partitions:
        return SERVICES[name]
    if name not in PARTITIONED:
        raise ValueError(f"{name} has one leader for the whole cluster; by partition: {', '.join(PARTITIONED)}")
    return PARTITIONED[name](tuple(partitions))


def leader_cores(owners: set[str], partitions: set[str], *, policy: str = "multifactor",
                 backfill: str = "easy", max_candidates: int | None = None) -> list[Any]:
    """The cores of the partition leaders whose service tokens are among ``owners`` (the audit finds
    them in the log's subjects), given the partition names the log ever configured: ``scheduling-a-b``
    is the leader of partition ``a-b`` if there is one, else of ``a`` and ``b``. A name with dots is
    in a token as its ``partition_token`` (``test.q``: ``test_q_<8 hex>``)."""
    settings = PartSettings(policy=policy, backfill=backfill, max_candidates=max_candidates)
    names = {partition_token(p): p for p in partitions}
    out = []
    for owner in sorted(owners):
        service, dash, rest = owner.partition("-")
        if not dash or service not in PARTITIONED or not rest:
            continue
        split = split_partitions(rest, set(names)) or (rest,)
        out.append(PARTITIONED[service](tuple(names.get(t, t) for t in split)).make_core(settings))
    return out


def split_partitions(joined: str, known: set[str]) -> tuple[str, ...] | None:
    """``joined`` (sorted names joined by '-') as known partition names; None if it cannot be."""
    if joined in known:
        return (joined,)
    for cut in range(joined.find("-"), len(joined)):
        if cut <= 0 or joined[cut] != "-" or joined[:cut] not in known:
            continue
        rest = split_partitions(joined[cut + 1:], known)
        if rest is not None:
            return (joined[:cut], *rest)
    return None
