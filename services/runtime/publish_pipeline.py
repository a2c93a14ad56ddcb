"""Publishing to JetStream fast and safely: the hand-made pipeline, fenced atomic batches, and their acks.

* **Many messages** (``PublishPipeline``): core ``publish`` on the stream
  subject *with a reply inbox* (never without: the server silently drops
  un-acked ingest under load), one wildcard subscription collecting the
  PubAcks, a bounded window in flight, and a re-publish of whatever was not
  acked in time under the *same* ``Nats-Msg-Id`` (so a retry is a duplicate,
  never a second copy).
* **A fenced atomic batch** (``publish_atomic``, nats-server 2.12+, ADR-50):
  every message but the last published without a reply, the last one
  (``Nats-Batch-Commit``) as a request; the first carries the fence, checked
  by the server against the stream as it was before the batch.

``services/runtime/jetstream.py`` uses both; the choices and their figures are
in its docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client as NATS

from services.domain.protocol import MSG_ID
from services.runtime import receive
from services.runtime.log import (
    EXPECTED_LAST_SUBJECT_SEQ, EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, Fence, LogConflict, LogError, LogUnavailable,
    Outgoing, PublishAck,
)

__all__ = ["PublishPipeline", "publish_atomic", "WRONG_LAST_SEQUENCE"]

WRONG_LAST_SEQUENCE = 10071  # JetStream API error code for Nats-Expected-Last-*-Sequence failures
BATCH_DUPLICATE = 10201  # "atomic publish batch contains duplicate message id"
BATCH_INCOMPLETE = 10176  # "atomic publish batch is incomplete": a message of it was lost on the way
BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"


class _PubAckWire(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None
    count: int = 0  # messages stored by an atomic batch (its ack's seq is the last one's)


_pub_ack = msgspec.json.Decoder(_PubAckWire)


class PublishPipeline:
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
        self._sub = await receive.subscribe_fast(self._nc, self._prefix + ".*", self._on_ack)

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
                await receive.publish(self._nc, item.subject, item.data, reply=f"{self._prefix}.{token}", headers=headers)
            if remaining[0]:  # (every ack may be in already: receive.publish can yield)
                # asyncio.timeout, not wait_for: that wraps the wait in a task of its own, and
                # creating it was 1.7% of an idle stack's time (two per job's decision)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._ack_timeout_s):
                        await done.wait()
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
                await receive.unsubscribe_fast(self._nc, self._sub)


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


async def publish_atomic(nc: NATS, part: Sequence[Outgoing], fence: Fence, next_batch_id: Callable[[], str],
                         patience_s: float = 60.0) -> list[PublishAck]:
    """Two or more messages as one fenced atomic batch, sent again whole if unanswered or incomplete.

    Sending again is safe: if the first attempt was stored after all, its msg ids no longer match,
    and the caller gets ``LogConflict`` and re-reads. An incomplete batch is sent again after a pause
    that doubles up to 5 s, for ``patience_s``: the server drops the messages of new batches while
    too many others are open (measured on 2.15.1: 60 batches opened and never committed refuse every
    atomic batch for about 5 s, with "atomic publish batch is incomplete"), and whoever opened them,
    the decider must outwait it, not give up in milliseconds.
    """
    n = len(part)
    fence_headers = {EXPECTED_LAST_SUBJECT_SEQ: str(fence.last_seq), EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: fence.subjects}
    pause = 0.25
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    attempt = 0
    while attempt == 0 or loop.time() < deadline:
        attempt += 1
        batch_id = next_batch_id()
        for index, item in enumerate(part[:-1], start=1):
            headers = {**(item.headers or {}), MSG_ID: item.msg_id, BATCH_ID: batch_id,
                       BATCH_SEQUENCE: str(index)}
            if index == 1:
                headers.update(fence_headers)  # checked against the stream as it was before the batch
            await receive.publish(nc, item.subject, item.data, headers=headers)
        item = part[-1]
        headers = {**(item.headers or {}), MSG_ID: item.msg_id, BATCH_ID: batch_id,
                   BATCH_SEQUENCE: str(n), BATCH_COMMIT: "1"}
        try:
            reply = await nc.request(item.subject, item.data, headers=headers, timeout=5.0)
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
            if code == BATCH_INCOMPLETE or ack.error.get("code") == 503:
                await asyncio.sleep(pause)
                pause = min(2 * pause, 5.0)
                continue
            raise LogError(f"{item.subject}: {text}")
        if ack.count != n:
            raise LogError(f"atomic batch of {n} messages: the server says it stored {ack.count}")
        return [PublishAck(ack.seq - n + 1 + k, False) for k in range(n)]
    raise LogUnavailable(f"a fenced batch of {n} messages was not acknowledged by the log")
