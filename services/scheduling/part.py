"""The scheduling service as the host runs it: its core with the cluster's queue policy; or a
leader for some partitions only (``partitioned``, docs/scaling.md)."""

from __future__ import annotations

from typing import Any

from events.subjects import leader_token
from services.runtime.parts import PartSettings, ServicePart
from services.scheduling.core import SchedulingCore
from services.scheduling.fence import PartitionedSchedulingRunner
from services.scheduling.partitioned import PartitionedSchedulingCore

__all__ = ["PART", "partitioned"]


def _cap(settings: PartSettings) -> dict[str, Any]:
    return {} if settings.max_candidates is None else {"max_candidates": settings.max_candidates}


def _core(settings: PartSettings) -> SchedulingCore:
    return SchedulingCore(policy=settings.policy, **_cap(settings))


PART = ServicePart("scheduling", _core)


def partitioned(partitions: tuple[str, ...]) -> ServicePart:
    """The scheduling leader of ``partitions``: its own token, lease, fence and snapshots."""

    def core(settings: PartSettings) -> PartitionedSchedulingCore:
        return PartitionedSchedulingCore(policy=settings.policy, partitions=partitions, **_cap(settings))

    def runner(log_: Any, core_: Any, lease: Any, settings: PartSettings) -> PartitionedSchedulingRunner:
        return PartitionedSchedulingRunner(log_, core_, lease=lease)

    return ServicePart(leader_token("scheduling", partitions), core, runner)
