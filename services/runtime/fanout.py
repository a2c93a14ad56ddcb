"""One reader for the parts of one process: one consumer, one parse and one decode of each record.

``horizon up`` runs the five decision services in one process, and each used
to read the whole log for itself: its own consumer, socket reads, protocol
parse and ``decode`` of every record (docs/benchmarks.md section 2). A
``SharedReader`` reads the log once, on one consumer with one filter subject
(never two: nats-server serves such a consumer ~25x slower), decodes each
record once, and hands every part the records it asked for. Each part keeps
everything else of its own: its state, decisions, publishing, lease, fence,
snapshots and dead letters, on its own connection.

A part joins with ``reader.follow(...)``, which takes the arguments of
``LogFollow`` and gives back an object with its interface (``start``,
``until_caught_up``, ``wait``, ``stop``, ``end``, ``position``,
``caught_up``), so the runner's contract holds as it did (follow.py):
records ``from_seq..end`` go to ``history``, then ``on_caught_up(end)``, then
the live records to ``on_batch``, each record once and in log order, never one
at or below the part's position. A batch handed over is a ``DecodedBatch``:
the records, and ``events``, each one's decoded event or the ``DecodeError``
it raised (``ServiceRunner._apply`` and ``each`` use them instead of decoding
again; the audit and the simulator already fold every core on one decoded
event, and events are frozen structs no core mutates).

**Where the one consumer starts.** At the smallest position any part needs:
the first part to join starts it from its own; a part that joins needing
records the reader has already passed rewinds it (a new consumer from that
part's position; each part skips what it already has), as long as no part
has caught up yet (the parts of a starting process restore from different
snapshots and join within moments). Once a part follows live, a newcomer
(a part restarted after a crash) does not stall it: it reads its history on
its own connection, as ``LogFollow`` does, up to where the shared reader is,
then joins it.

**Back-pressure.** Each part has a queue of what the reader handed it and has
not taken; a part takes all of it at once (while it decides, the records
behind pile up into its next batch, as before). The reader hands records out
in slices of ``max_lag`` and waits once a part has more than ``max_lag``
queued, so it never buffers without bound: the slowest part sets the pace,
with at most twice ``max_lag`` queued for it (and the pull reader behind the
reader holds at most its own buffer, then stops asking the server).

**Failures.** A part whose handler fails, or that stops, leaves the reader
(its ``wait`` raises the error as ``LogFollow``'s does); the others go on. If
the reader itself fails, every part's ``wait`` raises it (they restart, and
the first to join again starts a new reader).
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from events.base import Event
from events.codec import DecodeError
from events.subjects import WHOLE_LOG
from services.domain.protocol import Record
from services.runtime.cancel import cancel_and_wait
from services.runtime.consume import decode_record
from services.runtime.follow import OnBatch, read_through
from services.runtime.log import EventLog, Follower, subject_matches

__all__ = ["DecodedBatch", "SharedReader", "SharedFollow", "MAX_LAG"]

log = logging.getLogger("horizon.fanout")

MAX_LAG = 20_000  # records a part may have queued before the reader waits for it (the pull reader's own buffer)
_WHOLE = frozenset(("horizon.>", ">"))


class DecodedBatch(list):  # type: ignore[type-arg]  # list[Record] with the events beside it
    """Records in log order, and ``events``: each record's decoded event, or the ``DecodeError`` it raised."""

    __slots__ = ("events",)

    def __init__(self, records: Iterable[Record] = (), events: Iterable[Event | DecodeError] = ()) -> None:
        super().__init__(records)
        self.events: list[Event | DecodeError] = list(events)

    def split(self, seq: int) -> tuple[DecodedBatch, DecodedBatch]:
        """The records at or below ``seq``, and those past it."""
        i = bisect.bisect_right([r.seq for r in self], seq)
        return DecodedBatch(self[:i], self.events[:i]), DecodedBatch(self[i:], self.events[i:])


def _decode(record: Record) -> Event | DecodeError:
    try:
        return decode_record(record)
    except DecodeError as exc:
        return exc


def _merge(batches: list[DecodedBatch]) -> DecodedBatch:
    if len(batches) == 1:
        return batches[0]
    out = DecodedBatch()
    for b in batches:
        out.extend(b)
        out.events.extend(b.events)
    return out


