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
  ``JobReleased`` / ``JobPriorityChanged`` or ``RequestRejected``. A request
  naming an array answers for each of its tasks that were live when the
  request was folded. Owners ask on ``horizon.in.<tenant>.<verb>`` about their
  own jobs and may only lower a priority; operators ask on
  ``horizon.in._admin.<verb>`` about anyone's, either way.

Priority is the operators' to raise: a tenant's submission with a negative
nice is rejected (``validate.normalise``), and an account may carry a
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
dependencies, named in the reason ("cycle c -> a -> b -> c").

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
from events.arrays import parse_array, task_id
from events.resources import ResourceError
from events.base import Event
from events.vocabulary import NICE_LIMIT
from events.subjects import (ADMIN_TENANT, INTAKE_HEADER, LIMITS_HEADER, REFUSED_HEADER, USER_HEADER, WHOLE_LOG,
                             job_key, parse_subject, tenant_view)
from services.domain.protocol import Record
from services.domain.protocol import CoreState
from services.domain.fairshare import FairShare
from services.domain.quoting import bounded_id, clipped, id_token
from services.domain.features import node_features
from services.domain.jobs import LIVE, JobState, JobTable
from services.submission.capacity import Capacity
from services.submission.intake_rules import malformed_input, scoped, scoped_spec
from services.submission.tenant_limits import TenantBook
from services.domain.partitions import Partitions
from services.submission.normalise import Limits, Rejection, admission, class_limit_reason

__all__ = ["SubmissionCore", "SubmissionState"]

_VERBS: dict[type[Event], str] = {
    c.JobCancelRequested: "cancel",
    c.JobHoldRequested: "hold",
    c.JobReleaseRequested: "release",
    c.JobUpdateRequested: "update",
}
_RANK = {name: rank for rank, name in enumerate(c.PRIORITY_CLASSES)}  # 0 = critical: a lower rank runs first
# What partitions are made of and matched against (services/domain/partitions.py)
_PARTITION_INPUTS = (c.PartitionConfigured, c.PartitionPolicyConfigured, c.ProfileConfigured, c.NodeRegistered,
                     c.NodeRemoved)


@dataclass(slots=True)
class _Pending:
    seq: int
    time: float
    tenant: str  # from the subject; "_admin" for an operator
    event: Event
    admin: bool = False
    # A request: the jobs it names (the job, or the live tasks of an array when it was folded)
    # and those still unanswered. An array submission: how many tasks it makes.
    targets: tuple[str, ...] = ()
    unanswered: set[str] = field(default_factory=set)
    tasks: int = 0
    # Came through the intake: the tenant whose ids these are (``event`` names its jobs by their
    # keys ``<tenant>:<id>``), and the event as the tenant wrote it.
    scope: str = ""
    raw: Event | None = None
    # The user the server authenticated (the intake's Horizon-User; "-": it could not tell), None for
    # an input that came without it (an operator's, a log from before users, no accounts).
    user: str | None = None
    # Stored by an intake that applies tenants' limits (Horizon-Limits): its tenant's limits apply, and
    # an array of it may wait for the next round (tenant_limits.py). A log from before them has none.
    limited: bool = False


