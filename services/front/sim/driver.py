"""Trace simulation at virtual time, through the real service cores.

The driver plays the outside world: it publishes the trace's arrivals
(``JobSubmitted``), the cluster's nodes (``NodeRegistered``), the clock
(``ClockTicked``) and, as the node agents would, each job's start and end
(``JobStarted``, ``JobSucceeded`` after its run time). Everything else, the
admission, the order, the placement and backfilling, is decided by the same
five cores that run live, configured with ``virtual_time=True``.

One step of virtual time ``T`` (the next arrival or completion):

1. publish the completions at ``T``, then the arrivals at ``T``;
2. **barrier**: wait until the system is quiescent;
3. publish ``ClockTicked(T)``: the scheduler runs a cycle only on a tick (at
   virtual time), so a cycle always sees the whole instant;
4. barrier; every ``JobScheduled`` decided meanwhile starts at ``T``: the
   driver publishes its ``JobStarted`` for that attempt and schedules its end
   at ``T + run``: ``JobSucceeded``, or ``JobFailed`` for an attempt the job
   says fails (``SimJob.exit_code``, ``fail_attempts``). A requeued job is
   scheduled again, with the next attempt number, and starts again. An
   elastic job (``SimJob.min_nodes``) keeps its run time whatever its size;
   a shrink for a preemptor frees its nodes within the instant, as a
   preemption does.

Time also stops where nothing arrives or ends but a decision may fall due: a
requeued job's backoff (``JobRequeued.not_before_ts``) and a pending job's
scheduling timeout. Such a step is a tick alone; it changes nothing when
nothing is due. Operator configuration (``Trace.config``) is published on its
admin subject with the node registrations, before the first arrival. An
array (``SimJob.array``) is one submission; the driver expands its indices
with the parser submission uses and follows each task ``<job_id>_<index>``
as a job of its own.

Two buses, one driver (``services/front/sim/buses.py``: ``InProcessBus``, the cores
called directly, and ``NatsBus``, the real service runners over JetStream), so
the decisions can be compared. Both buses see the same events in the same
causal order at every barrier, and decisions at a tick depend only on the state at the tick, so per-job
start times and allocations are identical (tested); only sequence numbers
and decision batching inside an instant differ.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import catalogue as c
from events.arrays import parse_array, task_id
from events.base import Event
from events.resources import ResourceError
from events.subjects import admin_subject, event_subject, input_subject
from services.domain.envelope import decision_id
from services.nodes.spec import NodeSpec
from services.front.sim.buses import Bus
from services.front.sim.traces import SimJob, admin_verb

__all__ = ["SimSettings", "simulate", "JobResult", "Attempt", "submission_for", "make_cores", "predicting_profile"]

TENANT = "sim"


@dataclass(frozen=True)
class SimSettings:
    policy: str = "multifactor"
    backfill: str = "none"  # none | easy | shadow | greedy (services/placement/core.py)
    procs_per_node: int = 1  # cores per node of a CPU cluster
    gpus_per_node: int = 0  # GPUs per node of a GPU cluster (trace processors become GPUs)
    gpu_type: str = "a100"
    # Fair share as of the ledger (services/domain/ledger.py), entries at most every this many seconds of
    # virtual time; None: exact per record (the whole-cluster scheduler's).
    fairshare_ledger_s: float | None = None


def make_cores(settings: SimSettings) -> list[Any]:
    from services.inventory.core import InventoryCore
    from services.placement.core import PlacementCore
    from services.preemption.core import PreemptionCore
    from services.scheduling.core import SchedulingCore
    from services.scheduling.ledgered import LedgerSchedulingCore
    from services.submission.core import SubmissionCore

    if settings.fairshare_ledger_s is None:
        scheduling = SchedulingCore(policy=settings.policy, virtual_time=True, max_candidates=100_000)
    else:
        scheduling = LedgerSchedulingCore(policy=settings.policy, virtual_time=True, max_candidates=100_000,
                                          ledger_every_s=settings.fairshare_ledger_s)
    return [
        SubmissionCore(virtual_time=True),
        scheduling,
        PlacementCore(backfill=settings.backfill, virtual_time=True),
        PreemptionCore(virtual_time=True),
        InventoryCore(virtual_time=True),
    ]


def predicting_profile(backfill: str) -> c.ProfileConfigured:
    """The ``default`` placement profile with ``backfill`` and EASY++ run-time predictions (what
    ``horizon simulate --predict-runtimes`` adds to a run's configuration; the same through
    ``horizon profile set default --runtime-estimate predicted`` on a live cluster)."""
    return c.ProfileConfigured(name="default", backfill=backfill, runtime_estimate="predicted")


def submission_for(job: SimJob, settings: SimSettings, at: float) -> c.JobSubmitted:
    """A trace job as a submission: all-or-nothing over as many nodes as its processors need; a
    recorded submission (``SimJob.submitted``) as it was, at ``at``, running ``runtime_s``."""
    if job.submitted is not None:
        return msgspec.structs.replace(job.submitted, ts=at, sim_runtime_s=job.runtime_s)
    if settings.gpus_per_node:
        total = job.gpus or job.procs
        per = settings.gpus_per_node
        nodes = job.nodes or max(1, math.ceil(total / per))
        resources = c.ResourceRequest(cpus=1, memory="1Mi", gpus=math.ceil(total / nodes), gpu_type=job.gpu_type)
        tasks_per_node = 1
    else:
        per = settings.procs_per_node
        nodes = job.nodes or max(1, math.ceil(job.procs / per))
        tasks_per_node = math.ceil(job.procs / nodes)
        resources = c.ResourceRequest(cpus=1, memory="1Mi")
    return c.JobSubmitted(
        ts=at, source="simulator", correlation_id=job.job_id, job_id=job.job_id, tenant=TENANT,
        account=job.account, user=job.user, resources=resources, nodes=nodes, tasks_per_node=tasks_per_node,
        time_limit_s=job.estimate_s, priority_class=job.priority_class, sim_runtime_s=job.runtime_s,
        nice=job.nice, qos=job.qos, array=job.array, restart_policy=job.restart_policy, max_retries=job.max_retries,
        scheduling_timeout_s=job.scheduling_timeout_s, sim_exit_code=job.exit_code,
        dependencies=[c.Dependency(kind=kind, job_id=dep) for kind, dep in job.dependencies],
        min_nodes=job.min_nodes,
    )


def task_ids(job: SimJob) -> list[str]:
    """The job ids one trace job becomes: itself, or each task of its array (as submission names them).
    An array spec submission will reject stays one id, which then never starts."""
    if job.array is None:
        return [job.job_id]
    try:
        return [task_id(job.job_id, i) for i in parse_array(job.array).indices]
    except ResourceError:
        return [job.job_id]


@dataclass
class Attempt:
    """One run of a job: when and where, and how it ended."""

    attempt: int
    start_s: float
    end_s: float
    nodes: list[str]
    outcome: str  # SUCCEEDED | FAILED | PREEMPTED | CANCELLED | STOPPING (cancelled, the stop due at end_s)
    exit_code: int = 0
    stop: c.JobStopRequested | None = None  # the cancel a STOPPING attempt stops for


@dataclass
class JobResult:
    """What happened to one job (one task of an array): its attempts and how it ended.

    ``start_s`` and ``allocation`` are the first attempt's, which is what the
    metrics and the bus comparison read; ``end_s`` is the last attempt's end.
    """

    job: SimJob
    start_s: float | None = None
    allocation: list[str] = field(default_factory=list)  # node names
    backfilled: bool = False
    attempts: list[Attempt] = field(default_factory=list)
    state: str = ""  # the last known: SUCCEEDED, FAILED, PENDING (requeued), REJECTED, CANCELLED, ...
    reason: str = ""

    @property
    def end_s(self) -> float | None:
        return self.attempts[-1].end_s if self.attempts else None


@dataclass
class SimRun:
    results: dict[str, JobResult]
    nodes: list[NodeSpec]
    wall_s: float
    steps: int
    unstarted: list[str]  # rejected by submission, ended by a decision, or never placed


async def simulate(jobs: list[SimJob], nodes: list[NodeSpec], settings: SimSettings, bus: Bus,
                   config: Sequence[Event] = (), progress: Callable[[int, int], None] | None = None,
                   timed: Sequence[tuple[str, Event]] = ()) -> SimRun:
    """Run ``jobs`` through the bus at virtual time; ``progress(attempts ended, jobs)`` after each step.

    ``timed``: (subject, event) the world or an operator publishes at the event's ``ts`` (a node
    registered, cordoned or lost, a configuration change, a user's cancel: ``horizon whatif`` replays
    them as recorded); those at or before the first arrival are published with the nodes."""
    started_wall = time.perf_counter()
    ended = 0
    results: dict[str, JobResult] = {}
    tasks: dict[str, list[str]] = {}  # submitted id -> the job ids it became
    for job in jobs:
        tasks[job.job_id] = task_ids(job)
        for job_id in tasks[job.job_id]:
            results[job_id] = JobResult(job)
    arrivals = sorted(jobs, key=lambda j: j.submit_s)  # stable: file order within an instant
    ends: list[tuple[float, str, int]] = []  # (time, job id, attempt)
    wakes: list[float] = []  # times a decision may fall due (backoff, scheduling timeout)
    t0 = arrivals[0].submit_s if arrivals else 0.0
    later = sorted(((e.ts, n, subject, e) for n, (subject, e) in enumerate(timed)), key=lambda x: (x[0], x[1]))
    early = [(subject, _at(e, t0)) for ts, _, subject, e in later if ts <= t0]
    later = [item for item in later if item[0] > t0]
    k = 0
    start: list[tuple[str, Event]] = []
    for spec in nodes:
        reg = spec.registration("simulator")
        start.append((event_subject("agent", reg), _at(reg, t0)))
    for n, event in enumerate(config):
        start.append((admin_subject(admin_verb(event)),
                      msgspec.structs.replace(event, ts=t0, id=event.id or f"sim/config/{n}", source="simulator")))
    start.extend(early)
    await bus.publish(start)
    await bus.settle()
    i = steps = 0
    while i < len(arrivals) or ends or wakes or k < len(later):
        now = min(arrivals[i].submit_s if i < len(arrivals) else math.inf, ends[0][0] if ends else math.inf,
                  wakes[0] if wakes else math.inf, later[k][0] if k < len(later) else math.inf)
        while wakes and wakes[0] <= now:
            heapq.heappop(wakes)
        steps += 1
        batch: list[tuple[str, Event]] = []
        while k < len(later) and later[k][0] == now:
            batch.append((later[k][2], later[k][3]))
            k += 1
        while ends and ends[0][0] == now:
            _, job_id, attempt = heapq.heappop(ends)
            result = results[job_id]
            run = result.attempts[-1]
            if run.attempt != attempt or run.outcome in ("PREEMPTED", "CANCELLED"):
                continue  # stopped earlier by a preemption or a cancel
            if run.outcome == "STOPPING":  # a cancel asked for earlier stops it now (see _stop)
                if run.end_s == now and run.stop is not None:
                    result.attempts[-1] = dataclasses.replace(run, outcome="CANCELLED")
                    result.state = "CANCELLED"
                    gone = _cancelled(run.stop, attempt, now)
                    batch.append((event_subject("agent", gone), gone))
                continue
            if run.exit_code == 0:
                done: Event = c.JobSucceeded(id=decision_id("agent", c.JobSucceeded, job_id, attempt), ts=now,
                                             correlation_id=job_id, source="agent/sim", job_id=job_id,
                                             attempt=attempt, runtime_s=result.job.run_of(job_id, attempt).runtime_s)
            else:
                done = c.JobFailed(id=decision_id("agent", c.JobFailed, job_id, attempt), ts=now, correlation_id=job_id,
                                   source="agent/sim", job_id=job_id, attempt=attempt, exit_code=run.exit_code,
                                   reason=f"exit code {run.exit_code}",
                                   runtime_s=result.job.run_of(job_id, attempt).runtime_s)
            result.state, result.reason = run.outcome, "" if run.exit_code == 0 else f"exit code {run.exit_code}"
            batch.append((event_subject("agent", done), done))
            ended += 1
        while i < len(arrivals) and arrivals[i].submit_s == now:
            job = arrivals[i]
            sub = submission_for(job, settings, now)
            batch.append((job.subject or input_subject(TENANT, "submit"), _with_id(sub, job.job_id)))
            if job.scheduling_timeout_s is not None:
                heapq.heappush(wakes, now + job.scheduling_timeout_s)
            i += 1
        await bus.publish(batch)
        decided = await bus.settle()
        tick = c.ClockTicked(id=decision_id("clock", c.ClockTicked, steps), ts=now, correlation_id="sim", source="clock", now_ts=now)
        await bus.publish([(event_subject("clock", tick), tick)])
        decided += await bus.settle()
        while decided:  # preemptions stop their victims now; what they free is decided in the same instant
            reports = []
            for decision in decided:
                if isinstance(decision, c.JobScheduled):
                    begin = _start(results, decision, now, ends)
                    if begin is not None:
                        reports.append((event_subject("agent", begin), begin))
                elif isinstance(decision, c.PreemptionRequested):
                    stop = _preempt(results, decision, now)
                    if stop is not None:
                        reports.append((event_subject("agent", stop), stop))
                elif isinstance(decision, c.JobStopRequested):  # a cancel of a started job
                    gone = _stop(results, decision, now, ends)
                    if gone is not None:
                        reports.append((event_subject("agent", gone), gone))
                elif not isinstance(decision, c.JobResized):  # an elastic job's new size: its run time stays
                    _record(results, tasks, decision, now, wakes)
            # a shrink for a preemptor frees nodes at once, as a preempted victim's stop does
            shrunk = any(isinstance(d, c.JobResized) and d.nodes < d.previous_nodes for d in decided)
            await bus.publish(reports)
            decided = []
            if shrunk or any(isinstance(e, (c.JobPreempted, c.JobCancelled)) for _, e in reports):
                decided = await bus.settle()
                steps += 1
                tick = c.ClockTicked(id=decision_id("clock", c.ClockTicked, steps), ts=now, correlation_id="sim", source="clock",
                                     now_ts=now)
                await bus.publish([(event_subject("clock", tick), tick)])
                decided += await bus.settle()
        if progress is not None:
            progress(min(ended, len(results)), len(results))
        if i >= len(arrivals) and k >= len(later) and not ends and not _waiting(results, wakes):
            break  # nothing will ever happen again: what has not started never will
    unstarted = [job_id for job_id, r in results.items() if r.start_s is None]
    return SimRun(results, nodes, time.perf_counter() - started_wall, steps, unstarted)


def _start(results: dict[str, JobResult], decision: c.JobScheduled, now: float,
           ends: list[tuple[float, str, int]]) -> c.JobStarted | None:
    """The node agent's part: start the attempt now, and know when and how it will end."""
    result = results.get(decision.job_id)
    if result is None or any(a.attempt >= decision.attempt for a in result.attempts):
        return None
    nodes = sorted(a.node for a in decision.allocations)
    run = result.job.run_of(decision.job_id, decision.attempt)  # an array task may have a run of its own
    code = run.exit_code
    end = now + run.runtime_s
    pinned = run.recorded_run
    if pinned is not None and decision.attempt == 1 and abs(now - pinned[0]) <= pinned[2]:
        end = max(now, pinned[1])  # a recorded attempt started when it did ends when it did
    result.attempts.append(Attempt(decision.attempt, now, end, nodes, "SUCCEEDED" if code == 0 else "FAILED", code))
    result.state = "RUNNING"
    if result.start_s is None:
        result.start_s = now
        result.allocation = nodes
        result.backfilled = decision.backfilled
    heapq.heappush(ends, (end, decision.job_id, decision.attempt))
    return c.JobStarted(id=decision_id("agent", c.JobStarted, decision.job_id, decision.attempt), ts=now,
                        correlation_id=decision.job_id, source="agent/sim", job_id=decision.job_id,
                        attempt=decision.attempt, node=nodes[0])


