"""Job steps: ``srun`` inside a job, carried out by the agents of the job's nodes.

A batch script runs on its job's first node (Slurm's batch host). Its ``srun CMD`` asks that
node's agent for a step: ``CMD`` run once per task across the job's nodes, with Slurm's
environment for each task (``services/domain/steps.py`` lays the tasks out and names the
variables). The job's processes hold no NATS credentials; they talk to their own agent only:

1. **The door.** Before an attempt starts, the agent opens a Unix socket for it (``socket_path``;
   the job finds it in ``$HORIZON_STEP_SOCKET``) and puts a directory holding Horizon's ``srun``
   and ``scontrol`` first on the job's ``PATH`` (only inside jobs: ``services/runtime/command_shims.py``).
   ``srun`` (``services/front/slurm/srun.py``) connects and sends one JSON line: its options, command,
   environment and working directory. The socket is the attempt's: whoever connects speaks for
   that job, as its own processes do.
2. **The plan.** The agent lays the step out in the job's allocation (a step larger than the
   allocation is refused, naming what does not fit, and srun exits 1), numbers it (0, 1, ... per
   attempt, on from the log's ``JobStepStarted`` after an agent restart), and reports
   ``JobStepStarted``.
3. **The tasks.** Each node's share (``services/nodes/backends/process/node_share.py``) runs in the job's cgroup on
   that node: on a node this agent hosts, started here; on another, by that node's agent, asked
   on ``horizon.step.<node>`` (request/reply between agents; it checks in its own view of the log
   that the attempt holds that node), which sends the output back on
   ``horizon.step.io.<token>``. A node that is not the batch node gets a cgroup of the job for
   its steps, with the job's limits there, removed when its last share ends.
4. **The output** of every task goes back over the socket to srun as it comes (srun writes it to
   its own standard output and error: the job's output file), then each task's end.
5. **The end.** When every task has ended, srun gets the step's end and exits with the highest
   exit code (128 + N for a task killed by signal N); the agent reports ``JobStepEnded``.

Stopping a step: a signal srun gets (Ctrl-C, SIGTERM from a cancel, SIGUSR1 from the batch
script) is forwarded to every task; a second SIGINT or SIGTERM, srun's death (its socket
closes), ``--kill-on-bad-exit`` or ``--time`` stop the step: SIGTERM to its tasks, SIGKILL after
the grace period. When the attempt ends, its steps are stopped on every node (the other nodes'
agents see the end in the log). Steps do not outlive their agent the way batch scripts do: an
agent that restarts loses the steps it was running (srun reports the lost contact), and a
step's tasks on its nodes are stopped when the coordinating agent stops answering.

Every report has a deterministic id, ``agent/JobStepStarted/<job>/<attempt>/<step>``, and
reports are published in order, retried until the log takes them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import event_subject
from services.domain.envelope import decision_id
from services.domain.hetjob import HetGroupError, step_slots
from services.domain.hostlist import compress
from services.domain.jobs import HOLDS_RESOURCES
from services.domain.steps import (
    StepError,
    StepLayout,
    StepRequest,
    plan_step,
    step_environment,
    step_exit,
    task_environment,
)
from services.nodes.agent.core import AgentCore
from services.nodes.agent.step_door import StepDoors, answer, not_for_others, socket_dir
from services.nodes.agent.step_runs import HeldShare, StepRun, exported_env
from services.nodes.backends.process.cgroups import JobCgroup
from services.nodes.backends.process.identity import identity_for, may_enter
from services.nodes.backends.process.node_share import NodeShare, RemoteSink, TaskSink, TaskSpec
from services.nodes.backends.protocol import ProcessHost
from services.nodes.job_environment import visible_devices
from services.runtime.cancel import cancel_and_wait
from services.runtime.command_shims import write_shims
from services.runtime.log import EventLog

__all__ = ["StepService", "step_subject"]

log = logging.getLogger("horizon.agent.steps")

LAUNCH_TIMEOUT_S = 10.0  # asking another node's agent to start its share
CATCH_UP_S = 5.0  # how long a node's agent waits to see in the log the attempt a launch names
LOST_AFTER_S = 10.0  # after a stop's grace period: a share that never reports its tasks' ends is given up


def step_subject(node: str) -> str:
    return f"horizon.step.{node}"



class StepService:
    """The agent's side of job steps (see the module doc).

    ``core``: the agent's fold (jobs, allocations, step numbers); ``hosted``: the nodes this agent
    hosts (a callable: the agent replaces its node specs); ``devices``: a hosted node's GPUs by id;
    ``nc``: the agent's NATS connection (None: only nodes hosted here can take part in a step).
    """

    def __init__(self, log_: EventLog, core: AgentCore, executor: ProcessHost,
                 hosted: Callable[[], Collection[str]], devices: Callable[[str], Mapping[str, c.GpuDevice]], *,
                 nc: Any = None, grace_period_s: float = 10.0) -> None:
        self.log = log_
        self.core = core
        self.executor = executor
        self.hosted = hosted
        self.devices = devices
        self.nc = nc
        self.grace_period_s = grace_period_s
        self.socket_dir = socket_dir(executor.spool_dir)
        self.shims_dir = executor.spool_dir / ".bin"  # run by jobs, as their users: not in the data dir
        self.doors = StepDoors(self.socket_dir, core, executor, self._run_step)  # srun's sockets, per attempt
        self.runs: dict[tuple[str, int, int], StepRun] = {}
        self.shares: dict[tuple[str, int, int, str], HeldShare] = {}
        self.cgroups: dict[tuple[str, int, str], tuple[JobCgroup, int]] = {}  # owned cgroups and their users
        self._issued: dict[tuple[str, int], int] = {}  # the next step number per attempt, once one was issued
        self._reports: asyncio.Queue[Event] = asyncio.Queue()
        self._reporter: asyncio.Task[None] | None = None
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.socket_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
        if self.socket_dir.stat().st_uid != os.geteuid():
            raise RuntimeError(f"{self.socket_dir} belongs to another user: the agent will not serve job steps there")
        # jobs reach their own socket by its name (each socket is its job user's alone), and list none
        os.chmod(self.socket_dir, 0o711)
        # Horizon's srun and scontrol, first on every job's PATH: unguarded, since inside a Horizon
        # job they must be Horizon's whatever else the machine has (services/runtime/command_shims.py).
        await asyncio.to_thread(write_shims, self.shims_dir, ("srun", "scontrol"), guard=False)
        if os.geteuid() == 0:
            hidden = not_for_others(Path(sys.executable).resolve(), Path(__file__).resolve().parent)
            if hidden is not None:
                log.warning("jobs run as their users, who cannot run Horizon's srun and scontrol: %s is not "
                            "readable by others; install Horizon where its users can run it (docs/tenants.md)", hidden)
        self.executor.step_socket = self.doors.socket_path
        self.executor.shims_dir = self.shims_dir
        self.executor.step_groups = self.task_groups
        self._reporter = asyncio.create_task(self._report_loop(), name="step-reports")
        if self.nc is not None:
            for node in sorted(self.hosted()):
                self._subs.append(await self.nc.subscribe(step_subject(node), cb=self._on_request))

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()
        # The steps die with the agent (unlike batch scripts, which their supervisors keep): the tasks
        # here at once, the other nodes' told to stop, srun sees its connection close.
        for run in list(self.runs.values()):
            run.stopping = run.stopping or "the node's agent stopped"
            for share in run.local:
                share.kill_now()
            for node in run.remote:
                await self._ask(node, {"op": "stop", "job_id": run.job_id, "attempt": run.attempt, "step": run.step,
                                       "grace_s": self.grace_period_s})
        for held in list(self.shares.values()):
            held.share.kill_now()
        for job_id, attempt in list(self.doors.servers):
            await self._close_door(job_id, attempt)
        for task in list(self._tasks):
            task.cancel()
        if self._reporter is not None:
            # Reports already queued still go out (a step that ended just before the stop).
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drain_reports(), 5.0)
            await cancel_and_wait(self._reporter)

    async def _drain_reports(self) -> None:
        while not self._reports.empty():
            await asyncio.sleep(0.05)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def task_groups(self, job_id: str, attempt: int) -> set[int]:
        """The process groups of the tasks this agent runs for the attempt's steps (each task leads its own)."""
        return {proc.pid for (j, a, _s, _n), held in list(self.shares.items()) if (j, a) == (job_id, attempt)
                for proc in held.share.procs.values() if proc.returncode is None}

    # ------------------------------------------------------------------ an attempt's door (services/nodes/agent/step_door.py)

    async def open(self, job_id: str, attempt: int) -> None:
        """Open the attempt's socket (before the attempt starts, or again for an adopted one)."""
        await self.doors.open(job_id, attempt)

    async def close(self, job_id: str, attempt: int) -> None:
        """The attempt is over: stop its steps everywhere and close its socket."""
        for run in [r for r in self.runs.values() if (r.job_id, r.attempt) == (job_id, attempt)]:
            await self._stop_run(run, "the job ended")
        await self._close_door(job_id, attempt)

    async def _close_door(self, job_id: str, attempt: int) -> None:
        await self.doors.close(job_id, attempt)
        self._issued.pop((job_id, attempt), None)

    # ------------------------------------------------------------------ coordinating a step (batch node)

    def _next_step(self, job_id: str, attempt: int) -> int:
        number = max(self.core.next_step(job_id, attempt), self._issued.get((job_id, attempt), 0))
        self._issued[(job_id, attempt)] = number + 1
        return number

    async def _run_step(self, job_id: str, attempt: int, request: dict[str, Any], reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        job = self.core.jobs.get(job_id)
        if job is None or job.spec is None or job.attempt != attempt or job.state not in HOLDS_RESOURCES:
            await answer(writer, {"error": "the job's attempt is over: no new step can start"})
            return
        argv = [str(a) for a in request.get("argv") or []]
        if not argv:
            await answer(writer, {"error": "no command to run"})
            return
        options = request.get("options") or {}
        try:
            # a heterogeneous job's step runs on the components srun's --het-group names (0 by default)
            groups = options.get("het_group")
            slots, held = step_slots(job.spec, job.allocations, [int(g) for g in groups] if groups else None)
            layout = plan_step(StepRequest.from_json(options), slots)
        except (StepError, HetGroupError, TypeError, ValueError) as exc:
            await answer(writer, {"error": str(exc)})
            return
        step = self._next_step(job_id, attempt)
        run = StepRun(job_id, attempt, step, os.path.basename(argv[0]) or argv[0], layout, writer,
                   kill_on_bad_exit=bool(options.get("kill_on_bad_exit")))
        run.on_bad_exit = lambda rank, code: self._spawn(
            self._stop_run(run, f"task {rank} failed (exit code {code}) and --kill-on-bad-exit stops the step"),
            f"kill-on-bad-exit-{step}")
        self.runs[run.key] = run
        env = exported_env(request.get("env") or {}, options.get("export"))
        env.update(step_environment(layout, step, compress([a.node for a in held])))
        cwd = str(request.get("cwd") or job.spec.cwd or "/")
        try:
            await run.send({"started": {"step": step, "nodes": list(layout.nodes), "ranks": [list(r) for r in layout.ranks],
                                        "tasks": layout.ntasks, "warnings": list(layout.warnings)}})
            self._reports.put_nowait(self._event(c.JobStepStarted, run, tasks_per_node=layout.counts,
                                                 cpus_per_task=layout.cpus_per_task or 0,
                                                 gpus_per_task=layout.gpus_per_task or 0, gpus=layout.step_gpus()))
            await self._launch_all(run, argv, env, cwd)
            limit = options.get("time_limit_s")
            watch = [asyncio.create_task(run.done.wait()), asyncio.create_task(self._listen(run, reader))]
            timer = None
            if isinstance(limit, (int, float)) and limit > 0:
                timer = asyncio.get_running_loop().call_later(float(limit), self._time_out, run)
            try:
                await asyncio.wait(watch, return_when=asyncio.FIRST_COMPLETED)
                if not run.done.is_set():
                    await self._stop_run(run, run.stopping or "srun was killed (its connection closed)")
            finally:
                if timer is not None:
                    timer.cancel()
                for task in watch:
                    task.cancel()
            ended = step_exit([run.codes.get(r) for r in range(layout.ntasks)])
            await run.send({"end": {"step": step, "exit_code": ended.exit_code, "signal": ended.signal,
                                    "srun_code": ended.srun_code, "reason": run.stopping}})
            self._reports.put_nowait(self._event(
                c.JobStepEnded, run, exit_code=ended.exit_code, signal=ended.signal,
                task_exit_codes=[run.codes.get(r) for r in range(layout.ntasks)], started_ts=round(run.started, 3),
                runtime_s=round(time.time() - run.started, 3), cancelled=bool(run.stopping) and not run.timed_out,
                timed_out=run.timed_out, reason=run.stopping))
        finally:
            self.runs.pop(run.key, None)
            if run.io is not None:
                with contextlib.suppress(Exception):
                    await run.io.unsubscribe()

    def _time_out(self, run: StepRun) -> None:
        run.timed_out = True
        self._spawn(self._stop_run(run, "its time limit (srun --time) ran out"), f"timeout-{run.step}")

    async def _listen(self, run: StepRun, reader: asyncio.StreamReader) -> None:
        """srun's messages while the step runs: signals to forward; returns when srun is gone."""
        while True:
            line = await reader.readline()
            if not line:
                run.srun_gone = True
                return
            with contextlib.suppress(ValueError, TypeError):
                message = json.loads(line)
                if message.get("stop"):
                    self._spawn(self._stop_run(run, str(message.get("reason") or "srun was interrupted")),
                                f"stop-{run.step}")
                elif isinstance(message.get("signal"), int):
                    await self._signal_run(run, int(message["signal"]))

    async def _launch_all(self, run: StepRun, argv: list[str], env: dict[str, str], cwd: str) -> None:
        """Start every node's share: here for the nodes this agent hosts, through the others' agents."""
        hosted = set(self.hosted())
        remote = [i for i, node in enumerate(run.layout.nodes) if node not in hosted]
        token = uuid.uuid4().hex
        if remote and self.nc is not None:
            run.io = await self.nc.subscribe(f"horizon.step.io.{token}", cb=self._io_handler(run))
        for i, node in enumerate(run.layout.nodes):
            request = {"op": "launch", "job_id": run.job_id, "attempt": run.attempt, "step": run.step, "node": node,
                       "node_index": i, "layout": run.layout.to_json(), "argv": argv, "env": env, "cwd": cwd,
                       "io": f"horizon.step.io.{token}"}
            if node in hosted:
                error = await self.launch_share(request, run)
            elif self.nc is None:
                error = f"node {node} is not this agent's, and the agent has no NATS connection to ask its agent"
            else:
                try:
                    msg = await self.nc.request(step_subject(node), json.dumps(request).encode(),
                                                timeout=LAUNCH_TIMEOUT_S)
                    error = json.loads(msg.data).get("error")
                except Exception as exc:  # noqa: BLE001 - no responder, a timeout
                    error = f"the agent of node {node} did not answer ({exc.__class__.__name__})"
                if error is None:
                    run.remote.append(node)
            if error is not None:
                for rank in run.layout.ranks[i]:
                    await run.exited(rank, None, f"launch failed on {node}: {error}")
                await self._stop_run(run, f"launch failed on {node}: {error}")
                return

    def _io_handler(self, run: StepRun) -> Any:
        async def on_io(msg: Any) -> None:
            gone = run.key not in self.runs
            if not gone:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    body = json.loads(msg.data)
                    for rank, fd, data in body.get("out") or ():
                        await run.output(int(rank), int(fd), base64.b64decode(data))
                    for rank, code, error in body.get("exited") or ():
                        await run.exited(int(rank), code, error or "")
            with contextlib.suppress(Exception):
                await msg.respond(json.dumps({"stop": True} if gone else {"ok": True}).encode())

        return on_io

    async def _signal_run(self, run: StepRun, sig: int) -> None:
        for share in run.local:
            share.signal(sig)
        for node in run.remote:
            await self._ask(node, {"op": "signal", "job_id": run.job_id, "attempt": run.attempt, "step": run.step,
                                   "signal": sig})

    async def _stop_run(self, run: StepRun, why: str) -> None:
        """Stop the step on every node (SIGTERM, SIGKILL after the grace period); give up on a node whose
        tasks never report their end."""
        if run.done.is_set():
            return
        first = not run.stopping
        run.stopping = run.stopping or why
        if first:
            for share in run.local:
                share.stop(self.grace_period_s)
            for node in run.remote:
                await self._ask(node, {"op": "stop", "job_id": run.job_id, "attempt": run.attempt, "step": run.step,
                                       "grace_s": self.grace_period_s})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.done.wait(), self.grace_period_s + LOST_AFTER_S)
        for rank in range(run.layout.ntasks):
            if rank not in run.codes:
                await run.exited(rank, None, "its node's agent did not report its end")

    async def _ask(self, node: str, request: dict[str, Any]) -> None:
        if node in set(self.hosted()):
            await self._on_control(request)
            return
        if self.nc is None:
            return
        with contextlib.suppress(Exception):
            await self.nc.request(step_subject(node), json.dumps(request).encode(), timeout=LAUNCH_TIMEOUT_S)

    # ------------------------------------------------------------------ a node's share (any node)

    async def launch_share(self, request: dict[str, Any], sink: TaskSink | None = None) -> str | None:
        """Start this node's share of a step; its error, or None. ``sink``: the coordinator when it is in
        this agent, else the output goes back on ``request["io"]``."""
        job_id, attempt, step, node = str(request["job_id"]), int(request["attempt"]), int(request["step"]), str(
            request["node"])
        if node not in set(self.hosted()):
            return f"node {node} is not this agent's"
        job = await self._holding(job_id, attempt, node)
        if job is None:
            return f"job {job_id} attempt {attempt} holds nothing on {node}"
        assert job.spec is not None
        alloc = next(a for a in job.allocations if a.node == node)
        layout = StepLayout.from_json(request["layout"])
        index = int(request["node_index"])
        devices = self.devices(node)
        base = {k: str(v) for k, v in dict(request.get("env") or {}).items()}
        tasks = [TaskSpec(rank, {**base, **task_environment(layout, index, local, alloc.cpus_milli,
                                                             visible_devices(layout.gpus[index][local], devices))})
                 for local, rank in enumerate(layout.ranks[index])]
        try:
            cgroup, owned = await self._cgroup(job_id, attempt, job.spec, alloc, batch=job.allocations[0].node == node)
        except OSError as exc:
            return f"cannot set up the job's cgroup on {node}: {exc.strerror or exc}"
        if sink is None:
            if self.nc is None:
                return "the agent has no NATS connection to send the output back"
            sink = RemoteSink(self.nc, str(request["io"]))
        run_as = identity_for(job.spec.uid, job.spec.gid, job.spec.groups, job.spec.user)
        cwd = str(request.get("cwd") or "/")
        try:
            await asyncio.to_thread(may_enter, run_as, cwd)
        except OSError as exc:
            return f"cannot enter {cwd}{f' as {run_as.user}' if run_as is not None else ''}: {exc.strerror}"
        share = NodeShare([str(a) for a in request["argv"]], cwd, tasks, sink, cgroup, run_as)
        held = HeldShare(job_id, attempt, step, node, share, sink, owned)
        self.shares[(job_id, attempt, step, node)] = held
        if isinstance(sink, StepRun):
            sink.local.append(share)
        await share.start()
        self._spawn(self._watch_share(held), f"share-{job_id}-{step}-{node}")
        return None

    async def _holding(self, job_id: str, attempt: int, node: str) -> Any:
        """The job, once this agent's view of the log shows the attempt holding ``node`` (it may lag the
        batch node's agent by a moment); None if it does not within ``CATCH_UP_S``."""
        deadline = time.monotonic() + CATCH_UP_S
        while True:
            job = self.core.jobs.get(job_id)
            if (job is not None and job.spec is not None and job.attempt == attempt
                    and job.state in HOLDS_RESOURCES and any(a.node == node for a in job.allocations)):
                return job
            if time.monotonic() > deadline or (job is not None and job.attempt > attempt):
                return None
            await asyncio.sleep(0.05)

    async def _cgroup(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation,
                      batch: bool) -> tuple[JobCgroup | None, JobCgroup | None]:
        """The job's cgroup on the node (the batch script's, or one made here for the steps) and the one
        made here, if any."""
        hierarchy = self.executor.hierarchy
        if not hierarchy.usable:
            return None, None
        cgroup = hierarchy.cgroup(alloc.node, job_id, attempt)
        key = (job_id, attempt, alloc.node)
        if key in self.cgroups:
            held, users = self.cgroups[key]
            self.cgroups[key] = (held, users + 1)
            return held, held
        if batch or all(path.is_dir() for path in cgroup.paths().values()):
            return cgroup, None  # the batch script's supervisor made it, and removes it
        _cpus, limits = self.executor.limits(job_id, attempt, spec, alloc)
        try:
            await asyncio.to_thread(cgroup.create, limits)
        except OSError:
            self.executor.released(job_id, attempt, alloc)
            raise
        self.cgroups[key] = (cgroup, 1)
        return cgroup, cgroup

    async def _watch_share(self, held: HeldShare) -> None:
        sink = held.sink
        lost = asyncio.create_task(sink.lost.wait()) if isinstance(sink, RemoteSink) else None
        done = asyncio.create_task(held.share.done.wait())
        await asyncio.wait([t for t in (lost, done) if t is not None], return_when=asyncio.FIRST_COMPLETED)
        if not held.share.done.is_set():
            held.share.stop(self.grace_period_s)  # the coordinator is gone
            await held.share.done.wait()
        for task in (lost, done):
            if task is not None:
                task.cancel()
        if isinstance(sink, RemoteSink):
            await sink.close()
        self.shares.pop((held.job_id, held.attempt, held.step, held.node), None)
        if held.owned is not None:
            await self._release_cgroup(held.job_id, held.attempt, held.node)

    async def _release_cgroup(self, job_id: str, attempt: int, node: str) -> None:
        key = (job_id, attempt, node)
        known = self.cgroups.get(key)
        if known is None:
            return
        cgroup, users = known
        if users > 1:
            self.cgroups[key] = (cgroup, users - 1)
            return
        del self.cgroups[key]
        await asyncio.to_thread(cgroup.remove)  # what the steps' tasks left there dies with it
        job = self.core.jobs.get(job_id)
        alloc = next((a for a in job.allocations if a.node == node), None) if job is not None else None
        self.executor.released(job_id, attempt, alloc or c.NodeAllocation(node=node))

    async def _on_request(self, msg: Any) -> None:
        """``horizon.step.<node>``: another agent's launch, signal or stop."""
        try:
            request = json.loads(msg.data)
            if not isinstance(request, dict):
                raise ValueError("not a JSON object")
            if request.get("op") == "launch":
                error = await self.launch_share(request)
                answer: dict[str, Any] = {"ok": True} if error is None else {"error": error}
            else:
                answer = await self._on_control(request)
        except (ValueError, TypeError, KeyError) as exc:
            answer = {"error": f"bad request: {exc}"}
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps(answer).encode())

    async def _on_control(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        key = (str(request["job_id"]), int(request["attempt"]), int(request["step"]))
        shares = [h for (j, a, s, _n), h in self.shares.items() if (j, a, s) == key and _n in set(self.hosted())]
        if op == "signal":
            for held in shares:
                held.share.signal(int(request["signal"]))
        elif op == "stop":
            for held in shares:
                held.share.stop(float(request.get("grace_s") or self.grace_period_s))
        else:
            return {"error": f"unknown op {op!r}; ops: launch, signal, stop"}
        return {"ok": True}

    # ------------------------------------------------------------------ the log moved on

    def reap(self) -> None:
        """Stop the steps of attempts that no longer hold resources (after each batch of the log)."""
        for held in list(self.shares.values()):
            if not self._holds(held.job_id, held.attempt, held.node):
                held.share.stop(self._released_grace(held.job_id))
        for run in list(self.runs.values()):
            if not self._holds(run.job_id, run.attempt) and not run.stopping:
                self._spawn(self._stop_run(run, "the job ended"), f"stop-{run.step}")

    def _holds(self, job_id: str, attempt: int, node: str | None = None) -> bool:
        """Whether the attempt still holds resources (on ``node``, when given: an elastic job that was
        shrunk gives nodes back, and its tasks there are stopped)."""
        job = self.core.jobs.get(job_id)
        return (job is not None and job.attempt == attempt and job.state in HOLDS_RESOURCES
                and (node is None or any(a.node == node for a in job.allocations)))

    def _released_grace(self, job_id: str) -> float:
        """The grace of a share's stop: a shrink's own (``JobResized.grace_period_s``), else the agent's."""
        grace = self.core.resize_grace.get(job_id)
        return grace if grace else self.grace_period_s

    # ------------------------------------------------------------------ reports

    def _event(self, cls: type[Event], run: StepRun, **fields: Any) -> Event:
        job = self.core.jobs.get(run.job_id)
        node = job.allocations[0].node if job is not None and job.allocations else ""
        return cls(id=decision_id("agent", cls, run.job_id, run.attempt, run.step), ts=time.time(),
                   correlation_id=run.job_id, source=f"agent/{node}" if node else "agent", job_id=run.job_id,
                   attempt=run.attempt, step=run.step, name=run.name, nodes=list(run.layout.nodes),
                   tasks=run.layout.ntasks, **fields)

    async def _report_loop(self) -> None:
        """Publish the step reports in order; each is retried until the log takes it (its id makes a
        retry after a lost acknowledgement a duplicate the log drops)."""
        while True:
            event = await self._reports.get()
            delay = 0.2
            while True:
                try:
                    await self.log.publish(event_subject("agent", event), encode(event), msg_id=event.id)
                    break
                except Exception as exc:  # noqa: BLE001 - the log is unavailable: wait and retry
                    log.warning("could not report %s (%s); retrying in %.1f s", event.id, exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
