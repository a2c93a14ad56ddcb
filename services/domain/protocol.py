"""What a pure core is: the record it folds, the state it keeps, the protocol it implements. Pure.

A service is a **core** (this protocol: ``initial``, ``evolve``, ``decide``;
no asyncio, no NATS, no SQLite, no clock) and the shared runner
(``services/runtime/service.py``) that does its I/O. The cores, the projections'
folds, the replayer and the simulator all fold records through ``fold_event``,
so "now" and ``basis_seq`` mean the same thing everywhere.

This module imports nothing but ``events``: a core can use it without pulling
the log adapter (asyncio, nats-py) in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar

from events import catalogue as c
from events.base import Event

__all__ = ["MSG_ID", "Record", "CoreState", "Core", "SnapshotCore", "snapshot_interval", "fold_event", "fold_undecodable"]

MSG_ID = "Nats-Msg-Id"  # the header holding an event's deterministic id (JetStream's de-duplication key)


@dataclass(frozen=True, slots=True)
class Record:
    """One stored message: its stream sequence, subject, body, and the time the log stored it."""

    seq: int
    subject: str
    data: bytes
    time: float  # seconds since the epoch, assigned by the log (trusted "now" for inputs)
    headers: Mapping[str, str] | None = None

    @property
    def msg_id(self) -> str | None:
        return self.headers.get(MSG_ID) if self.headers else None


class CoreState:
    """Base of every core's state: the basis of its next decision."""

    seq: int = 0  # last applied stream sequence (the basis_seq of a decision)
    now: float = 0.0  # "now": the time of the last applied event

    def __init__(self) -> None:
        self.seq = 0
        self.now = 0.0


S = TypeVar("S", bound=CoreState)


class Core(Protocol[S]):
    """A service's pure core.

    A core may also declare, as class attributes, what is special about it, so
    that shared code never branches on its name:

    * ``dead_letter_inputs`` (default False): undecodable client inputs
      (``horizon.in.>``) are its to dead-letter (submission owns the inputs);
    * ``observations`` (default empty): event types it records with
      ``basis_seq`` 0 as observations of the world rather than decisions
      (inventory's heartbeat watch), which an audit cannot replay;
    * ``evolve_undecodable(state, record, error)`` (optional method): fold a
      record that does not decode (submission answers a malformed client
      input with ``InputRejected``); without it such a record only moves
      ``state.seq``.
    """

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


def fold_undecodable(core: Core[S], state: S, record: Record, error: str) -> S:
    """Fold a record that does not decode, as the live runner, replay and audit all do."""
    state.seq = record.seq
    hook = getattr(core, "evolve_undecodable", None)
    if hook is None:
        return state
    if not core.virtual_time:
        state.now = max(state.now, record.time)
    return hook(state, record, error)  # type: ignore[no-any-return]


def fold_event(core: Core[S], state: S, record: Record, event: Event) -> S:
    """Fold one decoded event into ``state`` exactly as the live runner does (replay, audit,
    projections and the simulator call this too)."""
    state.seq = record.seq
    # "now": live, the time the log stored the record (neither a client's ts nor a
    # ClockTicked is trusted); at virtual time the whole log is the simulator's, so its
    # event times and ticks are the clock.
    if core.virtual_time:
        state.now = max(state.now, event.now_ts if isinstance(event, c.ClockTicked) else event.ts)
    else:
        state.now = max(state.now, record.time)
    return core.evolve(state, event, record)