def _accepts(reader_subjects: Sequence[str], subjects: Sequence[str]) -> Callable[[str], bool] | None:
    """A test of a record's subject for a part reading ``subjects``; None when it takes all the reader reads."""
    if set(subjects) & _WHOLE or tuple(subjects) == tuple(reader_subjects):
        return None
    prefixes = [p[:-1] for p in subjects if p.endswith(".>") and "*" not in p]
    if len(prefixes) == len(subjects):
        pre = tuple(prefixes)
        return lambda subject: subject.startswith(pre)
    patterns = tuple(subjects)
    return lambda subject: any(subject_matches(p, subject) for p in patterns)


def _covers(reader: str, part: str) -> bool:
    """True if every subject ``part`` matches is one the filter ``reader`` matches (for a ``>`` filter)."""
    return part == reader or (reader.endswith(".>") and part.startswith(reader[:-1]) and part != reader[:-1])


async def _call(handler: Callable[..., Any], *args: Any) -> None:
    result = handler(*args)
    if inspect.isawaitable(result):
        await result


class SharedReader:
    """One consumer over the log (filter ``subjects``, one subject) fanned out to the parts that ``follow`` it."""

    def __init__(self, log_: EventLog, *, subjects: Sequence[str] = WHOLE_LOG, max_lag: int = MAX_LAG,
                 name: str = "horizon-reader") -> None:
        if len(subjects) != 1:
            raise ValueError(f"a shared reader reads one filter subject, not {list(subjects)}")
        self.log = log_
        self.subjects = tuple(subjects)
        self.whole = self.subjects[0] in _WHOLE
        self.max_lag = max(1, max_lag)
        self.name = name
        self.seen = 0  # the last sequence handed out (whether or not any part took it)
        self.consumers = 0  # consumers opened so far (the first, then one per rewind or restart)
        self.decoded = 0  # records decoded (once each, whoever takes them)
        self._parts: list[SharedFollow] = []  # joined: the reader hands them records
        self._follower: Follower | None = None
        self._watch: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one join, rewind or stop of the consumer at a time

    def follow(self, part_log: EventLog, on_batch: OnBatch, *, from_seq: int = 1, until_seq: int | None = None,
               subjects: Sequence[str] = WHOLE_LOG, history: OnBatch | None = None,
               on_caught_up: Callable[[int], Awaitable[Any] | Any] | None = None, linger_s: float = 0.0,
               name: str = "horizon-follow", max_lag: int | None = None) -> SharedFollow:
        """A part's follower on this reader (``LogFollow``'s arguments; ``part_log`` is the part's own log,
        which reads its history if it joins late and learns what it reads, e.g. telemetry). ``max_lag``:
        this part's slack before the reader waits for it (default the reader's; a read model that commits
        to a database may be given more, so that the decision services do not wait for its commits)."""
        return SharedFollow(self, part_log, on_batch, from_seq=from_seq, until_seq=until_seq, subjects=subjects,
                            history=history, on_caught_up=on_caught_up, linger_s=linger_s, name=name,
                            max_lag=self.max_lag if max_lag is None else max(1, max_lag))

    @property
    def parts(self) -> int:
        return len(self._parts)

    # ---------------------------------------------------------------- joining and leaving

    async def _join(self, part: SharedFollow) -> bool:
        """Join ``part`` if the reader can serve it from its position; False if it must first read on its own."""
        async with self._lock:
            if self._follower is None:
                self._attach(part)
                await self._start(part.position + 1)
                return True
            if part.position >= self.seen:
                self._attach(part)
                return True
            if any(p.caught_up.is_set() for p in self._parts):
                return False  # a part follows live: a rewind would stall it while the newcomer catches up
            self._attach(part)
            await self._start(min(p.queued_upto for p in self._parts) + 1)  # a rewind
            return True

    async def _join_at(self, part: SharedFollow) -> bool:
        """Join ``part``, which has read on its own up to its position, if the reader is not past it."""
        async with self._lock:
            if self._follower is None or part.position >= self.seen:
                self._attach(part)
                if self._follower is None:
                    await self._start(part.position + 1)
                return True
            return False

    def _attach(self, part: SharedFollow) -> None:
        part.queued_upto = part.reached = part.position
        self._parts.append(part)
        part.wake.set()  # it may be caught up already (a position at or past its end)

    def _detach(self, part: SharedFollow) -> None:
        if part in self._parts:
            self._parts.remove(part)
        part.drained.set()  # the reader may be waiting for it

    async def _leave(self, part: SharedFollow) -> None:
        self._detach(part)
        async with self._lock:
            if not self._parts:
                await self._stop_consumer()

    # ---------------------------------------------------------------- the consumer

    async def _start(self, from_seq: int) -> None:
        await self._stop_consumer()
        self.seen = from_seq - 1
        self._follower = await self.log.follow(self._hand_out, from_seq=from_seq, subjects=self.subjects)
        self.consumers += 1
        self._watch = asyncio.create_task(self._watch_follower(self._follower), name=f"{self.name}-watch")
        log.debug("%s: consumer %d from seq %d for %d parts", self.name, self.consumers, from_seq, len(self._parts))

    async def _stop_consumer(self) -> None:
        follower, self._follower = self._follower, None
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
        if follower is not None:
            await follower.stop()

    async def _watch_follower(self, follower: Follower) -> None:
        """If the consumer's pump ends on its own (a bug: it only ends when stopped), every part learns it."""
        try:
            await follower.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to every part's wait()
            log.error("%s: the shared reader failed: %r", self.name, exc)
            failure: BaseException = exc
        else:
            failure = RuntimeError(f"{self.name}: the shared reader ended")
        if self._follower is follower:
            self._follower = self._watch = None
        parts, self._parts = self._parts, []  # each fails; the first to join again starts a new consumer
        for part in parts:
            part.failure = failure
            part.wake.set()
            part.drained.set()
        await follower.stop()  # its consumer goes too

    async def _hand_out(self, batch: list[Record]) -> None:
        """The consumer's handler: ``batch`` (all the pull reader holds, up to its own buffer) handed out in
        slices of ``max_lag``, so a part never has more than twice that queued."""
        if len(batch) <= self.max_lag:
            await self._hand_out_slice(batch)
            return
        for i in range(0, len(batch), self.max_lag):
            await self._hand_out_slice(batch[i : i + self.max_lag])

    async def _hand_out_slice(self, batch: list[Record]) -> None:
        """Each part's share of ``batch`` onto its queue, each record decoded once; then wait while a part
        has more than ``max_lag`` queued."""
        if not batch:
            return
        last = batch[-1].seq
        seqs: list[int] | None = None
        events: list[Event | DecodeError | None] = [None] * len(batch)
        for part in self._parts:
            after = part.queued_upto
            if last > after:
                first = 0
                if batch[0].seq <= after:
                    seqs = seqs or [r.seq for r in batch]
                    first = bisect.bisect_right(seqs, after)
                accepts = part.accepts
                take = range(first, len(batch)) if accepts is None else \
                    [i for i in range(first, len(batch)) if accepts(batch[i].subject)]
                if take:
                    for i in take:
                        if events[i] is None:
                            events[i] = _decode(batch[i])
                            self.decoded += 1
                    if accepts is None and first == 0:
                        share = DecodedBatch(batch, events)  # events: filled for every index just above
                    else:
                        share = DecodedBatch([batch[i] for i in take], [events[i] for i in take])
                    part.queue.append(share)
                    part.queued += len(share)
                part.queued_upto = last
            part.reached = max(part.reached, last)
            part.wake.set()
        self.seen = max(self.seen, last)
        while self._parts:
            slowest = max(self._parts, key=lambda p: p.queued - p.max_lag)
            if slowest.queued <= slowest.max_lag:
                return
            slowest.drained.clear()
            await slowest.drained.wait()

    async def close(self) -> None:
        """Stop the consumer (the parts stop themselves); the log is its owner's to close."""
        async with self._lock:
            await self._stop_consumer()


