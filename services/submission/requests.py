"""The answers to requests about jobs: cancel, hold, release and update. Pure.

* cancel -> ``JobCancelled`` (not started), ``JobStopRequested`` (scheduled or running: the agent
  stops it and reports ``JobCancelled``, with the same ``causation_id``), or ``RequestRejected``;
* hold / release / update -> ``JobHeld`` / ``JobReleased`` / ``JobPriorityChanged`` or
  ``RequestRejected``.

A request naming an array answers for each of its tasks that were live when the request was
folded (``pending_request``). Owners ask about their own jobs and may only lower a priority;
operators ask about anyone's, either way. Answers of one round see the earlier ones (``Shadow``):
they are not folded yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from events import catalogue as c
from events.base import Event
from events.subjects import ADMIN_TENANT, tenant_view
from events.vocabulary import NICE_LIMIT
from services.domain.envelope import Decider
from services.domain.jobs import LIVE, Job, JobState
from services.domain.quoting import bounded_id, clipped, id_token
from services.submission.normalise import class_limit_reason
from services.submission.state import RANK, Pending, SubmissionState

__all__ = ["VERBS", "Shadow", "pending_request", "answer_request"]

VERBS: dict[type[Event], str] = {
    c.JobCancelRequested: "cancel",
    c.JobHoldRequested: "hold",
    c.JobReleaseRequested: "release",
    c.JobUpdateRequested: "update",
}


@dataclass(slots=True)
class Shadow:
    """A job as this round's earlier answers left it (they are not folded yet)."""

    state: JobState
    priority_class: str
    nice: int


def pending_request(state: SubmissionState, seq: int, owner: str, event: Event, admin: bool,
                    scope: str = "") -> Pending:
    """A request as folded: the jobs it names (for an array its owner may see, the tasks live now)."""
    job_id: str = event.job_id  # type: ignore[attr-defined]
    pending = Pending(seq, state.now, owner, event, admin=admin, targets=(bounded_id(job_id),), scope=scope)
    tasks = state.jobs.arrays.get(job_id)
    owner_spec = state.jobs.jobs[tasks[0]].spec if tasks else None
    if tasks and owner_spec is not None and (admin or owner_spec.tenant == owner):
        # The tasks live now: later changes are judged per task when answering, and a
        # restart in the middle of the answers finishes exactly this list. (Someone else's
        # array gets the one answer an unknown job gets: it does not learn the tasks.)
        live = tuple(t for t in tasks if state.jobs.jobs[t].state in LIVE)
        pending.targets = live or (job_id,)
    pending.unanswered = set(pending.targets)
    return pending


def answer_request(state: SubmissionState, pending: Pending, shadow: dict[str, Shadow], by: str) -> list[Event]:
    """``by``'s answers to one request, one per job it names that is not answered yet."""
    req = pending.event
    named: str = req.job_id  # type: ignore[attr-defined]
    verb = VERBS[type(req)]
    out: list[Event] = []
    for job_id in pending.targets:
        if job_id not in pending.unanswered:
            continue  # answered before a restart
        decide = Decider(by, ts=state.now, causation_id=f"seq:{pending.seq}", correlation_id=job_id, source=by,
                         basis_seq=state.seq)
        key = (id_token(job_id), pending.seq)
        why = _judge(state, pending, verb, job_id, named, shadow)
        if isinstance(why, str):
            out.append(decide(c.RequestRejected, *key, job_id=job_id, tenant=bounded_id(pending.tenant), verb=verb,
                              reason=clipped(why), request_seq=pending.seq))
            continue
        job, current = why
        who = getattr(req, "user", "") or ("an operator" if pending.admin else pending.tenant)
        reason = clipped(getattr(req, "reason", "") or f"{verb} requested by {who}")
        match verb:
            case "cancel":
                shadow[job_id] = Shadow(JobState.CANCELLED, current.priority_class, current.nice)
                if current.state in (JobState.PENDING, JobState.HELD):
                    out.append(decide(c.JobCancelled, *key, job_id=job_id, reason=reason, attempt=job.attempt))
                else:
                    out.append(decide(c.JobStopRequested, *key, job_id=job_id, attempt=job.attempt, reason=reason))
            case "hold":
                shadow[job_id] = Shadow(JobState.HELD, current.priority_class, current.nice)
                out.append(decide(c.JobHeld, *key, job_id=job_id, reason=reason))
            case "release":
                shadow[job_id] = Shadow(JobState.PENDING, current.priority_class, current.nice)
                out.append(decide(c.JobReleased, *key, job_id=job_id))
            case "update":
                pc = req.priority_class or current.priority_class  # type: ignore[attr-defined]
                nice = current.nice if req.nice is None else req.nice  # type: ignore[attr-defined]
                shadow[job_id] = Shadow(current.state, pc, nice)
                out.append(decide(c.JobPriorityChanged, *key, job_id=job_id, priority_class=pc, nice=nice))
    return out


