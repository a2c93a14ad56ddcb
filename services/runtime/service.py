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
"""

from __future__ import annotations

import asyncio
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

__all__ = ["CoreState", "Core", "ServiceRunner", "fold_record", "fold_event", "RunnerStats"]

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


@dataclass
class RunnerStats:
    applied_seq: int = 0
    caught_up_seq: int = 0
    decide_rounds: int = 0
    decisions: int = 0
    duplicates: int = 0
    dead_letters: int = 0


class ServiceRunner(Generic[S]):
    def __init__(self, log_: EventLog, core: Core[S], *, dead_letter_inputs: bool | None = None) -> None:
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
            await self._decide_or_rest()

    async def start(self) -> None:
        """Catch up with the log, decide once, then follow it (returns once following)."""
        self._dead_lettered = {d.seq for d in await self.log.dead_letters(self.name)}
        end = await self.log.last_seq()
        async for batch in self.log.read(1, subjects=self.core.subjects, until_seq=end):
            await self._apply(batch)
        self.state.seq = max(self.state.seq, end)
        self.stats.caught_up_seq = end
        log.info("%s caught up to seq %d", self.name, end)
        async with self._lock:
            await self._decide_or_rest()
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
