"""The decision services the host composes, each as it registered itself (``services/<name>/part.py``).

The one place that names every service: ``horizon up``, ``horizon service``,
the audit and the benches take the list from here, and ask each part what is
special about it (``services/runtime/parts.py``).
"""

from __future__ import annotations

from typing import Any

from services.inventory.part import PART as INVENTORY
from services.placement.part import PART as PLACEMENT
from services.preemption.part import PART as PREEMPTION
from services.runtime.parts import PartSettings, ServicePart
from services.scheduling.part import PART as SCHEDULING
from services.submission.part import PART as SUBMISSION

__all__ = ["SERVICES", "make_core"]

# In start order (and the order `horizon up --processes` lists them).
SERVICES: dict[str, ServicePart] = {p.name: p for p in (SUBMISSION, SCHEDULING, PLACEMENT, PREEMPTION, INVENTORY)}


def make_core(name: str, *, policy: str = "multifactor", backfill: str = "easy") -> Any:
    """A service's core with the cluster's policy configuration (queue policy, backfill mode)."""
    if name not in SERVICES:
        raise ValueError(f"unknown service {name!r}; services: {', '.join(SERVICES)}")
    return SERVICES[name].make_core(PartSettings(policy=policy, backfill=backfill))
