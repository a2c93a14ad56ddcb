"""The scheduling service as the host runs it: its core with the cluster's queue policy."""

from __future__ import annotations

from services.runtime.parts import PartSettings, ServicePart
from services.scheduling.core import SchedulingCore

__all__ = ["PART"]


def _core(settings: PartSettings) -> SchedulingCore:
    return SchedulingCore(policy=settings.policy)


PART = ServicePart("scheduling", _core)
