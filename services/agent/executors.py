"""How a node agent runs a job: a real process, or a simulated one that only takes time.

An execution's ``wait`` returns an ``Outcome`` when the job ends by itself;
``stop`` ends it early (SIGTERM, then SIGKILL after the grace period). The
agent enforces the time limit by calling ``stop`` when it passes, and calls
it for a cancel, a preemption or an eviction too.

**Checkpoints.** Before stopping a preempted job that declares a
``checkpoint_signal``, the agent calls ``checkpoint``: the signal goes to the
job's main process (its command) and the agent waits until the job has
written a checkpoint reference, or has exited, or the time is up. Only the
main process, unlike SIGTERM, which goes to the whole process group: the
default action of SIGUSR1 and most signals a job would pick is to end the
process, so helpers that do not expect it (data loader workers, a ``sleep``
in a shell script) would die of it mid-checkpoint; the job forwards the
signal where it wants it (Slurm's ``--signal=B:`` makes the same choice). The job writes the
reference (a path, a URL, anything it and its next attempt understand) to the
file named by ``$HORIZON_CHECKPOINT_FILE``, best by writing a temporary file
and renaming it there, since a rename is atomic and the agent may read at any
moment. ``checkpoint_ref`` reads that file, also after the process is gone
(a job may write it on SIGTERM). The next attempt finds the latest reference
the log knows in ``$HORIZON_CHECKPOINT_REF``. A simulated job writes none.
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

__all__ = ["Outcome", "Execution", "Executor", "ProcessExecutor", "SimExecutor", "job_environment", "signal_number"]

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

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        """Send the job its checkpoint signal; the reference it wrote within ``timeout_s`` (or before
        it exited), else ``None``."""
        ...

    def checkpoint_ref(self) -> str | None:
        """The checkpoint reference the job has written, if any."""
        ...


class Executor(Protocol):
    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None
    ) -> Execution: ...

    def reap_orphan(self, job_id: str, attempt: int) -> bool:
        """Kill what a dead agent left of this attempt (True if something was killed)."""
        ...


def job_environment(
    job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None
) -> dict[str, str]:
    """The variables a job sees: its own ``env``, plus where it runs (Slurm-like names alongside ours)
    and the checkpoint an earlier attempt left (``HORIZON_CHECKPOINT_REF``), if any."""
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
    if checkpoint_ref is not None:
        env["HORIZON_CHECKPOINT_REF"] = checkpoint_ref
    env.update(spec.env)
    return env


def signal_number(name: str) -> int | None:
    """``SIGUSR1``, ``USR1`` or ``10`` -> the signal's number; ``None`` if there is no such signal."""
    text = name.strip().upper()
    if text.isdigit():
        number = int(text)
        return number if number in set(signal.valid_signals()) else None
    try:
        return int(signal.Signals[text if text.startswith("SIG") else f"SIG{text}"])
    except KeyError:
        return None


def _version(path: Path) -> tuple[int, int, int] | None:
    """Which write of the file this is: a rename gives a new inode, a rewrite a new mtime or size."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read_ref(path: Path) -> str | None:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return text or None


class _Process:
    def __init__(self, proc: asyncio.subprocess.Process, stderr_path: Path, pid_path: Path,
                 checkpoint_path: Path) -> None:
        self._proc = proc
        self._stderr_path = stderr_path
        self._pid_path = pid_path
        self._checkpoint_path = checkpoint_path
        self.pid: int | None = proc.pid
        self._stopping = False

    def checkpoint_ref(self) -> str | None:
        return _read_ref(self._checkpoint_path)

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        number = signal_number(signal_name)
        if number is None or self._proc.returncode is not None:
            return self.checkpoint_ref()
        before = _version(self._checkpoint_path)  # a checkpoint written earlier is not the answer
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._proc.pid, number)  # the job's main process only (see the module doc)
        # Poll: the file is the job's answer, and a job may also answer by exiting.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            ref = self.checkpoint_ref()
            if ref is not None and _version(self._checkpoint_path) != before:
                return ref
            remaining = deadline - loop.time()
            if self._proc.returncode is not None or remaining <= 0:
                return ref
            await asyncio.sleep(min(0.05, remaining))

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

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None
    ) -> _Process:
        if not spec.command:
            raise ValueError("the job has no command to run")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        out_path = self.output_dir / f"{job_id}.{attempt}.out"
        err_path = self.output_dir / f"{job_id}.{attempt}.err"
        checkpoint_path = self.output_dir / f"{job_id}.{attempt}.checkpoint"
        env = dict(os.environ)
        env.update(job_environment(job_id, attempt, spec, alloc, checkpoint_ref))
        env["HORIZON_CHECKPOINT_FILE"] = str(checkpoint_path.resolve())  # the agent reads this path, whatever env says
        pid_path = self.output_dir / f"{job_id}.{attempt}.pid"
        self.reap_orphan(job_id, attempt)
        with contextlib.suppress(OSError):
            checkpoint_path.unlink()  # left by this attempt's run under an earlier agent: not this run's answer
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
        return _Process(proc, err_path, pid_path, checkpoint_path)

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

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        return None  # a simulated job keeps no state worth a checkpoint: it just stops

    def checkpoint_ref(self) -> str | None:
        return None


class SimExecutor:
    """A job "runs" for its ``sim_runtime_s`` (else its time limit) and exits with ``sim_exit_code``."""

    def reap_orphan(self, job_id: str, attempt: int) -> bool:
        return False  # a simulated job dies with its agent

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None
    ) -> _Simulated:
        runtime = spec.sim_runtime_s if spec.sim_runtime_s is not None else spec.time_limit_s
        return _Simulated(runtime, spec.sim_exit_code)
