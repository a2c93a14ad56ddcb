"""The catalogue's vocabulary (the words some fields take) and the value objects nested inside events:
a job's resources, dependencies, tolerations and affinity, the validated ``JobSpec``, an allocation, a
node's devices, a quota."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

import events.vocabulary as vocab
from events.base import JobId, NodeId
from events.resources import MAX_CPUS_MILLI, MAX_MEMORY_BYTES

PRIORITY_CLASSES: tuple[str, ...] = ("critical", "high", "normal", "low", "scavenger")
RESTART_POLICIES: tuple[str, ...] = ("never", "on-failure", "always")
DEPENDENCY_KINDS: tuple[str, ...] = ("after-ok", "after-any", "after-not-ok", "after", "after-checkpoint")
TAINT_EFFECTS: tuple[str, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")

PriorityClass = Literal["critical", "high", "normal", "low", "scavenger"]
RestartPolicy = Literal["never", "on-failure", "always"]
DependencyKind = Literal["after-ok", "after-any", "after-not-ok", "after", "after-checkpoint"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

DEFAULT_ACCOUNT = "default"  # the account a submission names when it names none

# The defaults the schema's words state: submission's limits, a tenant's intake limits.
_LIMITS = vocab.Limits()
_TENANT_LIMITS = vocab.TenantLimits()
_MEMORY_FORMS = (
    "Memory: an integer number of bytes, or a string: a number then a unit in any case, blanks allowed "
    "around and between them: `b` bytes; `k m g t p` binary as in Slurm (`8g` = 8 GiB); `Ki Mi Gi Ti Pi` "
    "binary (`16Gi`); `KB MB GB TB PB` decimal (`16GB` = 16e9 bytes). No other unit (`8 GiB` is refused: "
    "`GiB` is not one). A fraction is rounded up to whole bytes, but a fraction of a byte without a unit "
    f"(`1.5`) is refused. At most {MAX_MEMORY_BYTES} bytes (1 EiB)."
)


class _Part(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Base of the value objects nested inside events.

    ``gc=False``: the cyclic collector does not track them. They are frozen and hold only strings,
    numbers, tuples, string maps and other value objects, so they can never be part of a reference
    cycle, and a queued job's ``JobSpec`` is then 512 bytes instead of 528: within CPython's small
    object allocator, which measured 1,168 -> see docs/benchmarks.md §2 (memory) resident bytes per
    queued job with it off."""


# --------------------------------------------------------------------------
# Value objects
# --------------------------------------------------------------------------


class ResourceRequest(_Part, kw_only=True):
    """Resources of one task, as a client writes them (validated by submission).

    ``cpus``: cores (``2``, ``2.5``, ``"500m"``); ``memory``: bytes or a string
    (``"16Gi"``, ``"8g"``); ``gpus``: whole GPUs; ``gpu_type``: ``"a100"`` or
    ``"h100-80gb"`` (type-variant), ``None`` for any; ``gpu_memory``: minimum
    memory per GPU.
    """

    cpus: Annotated[float | str, Meta(description=(
        "CPU cores per task: a number (`2`, `0.5`) or a string of cores (`\"2\"`) or millicores (`\"500m\"`, "
        f"lower-case `m`), more than 0 and at most {MAX_CPUS_MILLI // 1000:,} cores; finer than a millicore is "
        "rounded up."))] = 1
    # None: not given, so the job's partition's default memory per CPU or GPU applies (else 1 GiB).
    # The default stays "1Gi": a submission that leaves the field out means what it always meant.
    memory: Annotated[int | str | None, Meta(description=(
        _MEMORY_FORMS + " More than 0. `null`: not given; the partition's default memory per CPU "
        "or GPU, else 1 GiB. Left out: 1 GiB."))] = "1Gi"
    gpus: Annotated[int, Meta(description=(
        f"Whole GPUs per task (a JSON integer); at most {_LIMITS.max_gpus_per_job} in the whole job."))] = 0
    gpu_type: Annotated[str | None, Meta(description=(
        "A GPU model the cluster has: `type` or `type-variant` (`a100`, `h100-80gb`), any case, at most 64 "
        "characters; `null` (or empty): any model."))] = None
    gpu_memory: Annotated[int | str | None, Meta(description=_MEMORY_FORMS)] = None
    # Limits above the requests (Kubernetes' limits): what the job's cgroup may use on its node, per
    # task, in the forms of ``cpus`` and ``memory``. None: the request is the limit (what a job always
    # got). Requests equal to limits make a job "guaranteed", limits above them "burstable", and no
    # requests at all (``cpus`` 0, ``memory`` 0, no GPUs) "best-effort" (docs/jobs.md, QoS classes).
    cpu_limit: float | str | None = None
    memory_limit: int | str | None = None