def _preempt(results: dict[str, JobResult], decision: c.PreemptionRequested, now: float) -> c.JobPreempted | None:
    """The node agent's part of a preemption: a simulated job stops at once (no grace, no checkpoint)."""
    result = results.get(decision.job_id)
    if result is None or not result.attempts:
        return None
    run = result.attempts[-1]
    if run.attempt != decision.attempt or run.outcome in ("PREEMPTED", "STOPPING") or run.end_s <= now:
        return None
    result.attempts[-1] = dataclasses.replace(run, end_s=now, outcome="PREEMPTED", exit_code=0)
    result.state = "PENDING"
    return c.JobPreempted(id=decision_id("agent", c.JobPreempted, decision.job_id, decision.attempt), ts=now,
                          correlation_id=decision.job_id, source="agent/sim", job_id=decision.job_id,
                          attempt=decision.attempt, for_job=decision.for_job)


def _stop(results: dict[str, JobResult], decision: c.JobStopRequested, now: float,
          ends: list[tuple[float, str, int]]) -> c.JobCancelled | None:
    """The node agent's part of a cancel of a running job: it stops at once and reports the attempt
    cancelled; or, for an attempt that keeps to a recorded one its user cancelled (``SimJob.recorded_stop``),
    when the recorded one stopped (within the tolerance after the request): that stop is an end due then."""
    result = results.get(decision.job_id)
    if result is None or not result.attempts:
        return None
    run = result.attempts[-1]
    if run.outcome in ("PREEMPTED", "CANCELLED", "STOPPING") or run.end_s <= now:
        return None
    pinned = result.job.run_of(decision.job_id, run.attempt).recorded_stop
    if (pinned is not None and run.attempt == 1 and abs(run.start_s - pinned[0]) <= pinned[2]
            and now < pinned[1] <= now + pinned[2] and pinned[1] < run.end_s):
        result.attempts[-1] = dataclasses.replace(run, end_s=pinned[1], outcome="STOPPING", exit_code=0,
                                                  stop=decision)
        heapq.heappush(ends, (pinned[1], decision.job_id, run.attempt))
        return None
    result.attempts[-1] = dataclasses.replace(run, end_s=now, outcome="CANCELLED", exit_code=0)
    result.state = "CANCELLED"
    return _cancelled(decision, run.attempt, now)


