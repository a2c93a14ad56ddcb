"""What an execution backend is to Horizon, in four layers: a ``Backend`` offers nodes and follows the log;
its ``Executor`` runs one attempt of a job; an ``Execution`` is an attempt that runs; an ``Outcome`` is how
it ended (docs/backends.md).

**Backend.** It talks to the rest of Horizon through the log alone. The contract, in events
(``events/catalogue/``), is the node agent's, unchanged:

* **nodes in**: ``NodeRegistered`` for each node it offers (``backend`` names it: "" the node agent,
  "slurm" ...), again whenever a node's capacity or devices change (the id digests the body, so an
  unchanged node is stored once), and a heartbeat per node on ``horizon.hb.<node>``; a node its own
  system takes out of service is drained through inventory (``NodeCommandIssued`` drain / uncordon,
  user ``slurm``) like an operator's;
* **bind**: it follows the log and takes the ``JobScheduled`` whose first allocation is on one of its
  nodes (``AgentCore.mine``), with the nodes, CPUs, memory and devices placement chose; it also takes
  ``JobStopRequested`` (a cancel: stop, report ``JobCancelled``), ``PreemptionRequested`` (checkpoint
  signal, then stop within the grace, report ``JobPreempted``) and endings decided by others (stop
  silently);
* **status out**: ``JobStarted`` when the job runs, then exactly one of ``JobSucceeded``,
  ``JobFailed`` (exit code, reason), ``JobCancelled``, ``JobPreempted``, each with the id
  ``agent/<Type>/<job>/<attempt>`` so that a report sent twice is stored once;
* **restart**: it catches up with the log, adopts what still runs (never starting an attempt twice),
  and reports what ended or was lost while it was away (``AgentCore.resume``).

``NodeAgent`` (``services/nodes/agent/app.py``) is the first implementation: it carries out that contract
over any ``Executor``. The process executor (``services/nodes/backends/process/executors.py``:
``ProcessExecutor``, and ``SimExecutor`` for simulated jobs) runs attempts on its own machine; the Slurm
backend (``services/nodes/backends/slurm/``) is the same agent over a Slurm cluster's executor, plus a
watch of the cluster's nodes.

**Executor, Execution, Outcome.** ``Executor.start`` starts an attempt and returns its ``Execution``;
``Execution.wait`` returns an ``Outcome`` when the job ends by itself; ``stop`` ends it early (SIGTERM,
then SIGKILL after the grace period). The agent enforces the time limit by calling ``stop`` when it
passes, and calls it for a cancel, a preemption or an eviction too.

Capabilities some executions have, asked for by the agent (``isinstance`` on these protocols): a
``MemoryMeasured`` one tells its working set (the memory-pressure watch), a ``Resizable`` one is told
its new world size, a ``Signallable`` one takes Slurm's ``--signal``. An executor whose jobs are
processes on the agent's own machine says so with ``processes_here``: the agent then serves the job
steps (``srun``) inside them (``services/nodes/agent/steps.py``) and watches their memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from events import catalogue as c
from services.nodes.backends.process.cgroups import Hierarchy, Limits

__all__ = ["Backend", "Executor", "ProcessHost", "Execution", "MemoryMeasured", "Resizable", "Signallable",
           "ServesOutput", "Outcome", "Files"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended."""

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
    """One attempt that runs (or ran): what ``Executor.start`` and ``Executor.adopt`` return. One whose
    backend chooses the GPUs itself may also have ``devices`` (node -> the device ids it really got),
    which the agent reports with ``JobStarted`` when they are not the placement's."""

    pid: int | None
    files: Files
    started_wall: float | None  # when the process started (wall clock), if the executor knows

    async def wait(self) -> Outcome:
        """Until the attempt ends by itself."""
        ...

    async def stop(self, grace_period_s: float) -> Outcome:
        """End it: SIGTERM, SIGKILL after ``grace_period_s``."""
        ...

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        """Send the job its checkpoint signal; the reference it wrote within ``timeout_s`` (or before
        it exited), else ``None``."""
        ...

    def checkpoint_ref(self) -> str | None:
        """The checkpoint reference the job has written, if any."""
        ...


@runtime_checkable
class MemoryMeasured(Protocol):
    """An execution whose working set the agent can read (its cgroup's)."""

    def memory_used(self) -> int | None:
        """The attempt's working set now; None when it cannot be read."""
        ...


@runtime_checkable
class Resizable(Protocol):
    """An execution an elastic job's new size can be told to (``services/nodes/backends/process/resize.py``)."""

    def resized(self, world: Mapping[str, str]) -> bool:
        """Tell the job its new world size; False when it has ended, is not elastic, or knows it already."""
        ...


@runtime_checkable
class Signallable(Protocol):
    """An execution that takes Slurm's ``--signal`` (``services/nodes/backends/process/signals.py``)."""

    def signal_job(self, number: int, batch_only: bool) -> int:
        """Send ``number`` as ``--signal`` says; how many processes got it."""
        ...


@runtime_checkable
class ServesOutput(Protocol):
    """An executor whose jobs' output is not in files under a ``state_dir`` (the Kubernetes backend's pods:
    their container's log): the agent's ``horizon.logs.<node>`` answers come from it."""

    async def read_output(self, node: str, request: dict[str, Any], tenant: str | None) -> dict[str, Any]:
        """The answer to one output request, in the shape of ``services/nodes/agent/logs.py``'s."""
        ...


class Executor(Protocol):
    """Runs attempts of jobs on a backend's nodes."""

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

    def processes_here(self) -> ProcessHost | None:
        """Itself when its jobs are processes on this machine (the agent then serves their job steps and
        watches their memory); None when they run elsewhere (Slurm's nodes) or nowhere (simulated)."""
        ...


class ProcessHost(Executor, Protocol):
    """An executor whose jobs are processes on this machine, confined in cgroups where it has them: what
    the agent's job steps (``services/nodes/agent/steps.py``) run beside them with."""

    spool_dir: Path  # the jobs' own folders (sockets and shims for srun go beside them)
    hierarchy: Hierarchy  # the cgroups jobs are confined in (``usable`` False: none)
    # Set by the agent's job steps: the socket srun asks on, per attempt; the folder of Horizon's srun
    # and scontrol, first on a job's PATH; the process groups of an attempt's step tasks here.
    step_socket: Callable[[str, int], str] | None
    shims_dir: Path | None
    step_groups: Callable[[str, int], set[int]] | None

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        """The supervisor's folder of an attempt (its plan, pids and status)."""
        ...

    def limits(self, job_id: str, attempt: int, spec: c.JobSpec,
               alloc: c.NodeAllocation) -> tuple[tuple[int, ...], Limits]:
        """The CPUs the attempt is pinned to on ``alloc.node`` (taken until ``released``) and its cgroup's
        limits there."""
        ...


class Backend(Protocol):
    """A running execution backend (see the module doc for its events)."""

    ready: asyncio.Event  # set once it has registered its nodes and caught up with the log

    async def start(self) -> None:
        """Register the nodes, catch up with the log, adopt or report what it finds, follow the log."""
        ...

    async def stop(self) -> None:
        """Stop following the log; jobs a detached backend runs (Slurm's, supervised processes) run on."""
        ...
