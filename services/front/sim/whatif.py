"""``horizon whatif``: the live log's recent past replayed at virtual time, as configured and as changed.

Pure parts (no I/O): the log -> a workload (``workload_from_log``), the ``--set`` keys -> operator
configuration events (``parse_sets``, ``change_events``), node classes added or removed
(``parse_add_nodes``, ``remove_nodes``), a replay -> the numbers people decide on (``measure``),
the baseline against what was recorded (``fidelity``) and two replays against each other (``moves``).
``run_whatif`` drives the simulator (services/front/sim/driver.py) twice over the in-process bus.

**The workload.** Every job submitted in the span (by event time) and accepted, plus the jobs submitted
before it that had not ended when it began ("carried in": replayed from their own submission, not
measured). A job rejected at submission was never demand on the cluster: it is left out (and counted,
``Workload.rejected``). An array's tasks are followed one by one, each with its own recorded run.
With a warm-up (``horizon whatif --warmup``, 7 days by default), the jobs submitted in the days
before the span are replayed too, as configured, so that the span begins with the queue, the
running jobs and the fair-share usage it had; they are not measured either.
Each is the recorded ``JobSubmitted`` as it was (tenant, account, resources, partitions, class,
dependencies, array), submitted at its recorded time, running for its recorded run time: from the
``JobScheduled`` of the attempt that completed (its allocation; the agent's ``JobStarted`` follows
within moments) to its end (a preempted attempt starts over, as the simulator's jobs do not
checkpoint); a first attempt the replay starts within the tolerance of its recorded start ends at
its recorded end, so the services' own reaction times do not drift the replay. An attempt placed
and failed before its agent started it (a command that could not start) held its nodes from its
placement to its failure, and so it does in the replay. A job that never
ran runs its time limit should it start; a job without an end in the log (still running, or the
log stops) runs its time limit; a job a user cancelled while it ran runs its time limit, and the
user's cancel is replayed at its time (started at its recorded start, it stops when its agent
reported it stopped). Every other input is replayed at its recorded time: the users' cancels,
holds, releases and updates, the operators' configuration and node commands (cordon, drain), the
agents' node registrations and inventory's observed node losses. Configuration from before the span
is applied at its start. Changes (``--set``, ``--config``, ``--add-nodes``, ``--remove-nodes``) are
applied at the span's start, after the configuration in force then.
"""

from __future__ import annotations

import bisect
import fnmatch
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.codec import DecodeError, decode
from events.subjects import ADMIN_VERBS, admin_subject, event_subject
from services.domain.protocol import Record
from services.front.sim.traces import SimJob, TaskRun

__all__ = ["Workload", "RecordedJob", "WhatIfError", "workload_from_log", "parse_sets", "change_events",
           "parse_add_nodes", "added_nodes", "remove_nodes", "measure", "fidelity", "moves", "parse_when",
           "parse_duration", "run_whatif", "SET_KEYS", "whatif_cores"]

DAY = 86400.0
CONFIG_VERBS = ("account", "fairshare", "policy", "profile", "preemption", "reservation", "partition",
                "partition-policy", "dataset")
JOB_REQUESTS = ("cancel", "hold", "release", "update")


class WhatIfError(ValueError):
    """Bad input to whatif: a one-line answer for the CLI."""


# ---------------------------------------------------------------------- times


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, None: 1.0}


def parse_duration(text: str, what: str = "duration") -> float:
    """``90``, ``90s``, ``15m``, ``6h``, ``3d``, ``1w`` -> seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise WhatIfError(f"{what}: {text!r} is not a duration (e.g. 3600, 90s, 15m, 6h, 3d, 1w)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_when(text: str, now: float, last_seq_time: Callable[[int], float | None]) -> float:
    """``--from``/``--to``: a seq (digits), an ISO 8601 time (``2026-11-20T00:00:00Z``), ``now``,
    or a time before now (``7d``, ``-7d``, ``36h``). ``last_seq_time(seq)``: the event time of a seq."""
    text = text.strip()
    if text.isdigit():
        t = last_seq_time(int(text))
        if t is None:
            raise WhatIfError(f"seq {text} is not in the log")
        return t
    if text == "now":
        return now
    if _DURATION.match(text.lstrip("-")) and not text.lstrip("-").isdigit():
        return now - parse_duration(text.lstrip("-"))
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WhatIfError(f"{text!r} is neither a seq, an ISO 8601 time (2026-11-20T00:00:00Z) nor a time "
                          f"before now (7d, 36h)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


# ---------------------------------------------------------------------- the workload


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

    def describe(self) -> dict[str, Any]:
        return {"from": _iso(self.start_s), "to": _iso(self.end_s), "first_seq": self.first_seq,
                "last_seq": self.last_seq, "jobs": len(self.measured),
                "carried_in": sum(1 for r in self.recorded.values() if r.carried_in),
                "rejected": len(self.rejected),
                "capacity_gpus": self.capacity_gpus, "capacity_cpus": self.capacity_cpus}

    def open_at_end(self) -> bool:
        """Whether some job of the workload had not ended when the log stops (running or waiting)."""
        return any(r.state in ("RUNNING", "PENDING", "PREEMPTED") for r in self.recorded.values())


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(event: Event, record: Record) -> float:
    return event.ts if event.ts > 0 else record.time


def _base_id(job_id: str) -> str:
    """An array task's submission: ``a_3`` -> ``a``."""
    head, sep, tail = job_id.rpartition("_")
    return head if sep and tail.isdigit() else job_id


