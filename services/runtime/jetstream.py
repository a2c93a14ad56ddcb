"""``JetStreamLog``: the ``EventLog`` port on NATS JetStream.

Choices, with the measurements behind them in ``../shared/NATS-NOTES.md``:

* **Publishing one event** uses ``js.publish`` (a request per message, the
  PubAck tells duplicate or sequence; expected-sequence errors become
  ``LogConflict``).
* **Publishing a leader's decisions** (``publish_fenced``) uses JetStream
  atomic batches (nats-server 2.12+, ADR-50): every message but the last
  published without a reply, the last one (``Nats-Batch-Commit``) as a
  request; the first carries the fence (``Nats-Expected-Last-Subject-Sequence``
  with ``…-Subject`` = the leader's own output filter), checked by the server
  against the stream as it was before the batch. A batch is stored whole or
  not at all, at most 1,000 messages. A single message needs no batch: one
  publish with the same two headers. Measured on file storage: a commit costs
  5-10 ms whatever the batch size (the server syncs it), against ~0.5 ms for
  one publish (``docs/reliability.md``).
* **Publishing many** is hand-pipelined (``services/runtime/publish_pipeline.py``,
  which also sends the atomic batches): core ``publish`` on the stream
  subject *with a reply inbox*, PubAcks collected by one subscription, a
  bounded window in flight, a re-publish under the *same* ``Nats-Msg-Id``.
  nats-py's ``publish_async`` does one future and task per message and is
  about half as fast.
* **Reading** (replay and the live tail) uses ``PullReader``: an ephemeral
  consumer driven by our own pull requests, deliveries appended to a buffer
  by one callback, a pump handing batches to the caller. (nats-py's ordered
  push consumer answers flow control from a 250 ms polling loop, and its
  ``fetch`` makes a task per message; see ``services/runtime/pullreader.py``.)
* **Durable consumers** are pull consumers with explicit acks, for consumers
  whose position must live in the server. (The services rebuild from the log
  and the jobs projection keeps its position in SQLite, so neither needs one.)
* **Snapshots** live in their own stream, ``HORIZON_SNAPSHOTS``: chunks
  published pipelined like ``publish_many``, then a manifest; read back with
  ``PullReader`` (``services/runtime/jetstream_snapshots.py``; nats-py's object
  store reads 10-40x slower from Python; ``services/runtime/snapshots.py`` has
  the format and the figures).

Connecting (one server or a cluster, TLS, a failure a person can act on) is
``services/runtime/natsclient.py``; its ``connect`` and ``redact_url`` are
exported here too, as every part opens the log through this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import api

from events.subjects import DLQ_STREAM, DLQ_SUBJECTS, STREAM, STREAM_SUBJECTS, WHOLE_LOG, dlq_subject
from services.domain.protocol import MSG_ID, Record
from services.runtime.jetstream_snapshots import JetStreamSnapshots
from services.runtime.log import (
    DLQ_ERROR, DLQ_SEQ, DLQ_SUBJECT, EXPECTED_LAST_SUBJECT_SEQ, EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, FENCED_BATCH_MAX,
    BatchHandler, DeadLetter, Delivery, Fence, LogConflict, LogError, LogUnavailable, Outgoing, PublishAck,
    TaskFollower, clean_header, subject_matches,
)
from services.runtime.natsclient import connect, redact_url
from services.runtime.publish_pipeline import WRONG_LAST_SEQUENCE, PublishPipeline, publish_atomic
from services.runtime.pullreader import PullReader, parse_ack_subject
from services.runtime.snapshots import SNAPSHOT_STREAM, SNAPSHOT_SUBJECTS

__all__ = ["JetStreamLog", "StreamSettings", "connect", "redact_url"]

log = logging.getLogger("horizon.log")


class StreamSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the HORIZON stream is created. Retention is *keep*: the log is the system of record."""

    replicas: int = 1
    duplicate_window_s: float = 120.0
    max_msg_size: int = 1 << 20


def _differs(current: api.StreamConfig, wanted: api.StreamConfig) -> list[str]:
    """The settings ``wanted`` sets (not None) that the stream does not have."""
    return [f.name for f in dataclasses.fields(wanted)
            if getattr(wanted, f.name) is not None and getattr(current, f.name) != getattr(wanted, f.name)]


