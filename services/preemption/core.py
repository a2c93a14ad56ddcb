"""Preemption: which running jobs to stop so that a blocked job can start. Pure.

This first version rebuilds the state it will need (the job table, the
cluster ledger and every job's latest "blocked" explanation) exactly like
the other services, and its policy is the null policy: ``decide`` returns no
``PreemptionRequested``, i.e. it decides that no preemption is needed. The
priority and fair-share policy (victim cost, grace periods, checkpoints,
minimum runtime, rate limits) replaces ``decide`` without changing the fold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.state.cluster import Cluster, fold_cluster
from services.state.jobs import JobState, JobTable

__all__ = ["PreemptionCore", "PreemptionState"]


class PreemptionState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.cluster = Cluster()
        self.blocked: dict[str, c.PlacementBlocked] = {}  # job id -> latest explanation, while pending


@dataclass
class PreemptionCore:
    name: ClassVar[str] = "preemption"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG

    def initial(self) -> PreemptionState:
        return PreemptionState()

    def evolve(self, state: PreemptionState, event: Event, record: Record) -> PreemptionState:
        if isinstance(event, c.PlacementBlocked):
            state.blocked[event.job_id] = event
        tr = fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        if tr is not None:
            if tr.after is not JobState.PENDING:
                state.blocked.pop(tr.job.job_id, None)
        return state

    def candidates(self, state: PreemptionState) -> list[str]:
        """Blocked jobs that a preemption policy would consider, in job-id order."""
        return sorted(state.blocked)

    def decide(self, state: PreemptionState) -> list[Event]:
        # The null policy: no blocked job preempts anyone.
        return []
