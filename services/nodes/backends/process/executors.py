"""How a node agent runs jobs on its own machine: a real process under its own supervisor, or a simulated
one. Both are ``Executor`` s (``services/nodes/backends/protocol.py``, which says what an executor, an
execution and an outcome are).

**Real processes** (``ProcessExecutor``). Each attempt runs under its own
supervisor (``services/nodes/backends/process/attempt_supervisor.py``), in its own cgroup with its limits
(``services/nodes/backends/process/cgroups.py``: memory with no swap, a CPU quota and a
cpuset of whole cores near its GPUs chosen by ``services/nodes/backends/process/cpu_pinning.py``,
pids, and no access to the node's other GPUs), in the job's working
directory, writing where ``--output``/``--error`` say or, by default, to
``<data dir>/jobs/<job>/<attempt>/stdout`` and ``stderr``. The supervisor
outlives the agent: a restarted agent ``adopt`` s every attempt still
running (or ended while it was away: the supervisor kept the status) instead
of losing it. Stopping the agent (Ctrl-C, an upgrade) leaves the jobs running
(``detached``). An attempt the kernel killed for memory ends with
``Outcome.out_of_memory``, read from the cgroup's OOM counter.

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
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from events import catalogue as c
from services.domain.output import expand, names_of, resolve
from services.domain.qos import cpu_limit, memory_limit, qos_class
from services.nodes.backends.protocol import Files, Outcome
from services.nodes.backends.process import attempt_supervisor as shim
from services.nodes.backends.process import containers
from services.nodes.backends.process.attempt import SupervisedAttempt, supervisor_alive
from services.nodes.backends.process.cgroups import Hierarchy, Limits, cpu_shares, probe
from services.nodes.backends.process.cpu_pinning import CoreAllocator, Machine
from services.nodes.backends.process.discovery import numa_layout, usable_cpus
from services.nodes.backends.process.identity import Identity, identity_for, submitted_environment
from services.nodes.backends.process.job_files import default_spool, private_dir, spool_name
from services.nodes.job_environment import job_environment

__all__ = ["ProcessExecutor", "SimExecutor", "kill_attempts", "NVIDIA_MAJOR"]

NVIDIA_MAJOR = 195  # /dev/nvidia<minor>: the GPUs' character devices
START_TIMEOUT_S = 30.0  # from starting the supervisor to the job's process running (or its start error)
KILL_WAIT_S = 10.0  # the supervisor's SIGTERM-to-SIGKILL wait for what outlived the job's command


def _machine() -> Machine:
    """This machine's usable cores and their NUMA nodes (discovery's reading of ``/sys``)."""
    cores = usable_cpus()
    return Machine(cores, {core: node for node, cpus in numa_layout(cores).items() for core in cpus})


class ProcessExecutor:
    """Runs ``spec.command`` for real, each attempt under its own supervisor (see the module doc).

    ``state_dir``: where attempts keep their files (``<job>/<attempt>/``). ``nodes``: the nodes this
    agent hosts (their GPUs: device files and UUIDs; their CPUs: the cores a job may be pinned to).
    ``hierarchy``: the cgroups to confine jobs with (default: what ``probe`` finds).
    """

    detached = True

    def __init__(self, state_dir: Path, nodes: Mapping[str, Any] | None = None,
                 hierarchy: Hierarchy | None = None, machine: Machine | None = None,
                 spool_dir: Path | None = None) -> None:
        # Absolute once, here: a job's supervisor runs from "/" and `horizon logs` reads these paths from
        # other processes, so nothing below may depend on the agent's working directory.
        self.state_dir = Path(state_dir).absolute()
        # The jobs' own folders (their default output, checkpoint and resize files), apart from the
        # supervisors' (plan, pids, status: the agent's, which no job may rewrite), and outside the data
        # dir, whose path no job learns (``default_spool``).
        self.spool_dir = Path(spool_dir).absolute() if spool_dir is not None else default_spool(self.state_dir)
        self.nodes = dict(nodes or {})
        self.hierarchy = hierarchy if hierarchy is not None else probe()
        self.cores = CoreAllocator(machine or _machine(),
                                   {name: node.cpus_milli // 1000 for name, node in self.nodes.items()})
        # Set by the agent's steps (services/nodes/agent/steps.py): the socket srun asks for a step on, per
        # attempt, and the directory of Horizon's srun and scontrol, first on a job's PATH.
        self.step_socket: Callable[[str, int], str] | None = None
        self.shims_dir: Path | None = None
        self.step_groups: Callable[[str, int], set[int]] | None = None  # its steps' tasks' process groups here
        # When the job's command has ended, what it left in its cgroup (a step's tasks) gets SIGTERM and
        # this long before SIGKILL (Slurm's KillWait); the agent's own stop grace still bounds a stop.
        self.kill_wait_s = KILL_WAIT_S

    def isolation(self) -> str:
        """The cgroups, and whose jobs run as whom (`horizon nodes`)."""
        if os.geteuid() == 0:
            return f"{self.hierarchy.describe()}; jobs run as their users"
        try:
            me = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            me = f"uid {os.geteuid()}"
        return f"{self.hierarchy.describe()}; every job runs as {me} (the agent is not root)"

    def processes_here(self) -> ProcessExecutor:
        """Its jobs are processes on this machine."""
        return self

    def _groups_of(self, job_id: str, attempt: int) -> Callable[[], set[int]]:
        return lambda: self.step_groups(job_id, attempt) if self.step_groups is not None else set()

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        """The supervisor's folder of an attempt (the agent's: root's, 0700)."""
        return self.state_dir / job_id / str(attempt)

    def job_dir(self, job_id: str, attempt: int) -> Path:
        """The attempt's own folder, its user's (0700): default output, checkpoint and resize files. Its
        name holds no ':' (a tenant's job key has one, and Podman splits a volume at ':') and no '%'
        (an --output pattern may name it)."""
        return self.spool_dir / spool_name(job_id, attempt)

    def _devices(self, node: str) -> dict[str, c.GpuDevice]:
        spec = self.nodes.get(node)
        return {gpu.id: gpu for gpu in spec.gpus} if spec is not None else {}

    def limits(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation) -> tuple[tuple[int, ...], Limits]:
        """The node CPUs the attempt is pinned to on ``alloc.node`` (taken until ``released``) and its
        cgroup's limits there: the job's limits (``services/domain/qos.py``: the allocation's memory and
        CPUs for a guaranteed job, more for a burstable one, none given for a best-effort one), as many
        cores as the CPU limit needs (all of the node's without one), no other GPU of the node."""
        devices = self._devices(alloc.node)
        numa = {devices[d].numa_node for d in alloc.device_ids if d in devices}
        request_cpus = alloc.cpus_milli or spec.cpus_milli * spec.tasks_per_node
        cpu_cap = cpu_limit(spec, request_cpus)
        memory_cap = memory_limit(spec, alloc.memory_bytes or spec.memory_bytes * spec.tasks_per_node)
        node_cpus = self.cores.node_cpus.get(alloc.node, len(self.cores.machine.cores))
        cpus = self.cores.take(alloc.node, job_id, attempt, cpu_cap or node_cpus * 1000, numa)
        cores = self.cores.machine_cores(cpus)
        deny = tuple(("c", NVIDIA_MAJOR, gpu.minor) for gpu_id, gpu in sorted(devices.items())
                     if gpu.minor is not None and gpu_id not in alloc.device_ids)
        shares = 0 if qos_class(spec) == "guaranteed" else cpu_shares(request_cpus)
        return cpus, Limits(memory_bytes=memory_cap, cpus_milli=cpu_cap, cpus=cores,
                            mems=self.cores.numa_nodes(cores), deny_devices=deny, cpu_shares=shares)

    def _plan(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation,
              checkpoint_ref: str | None, directory: Path, run_as: Identity | None = None,
              allocations: Sequence[c.NodeAllocation] = ()) -> dict[str, Any]:
        control = directory
        directory = self.job_dir(job_id, attempt)
        cwd = spec.cwd or str(directory)
        names = names_of(job_id, spec, alloc.node)
        stdout = resolve(expand(spec.stdout, names), cwd) if spec.stdout else str(directory / "stdout")
        if spec.stderr:
            stderr = resolve(expand(spec.stderr, names), cwd)
        else:
            stderr = stdout if spec.stdout else str(directory / "stderr")
        devices = self._devices(alloc.node)
        # A process inherits the node's environment, or starts from the one its submitter's shell gave
        # (sbatch's --export); a container keeps its image's (PATH, libraries).
        if spec.image:
            env = {}
        elif spec.submit_env is not None:
            env = submitted_environment(run_as, os.environ, spec.submit_env)
        else:
            env = dict(os.environ) if run_as is None else run_as.environment(dict(os.environ))  # another user's
            # job keeps PATH and the locale, not the agent's rest
            for name in [name for name in env if name.startswith("HORIZON_")]:
                if name != "HORIZON_NATS_URL" or _has_credentials(env[name]):
                    del env[name]  # the agent's own settings (its password, its data dir, its TLS key): never the job's
        env.update(job_environment(job_id, attempt, spec, alloc, checkpoint_ref, devices, allocations))
        env["HORIZON_CHECKPOINT_FILE"] = str((directory / "checkpoint").resolve())  # the agent reads this path
        if spec.elastic:  # the agent writes it when the job is resized (services/nodes/backends/process/resize.py)
            env["HORIZON_RESIZE_FILE"] = str((directory / "resize").resolve())
        if not spec.image:  # srun and scontrol inside the job: Horizon's, asking this agent (not in a container)
            if self.step_socket is not None:
                env["HORIZON_STEP_SOCKET"] = self.step_socket(job_id, attempt)
            if self.shims_dir is not None:
                env["PATH"] = f"{self.shims_dir}{os.pathsep}{env.get('PATH') or os.defpath}"
        cpus, limits = self.limits(job_id, attempt, spec, alloc)
        return {
            "job_id": job_id, "attempt": attempt, "node": alloc.node, "tenant": spec.tenant, "argv": list(spec.command), "env": env,
            "run_as": run_as.to_json() if run_as is not None else None, "job_dir": str(directory),
            "control_dir": str(control),
            "cwd": cwd, "stdout": stdout, "stderr": stderr, "open_mode": spec.open_mode,
            "node_cpus": list(cpus), "limits": limits.to_json(), "hierarchy": self.hierarchy.to_json(),
            "kill_wait_s": self.kill_wait_s,
            "image": spec.image, "container": containers.container_name(job_id, attempt) if spec.image else "",
            "gpu_minors": [devices[d].minor for d in alloc.device_ids if d in devices and devices[d].minor is not None],
        }

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
        allocations: Sequence[c.NodeAllocation] = (),
    ) -> SupervisedAttempt:
        adopted = self.adopt(job_id, attempt, alloc)
        if adopted is not None:
            return adopted  # a previous agent started it: the same attempt, not a second run
        if not spec.command:
            raise ValueError("the job has no command to run")
        if spec.image:
            problem = await asyncio.to_thread(containers.image_problem, spec.image)
            if problem is not None:
                raise RuntimeError(problem)
        run_as = identity_for(spec.uid, spec.gid, spec.groups, spec.user)
        directory = self.attempt_dir(job_id, attempt)
        job_dir = self.job_dir(job_id, attempt)
        for where in (directory, job_dir):
            if where.exists():
                shutil.rmtree(where, ignore_errors=True)  # planned by an agent that died before starting it
        private_dir(directory)
        private_dir(self.spool_dir, mode=0o711)  # each job may reach its own folder, and list none
        private_dir(job_dir, run_as)
        plan = self._plan(job_id, attempt, spec, alloc, checkpoint_ref, directory, run_as, allocations)
        fd = os.open(directory / shim.PLAN, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(plan))
        with open(directory / "supervisor.log", "wb") as log_file:
            child = subprocess.Popen(
                [sys.executable, "-m", "services.nodes.backends.process.attempt_supervisor", str(directory)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, close_fds=True,
                start_new_session=True,  # its own session: Ctrl-C and the agent's death do not reach it
                cwd="/",
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (directory / shim.JOB_PID).exists():
            status_path = directory / shim.STATUS
            if status_path.exists() or child.poll() is not None:
                if (directory / shim.JOB_PID).exists():
                    break  # it started, and ended, between the two looks: its status says how (not a failure)
                await asyncio.to_thread(child.wait)
                self.cores.release(alloc.node, job_id, attempt)
                try:
                    error = json.loads(status_path.read_text()).get("error") or "the job's supervisor failed"
                except (OSError, ValueError):
                    error = f"the job's supervisor exited ({_supervisor_log(directory)})"
                raise RuntimeError(error)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the job did not start within {START_TIMEOUT_S:g} s")
            await asyncio.sleep(0.01)
        return SupervisedAttempt(directory, plan, self.hierarchy, child, self._groups_of(job_id, attempt))

    def adopt(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> SupervisedAttempt | None:
        directory = self.attempt_dir(job_id, attempt)
        try:
            plan = json.loads((directory / shim.PLAN).read_text())
        except (OSError, ValueError):
            return None
        if not (directory / shim.STATUS).exists() and not supervisor_alive(directory / shim.SHIM_PID):
            return None  # planned, never started (or its supervisor was killed): nothing to watch
        self.cores.hold(alloc.node, job_id, attempt, plan.get("node_cpus", ()))
        return SupervisedAttempt(directory, plan, self.hierarchy, step_groups=self._groups_of(job_id, attempt))

    def released(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        self.cores.release(alloc.node, job_id, attempt)

    def running(self) -> list[tuple[str, int]]:
        """(job, attempt) of every supervisor still alive under ``state_dir`` (tests stop them with this)."""
        found = []
        for pid_file in sorted(self.state_dir.glob(f"*/*/{shim.SHIM_PID}")):
            if supervisor_alive(pid_file) and not (pid_file.parent / shim.STATUS).exists():
                found.append((pid_file.parent.parent.name, int(pid_file.parent.name)))
        return found


def kill_attempts(state_dir: Path) -> int:
    """Kill every attempt still running under ``state_dir`` (its process group and cgroup); the
    supervisors record the ends. For tests and operators clearing a node: stopping an agent never does
    this. Returns how many were running."""
    killed = 0
    for pid_file in sorted(Path(state_dir).glob(f"**/{shim.SHIM_PID}")):
        directory = pid_file.parent
        if not supervisor_alive(pid_file) or (directory / shim.STATUS).exists():
            continue
        killed += 1
        job = shim.read_pid_file(directory / shim.JOB_PID)
        if job is not None and shim.start_time(job[0]) == job[1]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job[0], signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError, KeyError):
            plan = json.loads((directory / shim.PLAN).read_text())
            hierarchy = Hierarchy.from_json(plan["hierarchy"])
            if hierarchy.usable:
                hierarchy.cgroup(plan["node"], plan["job_id"], plan["attempt"]).signal_all(signal.SIGKILL)
    return killed


def _has_credentials(url: str) -> bool:
    """Does a NATS URL (or a comma-separated list of them) carry a user or password?"""
    return any("@" in part.split("://", 1)[-1] for part in url.split(",") if part.strip())


def _supervisor_log(directory: Path) -> str:
    try:
        return (directory / "supervisor.log").read_text(errors="replace").strip()[-500:] or "no output"
    except OSError:
        return "no output"


class _Simulated:
    def __init__(self, runtime_s: float, exit_code: int) -> None:
        self.pid: int | None = None
        self.files = Files()
        self.started_wall: float | None = None
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

    detached = False  # a simulated job dies with its agent
    state_dir = None  # and writes nothing

    def adopt(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        return None

    def released(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        pass

    def isolation(self) -> str:
        return "simulated: jobs run no process"

    def processes_here(self) -> None:
        return None  # its jobs run nowhere

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
        allocations: Sequence[c.NodeAllocation] = (),
    ) -> _Simulated:
        runtime = spec.sim_runtime_s if spec.sim_runtime_s is not None else spec.time_limit_s
        return _Simulated(runtime, spec.sim_exit_code)
