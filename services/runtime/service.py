"""The one adapter every decision service runs on: catch up, follow, decide, publish.

A service is a pure ``Core`` (``evolve`` folds one event into its state,
``decide`` returns the decisions the state calls for) and this runner, which
does all the I/O:

1. **Catch up.** Read the log from sequence 1 to its end at start-up and fold
   every record, deciding nothing: the log already holds what an earlier
   incarnation decided, and deciding mid-replay would decide it again.
2. **Follow.** Take the live tail in batches; fold each batch.
3. **Decide** after a batch, but only once every decision this process
   published has come back through the log (``applied_seq >= awaiting``).
   So a decision is always a pure function of the state at ``basis_seq`` =
   the last applied sequence, and two decisions never race on a state that
   does not yet show the first. Bursts batch themselves: while one decision
   round is in flight, the events behind it pile up into the next batch.
4. **Publish** the decisions pipelined, each with ``Nats-Msg-Id`` = its
   deterministic ``id``; a decision made twice (a crash between publish and
   fold) is a duplicate the log drops.

``decide`` must never return a decision that the state already reflects
(otherwise every batch would publish it again); each core's tests check
that ``decide`` after folding its own output returns nothing.

**Snapshots** (optional, duck-typed: a core with ``snapshot_every`` K > 0,
``dump(state) -> bytes`` and ``load(bytes) -> state | None``). At start the
runner loads the latest snapshot and catches up from its ``seq + 1`` instead
of 1; the core's ``load`` returns None for a snapshot another version or
configuration wrote (it embeds its own fingerprint), and the runner then
folds the whole log. While following, once the state is K records past the
last dump, it dumps synchronously (the next batch mutates the state) and
uploads in the background (``SnapshotUploader``). A snapshot is a cache of a
fold, never a source of truth: any doubt about it means a full replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from events import catalogue as c
from events.base import Event
from events.codec import DecodeError, encode
from events.subjects import event_subject
from services.runtime.consume import decode_record
from services.runtime.log import EventLog, Outgoing, Record
from services.runtime.snapshots import SnapshotUploader

__all__ = [
    "CoreState",
    "Core",
    "SnapshotCore",
    "ServiceRunner",
    "fold_record",
    "fold_event",
    "RunnerStats",
    "snapshot_interval",
    "collector_paused",
]

log = logging.getLogger("horizon.service")


class CoreState:
    """Base of every core's state: the basis of its next decision."""

    seq: int = 0  # last applied stream sequence (the basis_seq of a decision)
    now: float = 0.0  # "now": the time of the last applied event

    def __init__(self) -> None:
        self.seq = 0
        self.now = 0.0


S = TypeVar("S", bound=CoreState)


class Core(Protocol[S]):
    name: ClassVar[str]  # the service name: the <service> token of its subjects
    subjects: tuple[str, ...]  # what it folds: the whole stream, so every basis is comparable
    virtual_time: bool  # True: only ClockTicked moves "now" (simulation)

    def initial(self) -> S: ...

    def evolve(self, state: S, event: Event, record: Record) -> S: ...

    def decide(self, state: S) -> list[Event]: ...


class SnapshotCore(Core[S], Protocol[S]):
    """A core that can be snapshotted: ``load(dump(state))`` must fold on exactly like ``state``."""

    snapshot_every: int  # records between snapshots; 0 disables them

    def dump(self, state: S) -> bytes: ...

    def load(self, data: bytes) -> S | None:
        """The state in ``data``, or None if this core cannot trust it (another version or configuration)."""
        ...


def snapshot_interval(core: object) -> int:
    """K if ``core`` has the snapshot capability (``snapshot_every`` > 0, ``dump``, ``load``), else 0."""
    every = getattr(core, "snapshot_every", 0)
    if not isinstance(every, int) or every <= 0:
        return 0
    if not (callable(getattr(core, "dump", None)) and callable(getattr(core, "load", None))):
        return 0
    return every


def fold_record(core: Core[S], state: S, record: Record) -> tuple[S, Event | None, str | None]:
    """Fold one record exactly as the live runner does (also used by replay and audit).

    Returns the new state, the decoded event (or None) and the decode error (or None).
    """
    try:
        event = decode_record(record)
    except DecodeError as exc:
        state.seq = record.seq
        return state, None, str(exc)
    return fold_event(core, state, record, event), event, None