def workload_from_log(records: Sequence[Record], start_s: float, end_s: float,
                      warm_from_s: float | None = None, tolerance_s: float = 1.0) -> Workload:
    """The span [start_s, end_s] of the log (event times) as a workload; see the module's docstring.
    ``warm_from_s`` (before ``start_s``): the jobs submitted from then on are replayed too, as the cluster
    ran them, so that the span begins with the queue, the running jobs and the fair-share usage it had;
    they are not measured."""
    warm = start_s if warm_from_s is None else min(warm_from_s, start_s)
    if end_s <= start_s:
        raise WhatIfError(f"the span is empty: it ends ({_iso(end_s)}) before it begins ({_iso(start_s)})")
    subs: dict[str, tuple[str, c.JobSubmitted, float, int]] = {}  # job id -> (subject, event, time, seq)
    accepted: dict[str, c.JobSpec] = {}
    rejected: set[str] = set()
    started: dict[tuple[str, int], float] = {}
    scheduled: dict[tuple[str, int], list[str]] = {}
    decided: dict[tuple[str, int], float] = {}  # when placement allocated the attempt (JobScheduled)
    placed_seqs: dict[tuple[str, int], tuple[int, int]] = {}  # (job, attempt) -> its JobScheduled's (basis, seq)
    end_seqs: list[int] = []  # the seq of every attempt's end, in log order
    ended: dict[tuple[str, int], tuple[float, str]] = {}  # (job, attempt) -> (time, how)
    preempted: dict[str, int] = {}
    cancels: dict[str, float] = {}  # user's cancel request time
    lost_under: set[str] = set()
    inputs: list[tuple[float, int, str, Event]] = []  # other inputs and world events, with their times
    first_seq = last_seq = 0
    for r in records:
        try:
            event = decode(r.data)
        except DecodeError:
            continue
        t = _when(event, r)
        parts = r.subject.split(".")
        if len(parts) < 4 or parts[0] != "horizon":
            continue
        if start_s <= t <= end_s:
            first_seq = first_seq or r.seq
            last_seq = r.seq
        if parts[1] == "in":
            verb = parts[3]
            if isinstance(event, c.JobSubmitted):
                subs.setdefault(event.job_id, (r.subject, event, t, r.seq))
            elif verb in CONFIG_VERBS or verb == "node" or verb in JOB_REQUESTS:
                inputs.append((t, r.seq, r.subject, event))
                if isinstance(event, c.JobCancelRequested):
                    cancels.setdefault(event.job_id, t)
            continue
        if parts[1] != "evt":
            continue
        service = parts[2]
        if isinstance(event, c.JobAccepted):
            accepted[event.job_id] = event.spec
        elif isinstance(event, c.JobRejected):
            rejected.add(event.job_id)
        elif isinstance(event, c.JobScheduled):
            scheduled.setdefault((event.job_id, event.attempt), sorted(a.node for a in event.allocations))
            decided.setdefault((event.job_id, event.attempt), t)
            placed_seqs.setdefault((event.job_id, event.attempt), (event.basis_seq or 0, r.seq))
        elif service == "agent" and isinstance(event, c.JobStarted):
            started.setdefault((event.job_id, event.attempt), t)
        elif isinstance(event, c.JobSucceeded):
            ended.setdefault((event.job_id, event.attempt), (t, "SUCCEEDED"))
            end_seqs.append(r.seq)
        elif isinstance(event, c.JobFailed):
            ended.setdefault((event.job_id, event.attempt), (t, "FAILED"))
            end_seqs.append(r.seq)
            if event.node_lost:
                lost_under.add(event.job_id)
        elif isinstance(event, c.JobPreempted):
            ended.setdefault((event.job_id, event.attempt), (t, "PREEMPTED"))
            end_seqs.append(r.seq)
            preempted[event.job_id] = preempted.get(event.job_id, 0) + 1
        elif isinstance(event, c.JobCancelled):
            if event.attempt and service == "agent":
                ended.setdefault((event.job_id, event.attempt), (t, "CANCELLED"))
                end_seqs.append(r.seq)
            else:
                ended.setdefault((event.job_id, 0), (t, "CANCELLED"))
        elif service == "agent" and type(event).__name__.startswith("Node"):
            inputs.append((t, r.seq, r.subject, event))
        elif service == "inventory" and isinstance(event, (c.NodeLost, c.NodeReady)) and not event.basis_seq:
            inputs.append((t, r.seq, r.subject, event))  # observations of the world: inputs to a replay

    # attempts per job id (array tasks have their own ids)
    by_job: dict[str, list[int]] = {}
    for job_id, attempt in set(started) | set(ended) | set(scheduled):
        by_job.setdefault(job_id, []).append(attempt)
    recorded: dict[str, RecordedJob] = {}
    jobs: list[SimJob] = []
    measured: set[str] = set()
    notes: dict[str, list[str]] = {}
    dropped: list[str] = []
    for job_id, (subject, sub, t_sub, _seq) in sorted(subs.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if t_sub > end_s:
            continue
        if job_id in rejected:
            # Rejected at submission: it never was demand on the cluster (an empty command, resources no
            # node has, ...). Replayed, the simulator's own run time would let it through validation and
            # run; so it is left out, and counted apart (Workload.rejected).
            if t_sub >= start_s:
                dropped.append(job_id)
            continue
        members = _members(job_id, sub, by_job)
        infos = [_recorded(m, sub, accepted.get(m) or accepted.get(job_id), t_sub, sorted(by_job.get(m, [])),
                           started, scheduled, decided, ended, preempted, cancels, lost_under) for m in members]
        if t_sub < start_s:
            if t_sub < warm and all(i.end_s is not None and i.end_s < warm for i in infos):
                continue  # over before the span (and its warm-up)
            for i in infos:
                i.carried_in = True
        for i in infos:
            recorded[i.job_id] = i
            if not i.carried_in:
                measured.add(i.job_id)
            for note in _notes(i):
                notes.setdefault(note, []).append(i.job_id)
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
        jobs.append(SimJob(
            job_id, t_sub, run, limit or run, procs=max(1, int(infos[0].cpus)), gpus=infos[0].gpus,
            account=infos[0].account, user=sub.user, priority_class=sub.priority_class,
            exit_code=1 if failed and len(failed) == len(infos) else 0,
            restart_policy=sub.restart_policy, max_retries=sub.max_retries,
            scheduling_timeout_s=sub.scheduling_timeout_s, submitted=sub, subject=subject,
            array=sub.array,
            recorded_run=pin(infos[0]) if len(infos) == 1 else None,
            recorded_stop=stop(infos[0]) if len(infos) == 1 else None, tasks=tasks,
        ))
    keep = {_base_id(j) for j in recorded} | set(recorded)
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
    base_config = [e for s, e in timed if e.ts <= start_s and s.split(".")[3] in CONFIG_VERBS]
    return Workload(jobs, timed, recorded, measured, start_s, end_s, first_seq, last_seq,
                    sum(g for g, _ in capacity.values()), sum(cp for _, cp in capacity.values()), notes, base_config,
                    dropped, _stale_basis(placed_seqs, end_seqs, by_job))


def _stale_basis(placed: dict[tuple[str, int], tuple[int, int]], end_seqs: list[int],
                 by_job: dict[str, list[int]]) -> set[str]:
    """Jobs whose first attempt a live cycle placed without an end the log already held: an end stored
    after the decision's basis_seq and before the decision itself (the cycle was deciding while it came)."""
    ends = sorted(end_seqs)
    out = set()
    for job_id, attempts in by_job.items():
        first = min((a for a in attempts if a > 0), default=None)
        if first is None or (job_id, first) not in placed:
            continue
        basis, seq = placed[(job_id, first)]
        i = bisect.bisect_right(ends, basis)
        if i < len(ends) and ends[i] < seq:
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


# ---------------------------------------------------------------------- changes


def _number(text: str, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise WhatIfError(f"--set {key}={text}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise WhatIfError(f"--set {key}={text}: not a finite number")
    return value


def _count(text: str, key: str) -> int:
    if not text.strip().isdigit():
        raise WhatIfError(f"--set {key}={text}: {text!r} is not a whole number >= 0")
    return int(text)


def _bool(text: str, key: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise WhatIfError(f"--set {key}={text}: {text!r} is not true or false")


def _choice(text: str, key: str, choices: Iterable[str]) -> str:
    options = list(choices)
    if text not in options:
        raise WhatIfError(f"--set {key}={text}: {text!r} is not one of {', '.join(options)}")
    return text


# key pattern -> what it sets (for --help and the errors)
SET_KEYS = {
    "policy.policy": "queue policy: fcfs, sjf, f1, multifactor",
    "policy.weight.<factor>": "multifactor weight (class, fairshare, age, estimate, size, qos)",
    "policy.max_age": "age factor's saturation (duration)",
    "policy.estimate_ref": "estimate factor's reference (duration)",
    "policy.qos_boost.<qos>": "a QOS's factor in [0, 1]",
    "policy.backoff_base / policy.backoff_max": "restart backoff (duration)",
    "fairshare.half_life": "usage decay half-life (duration)",
    "fairshare.gpu_weight / cpu_weight / memory_weight": "billing weights",
    "fairshare.dominant_share": "true/false",
    "profile.<name>.backfill": "none, easy, shadow, greedy, conservative, short",
    "profile.<name>.reservation_depth": "conservative backfill's reservations",
    "profile.<name>.runtime_estimate": "limit or predicted",
    "profile.<name>.weight.<plugin>": "placement score weight",
    "backfill": "the default profile's backfill mode (profile.default.backfill)",
    "preemption.victims": "cheapest or lowest-priority-youngest",
    "preemption.rules.<class>": "the classes it may preempt, comma-separated ('' none)",
    "preemption.grace_period": "duration",
    "preemption.max_preemptions / per_minute / per_account_per_minute": "whole numbers",
    "account.<name>.shares": "fair-share shares",
    "account.<name>.parent": "parent account ('' the root)",
    "account.<name>.priority_boost": "number",
    "account.<name>.borrowing": "true/false",
    "account.<name>.quota.<gpus|cpus|memory|running_jobs>": "a limit ('none' unlimited)",
    "account.<name>.quota.gpus.<type>": "a per-GPU-type limit",
}


@dataclass
class Changes:
    policy: dict[str, Any] = field(default_factory=dict)
    fairshare: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    preemption: dict[str, Any] = field(default_factory=dict)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.keys


def parse_sets(items: Sequence[str]) -> Changes:
    """``KEY=VALUE`` strings (``--set``) -> the changes they ask for; a ``WhatIfError`` naming the key
    for anything unknown or malformed."""
    from events.vocabulary import BACKFILL_MODES
    from services.preemption.core import VICTIM_ORDERS

    out = Changes()
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise WhatIfError(f"--set {item!r}: use KEY=VALUE, e.g. policy.weight.fairshare=20000")
        path = key.split(".")
        head = path[0]
        if key == "backfill":
            path, head = ["profile", "default", "backfill"], "profile"
        if head == "policy" and len(path) >= 2:
            name = path[1]
            if name == "policy" and len(path) == 2:
                out.policy["policy"] = _choice(value, key, ("fcfs", "sjf", "f1", "multifactor"))
            elif name == "weight" and len(path) == 3:
                if path[2] not in ("class", "fairshare", "age", "estimate", "size", "qos"):
                    raise WhatIfError(f"--set {key}: no weight {path[2]!r}; weights: class, fairshare, age, "
                                      f"estimate, size, qos")
                w = _number(value, key)
                if w < 0:
                    raise WhatIfError(f"--set {key}={value}: a weight is 0 or more")
                out.policy.setdefault("weights", {})[path[2]] = w
            elif name in ("max_age", "estimate_ref", "backoff_base", "backoff_max") and len(path) == 2:
                out.policy[f"{name}_s"] = parse_duration(value, f"--set {key}")
            elif name == "qos_boost" and len(path) == 3:
                f = _number(value, key)
                if not 0 <= f <= 1:
                    raise WhatIfError(f"--set {key}={value}: a QOS factor is in [0, 1]")
                out.policy.setdefault("qos_boost", {})[path[2]] = f
            else:
                raise _unknown(key)
        elif head == "fairshare" and len(path) == 2:
            name = path[1]
            if name == "half_life":
                out.fairshare["half_life_s"] = parse_duration(value, f"--set {key}")
                if out.fairshare["half_life_s"] <= 0:
                    raise WhatIfError(f"--set {key}={value}: the half-life is more than 0")
            elif name in ("gpu_weight", "cpu_weight", "memory_weight"):
                w = _number(value, key)
                if w < 0:
                    raise WhatIfError(f"--set {key}={value}: a weight is 0 or more")
                out.fairshare[name] = w
            elif name == "dominant_share":
                out.fairshare[name] = _bool(value, key)
            else:
                raise _unknown(key)
        elif head == "profile" and len(path) >= 3:
            prof = out.profiles.setdefault(path[1], {})
            name = path[2]
            if name == "backfill" and len(path) == 3:
                prof["backfill"] = _choice(value, key, BACKFILL_MODES)
            elif name == "reservation_depth" and len(path) == 3:
                prof["reservation_depth"] = _count(value, key)
            elif name == "runtime_estimate" and len(path) == 3:
                prof["runtime_estimate"] = _choice(value, key, ("limit", "predicted"))
            elif name == "weight" and len(path) == 4:
                prof.setdefault("weights", {})[path[3]] = _number(value, key)
            else:
                raise _unknown(key)
        elif head == "preemption" and len(path) >= 2:
            name = path[1]
            if name == "victims" and len(path) == 2:
                out.preemption["victims"] = _choice(value, key, VICTIM_ORDERS)
            elif name == "rules" and len(path) == 3:
                classes = [v.strip() for v in value.split(",") if v.strip()]
                for v in classes + [path[2]]:
                    if v not in c.PRIORITY_CLASSES:
                        raise WhatIfError(f"--set {key}={value}: {v!r} is not a priority class "
                                          f"({', '.join(c.PRIORITY_CLASSES)})")
                out.preemption.setdefault("rules", {})[path[2]] = classes
            elif name == "grace_period" and len(path) == 2:
                out.preemption["grace_period_s"] = parse_duration(value, f"--set {key}")
            elif name in ("max_preemptions", "per_minute", "per_account_per_minute") and len(path) == 2:
                out.preemption[name] = _count(value, key)
            else:
                raise _unknown(key)
        elif head == "account" and len(path) >= 3:
            acc = out.accounts.setdefault(path[1], {})
            name = path[2]
            if name == "shares" and len(path) == 3:
                s = _number(value, key)
                if s <= 0:
                    raise WhatIfError(f"--set {key}={value}: shares are more than 0")
                acc["shares"] = s
            elif name == "parent" and len(path) == 3:
                acc["parent"] = value or None
            elif name == "priority_boost" and len(path) == 3:
                acc["priority_boost"] = _number(value, key)
            elif name == "borrowing" and len(path) == 3:
                acc["borrowing"] = _bool(value, key)
            elif name == "quota" and len(path) in (4, 5):
                acc.setdefault("quota", {}).update(_quota(path[3:], value, key))
            else:
                raise _unknown(key)
        else:
            raise _unknown(key)
        out.keys.append(f"{key}={value}")
    return out


def _quota(path: list[str], value: str, key: str) -> dict[str, Any]:
    from events.resources import ResourceError, parse_memory

    unlimited = value.lower() in ("none", "unlimited", "")
    dim = path[0]
    if dim == "gpus" and len(path) == 2:
        return {"gpus_by_type": {path[1]: None if unlimited else _count(value, key)}}
    if len(path) != 1:
        raise _unknown(key)
    if dim in ("gpus", "running_jobs"):
        return {dim: None if unlimited else _count(value, key)}
    if dim == "cpus":
        return {"cpus_milli": None if unlimited else int(_number(value, key) * 1000)}
    if dim == "memory":
        if unlimited:
            return {"memory_bytes": None}
        try:
            return {"memory_bytes": parse_memory(value)}
        except (ResourceError, ValueError):
            raise WhatIfError(f"--set {key}={value}: {value!r} is not an amount of memory (e.g. 512Gi)") from None
    raise _unknown(key)


def _unknown(key: str) -> WhatIfError:
    return WhatIfError(f"--set {key}: unknown key; keys: {', '.join(SET_KEYS)}")


def change_events(changes: Changes, base: Sequence[Event], backfill: str) -> list[Event]:
    """The operator configuration events the changes are, on top of the configuration in force (``base``,
    in log order): events that replace a whole configuration (fair share, a profile, an account) start
    from the one in force; the others (policy, preemption) change only what they name."""
    out: list[Event] = []
    if changes.policy:
        out.append(c.PolicyConfigured(**changes.policy, user="whatif"))
    if changes.fairshare:
        last = next((e for e in reversed(base) if isinstance(e, c.FairShareConfigured)), None)
        fields = ({"half_life_s": last.half_life_s, "gpu_weight": last.gpu_weight, "cpu_weight": last.cpu_weight,
                   "memory_weight": last.memory_weight, "dominant_share": last.dominant_share} if last is not None
                  else {"cpu_weight": 1 / 16})  # the billing of a log without any FairShareConfigured
        out.append(c.FairShareConfigured(**{**fields, **changes.fairshare}, user="whatif"))
    for name, prof in changes.profiles.items():
        last_p = next((e for e in reversed(base) if isinstance(e, c.ProfileConfigured) and e.name == name), None)
        fields = (msgspec.structs.asdict(last_p) if last_p is not None else {"name": name, "backfill": backfill})
        fields = {k: v for k, v in fields.items() if k in ("name", "weights", "backfill", "reservation_depth",
                                                            "runtime_estimate")}
        if "weights" in prof:
            prof = {**prof, "weights": {**fields.get("weights", {}), **prof["weights"]}}
        out.append(c.ProfileConfigured(**{**fields, **prof}, user="whatif"))
    if changes.preemption:
        out.append(c.PreemptionConfigured(**changes.preemption, user="whatif"))
    for name, acc in changes.accounts.items():
        last_a = next((e for e in reversed(base) if isinstance(e, c.AccountConfigured) and e.account == name), None)
        fields = msgspec.structs.asdict(last_a) if last_a is not None else {"account": name}
        fields = {k: v for k, v in fields.items() if k in ("account", "parent", "shares", "quota", "borrowing",
                                                            "priority_boost", "max_priority_class", "tenants")}
        if "quota" in acc:
            quota = fields.get("quota") or c.Quota()
            q = msgspec.structs.asdict(quota)
            extra = dict(acc["quota"])
            if "gpus_by_type" in extra:
                merged = {**q.get("gpus_by_type", {}), **extra.pop("gpus_by_type")}
                q["gpus_by_type"] = {k: v for k, v in merged.items() if v is not None}
            q.update(extra)
            acc = {**acc, "quota": c.Quota(**q)}
        out.append(c.AccountConfigured(**{**fields, **acc}, user="whatif"))
    return out


_ADD = re.compile(r"^(\d+)x(\d+)([a-z][a-z0-9-]*)?$", re.IGNORECASE)


def parse_add_nodes(spec: str) -> tuple[int, int, str | None]:
    """``4x8a100`` -> 4 nodes of 8 GPUs of type a100; ``10x0`` -> 10 CPU nodes like the others."""
    m = _ADD.match(spec.strip())
    if not m or int(m.group(1)) < 1:
        raise WhatIfError(f"--add-nodes {spec!r}: use COUNTxGPUS[TYPE], e.g. 4x8a100 (4 nodes of 8 a100 GPUs) "
                          f"or 10x0 (10 nodes without GPUs)")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def added_nodes(specs: Sequence[str], workload: Workload) -> list[tuple[str, Event]]:
    """Registrations of the nodes ``--add-nodes`` asks for, shaped like a recorded node of the same GPU
    type (its cores, memory, labels), else 64 cores and 1 TiB; named ``whatif-<n>``."""
    from events.resources import parse_memory

    regs = [e for _, e in workload.timed if isinstance(e, c.NodeRegistered)]
    out: list[tuple[str, Event]] = []
    n = 0
    for spec in specs:
        count, gpus, gpu_type = parse_add_nodes(spec)
        like = next((r for r in regs if (len(r.gpus) > 0) == (gpus > 0)
                     and (gpu_type is None or any(g.type == gpu_type for g in r.gpus))), None)
        kind = gpu_type or (like.gpus[0].type if like is not None and like.gpus else "a100")
        for _ in range(count):
            name = f"whatif-{n:03d}"
            n += 1
            reg = c.NodeRegistered(
                id=f"whatif/NodeRegistered/{name}", ts=workload.start_s, source=f"agent/{name}",
                correlation_id=name, node=name, cpus_milli=like.cpus_milli if like is not None else 64_000,
                memory_bytes=like.memory_bytes if like is not None else parse_memory("1Ti"),
                gpus=[c.GpuDevice(id=str(i), type=kind, memory_bytes=like.gpus[0].memory_bytes
                                  if like is not None and like.gpus else 0) for i in range(gpus)],
                labels=dict(like.labels) if like is not None else {}, agent=name, simulated=True)
            out.append((event_subject("agent", reg), reg))
    return out


def remove_nodes(workload: Workload, patterns: Sequence[str]) -> tuple[list[tuple[str, Event]], list[str]]:
    """The timed events without any that concern a node matching a pattern (shell glob); the nodes removed."""
    if not patterns:
        return list(workload.timed), []
    names = sorted({e.node for _, e in workload.timed if isinstance(e, c.NodeRegistered)})
    gone = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not gone:
        raise WhatIfError(f"--remove-nodes {' '.join(patterns)}: no recorded node matches (nodes: "
                          f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''})")
    if len(gone) == len(names):
        raise WhatIfError("--remove-nodes would remove every node: nothing could run")
    drop = set(gone)
    return [(s, e) for s, e in workload.timed if getattr(e, "node", None) not in drop], gone


# ---------------------------------------------------------------------- the cores and the run


def whatif_cores(policy: str, backfill: str) -> list[Any]:
    """The five cores as the live services run them (``horizon up --policy --backfill-mode``), at virtual time."""
    from services.inventory.core import InventoryCore
    from services.placement.core import PlacementCore
    from services.preemption.core import PreemptionCore
    from services.scheduling.core import SchedulingCore
    from services.submission.core import SubmissionCore

    return [SubmissionCore(virtual_time=True), SchedulingCore(policy=policy, virtual_time=True),
            PlacementCore(backfill=backfill, virtual_time=True), PreemptionCore(virtual_time=True),
            InventoryCore(virtual_time=True)]


async def run_whatif(workload: Workload, timed: Sequence[tuple[str, Event]], config: Sequence[Event], *,
                     policy: str, backfill: str, progress: Callable[[int, int], None] | None = None) -> Any:
    """One replay of the workload over the in-process bus; ``config`` is published at its start."""
    from services.front.sim.buses import InProcessBus
    from services.front.sim.driver import SimSettings, simulate

    settings = SimSettings(policy=policy, backfill=backfill)
    start = [(admin_subject(_verb(e)), msgspec.structs.replace(e, ts=workload.start_s, id=e.id or f"whatif/config/{n}",
                                                               source="whatif")) for n, e in enumerate(config)]
    # the changes apply at the span's start, after the configuration in force then
    events = [(s, e) for s, e in timed] + [(s, e) for s, e in start]
    bus = InProcessBus(whatif_cores(policy, backfill))
    return await simulate(workload.jobs, [], settings, bus, progress=progress, timed=_ordered(events, workload.start_s))


def _ordered(events: list[tuple[str, Event]], start_s: float) -> list[tuple[str, Event]]:
    """Changes (source whatif) right after what happened at or before the span's start."""
    def key(item: tuple[str, Event]) -> tuple[float, int]:
        e = item[1]
        return (max(e.ts, start_s) if e.source == "whatif" else e.ts, 1 if e.source == "whatif" else 0)

    out = sorted(events, key=key)
    # the driver sorts by ts (stable): changes at the span's start must not precede earlier configuration
    return [(s, msgspec.structs.replace(e, ts=max(e.ts, start_s)) if e.source == "whatif" else e) for s, e in out]


def _verb(event: Event) -> str:
    for verb, cls in ADMIN_VERBS.items():
        if isinstance(event, cls):
            return verb
    raise WhatIfError(f"{event.event_type} is not an operator configuration event")


# ---------------------------------------------------------------------- the numbers


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def _summary(waits: list[float], bslds: list[float], never_started: int = 0) -> dict[str, Any]:
    if not waits:
        return {"jobs": 0, "never_started": never_started, "mean_wait_s": 0.0, "p50_wait_s": 0.0, "p90_wait_s": 0.0,
                "p99_wait_s": 0.0, "mean_bounded_slowdown": 0.0}
    return {"jobs": len(waits), "never_started": never_started, "mean_wait_s": sum(waits) / len(waits),
            "p50_wait_s": _pct(waits, 50), "p90_wait_s": _pct(waits, 90), "p99_wait_s": _pct(waits, 99),
            "mean_bounded_slowdown": sum(bslds) / len(bslds)}


def wait_of(info: RecordedJob, start_s: float | None, end_s: float) -> float:
    """A job's wait in a replay: from its submission to its first start. A job that never starts waits
    until its user gave up on it (the recorded cancel, replayed at its time) or else to the end of the
    span ``end_s``: a change that leaves jobs unstarted (nodes removed, a quota too small, a job rejected
    or found unschedulable) shows as waits at least that long, not as jobs that left the averages."""
    if start_s is not None:
        return start_s - info.submit_s
    until = info.cancel_s if info.cancel_s is not None and info.cancel_s <= end_s else end_s
    return max(0.0, until - info.submit_s)


def bounded_slowdown(wait: float, run: float) -> float:
    """max(1, (wait + run) / max(run, 10)): the 10 s bound of Feitelson et al. and RLScheduler."""
    return max(1.0, (wait + run) / max(run, 10.0))


def capacity_of(timed: Sequence[tuple[str, Event]]) -> tuple[int, float]:
    """(GPUs, cores) of the nodes registered in ``timed`` (each node's last registration)."""
    nodes = {e.node: (len(e.gpus), e.cpus_milli / 1000.0) for _, e in timed if isinstance(e, c.NodeRegistered)}
    return sum(g for g, _ in nodes.values()), sum(cp for _, cp in nodes.values())


def measure(workload: Workload, run: Any, config: Sequence[Event] = (),
            capacity: tuple[int, float] | None = None) -> dict[str, Any]:
    """The numbers of one replay, over the jobs submitted in the span, started or not (see docs/whatif.md
    for each): a job the replay never starts is counted (``never_started``) and waits until its user's
    cancel or the span's end (``wait_of``); ``capacity`` (GPUs, cores): the cluster's, when the replay
    changed its nodes."""
    rec = workload.recorded
    gpus_cluster = workload.capacity_gpus > 0
    cap_gpus, cap_cpus = capacity if capacity is not None else (workload.capacity_gpus, workload.capacity_cpus)
    span = workload.end_s - workload.start_s
    waits: list[float] = []
    bslds: list[float] = []
    groups: dict[str, dict[str, tuple[list[float], list[float], list[str]]]] = {
        k: {} for k in ("tenant", "account", "partition", "class")}
    busy = 0.0
    lost = 0.0
    delivered: dict[str, float] = {}
    never: list[str] = []
    for job_id, r in run.results.items():
        info = rec.get(job_id)
        if info is None:
            continue
        size = info.gpus if gpus_cluster else info.cpus
        for a in r.attempts:  # work inside the span, every job (carried-in ones too)
            inside = max(0.0, min(a.end_s, workload.end_s) - max(a.start_s, workload.start_s))
            busy += size * inside
            if a.outcome == "PREEMPTED":
                lost += info.gpus * max(0.0, a.end_s - a.start_s)
            delivered[info.account] = delivered.get(info.account, 0.0) + size * inside
    for job_id in sorted(workload.measured):  # every job submitted in the span, started or not
        info = rec[job_id]
        r = run.results.get(job_id)
        start = r.start_s if r is not None else None
        if start is None:
            never.append(job_id)
        wait = wait_of(info, start, workload.end_s)
        b = bounded_slowdown(wait, r.job.run_of(job_id, 1).runtime_s if r is not None else info.time_limit_s or 0.0)
        waits.append(wait)
        bslds.append(b)
        for kind, name in (("tenant", info.tenant), ("account", info.account), ("partition", info.partition or "-"),
                           ("class", info.priority_class)):
            w, s, n = groups[kind].setdefault(name, ([], [], []))
            w.append(wait)
            s.append(b)
            if start is None:
                n.append(job_id)
    total = cap_gpus if gpus_cluster else cap_cpus
    out: dict[str, Any] = _summary(waits, bslds, len(never))
    out.update({
        "never_started_jobs": never[:50],
        "utilization": busy / (total * span) if total and span > 0 else 0.0,
        "utilization_of": "GPUs" if gpus_cluster else "cores",
        "gpu_hours_lost_to_preemption": lost / 3600.0,
        "preemptions": sum(1 for r in run.results.values() for a in r.attempts if a.outcome == "PREEMPTED"),
    })
    for kind in ("tenant", "account", "partition", "class"):
        rows = []
        for name, (w, s, n) in sorted(groups[kind].items()):
            rows.append({kind: name, **_summary(w, s, len(n))})
        out[f"per_{kind}"] = rows
    out["fairshare"] = fairshare_distance(delivered, _targets(config, set(delivered)))
    return out


def _targets(config: Sequence[Event], active: set[str]) -> dict[str, float]:
    """Each active account's target share of the cluster: along its path from the root, its shares over
    the shares of its active siblings (Slurm's normalised shares; accounts never configured have 1 share)."""
    conf: dict[str, c.AccountConfigured] = {}
    for e in config:
        if isinstance(e, c.AccountConfigured):
            conf[e.account] = e
    parent = {a: (conf[a].parent if a in conf else None) for a in active}
    shares = {a: (conf[a].shares if a in conf else 1.0) for a in active}
    # ancestors of active accounts are active too
    todo = list(active)
    while todo:
        a = todo.pop()
        p = parent.get(a)
        if p and p not in parent:
            parent[p] = conf[p].parent if p in conf else None
            shares[p] = conf[p].shares if p in conf else 1.0
            todo.append(p)
    siblings: dict[str | None, float] = {}
    for a, p in parent.items():
        siblings[p] = siblings.get(p, 0.0) + shares[a]
    out = {}
    for a in active:
        target, node, seen = 1.0, a, set()
        while node is not None and node not in seen:
            seen.add(node)
            target *= shares[node] / siblings[parent[node]]
            node = parent[node]
        out[a] = target
    return out


def fairshare_distance(delivered: dict[str, float], targets: dict[str, float]) -> dict[str, Any]:
    """Delivered share (an account's resource-seconds in the span over all accounts') against its target;
    the distance is half the sum of the absolute differences over the leaf accounts that ran (0: every account
    got exactly its target, 1: as far as it can be)."""
    total = sum(delivered.values())
    leaves = [a for a in delivered]
    target_total = sum(targets.get(a, 0.0) for a in leaves) or 1.0
    rows = []
    distance = 0.0
    for a in sorted(leaves):
        got = delivered[a] / total if total else 0.0
        want = targets.get(a, 0.0) / target_total
        distance += abs(got - want)
        rows.append({"account": a, "delivered": got, "target": want})
    return {"distance": distance / 2, "accounts": rows}


STALE_BASIS = "placed live by a cycle that had not yet seen an end the log held before its decision"


def fidelity(workload: Workload, run: Any, tolerance_s: float) -> dict[str, Any]:
    """The baseline against the log, job by job: a job is reproduced when it started in both on the same
    nodes within ``tolerance_s`` of its recorded start (the live services' reaction time), or started in
    neither. Jobs whose course the log cannot tell (``Workload.notes``) are listed apart."""
    reproduced = 0
    compared = 0
    diverged: list[dict[str, Any]] = []
    for job_id in sorted(workload.measured, key=lambda j: workload.recorded[j].submit_s):
        info = workload.recorded[job_id]
        r = run.results.get(job_id)
        start = r.start_s if r is not None else None
        compared += 1
        same = (start is None and info.start_s is None) or (
            start is not None and info.start_s is not None and abs(start - info.start_s) <= tolerance_s
            and (not info.nodes or sorted(r.allocation) == info.nodes))
        if same:
            reproduced += 1
        else:
            why = [note for note, ids in sorted(workload.notes.items()) if job_id in ids]
            if job_id in workload.stale_basis:
                why.append(STALE_BASIS)
            diverged.append({"job_id": job_id, "recorded_start_s": info.start_s, "replayed_start_s": start,
                             "recorded_nodes": info.nodes, "replayed_nodes": sorted(r.allocation) if r else [],
                             "explained": bool(why), "why": why})
    return {"compared": compared, "reproduced": reproduced, "tolerance_s": tolerance_s,
            "diverged": len(diverged), "unexplained": sum(1 for d in diverged if not d["explained"]),
            "divergences": diverged[:50],
            "cannot_predict": {why: len(ids) for why, ids in sorted(workload.notes.items())}}


def moves(workload: Workload, base: Any, changed: Any, top: int = 10) -> dict[str, Any]:
    """Jobs that start earlier or later in the changed replay than in the baseline, and by how much."""
    shifts: list[tuple[float, str]] = []
    only_base = only_changed = 0
    for job_id in workload.measured:
        a, b = base.results.get(job_id), changed.results.get(job_id)
        sa, sb = (a.start_s if a else None), (b.start_s if b else None)
        if sa is None and sb is None:
            continue
        if sa is None:
            only_changed += 1
        elif sb is None:
            only_base += 1
        else:
            shifts.append((sb - sa, job_id))
    earlier = [-d for d, _ in shifts if d < 0]
    later = [d for d, _ in shifts if d > 0]

    def stats(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"jobs": 0, "mean_s": 0.0, "p50_s": 0.0, "p90_s": 0.0, "max_s": 0.0}
        return {"jobs": len(values), "mean_s": sum(values) / len(values), "p50_s": _pct(values, 50),
                "p90_s": _pct(values, 90), "max_s": max(values)}

    biggest = sorted(shifts, key=lambda x: -abs(x[0]))[:top]
    return {"earlier": stats(earlier), "later": stats(later), "same": sum(1 for d, _ in shifts if d == 0),
            "started_only_in_baseline": only_base, "started_only_in_changed": only_changed,
            "biggest": [{"job_id": j, "tenant": workload.recorded[j].tenant, "shift_s": d} for d, j in biggest]}


def dumps(obj: Any) -> str:
    return json.dumps(obj)
