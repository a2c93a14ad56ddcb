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
from events.codec import DecodeError, decode
from events.subjects import ADMIN_VERBS, EVENT_PREFIX, RELAY_LAYOUT, RELAYED_VERBS, admin_subject, event_owner

__all__ = ["MSG_ID", "Record", "CoreState", "Core", "SnapshotCore", "snapshot_interval", "fold_event", "fold_undecodable",
           "relayed_input", "reads_events_only"]

MSG_ID = "Nats-Msg-Id"  # the header holding an event's deterministic id (JetStream's de-duplication key)


@dataclass(frozen=True, slots=True)
class Record:
    """One stored message: its stream sequence, subject, body, and the time the log stored it."""

    seq: int
    subject: str
    data: bytes
    time: float  # seconds since the epoch, assigned by the log (trusted "now" for inputs)
    headers: Mapping[str, str] | None = None
    # An operator input submission relayed (``InputRelayed``): the input's own sequence. 0 otherwise.
    relayed_from: int = 0

    @property
    def msg_id(self) -> str | None:
        return self.headers.get(MSG_ID) if self.headers else None

    @property
    def input_seq(self) -> int:
        """The sequence of the operator input this record carries (what its answers name): the record's
        own, or for a relay (``fold_event`` hands a core the input it carries) the input's."""
        return self.relayed_from or self.seq


class CoreState:
    """Base of every core's state: the basis of its next decision."""

    seq: int = 0  # last applied stream sequence (the basis_seq of a decision)
    now: float = 0.0  # "now": the time of the last applied event
    # The log's subject layout as folded (``LogLayoutChanged``): 1 until the marker, then 2; the
    # marker's sequence; the last operator input applied through a relay (``InputRelayed``).
    layout: int = 1
    layout_seq: int = 0
    relayed_seq: int = 0

    def __init__(self) -> None:
        self.seq = 0
        self.now = 0.0
        self.layout = 1
        self.layout_seq = 0
        self.relayed_seq = 0


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
      ``state.seq``;
    * ``layout_subjects`` (default none): what it reads once the log's layout
      is 2 (``LogLayoutChanged``): ``EVENTS_ONLY``, ``horizon.evt.>``, for every
      core but submission's. From the marker on, ``fold_event`` hands it the
      operator inputs that submission relays and nothing of ``horizon.in.>``
      (such a record only moves ``state.seq``), so the whole log folded and its
      events alone folded give the same state (``reads_events_only``).
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


def reads_events_only(core: object, state: CoreState) -> bool:
    """Whether ``core``, at ``state``, reads ``horizon.evt.>`` alone: the log's layout is 2 and the core
    declares ``layout_subjects`` (every core but submission's)."""
    return state.layout >= RELAY_LAYOUT and bool(getattr(core, "layout_subjects", None))


def relayed_input(record: Record, event: c.InputRelayed) -> tuple[Record, Event] | None:
    """The operator input a relay carries, as the record a core folds: the relay's place in the log
    (``seq``, ``time``), the input's admin subject (every check of "accepted only on
    horizon.in._admin.<verb>" holds as for the raw input) and its sequence (``relayed_from``, what the
    answers name). None for a relay that is not submission's, names no relayed verb, or carries what
    that verb does not take: it is folded as itself, which no core applies."""
    if event_owner(record.subject) != "submission" or event.verb not in RELAYED_VERBS or event.request_seq <= 0:
        return None
    data = bytes(event.input)
    try:
        inner = decode(data)
    except DecodeError:
        return None  # an input too large to relay (``null``), or not the event its verb takes
    if not isinstance(inner, ADMIN_VERBS[event.verb]):
        return None
    return Record(record.seq, admin_subject(event.verb), data, record.time, record.headers, event.request_seq), inner


_EVENT_SUBJECT = EVENT_PREFIX + "."


def _layout(state: CoreState, record: Record, event: c.LogLayoutChanged) -> None:
    """The marker (submission's, the first): layout 2 from its sequence on."""
    if event.layout == RELAY_LAYOUT and state.layout < RELAY_LAYOUT and event_owner(record.subject) == "submission":
        state.layout, state.layout_seq = event.layout, record.seq


def fold_undecodable(core: Core[S], state: S, record: Record, error: str) -> S:
    """Fold a record that does not decode, as the live runner, replay and audit all do."""
    state.seq = record.seq
    if state.layout >= RELAY_LAYOUT and not record.subject.startswith(_EVENT_SUBJECT) \
            and reads_events_only(core, state):
        return state  # an input it does not read (layout 2)
    hook = getattr(core, "evolve_undecodable", None)
    if hook is None:
        return state
    if not core.virtual_time:
        state.now = max(state.now, record.time)
    return hook(state, record, error)  # type: ignore[no-any-return]


def fold_event(core: Core[S], state: S, record: Record, event: Event) -> S:
    """Fold one decoded event into ``state`` exactly as the live runner does (replay, audit,
    projections and the simulator call this too).

    Layout 2 (``reads_events_only``): a record outside ``horizon.evt.>`` only moves ``state.seq``
    (neither "now" nor anything else: the live service never reads it), and a relay is folded as the
    input it carries (``relayed_input``), at the relay's place."""
    if state.layout >= RELAY_LAYOUT and reads_events_only(core, state):
        if not record.subject.startswith(_EVENT_SUBJECT):
            state.seq = record.seq
            return state
        if type(event) is c.InputRelayed:
            carried = relayed_input(record, event)
            if carried is not None:
                record, event = carried
                state.relayed_seq = max(state.relayed_seq, record.relayed_from)
    state.seq = record.seq
    if type(event) is c.LeadershipClaimed:
        # A leader's fence (services/runtime/claim.py), news to no core: only ``seq`` moves, not "now", so a
        # claim landing among a run's records (a leader taking over, or starting up as the first jobs
        # come) changes no decision, and a log replayed without it (``horizon whatif``) decides alike.
        return state
    if type(event) is c.LogLayoutChanged:
        _layout(state, record, event)
    # "now": live, the time the log stored the record (neither a client's ts nor a
    # ClockTicked is trusted); at virtual time the whole log is the simulator's, so its
    # event times and ticks are the clock.
    if core.virtual_time:
        state.now = max(state.now, event.now_ts if isinstance(event, c.ClockTicked) else event.ts)
    else:
        state.now = max(state.now, record.time)
    return core.evolve(state, event, record)
