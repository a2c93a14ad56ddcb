"""One way to build a decision's envelope: its deterministic id and the fields every decision shares. Pure.

A decision's ``id`` names who decided, what and about what: ``<by>/<Type>/<key>/...`` (for example
``placement/JobScheduled/j-42/1``). It doubles as the ``Nats-Msg-Id``, so the same decision made twice
(a restart, a standby that took over, a replay) is stored once; it must therefore be built from what
was decided and nothing else. Every producer builds it here instead of by hand::

    decide = Decider("placement", ts=state.now, basis_seq=state.seq)
    decide(c.JobScheduled, job_id, attempt, correlation_id=job_id, job_id=job_id, ...)

``Decider`` also carries the fields a core stamps on every decision of one step (the time of the
triggering event, the sequence it decided on), so a call names only what is particular to the decision.
"""

from __future__ import annotations

from typing import Any, TypeVar

from events.base import Event

__all__ = ["decision_id", "Decider"]

E = TypeVar("E", bound=Event)


def decision_id(by: str, event_type: type[Event], *key: object) -> str:
    """``<by>/<Type>/<key>/...``: the deterministic id of ``by``'s decision of ``event_type`` about ``key``."""
    tag = event_type.__struct_config__.tag
    return "/".join((by, str(tag), *(str(k) for k in key)))


class Decider:
    """Builds ``by``'s decisions: the id from the key, the shared fields from the step (``common``)."""

    __slots__ = ("by", "common")

    def __init__(self, by: str, **common: Any) -> None:
        self.by = by
        self.common = common

    def __call__(self, event_type: type[E], *key: object, **fields: Any) -> E:
        return event_type(id=decision_id(self.by, event_type, *key), **{**self.common, **fields})

    def id(self, event_type: type[Event], *key: object) -> str:
        return decision_id(self.by, event_type, *key)
