"""A scheduling core whose fair share is "as of the ledger" (docs/scaling.md, services/domain/ledger.py). Pure.

``LedgerSchedulingCore`` is ``SchedulingCore`` with one change: the fair-share factors that order
the queue come from the ``UsageCharged`` entries in the log (``state.ledger``, every scheduling
leader's), not from charging every job itself. It owns the usage of the jobs it ``owns`` (all of
them here; a partition leader's own partitions' in ``PartitionedSchedulingCore``): it charges them
exactly (``state.own_usage``) and publishes an entry at most every ``ledger_every_s`` seconds of log
time, when some association's figures changed, before any other decision of the round.

Quotas, the priority explanations of the projections and everything else stay as ``QueueFold``
folds them (the exact tree, ``state.fairshare``, still holds the accounts and their quotas). The
whole-cluster scheduler of ``horizon up`` is ``SchedulingCore`` and keeps exact-per-record fair
share; this core runs for partition leaders, and in the simulator to measure what the ledger costs
(``horizon simulate --fairshare-ledger SECONDS``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from events import catalogue as c
from events.base import Event
from events.subjects import event_owner, service_of
from services.domain.envelope import Decider
from services.domain.jobs import Job
from services.domain.ledger import DEFAULT_EVERY_S, OwnUsage, UsageLedger, dump_own, load_own
from services.domain.protocol import Record
from services.domain.queue.state import SchedulingState
from services.scheduling.core import SchedulingCore

__all__ = ["LedgerSchedulingCore"]

_LEN = 8  # bytes of the length of the ledger's part of a snapshot, after the queue fold's


@dataclass
class LedgerSchedulingCore(SchedulingCore):
    """``SchedulingCore`` ordering by fair share as of the ledger, and publishing its own jobs' entries."""

    ledger_every_s: float = DEFAULT_EVERY_S

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.ledger_every_s >= 0:
            raise ValueError(f"ledger_every_s: {self.ledger_every_s!r} must be 0 or more seconds")

    def owns(self, job: Job | None) -> bool:
        """Whether this core charges ``job``'s usage in its entries (every job: one scheduler)."""
        return job is not None and job.spec is not None

    # ------------------------------------------------------------------ fold

    def initial(self) -> SchedulingState:
        state = super().initial()
        state.ledger = UsageLedger()  # type: ignore[attr-defined]
        state.own_usage = OwnUsage()  # type: ignore[attr-defined]
        return state

    def evolve(self, state: SchedulingState, event: Event, record: Record) -> SchedulingState:
        if isinstance(event, c.UsageCharged):
            owner = event_owner(record.subject)
            if service_of(owner) == "scheduling":
                state.ledger.apply(owner, event)  # type: ignore[attr-defined]
                if owner == self.name:
                    state.own_usage.published(event)  # type: ignore[attr-defined]
            # Not a reason for a cycle: the factors move with time in the exact tree too, and the next
            # cycle (something that could change its outcome happened) orders by them as they are then.
            return state
        if isinstance(event, c.FairShareConfigured):
            state.own_usage.advance_all(state.now, state.fairshare.lam)  # type: ignore[attr-defined]
        state = super().evolve(state, event, record)
        if isinstance(event, (c.AccountConfigured, c.FairShareConfigured)) and record.seq not in state.config_rejections:
            ledger: UsageLedger = state.ledger  # type: ignore[attr-defined]
            if isinstance(event, c.AccountConfigured):
                ledger.configure_account(event, state.now)
            else:
                ledger.configure(event, state.now)
        return state

    def _enter_pending(self, state: SchedulingState, job: Job, before: Any) -> None:
        super()._enter_pending(state, job, before)
        if self.owns(job):
            leaf = state.fairshare.leaf_for(job.spec, state.now).name  # type: ignore[arg-type]
            state.own_usage.touch(leaf, state.now, state.seq)  # type: ignore[attr-defined]
            state.ledger.touch(leaf, state.now)  # type: ignore[attr-defined]

    def _charge(self, state: SchedulingState, job: Job) -> None:
        super()._charge(state, job)
        if self.owns(job):
            charge = state.charges[job.job_id]
            state.own_usage.start(charge.leaf, charge.rate, state.now, state.seq, state.fairshare.lam)  # type: ignore[attr-defined]

    def _uncharge(self, state: SchedulingState, job: Job) -> None:
        charge = state.charges.get(job.job_id)
        super()._uncharge(state, job)
        if charge is not None and self.owns(job):
            state.own_usage.stop(charge.leaf, charge.rate, state.now, state.seq, state.fairshare.lam)  # type: ignore[attr-defined]

    def _rebill(self, state: SchedulingState, job_id: str) -> None:  # type: ignore[override]
        charge = state.charges.get(job_id)
        before = charge.rate if charge is not None else None
        super()._rebill(state, job_id)
        if charge is not None and charge.rate != before and self.owns(state.jobs.jobs.get(job_id)):
            own: OwnUsage = state.own_usage  # type: ignore[attr-defined]
            lam = state.fairshare.lam
            own.stop(charge.leaf, before, state.now, state.seq, lam)  # type: ignore[arg-type]
            own.start(charge.leaf, charge.rate, state.now, state.seq, lam)

    # ------------------------------------------------------------------ decide

    def decide(self, state: SchedulingState) -> list[Event]:
        out = super().decide(state)
        own: OwnUsage = state.own_usage  # type: ignore[attr-defined]
        if own.due(state.now, self.ledger_every_s):
            decide = Decider(self.name, ts=state.now, source=self.name, basis_seq=state.seq)
            n = own.entries + 1
            entry = decide(c.UsageCharged, n, correlation_id=str(n), entry=n, as_of_ts=state.now,
                           rows=own.rows(state.now, state.fairshare.lam))
            out.insert(0, entry)  # the cycle stays the round's last decision (the fenced runner's)
        return out

    # ------------------------------------------------------------------ snapshots

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}/ledger/{self.ledger_every_s:g}"

    def dump(self, state: SchedulingState) -> bytes:
        extra = json.dumps({"ledger": state.ledger.dump(), "own": dump_own(state.own_usage)},  # type: ignore[attr-defined]
                           default=_plain).encode()
        return super().dump(state) + extra + len(extra).to_bytes(_LEN, "big")

    def load(self, data: bytes) -> SchedulingState | None:
        if len(data) < _LEN:
            return None
        n = int.from_bytes(data[-_LEN:], "big")
        if n > len(data) - _LEN:
            return None
        state = super().load(data[: len(data) - _LEN - n])
        if state is not None:
            extra = json.loads(data[len(data) - _LEN - n: -_LEN])
            state.ledger = UsageLedger.load(extra["ledger"])  # type: ignore[attr-defined]
            state.own_usage = load_own(extra["own"])  # type: ignore[attr-defined]
        return state


def _plain(value: Any) -> Any:
    """What json cannot write itself: the tree's accounts (dataclasses with a Quota struct inside)."""
    import msgspec

    return msgspec.to_builtins(value)
