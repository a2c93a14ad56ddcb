"""A leader's claim in the log: ``LeadershipClaimed``."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from events.base import Event

__all__ = ["LeadershipClaimed", "CLAIM_TOKEN"]

CLAIM_TOKEN = "lease"  # the claim's correlation id: one literal subject per service, horizon.evt.<service>.LeadershipClaimed.lease


class LeadershipClaimed(Event, tag="LeadershipClaimed", kw_only=True):
    """A runner that took its service's lease claims the lead in the log, and fences its decisions on this record.

    Published by the runner (not its core, and not a decision) on
    ``horizon.evt.<service>.LeadershipClaimed.lease``, stored only if the last claim there is
    ``previous_seq``; id ``<service>/LeadershipClaimed/<previous_seq>/<holder>``. The runner decides
    once it has applied the log up to its claim, and every decision it publishes is stored only
    while its claim is still the last one: a deposed leader's decisions are refused from the moment
    its successor's claim is stored, and the successor's state holds every decision stored before.
    ``horizon audit`` counts claims apart from the decisions it replays."""

    holder: Annotated[str, Meta(description="The lease holder that claims (host, pid and a random suffix).")]
    previous_seq: Annotated[int, Meta(description="The sequence of the claim this one supersedes (0: the first).")] = 0