class _JsDurable:
    def __init__(self, name: str, sub: Any, nc: NATS) -> None:
        self.name = name
        self._sub = sub
        self._nc = nc

    async def fetch(self, max_messages: int = 256, timeout_s: float = 1.0) -> list[Delivery]:
        try:
            msgs = await self._sub.fetch(max_messages, timeout=timeout_s)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return []
        out = []
        for msg in msgs:
            seq, delivered, ts_ns, _pending = parse_ack_subject(msg.reply)
            record = Record(seq, msg.subject, msg.data, ts_ns / 1e9, msg.headers)
            out.append(Delivery(record, delivered, msg.ack))
        return out

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self._nc.flush(timeout=2)  # acks sent before we go
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()


class JetStreamLog(JetStreamSnapshots):
    """The Horizon log on one JetStream stream (``HORIZON``), plus the dead-letter stream."""

    def __init__(self, nc: NATS, *, settings: StreamSettings | None = None, window: int = 4096) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.settings = settings or StreamSettings()
        self._pipeline = PublishPipeline(nc, window=window, ack_timeout_s=5.0, retries=5)
        self._batch_prefix = nc.new_inbox().rsplit(".", 1)[-1]  # unique to this connection
        self._batches = 0
        self._pipeline_started = False
        self._snapshots_ready = False
        self._log_id: str | None = None

    @classmethod
    async def open(
        cls, url: str, *, name: str = "horizon", settings: StreamSettings | None = None, create: bool = True
    ) -> JetStreamLog:
        nc = await connect(url, name=name)
        self = cls(nc, settings=settings)
        if create:
            await self.ensure_streams()
        return self

    async def ensure_streams(self) -> None:
        """Create or update the log, dead-letter and snapshot streams idempotently (safe from every service)."""
        s = self.settings
        await self._ensure(
            api.StreamConfig(
                name=STREAM,
                subjects=list(STREAM_SUBJECTS),
                storage=api.StorageType.FILE,
                retention=api.RetentionPolicy.LIMITS,
                discard=api.DiscardPolicy.NEW,
                num_replicas=s.replicas,
                duplicate_window=s.duplicate_window_s,
                max_msg_size=s.max_msg_size,
                allow_atomic=True,
                allow_direct=True,
            )
        )
        await self._ensure(
            api.StreamConfig(
                name=DLQ_STREAM,
                subjects=list(DLQ_SUBJECTS),
                storage=api.StorageType.FILE,
                num_replicas=s.replicas,
                duplicate_window=s.duplicate_window_s,
            )
        )
        await self._ensure_snapshots()

    async def _ensure_snapshots(self) -> None:
        """The snapshot stream: small (each commit prunes what it supersedes), messages up to max_payload."""
        if self._snapshots_ready:
            return
        s = self.settings
        await self._ensure(
            api.StreamConfig(
                name=SNAPSHOT_STREAM,
                subjects=list(SNAPSHOT_SUBJECTS),
                storage=api.StorageType.FILE,
                retention=api.RetentionPolicy.LIMITS,
                num_replicas=s.replicas,
                duplicate_window=s.duplicate_window_s,
            )
        )
        self._snapshots_ready = True

    async def _ensure(self, config: api.StreamConfig) -> None:
        """Create the stream, or update it if a setting we choose differs. Only then: a service's
        user may not update streams under deploy/nats/auth.conf (an update can drop records)."""
        try:
            info = await self.js.stream_info(config.name)  # type: ignore[arg-type]
        except nats.js.errors.NotFoundError:
            try:
                await self.js.add_stream(config=config)
                return
            except nats.js.errors.BadRequestError as exc:
                if "already in use" not in str(exc):  # created by a racing service meanwhile
                    raise LogError(f"cannot create stream {config.name}: {exc}") from None
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogUnavailable(f"JetStream is not answering ({type(exc).__name__}): is -js enabled?") from None
        if not _differs(info.config, config):
            return
        try:
            await self.js.update_stream(config=config)
        except nats.js.errors.APIError as exc:
            raise LogError(f"cannot update stream {config.name}: {exc}") from None

    # ---------------------------------------------------------------- publishing

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected_last_subject_seq: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishAck:
        hdrs = {MSG_ID: msg_id}
        if expected_last_subject_seq is not None:
            hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        if headers:
            hdrs.update(headers)
        try:
            ack = await self.js.publish(subject, data, headers=hdrs)
        except nats.js.errors.APIError as exc:
            if exc.err_code == WRONG_LAST_SEQUENCE:
                raise LogConflict(f"{subject}: {exc.description}") from None
            if exc.code == 503:  # JetStream (or, in a cluster, the stream's leader) unavailable for now
                raise LogUnavailable(f"publish to {subject}: {exc.description}") from None
            raise LogError(f"{subject}: {exc.description}") from None
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
                nats.js.errors.NoStreamResponseError) as exc:  # the last: a cluster electing the stream's leader
            raise LogUnavailable(f"publish to {subject}: {type(exc).__name__}") from None
        return PublishAck(ack.seq, bool(ack.duplicate))

    async def publish_many(self, items: Sequence[Outgoing]) -> list[PublishAck]:
        if not items:
            return []
        if not self._pipeline_started:
            await self._pipeline.start()
            self._pipeline_started = True
        return await self._pipeline.publish(items)

    async def publish_fenced(self, items: Sequence[Outgoing], fence: Fence) -> list[PublishAck]:
        """All or none, and only if the fence holds (see ``EventLog.publish_fenced``).

        Up to ``FENCED_BATCH_MAX`` messages per atomic batch; a longer list is several batches,
        each fenced on the last matching message of the one before (known from its ack).
        """
        acks: list[PublishAck] = []
        last = fence.last_seq
        for start in range(0, len(items), FENCED_BATCH_MAX):
            part = items[start : start + FENCED_BATCH_MAX]
            if any(i.expected_last_subject_seq is not None for i in part):
                raise ValueError("publish_fenced: the fence is the only expectation a message may carry")
            part_acks = await self._fenced_part(part, Fence(fence.subjects, last))
            acks.extend(part_acks)
            last = max((a.seq for a, i in zip(part_acks, part, strict=True)
                        if not a.duplicate and subject_matches(fence.subjects, i.subject)), default=last)
        return acks

    async def _fenced_part(self, part: Sequence[Outgoing], fence: Fence, patience_s: float = 60.0) -> list[PublishAck]:
        """One fenced publish (one message) or atomic batch (``publish_atomic``), sent again whole if
        unanswered or incomplete: if a first attempt was stored after all, the fence (or, for a batch,
        its msg ids) no longer match, and the caller gets ``LogConflict`` and re-reads."""
        if len(part) == 1:
            # One message: the publish pipeline, with the fence as its expectation (the same
            # headers; a request per message cost a random inbox token and a future each).
            item = part[0]
            return await self.publish_many([Outgoing(item.subject, item.data, item.msg_id, fence.last_seq, {
                **(item.headers or {}), EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: fence.subjects})])
        return await publish_atomic(self.nc, part, fence, self._next_batch_id, patience_s)

    def _next_batch_id(self) -> str:
        self._batches += 1
        return f"{self._batch_prefix}-{self._batches}"

    # ---------------------------------------------------------------- reading

    async def last_seq(self, subject: str | None = None) -> int:
        if subject is None:
            info = await self.js.stream_info(STREAM)
            return int(info.state.last_seq)
        return await self._seq_of(self.js.get_last_msg(STREAM, subject), f"last message on {subject}")

    async def next_seq(self, subject: str, after: int) -> int:
        return await self._seq_of(self.js.get_msg(STREAM, seq=after + 1, subject=subject, next=True),
                                  f"next message on {subject} after {after}")

    @staticmethod
    async def _seq_of(get: Awaitable[Any], what: str) -> int:
        """The sequence of the message ``get`` fetches; 0 if there is none."""
        try:
            msg = await get
        except nats.js.errors.NotFoundError:
            return 0
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogUnavailable(f"{what}: {type(exc).__name__}") from None
        return int(msg.seq or 0)

    async def _reader(self, stream: str, from_seq: int, subjects: Sequence[str], batch: int = 1000) -> PullReader:
        reader = PullReader(self.nc, self.js, stream, from_seq, subjects, batch=batch)
        await reader.start()
        return reader

    async def read(
        self,
        from_seq: int = 1,
        *,
        subjects: Sequence[str] = WHOLE_LOG,
        until_seq: int | None = None,
        stream: str = STREAM,
        batch: int = 1000,
    ) -> AsyncIterator[list[Record]]:
        """Replay: batches in log order from ``from_seq`` up to the end at the time of the call.

        ``batch``: messages per pull request (two requests' worth are in flight); smaller for
        large messages, whose bytes in flight must stay under the client's and server's limits.
        """
        if until_seq is None:
            info = await self.js.stream_info(stream)
            until_seq = int(info.state.last_seq)
        if until_seq < from_seq:
            return
        reader = await self._reader(stream, from_seq, subjects, batch)
        try:
            if reader.initial_pending == 0:
                return  # the selection is empty (nothing is delivered before we ask)
            while True:
                await reader.arrived.wait()
                batch = reader.take()
                finished = reader.pending == 0 or (batch and batch[-1].seq >= until_seq)
                if batch and batch[-1].seq > until_seq:
                    batch = [r for r in batch if r.seq <= until_seq]
                if batch:
                    yield batch
                if finished:
                    return
        finally:
            await reader.stop()

    async def follow(
        self,
        handler: BatchHandler,
        *,
        from_seq: int = 1,
        subjects: Sequence[str] = WHOLE_LOG,
        linger_s: float = 0.0,
    ) -> TaskFollower:
        """The live tail: ``handler`` gets every batch from ``from_seq`` on, one batch at a time
        (``linger_s``: see ``EventLog.follow``)."""
        reader = await self._reader(STREAM, from_seq, subjects)

        async def pump() -> None:
            while True:
                await reader.arrived.wait()
                if linger_s > 0:
                    await asyncio.sleep(linger_s)
                batch = reader.take()
                if batch:
                    await handler(batch)

        return TaskFollower(asyncio.create_task(pump(), name="horizon-follow"), reader.stop)

    async def durable(self, name: str, *, subjects: Sequence[str] = WHOLE_LOG) -> _JsDurable:
        config = api.ConsumerConfig(
            durable_name=name,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_wait=30.0,
            max_ack_pending=20_000,
            filter_subject=subjects[0] if len(subjects) == 1 else None,
            filter_subjects=list(subjects) if len(subjects) > 1 else None,
        )
        await self.js.add_consumer(STREAM, config=config)  # create, or update the filters
        sub = await self.js.pull_subscribe_bind(durable=name, stream=STREAM)
        return _JsDurable(name, sub, self.nc)

    # ---------------------------------------------------------------- dead letters

    async def dead_letter(self, service: str, record: Record, error: str) -> None:
        """Park ``record`` with its error. The letter is the body plus these headers; for a body near
        the server's max_payload that is more than the server takes (it closes the connection, the
        publish times out and the service would stop on every restart), so such a body is cut to
        what fits and the error says so. All of it stays in the log at ``DLQ_SEQ``."""
        data = record.data
        msg_id = f"dlq/{service}/{record.seq}"
        headers = {DLQ_SUBJECT: record.subject, DLQ_SEQ: str(record.seq)}
        room = self.nc.max_payload - 3 * 1024 - 256 - sum(len(k) + len(v.encode()) + 4 for k, v in headers.items())
        room -= len(MSG_ID) + len(msg_id) + 4  # the error header takes at most 1,024 characters (3 KiB)
        if len(data) > room:
            error = f"body cut to its first {room:,} of {len(data):,} bytes (all of it is at seq {record.seq}): {error}"
            data = data[:room]
        headers[DLQ_ERROR] = clean_header(error)
        await self.publish(dlq_subject(service), data, msg_id=msg_id, headers=headers)
        log.warning("dead-lettered seq %s on %s for %s: %s", record.seq, record.subject, service, error)

    async def dead_letters(self, service: str | None = None) -> list[DeadLetter]:
        subject = dlq_subject(service) if service else "horizon.dlq.>"
        out: list[DeadLetter] = []
        async for batch in self.read(1, subjects=(subject,), stream=DLQ_STREAM):
            for r in batch:
                h = r.headers or {}
                out.append(
                    DeadLetter(
                        service=r.subject.rsplit(".", 1)[1],
                        subject=h.get(DLQ_SUBJECT, ""),
                        seq=int(h.get(DLQ_SEQ, "0") or 0),
                        error=h.get(DLQ_ERROR, ""),
                        data=r.data,
                        time=r.time,
                    )
                )
        return out

    async def close(self) -> None:
        await self._pipeline.stop()
        with contextlib.suppress(Exception):
            await self.nc.drain()