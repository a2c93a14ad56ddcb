"""What the audit replays with: the queue policy and backfill mode the services ran with, live or
simulated time, and the cores so configured (``audit_cores``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode
from services.domain.protocol import Record
from services.domain.queue.fold import MAX_CANDIDATES_BEFORE_RECORDED

__all__ = ["POLICIES", "BACKFILL_MODES", "AuditConfig", "audit_cores", "partition_leaders", "cycle_cap"]

POLICIES = ["fcfs", "sjf", "f1", "multifactor"]
BACKFILL_MODES = ["easy", "shadow", "greedy", "none"]


@dataclass(frozen=True)
class AuditConfig:
    """How the replayed services were configured: ``horizon up --policy/--backfill-mode``, or the simulator's."""

    policy: str = "multifactor"
    backfill: str = "easy"
    virtual_time: bool = False

    def describe(self) -> str:
        time_ = ("virtual time (a simulator's log: ClockTicked and event times are the clock; "
                 "100,000 candidates per cycle)" if self.virtual_time else "live time (the log's stored times)")
        return f"policy {self.policy}, backfill {self.backfill}, {time_}"

    def as_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "backfill_mode": self.backfill, "virtual_time": self.virtual_time}


def audit_cores(config: AuditConfig, records: Sequence[Record] = ()) -> list[Any]:
    """The five cores as the live services run them (``horizon up``/``horizon service`` with these flags),
    or as the simulator runs them (``virtual_time``); and, for a log with partition leaders
    (``horizon service scheduling --partition P``, docs/scaling.md), their cores, found in ``records``."""
    if config.virtual_time:
        from services.front.sim.driver import SimSettings, make_cores

        return make_cores(SimSettings(policy=config.policy, backfill=config.backfill))
    from services.front.registry import SERVICES, leader_cores, make_core

    cap = cycle_cap(records)
    cores = [make_core(name, policy=config.policy, backfill=config.backfill, max_candidates=cap) for name in SERVICES]
    owners, partitions = partition_leaders(records)
    return cores + leader_cores(owners, partitions, policy=config.policy, backfill=config.backfill,
                                max_candidates=cap)


def cycle_cap(records: Sequence[Record]) -> int | None:
    """The cap on a cycle's candidates the live scheduler ran with, as its first cycle in ``records`` says
    (``SchedulingCycleCompleted.max_candidates``; a log from before the field: 10,000). None: no cycle."""
    for r in records:
        if ".SchedulingCycleCompleted." not in r.subject:
            continue
        try:
            event = decode(r.data)
        except DecodeError:
            continue
        if isinstance(event, c.SchedulingCycleCompleted):
            return event.max_candidates or MAX_CANDIDATES_BEFORE_RECORDED
    return None


def partition_leaders(records: Sequence[Record]) -> tuple[set[str], set[str]]:
    """The service tokens of the partition leaders that published in ``records``, and every partition
    name the log configured (to tell ``scheduling-a-b``'s partitions apart)."""
    owners: set[str] = set()
    partitions: set[str] = set()
    for r in records:
        subject = r.subject
        if subject.startswith("horizon.evt.scheduling-") or subject.startswith("horizon.evt.placement-"):
            owners.add(subject.split(".", 3)[2])
        elif subject == "horizon.in._admin.partition":
            try:
                event = decode(r.data)
            except DecodeError:
                continue
            if isinstance(event, c.PartitionConfigured):
                partitions.add(event.name)
    return owners, partitions