class SubmissionState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.gpu_models: set[tuple[str, str | None]] = set()  # every model ever registered (a vocabulary)
        self.capacity = Capacity()  # what the registered nodes offer now
        self.features: dict[str, frozenset[str]] = {}  # node -> its features (a --constraint is judged on them)
        self.submissions: dict[str, _Pending] = {}  # job id -> unanswered submission
        self.requests: dict[int, _Pending] = {}  # request seq -> unanswered request
        self.verdicts: set[str] = set()  # job and array ids with their verdict in the log
        self.referenced: set[str] = set()  # ids that accepted jobs depend on (only those can close a cycle)
        # The account tree as the scheduler builds it (configured accounts, and those its jobs
        # created), only to judge AccountConfigured as it does; and each account's class limit.
        self.accounts = FairShare()
        self.class_limits: dict[str, str] = {}  # account -> max_priority_class
        self.account_tenants: dict[str, tuple[str, ...]] = {}  # account -> the tenants it is open to
        self.users: dict[tuple[str, str], c.UserConfigured] = {}  # (tenant, user) -> its Unix identity
        self.tenants = TenantBook()  # each tenant's limits and what it has waiting (tenant_limits.py)
        self.malformed: dict[int, c.InputRejected] = {}  # input seq -> its verdict, not yet in the log
        self.repeats: dict[int, _Pending] = {}  # seq -> a submission of a job id already submitted
        self.partitions = Partitions()  # which partition a job gets (services/domain/partitions.py)
        self._capacity_epoch = 0  # changes with what the registered nodes offer
        self._partition_capacity: dict[str, tuple[tuple[int, int], Capacity]] = {}

    def capacity_changed(self) -> None:
        self._capacity_epoch += 1

    def capacity_of(self, partition: str) -> Capacity:
        """What the registered nodes of ``partition`` could ever hold (``Capacity.subset``), kept until
        the nodes or the partitions change."""
        key = (self._capacity_epoch, self.partitions.version)
        found = self._partition_capacity.get(partition)
        if found is None or found[0] != key:
            if len(self._partition_capacity) > 256:
                self._partition_capacity.clear()
            found = (key, self.capacity.subset(self.partitions.members(partition)))
            self._partition_capacity[partition] = found
        return found[1]

    def class_limit(self, account: str) -> tuple[str, str] | None:
        """The strictest ``max_priority_class`` on the path from ``account`` up to the root, as
        (the account that sets it, the class); the nearest account wins a tie. None: no limit."""
        if not self.class_limits:
            return None
        found: tuple[str, str] | None = None
        acc = self.accounts.accounts.get(account)
        while acc is not None and acc.parent is not None:
            highest = self.class_limits.get(acc.name)
            if highest is not None and (found is None or _RANK[highest] > _RANK[found[1]]):
                found = (acc.name, highest)
            acc = self.accounts.accounts[acc.parent]
        return found

    def account_open_to(self, account: str) -> tuple[str, ...]:
        """The tenants that may charge ``account``: the nearest list configured on the path from it
        up to the root; empty: any tenant."""
        acc = self.accounts.accounts.get(account)
        if acc is None:
            return self.account_tenants.get(account, ())
        while acc is not None and acc.parent is not None:
            tenants = self.account_tenants.get(acc.name)
            if tenants:
                return tenants
            acc = self.accounts.accounts[acc.parent]
        return ()

    def check_account(self, spec: c.JobSpec) -> None:
        """Raise the ``Rejection`` a tenant gets for charging an account that is not open to it."""
        tenants = self.account_open_to(spec.account)
        if tenants and spec.tenant not in tenants:
            raise Rejection("account", f"account {spec.account!r} is not open to tenant {spec.tenant!r}; submit under "
                            f"an account of yours, or ask an operator: horizon account set {spec.account} "
                            f"--tenant {spec.tenant}")

    def check_class(self, spec: c.JobSpec) -> None:
        """Raise the ``Rejection`` a tenant gets for a class above its account's limit (the leader's
        verdict and every instance's ``horizon submit --check`` answer alike)."""
        why = class_limit_reason(spec.priority_class, self.class_limit(spec.account))
        if why is not None:
            raise Rejection("priority_class", why)


