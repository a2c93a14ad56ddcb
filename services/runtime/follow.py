"""The one reader of the log: read it from a sequence to its end, say so, then follow it.

Every long-lived reader (the service runner, the node agent, the read
models) starts the same way: it knows the last sequence it has applied (0, a
snapshot's, a projection's tracking row), reads the log from the next one up
to the end *as it was at start*, does what "caught up" means to it (a runner
decides for the first time, an agent adopts the jobs it finds), and then takes
the live tail. ``LogFollow`` is that loop, written once:

1. **End.** ``start`` reads the log's last sequence (or takes ``until_seq``,
   e.g. the end a runner restored its snapshot against): ``end``.
2. **History.** Records ``from_seq..end`` go to ``history`` (default: the
   live handler), batch by batch, in log order (``read_through``).
3. **Caught up.** ``on_caught_up(end)`` runs; then ``caught_up`` is set.
4. **Follow.** Records from ``end + 1`` (or past ``from_seq`` if that is
   further) go to ``on_batch`` as they arrive, until ``stop``.

A handler gets whole batches (a read model commits one transaction per
batch; a runner decides after one); a batch never holds a record at or below
the last one already handed over (a reader restart may repeat the tail).
``each(handle, undecodable=...)`` turns a handler of one decoded event into a
batch handler: each record is decoded and checked against its subject
(``consume.decode_record``), and one that cannot be is skipped
(``skip_undecodable``, the default: read models and agents) or parked on the
dead-letter queue (``dead_letter_to(log, service)``: a service's own inputs).
Handlers may be plain functions or coroutines.

``read_through`` alone is the catch-up without the follow (a backend that
only needs the log's state at start); ``follow_durable`` is the same loop on
a named durable consumer, which acknowledges a batch only after its handler
has returned: the effect is durable before the log forgets it.

Stopping: ``stop`` ends the catch-up if it is still running and the follower;
``wait`` returns (or raises the handler's error) when the loop ends.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from events.base import Event
from events.codec import DecodeError
from events.subjects import WHOLE_LOG
from services.domain.protocol import Record
from services.runtime.cancel import cancel_and_wait
from services.runtime.consume import decode_record
from services.runtime.log import EventLog, Follower

__all__ = [
    "LogFollow",
    "read_through",
    "follow_durable",
    "each",
    "skip_undecodable",
    "dead_letter_to",
    "OnBatch",
    "OnEvent",
    "OnUndecodable",
]

log = logging.getLogger("horizon.follow")

# A handler may return an awaitable (a coroutine function) or nothing (a plain function).
OnBatch = Callable[[list[Record]], "Awaitable[Any] | Any"]
OnEvent = Callable[[Record, Event], "Awaitable[Any] | Any"]
OnUndecodable = Callable[[Record, str], "Awaitable[Any] | Any"]


async def _call(handler: Callable[..., Any], *args: Any) -> None:
    result = handler(*args)
    if inspect.isawaitable(result):
        await result


def skip_undecodable(record: Record, error: str) -> None:
    """The default for a record that cannot be decoded: skip it (its producer's service parks it)."""
    log.debug("skipping undecodable seq %s on %s: %s", record.seq, record.subject, error)


def dead_letter_to(log_: EventLog, service: str) -> OnUndecodable:
    """Park a record that cannot be decoded on ``horizon.dlq.<service>`` with its error."""

    async def park(record: Record, error: str) -> None:
        await log_.dead_letter(service, record, error)

    return park


def each(handle: OnEvent, *, undecodable: OnUndecodable = skip_undecodable) -> OnBatch:
    """A batch handler that decodes each record and hands it to ``handle(record, event)``;
    a record that cannot be decoded goes to ``undecodable(record, error)`` instead."""

    async def on_batch(batch: list[Record]) -> None:
        decoded = getattr(batch, "events", None)  # decoded once for every part by a shared reader (fanout.py)
        for i, record in enumerate(batch):
            if decoded is None:
                try:
                    event: Event | DecodeError = decode_record(record)
                except DecodeError as exc:
                    event = exc
            else:
                event = decoded[i]
            if isinstance(event, DecodeError):
                await _call(undecodable, record, str(event))
                continue
            await _call(handle, record, event)

    return on_batch


def _past(batch: list[Record], position: int) -> list[Record]:
    """The records of ``batch`` past ``position`` (a reader restart may repeat the tail)."""
    if batch and batch[0].seq <= position:
        return [r for r in batch if r.seq > position]
    return batch


async def read_through(
    log_: EventLog,
    on_batch: OnBatch,
    *,
    from_seq: int = 1,
    until_seq: int | None = None,
    subjects: Sequence[str] = WHOLE_LOG,
) -> int:
    """Hand the records ``from_seq..until_seq`` (default: the log's end now) to ``on_batch``, batch by
    batch; returns the end read to (the log's, not the last matching record's)."""
    end = await log_.last_seq() if until_seq is None else until_seq
    position = from_seq - 1
    if end >= from_seq:
        async for batch in log_.read(from_seq, subjects=subjects, until_seq=end):
            batch = _past(batch, position)
            if batch:
                await _call(on_batch, batch)
                position = batch[-1].seq
    return end


class LogFollow:
    """Read the log from ``from_seq`` to its end, then follow it (module docstring).

    ``history``: the handler of the records up to the end (default ``on_batch``), e.g. a fold that
    acts on nothing yet; ``on_caught_up(end)``: what to do once they are applied; ``linger_s``: see
    ``EventLog.follow`` (a read model lets a burst gather).
    """

    def __init__(
        self,
        log_: EventLog,
        on_batch: OnBatch,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        subjects: Sequence[str] = WHOLE_LOG,
        history: OnBatch | None = None,
        on_caught_up: Callable[[int], Awaitable[Any] | Any] | None = None,
        linger_s: float = 0.0,
        name: str = "horizon-follow",
    ) -> None:
        self.log = log_
        self.on_batch = on_batch
        self.history = history or on_batch
        self.on_caught_up = on_caught_up
        self.from_seq = max(1, from_seq)
        self.until_seq = until_seq
        self.subjects = tuple(subjects)
        self.linger_s = linger_s
        self.name = name
        self.end = 0  # the log's end as read at start (known once ``start`` returns)
        self.position = self.from_seq - 1  # the last sequence handed to a handler
        self.caught_up = asyncio.Event()  # set once history and ``on_caught_up`` are done and following
        self._task: asyncio.Task[None] | None = None
        self._follower: Follower | None = None
        self._stopped = False

    async def start(self) -> None:
        """Read the log's end and start catching up in the background (``until_caught_up`` waits)."""
        self.end = await self.log.last_seq() if self.until_seq is None else self.until_seq
        self._task = asyncio.create_task(self._catch_up(), name=f"{self.name}-catch-up")

    async def _catch_up(self) -> None:
        async def history(batch: list[Record]) -> None:
            await _call(self.history, batch)
            self.position = batch[-1].seq

        await read_through(self.log, history, from_seq=self.position + 1, until_seq=self.end,
                           subjects=self.subjects)
        self.position = max(self.position, self.end)
        if self.on_caught_up is not None:
            await _call(self.on_caught_up, self.end)
        if self._stopped:
            return
        self._follower = await self.log.follow(self._live, from_seq=self.position + 1, subjects=self.subjects,
                                               linger_s=self.linger_s)
        self.caught_up.set()

    async def _live(self, batch: list[Record]) -> None:
        batch = _past(batch, self.position)
        if batch:
            await _call(self.on_batch, batch)
            self.position = batch[-1].seq

    async def until_caught_up(self) -> None:
        """Until caught up and following; the catch-up's error, if it failed, is raised here."""
        assert self._task is not None, "start() first"
        await self._task

    @property
    def done(self) -> bool:
        if self._task is None:
            return False
        if not self._task.done() or self._follower is None:
            return self._task.done()
        return self._follower.done

    async def wait(self) -> None:
        """Until the loop ends: only by ``stop`` or a handler's error, which is raised here."""
        await self.until_caught_up()
        if self._follower is not None:
            await self._follower.wait()

    async def stop(self) -> None:
        """Stop catching up and following; idempotent."""
        self._stopped = True
        if self._task is not None and not self._task.done():
            await cancel_and_wait(self._task, every_s=5.0)  # past a reader's own clean-up (a 2 s delete)
        follower, self._follower = self._follower, None
        if follower is not None:
            await follower.stop()


async def follow_durable(
    log_: EventLog,
    on_batch: OnBatch,
    *,
    name: str,
    subjects: Sequence[str],
    stop: asyncio.Event,
    batch: int = 256,
    applied_seq: int = 0,
) -> int:
    """Consume the durable consumer ``name`` until ``stop`` is set; returns the last applied sequence.

    Each fetched batch goes to ``on_batch`` (``each(...)`` to decode and dead-letter) and is acked
    only after it returns. ``applied_seq``: the last sequence whose effect is already durable (e.g. a
    projection's tracking row); a record at or below it, or a redelivery of one handled in this
    process, is acked without being handed over again. Across restarts the consumer resumes after
    its last ack, and the handler's own idempotence (by sequence) covers a crash between effect and ack.
    """
    consumer = await log_.durable(name, subjects=subjects)
    try:
        while not stop.is_set():
            deliveries = await consumer.fetch(batch, timeout_s=0.5)
            fresh = _past(sorted((d.record for d in deliveries), key=lambda r: r.seq), applied_seq)
            if fresh:
                await _call(on_batch, fresh)
                applied_seq = fresh[-1].seq
            for delivery in deliveries:
                await delivery.ack()
    finally:
        await consumer.stop()
    return applied_seq
