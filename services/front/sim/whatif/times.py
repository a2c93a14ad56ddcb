"""Times of ``horizon whatif``: durations (``7d``), ``--from``/``--to`` (a seq, an ISO 8601 time, a time
before now), and its one error, ``WhatIfError`` (bad input: a one-line answer)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["DAY", "WhatIfError", "parse_duration", "parse_when", "iso"]

DAY = 86400.0


class WhatIfError(ValueError):
    """Bad input to whatif: a one-line answer for the CLI."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, None: 1.0}


def parse_duration(text: str, what: str = "duration") -> float:
    """``90``, ``90s``, ``15m``, ``6h``, ``3d``, ``1w`` -> seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise WhatIfError(f"{what}: {text!r} is not a duration (e.g. 3600, 90s, 15m, 6h, 3d, 1w)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_when(text: str, now: float, last_seq_time: Callable[[int], float | None]) -> float:
    """``--from``/``--to``: a seq (digits), an ISO 8601 time (``2026-11-20T00:00:00Z``), ``now``,
    or a time before now (``7d``, ``-7d``, ``36h``). ``last_seq_time(seq)``: the event time of a seq."""
    text = text.strip()
    if text.isdigit():
        t = last_seq_time(int(text))
        if t is None:
            raise WhatIfError(f"seq {text} is not in the log")
        return t
    if text == "now":
        return now
    if _DURATION.match(text.lstrip("-")) and not text.lstrip("-").isdigit():
        return now - parse_duration(text.lstrip("-"))
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WhatIfError(f"{text!r} is neither a seq, an ISO 8601 time (2026-11-20T00:00:00Z) nor a time "
                          f"before now (7d, 36h)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