def _judge(state: SubmissionState, pending: Pending, verb: str, job_id: str, named: str,
           shadow: dict[str, Shadow]) -> str | tuple[Job, Shadow]:
    """Why the request cannot be carried out for ``job_id``, or (the job, its state in this round)."""
    req = pending.event
    tasks = state.jobs.arrays.get(named)
    job = state.jobs.get(tasks[0] if tasks and job_id == named else job_id)
    if job is None or job.spec is None or not (pending.admin or job.spec.tenant == pending.tenant):
        # The same answer whether the job does not exist or belongs to someone else.
        return f"no job {tenant_view(pending.tenant, named)!r} in tenant {pending.tenant!r}"
    if tasks and job_id == named:
        return f"array {named} has no live task: all {len(tasks)} have ended"
    body_tenant = getattr(req, "tenant", pending.tenant)
    if pending.admin:
        if body_tenant not in (ADMIN_TENANT, job.spec.tenant):
            return (f"tenant {body_tenant!r} is neither {ADMIN_TENANT!r} nor the job's tenant "
                    f"{job.spec.tenant!r}")
    elif body_tenant != pending.tenant:
        return f"tenant {body_tenant!r} does not match the subject's tenant {pending.tenant!r}"
    if pending.user is not None and pending.user != pending.tenant and job.spec.user != pending.user:
        # A tenant's user acts on its own jobs (as in Slurm); the tenant's own login on all of the tenant's.
        if pending.user == "-":
            return "the intake could not tell which user sent this (the server's import lacks `share: true`)"
        return (f"job {tenant_view(pending.tenant, job_id)!r} is user {job.spec.user!r}'s: a user may {verb} only "
                f"its own jobs (the tenant's login {pending.tenant!r} may {verb} any of the tenant's)")
    current = shadow.get(job_id) or Shadow(job.state, job.spec.priority_class, job.spec.nice)
    if current.state not in LIVE:
        return f"job {job_id} has already ended ({current.state.value})"
    if verb == "hold" and current.state is not JobState.PENDING:
        return f"only a pending job can be held; {job_id} is {current.state.value}"
    if verb == "release" and current.state is not JobState.HELD:
        return f"only a held job can be released; {job_id} is {current.state.value}"
    if verb == "update":
        if current.state not in (JobState.PENDING, JobState.HELD):
            return f"only a pending or held job can change priority; {job_id} is {current.state.value}"
        pc = req.priority_class or current.priority_class  # type: ignore[attr-defined]
        if pc not in c.PRIORITY_CLASSES:
            return f"priority_class: {pc!r} is not one of {', '.join(c.PRIORITY_CLASSES)}"
        nice = current.nice if req.nice is None else req.nice  # type: ignore[attr-defined]
        if isinstance(nice, bool) or not isinstance(nice, int) or not -NICE_LIMIT <= nice <= NICE_LIMIT:
            return f"nice: {nice!r} is outside -{NICE_LIMIT}..{NICE_LIMIT}"
        if not pending.admin:
            if RANK[pc] < RANK[current.priority_class]:
                return (f"priority_class: raising {job_id} from {current.priority_class!r} to {pc!r} needs an "
                        "operator (horizon.in._admin.update); an owner may only lower a job's priority")
            if nice < current.nice:
                return (f"nice: lowering {job_id}'s nice from {current.nice} to {nice} raises its priority and "
                        "needs an operator (horizon.in._admin.update); an owner may only raise nice")
            # A limit set after the job was accepted does not end it, but an owner's change must
            # leave the job within it.
            over = class_limit_reason(pc, state.class_limit(job.spec.account))
            if over is not None:
                return f"priority_class: for {job_id}, {over}"
    return job, current