class Dependency(_Part, kw_only=True):
    kind: Annotated[str, Meta(description=(
        "after-ok: it succeeded; after-not-ok: it ended without success; after-any: it ended; after: it "
        "started."))] = "after-ok"
    job_id: Annotated[JobId, Meta(description=(
        "The job (or array, or one task `<array>_<i>`) waited for; it may be submitted later. A client writes "
        "its own id; under accounts events carry it as `<tenant>:<id>`."))] = ""


class Toleration(_Part, kw_only=True):
    """Kubernetes-style: ``key`` empty with ``operator="Exists"`` tolerates everything."""

    key: Annotated[str, Meta(description="The taint's key; empty with `Exists` tolerates every taint.")] = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: Annotated[str, Meta(description="Empty tolerates every effect.")] = ""


class Taint(_Part, kw_only=True):
    key: Annotated[str, Meta(description="Letters, digits, `_ . / -`, starting and ending with a letter or digit.")]
    value: Annotated[str, Meta(description=(
        "Letters, digits, `_ . -`, starting and ending with a letter or digit; may be empty."))] = ""
    effect: Annotated[str, Meta(description="Empty only in an untaint (every effect).")] = "NoSchedule"


class AffinityTerm(_Part, kw_only=True):
    """Inter-job (anti-)affinity: jobs whose labels match ``match_labels``, within ``topology_key``."""

    match_labels: dict[str, str] = {}
    topology_key: str = "node"


class NodeSelectorRequirement(_Part, kw_only=True):
    """Required node affinity: ``key`` ``operator`` (In, NotIn, Exists, DoesNotExist) ``values``."""

    key: str
    operator: Annotated[str, Meta(description=(
        f"One of {', '.join(vocab.SELECTOR_OPS)} (Gt and Lt compare numbers, the first value); any other "
        "matches no node."))] = "In"
    values: list[str] = []


class Affinity(_Part, kw_only=True):
    node_required: list[NodeSelectorRequirement] = []
    node_preferred: list[NodeSelectorRequirement] = []
    job_affinity: list[AffinityTerm] = []
    job_anti_affinity: list[AffinityTerm] = []


class LimitSignal(_Part, kw_only=True):
    """A signal sent ``before_s`` seconds before the job's time limit (Slurm's ``--signal``).

    ``signal``: a name (``USR1``) or number (``10``); ``batch_only``: only to the job's main
    process (its batch shell, Slurm's ``B:``), else to every other process of the job, which is
    what Slurm signals without ``B:`` (its steps, not the batch shell)."""

    signal: Annotated[str, Meta(description="A signal name (`USR1`, `SIGUSR1`) or number (`10`).")]
    before_s: Annotated[float, Meta(description="How long before the time limit.")] = 60.0
    batch_only: Annotated[bool, Meta(description=(
        "To the job's main process (its batch shell) alone, Slurm's `B:`; else to every other process of the "
        "job."))] = False


