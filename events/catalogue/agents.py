"""Node agents' reports: ``horizon.evt.agent.<Type>.<job_id | node>``."""

from __future__ import annotations

from events.base import Event, JobId, NodeId
from events.catalogue.values import ForeignUse, GpuDevice, Taint, _Part


class JobStarted(Event, tag="JobStarted", kw_only=True):
    job_id: JobId
    attempt: int
    node: NodeId
    pid: int | None = None
    stdout: str = ""  # the files the attempt writes on its node (horizon logs reads them through the agent)
    stderr: str = ""
    cwd: str = ""
    # node -> the GPUs the attempt really holds there, when its backend chose them and they differ
    # from the placement's (Slurm's IDX): the ledger follows them; empty: the placement's
    devices: dict[NodeId, list[str]] = {}


class JobSucceeded(Event, tag="JobSucceeded", kw_only=True):
    job_id: JobId
    attempt: int
    node: NodeId = ""
    exit_code: int = 0
    runtime_s: float = 0.0


class JobFailed(Event, tag="JobFailed", kw_only=True):
    job_id: JobId
    attempt: int
    node: NodeId = ""
    exit_code: int | None = None
    reason: str = ""
    stderr_tail: str = ""
    runtime_s: float = 0.0
    basis_seq: int = 0  # set when a service decides the failure (e.g. node lost); 0 for an agent's report
    node_lost: bool = False  # the node was lost or removed under the job: requeued whatever its restart policy
    out_of_memory: bool = False  # killed for going over its memory limit: the job ends OUT_OF_MEMORY
    # stopped by inventory because its node ran short of memory (NodeMemoryPressure): a best-effort job,
    # or a burstable one over its request; its restart policy decides what follows, as for any failure
    evicted: bool = False


class JobStepStarted(Event, tag="JobStepStarted", kw_only=True):
    """A job step began: an ``srun`` inside the job launched its command once per task, ``tasks``
    of them on ``nodes`` (``tasks_per_node`` in the same order; the first is the batch node's
    agent, which reports it). Steps are numbered 0, 1, ... per attempt (sacct's ``JOBID.0``).
    ``name``: the command's name (its first word, without directories), not the command line."""

    job_id: JobId
    attempt: int
    step: int
    name: str = ""
    nodes: list[NodeId] = []
    tasks: int = 0
    tasks_per_node: list[int] = []
    cpus_per_task: int = 0  # srun's -c (0: not given)
    gpus_per_task: int = 0  # srun's --gpus-per-task (0: each task sees its node's GPUs of the step)
    gpus: int = 0  # the distinct GPUs the step's tasks see, over all its nodes


class JobStepEnded(Event, tag="JobStepEnded", kw_only=True):
    """A job step ended. ``exit_code``: the highest exit code of its tasks; ``signal``: the highest
    signal that killed one (0: none); ``task_exit_codes``: each task's, by rank (``-N``: killed by
    signal N; ``None``: its end is unknown, e.g. its node's agent was lost). ``cancelled``: stopped
    (srun was signalled or killed, the job ended, ``--kill-on-bad-exit``); ``timed_out``: srun's
    ``--time`` ran out. ``reason`` says why it was stopped, or why it could not run. A failed step
    does not fail the job: the batch script decides (srun exits non-zero)."""

    job_id: JobId
    attempt: int
    step: int
    name: str = ""
    nodes: list[NodeId] = []
    tasks: int = 0
    exit_code: int = 0
    signal: int = 0
    task_exit_codes: list[int | None] = []
    started_ts: float = 0.0
    runtime_s: float = 0.0
    cancelled: bool = False
    timed_out: bool = False
    reason: str = ""


class JobMemoryUse(_Part, kw_only=True):
    """One attempt's memory in use on a node, as its agent measured it (its cgroup's usage)."""

    job_id: JobId
    attempt: int
    used_bytes: int


class NodeMemoryPressure(Event, tag="NodeMemoryPressure", kw_only=True):
    """An agent's observation: the jobs on ``node`` use more memory than it may give them, the
    node's ``memory_bytes`` less the ``reserve_bytes`` kept free (the kubelet's eviction threshold).
    ``jobs``: every attempt's use, by job id. Inventory answers by evicting (``JobFailed`` with
    ``evicted``) best-effort jobs first, then burstable ones over their request, until the use it
    measured, less what the evicted used, is under the line (``services/domain/qos.py``). Not a
    decision: the agent's measure, which the log keeps as an input that replays."""

    node: NodeId
    memory_bytes: int
    reserve_bytes: int = 0
    used_bytes: int = 0
    jobs: list[JobMemoryUse] = []


class NodeRegistered(Event, tag="NodeRegistered", kw_only=True):
    node: NodeId
    cpus_milli: int
    memory_bytes: int
    gpus: list[GpuDevice] = []
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    agent: str = ""
    isolation: str = ""  # how the agent confines jobs, e.g. "cgroup v1 (memory cpu cpuset pids devices)"; "none: ..."
    simulated: bool = False  # a development node: its GPUs (and CPUs beyond the machine's) are not real
    # the execution backend that offers the node and runs its jobs (docs/backends.md): "" the node
    # agent (every node registered before backends existed), "slurm" a Slurm partition's node
    backend: str = ""
    # what work the backend did not place holds there now (a registration says it again when it changes)
    foreign: ForeignUse | None = None
