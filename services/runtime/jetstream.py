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
* **Publishing many** is hand-pipelined: core ``publish`` on the stream
  subject *with a reply inbox* (never without: the server silently drops
  un-acked ingest under load), one wildcard subscription collecting the
  PubAcks, a bounded window in flight, and a re-publish of whatever was not
  acked in time under the *same* ``Nats-Msg-Id`` (so a retry is a duplicate,
  never a second copy). nats-py's ``publish_async`` does one future and task
  per message and is about half as fast.
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
  ``PullReader`` (nats-py's object store reads 10-40x slower from Python;
  ``services/runtime/snapshots.py`` has the format and the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import api

from events.subjects import DLQ_STREAM, DLQ_SUBJECTS, STREAM, STREAM_SUBJECTS, WHOLE_LOG, dlq_subject
from services.runtime.tls import TlsSettingsError, client_tls, quiet_ssl_eof
from services.runtime import receive as wire
from services.runtime.pullreader import PullReader, parse_ack_subject
from services.runtime.log import DLQ_ERROR, DLQ_SEQ, DLQ_SUBJECT, EXPECTED_LAST_SUBJECT_SEQ, EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, FENCED_BATCH_MAX, BatchHandler, DeadLetter, Delivery, Fence, LogConflict, LogError, LogUnavailable, Outgoing, PublishAck, TaskFollower, clean_header, subject_matches
from services.domain.protocol import MSG_ID, Record
from services.runtime.snapshots import (
    CHUNK_INDEX,
    CHUNK_SIZE,
    SNAPSHOT_STREAM,
    SNAPSHOT_SUBJECTS,
    Manifest,
    SnapshotInvalid,
    assemble,
    chunk_subject,
    chunks_filter,
    decode_manifest,
    encode_manifest,
    make_manifest,
    manifest_subject,
    new_snapshot_id,
    split,
)

__all__ = ["JetStreamLog", "StreamSettings", "connect", "redact_url"]

log = logging.getLogger("horizon.log")

WRONG_LAST_SEQUENCE = 10071  # JetStream API error code for Nats-Expected-Last-*-Sequence failures
BATCH_DUPLICATE = 10201  # "atomic publish batch contains duplicate message id"
BATCH_INCOMPLETE = 10176  # "atomic publish batch is incomplete": a message of it was lost on the way
BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"


class StreamSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the HORIZON stream is created. Retention is *keep*: the log is the system of record."""

    replicas: int = 1
    duplicate_window_s: float = 120.0
    max_msg_size: int = 1 << 20


class _PubAckWire(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None
    count: int = 0  # messages stored by an atomic batch (its ack's seq is the last one's)


_pub_ack = msgspec.json.Decoder(_PubAckWire)


async def connect(
    url: str, *, name: str = "horizon", connect_timeout_s: float = 5.0, max_attempts: int = -1,
    tls: ssl.SSLContext | None = None,
) -> NATS:
    """Connect, reconnecting forever once connected.

    ``url``: one server, or several separated by commas (the members of a NATS cluster; the
    client picks one and moves to another when it fails).
    ``max_attempts``: connection attempts before giving up with ``LogUnavailable``
    (-1, the default for services, waits for the server as long as it takes; the
    CLI passes a small number so a person gets an answer).
    ``tls``: the TLS context; by default the one ``HORIZON_TLS_CA``/``_CERT``/``_KEY`` describe
    (services/runtime/tls.py), if any.
    """

    errors: list[Exception] = []  # what the client met on its way, for the answer if it gives up
    refused_tls = asyncio.Event()

    async def _quiet(exc: Exception) -> None:
        errors.append(exc)
        if isinstance(exc, ssl.SSLError):
            refused_tls.set()
        log.debug("nats: %s", exc)

    quiet_ssl_eof()
    if tls is None:
        try:
            tls = client_tls()
        except TlsSettingsError as exc:
            raise LogUnavailable(f"cannot connect to NATS: {exc}") from None
    options: dict[str, Any] = {"tls": tls} if tls is not None else {}
    servers = [u.strip() for u in url.split(",") if u.strip()]
    connecting = nats.connect(
        servers=servers,
        name=name,
        connect_timeout=connect_timeout_s,
        allow_reconnect=True,
        max_reconnect_attempts=max_attempts,
        reconnect_time_wait=0.25,
        error_cb=_quiet,
        **options,
    )
    try:
        if max_attempts < 0:
            nc = await connecting
        else:
            nc = await _give_up_in_time(connecting, refused_tls,
                                        (connect_timeout_s + 0.25) * (max_attempts + 1) * len(servers) + 2.0)
    except (nats.errors.NoServersError, OSError, asyncio.TimeoutError) as exc:
        tls_error = _tls_refusal(errors, tls)
        if tls_error is not None:
            raise LogUnavailable(
                f"cannot connect to NATS at {redact_url(url)}: TLS handshake failed ({tls_error}). A server "
                f"under --tls needs HORIZON_TLS_CA, HORIZON_TLS_CERT and HORIZON_TLS_KEY (docs/tenants.md)"
            ) from None
        met = f" (last: {type(errors[-1]).__name__}: {errors[-1]})" if errors else ""
        raise LogUnavailable(
            f"cannot reach NATS at {redact_url(url)}: {exc or type(exc).__name__}{met}. Start it with `horizon nats` "
            f"or `horizon up`, or pass --nats URL"
        ) from None
    return wire.install(nc)


def _tls_refusal(errors: Sequence[Exception], tls: ssl.SSLContext | None) -> str | None:
    """Why the server refused this client's TLS, from what the client met, or None if it did not."""
    refused = next((e for e in reversed(errors) if isinstance(e, ssl.SSLError)), None)
    if refused is not None:
        return str(refused)
    if tls is not None and not os.environ.get("HORIZON_TLS_CERT") and any(
            isinstance(e, (ConnectionResetError, BrokenPipeError, nats.errors.UnexpectedEOF)) for e in errors):
        # TLS 1.3: a server that wants a client certificate refuses the missing one after the client's side
        # of the handshake is done; the alert may be lost to the closed connection, leaving an EOF
        return "the server closed the connection after the handshake: it wants a client certificate"
    return None


async def _give_up_in_time(connecting: Any, refused_tls: asyncio.Event, budget_s: float) -> NATS:
    """``connecting``'s client, or ``asyncio.TimeoutError`` once a TLS handshake has been refused or
    ``budget_s`` is over. nats-py can hang for good closing a connection whose TLS handshake failed
    (a server under --tls, a client without the certificates: nats-io/nats.py#718), and a refused
    certificate is refused again on every attempt; a caller that gives up after some attempts (the
    CLI) gets its answer then."""
    task = asyncio.ensure_future(connecting)
    refused = asyncio.ensure_future(refused_tls.wait())
    try:
        done, _ = await asyncio.wait({task, refused}, timeout=budget_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        refused.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise asyncio.TimeoutError


class _Pipeline:
    """Pipelined publishing: core publish with reply inboxes, PubAcks collected by one subscription."""

    def __init__(self, nc: NATS, window: int, ack_timeout_s: float, retries: int) -> None:
        self._nc = nc
        self._window = window
        self._ack_timeout_s = ack_timeout_s
        self._retries = retries
        self._prefix = nc.new_inbox()
        self._sub: Any = None
        self._next = 0
        self._waiting: dict[int, tuple[list[bytes | None], int, asyncio.Event, list[int]]] = {}
        self._in_flight = 0
        self._space = asyncio.Event()
        self._space.set()

    async def start(self) -> None:
        self._sub = await wire.subscribe_fast(self._nc, self._prefix + ".*", self._on_ack)

    def _on_ack(self, subject: str, _reply: str, headers: dict[str, str] | None, data: bytes) -> None:
        token = int(subject.rsplit(".", 1)[1])
        entry = self._waiting.pop(token, None)
        if entry is None:
            return  # a late ack for a message already re-published and answered
        results, index, done, remaining = entry
        if not data and headers and headers.get("Status") == "503":
            data = b'{"error":{"code":503,"description":"no responders"}}'
        results[index] = data
        remaining[0] -= 1
        self._in_flight -= 1
        if self._in_flight < self._window:
            self._space.set()
        if remaining[0] == 0:
            done.set()

    async def publish(self, items: Sequence[Outgoing]) -> list[PublishAck]:
        """Unanswered messages are sent again under the same msg id: those with no ack within
        ``ack_timeout_s`` (each attempt waits that long), and those answered 503 at once: no stream
        took them (not created yet, or, in a cluster, its leader is being elected, which takes
        seconds), sent again after a pause that doubles up to 1 s. Both within (retries + 1) x
        ack_timeout_s.
        """
        results: list[bytes | None] = [None] * len(items)
        todo = list(range(len(items)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._retries + 1) * self._ack_timeout_s
        pause, attempt, refused = 0.25, 0, b""
        while todo:
            attempt += 1
            done = asyncio.Event()
            remaining = [len(todo)]
            tokens: list[int] = []
            for index in todo:
                while self._in_flight >= self._window:
                    self._space.clear()
                    await self._space.wait()
                item = items[index]
                token = self._next
                self._next += 1
                tokens.append(token)
                self._waiting[token] = (results, index, done, remaining)
                self._in_flight += 1
                headers = {MSG_ID: item.msg_id}
                if item.expected_last_subject_seq is not None:
                    headers[EXPECTED_LAST_SUBJECT_SEQ] = str(item.expected_last_subject_seq)
                if item.headers:
                    headers.update(item.headers)
                await wire.publish(self._nc, item.subject, item.data, reply=f"{self._prefix}.{token}", headers=headers)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), self._ack_timeout_s)
            # Whatever is still unanswered is forgotten and published again with the same msg id.
            for token in tokens:
                if self._waiting.pop(token, None) is not None:
                    self._in_flight -= 1
            self._space.set()
            unavailable = [i for i in todo if _unavailable(results[i])]
            for i in unavailable:
                refused, results[i] = results[i] or refused, None
            todo = [i for i in todo if results[i] is None]
            if not todo or loop.time() >= deadline or (attempt > self._retries and not unavailable):
                break
            if unavailable:
                await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
                pause = min(2 * pause, 1.0)  # an election takes seconds: ask again every second meanwhile
        if todo and refused:
            error = _pub_ack.decode(refused).error or {}
            raise LogUnavailable(f"{len(todo)} of {len(items)} messages were not stored: "
                                 f"{error.get('description', 'unavailable')} (is the stream created? on a "
                                 f"cluster, do most of its servers run?)")
        if todo:
            raise LogUnavailable(f"{len(todo)} of {len(items)} messages were not acknowledged by the log")
        return [_ack_from(results[i], items[i]) for i in range(len(items))]  # type: ignore[arg-type]

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await wire.unsubscribe_fast(self._nc, self._sub)


def _unavailable(data: bytes | None) -> bool:
    """A PubAck saying 503: nothing was stored, and asking again later may work."""
    if data is None or b"503" not in data:  # the cheap test first: most acks are a stream and a seq
        return False
    error = _pub_ack.decode(data).error
    return bool(error) and error.get("code") == 503


def _ack_from(data: bytes, item: Outgoing) -> PublishAck:
    ack = _pub_ack.decode(data)
    if ack.error:
        code = ack.error.get("err_code")
        text = ack.error.get("description", "publish failed")
        if code == WRONG_LAST_SEQUENCE:
            raise LogConflict(f"{item.subject}: {text}")
        raise LogError(f"{item.subject}: {text}")
    return PublishAck(ack.seq, ack.duplicate)


def _differs(current: api.StreamConfig, wanted: api.StreamConfig) -> list[str]:
    """The settings ``wanted`` sets (not None) that the stream does not have."""
    return [f.name for f in dataclasses.fields(wanted)
            if getattr(wanted, f.name) is not None and getattr(current, f.name) != getattr(wanted, f.name)]


def redact_url(url: str) -> str:
    """``url`` (one or several, comma-separated) with its secret (the password of ``user:password@``,
    a ``token@``) replaced by ``***``, for messages and logs."""
    return ",".join(_SECRET.sub(lambda m: f"{m[1]}{m[2] + ':' if m[3] is not None else ''}***@", u.strip())
                    for u in url.split(","))


_SECRET = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^:@/]*)(?::([^@/]*))?@")


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