class Component(_Part, kw_only=True):
    """One component after the first of a heterogeneous job (Slurm's ``#SBATCH hetjob``, ``sbatch A : B``):
    its own gang of ``nodes`` x ``tasks_per_node`` tasks, each with these resources, placed at once with
    the job's other components, on nodes of their own (docs/slurm.md, "Heterogeneous jobs"). The job's
    first component is the ``JobSpec``'s own shape; everything else (its partition, account, time limit,
    node selector, ...) is the job's, shared by every component. Each field means what the ``JobSpec``
    field of the same name means."""

    cpus_milli: int = 1000
    memory_bytes: int = 1 << 30
    gpus: int = 0
    gpu_type: str | None = None
    gpu_variant: str | None = None
    gpu_memory_bytes: int = 0
    nodes: int = 1
    tasks_per_node: int = 1
    ntasks: int = 0
    gpus_per_node: int = 0
    exclusive: bool = False
    whole_node_memory: bool = False
    constraint: str = ""
    cpu_limit_milli: int = 0
    memory_limit_bytes: int = 0


COMPONENT_FIELDS: tuple[str, ...] = Component.__struct_fields__  # the shape a component has of its own


class JobSpec(_Part, kw_only=True):
    """A validated, normalised job: what every service after submission reads.

    Sequences are tuples: immutable like the spec, and an empty one is a single
    shared object, which keeps a queued job's state small (it is held once per
    job by every service).
    """

    tenant: str
    account: str = "default"
    user: str = ""
    name: str = ""
    command: tuple[str, ...] = ()
    env: dict[str, str] = {}
    # The environment it starts from, as sbatch's --export took it from the submitting shell (None: the
    # node agent's); its own variables and ``env`` go over it (services/nodes/job_environment.py).
    # Specs holding equal ones share one map (services/domain/jobs.py compact).
    submit_env: dict[str, str] | None = None
    payload: Any = None
    # per task
    cpus_milli: int = 1000
    memory_bytes: int = 1 << 30
    gpus: int = 0
    gpu_type: Annotated[str | None, Meta(description=(
        "The GPU model's type in lower case (`h100`); `null`: any."))] = None
    gpu_variant: Annotated[str | None, Meta(description="The variant (`80gb`); `null`: any.")] = None
    gpu_memory_bytes: int = 0
    # gang shape: nodes x tasks_per_node tasks, each with the resources above
    nodes: int = 1
    tasks_per_node: int = 1
    # Slurm's --ntasks when fewer than nodes x tasks_per_node (0: all of them): the tasks laid out over
    # the nodes in order, each its tasks_per_node while leaving one for each node after it
    # (services/domain/steps.py task_layout: -N 3 -n 7 is 3,3,1); the gang holds nodes x tasks_per_node
    ntasks: int = 0
    time_limit_s: float = 3600.0
    scheduling_timeout_s: float | None = None
    priority_class: PriorityClass = "normal"
    nice: int = 0
    qos: str = ""
    profile: str = "default"
    # The partition it runs in (its nodes only); "" for none: accepted where no partition is defined,
    # or before partitions existed.
    partition: str = ""
    dependencies: tuple[Dependency, ...] = ()
    array: Annotated[JobId | None, Meta(description="The array's job id when this job is one of its tasks.")] = None
    array_index: int | None = None  # this task's index in the array
    array_max_running: int = 0  # the array's "%N": at most N of its tasks hold resources at once (0: no limit)
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    restart_policy: RestartPolicy = "never"
    max_retries: int = 0
    preemptible: bool = True
    min_runtime_s: float = 0.0
    checkpoint_signal: str | None = None
    labels: dict[str, str] = {}
    sim_runtime_s: float | None = None
    sim_exit_code: int = 0
    # where and how it runs (services/nodes/agent/): the submitter's working directory, Slurm-style output
    # patterns (%j %A %a %x %u %N %%; relative to cwd; "" = the agent's own file for the attempt,
    # stderr "" with stdout set = both streams in stdout, as Slurm) and a container image
    cwd: str = ""
    stdout: str = ""
    stderr: str = ""
    open_mode: str = "truncate"  # or "append": what a new attempt does to existing output files
    image: str = ""
    # Slurm's option forms and directives (docs/slurm.md). Each default means what the spec meant
    # before the field existed.
    gpus_per_node: int = 0  # > 0: GPUs each node holds for all its tasks to share (then gpus is 0)
    exclusive: bool = False  # whole nodes: all their CPUs and GPUs, and no other job beside it
    whole_node_memory: bool = False  # all the memory of each node (--mem=0; memory_bytes is then 0)
    constraint: str = ""  # node features: a | b, a & b, (..), [a | b] (one alternative for all nodes)
    nodelist: tuple[str, ...] = ()  # it runs on exactly these nodes (--nodelist)
    exclude_nodes: tuple[str, ...] = ()  # never on these (--exclude)
    requeue: bool = True  # requeued when its node is lost or it is preempted; False: it ends then
    time_min_s: float = 0.0  # > 0: backfill may start it with a shorter limit, down to this
    limit_signal: LimitSignal | None = None  # sent before the time limit
    singleton: bool = False  # starts only when no other job of its tenant, user and name runs
    hold: bool = False  # accepted held (Slurm's --hold): it waits for a release
    begin_ts: float = 0.0  # it starts no earlier than this (Slurm's --begin; 0: as soon as it can)
    # it ends (DEPENDENCY_NEVER_SATISFIED, reason "timeout") if its dependencies are not all met this
    # long after acceptance (None: it waits for them forever)
    dependency_timeout_s: float | None = None
    # Slurm's --deadline: it ends (UNSCHEDULABLE, reason "deadline") while pending once it could no longer
    # end by then (now + its time limit, or time_min_s, > deadline_ts); 0: no deadline
    deadline_ts: float = 0.0
    # datasets it waits for: it starts only once each was announced available (DatasetAvailable,
    # --dependency afterdata:NAME); sorted, no duplicates
    after_datasets: tuple[str, ...] = ()
    # the datasets it reads (horizon submit --dataset): placement's ``locality`` score prefers nodes
    # that hold them (NodeDatasetsChanged); sorted, no duplicates
    datasets: tuple[str, ...] = ()
    # Licenses it holds while it holds its resources (Slurm's -L): name -> count, sorted by name; it starts
    # only when that many of each are free (services/domain/licenses.py). Empty: none.
    licenses: dict[str, int] = {}
    # per task, what its cgroup may use beyond the request (Kubernetes' limits; 0: the request is the
    # limit, as before the fields existed, or no limit at all for a job that requests none of it). The
    # QoS class follows from requests and limits (services/domain/qos.py).
    cpu_limit_milli: int = 0
    memory_limit_bytes: int = 0
    # Who it runs as on its nodes (services/nodes/backends/process/identity.py): the authenticated user's Unix identity,
    # stamped by the submission core from the operator's ``UserConfigured`` under accounts. None: the
    # node resolves ``user`` in its passwd (without accounts), or runs it as the agent's own user.
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()

    # An elastic gang (Slurm's ``--nodes MIN-MAX``, Volcano's ``minAvailable``): ``nodes`` is its most,
    # ``min_nodes`` its least; it starts at the largest size that fits, grows toward ``nodes`` and may be
    # shrunk down to ``min_nodes`` instead of preempted (``JobResized``). 0: a rigid job of ``nodes``.
    min_nodes: int = 0
    # a multi-node gang still pending this long after acceptance (or requeue) without assembling its
    # least size ends UNSCHEDULABLE, reason "assembly timeout: ..." (None: it waits)
    assembly_timeout_s: float | None = None
    # The job's number, Slurm's numeric job id (``sbatch``'s ``Submitted batch job 4213``): given by the
    # submission core when it accepts the job, counting up from 1 per numbering scope (the whole cluster,
    # or under accounts each tenant's intake on its own; services/domain/job_numbers.py). An array's
    # tasks get consecutive numbers and ``array_number``, the array's, is its first task's (``4213_7``).
    # 0: a job accepted before numbers existed (it is known by its id alone).
    number: Annotated[int, Meta(description=(
        "The job's number, Slurm's numeric job id (`4213`), given at acceptance: consecutive per numbering scope "
        "(the cluster; under accounts each tenant's own); 0 for a job accepted before numbers existed."))] = 0
    array_number: Annotated[int, Meta(description=(
        "A task of an array: the array's number, its first task's (the task is `<array_number>_<index>`); "
        "0 otherwise."))] = 0
    # A heterogeneous job (Slurm's hetjob): its components after the first, the first being this spec's own
    # shape. Its allocations list component 0's nodes first, then component 1's, ... (each component's
    # ``nodes`` of them: services/domain/hetjob.py). Empty: an ordinary job of one shape.
    components: Annotated[tuple[Component, ...], Meta(description=(
        "A heterogeneous job's components after the first (Slurm's `#SBATCH hetjob`): each its own nodes, tasks "
        "and resources per task, placed at once with the first (this spec's own shape) on nodes of their own. "
        "Empty: a job of one shape."))] = ()

    @property
    def elastic(self) -> bool:
        """Whether the job may run on fewer nodes than ``nodes`` (down to ``min_nodes``)."""
        return 0 < self.min_nodes < self.nodes

    @property
    def least_nodes(self) -> int:
        """The fewest nodes it runs on: ``min_nodes`` of an elastic job, else ``nodes``."""
        return self.min_nodes if self.elastic else self.nodes

    @property
    def gpus_on_node(self) -> int:
        """The GPUs the job holds on each node: shared by its tasks there, or theirs one by one."""
        return self.gpus_per_node or self.gpus * self.tasks_per_node

    @property
    def total_gpus(self) -> int:
        return self.gpus_on_node * self.nodes


