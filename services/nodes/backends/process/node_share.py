"""One node's share of a job step: its tasks as processes, their output, their ends.

``NodeShare`` starts the step's command once per task of one node (``services/domain/steps.py``
says which ranks), each in a process group of its own and, where the machine has cgroups, in
the job's cgroup on that node, so the job's memory and CPU limits hold for its steps as for its
batch script and a job's end kills what its steps left. Each task's standard output and error
are read as they come and handed to a ``TaskSink`` with the task's rank; its end follows, once
its output is drained: an exit code, or ``-N`` for a task killed by signal N.

The sink is the step's coordinator on the batch node (``services/nodes/agent/steps.py``): directly
when this agent hosts the node, else through ``RemoteSink``, which batches the output into NATS
requests to the batch node's agent and waits for each answer, so a task that writes faster than
srun reads is slowed down instead of filling memory, and a share whose coordinator is gone
(no answer, also to the request a silent share sends every ``IDLE_S``) stops its tasks.

A task that cannot start (no such command) ends at once with 127 (126: found but not
runnable), as a shell would, and its reason on its standard error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from services.nodes.backends.process.cgroups import JobCgroup
from services.nodes.backends.process.identity import Identity

__all__ = ["TaskSink", "TaskSpec", "NodeShare", "RemoteSink", "OUTPUT_CHUNK"]

log = logging.getLogger("horizon.agent.steps")

OUTPUT_CHUNK = 64 * 1024  # bytes read from a task's pipe at once
DRAIN_AFTER_EXIT_S = 2.0  # how long a task's output is still read after it exited (its children may hold the pipe)
_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class TaskSink(Protocol):
    """Where a share's tasks' output and ends go."""

    async def output(self, rank: int, fd: int, data: bytes) -> None: ...

    async def exited(self, rank: int, code: int | None, error: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class TaskSpec:
    rank: int
    env: Mapping[str, str]


class NodeShare:
    """The tasks of one step on one node (see the module doc)."""

    def __init__(self, argv: Sequence[str], cwd: str, tasks: Sequence[TaskSpec], sink: TaskSink,
                 cgroup: JobCgroup | None = None, run_as: Identity | None = None) -> None:
        self.run_as = run_as  # the job's user: each task drops to it after joining the cgroup
        self.argv = list(argv)
        self.cwd = cwd
        self.tasks = list(tasks)
        self.sink = sink
        self.cgroup = cgroup
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self._runs: list[asyncio.Task[None]] = []
        self.done = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start every task (one that cannot start ends at once); ``done`` is set when all have ended."""
        cgroup = self.cgroup

        def join() -> None:  # in the child, before exec, as root: default signals, the job's cgroup
            for sig in _DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            if cgroup is not None:
                cgroup.join(0)

        # then, for a job of another user, the drop and its folder entered as that user
        enter = join if self.run_as is None else self.run_as.enter(self.cwd or None, before=join)
        for task in self.tasks:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.argv, cwd=(self.cwd or None) if self.run_as is None else None, env=dict(task.env),
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                    preexec_fn=enter, limit=OUTPUT_CHUNK)
            except OSError as exc:
                code = 127 if isinstance(exc, FileNotFoundError) and exc.filename != self.cwd else 126
                what = exc.filename if exc.filename is not None else self.argv[0]
                self._runs.append(asyncio.create_task(self._failed(task.rank, code, f"{what}: {exc.strerror}")))
                continue
            except subprocess.SubprocessError as exc:  # joining the job's cgroup failed (it is gone)
                self._runs.append(asyncio.create_task(self._failed(task.rank, 126, f"{self.argv[0]}: {exc}")))
                continue
            self.procs[task.rank] = proc
            self._runs.append(asyncio.create_task(self._watch(task.rank, proc), name=f"task-{task.rank}"))
        asyncio.create_task(self._all_done())

    async def _all_done(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._runs, return_exceptions=True)
        self.done.set()

    async def _failed(self, rank: int, code: int, why: str) -> None:
        await self.sink.exited(rank, code, f"cannot run {why}")

    async def _pump(self, rank: int, fd: int, stream: asyncio.StreamReader) -> None:
        while True:
            data = await stream.read(OUTPUT_CHUNK)
            if not data:
                return
            await self.sink.output(rank, fd, data)

    async def _watch(self, rank: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [asyncio.create_task(self._pump(rank, 1, proc.stdout)), asyncio.create_task(self._pump(rank, 2, proc.stderr))]
        code = await proc.wait()
        # The task is gone; what it wrote is still in the pipes (and a child it left may hold them open).
        _done, pending = await asyncio.wait(pumps, timeout=DRAIN_AFTER_EXIT_S)
        for pump in pending:
            pump.cancel()
        for pump in pumps:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
        await self.sink.exited(rank, code)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every running task's process group."""
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)

    def stop(self, grace_s: float) -> None:
        """SIGTERM to every task, SIGKILL to those still running ``grace_s`` later (once; in the background)."""
        if self._stopping is None and not self.done.is_set():
            self._stopping = asyncio.create_task(self._stop(grace_s))

    async def _stop(self, grace_s: float) -> None:
        self.signal(signal.SIGTERM)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.done.wait(), grace_s)
        if not self.done.is_set():
            self.signal(signal.SIGKILL)

    def kill_now(self) -> None:
        self.signal(signal.SIGKILL)