@dataclass
class SubmissionCore:
    name: ClassVar[str] = "submission"
    dead_letter_inputs: ClassVar[bool] = True  # the client inputs (horizon.in.>) are submission's to dead-letter
    limits: Limits = field(default_factory=Limits)
    gpu_vocabulary: tuple[str, ...] = ()  # models known before any node registers, e.g. ("a100", "h100-80gb")
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    # A round makes new arrays' tasks until it has made this many; the arrays after them wait for the
    # next round (whole, each decided once). Every service folds a round's tasks before it sees what
    # follows them in the log: measured, 10,000 tasks in one round delayed another tenant's job by
    # 5.1 s (docs/tenants.md, Limits and fairness). A single array larger than this still takes one round.
    array_tasks_per_round: int = 1_000

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
            scope = subject.owner if subject.kind == "input" and headers.get(INTAKE_HEADER) == subject.owner else ""
            raw = event
            if scope:
                event = scoped(event, scope)
            if isinstance(event, c.JobSubmitted):
                # Keyed as its verdict will name it: a long (invalid) id is answered by a bounded one.
                key = bounded_id(event.job_id)
                pending = _Pending(record.seq, state.now, subject.owner, event, scope=scope, raw=raw if scope else None,
                                   user=headers.get(USER_HEADER) if scope else None,
                                   limited=bool(scope and headers.get(LIMITS_HEADER)))
                if key not in state.verdicts and key not in state.submissions:
                    state.submissions[key] = pending
                elif subject.kind == "input":
                    state.repeats[record.seq] = pending  # answered: the id is taken
            elif type(event) in _VERBS:  # the admin subjects also carry node and configuration commands
                state.requests[record.seq] = self._request(state, record.seq, subject.owner, event,
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
    def _request(state: SubmissionState, seq: int, owner: str, event: Event, admin: bool,
                 scope: str = "") -> _Pending:
        job_id: str = event.job_id  # type: ignore[attr-defined]
        pending = _Pending(seq, state.now, owner, event, admin=admin, targets=(bounded_id(job_id),), scope=scope)
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
        out: list[Event] = []
        round_ = _Round()
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
        shadow: dict[str, _Shadow] = {}
        for seq in sorted(state.requests):
            out.extend(self._answer(state, state.requests[seq], shadow))
        for seq in sorted(state.repeats):
            out.append(self._repeat(state, state.repeats[seq]))
        for seq in sorted(state.malformed):
            out.append(msgspec.structs.replace(state.malformed[seq], ts=state.now, basis_seq=state.seq))
        return out

    def _repeat(self, state: SubmissionState, pending: _Pending) -> c.RequestRejected:
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
        return c.RequestRejected(
            id=f"submission/RequestRejected/{id_token(key)}/{pending.seq}", job_id=key,
            tenant=bounded_id(pending.tenant), verb="submit", request_seq=pending.seq,
            reason=clipped(f"job id {shown!r} is already submitted and {known}: a second submission changes "
                           "nothing; use another job id"),
            ts=state.now, causation_id=f"seq:{pending.seq}", correlation_id=key, basis_seq=state.seq,
            source=self.name)

    # -- admission

    def _admit(self, state: SubmissionState, pending: _Pending, round_: _Round) -> list[Event]:
        sub: c.JobSubmitted = pending.event  # type: ignore[assignment]
        common = {
            "ts": state.now,
            "causation_id": f"seq:{pending.seq}",
            "submitted_seq": pending.seq,
            "basis_seq": state.seq,
            "source": self.name,
        }
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
                                 features=state.features)
            jobs, warnings = admitted.jobs, list(admitted.warnings)
            if pending.scope:
                jobs = [(job_key(pending.scope, job_id), scoped_spec(spec, pending.scope)) for job_id, spec in jobs]
            if pending.user is not None:
                jobs = _run_as(state, pending.scope, pending.user, jobs)
            if done:
                # A round cut short (a crash between the tasks' publications): finish it. The log
                # checks passed when the first tasks were accepted, and the rest are the same job.
                jobs = [(job_id, spec) for job_id, spec in jobs if job_id not in state.jobs.jobs]
            else:
                self._check_against_log(state, sub, jobs, round_, operator=pending.tenant == ADMIN_TENANT)
        except Rejection as rej:
            if done:  # the limits changed since the first tasks were accepted: finish with their spec
                jobs = self._remaining_tasks(state, sub)
            else:
                round_.decided.add(sub.job_id)
                round_.rejected.add(sub.job_id)
                # What the client wrote comes back bounded: the answer must fit in one message.
                # Its tenant is the sender's (the subject's), whatever the body says: a body naming
                # another tenant is answered to its sender, and the other tenant sees nothing.
                tenant = sub.tenant if pending.tenant == ADMIN_TENANT else pending.tenant
                return [c.JobRejected(id=f"submission/JobRejected/{id_token(sub.job_id)}",
                                      job_id=bounded_id(sub.job_id), tenant=bounded_id(tenant),
                                      reason=clipped(str(rej)), field=rej.field, correlation_id=bounded_id(sub.job_id),
                                      limit=getattr(rej, "limit", ""), **common)]
        round_.add(sub.job_id, jobs)
        if jobs:
            TenantBook.add(round_.load, jobs[0][1].tenant, len(jobs), len(jobs) if sub.array is not None else 0)
        # An array's tasks each say how many there are (a round finishing a cut one too: all of them).
        tasks = len(parse_array(sub.array).indices) if sub.array is not None else 0
        return [
            c.JobAccepted(id=f"submission/JobAccepted/{job_id}", job_id=job_id, spec=spec, submitted_ts=pending.time,
                          correlation_id=job_id, warnings=[clipped(w) for w in warnings], array_tasks=tasks,
                          **common)
            for job_id, spec in jobs
        ]

    @staticmethod
    def _remaining_tasks(state: SubmissionState, sub: c.JobSubmitted) -> list[tuple[str, c.JobSpec]]:
        template = state.jobs.jobs[state.jobs.arrays[sub.job_id][0]].spec
        assert template is not None
        return [(task_id(sub.job_id, i), msgspec.structs.replace(template, array_index=i))
                for i in parse_array(sub.array).indices if task_id(sub.job_id, i) not in state.jobs.jobs]

    def _check_against_log(self, state: SubmissionState, sub: c.JobSubmitted, jobs: list[tuple[str, c.JobSpec]],
                           round_: _Round, operator: bool = False) -> None:
        """What one submission cannot tell alone: the account's class limit, rejected dependencies,
        task ids taken, cycles."""
        if not operator:  # every task of an array has the same account and class
            state.check_account(jobs[0][1])
            state.check_class(jobs[0][1])
        for i, dep in enumerate(sub.dependencies):
            other = state.jobs.get(dep.job_id)
            if dep.job_id in round_.rejected or (other is not None and other.state is JobState.REJECTED):
                raise Rejection(f"dependencies[{i}].job_id", f"{dep.job_id!r} was rejected, so it will never run")
        if sub.array is not None:
            for job_id, _ in jobs:
                if job_id in state.verdicts or job_id in round_.decided or job_id in state.jobs.jobs:
                    raise Rejection("array", f"task {job_id!r} would take the id of an existing job; "
                                    "submit the array under another job id")
        targets = {job_id for job_id, _ in jobs} | {sub.job_id}
        deps = tuple(d.job_id for d in sub.dependencies)
        cycle = _find_cycle(state, round_, sub.job_id, deps, targets)
        if cycle is not None:
            last = cycle[-1]
            tail = "" if last == sub.job_id else f" (a task of {sub.job_id})"
            raise Rejection("dependencies", f"cycle {' -> '.join(cycle)}{tail}: each job depends on the next, "
                            "so none of them could ever start")

    # -- requests

    def _answer(self, state: SubmissionState, pending: _Pending, shadow: dict[str, _Shadow]) -> list[Event]:
        req = pending.event
        named: str = req.job_id  # type: ignore[attr-defined]
        verb = _VERBS[type(req)]
        out: list[Event] = []
        for job_id in pending.targets:
            if job_id not in pending.unanswered:
                continue  # answered before a restart
            base = {
                "ts": state.now,
                "causation_id": f"seq:{pending.seq}",
                "correlation_id": job_id,
                "source": self.name,
                "basis_seq": state.seq,
            }
            suffix = f"{id_token(job_id)}/{pending.seq}"
            why = self._judge(state, pending, verb, job_id, named, shadow)
            if isinstance(why, str):
                out.append(c.RequestRejected(id=f"submission/RequestRejected/{suffix}", job_id=job_id,
                                             tenant=bounded_id(pending.tenant), verb=verb, reason=clipped(why),
                                             request_seq=pending.seq,
                                             **base))
                continue
            job, current = why
            who = getattr(req, "user", "") or ("an operator" if pending.admin else pending.tenant)
            reason = clipped(getattr(req, "reason", "") or f"{verb} requested by {who}")
            match verb:
                case "cancel":
                    shadow[job_id] = _Shadow(JobState.CANCELLED, current.priority_class, current.nice)
                    if current.state in (JobState.PENDING, JobState.HELD):
                        out.append(c.JobCancelled(id=f"submission/JobCancelled/{suffix}", job_id=job_id,
                                                  reason=reason, attempt=job.attempt, **base))
                    else:
                        out.append(c.JobStopRequested(id=f"submission/JobStopRequested/{suffix}", job_id=job_id,
                                                      attempt=job.attempt, reason=reason, **base))
                case "hold":
                    shadow[job_id] = _Shadow(JobState.HELD, current.priority_class, current.nice)
                    out.append(c.JobHeld(id=f"submission/JobHeld/{suffix}", job_id=job_id, reason=reason, **base))
                case "release":
                    shadow[job_id] = _Shadow(JobState.PENDING, current.priority_class, current.nice)
                    out.append(c.JobReleased(id=f"submission/JobReleased/{suffix}", job_id=job_id, **base))
                case "update":
                    pc = req.priority_class or current.priority_class  # type: ignore[attr-defined]
                    nice = current.nice if req.nice is None else req.nice  # type: ignore[attr-defined]
                    shadow[job_id] = _Shadow(current.state, pc, nice)
                    out.append(c.JobPriorityChanged(id=f"submission/JobPriorityChanged/{suffix}", job_id=job_id,
                                                    priority_class=pc, nice=nice, **base))
        return out

    @staticmethod
    def _judge(state: SubmissionState, pending: _Pending, verb: str, job_id: str, named: str,
               shadow: dict[str, _Shadow]) -> str | tuple[object, _Shadow]:
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
        current = shadow.get(job_id) or _Shadow(job.state, job.spec.priority_class, job.spec.nice)
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
                if _RANK[pc] < _RANK[current.priority_class]:
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


