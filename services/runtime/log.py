"""The ``EventLog`` port: what every Horizon service needs from the log, and nothing more.

Two implementations honour it and share one contract test suite
(``tests/contract/test_log_contract.py``): ``JetStreamLog`` (the real thing) and
``MemoryLog`` (for pure-core tests and the in-process simulator).

The contract:

* ``publish`` stores one message under a deterministic ``msg_id``; a second
  publish with the same id inside the duplicate window is *reported* as a
  duplicate (``PublishAck.duplicate``) and stored once. With
  ``expected_last_subject_seq`` it is stored only if the last message on that
  subject has exactly that sequence (0: none yet), else ``LogConflict``.
* ``publish_many`` does the same for many messages, pipelined; acks come back
  in input order.
* ``publish_fenced`` stores many messages all or none, in order and
  contiguously, and only if the last message matching the fence's subject
  filter is at the fence's sequence (0: none matches), else ``LogConflict``
  and nothing is stored. A leader publishes its decisions this way with the
  fence on its own output subjects, so a deposed leader, which has not seen
  its successor's decisions, cannot add its own. More than
  ``FENCED_BATCH_MAX`` messages go as several all-or-none parts, each fenced
  on the last of the part before. A msg id the log already holds makes a
  batch of two or more a ``LogConflict`` too (JetStream refuses an atomic
  batch that repeats one); a single message that repeats one is reported as
  a duplicate, as by ``publish``.
* ``last_seq()`` is the stream's last sequence; ``last_seq(subject)`` that of
  the last message matching the filter ``subject`` (0: none).
* ``read`` yields the messages from ``from_seq`` on, in log order, in
  batches, up to the last sequence at the time of the call (a replay).
* ``follow`` delivers batches from ``from_seq`` on and keeps delivering new
  ones until stopped (the live tail a service runs on). With ``linger_s`` > 0
  it waits that long after the first new record before handing a batch over,
  so that a read model takes a burst as one batch and leaves the processor to
  the decision services meanwhile (they follow with 0: at once).
* ``durable`` is a named consumer with explicit acks that survives restarts:
  a new instance with the same name resumes after the last acked message.
* ``dead_letter`` parks an undecodable message with its error on
  ``horizon.dlq.<service>``; ``dead_letters`` reads them back.
* ``save_snapshot`` stores a service's state as of a sequence, of any size;
  ``load_snapshot`` returns the latest one *saved* (not the highest seq), or
  None if there is none or it cannot be trusted: partially written, corrupt,
  or folded from another log (a warning says which). Never a half-written
  one: see ``services/runtime/snapshots.py``.
"""

from __future__ import annotations

import asyncio

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from events.subjects import WHOLE_LOG
from services.domain.protocol import Record
from services.runtime.cancel import cancel_and_wait

__all__ = [
    "LogError",
    "LogConflict",
    "LogUnavailable",
    "Outgoing",
    "PublishAck",
    "DeadLetter",
    "Delivery",
    "DurableConsumer",
    "Follower",
    "EventLog",
    "BatchHandler",
    "TaskFollower",
    "subject_matches",
    "EXPECTED_LAST_SUBJECT_SEQ",
    "EXPECTED_LAST_SUBJECT_SEQ_SUBJECT",
    "FENCED_BATCH_MAX",
    "READ_MODEL_LINGER_S",
    "Fence",
]

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
# With this header the expected sequence is that of the last message matching a filter (nats-server 2.11+).
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
# How long a read model lets new records gather before folding them (``follow(linger_s=...)``):
# measured on an idle ``horizon up``, the projections and the dashboard folding every record as
# it came competed with the decision services for the one event loop (docs/benchmarks.md §2).
READ_MODEL_LINGER_S = 0.02
FENCED_BATCH_MAX = 1000  # messages in one JetStream atomic batch (the server's limit)
DLQ_ERROR = "Horizon-Error"
DLQ_SUBJECT = "Horizon-Original-Subject"
DLQ_SEQ = "Horizon-Original-Seq"


class LogError(Exception):
    """Base of the log adapter's errors."""


class LogConflict(LogError):
    """An optimistic-concurrency check failed: someone else wrote that subject first."""