class JetStreamLog:
    """The Horizon log on one JetStream stream (``HORIZON``), plus the dead-letter stream."""

    def __init__(self, nc: NATS, *, settings: StreamSettings | None = None, window: int = 4096) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.settings = settings or StreamSettings()
        self._pipeline = _Pipeline(nc, window=window, ack_timeout_s=5.0, retries=5)
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
        """One fenced publish (one message) or atomic batch, sent again whole if unanswered or incomplete.

        Sending again is safe: if the first attempt was stored after all, the fence (or, for a
        batch, its msg ids) no longer match, and the caller gets ``LogConflict`` and re-reads.

        An incomplete batch is sent again after a pause that doubles up to 5 s, for ``patience_s``:
        the server drops the messages of new batches while too many others are open (measured on
        2.15.1: 60 batches opened and never committed refuse every atomic batch for about 5 s, with
        "atomic publish batch is incomplete"), and whoever opened them, the decider must outwait
        it, not give up in milliseconds.
        """
        n = len(part)
        if n == 1:
            # One message: the publish pipeline, with the fence as its expectation (the same
            # headers; a request per message cost a random inbox token and a future each).
            item = part[0]
            return await self.publish_many([Outgoing(item.subject, item.data, item.msg_id, fence.last_seq, {
                **(item.headers or {}), EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: fence.subjects})])
        fence_headers = {EXPECTED_LAST_SUBJECT_SEQ: str(fence.last_seq), EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: fence.subjects}
        pause = 0.25
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience_s
        attempt = 0
        while attempt == 0 or loop.time() < deadline:
            attempt += 1
            self._batches += 1
            batch_id = f"{self._batch_prefix}-{self._batches}"
            for index, item in enumerate(part[:-1], start=1):
                headers = {**(item.headers or {}), MSG_ID: item.msg_id, BATCH_ID: batch_id,
                           BATCH_SEQUENCE: str(index)}
                if index == 1:
                    headers.update(fence_headers)  # checked against the stream as it was before the batch
                await wire.publish(self.nc, item.subject, item.data, headers=headers)
            item = part[-1]
            headers = {**(item.headers or {}), MSG_ID: item.msg_id, BATCH_ID: batch_id,
                       BATCH_SEQUENCE: str(n), BATCH_COMMIT: "1"}
            try:
                reply = await self.nc.request(item.subject, item.data, headers=headers, timeout=5.0)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                continue
            except nats.errors.NoRespondersError:
                # No stream took it (not created yet; on a cluster, its leader being elected): later.
                await asyncio.sleep(pause)
                pause = min(2 * pause, 5.0)
                continue
            except nats.errors.ConnectionClosedError as exc:
                raise LogUnavailable(f"publish to {item.subject}: {type(exc).__name__}") from None
            ack = _pub_ack.decode(reply.data or b"{}")
            if ack.error:
                code = ack.error.get("err_code")
                text = ack.error.get("description", "publish failed")
                if code in (WRONG_LAST_SEQUENCE, BATCH_DUPLICATE):
                    raise LogConflict(f"{fence.subjects}: {text}")
                if code == BATCH_INCOMPLETE:
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, 5.0)
                    continue
                if ack.error.get("code") == 503:
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, 5.0)
                    continue
                raise LogError(f"{item.subject}: {text}")
            if ack.count != n:
                raise LogError(f"atomic batch of {n} messages: the server says it stored {ack.count}")
            return [PublishAck(ack.seq - n + 1 + k, False) for k in range(n)]
        raise LogUnavailable(f"a fenced batch of {n} messages was not acknowledged by the log")

    # ---------------------------------------------------------------- reading

    async def last_seq(self, subject: str | None = None) -> int:
        if subject is None:
            info = await self.js.stream_info(STREAM)
            return int(info.state.last_seq)
        try:
            msg = await self.js.get_last_msg(STREAM, subject)
        except nats.js.errors.NotFoundError:
            return 0
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogUnavailable(f"last message on {subject}: {type(exc).__name__}") from None
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

    # ---------------------------------------------------------------- snapshots

    async def save_snapshot(self, name: str, seq: int, data: bytes) -> None:
        """Chunks first, then the manifest that commits them, then prune what it supersedes."""
        await self._ensure_snapshots()
        snap_id = new_snapshot_id(seq)
        parts = split(bytes(data), min(CHUNK_SIZE, max(1024, self.nc.max_payload // 2)))
        first = await self._write_snapshot_chunks(name, snap_id, parts)
        manifest = make_manifest(name, snap_id, seq, data, len(parts), await self.log_identity(), first)
        await self._commit_snapshot(manifest)

    async def load_snapshot(self, name: str) -> tuple[int, bytes] | None:
        for _attempt in range(3):
            try:
                manifest = await self._snapshot_manifest(name)
            except SnapshotInvalid as exc:
                log.warning("%s: ignoring its snapshot: %s", name, exc)
                return None
            if manifest is None:
                return None
            parts = await self._read_chunks(manifest)
            try:
                return manifest.seq, assemble(manifest, parts, name=name, log_id=await self.log_identity())
            except SnapshotInvalid as exc:
                with contextlib.suppress(SnapshotInvalid):
                    latest = await self._snapshot_manifest(name)
                    if latest is not None and latest.id != manifest.id:
                        continue  # a newer commit pruned these chunks while we read: read that one
                log.warning("%s: ignoring its snapshot at seq %d: %s", name, manifest.seq, exc)
                return None
        log.warning("%s: its snapshot kept changing while being read; none loaded", name)
        return None

    async def log_identity(self) -> str:
        """Which log this is: the stream's creation time (a deleted and recreated stream is another log)."""
        if self._log_id is None:
            try:
                info = await self.js.stream_info(STREAM)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
                raise LogUnavailable(f"stream info: {type(exc).__name__}") from None
            self._log_id = f"{STREAM}@{info.created.isoformat() if info.created else ''}"
        return self._log_id

    async def _write_snapshot_chunks(self, name: str, snap_id: str, parts: list[bytes]) -> int:
        """Step 1 of a save (its own method for the contract tests): the stream sequence of the first chunk."""
        subject = chunk_subject(name, snap_id)
        items = [
            Outgoing(subject, part, f"snapshot/{name}/{snap_id}/{i}", headers={CHUNK_INDEX: str(i)})
            for i, part in enumerate(parts)
        ]
        # At most 16 MiB unacknowledged: with hundreds of chunks in flight the server answers some
        # with "too many requests" (measured at 400 MB in one go).
        group = max(1, (16 << 20) // max(1, max((len(p) for p in parts), default=1)))
        acks: list[PublishAck] = []
        for i in range(0, len(items), group):
            acks.extend(await self.publish_many(items[i : i + group]))
        return min((a.seq for a in acks), default=0)

    async def _commit_snapshot(self, manifest: Manifest) -> None:
        """Step 2: the manifest; then older chunks and manifests of the name go (a failure there is harmless)."""
        name = manifest.name
        ack = await self.publish(
            manifest_subject(name), encode_manifest(manifest), msg_id=f"snapshot/{name}/{manifest.id}/manifest"
        )
        try:
            await self.js.purge_stream(SNAPSHOT_STREAM, seq=manifest.first_chunk_seq or ack.seq,
                                       subject=chunks_filter(name))
            await self.js.purge_stream(SNAPSHOT_STREAM, subject=manifest_subject(name), keep=1)
        except Exception as exc:  # noqa: BLE001 - stale chunks cost space, never correctness
            log.warning("%s: could not prune older snapshots: %s", name, exc)

    async def _snapshot_manifest(self, name: str) -> Manifest | None:
        try:
            raw = await self.js.get_last_msg(SNAPSHOT_STREAM, manifest_subject(name))
        except nats.js.errors.NotFoundError:
            return None  # no snapshot stream yet, or no snapshot of this name
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogUnavailable(f"snapshot manifest of {name}: {type(exc).__name__}") from None
        return decode_manifest(raw.data or b"")

    async def _read_chunks(self, manifest: Manifest) -> list[tuple[int, bytes]]:
        if manifest.chunks == 0:
            return []
        parts: list[tuple[int, bytes]] = []
        subject = chunk_subject(manifest.name, manifest.id)
        # 16 MiB of credit per pull request: two in flight stay under the 64 MB a subscription or a
        # connection may fall behind before messages are dropped (measured: a 160 MB snapshot read
        # with 1,000-message requests had its connection cut again and again).
        window = max(1, (16 << 20) // max(1, manifest.size // max(1, manifest.chunks)))
        async for batch in self.read(max(1, manifest.first_chunk_seq), subjects=(subject,), stream=SNAPSHOT_STREAM,
                                     batch=window):
            for record in batch:
                index = (record.headers or {}).get(CHUNK_INDEX, "")
                parts.append((int(index) if index.isdigit() else -1, record.data))
        return parts

    async def close(self) -> None:
        await self._pipeline.stop()
        with contextlib.suppress(Exception):
            await self.nc.drain()
