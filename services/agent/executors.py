"""How a node agent runs a job: a real process, or a simulated one that only takes time.

An executor's ``run`` returns an ``Outcome`` when the job ends by itself;
``stop`` ends it early (SIGTERM, then SIGKILL after the grace period). The
agent enforces the time limit by calling ``stop`` when it passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from events import catalogue as c

__all__ = ["Outcome", "Execution", "Executor", "ProcessExecutor", "SimExecutor", "job_environment"]

STDERR_TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int | None
    stderr_tail: str = ""
    signalled: bool = False


class Execution(Protocol):
    pid: int | None

    async def wait(self) -> Outcome: ...

    async def stop(self, grace_period_s: float) -> Outcome: ...


class Executor(Protocol):
    async def start(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation) -> Execution: ...

    def reap_orphan(self, job_id: str, attempt: int) -> bool:
        """Kill what a dead agent left of this attempt (True if something was killed)."""
        ...


def job_environment(job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation) -> dict[str, str]:
    """The variables a job sees: its own ``env``, plus where it runs (Slurm-like names alongside ours)."""
    indices = [d.rsplit("gpu", 1)[-1] if "gpu" in d else d for d in alloc.device_ids]
    env = {
        "HORIZON_JOB_ID": job_id,
        "HORIZON_ATTEMPT": str(attempt),
        "HORIZON_NODE": alloc.node,
        "HORIZON_GPU_IDS": ",".join(alloc.device_ids),
        "HORIZON_CPUS": f"{alloc.cpus_milli / 1000:g}",
        "CUDA_VISIBLE_DEVICES": ",".join(indices),
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NAME": spec.name,
    }
    env.update(spec.env)
    return env


class _Process:
    def __init__(self, proc: asyncio.subprocess.Process, stderr_path: Path, pid_path: Path) -> None:
        self._proc = proc
        self._stderr_path = stderr_path
        self._pid_path = pid_path
        self.pid: int | None = proc.pid
        self._stopping = False

    async def wait(self) -> Outcome:
        code = await self._proc.wait()
        with contextlib.suppress(OSError):
            self._pid_path.unlink()
        return Outcome(code, self._tail(), signalled=code < 0 or self._stopping)

    def _tail(self) -> str:
        try:
            with open(self._stderr_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 8192))
                lines = fh.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(deque(lines, maxlen=STDERR_TAIL_LINES))

    async def stop(self, grace_period_s: float) -> Outcome:
        self._stopping = True
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), grace_period_s)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
        return await self.wait()


class ProcessExecutor:
    """Runs ``spec.command`` in its own process group; output goes to ``<output_dir>/<job>.<attempt>.{out,err}``."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = Path(output_dir)

    async def start(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation) -> _Process:
        if not spec.command:
            raise ValueError("the job has no command to run")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        out_path = self.output_dir / f"{job_id}.{attempt}.out"
        err_path = self.output_dir / f"{job_id}.{attempt}.err"
        env = dict(os.environ)
        env.update(job_environment(job_id, attempt, spec, alloc))
        pid_path = self.output_dir / f"{job_id}.{attempt}.pid"
        self.reap_orphan(job_id, attempt)
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *spec.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,  # its own process group: stop() signals the whole job
            )
        # The job outlives a SIGKILLed agent (its own session); the pid file lets the
        # next agent find and end it before reporting or restarting the attempt.
        pid_path.write_text(f"{proc.pid} {_start_time(proc.pid)}")
        return _Process(proc, err_path, pid_path)

    def reap_orphan(self, job_id: str, attempt: int) -> bool:
        pid_path = self.output_dir / f"{job_id}.{attempt}.pid"
        try:
            pid_text, _, started = pid_path.read_text().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            return False
        killed = False
        # Only if that pid is still the process we started (a pid can be reused).
        if started and _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the job's own process group, named by its leader's pid
                killed = True
        with contextlib.suppress(OSError):
            pid_path.unlink()
        return killed


def _start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (field 22 of /proc/<pid>/stat), "" if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class _Simulated:
    def __init__(self, runtime_s: float, exit_code: int) -> None:
        self.pid: int | None = None
        self._exit_code = exit_code
        self._task = asyncio.ensure_future(asyncio.sleep(runtime_s))

    async def wait(self) -> Outcome:
        try:
            await self._task
        except asyncio.CancelledError:
            if not self._task.cancelled():
                raise
            return Outcome(None, "", signalled=True)
        return Outcome(self._exit_code)

    async def stop(self, grace_period_s: float) -> Outcome:
        self._task.cancel()
        return await self.wait()


class SimExecutor:
    """A job "runs" for its ``sim_runtime_s`` (else its time limit) and exits with ``sim_exit_code``."""

    def reap_orphan(self, job_id: str, attempt: int) -> bool:
        return False  # a simulated job dies with its agent

    async def start(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation) -> _Simulated:
        runtime = spec.sim_runtime_s if spec.sim_runtime_s is not None else spec.time_limit_s
        return _Simulated(runtime, spec.sim_exit_code)
