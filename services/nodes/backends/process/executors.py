"""How a node agent runs a job: a real process under its own supervisor, or a simulated one.

An execution's ``wait`` returns an ``Outcome`` when the job ends by itself;
``stop`` ends it early (SIGTERM, then SIGKILL after the grace period). The
agent enforces the time limit by calling ``stop`` when it passes, and calls
it for a cancel, a preemption or an eviction too.

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
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from events import catalogue as c
from events.subjects import tenant_view
from services.domain.hostlist import compress
from services.domain.steps import counts_text
from services.nodes.backends.process import containers
from services.nodes.backends.process import resize
from services.nodes.backends.process import attempt_supervisor as shim
from services.nodes.backends.process import signals
from services.nodes.backends.process.identity import Identity, identity_for, owned_by
from services.nodes.backends.process.cgroups import Hierarchy, Limits, cpu_shares, probe
from services.nodes.backends.process.cpu_pinning import CoreAllocator, Machine
from services.nodes.backends.process.discovery import numa_layout, usable_cpus
from services.domain.output import Names, expand, resolve
from services.domain.qos import cpu_limit, memory_limit, qos_class

__all__ = ["Outcome", "Files", "Execution", "Executor", "ProcessExecutor", "SimExecutor", "job_environment",
           "visible_devices", "signal_number", "kill_attempts", "default_spool", "spool_name", "private_dir",
           "NVIDIA_MAJOR", "CLUSTER_NAME"]

STDERR_TAIL_LINES = 20
NVIDIA_MAJOR = 195  # /dev/nvidia<minor>: the GPUs' character devices
START_TIMEOUT_S = 30.0  # from starting the supervisor to the job's process running (or its start error)
KILL_WAIT_S = 10.0  # the supervisor's SIGTERM-to-SIGKILL wait for what outlived the job's command
CLUSTER_NAME = "horizon"  # SLURM_CLUSTER_NAME (and sbatch --parsable's ID;cluster)


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int | None
    stderr_tail: str = ""
    signalled: bool = False
    out_of_memory: bool = False  # the kernel killed a process of the attempt for going over its memory limit
    error: str = ""  # it never ran: why (no such directory, command or output file)
    runtime_s: float | None = None  # measured by the supervisor (across agent restarts); None: the agent measures
    lost: bool = False  # its supervisor died without a status: how it ended is unknown


@dataclass(frozen=True, slots=True)
class Files:
    """Where an attempt runs and writes, on its node."""

    cwd: str = ""
    stdout: str = ""
    stderr: str = ""


class Execution(Protocol):
    pid: int | None
    files: Files
    started_wall: float | None  # when the process started (wall clock), if the executor knows

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
    detached: bool  # its jobs outlive the agent (they are adopted by the next one, not lost)
    state_dir: Path | None  # where attempts keep their files (served to `horizon logs`); None: no files

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
        allocations: Sequence[c.NodeAllocation] = (),
    ) -> Execution:
        """Start the attempt on ``alloc`` (this node's share of ``allocations``, the job's whole
        allocation, which its environment describes)."""
        ...

    def adopt(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> Execution | None:
        """The attempt a previous agent started, if its supervisor runs or left its status."""
        ...

    def released(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        """The attempt is over and reported: forget what it held (its cores)."""
        ...

    def isolation(self) -> str:
        """How jobs are confined (the node's ``isolation``, shown by ``horizon nodes``)."""
        ...


def visible_devices(device_ids: Sequence[str], devices: Mapping[str, c.GpuDevice] | None = None) -> list[str]:
    """What ``CUDA_VISIBLE_DEVICES`` names for these devices of a node: the UUID where the node knows
    it (a real GPU: CUDA's own numbering need not be the driver's), else the index (a simulated node)."""
    devices = devices or {}
    visible = []
    for device_id in device_ids:
        known = devices.get(device_id)
        if known is not None and known.uuid:
            visible.append(known.uuid)
        else:
            visible.append(device_id.rsplit("gpu", 1)[-1] if "gpu" in device_id else device_id)
    return visible


def job_environment(
    job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
    devices: Mapping[str, c.GpuDevice] | None = None, allocations: Sequence[c.NodeAllocation] = (),
) -> dict[str, str]:
    """The variables a job sees: its own ``env``, plus where it runs (Slurm-like names alongside ours),
    its array task, and the checkpoint an earlier attempt left (``HORIZON_CHECKPOINT_REF``), if any.

    ``CUDA_VISIBLE_DEVICES`` names the allocated GPUs (``visible_devices``). ``allocations``: the
    job's whole allocation (default: ``alloc`` alone), for Slurm's view of it: ``SLURM_JOB_NODELIST``
    (compressed, ``node-[00-01]``), ``SLURM_JOB_NUM_NODES``, ``SLURM_NTASKS``,
    ``SLURM_TASKS_PER_NODE`` (``4(x2)``), ``SLURM_JOB_CPUS_PER_NODE``, ``SLURM_GPUS_ON_NODE``, ...
    The batch script is task 0 on node 0, as in Slurm."""
    visible = visible_devices(alloc.device_ids, devices)
    held = list(allocations) or [alloc]
    nodelist = compress([a.node for a in held])
    tasks = [max(1, a.tasks) for a in held]
    cpus = [max(1, -(-a.cpus_milli // 1000)) for a in held]
    # The job sees itself by the id its tenant gave it (``eval-7``, not the log's key ``acme:eval-7``).
    job_id = tenant_view(spec.tenant, job_id)
    array_id = tenant_view(spec.tenant, spec.array) if spec.array is not None else None
    env = {
        "HORIZON_JOB_ID": job_id,
        "HORIZON_ATTEMPT": str(attempt),
        "HORIZON_NODE": alloc.node,
        "HORIZON_GPU_IDS": ",".join(alloc.device_ids),
        "HORIZON_CPUS": f"{alloc.cpus_milli / 1000:g}",
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NAME": spec.name,
        "SLURMD_NODENAME": alloc.node,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(held)),
        "SLURM_NNODES": str(len(held)),
        "HORIZON_WORLD_SIZE": str(len(held)),  # nodes now (an elastic job's change: services/nodes/backends/process/resize.py)
        "SLURM_NTASKS": str(sum(tasks)),
        "SLURM_NPROCS": str(sum(tasks)),
        "SLURM_TASKS_PER_NODE": counts_text(tasks),
        "SLURM_JOB_CPUS_PER_NODE": counts_text(cpus),
        "SLURM_CPUS_ON_NODE": str(max(1, -(-alloc.cpus_milli // 1000))),
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_TOPOLOGY_ADDR": alloc.node,
        "SLURM_CLUSTER_NAME": CLUSTER_NAME,
    }
    if alloc.device_ids:
        env["SLURM_GPUS_ON_NODE"] = str(len(alloc.device_ids))
    if alloc.memory_bytes:
        env["SLURM_MEM_PER_NODE"] = str(alloc.memory_bytes >> 20)  # Slurm counts MiB
    if spec.account:
        env["SLURM_JOB_ACCOUNT"] = spec.account
    if spec.user:
        env["SLURM_JOB_USER"] = spec.user
    if spec.partition:  # the partition it got (of those it named, or the default one)
        env["SLURM_JOB_PARTITION"] = spec.partition
    if spec.cwd:
        env["SLURM_SUBMIT_DIR"] = spec.cwd
    if array_id is not None and spec.array_index is not None:
        env.update(HORIZON_ARRAY_ID=array_id, HORIZON_ARRAY_INDEX=str(spec.array_index),
                   SLURM_ARRAY_JOB_ID=array_id, SLURM_ARRAY_TASK_ID=str(spec.array_index))
    if checkpoint_ref is not None:
        env["HORIZON_CHECKPOINT_REF"] = checkpoint_ref
    if spec.elastic:  # --nodes MIN-MAX: its world size may change while it runs
        env.update(HORIZON_MIN_NODES=str(spec.min_nodes), HORIZON_MAX_NODES=str(spec.nodes),
                   SLURM_JOB_MIN_NODES=str(spec.min_nodes), SLURM_JOB_MAX_NODES=str(spec.nodes))
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


def _read_ref(path: Path, uid: int | None = None) -> str | None:
    """The checkpoint reference the job wrote: only from a file of the job's user (``owned_by``)."""
    fd = owned_by(str(path), uid)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        text = fh.read(64 * 1024).decode(errors="replace").strip()
    return text or None


def _tail(path: str, uid: int | None = None) -> str:
    """The last ``STDERR_TAIL_LINES`` lines of a file (at most its last 8 KiB): only of a file of the
    job's user (a job may put a link to a file it may not read where its output was)."""
    fd = owned_by(path, uid)
    if fd is None:
        return ""
    with os.fdopen(fd, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 8192))
        lines = fh.read().decode(errors="replace").splitlines()
    return "\n".join(deque(lines, maxlen=STDERR_TAIL_LINES))


def _alive(pid_file: Path) -> bool:
    """Does the process a pid file names still run (the same process: its start time matches)?"""
    known = shim.read_pid_file(pid_file)
    return known is not None and bool(known[1]) and shim.start_time(known[0]) == known[1]


class _Attempt:
    """One attempt under its supervisor, watched through the files in its directory (``shim.py``)."""

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

    def _supervisor_alive(self) -> bool:
        if self._child is not None:
            return self._child.poll() is None
        return _alive(self.directory / shim.SHIM_PID)

    def _outcome(self, status: dict[str, Any] | None) -> Outcome:
        if status is None:
            return Outcome(None, _tail(self.files.stderr, self._uid), signalled=self._stopping, lost=True)
        sig = status.get("signal")
        runtime = None
        if self.started_wall is not None and status.get("ended"):
            runtime = max(0.0, float(status["ended"]) - self.started_wall)
        return Outcome(
            -int(sig) if sig else status.get("exit_code"),
            _tail(self.files.stderr, self._uid),
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
            if not self._supervisor_alive():
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
        return _read_ref(self._checkpoint_path, self._uid)

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
        names = Names(tenant_view(spec.tenant, job_id), spec.name, spec.user, alloc.node,
                      tenant_view(spec.tenant, spec.array) if spec.array is not None else None, spec.array_index)
        stdout = resolve(expand(spec.stdout, names), cwd) if spec.stdout else str(directory / "stdout")
        if spec.stderr:
            stderr = resolve(expand(spec.stderr, names), cwd)
        else:
            stderr = stdout if spec.stdout else str(directory / "stderr")
        devices = self._devices(alloc.node)
        # A process inherits the node's environment; a container keeps its image's (PATH, libraries).
        env = {} if spec.image else dict(os.environ)
        if run_as is not None and not spec.image:
            env = run_as.environment(env)  # another user's job keeps PATH and the locale, not the agent's rest
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
    ) -> _Attempt:
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
        return _Attempt(directory, plan, self.hierarchy, child, self._groups_of(job_id, attempt))

    def adopt(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> _Attempt | None:
        directory = self.attempt_dir(job_id, attempt)
        try:
            plan = json.loads((directory / shim.PLAN).read_text())
        except (OSError, ValueError):
            return None
        if not (directory / shim.STATUS).exists() and not _alive(directory / shim.SHIM_PID):
            return None  # planned, never started (or its supervisor was killed): nothing to watch
        self.cores.hold(alloc.node, job_id, attempt, plan.get("node_cpus", ()))
        return _Attempt(directory, plan, self.hierarchy, step_groups=self._groups_of(job_id, attempt))

    def released(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        self.cores.release(alloc.node, job_id, attempt)

    def running(self) -> list[tuple[str, int]]:
        """(job, attempt) of every supervisor still alive under ``state_dir`` (tests stop them with this)."""
        found = []
        for pid_file in sorted(self.state_dir.glob(f"*/*/{shim.SHIM_PID}")):
            if _alive(pid_file) and not (pid_file.parent / shim.STATUS).exists():
                found.append((pid_file.parent.parent.name, int(pid_file.parent.name)))
        return found


def default_spool(state_dir: Path) -> Path:
    """Where the jobs' own folders go when the agent is given none: for a root agent, which runs jobs as
    their users, ``/var/spool/horizon/<digest of the state dir>`` (as Slurm's SlurmdSpoolDir; no job
    learns the data dir's path from its files); for any other, beside the state dir (its jobs are its
    own user's anyway)."""
    if os.geteuid() == 0:
        digest = hashlib.sha1(str(Path(state_dir).absolute()).encode()).hexdigest()[:12]
        return Path("/var/spool/horizon") / digest
    return Path(state_dir).absolute().parent / "spool"


def spool_name(job_id: str, attempt: int) -> str:
    """The name of an attempt's own folder in the spool: ``+`` for the ``:`` of a tenant's job key ('+' is
    in no job id)."""
    return f"{job_id.replace(':', '+')}.{attempt}"


def private_dir(path: Path, owner: Identity | None = None, mode: int = 0o700) -> None:
    """``path`` made (parents too) with ``mode``, owned by ``owner`` when given (else by the agent)."""
    path.mkdir(parents=True, exist_ok=True)
    if owner is not None and os.geteuid() == 0:
        os.chown(path, owner.uid, owner.gid)
    os.chmod(path, mode)


def kill_attempts(state_dir: Path) -> int:
    """Kill every attempt still running under ``state_dir`` (its process group and cgroup); the
    supervisors record the ends. For tests and operators clearing a node: stopping an agent never does
    this. Returns how many were running."""
    killed = 0
    for pid_file in sorted(Path(state_dir).glob(f"**/{shim.SHIM_PID}")):
        directory = pid_file.parent
        if not _alive(pid_file) or (directory / shim.STATUS).exists():
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


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


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

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
        allocations: Sequence[c.NodeAllocation] = (),
    ) -> _Simulated:
        runtime = spec.sim_runtime_s if spec.sim_runtime_s is not None else spec.time_limit_s
        return _Simulated(runtime, spec.sim_exit_code)
