"""One replay of a what-if's workload: the five cores as the live services run them, at virtual time, over
the in-process bus (services/front/sim/driver.py), the changes published at the span's start."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from events.base import Event
from events.subjects import ADMIN_VERBS, admin_subject
from services.front.sim.whatif.times import WhatIfError
from services.front.sim.whatif.workload import Workload

__all__ = ["whatif_cores", "run_whatif"]


def whatif_cores(policy: str, backfill: str) -> list[Any]:
    """The five cores as the live services run them (``horizon up --policy --backfill-mode``), at virtual time."""
    from services.inventory.core import InventoryCore
    from services.placement.core import PlacementCore
    from services.preemption.core import PreemptionCore
    from services.scheduling.core import SchedulingCore
    from services.submission.core import SubmissionCore

    return [SubmissionCore(virtual_time=True), SchedulingCore(policy=policy, virtual_time=True),
            PlacementCore(backfill=backfill, virtual_time=True), PreemptionCore(virtual_time=True),
            InventoryCore(virtual_time=True)]


async def run_whatif(workload: Workload, timed: Sequence[tuple[str, Event]], config: Sequence[Event], *,
                     policy: str, backfill: str, progress: Callable[[int, int], None] | None = None) -> Any:
    """One replay of the workload over the in-process bus; ``config`` is published at its start."""
    from services.front.sim.buses import InProcessBus
    from services.front.sim.driver import SimSettings, simulate

    settings = SimSettings(policy=policy, backfill=backfill)
    start = [(admin_subject(_verb(e)), msgspec.structs.replace(e, ts=workload.start_s, id=e.id or f"whatif/config/{n}",
                                                               source="whatif")) for n, e in enumerate(config)]
    # the changes apply at the span's start, after the configuration in force then
    events = [(s, e) for s, e in timed] + [(s, e) for s, e in start]
    bus = InProcessBus(whatif_cores(policy, backfill))
    return await simulate(workload.jobs, [], settings, bus, progress=progress, timed=_ordered(events, workload.start_s))


def _ordered(events: list[tuple[str, Event]], start_s: float) -> list[tuple[str, Event]]:
    """Changes (source whatif) right after what happened at or before the span's start."""
    def key(item: tuple[str, Event]) -> tuple[float, int]:
        e = item[1]
        return (max(e.ts, start_s) if e.source == "whatif" else e.ts, 1 if e.source == "whatif" else 0)

    out = sorted(events, key=key)
    # the driver sorts by ts (stable): changes at the span's start must not precede earlier configuration
    return [(s, msgspec.structs.replace(e, ts=max(e.ts, start_s)) if e.source == "whatif" else e) for s, e in out]


def _verb(event: Event) -> str:
    for verb, cls in ADMIN_VERBS.items():
        if isinstance(event, cls):
            return verb
    raise WhatIfError(f"{event.event_type} is not an operator configuration event")
