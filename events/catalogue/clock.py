"""Time, as an event: ``ClockTicked``."""

from __future__ import annotations

from events.base import Event


class ClockTicked(Event, tag="ClockTicked", kw_only=True):
    """Explicit time, published by a simulator at virtual time or a live ticker.

    Services treat it as any other trigger: "now" becomes ``now_ts``.
    """

    now_ts: float