def _cancelled(decision: c.JobStopRequested, attempt: int, now: float) -> c.JobCancelled:
    return c.JobCancelled(id=decision_id("agent", c.JobCancelled, decision.job_id, attempt), ts=now,
                          causation_id=decision.causation_id, correlation_id=decision.job_id, source="agent/sim",
                          job_id=decision.job_id, attempt=attempt, reason=decision.reason)


def _record(results: dict[str, JobResult], tasks: dict[str, list[str]], decision: Event, now: float,
            wakes: list[float]) -> None:
    """A decision about a job that is not a start: how it ended, or when to look at it again."""
    job_id: str = decision.job_id  # type: ignore[attr-defined]
    if isinstance(decision, c.JobRejected):  # an array is rejected as one
        for member in tasks.get(job_id, [job_id]):
            if member in results:
                results[member].state, results[member].reason = "REJECTED", decision.reason
        return
    result = results.get(job_id)
    if result is None:
        return
    if isinstance(decision, c.JobRequeued):
        result.state, result.reason = "PENDING", decision.reason
        if decision.not_before_ts > now:
            heapq.heappush(wakes, decision.not_before_ts)
        if result.job.scheduling_timeout_s is not None:  # the timeout runs again from the requeue
            heapq.heappush(wakes, max(now, decision.not_before_ts) + result.job.scheduling_timeout_s)
        return
    result.state = {c.JobDependencyNeverSatisfied: "DEPENDENCY_NEVER_SATISFIED", c.JobUnschedulable: "UNSCHEDULABLE",
                    c.JobCancelled: "CANCELLED"}.get(type(decision), result.state)
    result.reason = getattr(decision, "reason", "")


def _waiting(results: dict[str, JobResult], wakes: list[float]) -> bool:
    """Whether a wake-up could still change something: some job has not ended."""
    return bool(wakes) and any(r.state in ("", "PENDING") for r in results.values())


def _at(event: Event, ts: float) -> Event:
    return msgspec.structs.replace(event, ts=ts)


def _with_id(event: c.JobSubmitted, msg_id: str) -> c.JobSubmitted:
    return msgspec.structs.replace(event, id=msg_id)
