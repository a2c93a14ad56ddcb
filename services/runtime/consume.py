"""The shared consume loop: fetch -> decode -> (dead-letter | handle) -> ack.

Every consumer of the log goes through ``decode_record``, so bad input gets
the same treatment everywhere: a message that is not a Horizon event, or an
event of a type the subject does not admit (a ``JobScheduled`` published on
``horizon.in.acme.submit``), is parked on ``horizon.dlq.<service>`` with the
error text, acknowledged, and the consumer goes on. Never a crash loop,
never a silent drop.

``run_durable`` also guarantees that the handler never sees the same stream
sequence twice within a process (a redelivery after a slow ack is skipped);
across restarts the durable consumer resumes after its last ack, and the
handler's own idempotence (by sequence) covers the crash-between-effect-and-
ack window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence

from events.base import Event
from events.codec import DecodeError, decode
from events.subjects import expected_type, parse_subject
from services.runtime.log import EventLog
from services.domain.protocol import Record

__all__ = ["decode_record", "readable", "run_durable", "Handler"]

log = logging.getLogger("horizon.consume")

Handler = Callable[[Record, Event], Awaitable[None]]


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
    for record in batch:
        if record.seq <= after_seq:
            continue  # already folded: a reader restart may repeat the tail
        try:
            yield record, decode_record(record)
        except DecodeError:
            yield record, None


async def run_durable(
    log_: EventLog,
    *,
    name: str,
    service: str,
    subjects: Sequence[str],
    handle: Handler,
    stop: asyncio.Event,
    batch: int = 256,
    applied_seq: int = 0,
) -> int:
    """Consume ``name`` until ``stop`` is set; returns the last applied sequence.

    ``applied_seq``: the last sequence whose effect is already durable (e.g.
    read from a projection's tracking table); anything at or below it is
    acked without calling ``handle`` again.
    """
    consumer = await log_.durable(name, subjects=subjects)
    try:
        while not stop.is_set():
            deliveries = await consumer.fetch(batch, timeout_s=0.5)
            for delivery in deliveries:
                record = delivery.record
                if record.seq <= applied_seq:
                    await delivery.ack()
                    continue
                try:
                    event = decode_record(record)
                except DecodeError as exc:
                    await log_.dead_letter(service, record, str(exc))
                else:
                    await handle(record, event)
                applied_seq = record.seq
                await delivery.ack()
    finally:
        await consumer.stop()
    return applied_seq