class NodeAllocation(_Part, kw_only=True):
    """What one job holds on one node: the exact devices, CPUs and memory."""

    node: NodeId
    device_ids: list[str] = []
    cpus_milli: int = 0
    memory_bytes: int = 0
    tasks: int = 1


class GpuDevice(_Part, kw_only=True):
    id: str
    type: str
    variant: str | None = None
    memory_bytes: int = 0
    numa_node: int = 0
    interconnect: str = ""  # e.g. "nvlink-0": devices sharing a fabric
    uuid: str = ""  # the driver's id (NVML), what CUDA_VISIBLE_DEVICES names on a real node
    minor: int | None = None  # /dev/nvidia<minor>: the device file a job's cgroup is allowed
    health: str = ""  # "" healthy; else why not (an XID error, lost from the bus): placement skips it


class ForeignUse(_Part, kw_only=True):
    """What work its backend did not place holds on a node (a job submitted straight to Slurm): *used*
    capacity, never smaller totals. Placement counts it as taken; whether a job could ever fit is judged
    on the node's totals, which it leaves alone (docs/backends.md)."""

    cpus_milli: int = 0
    memory_bytes: int = 0
    devices: list[str] = []  # the GPUs it holds, by the node's device ids
    jobs: list[str] = []  # that work as its backend names it (Slurm's job ids)


class Quota(_Part, kw_only=True):
    """Per-account limits; ``None`` means unlimited."""

    gpus: Annotated[int | None, Meta(description="`null`: unlimited.")] = None
    cpus_milli: int | None = None
    memory_bytes: int | None = None
    running_jobs: Annotated[int | None, Meta(description="`null`: unlimited.")] = None
    gpus_by_type: dict[str, int] = {}
    # Where a limit comes from when a quota provider set it (docs/backends.md, "Quota providers"):
    # dimension ("gpus", "cpus_milli", "memory_bytes", "running_jobs", "type:<gpu type>") -> e.g.
    # "Slurm QOS gpuq GrpTRES". Named in the reason of a job the limit holds back; empty: set in Horizon.
    sources: dict[str, str] = {}


class BlockReason(_Part, kw_only=True):
    """One line of a 'could not place' explanation: ``count`` nodes rejected for ``reason``."""

    reason: str
    nodes: int = 0
    filter: str = ""