@dataclass(slots=True)
class _Shadow:
    """A job as this round's earlier answers left it (they are not folded yet)."""

    state: JobState
    priority_class: str
    nice: int


@dataclass
class _Round:
    """What one decision round has admitted so far, for the submissions after it in the same round."""

    decided: set[str] = field(default_factory=set)  # job, task and array ids given a verdict
    tasks: int = 0  # tasks of new arrays accepted in this round
    load: dict[str, tuple[int, int]] = field(default_factory=dict)  # tenant -> (jobs, array tasks) accepted
    rejected: set[str] = field(default_factory=set)
    deps: dict[str, tuple[str, ...]] = field(default_factory=dict)  # accepted id -> what it depends on
    referenced: set[str] = field(default_factory=set)

    def add(self, submitted_id: str, jobs: list[tuple[str, c.JobSpec]]) -> None:
        if not jobs:
            return
        deps = tuple(d.job_id for d in jobs[0][1].dependencies)
        self.decided.add(submitted_id)
        self.deps[submitted_id] = deps
        for job_id, _ in jobs:
            self.decided.add(job_id)
            self.deps[job_id] = deps
        self.referenced.update(deps)


def _run_as(state: SubmissionState, tenant: str, user: str,
            jobs: list[tuple[str, c.JobSpec]]) -> list[tuple[str, c.JobSpec]]:
    """The jobs of an input the server authenticated as ``tenant``'s ``user``: their ``user`` is that
    one (a body naming another is refused, never taken), and they run as its Unix identity
    (``UserConfigured``); a user without one, or mapped to root without the operator's say, is refused."""
    if user == "-":
        raise Rejection("user", "the intake could not tell which user sent this (the server's import of "
                                "the intake lacks `share: true`); ask the operator")
    claimed = jobs[0][1].user if jobs else ""
    if claimed and claimed != user:
        raise Rejection("user", f"user {claimed!r} is not who sent this: you are {user!r} (under accounts a job runs "
                                f"as the user the server authenticated; leave --user out)")
    identity = state.users.get((tenant, user))
    if identity is None:
        raise Rejection("user", f"user {user!r} of tenant {tenant!r} has no Unix identity to run as; an operator "
                                f"gives it one with `horizon user add {user} --tenant {tenant} --unix-user NAME`")
    if identity.uid == 0 and not identity.allow_root:
        raise Rejection("user", f"user {user!r} of tenant {tenant!r} is mapped to uid 0 (root), which the operator "
                                f"did not allow (`horizon user add ... --allow-root`)")
    run_as = {"user": user, "uid": identity.uid, "gid": identity.gid, "groups": tuple(identity.groups)}
    return [(job_id, msgspec.structs.replace(spec, **run_as)) for job_id, spec in jobs]


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


