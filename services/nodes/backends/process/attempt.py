"""One attempt under its own supervisor (``attempt_supervisor.py``), watched through the files in its
folder: the ``Execution`` the process executor (``executors.py``) starts and adopts.

It waits by polling the supervisor's status; stops with SIGTERM to the job's process group, then SIGKILL
to the group and its cgroup; sends the checkpoint signal to the job's main process only and waits for
the reference the job writes (see ``executors.py``, "Checkpoints"); tells an elastic job its new size
(``resize.py``); sends Slurm's ``--signal`` (``signals.py``); and measures its working set in its cgroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from services.nodes.backends.protocol import Files, Outcome
from services.nodes.backends.process import attempt_supervisor as shim
from services.nodes.backends.process import resize
from services.nodes.backends.process import signals
from services.nodes.backends.process.cgroups import Hierarchy
from services.nodes.backends.process.identity import Identity
from services.nodes.backends.process.job_files import read_checkpoint_ref, stderr_tail

__all__ = ["SupervisedAttempt", "supervisor_alive", "signal_number"]


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


def supervisor_alive(pid_file: Path) -> bool:
    """Does the process a pid file names still run (the same process: its start time matches)?"""
    known = shim.read_pid_file(pid_file)
    return known is not None and bool(known[1]) and shim.start_time(known[0]) == known[1]


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


class SupervisedAttempt:
    """One attempt under its supervisor, watched through the files in its directory (``attempt_supervisor.py``)."""

    POLL_S = 0.1

    def __init__(self, directory: Path, plan: dict[str, Any], hierarchy: Hierarchy,
                 child: subprocess.Popen[bytes] | None = None,
                 step_groups: Callable[[], set[int]] | None = None) -> None:
        self.directory = directory
        self.plan = plan
        self._step_groups = step_groups  # the process groups of its steps' tasks here (services/nodes/agent/steps.py)
        self._child = child  # the supervisor, when this agent started it (reaped here, not left a zombie)
        self._cgroup = hierarchy.cgroup(plan["node"], plan["job_id"], plan["attempt"]) if hierarchy.usable else None
        self._checkpoint_path = Path(plan["env"]["HORIZON_CHECKPOINT_FILE"])
        run_as = Identity.from_json(plan.get("run_as"))
        self._uid = run_as.uid if run_as is not None else None  # whose files the agent reads for the job
        self.files = Files(plan["cwd"], plan["stdout"], plan["stderr"])
        self._stopping = False
        job = shim.read_pid_file(directory / shim.JOB_PID)
        self.pid: int | None = job[0] if job else None
        self._pid_start = job[1] if job else ""
        self.started_wall: float | None = job[2] if job else None

    def memory_used(self) -> int | None:
        """The attempt's working set now (its cgroup's; None when it has none): the memory-pressure watch."""
        return self._cgroup.memory_used() if self._cgroup is not None else None

    def status(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.directory / shim.STATUS).read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return None

    def _supervisorsupervisor_alive(self) -> bool:
        if self._child is not None:
            return self._child.poll() is None
        return supervisor_alive(self.directory / shim.SHIM_PID)

    def _outcome(self, status: dict[str, Any] | None) -> Outcome:
        if status is None:
            return Outcome(None, stderr_tail(self.files.stderr, self._uid), signalled=self._stopping, lost=True)
        sig = status.get("signal")
        runtime = None
        if self.started_wall is not None and status.get("ended"):
            runtime = max(0.0, float(status["ended"]) - self.started_wall)
        return Outcome(
            -int(sig) if sig else status.get("exit_code"),
            stderr_tail(self.files.stderr, self._uid),
            signalled=bool(sig) or self._stopping,
            out_of_memory=int(status.get("oom_kills") or 0) > 0,
            error=status.get("error") or "",
            runtime_s=runtime,
        )

    async def wait(self) -> Outcome:
        while True:
            status = self.status()
            if status is not None:
                if self._child is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.to_thread(self._child.wait, 5)
                return self._outcome(status)
            if not self._supervisorsupervisor_alive():
                return self._outcome(self.status())  # written just before it exited, or never
            await asyncio.sleep(self.POLL_S)

    def _signal_group(self, sig: int) -> None:
        if self.pid is not None and shim.start_time(self.pid) == self._pid_start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    async def stop(self, grace_period_s: float) -> Outcome:
        self._stopping = True
        if self.status() is None:
            self._signal_group(signal.SIGTERM)
            try:
                return await asyncio.wait_for(self.wait(), grace_period_s)
            except asyncio.TimeoutError:
                self._signal_group(signal.SIGKILL)
                if self._cgroup is not None:
                    self._cgroup.signal_all(signal.SIGKILL)  # also what left the process group
        return await self.wait()

    def signal_job(self, number: int, batch_only: bool) -> int:
        """Slurm's ``--signal`` (``services/nodes/backends/process/signals.py``): the main process alone, or every other
        process of the job's group and cgroup. How many got it (0: the job has ended)."""
        if self.pid is None or self.status() is not None or shim.start_time(self.pid) != self._pid_start:
            return 0
        pids = self._cgroup.pids() if self._cgroup is not None else []
        if not batch_only and self._step_groups is not None:
            # A step's tasks get it from their srun, which is in the job's group and passes the signals it
            # gets on to every task of its step, on every node: once each, as Slurm signals steps.
            groups = self._step_groups()
            pids = [pid for pid in pids if _pgid(pid) not in groups]
        return signals.deliver(self.pid, number, batch_only, pids)

    def checkpoint_ref(self) -> str | None:
        return read_checkpoint_ref(self._checkpoint_path, self._uid)

    def resized(self, world: Mapping[str, str]) -> bool:
        """Tell the job its new size: ``$HORIZON_RESIZE_FILE`` anew, then SIGWINCH to its main process
        (``services/nodes/backends/process/resize.py``). False when it has ended, is not elastic, or knows that size
        already (an agent that restarted tells only what changed while it was away)."""
        path = self.plan["env"].get("HORIZON_RESIZE_FILE")
        if not path or self.pid is None or self.status() is not None or shim.start_time(self.pid) != self._pid_start:
            return False
        known, self._resizes = resize.told(self.plan["env"], Path(path))
        if all(known.get(name) == value for name, value in world.items()):
            return False
        self._resizes += 1
        resize.write_resize_file(Path(path), world, self._resizes)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, resize.RESIZE_SIGNAL)
        return True

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        number = signal_number(signal_name)
        if number is None or self.pid is None or self.status() is not None:
            return self.checkpoint_ref()
        before = _version(self._checkpoint_path)  # a checkpoint written earlier is not the answer
        if shim.start_time(self.pid) == self._pid_start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)  # the job's main process only (see the module doc)
        # Poll: the file is the job's answer, and a job may also answer by exiting.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            ref = self.checkpoint_ref()
            if ref is not None and _version(self._checkpoint_path) != before:
                return ref
            remaining = deadline - loop.time()
            if self.status() is not None or remaining <= 0:
                return ref
            await asyncio.sleep(min(0.05, remaining))
