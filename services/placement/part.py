"""The placement service as the host runs it: its core with the default profile's backfill mode."""

from __future__ import annotations

from services.placement.core import PlacementCore
from services.runtime.parts import PartSettings, ServicePart

__all__ = ["PART"]


def _core(settings: PartSettings) -> PlacementCore:
    return PlacementCore(backfill=settings.backfill)


PART = ServicePart("placement", _core)
