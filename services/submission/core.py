"""Submission: admission of jobs and of requests about them. Pure.

Folds client and operator inputs (``horizon.in.>``), its own verdicts, the job
lifecycle (to know whether a job is pending, running or over) and the nodes
(``NodeRegistered``, ``NodeRemoved``: the cluster's GPU vocabulary, and what
each node could ever hold, ``services.submission.capacity``). ``decide``
answers every input not yet answered, in log order:

* ``JobSubmitted`` -> ``JobAccepted`` (with the normalised ``JobSpec``) or
  ``JobRejected`` (field and reason): among the reasons, an empty command, and
  a job no registered node could ever hold ("resources.gpus: 99 GPUs per node
  ... the largest has 8 a100 GPUs"). A second submission of a known job id
  is the same job: it is answered ``RequestRejected`` (verb ``submit``) and
  changes nothing; an input that does not decode, ``InputRejected``. An array
  (``array: "0-99%10"``) becomes one ``JobAccepted`` per task,
  ``<job_id>_<index>``, in one round, each with ``array_tasks``, how many there
  are; the array id itself is not a job. A round makes new arrays' tasks until it
  has made ``array_tasks_per_round``; the arrays after them wait, whole, for the
  next round.
* A tenant's submission through the intake that would pass one of the tenant's
  limits (pending jobs, tasks per array, pending array tasks:
  ``tenant_limits.py``, set by ``TenantConfigured``) -> ``JobRejected`` whose
  ``limit`` names it.
* cancel -> ``JobCancelled`` (not started), ``JobStopRequested`` (scheduled or
  running: the agent stops it and reports ``JobCancelled``, with the same
  ``causation_id``), or
  ``RequestRejected``; hold / release / update -> ``JobHeld`` /
  ``JobReleased`` / ``JobPriorityChanged`` or ``RequestRejected``
  (``services/submission/requests.py``). A request
  naming an array answers for each of its tasks that were live when the
  request was folded. Owners ask on ``horizon.in.<tenant>.<verb>`` about their
  own jobs and may only lower a priority; operators ask on
  ``horizon.in._admin.<verb>`` about anyone's, either way.

Priority is the operators' to raise: a tenant's submission with a negative
nice is rejected (``normalise.normalise``), and an account may carry a
``max_priority_class`` (``AccountConfigured``, folded here from
``horizon.in._admin.account`` and applied only if the scheduler's own check,
``FairShare.check_account``, would apply it). The strictest limit on the
path from the job's account to the root bounds the class a tenant may submit
(``JobRejected``) or leave a job at by an update (``RequestRejected``).
Operators' requests are not limited.

Dependencies may name a job not submitted yet (a workflow can arrive in any
order, from several clients); the scheduler keeps the dependant waiting. What
submission refuses: a dependency on a job that was rejected (it will never
run), and one that would close a cycle among jobs still waiting for their
dependencies, named in the reason ("cycle c -> a -> b -> c"); these checks
against the log are ``services/submission/against_log.py``. What submission folds is
``services/submission/state.py``.

A request's answer carries ``causation_id = "seq:<n>"`` of the request; folding
the answers is what marks the request handled (an array request once every
task it named is answered), so a restart answers exactly what is still
unanswered. Likewise an array's submission stays open until every task's
``JobAccepted`` is in the log: a round cut short by a crash is finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import msgspec

from events import catalogue as c
from events.arrays import parse_array
from events.base import Event
from events.resources import ResourceError
from events.subjects import (ADMIN_TENANT, INTAKE_HEADER, LIMITS_HEADER, REFUSED_HEADER, USER_HEADER, WHOLE_LOG,
                             job_key, parse_subject, tenant_view)
from services.domain.envelope import Decider
from services.domain.features import node_features
from services.domain.protocol import Record
from services.domain.quoting import bounded_id, clipped, id_token
from services.submission.against_log import Round, check_against_log, remaining_tasks, run_as
from services.submission.intake_rules import malformed_input, scoped, scoped_spec
from services.submission.normalise import Limits, Rejection, admission
from services.submission import snapshot
from services.submission.relay import note_input, note_relay, relay_decisions
from services.submission.requests import VERBS, Shadow, answer_request, pending_request
from services.submission.state import Pending, SubmissionState
from services.submission.tenant_limits import TenantBook

__all__ = ["SubmissionCore", "SubmissionState"]

# What partitions are made of and matched against (services/domain/partitions.py)
_PARTITION_INPUTS = (c.PartitionConfigured, c.PartitionPolicyConfigured, c.ProfileConfigured, c.NodeRegistered,
                     c.NodeRemoved)


@dataclass
class SubmissionCore:
    name: ClassVar[str] = "submission"
    dead_letter_inputs: ClassVar[bool] = True  # the client inputs (horizon.in.>) are submission's to dead-letter
    # Decisions a log written before they existed lacks (the layout marker: relay.py); the audit does not
    # call them missing from such a log (services/runtime/replay.py).
    absent_from_old_logs: ClassVar[tuple[str, ...]] = ("LogLayoutChanged",)
    limits: Limits = field(default_factory=Limits)
    gpu_vocabulary: tuple[str, ...] = ()  # models known before any node registers, e.g. ("a100", "h100-80gb")
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    # A round makes new arrays' tasks until it has made this many; the arrays after them wait for the
    # next round (whole, each decided once). Every service folds a round's tasks before it sees what
    # follows them in the log: measured, 10,000 tasks in one round delayed another tenant's job by
    # 5.1 s (docs/tenants.md, Limits and fairness). A single array larger than this still takes one round.
    array_tasks_per_round: int = 1_000
    # Publish the log's layout marker on a log that has none (relay.py): the service as the host runs it
    # (part.py). Without it the core writes the layout before the marker (the simulator, the core's tests).
    mark_layout: bool = False
    # Records between snapshots (0: never; services/submission/snapshot.py): a restart folds the log after
    # the latest one instead of the whole log (30-40 s at a million queued jobs).
    snapshot_every: int = 50_000

    def fingerprint(self) -> str:
        """What a snapshot must have been folded with to be loaded by this core: what the fold reads of the
        core's configuration (its name, the subjects, virtual time, the GPU models known before any node)."""
        return (f"submission/{snapshot.SNAPSHOT_FORMAT}/{self.name}/{','.join(self.subjects)}/{int(self.virtual_time)}/"
                f"{','.join(self.gpu_vocabulary)}")

    def dump(self, state: SubmissionState) -> bytes:
        """The whole state as bytes (``snapshot.dump``)."""
        return snapshot.dump(state, self.fingerprint())

    def load(self, data: bytes) -> SubmissionState | None:
        """The state a ``dump`` wrote, or None when it is from another format or configuration."""
        return snapshot.load(data, self.fingerprint(), self.initial())

    def initial(self) -> SubmissionState:
        state = SubmissionState()
        for text in self.gpu_vocabulary:
            gpu_type, _, variant = text.lower().partition("-")
            state.gpu_models.add((gpu_type, variant or None))
        return state

    # ------------------------------------------------------------------ evolve

    def evolve(self, state: SubmissionState, event: Event, record: Record) -> SubmissionState:
        subject = parse_subject(record.subject)
        if subject is not None and subject.kind in ("input", "admin"):
            headers = record.headers or {}
            if subject.kind == "input" and headers.get(REFUSED_HEADER):
                state.malformed[record.seq] = malformed_input(
                    record, subject, headers, f"headers a client may not send: {headers[REFUSED_HEADER]}; "
                    "Horizon sets the log's own headers itself (send only Nats-Msg-Id and traceparent)",
                    path="headers")
                return state
            note_input(state, record, subject)  # an operator input to relay (layout 2)
            scope = subject.owner if subject.kind == "input" and headers.get(INTAKE_HEADER) == subject.owner else ""
            raw = event
            if scope:
                event = scoped(event, scope)
            if isinstance(event, c.JobSubmitted):
                # Keyed as its verdict will name it: a long (invalid) id is answered by a bounded one.
                key = bounded_id(event.job_id)
                pending = Pending(record.seq, state.now, subject.owner, event, scope=scope, raw=raw if scope else None,
                                   user=headers.get(USER_HEADER) if scope else None,
                                   limited=bool(scope and headers.get(LIMITS_HEADER)))
                if key not in state.verdicts and key not in state.submissions:
                    state.submissions[key] = pending
                elif subject.kind == "input":
                    state.repeats[record.seq] = pending  # answered: the id is taken
            elif type(event) in VERBS:  # the admin subjects also carry node and configuration commands
                state.requests[record.seq] = pending_request(state, record.seq, subject.owner, event,
                                                           admin=subject.kind == "admin", scope=scope)
                if scope:
                    state.requests[record.seq].user = headers.get(USER_HEADER)
            elif isinstance(event, c.AccountConfigured) and subject.kind == "admin":
                self._configure_account(state, event)
            elif isinstance(event, c.UserConfigured) and subject.kind == "admin":
                state.users[(event.tenant, event.name)] = event
            elif isinstance(event, c.TenantConfigured) and subject.kind == "admin":
                state.tenants.configure(event)
            elif isinstance(event, _PARTITION_INPUTS):  # the scheduler answers what cannot be applied
                state.partitions.apply(event, record.subject)
            elif isinstance(event, c.LicenseConfigured):  # applied as the scheduler applies it (it answers)
                state.licenses.apply(event, record.subject)
            return state
        if isinstance(event, c.InputRelayed):
            if subject is not None and subject.owner == self.name:
                note_relay(state, event)
            return state
        if event.source == self.name and event.causation_id and event.causation_id.startswith("seq:"):
            answered = int(event.causation_id[4:])
            state.malformed.pop(answered, None)
            state.repeats.pop(answered, None)
            pending = state.requests.get(answered)
            if pending is not None:
                pending.unanswered.discard(getattr(event, "job_id", ""))
                if not pending.unanswered:
                    del state.requests[pending.seq]
        if isinstance(event, c.NodeRegistered):
            state.gpu_models.update((d.type, d.variant) for d in event.gpus)
            state.features[event.node] = node_features(event.labels, [(d.type, d.variant) for d in event.gpus])
        elif isinstance(event, c.NodeRemoved):
            state.features.pop(event.node, None)
        if state.capacity.apply(event):  # NodeRegistered, NodeRemoved
            state.capacity_changed()
        if isinstance(event, _PARTITION_INPUTS):
            state.partitions.apply(event, record.subject)
        state.tenants.count(state.jobs.apply(event, record.seq, state.now))
        if isinstance(event, c.JobAccepted):
            state.accounts.leaf_for(event.spec, state.now)  # as the scheduler does: its account now exists
            state.numbering.seen(event)
            state.verdicts.add(event.job_id)
            state.submissions.pop(event.job_id, None)
            state.referenced.update(d.job_id for d in event.spec.dependencies)
            if event.spec.array is not None:
                self._array_accepted(state, event.spec.array)
        elif isinstance(event, c.JobRejected):
            state.verdicts.add(event.job_id)
            state.submissions.pop(event.job_id, None)
        return state

    def evolve_undecodable(self, state: SubmissionState, record: Record, error: str) -> SubmissionState:
        """A client input that does not decode gets its verdict, ``InputRejected``, on the sender's
        feed (operators' inputs are dead-lettered only)."""
        subject = parse_subject(record.subject)
        if subject is not None and subject.kind == "input":
            state.malformed[record.seq] = malformed_input(record, subject, record.headers or {}, error)
        return state


    @staticmethod
    def _configure_account(state: SubmissionState, event: c.AccountConfigured) -> None:
        """Apply an operator's account configuration exactly when the scheduler does (a refused one
        changes nothing); configuring an account again replaces its limit too."""
        if state.accounts.check_account(event) is not None:
            return
        state.accounts.configure_account(event, state.now)
        if event.tenants:
            state.account_tenants[event.account] = tuple(event.tenants)
        else:
            state.account_tenants.pop(event.account, None)
        if event.max_priority_class is None:
            state.class_limits.pop(event.account, None)
        else:
            state.class_limits[event.account] = event.max_priority_class

    @staticmethod
    def _array_accepted(state: SubmissionState, array_id: str) -> None:
        """An array's submission is answered once all its tasks are accepted."""
        pending = state.submissions.get(array_id)
        if pending is None:
            state.verdicts.add(array_id)
            return
        if not pending.tasks:
            pending.tasks = len(parse_array(pending.event.array).indices)  # type: ignore[attr-defined]
        if len(state.jobs.arrays.get(array_id, ())) >= pending.tasks:
            state.verdicts.add(array_id)
            del state.submissions[array_id]

    # ------------------------------------------------------------------ decide

    def decide(self, state: SubmissionState) -> list[Event]:
        out: list[Event] = list(relay_decisions(state, self.name, self.mark_layout))
        round_ = Round()
        for pending in sorted(state.submissions.values(), key=lambda p: p.seq):
            job_id: str = pending.event.job_id  # type: ignore[attr-defined]
            if job_id in round_.decided:
                continue  # a task id an array took earlier in this round: the same job, no second verdict
            new_array = (pending.limited and pending.event.array is not None  # type: ignore[attr-defined]
                         and job_id not in state.jobs.arrays)
            if new_array and round_.tasks >= self.array_tasks_per_round:
                continue  # this round has made enough tasks: the next one (after they are folded) decides it
            verdicts = self._admit(state, pending, round_)
            if new_array:
                round_.tasks += sum(1 for e in verdicts if isinstance(e, c.JobAccepted))
            out.extend(verdicts)
        shadow: dict[str, Shadow] = {}
        for seq in sorted(state.requests):
            out.extend(answer_request(state, state.requests[seq], shadow, self.name))
        for seq in sorted(state.repeats):
            out.append(self._repeat(state, state.repeats[seq]))
        for seq in sorted(state.malformed):
            out.append(msgspec.structs.replace(state.malformed[seq], ts=state.now, basis_seq=state.seq))
        return out

    def _repeat(self, state: SubmissionState, pending: Pending) -> c.RequestRejected:
        """The answer to a second submission of a job id (another body, or the same one published
        again without its Nats-Msg-Id): it changes nothing, and says so."""
        key = bounded_id(pending.event.job_id)  # type: ignore[attr-defined]
        job = state.jobs.get(key)
        first = state.submissions.get(key)
        if job is not None and job.spec is not None:
            known = f"it was accepted ({job.state.value})"
        elif job is not None:
            known = f"it was {job.state.value}"
        elif first is not None:
            known = f"its first submission (seq {first.seq}) is being judged"
        else:
            known = "its tasks were accepted"
        shown = tenant_view(pending.tenant, key)
        return Decider(self.name)(
            c.RequestRejected, id_token(key), pending.seq, job_id=key,
            tenant=bounded_id(pending.tenant), verb="submit", request_seq=pending.seq,
            reason=clipped(f"job id {shown!r} is already submitted and {known}: a second submission changes "
                           "nothing; use another job id"),
            ts=state.now, causation_id=f"seq:{pending.seq}", correlation_id=key, basis_seq=state.seq,
            source=self.name)

    # -- admission

    def _admit(self, state: SubmissionState, pending: Pending, round_: Round) -> list[Event]:
        sub: c.JobSubmitted = pending.event  # type: ignore[assignment]
        decide = Decider(self.name, ts=state.now, causation_id=f"seq:{pending.seq}", submitted_seq=pending.seq,
                         basis_seq=state.seq, source=self.name)
        done = state.jobs.arrays.get(sub.job_id)
        warnings: list[str] = []
        try:
            if pending.limited and not done:
                # The tenant's limits first: an array over them costs a parse, not its tasks' specs.
                made = _jobs_made(sub, self.limits)
                if made is not None:
                    state.tenants.check(pending.scope, made[0], made[1], round_.load)
            admitted = admission(pending.raw or sub, subject_tenant=pending.tenant,  # type: ignore[arg-type]
                                 gpu_models=state.gpu_models, limits=self.limits, capacity=state.capacity,
                                 partitions=state.partitions, capacity_of=state.capacity_of, scope=pending.scope,
                                 features=state.features, licenses=state.licenses)
            jobs, warnings = admitted.jobs, list(admitted.warnings)
            if pending.scope:
                jobs = [(job_key(pending.scope, job_id), scoped_spec(spec, pending.scope)) for job_id, spec in jobs]
            if pending.user is not None:
                jobs = run_as(state, pending.scope, pending.user, jobs)
            if done:
                # A round cut short (a crash between the tasks' publications): finish it. The log
                # checks passed when the first tasks were accepted, and the rest are the same job.
                jobs = [(job_id, spec) for job_id, spec in jobs if job_id not in state.jobs.jobs]
            else:
                check_against_log(state, sub, jobs, round_, operator=pending.tenant == ADMIN_TENANT)
        except Rejection as rej:
            if done:  # the limits changed since the first tasks were accepted: finish with their spec
                jobs = remaining_tasks(state, sub)
            else:
                round_.decided.add(sub.job_id)
                round_.rejected.add(sub.job_id)
                # What the client wrote comes back bounded: the answer must fit in one message.
                # Its tenant is the sender's (the subject's), whatever the body says: a body naming
                # another tenant is answered to its sender, and the other tenant sees nothing.
                tenant = sub.tenant if pending.tenant == ADMIN_TENANT else pending.tenant
                return [decide(c.JobRejected, id_token(sub.job_id),
                               job_id=bounded_id(sub.job_id), tenant=bounded_id(tenant),
                               reason=clipped(str(rej)), field=rej.field, correlation_id=bounded_id(sub.job_id),
                               limit=getattr(rej, "limit", ""))]
        # Numbers after those of the scope and of this round (numbering.py); a round cut short goes on
        # after its first tasks, under their array's number.
        first = state.jobs.jobs.get(done[0]) if done else None
        jobs = state.numbering.give(jobs, round_.numbers,
                                    first.spec.array_number if first is not None and first.spec is not None else 0)
        round_.add(sub.job_id, jobs)
        if jobs:
            TenantBook.add(round_.load, jobs[0][1].tenant, len(jobs), len(jobs) if sub.array is not None else 0)
        # An array's tasks each say how many there are (a round finishing a cut one too: all of them).
        tasks = len(parse_array(sub.array).indices) if sub.array is not None else 0
        return [
            decide(c.JobAccepted, job_id, job_id=job_id, spec=spec, submitted_ts=pending.time, correlation_id=job_id,
                   warnings=[clipped(w) for w in warnings], array_tasks=tasks)
            for job_id, spec in jobs
        ]


def _jobs_made(sub: c.JobSubmitted, limits: Limits) -> tuple[int, int] | None:
    """How many jobs a submission would make, and how many of them are array tasks; None for an array
    spec that is not valid (admission says why)."""
    if sub.array is None:
        return 1, 0
    try:
        tasks = len(parse_array(sub.array, "array", max_tasks=limits.max_array_tasks).indices)
    except ResourceError:
        return None
    return tasks, tasks
