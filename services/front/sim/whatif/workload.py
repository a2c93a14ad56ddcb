"""The log's span as a workload for a replay (``workload_from_log``): every job submitted in it, the jobs
carried in from before it and the warm-up's, each as it ran; the other inputs at their recorded times;
what the log cannot tell, noted per job (services/front/sim/whatif/__init__.py says how)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.codec import DecodeError, decode
from services.domain.protocol import Record
from services.front.sim.traces import SimJob, TaskRun
from services.front.sim.whatif.times import WhatIfError, iso

__all__ = ["CONFIG_VERBS", "JOB_REQUESTS", "RecordedJob", "Workload", "workload_from_log", "stale_basis",
           "batched_ends"]

CONFIG_VERBS = ("account", "fairshare", "policy", "profile", "preemption", "reservation", "partition",
                "partition-policy", "dataset", "license")
JOB_REQUESTS = ("cancel", "hold", "release", "update")


@dataclass
class RecordedJob:
    """What the log says happened to one job (one task of an array)."""

    job_id: str
    tenant: str
    account: str
    partition: str
    priority_class: str
    submit_s: float
    gpus: int  # in total, all nodes
    cpus: float  # cores in total
    time_limit_s: float | None
    start_s: float | None = None  # its first attempt's start
    nodes: list[str] = field(default_factory=list)  # its first attempt's nodes
    end_s: float | None = None
    state: str = ""  # SUCCEEDED | FAILED | CANCELLED | RUNNING | PENDING ... (a rejected job is no workload)
    run_s: float | None = None  # the completed attempt's run time
    attempts: int = 0
    preempted: int = 0
    cancelled_running: bool = False
    cancelled: bool = False
    cancel_s: float | None = None  # its user's cancel request (of the job or of its whole array)
    node_lost: bool = False
    carried_in: bool = False
    pinnable: bool = False  # its first attempt completed: a replay starting it then ends it when it ended
    stopped_s: float | None = None  # its only attempt, cancelled while it ran, stopped then (the agent's report)


@dataclass
class Workload:
    jobs: list[SimJob]
    timed: list[tuple[str, Event]]  # (subject, event) published at event.ts
    recorded: dict[str, RecordedJob]  # job id (array task ids) -> what happened
    measured: set[str]  # the job ids submitted in the span (the metrics count these)
    start_s: float
    end_s: float
    first_seq: int
    last_seq: int
    capacity_gpus: int
    capacity_cpus: float
    notes: dict[str, list[str]] = field(default_factory=dict)  # what the log cannot tell -> job ids
    base_config: list[Event] = field(default_factory=list)  # configuration in force at the span's start
    rejected: list[str] = field(default_factory=list)  # submitted in the span, rejected: not workload
    # Jobs whose first placement was decided by a live cycle on a basis that had not yet seen an attempt's
    # end the log holds before the decision: the replay, ordered by time, may see that node free and choose
    # otherwise, a difference the live services' latency makes, not the policy (fidelity() says so)
    stale_basis: set[str] = field(default_factory=set)
    # Jobs whose first placement was decided by a live cycle that folded two or more ends since placement's
    # cycle before it (they came while it was busy): the replay, which ends each job at its replayed start
    # plus its runtime, may order those ends otherwise or decide between them, and choose other nodes
    batched_ends: set[str] = field(default_factory=set)

    def describe(self) -> dict[str, Any]:
        return {"from": iso(self.start_s), "to": iso(self.end_s), "first_seq": self.first_seq,
                "last_seq": self.last_seq, "jobs": len(self.measured),
                "carried_in": sum(1 for r in self.recorded.values() if r.carried_in),
                "rejected": len(self.rejected),
                "capacity_gpus": self.capacity_gpus, "capacity_cpus": self.capacity_cpus}

    def open_at_end(self) -> bool:
        """Whether some job of the workload had not ended when the log stops (running or waiting)."""
        return any(r.state in ("RUNNING", "PENDING", "PREEMPTED") for r in self.recorded.values())



def _when(event: Event, record: Record) -> float:
    return event.ts if event.ts > 0 else record.time


def _base_id(job_id: str) -> str:
    """An array task's submission: ``a_3`` -> ``a``."""
    head, sep, tail = job_id.rpartition("_")
    return head if sep and tail.isdigit() else job_id



