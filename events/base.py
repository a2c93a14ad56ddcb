"""The envelope every Horizon event carries, and the identifier types.

An event is a frozen, keyword-only msgspec Struct. Its JSON form is a flat
object whose ``"type"`` key is the explicit tag of the tagged union (never
derived from the class name, so a class can be renamed without changing the
wire), and whose envelope fields are:

``id``
    unique id of this event. For a service's decision it is deterministic
    (derived from what was decided, e.g. ``placement/JobScheduled/j-42/1``)
    and doubles as the ``Nats-Msg-Id``, so a decision made twice is stored once.
``v``
    schema version of this event type; older versions are upcast on read
    (``events.codec``).
``ts``
    event time, seconds since the Unix epoch. For inputs the trusted time is
    the one JetStream stored (``Record.time``), not this field; a service
    stamps its decisions with the time of the event that triggered them.
``causation_id``
    id of the event that caused this one (``None`` for outside inputs).
``correlation_id``
    the job or node this event concerns; also the last token of its subject.
``source``
    who published it: a service name, ``agent/<node>``, or a client name.
"""

from __future__ import annotations

from typing import ClassVar, NewType

import msgspec

__all__ = ["Event", "JobId", "NodeId", "Tenant", "AccountId", "DeviceId", "Seq"]

JobId = NewType("JobId", str)
NodeId = NewType("NodeId", str)
Tenant = NewType("Tenant", str)
AccountId = NewType("AccountId", str)
DeviceId = NewType("DeviceId", str)
Seq = NewType("Seq", int)


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Envelope shared by every event. Subclasses set ``tag=`` explicitly."""

    # Current schema version of this event type. Subclasses whose payload has
    # changed shape raise it and register an upcaster in events.codec.
    VERSION: ClassVar[int] = 1

    id: str = ""
    v: int = 1
    ts: float = 0.0
    causation_id: str | None = None
    correlation_id: str = ""
    source: str = ""

    @property
    def event_type(self) -> str:
        """The wire tag, e.g. ``"JobSubmitted"``."""
        return type(self).__struct_config__.tag  # type: ignore[return-value]
