"""The placement service as the host runs it: its core with the default profile's backfill mode; or
a leader for some partitions only (``partitioned``, docs/scaling.md)."""

from __future__ import annotations

from events.subjects import leader_token
from services.placement.core import PlacementCore
from services.placement.partitioned import PartitionedPlacementCore
from services.runtime.parts import PartSettings, ServicePart

__all__ = ["PART", "partitioned"]


def _core(settings: PartSettings) -> PlacementCore:
    return PlacementCore(backfill=settings.backfill)


PART = ServicePart("placement", _core)


def partitioned(partitions: tuple[str, ...]) -> ServicePart:
    """The placement leader of ``partitions``: places its scheduling partner's cycles only."""

    def core(settings: PartSettings) -> PartitionedPlacementCore:
        return PartitionedPlacementCore(backfill=settings.backfill, partitions=partitions)

    return ServicePart(leader_token("placement", partitions), core)
