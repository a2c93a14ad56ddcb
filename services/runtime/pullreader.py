"""A hand-driven pull reader: the fast way to read a JetStream stream from Python, in order.

Why not nats-py's ordered push consumer: it answers the server's flow-control
requests from a task that polls every 250 ms, so a stream of larger events
(a ``JobAccepted`` with its spec is ~1 KB) is read in bursts separated by up
to a quarter second: we measured ~3,000 events/s. And ``fetch()`` creates a
task and a ``wait_for`` per message (~41k/s, NATS-NOTES.md).

This reader creates an ephemeral consumer (no acks, in memory, filtered,
starting at a sequence) and itself publishes
``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` requests for ``batch``
messages at a time, keeping two requests' worth of credit outstanding, with
every delivery landing in one callback that only appends to a buffer. There
is no flow control to answer: the credit *is* the window.

Robustness: every request expires after ``expires_s`` (the server then says
408 with how many messages it still owed, which returns that credit); a
watchdog recreates the consumer from the next unread sequence as soon as the
connection has reconnected (a restarted server has forgotten the consumer), or
if neither a message nor a status has arrived for twice that long (a deleted
consumer), and deliveries below the next sequence are ignored, so a
reset can neither skip nor repeat a record. Deliveries lost on the way (the
client drops messages for a subscription more than 64 MB behind; the server
cuts a connection more than 64 MB behind, and what it had not sent is gone)
show as a gap in the consumer's own delivery sequence: the reader then
re-reads from the record after the last one it kept, on a new consumer, and
ignores whatever the replaced consumer still delivers: its records (by the
consumer name in their ack subject) and the statuses of its requests (each
consumer's requests carry their own reply subject; without that, the 409
"consumer deleted" answering the old requests reset the new consumer, whose
deletion answered its requests with 409 in turn, forever). Lost deliveries at
the end of what the stream holds leave no gap to see; they show as requests
expiring while records are still pending after the last one kept, with none
kept since the previous expiry: the reader then re-reads from there too. Large messages (the
snapshot chunks) are read with a small ``batch``, so that two batches of
credit stay well under those limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from nats.js import api

from services.domain.protocol import Record
from services.runtime.cancel import cancel_and_wait
from services.runtime.receive import subscribe_fast, unsubscribe_fast

__all__ = ["PullReader", "parse_ack_subject", "parse_delivery"]

log = logging.getLogger("horizon.reader")

RECONNECT_POLL_S = 0.25  # how often the watchdog looks for a reconnect of the connection
# A reset's JetStream requests wait this long at most: one sent as the server went away (a 409
# "server shutdown" starts a reset then) is never answered, and the client's own 10 s timeout
# kept the reader blind that long after a restart (measured: 10 s after a SIGTERMed server's return).
RESET_DELETE_TIMEOUT_S = 1.0
RESET_CREATE_TIMEOUT_S = 4.0


def parse_ack_subject(reply: str) -> tuple[int, int, int, int]:
    """(stream seq, delivered count, timestamp ns, num pending) from a JetStream ack subject."""
    t = reply.split(".")
    if len(t) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(t[5]), int(t[4]), int(t[7]), int(t[8])
    # $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]
    return int(t[7]), int(t[6]), int(t[9]), int(t[10])


def parse_delivery(reply: str) -> tuple[str, int, int, int, int]:
    """(consumer, stream seq, consumer seq, timestamp ns, num pending) from a JetStream ack subject."""
    t = reply.split(".")
    if len(t) == 9:
        return t[3], int(t[5]), int(t[6]), int(t[7]), int(t[8])
    return t[5], int(t[7]), int(t[8]), int(t[9]), int(t[10])


class PullReader:
    def __init__(
        self,
        nc: Any,
        js: Any,
        stream: str,
        from_seq: int,
        subjects: Sequence[str],
        *,
        batch: int = 1000,
        expires_s: float = 5.0,
        max_buffer: int = 20_000,
    ) -> None:
        self.nc = nc
        self.js = js
        self.stream = stream
        self.subjects = list(subjects)
        self.next_seq = max(1, from_seq)
        self.batch = batch
        self.expires_s = expires_s
        self.max_buffer = max_buffer
        self.buffer: list[Record] = []
        self.pending = -1  # num_pending after the last record received
        self.initial_pending = 0
        self.arrived = asyncio.Event()
        self._inbox = nc.new_inbox()
        self._generation = 0  # one per consumer: the last token of its requests' reply subject
        self._reply = f"{self._inbox}.0"
        self._consumer = ""
        self._cseq = 0  # the consumer's delivery sequence of the last record kept
        self._kept = 0  # records kept so far
        self._kept_at_status = 0  # ... when the last request expired
        self._sub: Any = None
        self._outstanding = 0
        self._last_activity = time.monotonic()
        self._watchdog: asyncio.Task[None] | None = None
        self._requesting = False
        self._resetting = False
        self._stopped = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._request_queued = False

    async def start(self) -> None:
        await self._create()
        self._sub = await subscribe_fast(self.nc, self._inbox + ".*", self._on_msg)
        self._watchdog = asyncio.create_task(self._watch(), name="horizon-reader-watchdog")
        await self._request()

    async def _create(self) -> None:
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE if self.next_seq > 1 else api.DeliverPolicy.ALL,
            opt_start_seq=self.next_seq if self.next_seq > 1 else None,
            filter_subject=self.subjects[0] if len(self.subjects) == 1 else None,
            filter_subjects=self.subjects if len(self.subjects) > 1 else None,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
            max_waiting=512,
        )
        info = await self.js.add_consumer(self.stream, config=config)
        self._consumer = info.name
        self._generation += 1
        self._reply = f"{self._inbox}.{self._generation}"
        self._cseq = 0
        self.initial_pending = int(info.num_pending or 0)
        if self._generation > 1:  # a reset: what is left after the last record kept
            self.pending = self.initial_pending
            if self.pending == 0:
                self.arrived.set()  # a replay waiting for the rest learns there is none
        self._outstanding = 0
        self._last_activity = time.monotonic()

    async def _request(self) -> None:
        """Top the credit up to two batches, unless the buffer is full (backpressure)."""
        self._request_queued = False
        if self._requesting or self._stopped:
            return
        self._requesting = True
        try:
            subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}"
            body = json.dumps({"batch": self.batch, "expires": int(self.expires_s * 1e9)}).encode()
            while self._outstanding <= self.batch and len(self.buffer) < self.max_buffer:
                await self.nc.publish(subject, body, reply=self._reply)
                self._outstanding += self.batch
        finally:
            self._requesting = False

    def _on_msg(self, subject: str, reply: str, headers: dict[str, str] | None, data: bytes) -> None:
        """One delivery or status, synchronously from the connection's parser (services/runtime/receive.py):
        what must be awaited (more credit, a reset) runs as a task of its own."""
        self._last_activity = time.monotonic()
        if reply and reply.startswith("$JS.ACK."):
            consumer, seq, cseq, ts_ns, pending = parse_delivery(reply)
            if consumer != self._consumer:
                return  # from a consumer this reader has replaced
            self._outstanding -= 1
            if cseq != self._cseq + 1:
                log.warning("pull reader on %s: %d deliveries lost before stream seq %d (a slow consumer); "
                            "reading again from %d", self.stream, cseq - self._cseq - 1, seq, self.next_seq)
                self._spawn(self._reset())
                return
            self._cseq = cseq
            if seq >= self.next_seq:  # below it: a repeat after a reset
                self.next_seq = seq + 1
                self._kept += 1
                self.buffer.append(Record(seq, subject, data, ts_ns / 1e9, headers))
                self.pending = pending
                self.arrived.set()
            if self._outstanding <= self.batch:
                self._want_more()
            return
        if subject != self._reply:
            return  # a status for a request of a consumer this reader has replaced
        status = headers.get("Status") if headers else None
        if status in ("404", "408"):  # nothing more now / the request expired: its credit comes back
            owed = headers.get("Nats-Pending-Messages") if headers else None
            self._outstanding = max(0, self._outstanding - int(owed)) if owed else 0
            stalled = self.pending > 0 and self._kept == self._kept_at_status
            self._kept_at_status = self._kept
            if stalled:
                log.warning("pull reader on %s: %d records pending after seq %d were not received (lost on the "
                            "way); reading again from there", self.stream, self.pending, self.next_seq - 1)
                self._spawn(self._reset())
                return
            self._want_more()
        elif status == "409":  # consumer deleted, too many waiting requests, leader change...
            log.debug("pull reader on %s: %s", self.stream, headers.get("Description") if headers else "")
            self._spawn(self._reset())

    def _want_more(self) -> None:
        """Top the credit up soon (once, however many deliveries ask before it runs)."""
        if not self._request_queued and not self._stopped:
            self._request_queued = True
            self._spawn(self._request())

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reset(self) -> bool:
        """A new consumer from the next unread sequence (one reset at a time: the watchdog and the
        callback may both decide on one). False if none could be created."""
        if self._stopped or self._resetting:
            return False
        self._resetting = True
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.js.delete_consumer(self.stream, self._consumer), RESET_DELETE_TIMEOUT_S)
            try:
                await asyncio.wait_for(self._create(), RESET_CREATE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - the server may be down: the watchdog retries
                log.warning("pull reader on %s: cannot recreate its consumer: %s", self.stream, exc)
                return False
        finally:
            self._resetting = False
        await self._request()
        return True

    def _reconnects(self) -> int:
        stats = getattr(self.nc, "stats", None)
        return int(stats.get("reconnects", 0)) if isinstance(stats, dict) else 0

    async def _watch(self) -> None:
        """Every ``RECONNECT_POLL_S``: after a reconnect, a new consumer at once (a restarted server
        has forgotten ours, an in-memory ephemeral, and the requests we had outstanding; waiting for
        the silence below kept every part blind for 11-16 s); retried each poll until it works.
        Every ``expires_s``: a new consumer if neither a message nor a status came for twice that."""
        seen = announced = self._reconnects()
        checked = time.monotonic()
        while not self._stopped:
            slept = time.monotonic()
            await asyncio.sleep(RECONNECT_POLL_S)
            now = time.monotonic()
            if now - slept > RECONNECT_POLL_S + 1.0 or (self._sub is not None and self._sub.pending_msgs):
                # The event loop was busy (a long decision) or deliveries wait to be handled:
                # the silence was ours, not the server's.
                self._last_activity = now
            reconnects = self._reconnects()
            if reconnects != seen and self.nc.is_connected:
                self._last_activity = now
                if self._resetting:
                    continue  # one under way (e.g. on the old server's 409 as it shut down): its outcome first
                if reconnects != announced:
                    announced = reconnects
                    log.info("pull reader on %s: reconnected, recreating its consumer at %d", self.stream,
                             self.next_seq)
                if await self._reset():
                    seen = reconnects
                continue
            if now - checked < self.expires_s:
                continue
            checked = now
            if now - self._last_activity > 2 * self.expires_s + 1:
                log.info("pull reader on %s: silent for %.0f s, recreating its consumer at %d",
                         self.stream, time.monotonic() - self._last_activity, self.next_seq)
                self._last_activity = time.monotonic()
                await self._reset()

    def take(self) -> list[Record]:
        batch, self.buffer = self.buffer, []
        self.arrived.clear()
        if self._outstanding <= self.batch and not self._stopped:
            self._want_more()  # resume after backpressure
        return batch

    async def stop(self) -> None:
        self._stopped = True
        if self._watchdog is not None:
            await cancel_and_wait(self._watchdog)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await unsubscribe_fast(self.nc, self._sub)
            self._sub = None
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.js.delete_consumer(self.stream, self._consumer), 2.0)