class LogUnavailable(LogError):
    """The log did not answer (server down, timeout); the operation may be retried with the same msg id."""


class Outgoing(NamedTuple):
    subject: str
    data: bytes
    msg_id: str
    expected_last_subject_seq: int | None = None
    headers: Mapping[str, str] | None = None


class Fence(NamedTuple):
    """Store only if the last message matching ``subjects`` (one filter) is at ``last_seq`` (0: none)."""

    subjects: str
    last_seq: int


class PublishAck(NamedTuple):
    seq: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class DeadLetter:
    service: str
    subject: str  # where the message was originally
    seq: int  # its sequence in the HORIZON stream (0 if it never was in it)
    error: str
    data: bytes
    time: float


@dataclass(slots=True)
class Delivery:
    """A message from a durable consumer; ``ack`` it once its effect is durable."""

    record: Record
    delivered: int  # how many times the log has delivered it (1 = first time)
    _ack: Callable[[], Awaitable[None]]

    async def ack(self) -> None:
        await self._ack()


class DurableConsumer(Protocol):
    name: str

    async def fetch(self, max_messages: int = 256, timeout_s: float = 1.0) -> list[Delivery]:
        """Up to ``max_messages`` not yet acked, waiting at most ``timeout_s`` for the first."""
        ...

    async def stop(self) -> None:
        """Stop receiving; the consumer's position is kept by the log for the next instance."""
        ...


BatchHandler = Callable[[list[Record]], Awaitable[None]]


class Follower(Protocol):
    async def stop(self) -> None: ...

    async def wait(self) -> None:
        """Until the follower ends: only by ``stop`` or a handler error, which is raised here."""
        ...

    @property
    def done(self) -> bool: ...


class EventLog(Protocol):
    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected_last_subject_seq: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishAck: ...

    async def publish_many(self, items: Sequence[Outgoing]) -> list[PublishAck]: ...

    async def publish_fenced(self, items: Sequence[Outgoing], fence: Fence) -> list[PublishAck]: ...

    async def last_seq(self, subject: str | None = None) -> int: ...

    async def next_seq(self, subject: str, after: int) -> int:
        """The sequence of the first record matching ``subject`` (a filter) past ``after``; 0 if none. Cheap
        on a big log where ``last_seq`` of a wide filter is not: JetStream finds the last record of a
        filter by visiting every subject it matches (millions: one per job), the next one by reading
        forward from ``after``."""
        ...

    def read(
        self, from_seq: int = 1, *, subjects: Sequence[str] = WHOLE_LOG, until_seq: int | None = None
    ) -> AsyncIterator[list[Record]]: ...

    async def follow(
        self, handler: BatchHandler, *, from_seq: int = 1, subjects: Sequence[str] = WHOLE_LOG,
        linger_s: float = 0.0,
    ) -> Follower: ...

    async def durable(self, name: str, *, subjects: Sequence[str] = WHOLE_LOG) -> DurableConsumer: ...

    async def dead_letter(self, service: str, record: Record, error: str) -> None: ...

    async def dead_letters(self, service: str | None = None) -> list[DeadLetter]: ...

    async def save_snapshot(self, name: str, seq: int, data: bytes) -> None: ...

    async def load_snapshot(self, name: str) -> tuple[int, bytes] | None: ...

    async def close(self) -> None: ...


class TaskFollower:
    """A follower whose pump is one asyncio task (both implementations use it)."""

    def __init__(self, task: asyncio.Task[None], on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
        self._task = task
        self._on_stop = on_stop

    @property
    def done(self) -> bool:
        return self._task.done()

    async def stop(self) -> None:
        await cancel_and_wait(self._task, every_s=5.0)  # past the pump's own clean-up (a 2 s consumer delete)
        if self._on_stop is not None:
            await self._on_stop()

    async def wait(self) -> None:
        """Until the pump ends (only on stop, or a handler error, which is raised here)."""
        await self._task


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: ``*`` one token, ``>`` one or more trailing tokens."""
    pat = pattern.split(".")
    sub = subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub):
            return False
        if token != "*" and token != sub[i]:
            return False
    return len(pat) == len(sub)


def clean_header(text: str, limit: int = 1024) -> str:
    """A header value: one line, bounded (NATS headers cannot carry CR/LF)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
