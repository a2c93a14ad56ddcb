"""The one adapter every decision service runs on: catch up, follow, decide, publish.

A service is a pure ``Core`` (``evolve`` folds one event into its state,
``decide`` returns the decisions the state calls for) and this runner, which
does all the I/O, reading the log through the one reading loop
(``services/runtime/follow.py``):

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

**Leases and fencing** (optional: ``lease=``; ``services/runtime/lease.py``).
Any number of runners of one service may run; all fold the log, and only the
holder of the service's lease decides (the others are hot standbys). A runner
that takes the lease first claims the lead in the log (``LeadershipClaimed``,
``services/runtime/claim.py``) and decides once it has applied the log up to its
claim. Every decision round is published fenced (all or none as an atomic batch; a
round of up to ``CHAIN_MAX`` as a chain of single fenced messages, see
``_publish_fenced``): stored only while its claim is the last one on the service's
claim subject. A deposed leader's round (it was paused, its lease lapsed, a successor
claimed) is refused. The refused runner waits until it has applied the log to its
current end (a later claim there supersedes its own) and, if it still holds the
lease, claims again and decides again. A runner that loses its lease stays a standby:
its state is a fold of the log like any other, and it takes the lease again if it is
the one free.

``decide`` must never return a decision that the state already reflects
(otherwise every batch would publish it again); each core's tests check
that ``decide`` after folding its own output returns nothing.

**What it reads** (``services/runtime/layout.py``): the core's ``subjects`` (the whole log) until its
state has folded the log's layout marker, then its ``layout_subjects`` (``horizon.evt.>``) alone, one
filter subject: the follower is replaced between two batches, and a snapshot taken after the marker
starts on the filter at once.

**Snapshots** (optional, duck-typed: a core with ``snapshot_every`` K > 0,
``dump(state) -> bytes`` and ``load(bytes) -> state | None``). At start the
runner loads the latest snapshot and catches up from its ``seq + 1`` instead
of 1; the core's ``load`` returns None for a snapshot another version or
configuration wrote (it embeds its own fingerprint), and the runner then
folds the whole log. While following, once the state is K records past the
last dump, it dumps the state as at that record (in a forked child where it can,
``services/runtime/dumper.py``, so the fold goes on) and uploads in the background. A snapshot is a cache of a
fold, never a source of truth: any doubt about it means a full replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from events.base import Event
from events.codec import DecodeError, encode
from events.subjects import event_subject
from services.domain.protocol import Core, CoreState, Record, fold_event, fold_undecodable, snapshot_interval
from services.runtime.cancel import cancel_and_wait
from services.runtime.claim import LeaderClaim
from services.runtime.consume import decode_record
from services.runtime.dumper import SnapshotDumper
from services.runtime.follow import LogFollow
from services.runtime.layout import LayoutReader
from services.runtime.log import EventLog, LogConflict, Outgoing, PublishAck
from services.runtime.snapshots import DumpPacer, SnapshotUploader

if TYPE_CHECKING:
    from services.runtime.lease import Lease

__all__ = ["ServiceRunner", "fold_record", "RunnerStats", "collector_paused", "long_lived_heap"]

log = logging.getLogger("horizon.service")

S = TypeVar("S", bound=CoreState)


def fold_record(core: Core[S], state: S, record: Record) -> tuple[S, Event | None, str | None]:
    """Fold one record exactly as the live runner does (also used by replay and audit).

    Returns the new state, the decoded event (or None) and the decode error (or None).

    A core with ``skips(state, record)`` (a partition leader, services/domain/leaders.py) is asked
    first: a record it skips is not decoded, and only moves ``seq`` and "now" (its ``evolve`` skips
    the same records decoded, so a replay folds to the same state). Returns (state, None, None) then.
    """
    skips = getattr(core, "skips", None)
    if skips is not None and not core.virtual_time and skips(state, record):
        state.seq = record.seq
        state.now = max(state.now, record.time)
        return state, None, None
    try:
        event = decode_record(record)
    except DecodeError as exc:
        return fold_undecodable(core, state, record, str(exc)), None, str(exc)
    return fold_event(core, state, record, event), event, None


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


# Collections of the youngest generation every this many net allocations (Python's default: 700).
# A service allocates a few dozen objects per event and keeps most of them (its state), so at the
# default the collector ran every few dozen events and walked survivors again and again: measured
# on the intake benchmark, 6,986 accepted/s at the default, 9,590 with this, 9,553 with the
# collector off (docs/benchmarks.md §2). Cycles are still collected, just in larger batches.
YOUNG_GENERATION_THRESHOLD = 100_000
ROUND_FINISH_S = 5.0  # how long a stop waits for the decision round it interrupted to be published
CHAIN_MAX = 4  # decisions in a round published as a chain of fenced messages (see ``_publish_fenced``)


def long_lived_heap() -> None:
    """Tune the process's garbage collector for a large state that lives as long as the process."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_GENERATION_THRESHOLD:
        gc.set_threshold(YOUNG_GENERATION_THRESHOLD, max(middle, 50), max(old, 100))


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
    takeovers: int = 0  # times this runner took its lease
    stepdowns: int = 0  # times it lost it
    fenced: int = 0  # decision rounds the log refused (the fence had moved)