def fold_event(core: Core[S], state: S, record: Record, event: Event) -> S:
    """Fold an already decoded event (the in-process simulator decodes nothing)."""
    state.seq = record.seq
    # "now": live, the time the log stored the record (neither a client's ts nor a
    # ClockTicked is trusted); at virtual time the whole log is the simulator's, so its
    # event times and ticks are the clock.
    if core.virtual_time:
        state.now = max(state.now, event.now_ts if isinstance(event, c.ClockTicked) else event.ts)
    else:
        state.now = max(state.now, record.time)
    return core.evolve(state, event, record)


@contextlib.contextmanager
def collector_paused() -> Any:
    """Pause Python's cyclic garbage collector while a snapshot is decoded.

    Decoding allocates hundreds of thousands of objects that all survive, and
    the collections their allocation triggers walk the growing heap again and
    again: measured, the collector took half of the scheduling core's ``load``
    (20,000 jobs, 15 MB: 0.36 s, 0.18 s with it paused). Nothing decoded is
    garbage, so pausing it leaves nothing to collect later.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class RunnerStats:
    applied_seq: int = 0
    caught_up_seq: int = 0
    decide_rounds: int = 0
    decisions: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    restored_from_seq: int = 0  # the snapshot the last start began from (0: folded from seq 1)
    snapshots_saved: int = 0
    snapshot_failures: int = 0
    snapshot_seq: int = 0  # seq of the last snapshot stored by this runner


class ServiceRunner(Generic[S]):
    def __init__(
        self, log_: EventLog, core: Core[S], *, dead_letter_inputs: bool | None = None, snapshots: bool = True
    ) -> None:
        self.log = log_
        self.core = core
        self.state: S = core.initial()
        self.awaiting = 0
        self.stats = RunnerStats()
        # Undecodable client inputs are dead-lettered once, by the service that owns
        # them (submission); everyone dead-letters output events it cannot read.
        self.dead_letter_inputs = core.name == "submission" if dead_letter_inputs is None else dead_letter_inputs
        self.ready = asyncio.Event()
        # The last sequence at which this service had applied everything it published and
        # found nothing to decide; ``progress`` is set whenever it moves (the simulator's barrier).
        self.idle_seq = 0
        self.progress = asyncio.Event()
        self._dead_lettered: set[int] = set()
        # Decisions published and not yet folded back, by msg id: when one comes back through
        # the log it is folded from this object instead of being decoded again (a round trip
        # through msgspec is exact, so the state is the same either way; replay decodes).
        self._own: dict[str, Event] = {}
        self._follower: Any = None
        self._lock = asyncio.Lock()
        # Snapshots (``snapshots=False`` turns them off, e.g. to measure a full replay).
        self.snapshot_every = snapshot_interval(core) if snapshots else 0
        self._dumped_seq = 0  # seq of the last dump (or of the snapshot started from)
        self._uploader = SnapshotUploader(core.name, self._save_snapshot) if self.snapshot_every else None

    @property
    def name(self) -> str:
        return self.core.name

    async def _apply(self, batch: Sequence[Record]) -> None:
        for record in batch:
            if record.seq <= self.state.seq:
                continue  # already folded (a reader restart may repeat the tail)
            own = self._own.pop(record.msg_id, None) if self._own and record.headers else None
            if own is not None and record.subject == event_subject(self.name, own):
                self.state = fold_event(self.core, self.state, record, own)
                continue
            self.state, _event, error = fold_record(self.core, self.state, record)
            if error is not None:
                await self._undecodable(record, error)
        self.stats.applied_seq = self.state.seq

    async def _undecodable(self, record: Record, error: str) -> None:
        is_input = record.subject.startswith("horizon.in.")
        if is_input and not self.dead_letter_inputs:
            log.debug("%s: skipping undecodable input seq %s: %s", self.name, record.seq, error)
            return
        if record.seq in self._dead_lettered:
            return  # parked by an earlier incarnation; a catch-up does not park it again
        self._dead_lettered.add(record.seq)
        self.stats.dead_letters += 1
        await self.log.dead_letter(self.name, record, error)

    async def decide_now(self) -> list[Event]:
        """One decision round, if the state is caught up with our own publications."""
        if self.state.seq < self.awaiting:
            return []
        decisions = self.core.decide(self.state)
        if not decisions:
            return []
        self.stats.decide_rounds += 1
        items = [Outgoing(event_subject(self.name, e), encode(e), e.id) for e in decisions]
        acks = await self.log.publish_many(items)
        for event, ack in zip(decisions, acks, strict=True):
            if not ack.duplicate and ack.seq > self.state.seq:
                self._own[event.id] = event
        self.stats.decisions += sum(1 for a in acks if not a.duplicate)
        self.stats.duplicates += sum(1 for a in acks if a.duplicate)
        highest = max(a.seq for a in acks)
        if highest <= self.state.seq:
            log.error(
                "%s decided %d events that the log already holds (basis %d): a core that repeats itself",
                self.name, len(decisions), self.state.seq,
            )
        self.awaiting = max(self.awaiting, highest)
        return decisions

    async def _decide_or_rest(self) -> None:
        if self.state.seq < self.awaiting:
            return
        if not await self.decide_now():
            self.idle_seq = self.state.seq
            self.progress.set()

    async def _on_batch(self, batch: list[Record]) -> None:
        async with self._lock:
            await self._apply(batch)
            # The dump is of the state at a record boundary, before deciding: deciding awaits the
            # log, and whoever sees this state applied must find its snapshot already offered.
            self._maybe_snapshot()
            await self._decide_or_rest()

    # ---------------------------------------------------------------- snapshots

    async def _restore(self, end: int) -> int:
        """Load the latest snapshot into the state if it can be trusted; the seq to catch up after (0: none)."""
        if not self.snapshot_every:
            return 0
        core: Any = self.core
        try:
            found = await self.log.load_snapshot(self.name)
        except Exception as exc:  # noqa: BLE001 - the log itself is still there to fold
            log.warning("%s: cannot read its snapshot (%s: %s): folding the whole log", self.name,
                        type(exc).__name__, exc)
            return 0
        if found is None:
            log.info("%s: no snapshot: folding the whole log", self.name)
            return 0
        seq, data = found
        why = ""
        state = None
        if seq > end:
            why = f"it is at seq {seq}, past the end of the log ({end})"
        else:
            try:
                with collector_paused():
                    state = core.load(data)
            except Exception as exc:  # noqa: BLE001 - a snapshot this code cannot read is not trusted
                why = f"load failed: {type(exc).__name__}: {exc}"
            else:
                if state is None:
                    why = "the core does not accept it (another version or configuration)"
                elif state.seq != seq:
                    why = f"its state is at seq {state.seq}, the snapshot says {seq}"
        if why:
            log.warning("%s: ignoring the snapshot at seq %d: %s; folding the whole log", self.name, seq, why)
            return 0
        self.state = state
        self._dumped_seq = seq
        self.stats.restored_from_seq = seq
        self.stats.applied_seq = seq
        log.info("%s: restored from the snapshot at seq %d (%d bytes)", self.name, seq, len(data))
        return seq

    def _maybe_snapshot(self) -> None:
        """Dump the state once it is ``snapshot_every`` records past the last dump; upload in the background."""
        if self._uploader is None or self.state.seq - self._dumped_seq < self.snapshot_every:
            return
        self._dumped_seq = self.state.seq
        core: Any = self.core
        try:
            data = core.dump(self.state)
        except Exception:  # noqa: BLE001 - a snapshot is an optimisation; the service goes on without it
            log.exception("%s: dump of the state at seq %d failed", self.name, self.state.seq)
            self.stats.snapshot_failures += 1
            return
        self._uploader.offer(self.state.seq, data)

    async def _save_snapshot(self, name: str, seq: int, data: bytes) -> None:
        try:
            await self.log.save_snapshot(name, seq, data)
        except Exception:
            self.stats.snapshot_failures += 1
            raise
        self.stats.snapshots_saved += 1
        self.stats.snapshot_seq = seq

    async def flush_snapshots(self) -> None:
        """Until the snapshot being uploaded, if any, is stored (tests, benchmarks, a graceful stop)."""
        if self._uploader is not None:
            await self._uploader.flush()

    # ---------------------------------------------------------------- life cycle

    async def start(self) -> None:
        """Catch up with the log (from the latest snapshot, if any), decide once, then follow it."""
        self._dead_lettered = {d.seq for d in await self.log.dead_letters(self.name)}
        end = await self.log.last_seq()
        restored = await self._restore(end)
        async for batch in self.log.read(restored + 1, subjects=self.core.subjects, until_seq=end):
            await self._apply(batch)
        self.state.seq = max(self.state.seq, end)
        self.stats.caught_up_seq = end
        log.info("%s caught up to seq %d", self.name, end)
        async with self._lock:
            await self._decide_or_rest()
            self._maybe_snapshot()
        self._follower = await self.log.follow(self._on_batch, from_seq=end + 1, subjects=self.core.subjects)
        self.ready.set()

    async def wait(self) -> None:
        """Until the follower ends (cancelled, or a failure, which is raised here)."""
        await self._follower.wait()

    async def run(self) -> None:
        """Start and run until cancelled."""
        await self.start()
        try:
            await self.wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        if self._uploader is not None:
            await self._uploader.close()
