"""A time as people read it in a reason: ``2026-11-26 21:04:54 UTC`` for a time on the wall clock's
scale, ``t=1001`` for a simulation's virtual time (seconds from its start).

Pure renderings of the time given (no clock is read), shared by every reason that names a time (why a
job waits, placement's backfill verdicts), so that no reason shows a raw epoch such as ``1795876474``.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["when", "at"]

EPOCH_FROM = 1e9  # 2001-09-09: below it, a time is a simulation's seconds, not an epoch time


def when(ts: float) -> str:
    """``2026-11-26 21:04:54 UTC``; ``t=1001`` for a virtual time."""
    if ts >= EPOCH_FROM:
        return f"{datetime.fromtimestamp(round(ts), timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
    return f"t={ts:.0f}"


def at(ts: float) -> str:
    """``at 2026-11-26 21:04:54 UTC``; ``at t=1001`` for a virtual time."""
    return f"at {when(ts)}"
