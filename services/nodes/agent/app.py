"""The node agent: registers its nodes, heartbeats, runs what placement put on them, reports.

One agent process can host many nodes (simulated clusters, ``horizon up``).
It follows the log like the services; what the log asks of its nodes is
decided by its pure core (``services/nodes/agent/core.py``: the fold, which jobs are
its own, the requests, the start-up plan), and this adapter carries it out:
its "decisions" are effects on the machine (processes, through an executor)
and its reports are observations:
``JobStarted``, ``JobSucceeded``, ``JobFailed`` (exit code, stderr tail, or
the time limit), ``JobCancelled`` (after a ``JobStopRequested``),
``JobCheckpointed`` and ``JobPreempted`` (after a ``PreemptionRequested``).
Every report has a deterministic id (``agent/<Type>/<job>/<attempt>``), so a
report sent twice is stored once. A ``JobCancelled`` carries the ``causation_id`` of
the cancel it carries out (the ``JobStopRequested``'s, ``seq:<n>`` of the client's
or operator's input), so the client that asked sees the end of its cancel by the
same ``causation_id`` as its verdict.

Stopping a job, for whatever reason, is one path (``_stop_job``): SIGTERM to
its process group, SIGKILL after the grace period. A cancel
(``JobStopRequested``) takes it at once and is reported ``JobCancelled``. A
preemption or eviction (``PreemptionRequested``, from preemption or from
inventory for a NoExecute taint) first sends the job its
``checkpoint_signal``, if it declares one, and waits for a checkpoint
reference (``services/nodes/backends/protocol.py``: ``Execution.checkpoint``) within the grace period, which
covers checkpoint and exit together, as Kubernetes counts a preStop hook
against the termination grace period; SIGTERM follows at once when the
checkpoint is written, and SIGKILL at the end of the period, but never
sooner than ``MIN_STOP_GRACE_S`` after SIGTERM. The agent reports
``JobCheckpointed`` for a reference it got and, once the process is gone,
``JobPreempted`` with the reference, and only then are the resources free.
A preemption is carried out once per attempt; one for an attempt that has
ended, or a second one, is ignored, and a cancel overrides it (the job ends
CANCELLED, not requeued).

The time limit the agent enforces is the attempt's own (``Job.limit_s``:
placement's, shorter than the spec's when backfill used ``--time-min``), from
the process's start; a job's ``limit_signal`` (Slurm's ``--signal``) is sent
that many seconds before it (``services/nodes/backends/process/signals.py``).

Start-up: catch up with the log first, then

* start every job SCHEDULED on its nodes that has not started;
* report ``JobFailed`` for every job the log says is RUNNING on its nodes,
  since a fresh agent has no such process (it died with the old agent);
* answer stop requests that arrived while it was away: ``JobCancelled`` for
  a cancel, ``JobPreempted`` for a preemption (the process is gone either way).

A job that ends by someone else's decision while running here (cancelled
before it was seen to start, failed because the node was declared lost) is
stopped without a report: the log already holds its end. One inventory
evicted under memory pressure is killed at once (no grace).

Memory pressure: every ``memory_interval_s`` the agent sums the working sets
of its jobs' cgroups per node and, over the node's memory less a reserve,
reports ``NodeMemoryPressure`` (``services/nodes/agent/memory_pressure.py``); inventory
decides whom to evict.

A multi-node job is launched by the agent of its first node (like Slurm's
batch host); the other nodes' agents hold the allocation and run what its
steps (``srun`` inside the batch script) ask of them (``services/nodes/agent/steps.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import event_subject, heartbeat_subject
from services.domain.envelope import Decider
from services.domain.jobs import JobState
from services.domain.protocol import Record
from services.domain.qos import memory_limit
from services.nodes.agent.core import Action, ActionKind, AgentCore
from services.nodes.agent.gpu_health import GpuHealth
from services.nodes.agent.logs import LogServer
from services.nodes.agent.memory_pressure import MemoryWatch, default_reserve
from services.nodes.agent.steps import StepService
from services.nodes.backends.process import signals
from services.nodes.backends.process.nvml import GpuBackend, NvmlBackend
from services.nodes.backends.process.resize import world_of
from services.nodes.backends.protocol import Execution, Executor, MemoryMeasured, Outcome, Resizable, ServesOutput
from services.nodes.job_environment import job_environment
from services.nodes.spec import NodeSpec
from services.runtime.cancel import cancel_and_wait
from services.runtime.consume import readable
from services.runtime.follow import LogFollow
from services.runtime.log import EventLog

__all__ = ["NodeAgent", "MIN_STOP_GRACE_S"]

log = logging.getLogger("horizon.agent")

# SIGTERM to SIGKILL when a checkpoint used up the grace period (Kubernetes gives 2 s after a preStop hook).
MIN_STOP_GRACE_S = 2.0


@dataclass
class _Running:
    attempt: int
    execution: Execution | None = None
    # "cancel": report JobCancelled; "preempt": report JobPreempted; "silent": no report
    stop_reason: str | None = None
    task: asyncio.Task[None] | None = None
    stoppers: list[asyncio.Task[None]] = field(default_factory=list)  # _stop_job, once it is being stopped
    preemption: c.PreemptionRequested | None = None
    checkpoint_ref: str | None = None  # what this attempt reported in JobCheckpointed


class NodeAgent:
    def __init__(
        self,
        log_: EventLog,
        nodes: list[NodeSpec],
        executor: Executor,
        *,
        nc: Any = None,
        name: str = "agent",
        heartbeat_interval_s: float = 1.0,
        grace_period_s: float = 10.0,
        gpu_backend: GpuBackend | None = None,
        health_interval_s: float = 10.0,
        memory_interval_s: float = 2.0,
        memory_reserve_bytes: int | None = None,
    ) -> None:
        self.log = log_
        self.nodes = {n.name: n for n in nodes}
        self.executor = executor
        self.nc = nc  # core NATS connection for heartbeats (None: no heartbeats, e.g. in-memory tests)
        self.name = name
        self.heartbeat_interval_s = heartbeat_interval_s
        self.grace_period_s = grace_period_s
        self.core = AgentCore(self.nodes)  # the log's jobs, requests and checkpoints; the fold's decisions
        self.running: dict[str, _Running] = {}
        self.heartbeats_paused = False  # tests simulate a silent node with this
        self.ready = asyncio.Event()
        self._follow: LogFollow | None = None
        self.make_follower: Any = LogFollow  # or a reader shared with the other parts of the process (fanout.py)
        self._heartbeat: asyncio.Task[None] | None = None
        self._logs: LogServer | None = None
        self.gpu_backend = gpu_backend  # the driver (NVML) of the machine's real GPUs; tests inject one
        self.health_interval_s = health_interval_s
        self._health: dict[str, GpuHealth] = {}
        self._health_task: asyncio.Task[None] | None = None
        self.steps: StepService | None = None  # srun inside jobs (real processes only)
        # memory pressure (services/nodes/agent/memory_pressure.py): measured where jobs run in cgroups
        self.memory_interval_s = memory_interval_s
        self.watches = {name: MemoryWatch(name, spec.memory_bytes, default_reserve(spec.memory_bytes)
                                          if memory_reserve_bytes is None else memory_reserve_bytes)
                        for name, spec in sorted(self.nodes.items())}
        self._memory_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        isolation = self.executor.isolation()
        if isolation.startswith("none"):
            log.warning("JOBS ARE NOT CONFINED on %s: %s", ", ".join(sorted(self.nodes)), isolation)
        self.nodes = {name: dataclasses.replace(spec, isolation=isolation) for name, spec in self.nodes.items()}
        for spec in self.nodes.values():
            reg = spec.registration(self.name)
            reg = msgspec.structs.replace(reg, ts=time.time())
            await self.log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
        self._health = {name: GpuHealth(self.gpu_backend or NvmlBackend(), spec.gpus)
                        for name, spec in sorted(self.nodes.items())
                        if not spec.simulated and any(gpu.uuid for gpu in spec.gpus)}
        self._health = {name: h for name, h in self._health.items() if await asyncio.to_thread(h.start)}
        if self._health:
            self._health_task = asyncio.create_task(self._watch_gpus(), name=f"{self.name}-gpu-health")
        if self.nc is not None:
            self._heartbeat = asyncio.create_task(self._beat(), name=f"{self.name}-heartbeat")
            serves = self.executor if isinstance(self.executor, ServesOutput) else None
            if self.executor.state_dir is not None or serves is not None:
                self._logs = LogServer(self.nc, self.executor.state_dir, sorted(self.nodes),
                                       serves.read_output if serves is not None else None)
                await self._logs.start()
        host = self.executor.processes_here()  # its jobs are processes here: srun inside them is served here
        if host is not None:
            self.steps = StepService(self.log, self.core, host, lambda: self.nodes.keys(), self._devices,
                                     nc=self.nc, grace_period_s=self.grace_period_s)
            await self.steps.start()
        # The log to its end folded (acting on nothing yet), then what it holds here resumed, then followed.
        self._follow = self.make_follower(self.log, self._on_batch, subjects=("horizon.evt.>",), history=self._fold,
                                          on_caught_up=lambda _end: self._resume(), name=f"{self.name}-log")
        await self._follow.start()
        await self._follow.until_caught_up()
        if host is not None and host.hierarchy.usable:  # their memory is measured in their cgroups
            self._memory_task = asyncio.create_task(self._watch_memory(), name=f"{self.name}-memory")
        self.ready.set()

    async def stop(self) -> None:
        if self._memory_task is not None:
            await cancel_and_wait(self._memory_task)
        if self._health_task is not None:
            await cancel_and_wait(self._health_task)
        for health in self._health.values():
            health.stop()
        if self._heartbeat is not None:
            await cancel_and_wait(self._heartbeat)
        if self._follow is not None:
            await self._follow.stop()
        if self._logs is not None:
            await self._logs.stop()
        if self.steps is not None:
            await self.steps.stop()
        # Jobs under their own supervisors run on; the next agent adopts them. Simulated
        # ones die with the agent, and the next agent reports them lost (see module doc).
        tasks = []
        for run in self.running.values():
            run.stop_reason = "silent"
            if run.execution is not None and not self.executor.detached:
                tasks.append(run.execution.stop(min(self.grace_period_s, 2.0)))
        for coro in tasks:
            with contextlib.suppress(Exception):
                await coro
        for run in self.running.values():
            if run.task is not None:
                run.task.cancel()

    async def _watch_gpus(self) -> None:
        """Every ``health_interval_s``: devices the driver reports broken (XID errors, lost from the
        bus) are re-registered with their reason, so placement stops choosing them."""
        while True:
            for name, health in self._health.items():
                try:
                    found = await asyncio.to_thread(health.check)
                except Exception as exc:  # noqa: BLE001 - a driver hiccup must not stop the agent
                    log.warning("GPU health check of %s failed: %s", name, exc)
                    continue
                if not found:
                    continue
                for device, reason in sorted(found.items()):
                    log.error("%s %s is unhealthy: %s", name, device, reason)
                spec = dataclasses.replace(self.nodes[name], gpus=health.apply(self.nodes[name].gpus))
                self.nodes[name] = spec
                reg = msgspec.structs.replace(spec.registration(self.name), ts=time.time())
                with contextlib.suppress(Exception):
                    await self.log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
            await asyncio.sleep(self.health_interval_s)

    async def _watch_memory(self) -> None:
        """Every ``memory_interval_s``: each node's jobs' working sets; over the line, a
        ``NodeMemoryPressure`` for inventory to evict by (``services/nodes/agent/memory_pressure.py``)."""
        while True:
            await asyncio.sleep(self.memory_interval_s)
            uses: dict[str, list[c.JobMemoryUse]] = {name: [] for name in self.watches}
            for job_id, run in sorted(self.running.items()):
                execution = run.execution
                job = self.core.jobs.get(job_id)
                alloc = self.core.mine(job.allocations) if job is not None else None
                if not isinstance(execution, MemoryMeasured) or alloc is None or alloc.node not in uses:
                    continue
                used = await asyncio.to_thread(execution.memory_used)
                if used is not None:
                    uses[alloc.node].append(c.JobMemoryUse(job_id=job_id, attempt=run.attempt, used_bytes=used))
            for name, found in uses.items():
                event = self.watches[name].observe(found, time.time())
                if event is None:
                    continue
                log.warning("%s is short of memory: its jobs use %s, more than the %s it gives them", name,
                            _size(event.used_bytes), _size(self.watches[name].line))
                with contextlib.suppress(Exception):  # the next measure reports again
                    await self.log.publish(event_subject("agent", event), encode(event), msg_id=event.id)

    async def _beat(self) -> None:
        while True:
            if not self.heartbeats_paused:
                for node in self.nodes:
                    with contextlib.suppress(Exception):
                        await self.nc.publish(heartbeat_subject(node), b"")
            await asyncio.sleep(self.heartbeat_interval_s)

    # ------------------------------------------------------------------ following the log

    def _fold(self, batch: list[Record]) -> list[Action]:
        """Fold records (the core); return the actions they call for."""
        return self.core.fold(readable(batch, self.core.seq))

    async def _on_batch(self, batch: list[Record]) -> None:
        for action, job_id in self._fold(batch):
            await self._act(action, job_id)
        if self.steps is not None:
            self.steps.reap()  # steps of attempts that ended, here or on the job's other nodes

    def _devices(self, node: str) -> dict[str, c.GpuDevice]:
        spec = self.nodes.get(node)
        return {gpu.id: gpu for gpu in spec.gpus} if spec is not None else {}

    async def _resume(self) -> None:
        for action, job_id in self.core.resume():
            job = self.core.jobs.jobs[job_id]
            alloc = self.core.mine(job.allocations)
            assert alloc is not None
            # A job the previous agent started runs on under its supervisor (or left its status):
            # watch it again; a stop asked meanwhile is carried out on it now.
            adopted = self.executor.adopt(job_id, job.attempt, alloc)
            if adopted is not None:
                log.info("%s attempt %d: adopted from a previous agent", job_id, job.attempt)
                reason = {"cancelled": "cancel", "preempted": "preempt"}.get(action)
                self._launch(job_id, _Running(job.attempt, adopted, stop_reason=reason,
                                              preemption=self.core.preemptions.get(job_id)))
                if job.spec is not None and job.spec.elastic and reason is None:
                    await self._act("resized", job_id)  # a resize while no agent watched (told only if so)
            elif action == "cancelled":
                request = self.core.stop_requests[job_id]
                await self._report(c.JobCancelled, job_id, job.attempt, reason=request.reason,
                                   causation_id=request.causation_id)
            elif action == "preempted":
                await self._report_preempted(job_id, job.attempt, self.core.preemptions[job_id], None)
            elif action == "start":
                await self._act("start", job_id)
            else:  # "lost"
                await self._report(
                    c.JobFailed, job_id, job.attempt, node=alloc.node,
                    reason="the agent restarted and the job's process was lost" if not self.executor.detached
                    else "the job's process was lost with its supervisor (the node's agent found no trace of it)",
                )

    def _launch(self, job_id: str, run: _Running) -> None:
        job = self.core.jobs.jobs[job_id]
        alloc = self.core.mine(job.allocations)
        assert alloc is not None and job.spec is not None
        self.running[job_id] = run
        run.task = asyncio.create_task(self._run(job_id, job.attempt, job.spec, alloc, run), name=f"job-{job_id}")

    async def _act(self, action: ActionKind, job_id: str) -> None:
        job = self.core.jobs.get(job_id)
        if job is None:
            return
        if action == "start" and job_id not in self.running and job.state is JobState.SCHEDULED:
            self._launch(job_id, _Running(job.attempt))
        elif action == "stop":
            run = self.running.get(job_id)
            request = self.core.stop_requests.get(job_id)
            if run is None:
                if request is not None and not self.core.ending_reported(job_id, job.attempt):
                    await self._report(c.JobCancelled, job_id, job.attempt, reason=request.reason,
                                       causation_id=request.causation_id)
                return
            if run.stop_reason == "silent":
                return
            before, run.stop_reason = run.stop_reason, "cancel"  # also over a preemption: the job ends, not requeued
            if run.execution is not None and (not run.stoppers or before == "preempt"):
                self._begin_stop(job_id, run)  # a cancel does not wait for the checkpoint under way
            # else: stopped as soon as it has started (_run), or a cancel's stop is under way
        elif action == "resized":
            run = self.running.get(job_id)
            execution = run.execution if run is not None else None
            if isinstance(execution, Resizable) and job.spec is not None:
                env = job_environment(job_id, job.attempt, job.spec, job.allocations[0], allocations=job.allocations)
                execution.resized(world_of(env))
        elif action == "preempt":
            run = self.running.get(job_id)
            request = self.core.preemptions.get(job_id)
            if request is None:
                return  # the attempt ended in the same batch
            if run is None:
                # Nothing runs: its ending is reported already (it ended by itself a moment ago, or
                # this agent restarted and reported it lost), or, after a restart, nothing had run.
                if not self.core.ending_reported(job_id, job.attempt):
                    await self._report_preempted(job_id, job.attempt, request, None)
                return
            if run.stop_reason is not None:
                return  # being cancelled, or the agent is stopping
            run.stop_reason, run.preemption = "preempt", request
            if run.execution is not None:
                self._begin_stop(job_id, run)
        elif action == "ended":
            run = self.running.get(job_id)
            evicted = job_id in self.core.evicted
            self.core.evicted.discard(job_id)
            if run is not None and run.stop_reason is None:
                run.stop_reason = "silent"
                if run.execution is not None:  # evicted for memory: killed at once (its memory is the point)
                    asyncio.create_task(run.execution.stop(0.0 if evicted else self.grace_period_s))

    # ------------------------------------------------------------------ running one job

    def _begin_stop(self, job_id: str, run: _Running) -> None:
        run.stoppers.append(asyncio.create_task(self._stop_job(job_id, run), name=f"stop-{job_id}"))

    async def _stop_job(self, job_id: str, run: _Running) -> None:
        """Stop a started job: checkpoint first if it is preempted and can, then SIGTERM, then SIGKILL."""
        execution = run.execution
        assert execution is not None
        job = self.core.jobs.get(job_id)
        request = run.preemption
        if run.stop_reason == "preempt" and request is not None:
            grace = request.grace_period_s
            signal_name = job.spec.checkpoint_signal if job is not None and job.spec is not None else None
            if signal_name:
                started = time.monotonic()
                ref = await execution.checkpoint(signal_name, grace)
                if ref is not None:
                    run.checkpoint_ref = ref
                    await self._report(c.JobCheckpointed, job_id, run.attempt, checkpoint_ref=ref)
                grace = max(grace - (time.monotonic() - started), MIN_STOP_GRACE_S)
        else:
            stop = self.core.stop_requests.get(job_id)
            grace = stop.grace_period_s if stop is not None else self.grace_period_s
        await execution.stop(grace)

    async def _run(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, run: _Running) -> None:
        try:
            adopted = run.execution is not None
            if self.steps is not None:
                await self.steps.open(job_id, attempt)  # srun's door, before the script can ask
            if not adopted:
                known = self.core.latest_checkpoint(job_id)  # a new attempt restarts from the job's latest checkpoint
                job = self.core.jobs.get(job_id)
                try:
                    run.execution = await self.executor.start(job_id, attempt, spec, alloc, known,
                                                              allocations=job.allocations if job is not None else ())
                except Exception as exc:  # noqa: BLE001 - any failure to start is the job's failure
                    await self._report(c.JobFailed, job_id, attempt, node=alloc.node, reason=f"could not start: {exc}")
                    return
            execution = run.execution
            assert execution is not None
            if run.stop_reason == "silent":
                await execution.stop(0)
                return
            job = self.core.jobs.get(job_id)
            if job is not None and job.state is JobState.SCHEDULED and job.attempt == attempt:
                files = execution.files
                # the GPUs its backend really gave it, where they are not the placement's (the Slurm backend's)
                devices = getattr(execution, "devices", None) or {}
                await self._report(c.JobStarted, job_id, attempt, node=alloc.node, pid=execution.pid,
                                   stdout=files.stdout, stderr=files.stderr, cwd=files.cwd, devices=devices)
            if run.stop_reason in ("cancel", "preempt"):
                self._begin_stop(job_id, run)  # asked to stop while it was starting (or while no agent watched)
            started = time.monotonic()
            # The time limit counts from the process's start, also across agent restarts. It is the
            # one placement gave the attempt (shorter than the spec's when backfill used --time-min).
            elapsed = time.time() - execution.started_wall if execution.started_wall else 0.0
            limit = self._limit(job_id, spec)
            timed_out = False
            warning = None
            if spec.limit_signal is not None:  # --signal: that signal, that long before the limit
                warning = asyncio.create_task(signals.before_limit(execution, spec.limit_signal, limit, elapsed),
                                              name=f"signal-{job_id}")
            try:
                outcome = await asyncio.wait_for(asyncio.shield(execution.wait()), max(0.0, limit - elapsed))
            except asyncio.TimeoutError:
                timed_out = True
                outcome = await execution.stop(self.grace_period_s)
            finally:
                if warning is not None:
                    warning.cancel()
            runtime = outcome.runtime_s if outcome.runtime_s is not None else time.monotonic() - started
            await self._finish(job_id, attempt, alloc, run, outcome, runtime, timed_out, spec)
            self.executor.released(job_id, attempt, alloc)
        finally:
            self.running.pop(job_id, None)
            if self.steps is not None:
                with contextlib.suppress(Exception):
                    await self.steps.close(job_id, attempt)

    def _limit(self, job_id: str, spec: c.JobSpec) -> float:
        """The current attempt's time limit (``Job.limit_s``: placement's, else the spec's)."""
        job = self.core.jobs.get(job_id)
        return job.limit_s if job is not None and job.spec is not None else spec.time_limit_s

    async def _finish(
        self, job_id: str, attempt: int, alloc: c.NodeAllocation, run: _Running, outcome: Outcome,
        runtime: float, timed_out: bool, spec: c.JobSpec,
    ) -> None:
        for stopper in run.stoppers:
            # The process is gone; let the stop finish its reports (JobCheckpointed comes first).
            with contextlib.suppress(Exception):
                await stopper
        if run.stop_reason == "silent":
            return
        failed = {"node": alloc.node, "exit_code": outcome.exit_code, "stderr_tail": outcome.stderr_tail,
                  "runtime_s": round(runtime, 3)}
        if run.stop_reason == "cancel":
            request = self.core.stop_requests.get(job_id)
            await self._report(c.JobCancelled, job_id, attempt, reason=request.reason if request else "cancelled",
                               causation_id=request.causation_id if request else None)
        elif run.stop_reason == "preempt" and run.preemption is not None:
            await self._report_preempted(job_id, attempt, run.preemption, run)
        elif outcome.lost:
            await self._report(c.JobFailed, job_id, attempt, reason="the job's supervisor died, so how the job "
                               "ended is unknown", **failed)
        elif outcome.error:
            await self._report(c.JobFailed, job_id, attempt, node=alloc.node, reason=f"could not start: {outcome.error}")
        elif outcome.out_of_memory:
            limit = memory_limit(spec, alloc.memory_bytes or spec.memory_bytes * spec.tasks_per_node)
            await self._report(
                c.JobFailed, job_id, attempt, out_of_memory=True, **failed,
                reason=f"out of memory: the job went over its memory limit of {_size(limit)} and the kernel killed "
                       f"it; ask for more with --mem{' or --mem-limit' if spec.memory_limit_bytes else ''}",
            )
        elif timed_out:
            await self._report(c.JobFailed, job_id, attempt,
                               reason=f"time limit of {self._limit(job_id, spec):g} s exceeded", **failed)
        elif outcome.exit_code == 0:
            await self._report(c.JobSucceeded, job_id, attempt, node=alloc.node, exit_code=0, runtime_s=round(runtime, 3))
        else:
            why = f"exit code {outcome.exit_code}"
            if outcome.exit_code is not None and outcome.exit_code < 0:
                why = f"killed by signal {_signal_name(-outcome.exit_code)}"
            await self._report(c.JobFailed, job_id, attempt, reason=why, **failed)

    async def _report_preempted(
        self, job_id: str, attempt: int, request: c.PreemptionRequested, run: _Running | None
    ) -> None:
        """``JobPreempted`` with the checkpoint the attempt left: the one it wrote last (also on
        SIGTERM, after the checkpoint signal), else one reported earlier (before an agent restart)."""
        ref = None
        if run is not None and run.execution is not None:
            ref = run.execution.checkpoint_ref() or run.checkpoint_ref
        if ref is None:
            ref = self.core.checkpoint_of(job_id, attempt)
        if run is not None and ref is not None and run.checkpoint_ref is None:
            await self._report(c.JobCheckpointed, job_id, attempt, checkpoint_ref=ref)
        await self._report(c.JobPreempted, job_id, attempt, for_job=request.for_job, checkpoint_ref=ref,
                           reason="" if request.for_job else request.reason)  # an eviction's why: the job's reason

    async def _report(self, cls: type[Event], job_id: str, attempt: int, **fields: Any) -> None:
        self.core.reporting(cls, job_id, attempt)
        job = self.core.jobs.get(job_id)
        node = fields.get("node") or (job.allocations[0].node if job is not None and job.allocations else "")
        decide = Decider("agent", ts=time.time(), correlation_id=job_id, source=f"agent/{node}" if node else "agent",
                         job_id=job_id, attempt=attempt)
        event = decide(cls, job_id, attempt, **fields)
        # A report is a fact only this agent knows: retry until the log takes it (the
        # deterministic id makes every retry after a lost ack a harmless duplicate).
        delay = 0.2
        while True:
            try:
                await self.log.publish(event_subject("agent", event), encode(event), msg_id=event.id)
                return
            except Exception as exc:  # noqa: BLE001 - the log is unavailable: wait and retry
                log.warning("could not report %s for %s (%s); retrying in %.1f s", event.event_type, job_id, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


def _size(n: int) -> str:
    """Bytes as the largest binary unit that keeps a whole number or one decimal: 64 MiB, 1.5 GiB."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} B"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
