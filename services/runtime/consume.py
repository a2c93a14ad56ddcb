"""Decoding a record as every reader of the log does (the reading loop itself: ``follow.py``).

Every consumer of the log goes through ``decode_record``, so bad input gets
the same treatment everywhere: a message that is not a Horizon event, or an
event of a type the subject does not admit (a ``JobScheduled`` published on
``horizon.in.acme.submit``), is parked on ``horizon.dlq.<service>`` with the
error text by the service it was sent to (``follow.dead_letter_to``), skipped
by every other reader, and reading goes on. Never a crash loop, never a
silent drop.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from events.base import Event
from events.codec import DecodeError, decode
from events.subjects import expected_type, parse_subject
from services.domain.protocol import Record

__all__ = ["decode_record", "readable"]


def decode_record(record: Record) -> Event:
    """Decode a record and check it against its subject; ``DecodeError`` says what is wrong."""
    event = decode(record.data)
    parsed = parse_subject(record.subject)
    if parsed is None:
        raise DecodeError(f"subject {record.subject!r} is not a Horizon subject")
    admitted = expected_type(parsed)
    if parsed.kind in ("input", "admin"):
        if admitted is None:
            raise DecodeError(f"unknown verb {parsed.name!r} on {record.subject}")
        if not isinstance(event, admitted):
            raise DecodeError(
                f"{event.event_type} is not accepted on {record.subject}; "
                f"that subject takes {admitted.__struct_config__.tag}"
            )
    elif parsed.name != event.event_type:
        raise DecodeError(f"{event.event_type} published on a {parsed.name} subject ({record.subject})")
    return event


def readable(batch: Iterable[Record], after_seq: int) -> Iterator[tuple[Record, Event | None]]:
    """The records past ``after_seq``, in order, each with its event, or ``None`` if it cannot be
    decoded (services dead-letter those; read models and agents only skip them)."""
    decoded = getattr(batch, "events", None)  # decoded once for every part by a shared reader (fanout.py)
    for i, record in enumerate(batch):
        if record.seq <= after_seq:
            continue  # already folded: a reader restart may repeat the tail
        if decoded is not None:
            event = decoded[i]
            yield record, None if isinstance(event, DecodeError) else event
            continue
        try:
            yield record, decode_record(record)
        except DecodeError:
            yield record, None