def workload_from_log(records: Sequence[Record], start_s: float, end_s: float,
                      warm_from_s: float | None = None, tolerance_s: float = 1.0) -> Workload:
    """The span [start_s, end_s] of the log (event times) as a workload; see the package's docstring.
    ``warm_from_s`` (before ``start_s``): the jobs submitted from then on are replayed too, as the cluster
    ran them, so that the span begins with the queue, the running jobs and the fair-share usage it had;
    they are not measured. In three steps: 1. read the log (``_Seen``); 2. each job as it ran
    (``_Jobs``); 3. the other inputs at their times (``_timed_inputs``)."""
    warm = start_s if warm_from_s is None else min(warm_from_s, start_s)
    if end_s <= start_s:
        raise WhatIfError(f"the span is empty: it ends ({iso(end_s)}) before it begins ({iso(start_s)})")
    # 1. what the log says, event by event
    seen = _Seen()
    for r in records:
        seen.read(r, start_s, end_s)
    # attempts per job id (array tasks have their own ids)
    by_job: dict[str, list[int]] = {}
    for job_id, attempt in set(seen.started) | set(seen.ended) | set(seen.scheduled):
        by_job.setdefault(job_id, []).append(attempt)
    # 2. each job submitted up to the span's end, as it ran
    jobs = _Jobs()
    for job_id, (subject, sub, t_sub, _seq) in sorted(seen.subs.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if t_sub <= end_s:
            jobs.add(seen, by_job, job_id, subject, sub, t_sub, start_s, warm, tolerance_s)
    # 3. the other inputs, those about a job outside the workload left out
    keep = {_base_id(j) for j in jobs.recorded} | set(jobs.recorded)
    timed, capacity = _timed_inputs(seen.inputs, end_s, keep)
    base_config = [e for s, e in timed if e.ts <= start_s and s.split(".")[3] in CONFIG_VERBS]
    return Workload(jobs.jobs, timed, jobs.recorded, jobs.measured, start_s, end_s, seen.first_seq, seen.last_seq,
                    sum(g for g, _ in capacity.values()), sum(cp for _, cp in capacity.values()), jobs.notes,
                    base_config, jobs.dropped, stale_basis(seen.placed_seqs, seen.end_seqs, by_job),
                    batched_ends(seen.placed_seqs, seen.end_seqs, seen.placement_bases, by_job))


@dataclass
class _Seen:
    """What the log says of the jobs and the inputs, gathered in one pass (``read`` each record)."""

    # job id -> (subject, event, time, seq)
    subs: dict[str, tuple[str, c.JobSubmitted, float, int]] = field(default_factory=dict)
    accepted: dict[str, c.JobSpec] = field(default_factory=dict)
    rejected: set[str] = field(default_factory=set)
    started: dict[tuple[str, int], float] = field(default_factory=dict)
    scheduled: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    decided: dict[tuple[str, int], float] = field(default_factory=dict)  # when placement allocated the attempt
    placed_seqs: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # its JobScheduled's (basis, seq)
    end_seqs: list[int] = field(default_factory=list)  # the seq of every attempt's end, in log order
    placement_bases: list[int] = field(default_factory=list)  # the basis_seq of each of placement's decisions
    ended: dict[tuple[str, int], tuple[float, str]] = field(default_factory=dict)  # (job, attempt) -> (time, how)
    preempted: dict[str, int] = field(default_factory=dict)
    cancels: dict[str, float] = field(default_factory=dict)  # user's cancel request time
    lost_under: set[str] = field(default_factory=set)
    inputs: list[tuple[float, int, str, Event]] = field(default_factory=list)  # other inputs and world events
    first_seq: int = 0
    last_seq: int = 0

    def read(self, r: Record, start_s: float, end_s: float) -> None:
        try:
            event = decode(r.data)
        except DecodeError:
            return
        t = _when(event, r)
        parts = r.subject.split(".")
        if len(parts) < 4 or parts[0] != "horizon":
            return
        if start_s <= t <= end_s:
            self.first_seq = self.first_seq or r.seq
            self.last_seq = r.seq
        if parts[1] == "in":
            self._input(r, parts[3], event, t)
        elif parts[1] == "evt":
            self._event(r, parts[2], event, t)

    def _input(self, r: Record, verb: str, event: Event, t: float) -> None:
        if isinstance(event, c.JobSubmitted):
            self.subs.setdefault(event.job_id, (r.subject, event, t, r.seq))
        elif verb in CONFIG_VERBS or verb == "node" or verb in JOB_REQUESTS:
            self.inputs.append((t, r.seq, r.subject, event))
            if isinstance(event, c.JobCancelRequested):
                self.cancels.setdefault(event.job_id, t)

    def _event(self, r: Record, service: str, event: Event, t: float) -> None:
        if service == "placement" and getattr(event, "basis_seq", None):
            self.placement_bases.append(event.basis_seq)
        if isinstance(event, c.JobAccepted):
            self.accepted[event.job_id] = event.spec
        elif isinstance(event, c.JobRejected):
            self.rejected.add(event.job_id)
        elif isinstance(event, c.JobScheduled):
            key = (event.job_id, event.attempt)
            self.scheduled.setdefault(key, sorted(a.node for a in event.allocations))
            self.decided.setdefault(key, t)
            self.placed_seqs.setdefault(key, (event.basis_seq or 0, r.seq))
        elif service == "agent" and isinstance(event, c.JobStarted):
            self.started.setdefault((event.job_id, event.attempt), t)
        elif isinstance(event, c.JobSucceeded):
            self._end(event.job_id, event.attempt, t, "SUCCEEDED", r.seq)
        elif isinstance(event, c.JobFailed):
            self._end(event.job_id, event.attempt, t, "FAILED", r.seq)
            if event.node_lost:
                self.lost_under.add(event.job_id)
        elif isinstance(event, c.JobPreempted):
            self._end(event.job_id, event.attempt, t, "PREEMPTED", r.seq)
            self.preempted[event.job_id] = self.preempted.get(event.job_id, 0) + 1
        elif isinstance(event, c.JobCancelled):
            if event.attempt and service == "agent":
                self._end(event.job_id, event.attempt, t, "CANCELLED", r.seq)
            else:
                self.ended.setdefault((event.job_id, 0), (t, "CANCELLED"))
        elif service == "agent" and type(event).__name__.startswith("Node"):
            self.inputs.append((t, r.seq, r.subject, event))
        elif service == "inventory" and isinstance(event, (c.NodeLost, c.NodeReady)) and not event.basis_seq:
            self.inputs.append((t, r.seq, r.subject, event))  # observations of the world: inputs to a replay

    def _end(self, job_id: str, attempt: int, t: float, how: str, seq: int) -> None:
        self.ended.setdefault((job_id, attempt), (t, how))
        self.end_seqs.append(seq)


@dataclass
class _Jobs:
    """The workload's jobs, added one submission at a time (``add``), with what was recorded of each."""

    recorded: dict[str, RecordedJob] = field(default_factory=dict)
    jobs: list[SimJob] = field(default_factory=list)
    measured: set[str] = field(default_factory=set)
    notes: dict[str, list[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    def add(self, seen: _Seen, by_job: dict[str, list[int]], job_id: str, subject: str, sub: c.JobSubmitted,
            t_sub: float, start_s: float, warm: float, tolerance_s: float) -> None:
        if job_id in seen.rejected:
            # Rejected at submission: it never was demand on the cluster (an empty command, resources no
            # node has, ...). Replayed, the simulator's own run time would let it through validation and
            # run; so it is left out, and counted apart (Workload.rejected).
            if t_sub >= start_s:
                self.dropped.append(job_id)
            return
        members = _members(job_id, sub, by_job)
        infos = [_recorded(m, sub, seen.accepted.get(m) or seen.accepted.get(job_id), t_sub,
                           sorted(by_job.get(m, [])), seen.started, seen.scheduled, seen.decided, seen.ended,
                           seen.preempted, seen.cancels, seen.lost_under) for m in members]
        if t_sub < start_s:
            if t_sub < warm and all(i.end_s is not None and i.end_s < warm for i in infos):
                return  # over before the span (and its warm-up)
            for i in infos:
                i.carried_in = True
        for i in infos:
            self.recorded[i.job_id] = i
            if not i.carried_in:
                self.measured.add(i.job_id)
            for note in _notes(i):
                self.notes.setdefault(note, []).append(i.job_id)
        self.jobs.append(_sim_job(job_id, subject, sub, t_sub, infos, tolerance_s))


def _sim_job(job_id: str, subject: str, sub: c.JobSubmitted, t_sub: float, infos: list[RecordedJob],
             tolerance_s: float) -> SimJob:
    """The job to replay: submitted as recorded, running as its completed attempt ran (an array's tasks
    each as they ran; a run the log does not tell: the others' mean, else its time limit)."""
    runs = [i.run_s for i in infos if i.run_s is not None]
    limit = infos[0].time_limit_s
    run = sum(runs) / len(runs) if runs else (limit if limit is not None else 3600.0)
    failed = [i for i in infos if i.state == "FAILED"]

    def pin(i: RecordedJob) -> tuple[float, float, float] | None:
        return (i.start_s, i.end_s, tolerance_s) if i.pinnable else None  # type: ignore[return-value]

    def stop(i: RecordedJob) -> tuple[float, float, float] | None:  # the agent's moments to stop it
        return (i.start_s, i.stopped_s, tolerance_s) if i.stopped_s is not None else None  # type: ignore

    # an array's tasks each run as they ran (a task without a recorded run: the others' mean)
    tasks = {i.job_id: TaskRun(i.run_s if i.run_s is not None else run, 1 if i.state == "FAILED" else 0, pin(i),
                               stop(i)) for i in infos} if sub.array is not None and len(infos) > 1 else {}
    return SimJob(
        job_id, t_sub, run, limit or run, procs=max(1, int(infos[0].cpus)), gpus=infos[0].gpus,
        account=infos[0].account, user=sub.user, priority_class=sub.priority_class,
        exit_code=1 if failed and len(failed) == len(infos) else 0,
        restart_policy=sub.restart_policy, max_retries=sub.max_retries,
        scheduling_timeout_s=sub.scheduling_timeout_s, submitted=sub, subject=subject,
        array=sub.array,
        recorded_run=pin(infos[0]) if len(infos) == 1 else None,
        recorded_stop=stop(infos[0]) if len(infos) == 1 else None, tasks=tasks,
    )


def _timed_inputs(inputs: list[tuple[float, int, str, Event]], end_s: float,
                  keep: set[str]) -> tuple[list[tuple[str, Event]], dict[str, tuple[int, float]]]:
    """The inputs up to the span's end in time order, each at its recorded time (but requests about a job
    not in ``keep``), and the capacity of every node registered: node -> (GPUs, cores)."""
    timed: list[tuple[str, Event]] = []
    capacity: dict[str, tuple[int, float]] = {}
    for t, _seq, subject, event in sorted(inputs, key=lambda x: (x[0], x[1])):
        if t > end_s:
            continue
        job_id = getattr(event, "job_id", None)
        if job_id is not None and not isinstance(event, (c.NodeRegistered,)) and job_id not in keep:
            continue  # a request about a job outside the workload
        if isinstance(event, c.NodeRegistered):
            capacity[event.node] = (len(event.gpus), event.cpus_milli / 1000.0)
        timed.append((subject, msgspec.structs.replace(event, ts=t)))
    return timed, capacity


def _first_placements(placed: dict[tuple[str, int], tuple[int, int]],
                      by_job: dict[str, list[int]]) -> Iterator[tuple[str, int, int]]:
    """(job, basis_seq, seq) of each job's first placed attempt's ``JobScheduled``."""
    for job_id, attempts in by_job.items():
        first = min((a for a in attempts if a > 0), default=None)
        if first is not None and (job_id, first) in placed:
            yield job_id, *placed[(job_id, first)]


def stale_basis(placed: dict[tuple[str, int], tuple[int, int]], end_seqs: list[int],
                 by_job: dict[str, list[int]]) -> set[str]:
    """Jobs whose first attempt a live cycle placed without an end the log already held: an end stored
    after the decision's basis_seq and before the decision itself (the cycle was deciding while it came)."""
    ends = sorted(end_seqs)
    out = set()
    for job_id, basis, seq in _first_placements(placed, by_job):
        i = bisect.bisect_right(ends, basis)
        if i < len(ends) and ends[i] < seq:
            out.add(job_id)
    return out


def batched_ends(placed: dict[tuple[str, int], tuple[int, int]], end_seqs: list[int], placement_bases: list[int],
                 by_job: dict[str, list[int]]) -> set[str]:
    """Jobs whose first attempt a live cycle placed on a basis that took in two or more ends since the
    basis of placement's decision before it: the live cycle saw those nodes come free together."""
    ends = sorted(end_seqs)
    bases = sorted(set(placement_bases))
    out = set()
    for job_id, basis, _seq in _first_placements(placed, by_job):
        i = bisect.bisect_left(bases, basis)
        before = bases[i - 1] if i > 0 else 0
        if bisect.bisect_right(ends, basis) - bisect.bisect_right(ends, before) >= 2:
            out.add(job_id)
    return out


def _members(job_id: str, sub: c.JobSubmitted, by_job: dict[str, list[int]]) -> list[str]:
    if sub.array is None:
        return [job_id]
    from events.arrays import parse_array, task_id
    from events.resources import ResourceError

    try:
        return [task_id(job_id, i) for i in parse_array(sub.array).indices]
    except ResourceError:
        return [job_id]


def _recorded(job_id: str, sub: c.JobSubmitted, spec: c.JobSpec | None, t_sub: float, attempts: list[int],
              started: dict, scheduled: dict, decided: dict, ended: dict, preempted: dict, cancels: dict,
              lost_under: set) -> RecordedJob:
    gpus = sub.resources.gpus * sub.nodes * sub.tasks_per_node
    cpus = (sub.resources.cpus or 0) * sub.nodes * sub.tasks_per_node
    out = RecordedJob(job_id, sub.tenant, spec.account if spec is not None else sub.account,
                      getattr(spec, "partition", "") if spec is not None else "", sub.priority_class, t_sub, gpus,
                      float(cpus), spec.time_limit_s if spec is not None else sub.time_limit_s)
    attempts = [a for a in attempts if a > 0]

    def ran(a: int) -> bool:
        # An attempt held an allocation once placement made it (JobScheduled), whether or not the agent's
        # JobStarted followed: a command that could not be started fails without one (JobFailed "could not
        # start"), having held its nodes for those moments. The last attempt placed and not yet reported
        # on is starting when the log stops.
        key = (job_id, a)
        return key in started or key in ended or (key in scheduled and a == attempts[-1])

    def began(a: int) -> float:
        key = (job_id, a)
        return decided.get(key, started.get(key, ended[key][0] if key in ended else t_sub))

    placed = [a for a in attempts if ran(a)]
    out.attempts = len(placed)
    out.preempted = preempted.get(job_id, 0)
    out.node_lost = job_id in lost_under
    first = placed[0] if placed else None
    if first is not None:  # a start is when placement allocated it (the agent's start follows within moments)
        out.start_s = began(first)
        out.nodes = scheduled.get((job_id, first), [])
    state = "PENDING"
    for a in placed:
        if (job_id, a) in ended:
            t_end, how = ended[(job_id, a)]
            out.end_s, state = t_end, how
            if how in ("SUCCEEDED", "FAILED"):  # how long it held its allocation
                out.run_s = max(0.0, t_end - began(a))
                out.pinnable = a == first
            elif how == "CANCELLED":
                out.cancelled_running = True
                out.stopped_s = t_end
        else:
            state = "RUNNING"
            out.end_s = None
    if (job_id, 0) in ended and state == "PENDING":
        state, out.end_s = "CANCELLED", ended[(job_id, 0)][0]
    out.cancel_s = cancels.get(job_id, cancels.get(_base_id(job_id)))
    out.cancelled = out.cancel_s is not None or state == "CANCELLED"
    out.state = state
    if state == "RUNNING":  # no end in the log: it runs its time limit
        out.run_s = None
    out.pinnable = out.pinnable and out.attempts == 1 and out.end_s is not None and out.start_s is not None
    if out.attempts != 1 or state != "CANCELLED" or out.start_s is None:
        out.stopped_s = None
    return out


def _notes(job: RecordedJob) -> list[str]:
    """Why the log cannot tell how long this job would run (or whether it would)."""
    out = []
    if job.cancelled_running:
        out.append("cancelled while running: runs its time limit, the cancel replayed at its time")
    elif job.cancelled:
        out.append("cancelled by a user before it started: the cancel replayed at its time")
    if job.state == "RUNNING":
        out.append("no end in the log: runs its time limit")
    if job.state == "PENDING" and job.start_s is None:
        out.append("never started: runs its time limit if it starts")
    if job.preempted:
        out.append("preempted: runs as long as its completed attempt")
    if job.node_lost:
        out.append("a node was lost under it: the loss replayed at its time, wherever the job runs then")
    return out

