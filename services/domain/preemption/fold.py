"""The preemption fold: who is blocked, who is being stopped for whom, recent preemptions. Pure.

``PreemptionFold`` folds, besides its own ledger of nodes, the scheduler's
``QueueFold`` (jobs, accounts, quotas, fair-share rates) at first come first
served, since only the accounts matter here. The ledger follows that view's
job table: one table, each event applied to it once, jobs that ended for good
settled as the scheduler and placement settle them. ``PreemptionPlanner``
(``planner.py``) chooses victims from this state; the preemption service adds
``decide`` (``services/preemption/core.py``), the projections use the planner
for ``horizon preempt --dry-run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import catalogue as c
from events.base import Event
from events.subjects import EVENTS_ONLY, WHOLE_LOG, parse_subject
from services.domain.cluster import fold_cluster
from services.domain.fit.context import hold_room, release_room
from services.domain.jobs import HOLDS_RESOURCES, JobState
from services.domain.preemption.state import PreemptionState
from services.domain.protocol import Record
from services.domain.queue.fold import QueueFold

__all__ = ["PreemptionFold", "PREEMPTION"]

PREEMPTION = "preemption"  # the service whose decisions and answers this fold follows


@dataclass
class PreemptionFold:
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    layout_subjects: tuple[str, ...] = EVENTS_ONLY  # layout 2: operator inputs come relayed
    _sched: QueueFold = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._sched = QueueFold(policy="fcfs", virtual_time=self.virtual_time)

    @property
    def queue(self) -> QueueFold:
        """The inner scheduler's fold (``state.sched`` is its state)."""
        return self._sched

    def initial(self) -> PreemptionState:
        return PreemptionState(self._sched.initial())

    # ------------------------------------------------------------------ evolve

    def _inner_only(self, state: PreemptionState, event: Event, record: Record) -> PreemptionState:
        """An event that moves no job and changes no node in the ledger: the view alone folds it."""
        self._sched.fold(state.sched, event, record)
        return state

    def evolve(self, state: PreemptionState, event: Event, record: Record) -> PreemptionState:
        inner = state.sched
        inner.seq, inner.now = state.seq, state.now
        # The job table is the scheduler's view's (one table, folded once): what is read of a job below is
        # read before the view applies the event, and the ledger follows the transition the view made.
        match event:
            case c.PlacementBlocked(job_id=job_id):
                job = state.jobs.get(job_id)
                if job is not None and job.state is JobState.PENDING:
                    state.blocked[job_id] = event
                return self._inner_only(state, event, record)
            case c.SchedulingCycleCompleted(cycle=cycle, candidates=candidates):
                state.candidates[cycle] = list(candidates)
                return self._inner_only(state, event, record)
            case c.PlacementCycleCompleted(cycle=cycle):
                for job_id in state.candidates.pop(cycle, ()):
                    job = state.jobs.get(job_id)
                    if job is not None and job.state is JobState.PENDING:
                        state.blocked_seq[job_id] = record.seq
                for old in [k for k in state.candidates if k < cycle]:
                    del state.candidates[old]
                return self._inner_only(state, event, record)
            case c.PreemptionConfigured():
                subject = parse_subject(record.subject)
                why = "PreemptionConfigured is accepted only on horizon.in._admin.preemption" \
                    if subject is None or subject.kind != "admin" else state.config.check(event)
                if why is None:
                    state.config = state.config.updated(event)
                else:
                    state.config_rejections[record.input_seq] = why
                return self._inner_only(state, event, record)
            case c.ConfigRejected(request_seq=request_seq) if event.source == PREEMPTION:
                state.config_rejections.pop(request_seq, None)
                return self._inner_only(state, event, record)
            case c.PreemptionRequested(job_id=victim, for_job=for_job):
                job = state.jobs.get(victim)
                pre = state.jobs.get(for_job) if for_job else None
                if job is not None and pre is not None and pre.state is JobState.PENDING:
                    hold_room(state.held, job.allocations, for_job)
                if job is not None and job.state in HOLDS_RESOURCES and job.attempt == event.attempt:
                    state.stopping[victim] = for_job
                    if event.source == PREEMPTION and job.spec is not None:
                        state.recent.append((state.now, job.spec.account))
                return self._inner_only(state, event, record)
            case c.JobResized(job_id=victim, for_job=for_job) if for_job:
                # A shrink for a preemptor: the nodes it gives back are held for it, and its round has
                # ended (nothing is left stopping): it preempts more only if a cycle leaves it blocked again.
                job = state.jobs.get(victim)
                pre = state.jobs.get(for_job)
                if job is not None and state.jobs.resize_applies(event):
                    kept = {a.node for a in event.allocations}
                    if pre is not None and pre.state is JobState.PENDING:
                        hold_room(state.held, [a for a in job.allocations if a.node not in kept], for_job)
                        state.round_ended[for_job] = record.seq
                    if event.source == PREEMPTION and job.spec is not None:
                        state.recent.append((state.now, job.spec.account))
            case c.JobCheckpointed(job_id=job_id):
                state.checkpoint_ts[job_id] = state.now
            case c.JobPreempted(job_id=job_id, for_job=for_job):
                job = state.jobs.get(job_id)
                if job is not None and job.attempt == event.attempt and job.state in HOLDS_RESOURCES:
                    state.preempted[job_id] = state.preempted.get(job_id, 0) + 1
                    if for_job:
                        state.no_cascade.add(job_id)
        tr = fold_cluster(state.cluster, state.jobs, event, record.seq, state.now,
                          owner=lambda: self._sched.fold(inner, event, record))
        if tr is not None:
            job_id = tr.job.job_id
            if tr.before is JobState.PENDING and state.held:
                release_room(state.held, job_id)
            if tr.after is not JobState.PENDING:
                state.blocked.pop(job_id, None)
                state.blocked_seq.pop(job_id, None)
                state.round_ended.pop(job_id, None)
            if tr.after in HOLDS_RESOURCES:
                state.no_cascade.discard(job_id)
            holds_before, holds_after = tr.before in HOLDS_RESOURCES, tr.after in HOLDS_RESOURCES
            if holds_before != holds_after and tr.job.spec is not None:
                sign = 1 if holds_after else -1
                cls = tr.job.spec.priority_class
                state.running_by_class[cls] = state.running_by_class.get(cls, 0) + sign
                state.borrowed_running += sign if tr.job.borrowed else 0
            if tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
                preemptor = state.stopping.pop(job_id, None)
                if preemptor:
                    state.round_ended[preemptor] = record.seq
                state.checkpoint_ts.pop(job_id, None)
        while state.recent and state.recent[0][0] <= state.now - 60.0:
            state.recent.popleft()
        return state
