"""Scheduling: the queue, its order, and when to run a cycle. Pure.

The queue is every PENDING job (held jobs wait aside). Order: the configured
``Policy`` (``services.scheduling.policy``): priority class first (critical,
high, normal, low, scavenger), then first come first served by default, or
SJF, F1 or the multifactor priority; the acceptance sequence breaks every
tie, so replays cannot disagree.

A **cycle** is the scheduler's decision "these are the candidates, in this
order" (``SchedulingCycleCompleted``). Placement then places every candidate
that fits and skips those that do not, so a job that does not fit never
blocks the jobs behind it (seed 003's lesson). Cycles are triggered by
events, and batched:

1. a new cycle is decided only once placement has finished the previous one
   (``PlacementCycleCompleted``), so a burst of 10,000 submissions that
   arrives while a cycle is being placed becomes the next single cycle;
2. and only if something that could change the outcome has happened since
   the last cycle's basis: a job became pending (accepted, released,
   requeued, re-prioritised), resources were freed, a node changed, or the
   last cycle was cut at ``max_candidates`` and placed something.

Jobs that certainly cannot start are left out of the candidates, so a head
of unplaceable jobs never pushes placeable ones past ``max_candidates``:

* a job that fits on no node at all (``PlacementBlocked.fits_nowhere``) until
  the set of nodes changes;
* a job that was a candidate and stayed pending at basis ``b`` (placement's
  basis for that cycle), while nothing that could let it start has happened
  since ``b`` (no job ended or left the queue, no node changed, no job joined
  the queue and so possibly changed the head), except the first such job in
  order: it is the head whose reservation backfilling must respect.

At virtual time (simulation) a cycle is decided only on a ``ClockTicked``
(when the tick is the last event applied): the simulator publishes
everything that happens at an instant, then the tick, so one cycle sees the
whole instant, however the events were batched.

Dependencies (``services.scheduling.dependencies``): a job is a candidate only
once all its dependencies are met; one that can never be met ends the job
with ``JobDependencyNeverSatisfied`` and the reason.

Restarts: a failed job whose restart policy allows another attempt is
requeued (``JobRequeued``) until ``max_retries`` retries are used.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.scheduling.dependencies import MET, NEVER, dependency_status
from services.scheduling.policy import make_policy
from services.state.jobs import HOLDS_RESOURCES, Job, JobState, JobTable, Transition

__all__ = ["SchedulingCore", "SchedulingState"]

_NODE_EVENTS = (
    c.NodeRegistered,
    c.NodeReady,
    c.NodeUncordoned,
    c.NodeRemoved,
    c.NodeLost,
    c.NodeCordoned,
    c.NodeDraining,
)


class SchedulingState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.pending: dict[str, Job] = {}
        self.to_requeue: dict[str, Job] = {}
        self.cycle = 0  # last cycle decided (folded from our own events)
        self.cycle_basis = 0
        self.cycle_truncated = False
        self.cycle_candidates: list[str] = []
        self.placed_cycle = 0  # last cycle placement reported done
        self.dirty_seq = 0  # last sequence that could change a cycle's outcome
        self.capacity_seq = 0  # last sequence at which capacity was added (a job ended, a node changed)
        self.nodes_seq = 0  # last node event
        self.tick_seq = 0  # last ClockTicked
        self.blocked_basis: dict[str, int] = {}  # pending job -> basis of its last "blocked" outcome
        self.fits_nowhere: dict[str, int] = {}  # pending job -> basis at which no node could ever hold it
        self.dependents: dict[str, set[str]] = {}  # job -> jobs that depend on it
        self.gated: set[str] = set()  # pending jobs that have dependencies


@dataclass
class SchedulingCore:
    name: ClassVar[str] = "scheduling"
    max_candidates: int = 10_000
    policy: str = "fcfs"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG

    def __post_init__(self) -> None:
        self._policy = make_policy(self.policy)

    def initial(self) -> SchedulingState:
        return SchedulingState()

    def evolve(self, state: SchedulingState, event: Event, record: Record) -> SchedulingState:
        seq = record.seq
        match event:
            case c.SchedulingCycleCompleted(cycle=cycle, basis_seq=basis):
                state.cycle = max(state.cycle, cycle)
                state.cycle_basis = basis
                state.cycle_truncated = len(event.candidates) >= self.max_candidates
                state.cycle_candidates = list(event.candidates)
                return state
            case c.PlacementCycleCompleted(cycle=cycle, scheduled=scheduled, basis_seq=basis):
                state.placed_cycle = max(state.placed_cycle, cycle)
                if cycle == state.cycle:
                    # Every candidate still pending was blocked at placement's basis: it stays
                    # certainly blocked until capacity is added (placement repeats no unchanged
                    # explanation, so this is where the scheduler learns it).
                    for job_id in state.cycle_candidates:
                        if job_id in state.pending:
                            state.blocked_basis[job_id] = max(state.blocked_basis.get(job_id, 0), basis)
                    state.cycle_candidates = []
                    if scheduled and state.cycle_truncated:
                        state.dirty_seq = seq
                return state
            case c.JobRequeued(job_id=job_id):
                state.to_requeue.pop(job_id, None)
            case c.PlacementBlocked(job_id=job_id, basis_seq=basis):
                if job_id in state.pending:
                    state.blocked_basis[job_id] = basis
                    if event.fits_nowhere:
                        state.fits_nowhere[job_id] = basis
                    else:
                        state.fits_nowhere.pop(job_id, None)
            case c.ClockTicked():
                state.tick_seq = seq
                return state
        if isinstance(event, _NODE_EVENTS):
            state.dirty_seq = state.capacity_seq = state.nodes_seq = seq
            return state
        tr = state.jobs.apply(event, seq, state.now)
        if tr is not None:
            self._track(state, tr, seq)
        elif isinstance(event, c.JobPriorityChanged) and event.job_id in state.pending:
            state.dirty_seq = seq  # the order changed
        return state

    def _track(self, state: SchedulingState, tr: Transition, seq: int) -> None:
        job = tr.job
        if tr.before is None and job.spec is not None:
            for dep in job.spec.dependencies:
                state.dependents.setdefault(dep.job_id, set()).add(job.job_id)
        if job.job_id in state.dependents:
            state.dirty_seq = seq  # its dependants may now be ready, or never
        if tr.after is JobState.PENDING:
            state.pending[job.job_id] = job
            if job.spec is not None and job.spec.dependencies:
                state.gated.add(job.job_id)
            # A newcomer may rank before the head and take over the reservation, which can
            # let jobs through that the old head held back: reconsider them all.
            state.dirty_seq = state.capacity_seq = seq
        elif tr.before is JobState.PENDING:
            state.pending.pop(job.job_id, None)
            state.gated.discard(job.job_id)
            state.blocked_basis.pop(job.job_id, None)
            state.fits_nowhere.pop(job.job_id, None)
            if tr.after is not JobState.SCHEDULED:
                # Held or ended while waiting: if it was the head, its reservation is gone and
                # jobs that were held back by it may start now.
                state.dirty_seq = state.capacity_seq = seq
        if isinstance(tr.before, JobState) and tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
            state.dirty_seq = state.capacity_seq = seq  # capacity freed
        if tr.after in (JobState.FAILED, JobState.SUCCEEDED, JobState.PREEMPTED) and self._may_retry(job, tr.after):
            state.to_requeue[job.job_id] = job

    @staticmethod
    def _may_retry(job: Job, outcome: JobState) -> bool:
        spec = job.spec
        if spec is None:
            return False
        if outcome is JobState.PREEMPTED:
            return True
        if job.attempt > spec.max_retries:
            return False
        if outcome is JobState.FAILED:
            return spec.restart_policy in ("on-failure", "always")
        return spec.restart_policy == "always"

    def ordered_queue(self, state: SchedulingState, limit: int | None = None) -> list[Job]:
        """Pending jobs in scheduling order (all of them, or the first ``limit``)."""
        now, key = state.now, self._policy.key
        jobs = state.pending.values()
        if limit is None or limit >= len(state.pending):
            return sorted(jobs, key=lambda j: key(j, now))
        return heapq.nsmallest(limit, jobs, key=lambda j: key(j, now))

    def ready(self, state: SchedulingState, job: Job) -> bool:
        """All of the job's dependencies are met."""
        deps = job.spec.dependencies if job.spec else ()
        return all(dependency_status(d, state.jobs, state.to_requeue)[0] == MET for d in deps)

    def candidates(self, state: SchedulingState) -> list[Job]:
        """The first ``max_candidates`` pending jobs in order, leaving out the certainly blocked
        and those whose dependencies are not met yet."""
        blocked, nowhere = state.blocked_basis, state.fits_nowhere
        gated = state.gated
        if not blocked and not gated:
            return self.ordered_queue(state, self.max_candidates)
        out: list[Job] = []
        head_kept = False
        for job in self.ordered_queue(state):
            job_id = job.job_id
            if job_id in gated and not self.ready(state, job):
                continue
            if nowhere.get(job_id, -1) >= state.nodes_seq:
                continue
            if blocked.get(job_id, -1) >= state.capacity_seq:
                if head_kept:
                    continue
                head_kept = True
            out.append(job)
            if len(out) >= self.max_candidates:
                break
        return out

    def decide(self, state: SchedulingState) -> list[Event]:
        out: list[Event] = []
        # 1. requeue what the restart policy allows (in job order, deterministic)
        for job_id in sorted(state.to_requeue):
            job = state.to_requeue[job_id]
            out.append(
                c.JobRequeued(
                    id=f"scheduling/JobRequeued/{job_id}/{job.attempt}",
                    ts=state.now,
                    correlation_id=job_id,
                    source=self.name,
                    job_id=job_id,
                    attempt=job.attempt,
                    reason=f"attempt {job.attempt} {job.state.value.lower()}: {job.reason}".rstrip(": "),
                    not_before_ts=state.now,
                    basis_seq=state.seq,
                )
            )
        # 2. pending jobs a dependency can never satisfy end now, with the reason
        for job_id in sorted(state.gated):
            job = state.pending[job_id]
            for dep in job.spec.dependencies if job.spec else ():
                status, why = dependency_status(dep, state.jobs, state.to_requeue)
                if status == NEVER:
                    out.append(c.JobDependencyNeverSatisfied(
                        id=f"scheduling/JobDependencyNeverSatisfied/{job_id}", ts=state.now, correlation_id=job_id,
                        source=self.name, job_id=job_id, dependency=dep, reason=why, basis_seq=state.seq,
                    ))
                    break
        # 3. a cycle, if placement is done with the last one and something changed since
        # At virtual time a cycle is decided on the tick itself: the simulator has
        # published everything of the instant before it, and nothing follows it.
        ticked = not self.virtual_time or state.tick_seq == state.seq
        if state.placed_cycle >= state.cycle and state.dirty_seq > state.cycle_basis and state.pending and ticked:
            candidates = self.candidates(state)
            cycle = state.cycle + 1
            if not candidates:
                return out
            out.append(
                c.SchedulingCycleCompleted(
                    id=f"scheduling/SchedulingCycleCompleted/{cycle}",
                    ts=state.now,
                    correlation_id=str(cycle),
                    source=self.name,
                    cycle=cycle,
                    basis_seq=state.seq,
                    candidates=[j.job_id for j in candidates],
                    queued=len(state.pending),
                )
            )
        return out
