"""A scheduling leader for some partitions only: scale-out by partition (docs/scaling.md). Pure core.

``PartitionedSchedulingCore`` folds only what its partitions need, and decides only for their jobs:

0. **What it folds.** Its partitions' jobs, the nodes, the configuration, every leader's cycles
   and fair-share ledger entries, and the jobs of other partitions that it shares a limit with
   (an account with a quota on its path, licenses: point 3). Any other job is skipped at its
   ``JobAccepted`` and so never enters its table; every later event of a job not in its table is
   skipped before it is decoded (``skips``, called by the runner's ``fold_record``) or, decoded
   (audit, the simulator), by the same test in ``evolve``. So a leader's fold costs what its
   partitions' jobs cost, not the whole cluster's.
1. **Fair share as of the ledger** (``LedgerSchedulingCore``, ``services/domain/ledger.py``): it
   owns its partitions' usage and publishes it as ``UsageCharged`` entries; the factors it orders
   by are every leader's entries folded. Every leader at the same entries has the same factors.

2. **Its own subjects.** It publishes under ``scheduling-<partitions>`` (``leader_token``), with
   ids ``scheduling-<partitions>/...`` (two leaders' cycle 7 are two events), and its cycles are
   placed by its partner, ``placement-<partitions>``: it takes its cycle count and "placement is
   done" from its own and its partner's cycles only.
3. **Its jobs.** Candidates are its partitions' pending jobs in the global order; requeues,
   timeouts and dependency endings only of its partitions' jobs. Configuration it cannot apply is
   answered by every leader (each under its own id).
4. **Quotas and licenses, exact across leaders.** A job is charged to its accounts from its ``JobScheduled``;
   the gap is a candidate admitted by one leader and not yet placed. So every leader also folds
   every leader's *open* cycle (decided, its placement not yet completed) and, when it admits,
   counts the still-pending candidates of the others' open cycles as held (``quota_view``). And a
   cycle that admits a job under an account with a quota is fenced on ``CYCLES_FILTER`` (every
   leader's cycles; ``PartitionedSchedulingRunner`` in ``services/scheduling/fence.py``): stored only if no cycle of any leader landed
   since this leader's basis. Two leaders racing for one quota: the second's cycle is refused,
   it reads the first's cycle, counts it, and admits what is left. Licenses are the whole cluster's
   too (``license_view``): a cycle admitting a job that asks for some is fenced alike.

5. **Other partitions' jobs its jobs wait on.** From each record it skips it keeps the job's outcome
   (``services/domain/foreign.py``: an int per job, and the name of a job not yet ended), so a job of
   its own that depends on a job of another partition (``afterok`` ...) starts when that job's
   outcome allows it, and a singleton job waits for another partition's job of its name.

Snapshots carry the open cycles and the foreign jobs after the queue fold's own bytes (``dump``/``load``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import event_owner, leader_token, partner_token
from services.domain.fairshare import association
from services.domain.jobs import Job
from services.domain.foreign import MOVED, MOVES, ForeignJobs
from services.domain.leaders import ACCEPTED, JOB_EVENTS, peek_outcome
from services.domain.protocol import Record
from services.domain.queue import never, order
from services.domain.queue.state import SchedulingState
from services.domain.quotas import amount_of, limited_account
from services.scheduling.ledgered import LedgerSchedulingCore

__all__ = ["PartitionedSchedulingCore"]

_CYCLE_EVENTS = (c.SchedulingCycleCompleted, c.PlacementCycleCompleted)
_EXTRA_LEN = 8  # bytes of the length of the open cycles and foreign jobs after the queue fold's snapshot
_EXTRA_FORMAT = 2  # 2: the foreign jobs' outcomes (services/domain/foreign.py) after the open cycles


@dataclass
class PartitionedSchedulingCore(LedgerSchedulingCore):
    """``SchedulingCore`` deciding for ``partitions`` only, under its own service token."""

    partitions: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.partitions:
            raise ValueError("a partitioned scheduling leader needs at least one partition")
        self.partitions = tuple(sorted(set(self.partitions)))
        self.name = leader_token("scheduling", self.partitions)  # type: ignore[misc]
        self.partner = partner_token(self.name)
        self._covered = frozenset(self.partitions)

    # ------------------------------------------------------------------ fold

    def initial(self) -> SchedulingState:
        state = super().initial()
        state.open_cycles = {}  # type: ignore[attr-defined]
        state.foreign = state.singletons.foreign = ForeignJobs()
        return state

    def skips(self, state: SchedulingState, record: Record) -> bool:
        """Whether ``evolve`` would skip this record, read from its subject and a peek at its body
        (``services/domain/leaders.py``, ``peek_outcome``): a job of another partition that shares no limit with this
        leader's jobs, or any later event of a job not in its table. False when unsure. A record it skips
        is kept as ``evolve`` keeps it (its job's outcome, ``services/domain/foreign.py``); asking twice
        keeps nothing more."""
        found = peek_outcome(record)
        if found is None:
            return False
        kind, job_id = found.type, found.job_id
        foreign: ForeignJobs = state.foreign  # type: ignore[attr-defined]
        if kind == ACCEPTED:
            if self._tracks(state, found.spec) and job_id not in foreign.codes:
                return False
            moved = foreign.accept(job_id, found.spec, record.seq, state.jobs)
        elif job_id in state.jobs.jobs:
            return False
        elif kind in MOVES:
            moved = foreign.apply(kind, job_id, found)
        else:
            return True
        if moved and (state.dependents or state.singletons.live):
            self._moved(state, job_id, moved, record.seq)
        return True

    def _tracks(self, state: SchedulingState, spec: Any) -> bool:
        """Whether a job of this spec is folded: one of its partitions', or another's that takes licenses
        or is charged to an account with a quota (the limits every leader shares)."""
        return (spec.partition in self._covered or bool(spec.licenses)
                or limited_account(state.fairshare, spec.account))

    def _foreign(self, state: SchedulingState, event: Event) -> bool:
        """``skips``'s test on the decoded event (audit and the simulator fold decoded events)."""
        if isinstance(event, c.JobAccepted):
            return not self._tracks(state, event.spec) or event.job_id in state.foreign.codes  # type: ignore[attr-defined]
        job_id = getattr(event, "job_id", "")
        return bool(job_id) and event.event_type in JOB_EVENTS and job_id not in state.jobs.jobs

    def _keep(self, state: SchedulingState, event: Event, seq: int) -> None:
        """``skips``'s keeping, of a decoded event."""
        foreign: ForeignJobs = state.foreign  # type: ignore[attr-defined]
        if isinstance(event, c.JobAccepted):
            moved = foreign.accept(event.job_id, event.spec, seq, state.jobs)
        elif event.event_type in MOVES:
            moved = foreign.apply(event.event_type, event.job_id, event)  # type: ignore[attr-defined]
        else:
            return
        if moved and (state.dependents or state.singletons.live):
            self._moved(state, event.job_id, moved, seq)  # type: ignore[attr-defined]

    @staticmethod
    def _moved(state: SchedulingState, job_id: str, moved: int, seq: int) -> None:
        """A foreign job's outcome moved: what one scheduler would redo for the jobs that wait on it. Ask
        again whether their dependencies can ever be met, and call for a cycle (``QueueFold._track``'s
        ``dirty_seq``) when a job of this leader depends on it or is a singleton of its name."""
        foreign: ForeignJobs = state.foreign  # type: ignore[attr-defined]
        dependents = state.dependents
        array = foreign.task_array.get(job_id)
        if job_id in dependents or (array is not None and array in dependents):
            state.dirty_seq = seq  # (a first checkpoint too: after-checkpoint dependants may be ready)
            never.recheck_dependants(state, job_id, array)
        if moved == MOVED and state.singletons.live:
            entry = foreign.key_of(job_id)
            if entry is not None and state.singletons.foreign_moved(
                    job_id, entry[0], foreign.state_of(job_id), entry[1]):  # type: ignore[arg-type]
                state.dirty_seq = seq  # a singleton of its name may start now, or must wait

    def evolve(self, state: SchedulingState, event: Event, record: Record) -> SchedulingState:
        if self._foreign(state, event):
            self._keep(state, event, record.seq)
            return state
        if isinstance(event, _CYCLE_EVENTS):
            owner = event_owner(record.subject)
            _track_open(state, owner, event)
            if owner not in (self.name, self.partner):
                return state  # another leader's cycle: counted for quotas only
        elif isinstance(event, c.ConfigRejected) and event.source == self.name:
            state.config_rejections.pop(event.request_seq, None)
            return state
        return super().evolve(state, event, record)

    # ------------------------------------------------------------------ decide

    def mine(self, job: Job | None) -> bool:
        return job is not None and job.spec is not None and job.spec.partition in self._covered

    def owns(self, job: Job | None) -> bool:
        """Its entries charge its own partitions' jobs only (another leader's tracked job is that one's)."""
        return self.mine(job)

    def candidates(self, state: SchedulingState) -> tuple[list[Job], list[str]]:
        """The global order's first candidates among this leader's jobs, admitted against a quota view
        that counts the other leaders' open cycles as held."""
        everyone, quotas, licensed, licenses = state.pending, state.quotas, state.licensed, state.licenses
        limited = quotas.limited(state.fairshare)
        state.pending = {job_id: job for job_id, job in everyone.items() if self.mine(job)}
        state.licensed = {job_id for job_id in licensed if job_id in state.pending}
        if limited:
            state.quotas = self.quota_view(state, everyone)
        if state.licensed:
            state.licenses = self.license_view(state, everyone)
        try:
            return order.candidates(state, self.max_candidates)
        finally:
            state.pending, state.quotas, state.licensed, state.licenses = everyone, quotas, licensed, licenses

    def quota_view(self, state: SchedulingState, pending: dict[str, Job]) -> Any:
        """What the accounts hold, plus the still-pending candidates of every other leader's open cycle."""
        view = state.quotas.copy()
        fs = state.fairshare
        for owner in sorted(state.open_cycles):  # type: ignore[attr-defined]
            if owner == self.name:
                continue
            for job_id in state.open_cycles[owner][1]:  # type: ignore[attr-defined]
                job = pending.get(job_id)
                if job is not None and job.spec is not None:
                    view.charge(fs, association(job.spec), amount_of(job.spec), +1)
        return view

    def license_view(self, state: SchedulingState, pending: dict[str, Job]) -> Any:
        """What jobs hold of the licenses, plus what the still-pending candidates of every other leader's
        open cycle ask for (licenses are the whole cluster's, as quotas are)."""
        view = state.licenses.copy()
        for owner in sorted(state.open_cycles):  # type: ignore[attr-defined]
            if owner == self.name:
                continue
            for job_id in state.open_cycles[owner][1]:  # type: ignore[attr-defined]
                job = pending.get(job_id)
                if job is not None and job.spec is not None and job.spec.licenses:
                    view.charge(job.spec.licenses, +1)
        return view

    def decide(self, state: SchedulingState) -> list[Event]:
        out = []
        for event in super().decide(state):
            job_id = getattr(event, "job_id", None)
            if job_id is not None and not self.mine(state.jobs.get(job_id)):
                continue  # another leader's job
            changes: dict[str, Any] = {"id": self.name + event.id[event.id.index("/"):]}
            if isinstance(event, c.SchedulingCycleCompleted):
                changes["queued"] = sum(1 for j in state.pending.values() if self.mine(j))
            out.append(msgspec.structs.replace(event, **changes))
        if len(out) > 1 and isinstance(out[0], c.UsageCharged) and isinstance(out[-1], c.SchedulingCycleCompleted) \
                and self.charges_quota(state, out[-1].candidates):
            # A cycle fenced on every leader's cycles may be refused after the rest of its round landed,
            # and a replay would then decide it where the log has none: the ledger entry goes alone,
            # and the cycle follows in the next round (once the entry is folded back).
            out.pop()
        return out

    def charges_quota(self, state: SchedulingState, job_ids: list[str]) -> bool:
        """Whether any of these jobs counts against a quota or takes licenses, which every leader shares
        (its cycle is then fenced on every leader's)."""
        fs, quotas = state.fairshare, state.quotas
        limited = quotas.limited(fs)
        if not limited and not state.licensed:
            return False
        for job_id in job_ids:
            job = state.jobs.get(job_id)
            if job is None or job.spec is None:
                continue
            if job.spec.licenses or (limited and quotas.charges(fs, association(job.spec))):
                return True
        return False

    # ------------------------------------------------------------------ snapshots

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}/partitioned/{_EXTRA_FORMAT}"

    def dump(self, state: SchedulingState) -> bytes:
        extra = msgspec.msgpack.encode([sorted((k, v[0], v[1]) for k, v in state.open_cycles.items()),  # type: ignore[attr-defined]
                                        state.foreign.data()])  # type: ignore[attr-defined]
        return super().dump(state) + extra + len(extra).to_bytes(_EXTRA_LEN, "big")

    def load(self, data: bytes) -> SchedulingState | None:
        if len(data) < _EXTRA_LEN:
            return None
        n = int.from_bytes(data[-_EXTRA_LEN:], "big")
        if n > len(data) - _EXTRA_LEN:
            return None
        base, extra = data[: len(data) - _EXTRA_LEN - n], data[len(data) - _EXTRA_LEN - n: -_EXTRA_LEN]
        state = super().load(base)
        if state is None:
            return None
        opened, foreign = msgspec.msgpack.decode(extra)
        state.open_cycles = {k: (cycle, list(cands)) for k, cycle, cands in opened}  # type: ignore[attr-defined]
        state.foreign = state.singletons.foreign = ForeignJobs.from_data(foreign)
        # what the base rebuilt without the foreign jobs: the singletons' members and the jobs a
        # dependency can never satisfy
        state.singletons.rebuild(state.jobs)
        never.rebuild(state)
        return state


def _track_open(state: SchedulingState, owner: str, event: Event) -> None:
    """A scheduling leader's cycle is open until its placement partner completes it."""
    opened: dict[str, tuple[int, list[str]]] = state.open_cycles  # type: ignore[attr-defined]
    if isinstance(event, c.SchedulingCycleCompleted):
        opened[owner] = (event.cycle, list(event.candidates))
    elif isinstance(event, c.PlacementCycleCompleted):
        try:
            scheduler = partner_token(owner)
        except ValueError:
            return
        found = opened.get(scheduler)
        if found is not None and found[0] <= event.cycle:
            del opened[scheduler]