class RemoteSink:
    """A ``TaskSink`` that sends a share's output and ends to the batch node's agent over NATS
    (``horizon.step.io.<token>``, request/reply): chunks gathered for a moment into one request,
    each request answered before the next is sent (``{"ok": true}``; ``{"stop": true}`` or no answer:
    the step is gone there, so ``on_lost`` stops the share)."""

    BATCH_BYTES = 256 * 1024
    LINGER_S = 0.005
    TIMEOUT_S = 30.0
    IDLE_S = 5.0  # a share with nothing to say asks this often all the same: is the step still there?

    def __init__(self, nc: Any, subject: str) -> None:
        self.nc = nc
        self.subject = subject
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.lost = asyncio.Event()
        self._sender = asyncio.create_task(self._send(), name=f"sink-{subject}")
        self._room = asyncio.Semaphore(64)  # chunks in flight: a task that writes faster waits

    async def output(self, rank: int, fd: int, data: bytes) -> None:
        if self.lost.is_set():
            return
        await self._room.acquire()
        await self.queue.put(("out", [rank, fd, base64.b64encode(data).decode()]))

    async def exited(self, rank: int, code: int | None, error: str = "") -> None:
        await self.queue.put(("exit", [rank, code, error]))

    async def _send(self) -> None:
        closing = False
        while not closing:
            try:
                kind, item = await asyncio.wait_for(self.queue.get(), self.IDLE_S)
            except asyncio.TimeoutError:
                kind, item = "ping", None
            out: list[Any] = []
            ends: list[Any] = []
            size = 0
            deadline = time.monotonic() + self.LINGER_S
            while True:
                if kind == "out":
                    out.append(item)
                    size += len(item[2])
                    self._room.release()
                elif kind == "exit":
                    ends.append(item)
                elif kind == "ping":
                    break
                else:  # "close": send what was gathered, then end
                    closing = True
                    break
                if size >= self.BATCH_BYTES:
                    break
                try:
                    kind, item = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        kind, item = await asyncio.wait_for(self.queue.get(), left)
                    except asyncio.TimeoutError:
                        break
            if self.lost.is_set() or not (out or ends or kind == "ping"):
                continue
            try:
                msg = await self.nc.request(self.subject, json.dumps({"out": out, "exited": ends}).encode(),
                                            timeout=self.TIMEOUT_S)
                answer = json.loads(msg.data)
            except Exception as exc:  # noqa: BLE001 - no responder, a timeout: the coordinator is gone
                log.warning("step output to %s not taken (%s): stopping the share", self.subject, exc)
                answer = {"stop": True}
            if answer.get("stop"):
                self.lost.set()

    async def close(self) -> None:
        """Send what is queued, then stop."""
        await self.queue.put(("close", None))
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._sender
