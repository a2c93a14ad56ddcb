"""The preemption service as the host runs it."""

from __future__ import annotations

from services.preemption.core import PreemptionCore
from services.runtime.parts import PartSettings, ServicePart

__all__ = ["PART"]


def _core(settings: PartSettings) -> PreemptionCore:
    return PreemptionCore()


PART = ServicePart("preemption", _core)
