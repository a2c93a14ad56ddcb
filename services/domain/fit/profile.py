"""Placement profiles (``ProfileConfigured``): every score plugin's weight, the backfill mode, the
reservation depth and where backfilling's run times come from (``runtime_estimate``). A job names its
profile (``JobSpec.profile``); ``default`` always exists. Pure.

The weights' names are the registered score plugins (``services/domain/fit/framework.py``); what each
backfill mode means is ``services/placement/backfill.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from events import catalogue as c
from events.vocabulary import BACKFILL_MODES, RESERVATION_DEPTH, RUNTIME_ESTIMATES
from services.domain.config import check_weights
from services.domain.fit.framework import DEFAULT_WEIGHTS, SCORE_PLUGINS

__all__ = ["Profile", "BACKFILL_MODES", "TOPOLOGY_LABELS", "check_profile", "profile_from"]

# Node labels naming interconnect domains, finest first: a gang prefers to stay inside one.
TOPOLOGY_LABELS = ("nvlink-domain", "rack")


@dataclass(frozen=True)
class Profile:
    name: str = "default"
    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)  # every plugin's weight
    backfill: str = "easy"
    reservation_depth: int = 16
    runtime_estimate: str = "limit"  # limit | predicted (services/domain/runtime_prediction.py)

    @property
    def predicts(self) -> bool:
        """Whether backfilling uses predicted run times instead of time limits."""
        return self.runtime_estimate == "predicted"


def check_profile(ev: c.ProfileConfigured) -> str | None:
    if not ev.name or len(ev.name) > 128:
        return f"name: {ev.name!r} must be 1-128 characters"
    bad = check_weights(ev.weights, SCORE_PLUGINS)
    if bad:
        return bad
    if ev.backfill not in BACKFILL_MODES:
        return f"backfill: {ev.backfill!r} is not one of {', '.join(BACKFILL_MODES)}"
    low, high = RESERVATION_DEPTH
    if not low <= ev.reservation_depth <= high:
        return f"reservation_depth: {ev.reservation_depth} must be between {low} and {high}"
    if ev.runtime_estimate not in RUNTIME_ESTIMATES:
        return f"runtime_estimate: {ev.runtime_estimate!r} is not one of {', '.join(RUNTIME_ESTIMATES)}"
    return None


def profile_from(ev: c.ProfileConfigured) -> Profile:
    return Profile(ev.name, MappingProxyType({**DEFAULT_WEIGHTS, **ev.weights}), ev.backfill, ev.reservation_depth,
                   ev.runtime_estimate)
