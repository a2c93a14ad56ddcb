"""Submission: admission of jobs and of requests about them. Pure.

Folds client inputs (``horizon.in.>``), its own verdicts, the job lifecycle
(to know whether a job is pending, running or over) and node registrations
(the cluster's GPU vocabulary). ``decide`` answers every input not yet
answered, in log order:

* ``JobSubmitted`` -> ``JobAccepted`` (with the normalised ``JobSpec``) or
  ``JobRejected`` (field and reason). A second submission of a known job id
  is the same job: it gets no second verdict.
* cancel -> ``JobCancelled`` (not started), ``JobStopRequested`` (scheduled or
  running: the agent stops it and reports ``JobCancelled``), or
  ``RequestRejected``; hold / release / update -> ``JobHeld`` /
  ``JobReleased`` / ``JobPriorityChanged`` or ``RequestRejected``.

A request's answer carries ``causation_id = "seq:<n>"`` of the request; folding
that answer is what marks the request handled, so a restart answers exactly
the requests still unanswered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG
from events.subjects import parse_subject
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.state.jobs import LIVE, JobState, JobTable
from services.submission.validate import Limits, Rejection, normalise

__all__ = ["SubmissionCore", "SubmissionState"]


@dataclass(slots=True)
class _Pending:
    seq: int
    time: float
    tenant: str  # from the subject
    event: Event


class SubmissionState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.gpu_models: set[tuple[str, str | None]] = set()
        self.submissions: dict[str, _Pending] = {}  # job id -> unanswered submission
        self.requests: dict[int, _Pending] = {}  # request seq -> unanswered request
        self.verdicts: set[str] = set()  # job ids with an accept/reject in the log


@dataclass
class SubmissionCore:
    name: ClassVar[str] = "submission"
    limits: Limits = field(default_factory=Limits)
    gpu_vocabulary: tuple[str, ...] = ()  # models known before any node registers, e.g. ("a100", "h100-80gb")
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG

    def initial(self) -> SubmissionState:
        state = SubmissionState()
        for text in self.gpu_vocabulary:
            gpu_type, _, variant = text.lower().partition("-")
            state.gpu_models.add((gpu_type, variant or None))
        return state

    # ------------------------------------------------------------------ evolve

    def evolve(self, state: SubmissionState, event: Event, record: Record) -> SubmissionState:
        subject = parse_subject(record.subject)
        if subject is not None and subject.kind == "input":
            if isinstance(event, c.JobSubmitted):
                if event.job_id not in state.verdicts and event.job_id not in state.submissions:
                    state.submissions[event.job_id] = _Pending(record.seq, state.now, subject.owner, event)
            else:
                state.requests[record.seq] = _Pending(record.seq, state.now, subject.owner, event)
            return state
        if isinstance(event, (c.JobAccepted, c.JobRejected)):
            state.verdicts.add(event.job_id)
            state.submissions.pop(event.job_id, None)
        elif isinstance(event, c.NodeRegistered):
            state.gpu_models.update((d.type, d.variant) for d in event.gpus)
        if event.source == self.name and event.causation_id and event.causation_id.startswith("seq:"):
            state.requests.pop(int(event.causation_id[4:]), None)
        state.jobs.apply(event, record.seq, state.now)
        return state

    # ------------------------------------------------------------------ decide

    def decide(self, state: SubmissionState) -> list[Event]:
        out: list[Event] = []
        # Accepted in this round, so a later submission in the same round may depend on it.
        accepted_now: set[str] = set()
        known = _KnownJobs(state.jobs, accepted_now)
        for pending in sorted(state.submissions.values(), key=lambda p: p.seq):
            out.append(self._admit(state, pending, known))
            if isinstance(out[-1], c.JobAccepted):
                accepted_now.add(pending.event.job_id)  # type: ignore[attr-defined]
        shadow: dict[str, JobState] = {}
        for seq in sorted(state.requests):
            out.append(self._answer(state, state.requests[seq], shadow))
        return out

    def _admit(self, state: SubmissionState, pending: _Pending, known: _KnownJobs) -> Event:
        sub: c.JobSubmitted = pending.event  # type: ignore[assignment]
        common = {
            "ts": state.now,
            "causation_id": f"seq:{pending.seq}",
            "correlation_id": sub.job_id,
            "source": self.name,
        }
        try:
            spec = normalise(
                sub,
                subject_tenant=pending.tenant,
                gpu_models=state.gpu_models,
                known_jobs=known,  # type: ignore[arg-type]
                limits=self.limits,
            )
        except Rejection as rej:
            return c.JobRejected(
                id=f"submission/JobRejected/{sub.job_id}",
                job_id=sub.job_id,
                tenant=sub.tenant,
                reason=str(rej),
                field=rej.field,
                submitted_seq=pending.seq,
                basis_seq=state.seq,
                **common,
            )
        return c.JobAccepted(
            id=f"submission/JobAccepted/{sub.job_id}",
            job_id=sub.job_id,
            spec=spec,
            submitted_seq=pending.seq,
            submitted_ts=pending.time,
            basis_seq=state.seq,
            **common,
        )

    def _answer(self, state: SubmissionState, pending: _Pending, shadow: dict[str, JobState]) -> Event:
        req = pending.event
        job_id: str = req.job_id  # type: ignore[attr-defined]
        verb = {
            c.JobCancelRequested: "cancel",
            c.JobHoldRequested: "hold",
            c.JobReleaseRequested: "release",
            c.JobUpdateRequested: "update",
        }.get(type(req), "unknown")
        base = {
            "ts": state.now,
            "causation_id": f"seq:{pending.seq}",
            "correlation_id": job_id,
            "source": self.name,
            "basis_seq": state.seq,
        }
        suffix = f"{job_id}/{pending.seq}"

        def reject(reason: str) -> Event:
            return c.RequestRejected(
                id=f"submission/RequestRejected/{suffix}",
                job_id=job_id,
                tenant=pending.tenant,
                verb=verb,
                reason=reason,
                request_seq=pending.seq,
                **base,
            )

        job = state.jobs.get(job_id)
        if job is None or job.spec is None or job.spec.tenant != pending.tenant:
            # The same answer whether the job does not exist or belongs to someone else.
            return reject(f"no job {job_id!r} in tenant {pending.tenant!r}")
        if getattr(req, "tenant", pending.tenant) != pending.tenant:
            return reject(f"tenant {req.tenant!r} does not match the subject's tenant {pending.tenant!r}")  # type: ignore[attr-defined]
        current = shadow.get(job_id, job.state)
        if current not in LIVE:
            return reject(f"job {job_id} has already ended ({current.value})")
        reason = getattr(req, "reason", "") or f"{verb} requested by {getattr(req, 'user', '') or pending.tenant}"
        match verb:
            case "cancel":
                if current in (JobState.PENDING, JobState.HELD):
                    shadow[job_id] = JobState.CANCELLED
                    return c.JobCancelled(
                        id=f"submission/JobCancelled/{suffix}", job_id=job_id, reason=reason, attempt=job.attempt, **base
                    )
                shadow[job_id] = JobState.CANCELLED
                return c.JobStopRequested(
                    id=f"submission/JobStopRequested/{suffix}", job_id=job_id, attempt=job.attempt, reason=reason, **base
                )
            case "hold":
                if current is not JobState.PENDING:
                    return reject(f"only a pending job can be held; {job_id} is {current.value}")
                shadow[job_id] = JobState.HELD
                return c.JobHeld(id=f"submission/JobHeld/{suffix}", job_id=job_id, reason=reason, **base)
            case "release":
                if current is not JobState.HELD:
                    return reject(f"only a held job can be released; {job_id} is {current.value}")
                shadow[job_id] = JobState.PENDING
                return c.JobReleased(id=f"submission/JobReleased/{suffix}", job_id=job_id, **base)
            case "update":
                if current not in (JobState.PENDING, JobState.HELD):
                    return reject(f"only a pending or held job can change priority; {job_id} is {current.value}")
                pc = req.priority_class or job.spec.priority_class  # type: ignore[attr-defined]
                if pc not in c.PRIORITY_CLASSES:
                    return reject(f"priority_class: {pc!r} is not one of {', '.join(c.PRIORITY_CLASSES)}")
                nice = job.spec.nice if req.nice is None else req.nice  # type: ignore[attr-defined]
                if isinstance(nice, bool) or not isinstance(nice, int) or not -10000 <= nice <= 10000:
                    return reject(f"nice: {nice!r} is outside -10000..10000")
                return c.JobPriorityChanged(
                    id=f"submission/JobPriorityChanged/{suffix}", job_id=job_id, priority_class=pc, nice=nice, **base
                )
        return reject(f"unknown request {type(req).__name__}")


class _KnownJobs:
    """Membership test over accepted jobs, without copying the table each round."""

    def __init__(self, jobs: JobTable, extra: set[str]) -> None:
        self._jobs = jobs
        self._extra = extra

    def __contains__(self, job_id: object) -> bool:
        if job_id in self._extra:
            return True
        job = self._jobs.get(job_id)  # type: ignore[arg-type]
        return job is not None and job.state is not JobState.REJECTED