class ServiceRunner(Generic[S]):
    def __init__(
        self,
        log_: EventLog,
        core: Core[S],
        *,
        dead_letter_inputs: bool | None = None,
        snapshots: bool = True,
        lease: Lease | None = None,
    ) -> None:
        self.log = log_
        self.core = core
        long_lived_heap()
        # Leader lease (None: this runner always decides, the single-instance shape of tests and
        # the simulator). With one, it decides only while it holds the lease, and fenced.
        self.lease = lease
        self.claim = LeaderClaim(core.name, lease.holder) if lease is not None else None  # the fence (claim.py)
        self._lease_task: asyncio.Task[None] | None = None
        self._takeover: asyncio.Task[None] | None = None
        self._claim_retry: asyncio.Task[None] | None = None
        self._stopping = False
        self._publishing: asyncio.Future[list[Event]] | None = None  # the decision round being published
        self.state: S = core.initial()
        self.awaiting = 0
        self.stats = RunnerStats()
        # Undecodable client inputs are dead-lettered once, by the service that owns
        # them (the core that declares ``dead_letter_inputs``: submission); everyone dead-letters output events it cannot read.
        if dead_letter_inputs is None:
            dead_letter_inputs = bool(getattr(core, "dead_letter_inputs", False))
        self.dead_letter_inputs = dead_letter_inputs
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
        self._follower: Any = None  # a LogFollow, or a SharedFollow (the same interface)
        # What follows the log for it: ``LogFollow`` (its own consumer), or a reader it shares with
        # the other parts of its process (``SharedReader.follow``, services/runtime/fanout.py).
        self.make_follower: Callable[..., Any] = LogFollow
        self._lock = asyncio.Lock()
        # What it reads: the whole log, or from the log's layout marker on ``horizon.evt.>`` alone (layout.py).
        self.layout = LayoutReader(self)
        # A traced log (services/runtime/telemetry.py) times each decision round; others do not.
        self._round = getattr(log_, "decision_round", contextlib.nullcontext)
        # Snapshots (``snapshots=False`` turns them off, e.g. to measure a full replay).
        self.snapshot_every = snapshot_interval(core) if snapshots else 0
        self._dumped_seq = 0  # seq of the last dump (or of the snapshot started from)
        self.pacer = DumpPacer()  # dumps take at most a tenth of its time (a big state dumps slowly)
        # Dumps in a forked child where it can, else here (dumper.py); uploads in the background.
        self.dumper = SnapshotDumper(core.name, core.dump, SnapshotUploader(
            core.name, self._save_snapshot), pacer=self.pacer, on_failure=self._dump_failed) \
            if self.snapshot_every else None

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def leading(self) -> bool:
        """True if this runner may decide: it has no lease to hold, or it holds it."""
        return self.lease is None or self.lease.held

    async def _apply(self, batch: Sequence[Record]) -> None:
        # A shared reader decoded each record once for every part of the process (fanout.py).
        decoded: list[Event | DecodeError] | None = getattr(batch, "events", None)
        claim = self.claim
        for i, record in enumerate(batch):
            if record.seq <= self.state.seq:
                continue  # already folded (a reader restart may repeat the tail)
            if claim is not None:
                claim.saw(record)
            own = self._own.pop(record.msg_id, None) if self._own and record.headers else None
            if own is not None and record.subject == event_subject(self.name, own):
                self.state = fold_event(self.core, self.state, record, own)
                continue
            if decoded is None:
                self.state, _event, error = fold_record(self.core, self.state, record)
            else:
                event = decoded[i]
                if isinstance(event, DecodeError):
                    error = str(event)
                    self.state = fold_undecodable(self.core, self.state, record, error)
                else:
                    error = None
                    self.state = fold_event(self.core, self.state, record, event)
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
        """One decision round, if the state is caught up with our own publications (and we lead)."""
        if self.state.seq < self.awaiting or not self.leading:
            return []
        if self.claim is not None and not self.claim.seq:  # claim the lead first; decide once it is applied
            await self._claim()
            return []
        with self._round():
            decisions = self.core.decide(self.state)
            if not decisions:
                return []
            if not self.leading:
                return []  # the lease lapsed while deciding: a standby publishes nothing
            # A round once begun is published whole, even by a runner being stopped: a stop that
            # cut it would leave the log without decisions the same code makes at that basis (an
            # audit reports them missing). ``stop`` waits for it; a crash can still cut it.
            self._publishing = asyncio.ensure_future(self._publish_round(decisions))
            return await asyncio.shield(self._publishing)

    async def _publish_round(self, decisions: list[Event]) -> list[Event]:
        self.stats.decide_rounds += 1
        items = [Outgoing(event_subject(self.name, e), encode(e), e.id) for e in decisions]
        if self.lease is None:
            acks = await self.log.publish_many(items)
        else:
            fenced = await self._publish_fenced(items, decisions)
            if fenced is None:
                return []
            acks = fenced
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

    async def _publish_fenced(self, items: list[Outgoing], decisions: Sequence[Event]) -> list[PublishAck] | None:
        """Publish a round (``items``, the encoded ``decisions``) fenced on our own subjects; None if
        the log refused it (we then wait to re-read). A runner that fences some rounds otherwise
        (``services/scheduling/fence.py``) overrides this, reading the decisions themselves.

        A small round of a real-time service (``CHAIN_MAX`` decisions or fewer) goes as a chain of
        single fenced publishes, each fenced on the one before; a larger one, or any round at
        virtual time, as atomic batches (``EventLog.publish_fenced``). On file storage JetStream
        syncs an atomic batch as it commits it: measured, 3.3 ms for a batch of two against 0.34 ms
        for one message (0.42 ms for the batch on memory storage), and a placement round is
        usually two (a ``JobScheduled`` and its ``PlacementCycleCompleted``). A chain gives up
        "all or none": a crash, or a successor taking over, can cut it after its first decisions.
        That is a state like any other: the first ones are decisions made at their basis (an
        audit reproduces them), and whoever leads next decides what the state still calls for,
        the rest included, since ``decide`` is a function of the state. A deposed leader's chain
        is refused at the first message its successor's decisions fenced out, as a batch is.
        """
        if len(items) > 1 and len(items) <= CHAIN_MAX and not self.core.virtual_time:
            return await self._publish_chain(items)
        try:
            return await self.log.publish_fenced(items, self.claim.fence())  # type: ignore[union-attr]
        except LogConflict as exc:
            return self._fenced_out(len(items), exc, await self._log_end())

    def _fenced_out(self, n: int, exc: LogConflict, end: int, stored: Sequence[PublishAck] = ()) -> None:
        """The log refused a round of ``n`` decisions (after storing ``stored`` of them, a chain cut
        short): wait until it is applied to ``end`` and past them, then decide again."""
        self.stats.fenced += 1
        if stored:
            end = max(end, *(a.seq for a in stored))
            log.warning("%s: decision chain at basis %d cut after %d of %d (%s); deciding again once the "
                        "log is applied to seq %d", self.name, self.state.seq, len(stored), n, exc, end)
        elif end <= self.state.seq:
            # Nothing new to read, so no other writer moved the fence: the round repeated a
            # decision the log already holds (a core that repeats itself). Decide again later.
            log.error("%s: the log refused a round of %d decisions at basis %d although nothing is "
                      "newer (%s): a core that repeats a stored decision?", self.name, n, self.state.seq, exc)
            end = self.state.seq + 1
        else:
            log.warning("%s: decision round at basis %d fenced out (%s); deciding again once the log "
                        "is applied to seq %d", self.name, self.state.seq, exc, end)
        self.awaiting = max(self.awaiting, end)
        return None

    async def _publish_chain(self, items: list[Outgoing]) -> list[PublishAck] | None:
        """A small round, one fenced message after another; None if it was refused or cut short
        (the caller then waits, as for a refused round, until it has read the log to its end:
        the part that was stored comes back through it like any record)."""
        acks: list[PublishAck] = []
        for item in items:
            try:
                acks.append((await self.log.publish_fenced([item], self.claim.fence()))[0])  # type: ignore[union-attr]
            except LogConflict as exc:
                return self._fenced_out(len(items), exc, await self._log_end(), acks)
        return acks

    async def _log_end(self) -> int:
        """The last record of what it reads (a filtered runner never reads an input past its last event)."""
        try:
            return await self.log.last_seq(self.layout.subjects[0] if self.layout.filtered else None)
        except Exception:  # noqa: BLE001 - the conflicting record is past our state in any case
            return self.state.seq + 1

    async def _decide_or_rest(self) -> None:
        if self.state.seq < self.awaiting or not self.leading:
            return
        if not await self.decide_now() and self.state.seq >= self.awaiting and self.leading:
            self.idle_seq = self.state.seq
            self.progress.set()
            self.layout.rested()

    # ---------------------------------------------------------------- the lease

    def _lease_changed(self, held: bool) -> None:
        """Called by the lease (synchronously, from its loop): a takeover runs as its own task."""
        if held:
            self.stats.takeovers += 1
            if self._takeover is None or self._takeover.done():
                self._takeover = asyncio.create_task(self._take_over(), name=f"horizon-{self.name}-takeover")
        elif self._stopping:
            log.info("%s: lease handed over (stopping)", self.name)
        else:
            self.stats.stepdowns += 1
            log.warning("%s: no longer the leader; following as a standby", self.name)

    async def _take_over(self) -> None:
        """Claim the lead in the log, then decide once the claim is applied (``_claim``, claim.py): a decision
        of the previous leader stored before the claim is then in the state, and one after it is refused."""
        async with self._lock:
            self.claim.seq = 0  # type: ignore[union-attr] # a new term claims anew
            log.info("%s: leading (holder %s) from seq %d", self.name, self.lease.holder, self.state.seq)  # type: ignore[union-attr]
            await self._decide_or_rest()

    async def _claim(self) -> None:
        """Claim the lead (claim.py): decide once the claim is applied, or, refused, once the log is applied to
        its end. A log that cannot answer now (a server restarting) is asked again in half a second."""
        try:
            seq = await self.claim.take(self.log)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - asked again while the lease says we lead
            log.warning("%s: cannot claim the lead (%s: %s); retrying", self.name, type(exc).__name__, exc)
            if self._claim_retry is None or self._claim_retry.done():
                self._claim_retry = asyncio.create_task(self._claim_again(), name=f"horizon-{self.name}-claim")
            return
        self.awaiting = max(self.awaiting, seq or await self._log_end())

    async def _claim_again(self) -> None:
        await asyncio.sleep(0.5)
        self._claim_retry = None  # so that a failure in this round arms the next
        async with self._lock:
            await self._decide_or_rest()

    async def _on_batch(self, batch: list[Record]) -> None:
        async with self._lock:
            await self._apply(batch)
            # The dump is of the state at a record boundary, before deciding: deciding awaits the
            # log, and whoever sees this state applied must find its dump under way (flush_snapshots).
            self._maybe_snapshot()
            await self._decide_or_rest()
            self.layout.after_batch()

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
        """Dump the state once ``snapshot_every`` records past the last dump, paced; upload in the background.

        Only the leader does: two writers of one service's snapshots would prune each other's chunks.
        """
        if self.dumper is None or self.state.seq - self._dumped_seq < self.snapshot_every or not self.leading:
            return
        if not self.dumper.ready():  # due, but resting or a child still at work: then, record or not
            self.dumper.when_ready(self._dump_due)
            return
        self._dumped_seq = self.state.seq
        self.dumper.dump(self.state, self.state.seq)

    async def _dump_due(self) -> None:
        async with self._lock:
            self._maybe_snapshot()

    def _dump_failed(self) -> None:
        self.stats.snapshot_failures += 1

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
        if self.dumper is not None:
            await self.dumper.flush()

    # ---------------------------------------------------------------- life cycle

    async def start(self) -> None:
        """Catch up with the log (from the latest snapshot, if any), decide once, then follow it."""
        self._dead_lettered = {d.seq for d in await self.log.dead_letters(self.name)}
        end = await self.log.last_seq()
        restored = await self._restore(end)
        from_seq = await self.layout.start_from(restored + 1, end)
        self._follower = self.make_follower(self.log, self._on_batch, from_seq=from_seq, until_seq=end,
                                            subjects=self.layout.subjects, history=self._apply,
                                            on_caught_up=self._caught_up, name=f"horizon-{self.name}")
        await self._follower.start()
        await self._follower.until_caught_up()
        if self.lease is not None:
            # Campaign only now: a standby is one that has caught up and follows.
            self.lease.on_change = self._lease_changed
            self._lease_task = asyncio.create_task(self.lease.keep(), name=f"horizon-{self.name}-lease")
        self.ready.set()

    async def _caught_up(self, end: int) -> None:
        """The log is applied to ``end`` as read at start: decide once (without a lease to win first)."""
        self.state.seq = max(self.state.seq, end)
        self.stats.caught_up_seq = end
        log.info("%s caught up to seq %d", self.name, end)
        if self.lease is None:
            async with self._lock:
                await self._decide_or_rest()
                self._maybe_snapshot()

    async def wait(self) -> None:
        """Until the follower ends (cancelled, or a failure, which is raised here), or the lease loop fails."""
        assert self._follower is not None, "start() first"
        if self._lease_task is None:
            await self.layout.following()
            return
        following = asyncio.create_task(self.layout.following())
        try:
            await asyncio.wait({following, self._lease_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not following.done():
                following.cancel()
            elif not following.cancelled():
                following.exception()  # retrieved here; raised below unless we are being cancelled
        if following.done() and not following.cancelled():
            following.result()
        if self._lease_task.done() and not self._lease_task.cancelled():
            self._lease_task.result()
            raise RuntimeError(f"{self.name}: the lease loop ended")

    @property
    def runner(self) -> ServiceRunner[S]:
        """Itself: a plain runner is all a part runs (``services/runtime/parts.py``)."""
        return self

    async def run(self) -> None:
        """Start and run until cancelled (a cancel while catching up stops it as gracefully)."""
        try:
            await self.start()
            await self.wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        round_ = self._publishing
        if round_ is not None and not round_.done():  # the round a stop interrupted: let it finish (bounded)
            done, _ = await asyncio.wait({round_}, timeout=ROUND_FINISH_S)
            if not done:
                log.warning("%s: a decision round still publishing after %.0f s at stop; left cut", self.name,
                            ROUND_FINISH_S)
                await cancel_and_wait(round_)
        if round_ is not None and round_.done() and not round_.cancelled() and round_.exception() is not None:
            log.warning("%s: the last decision round before the stop failed: %r", self.name, round_.exception())
        await self.layout.stop()
        if self._follower is not None:
            await self._follower.stop()
        self._stopping = True
        if self.lease is not None:
            self.lease.abandon()
        for task in (self._takeover, self._claim_retry, self._lease_task):
            if task is not None and not task.done():
                await cancel_and_wait(task)
        if self.lease is not None:
            # A graceful stop hands the lease over at once; a crash leaves it to lapse.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.lease.release(), 2.0)
        if self.dumper is not None:
            await self.dumper.close()