class SharedFollow:
    """One part's follower on a ``SharedReader``: ``LogFollow``'s interface (services/runtime/follow.py)."""

    def __init__(self, reader: SharedReader, part_log: EventLog, on_batch: OnBatch, *, from_seq: int,
                 until_seq: int | None, subjects: Sequence[str], history: OnBatch | None,
                 on_caught_up: Callable[[int], Awaitable[Any] | Any] | None, linger_s: float, name: str,
                 max_lag: int) -> None:
        subjects = tuple(subjects)
        if not reader.whole and not all(_covers(reader.subjects[0], p) for p in subjects):
            raise ValueError(f"{name}: reads {list(subjects)}, the shared reader only {list(reader.subjects)}")
        self.reader = reader
        self.log = part_log
        self.on_batch = on_batch
        self.history = history or on_batch
        self.on_caught_up = on_caught_up
        self.from_seq = max(1, from_seq)
        self.until_seq = until_seq
        self.subjects = subjects
        self.accepts = _accepts(reader.subjects, subjects)
        self.linger_s = linger_s
        self.name = name
        self.max_lag = max_lag
        self.end = 0  # the log's end as read at start
        self.position = self.from_seq - 1  # the last sequence handed to a handler
        self.caught_up = asyncio.Event()
        # Kept by the reader: what it has queued for this part and not yet taken, the last sequence
        # queued, the last it has handed out (taken by this part or not), and the two wake-ups.
        self.queue: list[DecodedBatch] = []
        self.queued = 0
        self.queued_upto = self.position
        self.reached = self.position
        self.wake = asyncio.Event()
        self.drained = asyncio.Event()
        self._threshold = 0  # caught up once the reader has handed out this far
        # Once caught up: every record up to ``through`` that this part reads has been handled (the reader
        # handed out that far, and the handler returned). A filtered runner learns there that only inputs
        # lie past its state, without asking the server (``services/runtime/layout.py``, step 3).
        self.through = 0
        self.failure: BaseException | None = None  # the reader's, if it failed
        self._learn: Callable[[Sequence[Record]], None] | None = getattr(part_log, "learn", None)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    async def start(self) -> None:
        """Read the log's end and start catching up in the background (``until_caught_up`` waits)."""
        self.end = await self.log.last_seq() if self.until_seq is None else self.until_seq
        self._threshold = self.end
        if not self.reader.whole:
            # The reader's filter leaves gaps: every record of it up to ``end`` is at or below its last one now.
            self._threshold = min(self.end, await self.reader.log.last_seq(self.reader.subjects[0]))
        self._task = asyncio.create_task(self._run(), name=f"{self.name}-shared")

    async def _run(self) -> None:
        try:
            if not await self.reader._join(self):
                await self._read_alone()
            await self._pump()
        finally:
            self.reader._detach(self)

    async def _read_alone(self) -> None:
        """Joining late: the history, then whatever the reader has handed out meanwhile, on the part's own
        connection (``LogFollow``'s way), until the reader is not past this part; then join it."""
        async def history(batch: list[Record]) -> None:
            await self._deliver(self.history, batch, learn=False)  # the part's log learns what it reads

        await read_through(self.log, history, from_seq=self.position + 1, until_seq=self.end, subjects=self.subjects)
        self.position = max(self.position, self.end)
        await self._caught_up()

        async def live(batch: list[Record]) -> None:
            await self._deliver(self.on_batch, batch, learn=False)

        while not await self.reader._join_at(self):
            seen = self.reader.seen
            await read_through(self.log, live, from_seq=self.position + 1, until_seq=seen, subjects=self.subjects)
            self.position = max(self.position, seen)  # read to where the reader was; it may be further now

    async def _deliver(self, handler: OnBatch, batch: list[Record], *, learn: bool = True) -> None:
        if batch and batch[0].seq <= self.position:
            keep = [i for i, r in enumerate(batch) if r.seq > self.position]
            events = getattr(batch, "events", None)
            batch = DecodedBatch([batch[i] for i in keep], [events[i] for i in keep]) if events is not None else \
                [batch[i] for i in keep]
        if not batch:
            return
        if learn and self._learn is not None:
            self._learn(batch)
        await _call(handler, batch)
        self.position = batch[-1].seq

    async def _caught_up(self) -> None:
        if self.on_caught_up is not None:
            await _call(self.on_caught_up, self.end)
        self.through = max(self.through, self.end)
        self.caught_up.set()

    async def _pump(self) -> None:
        """Take what the reader queued, all at once, and hand it over: history, caught up, live."""
        while True:
            await self.wake.wait()
            if self.linger_s > 0 and self.caught_up.is_set():
                await asyncio.sleep(self.linger_s)  # a read model lets a burst gather
            self.wake.clear()
            if self.failure is not None:
                raise self.failure
            batches, self.queue, self.queued = self.queue, [], 0
            reached = self.reached
            self.drained.set()
            batch = _merge(batches) if batches else DecodedBatch()
            if not self.caught_up.is_set():
                past, batch = batch.split(self.end)
                await self._deliver(self.history, past)
                if reached < self._threshold:
                    continue
                self.position = max(self.position, self.end)
                await self._caught_up()
            await self._deliver(self.on_batch, batch)
            self.through = max(self.through, reached)

    async def until_caught_up(self) -> None:
        """Until caught up and following; the failure, if it failed first, is raised here."""
        assert self._task is not None, "start() first"
        waiter = asyncio.ensure_future(self.caught_up.wait())
        try:
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not self.caught_up.is_set():
            await self._task  # its error (or a stop before catching up)

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def wait(self) -> None:
        """Until the loop ends: only by ``stop`` or a handler's (or the reader's) error, which is raised here."""
        assert self._task is not None, "start() first"
        await self._task

    async def stop(self) -> None:
        """Leave the reader; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None and not self._task.done():
            await cancel_and_wait(self._task, every_s=5.0)
        await self.reader._leave(self)