def _waiting_edges(state: SubmissionState, round_: _Round, job_id: str) -> tuple[str, ...]:
    """The dependencies of ``job_id`` if it still waits for them, else none.

    Only a job that has not started yet can wait for ever: one that started had its
    dependencies met, one that ended no longer waits, and an id not submitted yet
    depends on nothing so far. An array waits while any of its tasks does.
    """
    if job_id in round_.deps:
        return round_.deps[job_id]
    jobs = state.jobs
    members = [job_id] if job_id in jobs.jobs else jobs.arrays.get(job_id, [])
    for member in members:
        job = jobs.jobs[member]
        if job.spec is not None and job.attempt == 0 and job.state in (JobState.PENDING, JobState.HELD):
            return tuple(d.job_id for d in job.spec.dependencies)
    return ()


def _find_cycle(state: SubmissionState, round_: _Round, job_id: str, deps: tuple[str, ...],
                targets: set[str]) -> list[str] | None:
    """A path ``job_id -> d -> ... -> t`` (t in ``targets``: the job or one of its tasks), or None.

    Depth first in dependency order, so the cycle named is the same in every replay. Only
    an id something already depends on (a forward reference) can close a cycle, so the
    usual submission, naming jobs older than itself, costs one set lookup.
    """
    if not any(t in state.referenced or t in round_.referenced for t in targets):
        return None
    path = [job_id]
    stack = [iter(deps)]
    seen: set[str] = set()
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            path.pop()
            continue
        if nxt in targets:
            return [*path, nxt]
        if nxt in seen:
            continue
        seen.add(nxt)
        path.append(nxt)
        stack.append(iter(_waiting_edges(state, round_, nxt)))
    return None
