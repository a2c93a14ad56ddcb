"""The catalogue: every event Horizon records, one frozen Struct per type.

Naming: facts in the past tense (``JobScheduled``); a request to another
party ends in ``Requested`` (``JobCancelRequested``). Units are in field
names (``memory_bytes``, ``time_limit_s``, ``cpus_milli``). New fields always
get a default, so an older reader and a newer writer can share the log.

Two shapes of a job exist on purpose:

* ``JobSubmitted`` is what a client publishes, from any language. Its fields
  are loosely typed (``memory: "16Gi" | 17179869184``, enumerations as plain
  strings) so that a *wrong value* decodes and earns a ``JobRejected`` with a
  reason, rather than dying as an undecodable message.
* ``JobSpec`` (inside ``JobAccepted``) is the validated, normalised form that
  every service after submission reads: integers in base units, known
  enumerations.

A field's meaning in the published schema is written beside it
(``Annotated[T, Meta(description=...)]``, which changes nothing on the wire);
an event's is its docstring. ``events/payloads.py`` adds what a field's name
says by convention and what the services check beyond the type.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import Meta

from events import vocabulary as vocab
from events.arrays import MAX_INDEX
from events.base import Event, JobId, NodeId
from events.resources import MAX_CPUS_MILLI, MAX_MEMORY_BYTES

# --------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Client inputs: horizon.in.<tenant>.<verb>
# --------------------------------------------------------------------------


class JobSubmitted(Event, tag="JobSubmitted", kw_only=True):
    """A client asks Horizon to run a job. Subject ``horizon.in.<tenant>.submit``,
    ``Nats-Msg-Id`` = ``job_id`` (a retried publish is a duplicate).

    Version history: v1 had flat ``cpus``/``memory``/``gpus``/``gpu_type`` and
    ``time_limit_min``; v2 nests them in ``resources`` and uses ``time_limit_s``
    (see ``events.codec.upcast_job_submitted_v1_v2``).
    """

    VERSION: ClassVar[int] = 2
    v: int = 2

    job_id: JobId
    tenant: str
    # under accounts, the tenant's own account (docs/tenants.md)
    account: Annotated[str, Meta(description=(
        "The fair-share and quota account charged (a token); empty means `default`. Under accounts it must be "
        "open to the tenant."))] = DEFAULT_ACCOUNT
    user: str = ""
    name: Annotated[str, Meta(description="A name for people; empty means the job id.")] = ""
    command: Annotated[list[str], Meta(description=(
        f"The argv to run, one element per argument (no shell); at most {_LIMITS.max_command_bytes:,} "
        "characters in all. Required unless the job is simulated (`sim_runtime_s`) or carries a `payload`."))] = []
    env: Annotated[dict[str, str], Meta(description="Environment variables of the job's process.")] = {}
    payload: Annotated[Any, Meta(description=(
        "Opaque JSON for an external executor; Horizon passes it through."))] = None
    resources: ResourceRequest = ResourceRequest()
    nodes: Annotated[int, Meta(description="Nodes of the gang.")] = 1
    tasks_per_node: Annotated[int, Meta(description=(
        "Tasks on each node; the job needs nodes x tasks_per_node tasks, placed all at once."))] = 1
    time_limit_s: Annotated[float | None, Meta(description=(
        "Its run-time limit, also the estimate backfill uses; `null`: the cluster's default "
        f"({_LIMITS.default_time_limit_s:g} s unless configured otherwise)."))] = None
    scheduling_timeout_s: Annotated[float | None, Meta(description=(
        "How long it may wait to start before it ends JobUnschedulable; `null` waits for ever."))] = None
    priority_class: Annotated[str, Meta(description="Its priority class, highest first.")] = "normal"
    nice: Annotated[int, Meta(description=(
        "Lowers its priority within the class; only an operator (horizon.in._admin.update) may set it below 0."))] = 0
    qos: str = ""
    profile: str = "default"
    partitions: Annotated[list[str], Meta(description=(
        "Slurm's `-p a,b`: the partitions it may run in; the first that can run it is taken. Empty: the default "
        "partition. A name the cluster does not define runs in the default one with a warning, or is refused "
        "(PartitionPolicyConfigured)."))] = []
    dependencies: list[Dependency] = []
    array: Annotated[str | None, Meta(description=(
        "Makes it a job array (Slurm's --array): indices and ranges, a range optionally with a step, then "
        "optionally %N, at most N running at once: `0-99`, `0-99%10`, `1,3,5-7`, `0-15:4`. Indices 0 to "
        f"{MAX_INDEX}, at most {_LIMITS.max_array_tasks:,} tasks; task i is the job `<job_id>_<i>`."))] = None
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    restart_policy: Annotated[str, Meta(description="Whether a job that ended is run again.")] = "never"
    max_retries: Annotated[int, Meta(description="How often its restart policy may requeue it.")] = 0
    preemptible: bool = True
    min_runtime_s: Annotated[float, Meta(description="It is not preempted before it ran this long.")] = 0.0
    checkpoint_signal: Annotated[str | None, Meta(description=(
        "The signal asking the job to checkpoint before a preemption, e.g. `SIGUSR1`; `null`: it does not."))] = None
    labels: dict[str, str] = {}
    sim_runtime_s: Annotated[float | None, Meta(description="The simulated executor's run time.")] = None
    sim_exit_code: int = 0
    # absolute; the submitter's working directory (horizon submit records it)
    cwd: Annotated[str, Meta(description="Its working directory: an absolute path (or empty: the agent's).")] = ""
    # Slurm's --output pattern
    stdout: Annotated[str, Meta(description=(
        "Where its standard output goes: a path relative to cwd, with Slurm's %j %A %a %x %u %N %% patterns; "
        "empty: the agent's own file."))] = ""
    # Slurm's --error pattern
    stderr: Annotated[str, Meta(description=(
        "Where its standard error goes, as stdout; empty with stdout set: into stdout."))] = ""
    # Slurm's --open-mode: truncate or append
    open_mode: Annotated[str, Meta(description="What a new attempt does to existing output.")] = "truncate"
    image: Annotated[str, Meta(description=(
        "A container image to run the command in (Podman on the node); empty: none."))] = ""
    # Slurm's option forms and directives (horizon sbatch); what each does: JobSpec's fields of the
    # same names and docs/slurm.md.
    gpus_per_node: Annotated[int, Meta(description=(
        "GPUs each node holds for all its tasks to share, each task seeing them all (Slurm's `--gres=gpu:N` "
        "with several tasks per node); 0: `resources.gpus` per task, which it excludes."))] = 0
    exclusive: Annotated[bool, Meta(description=(
        "Whole nodes (Slurm's `--exclusive`): it starts only on nodes nothing runs on and holds all their CPUs "
        "and GPUs."))] = False
    whole_node_memory: Annotated[bool, Meta(description=(
        "All the memory of each node (Slurm's `--mem=0`); `resources.memory` is then not read."))] = False
    constraint: Annotated[str, Meta(description=(
        "Node features (Slurm's `--constraint`): names joined by `&` and `|`, one level of parentheses, one "
        "`[a|b]` (one alternative for all nodes). A node's features: its GPU models, the names in its "
        "`features` label, its labels set to `true`."))] = ""
    nodelist: Annotated[list[str], Meta(description=(
        "Slurm host lists (`node[01-04]`): it runs on exactly these nodes, as many as `nodes`."))] = []
    exclude_nodes: Annotated[list[str], Meta(description="Slurm host lists of nodes it never runs on.")] = []
    requeue: Annotated[bool, Meta(description=(
        "Requeued when its node is lost or it is preempted (Slurm's `--requeue`); `false`: it ends then "
        "(`--no-requeue`)."))] = True
    time_min_s: Annotated[float | None, Meta(description=(
        "Slurm's `--time-min`: backfill may start it with a shorter limit, down to this, when its own would "
        "delay a reservation (at most `time_limit_s`)."))] = None
    limit_signal: Annotated[LimitSignal | None, Meta(description=(
        "Slurm's `--signal`: a signal sent `before_s` seconds before its time limit; `null`: none."))] = None
    singleton: Annotated[bool, Meta(description=(
        "Slurm's `--dependency=singleton`: it starts only when no other job of its tenant, user and name runs, "
        "nor waits ahead of it."))] = False
    hold: Annotated[bool, Meta(description="Accepted held (Slurm's `--hold`): it waits for a release.")] = False
    begin_ts: Annotated[float | None, Meta(description="Slurm's `--begin`: it starts no earlier than this.")] = None
    dependency_timeout_s: float | None = None  # give up when dependencies are not met this long after acceptance
    deadline_ts: float | None = None  # Slurm's --deadline (seconds since the epoch): ends if it cannot end by then
    after_datasets: list[str] = []  # datasets it waits for (DatasetAvailable; --dependency afterdata:NAME)
    datasets: list[str] = []  # the datasets it reads: placement prefers nodes that hold them
    # An elastic gang: ``nodes`` is the most, ``min_nodes`` the least (Slurm's --nodes MIN-MAX);
    # ``min_available``: the least number of its tasks (Volcano's minAvailable), rounded up to whole nodes
    # of ``tasks_per_node``. Neither given: a rigid job of ``nodes``.
    min_nodes: Annotated[int | None, Meta(description=(
        "The least nodes of an elastic gang (Slurm's --nodes MIN-MAX): `nodes` is then its most; it starts at "
        "the largest size that fits and grows or shrinks between them."))] = None
    min_available: Annotated[int | None, Meta(description=(
        "The least tasks of an elastic gang (Volcano's minAvailable), rounded up to whole nodes of "
        "tasks_per_node."))] = None
    assembly_timeout_s: Annotated[float | None, Meta(description=(
        "A gang that has not assembled its least size this long after it became pending ends JobUnschedulable "
        "(reason `assembly timeout: ...`); `null` waits."))] = None


class JobCancelRequested(Event, tag="JobCancelRequested", kw_only=True):
    """``horizon.in.<tenant>.cancel``."""

    job_id: JobId
    tenant: str
    reason: str = ""
    user: str = ""


class JobHoldRequested(Event, tag="JobHoldRequested", kw_only=True):
    """``horizon.in.<tenant>.hold``: keep a pending job from starting until released."""

    job_id: JobId
    tenant: str
    reason: str = ""
    user: str = ""


class JobReleaseRequested(Event, tag="JobReleaseRequested", kw_only=True):
    """``horizon.in.<tenant>.release``."""

    job_id: JobId
    tenant: str
    user: str = ""


class JobUpdateRequested(Event, tag="JobUpdateRequested", kw_only=True):
    """``horizon.in.<tenant>.update``: change the priority class or nice of a pending job."""

    job_id: JobId
    tenant: str
    priority_class: Annotated[str | None, Meta(description="The new class; `null`: unchanged.")] = None
    nice: Annotated[int | None, Meta(description=(
        "The new nice (below 0: operators only); `null`: unchanged."))] = None
    user: str = ""


# Operator inputs: horizon.in._admin.<verb>


class NodeCommandIssued(Event, tag="NodeCommandIssued", kw_only=True):
    """``horizon.in._admin.node``: an operator cordons, uncordons, drains, removes, taints or untaints a node.

    ``taint`` / ``untaint`` carry the ``taint`` (untaint matches by key and effect);
    ``add-datasets`` / ``remove-datasets`` carry the dataset names the node now holds or no longer holds.
    """

    node: NodeId
    action: str  # cordon | uncordon | drain | remove | taint | untaint | add-datasets | remove-datasets
    reason: str = ""
    user: str = ""
    taint: Annotated[Taint | None, Meta(description=(
        "For taint and untaint (untaint matches by key, and by value and effect where they are not empty)."))] = None
    datasets: list[str] = []  # for add-datasets / remove-datasets
    # for "set" (horizon node set NODE --cpu-overcommit R --mem-overcommit R): the node's overcommit
    # ratios, requests of burstable and best-effort jobs packed against capacity x ratio (None: unchanged)
    cpu_overcommit: float | None = None
    memory_overcommit: float | None = None
    # for "drain" (horizon node drain NODE --migrate --deadline D): move the node's checkpointable jobs
    # away (checkpoint, requeue, resume elsewhere), and stop what still runs there deadline_s after the
    # command (None: the other jobs run to their end, as a plain drain)
    migrate: Annotated[bool, Meta(description=(
        "For drain: checkpoint the node's checkpointable jobs now and requeue them to resume elsewhere."))] = False
    deadline_s: Annotated[float | None, Meta(description=(
        "For drain: stop what still runs on the node this long after the command (requeued, or ended if it may "
        "not be); `null`: the jobs run to their end."))] = None
    # for "drain": the grace each stopped job gets to checkpoint and exit (kubectl drain's --grace-period);
    # None: inventory's eviction grace, 30 s
    grace_s: Annotated[float | None, Meta(description=(
        "For drain: the time each stopped job gets to checkpoint and exit; `null`: inventory's eviction grace, "
        "30 s."))] = None


class AccountConfigured(Event, tag="AccountConfigured", kw_only=True):
    """``horizon.in._admin.account``: an account in the fair-share tree, its shares and quota.

    ``parent`` None puts the account under the root. ``borrowing``: jobs of this
    account may run beyond its quota on the unused quota of idle sibling accounts
    (a Kueue cohort); such jobs are marked ``borrowed`` and are the first to be
    reclaimed. ``priority_boost`` is added to its jobs' multifactor priority.
    ``max_priority_class``: the highest class a tenant may give a job of this
    account or of any account below it (at submission or by an update);
    ``None``, the default, sets no limit. Operators are not limited.
    Configuring an account again replaces its whole configuration.
    """

    account: Annotated[str, Meta(description=(
        "The account's name (no `/`); a job names it in `account`, so a subject token is best."))]
    parent: Annotated[str | None, Meta(description="`null`: under the root.")] = None
    shares: Annotated[float, Meta(description="Its fair-share weight among its siblings.")] = 1.0
    quota: Quota = Quota()
    borrowing: bool = False
    priority_boost: float = 0.0
    user: str = ""
    max_priority_class: PriorityClass | None = None
    # The tenants whose jobs may charge this account (``horizon account set NAME --tenant T``);
    # empty: any tenant's. A tenant's submission naming an account not open to it is rejected.
    tenants: Annotated[list[str], Meta(description=(
        "The tenants whose jobs may charge it; empty: any tenant's."))] = []


class UserConfigured(Event, tag="UserConfigured", kw_only=True):
    """``horizon.in._admin.user``: a user of a tenant (``horizon user add``, and the tenant's own login
    at ``horizon tenant add``) and the Unix identity its jobs run as.

    Under accounts every input a tenant's user sends reaches the log through the intake, which stamps
    the user the server authenticated (``Horizon-User``); the submission core gives that user's jobs
    ``uid``, ``gid`` and ``groups`` from here. ``name`` is the Horizon user (a tenant's own login is
    named like the tenant); ``unix_user`` the passwd name it was mapped from, if any. ``uid`` 0 is
    refused unless ``allow_root`` (the operator said so explicitly). Configuring a user again replaces it.
    """

    tenant: str
    name: str
    uid: int
    gid: int
    groups: list[int] = []
    unix_user: str = ""
    allow_root: bool = False
    user: str = ""


class TenantConfigured(Event, tag="TenantConfigured", kw_only=True):
    """``horizon.in._admin.tenant``: a tenant's limits at the door (``horizon tenant set``).

    Under accounts every tenant has them, on by default (docs/tenants.md, Limits and fairness):
    ``max_inputs_per_s`` with ``burst`` is a token bucket the intake applies before it stores an
    input (an input over it is refused with a 429 answer and never reaches the log); the other
    three the submission core applies to a tenant's submissions, rejecting one that would pass
    them with a ``JobRejected`` whose ``limit`` names it. A field left out (``null``) takes the
    default; 0 is no limit. Configuring a tenant again replaces all its limits. Operators' inputs
    and a server without accounts are not limited.
    """

    tenant: Annotated[str, Meta(description="The tenant (`horizon tenant add NAME`).")]
    max_inputs_per_s: Annotated[float | None, Meta(description=(
        f"Inputs a second the intake stores for it, on average; `null`: {_TENANT_LIMITS.max_inputs_per_s:g}; 0: "
        "no limit."))] = None
    burst: Annotated[int | None, Meta(description=(
        f"Inputs it may send at once before the rate applies; `null`: {_TENANT_LIMITS.burst}; 0: one second's "
        "worth."))] = None
    max_pending_jobs: Annotated[int | None, Meta(description=(
        f"Its jobs waiting in the queue, each array task one; `null`: {_TENANT_LIMITS.max_pending_jobs}; 0: no "
        "limit."))] = None
    max_array_tasks: Annotated[int | None, Meta(description=(
        f"Tasks of one array; `null`: {_TENANT_LIMITS.max_array_tasks}; 0: the cluster's own bound only."))] = None
    max_pending_array_tasks: Annotated[int | None, Meta(description=(
        "Its arrays' tasks waiting in the queue, all together; `null`: "
        f"{_TENANT_LIMITS.max_pending_array_tasks}; 0: no limit."))] = None
    user: str = ""


class FairShareConfigured(Event, tag="FairShareConfigured", kw_only=True):
    """``horizon.in._admin.fairshare``: decay half-life and resource weights.

    It replaces every weight: a field left out takes the default here, so an event that
    leaves out ``cpu_weight`` bills cores at 0, not at the 1/16 per core a log without any
    ``FairShareConfigured`` bills (``horizon fairshare set`` always sends all three).
    The defaults stay as first published, so that old events decode as they were decided."""

    half_life_s: float = 7 * 86400.0
    gpu_weight: Annotated[float, Meta(description="Usage billed per GPU-second.")] = 1.0
    cpu_weight: Annotated[float, Meta(description="Usage billed per core-second.")] = 0.0
    memory_weight: Annotated[float, Meta(description="Usage billed per GiB-second.")] = 0.0
    dominant_share: bool = False
    user: str = ""


class ProfileConfigured(Event, tag="ProfileConfigured", kw_only=True):
    """``horizon.in._admin.profile``: a placement profile (a job names one in ``JobSpec.profile``).

    ``weights``: score plugin -> weight (``binpack``, ``spread``, ``numa``,
    ``interconnect``, ``fragmentation``; unset ones keep their defaults).
    ``backfill``: ``none``, ``easy``, ``shadow``, ``greedy``, ``conservative``
    (a reservation for each of the first ``reservation_depth`` blocked jobs) or
    ``short`` (EASY taking only jobs that end within a tenth of the head's wait).
    ``runtime_estimate``: where backfilling's run times come from, ``limit`` (the jobs' time limits)
    or ``predicted`` (EASY++: the mean of the user's last two run times, capped by the limit;
    services/domain/runtime_prediction.py). Configuring a profile again replaces it.
    """

    name: str
    weights: Annotated[dict[str, float], Meta(description=(
        "Score plugin -> weight; unset ones keep their defaults."))] = {}
    backfill: str = "easy"
    reservation_depth: int = 16
    user: str = ""
    runtime_estimate: Annotated[str, Meta(description=(
        "Backfilling's run times: the jobs' time limits, or predicted from each user's last two run times "
        "(EASY++)."))] = "limit"


class PartitionConfigured(Event, tag="PartitionConfigured", kw_only=True):
    """``horizon.in._admin.partition``: a partition, as Slurm's: a named set of nodes with defaults and
    limits. Jobs name partitions in ``JobSubmitted.partitions`` and run on the nodes of the one they got
    (``JobSpec.partition``). Configuring a partition again replaces its whole configuration;
    ``removed`` withdraws it (jobs accepted in it wait until it exists again).

    ``nodes``: Slurm host lists (``node[01-04]``) and shell globs (``gpu-*``); ``ALL`` or ``*``: every
    node. ``node_labels``: a node must also have these labels (an empty ``nodes`` with labels: every
    node that has them). ``default``: the partition of jobs that name none (the last one configured
    so wins). ``state``: ``up``; ``down`` (jobs are accepted and wait); ``drain`` (no new jobs; those
    accepted run). Limits (None: none): ``max_time_s``, ``max_nodes``; ``allowed_accounts`` and
    ``allowed_qos`` (empty: any). Defaults for a job that gives none: ``default_time_s`` (else
    ``max_time_s``, else the cluster's), ``default_mem_per_cpu`` / ``default_mem_per_gpu`` (bytes per
    CPU, per GPU of a task). ``priority_tier``: the pending jobs of a higher tier are considered first.
    ``profile``: the placement profile of its jobs (unless a job names its own).
    """

    name: Annotated[str, Meta(description="The partition's name (a token), as jobs name it.")]
    nodes: Annotated[list[str], Meta(description=(
        "Slurm host lists (`node[01-04,07]`) and shell globs (`gpu-*`); `ALL` or `*`: every node. Empty with "
        "`node_labels`: every node that has those labels."))] = []
    node_labels: dict[str, str] = {}
    default: bool = False
    state: Annotated[str, Meta(description=(
        "up; down: jobs are accepted and wait; drain: no new jobs, those accepted run."))] = "up"
    max_time_s: Annotated[float | None, Meta(description="`null`: no limit.")] = None
    default_time_s: Annotated[float | None, Meta(description=(
        "`null`: `max_time_s`, else the cluster's default."))] = None
    default_mem_per_cpu: Annotated[int | None, Meta(description=(
        "Bytes per CPU of a task that gives no memory; `null`: none."))] = None
    default_mem_per_gpu: Annotated[int | None, Meta(description=(
        "Bytes per GPU of a task with GPUs that gives no memory; `null`: none."))] = None
    max_nodes: Annotated[int | None, Meta(description="`null`: no limit.")] = None
    allowed_accounts: list[str] = []
    allowed_qos: list[str] = []
    priority_tier: Annotated[int, Meta(description=(
        "A higher tier's pending jobs are considered first (Slurm's PriorityTier)."))] = 0
    profile: Annotated[str, Meta(description=(
        "The placement profile of its jobs (one configured already); empty: `default`."))] = ""
    removed: bool = False
    user: str = ""


class DatasetAvailable(Event, tag="DatasetAvailable", kw_only=True):
    """``horizon.in._admin.dataset``: an operator (or the pipeline that produced it, with the operator's
    credentials) announces that a dataset is available. Jobs whose ``after_datasets`` name it may start
    (``--dependency afterdata:NAME``). Once announced it stays available; announcing it again changes
    nothing. The name is a token (letters, digits, ``._-``)."""

    dataset: str
    reason: str = ""
    user: str = ""


class PartitionPolicyConfigured(Event, tag="PartitionPolicyConfigured", kw_only=True):
    """``horizon.in._admin.partition-policy``: what a submission naming a partition the cluster does not
    define gets. ``unknown``: ``default`` (the job runs in the default partition; its JobAccepted
    carries a warning naming the partition it used) or ``reject`` (JobRejected naming it, as Slurm).
    Before any is configured: ``default``."""

    unknown: Annotated[str, Meta(description=(
        "What a submission naming a partition the cluster does not define gets."))] = "default"
    user: str = ""


class ReservationConfigured(Event, tag="ReservationConfigured", kw_only=True):
    """``horizon.in._admin.reservation``: an advance reservation of ``nodes`` for ``account``
    from ``start_ts`` to ``end_ts``: in that window only the account's jobs use those nodes,
    and other jobs may use them before it only if they end (by their time limit) before it
    starts. ``cancelled`` withdraws the reservation of that name.
    """

    name: str
    account: str
    nodes: list[NodeId] = []
    start_ts: float = 0.0
    end_ts: float = 0.0
    cancelled: bool = False
    user: str = ""


class PreemptionConfigured(Event, tag="PreemptionConfigured", kw_only=True):
    """``horizon.in._admin.preemption``: who may preempt whom and how gently. Unset fields keep
    their value. ``rules``: priority class -> the classes it may preempt. ``victims``: the victim
    order, ``cheapest`` (Horizon's cost) or ``lowest-priority-youngest`` (Kueue's default order,
    kept for comparison). ``max_preemptions``: a job preempted that often is never chosen again.
    """

    rules: Annotated[dict[str, list[str]], Meta(description=(
        "Priority class -> the lower classes it may preempt."))] = {}
    victims: Annotated[str | None, Meta(description="`null`: unchanged.")] = None
    grace_period_s: float | None = None
    max_preemptions: int | None = None
    per_minute: int | None = None  # cluster-wide
    per_account_per_minute: int | None = None  # per victim account
    user: str = ""


class PolicyConfigured(Event, tag="PolicyConfigured", kw_only=True):
    """``horizon.in._admin.policy``: the queue policy and its parameters.

    Unset (None / empty) fields keep their current value. ``weights`` keys:
    ``class``, ``fairshare``, ``age``, ``estimate``, ``size``, ``qos``.
    ``qos_boost``: QOS name -> factor in [0, 1] (times the ``qos`` weight).
    Restarts wait ``backoff_base_s * 2**(retry-1)``, at most ``backoff_max_s``.
    """

    policy: Annotated[str | None, Meta(description="`null`: unchanged.")] = None
    weights: Annotated[dict[str, float], Meta(description=(
        "Multifactor factor -> weight; unset ones keep their value."))] = {}
    max_age_s: float | None = None
    estimate_ref_s: float | None = None
    qos_boost: Annotated[dict[str, float], Meta(description="QOS name -> factor in [0, 1].")] = {}
    backoff_base_s: float | None = None
    backoff_max_s: float | None = None
    user: str = ""


# --------------------------------------------------------------------------
# Submission's decisions: horizon.evt.submission.<Type>.<job_id>
# --------------------------------------------------------------------------


class JobAccepted(Event, tag="JobAccepted", kw_only=True):
    job_id: JobId
    spec: JobSpec
    submitted_seq: int = 0
    submitted_ts: float = 0.0
    basis_seq: int = 0
    # What the submitter should know though the job was accepted, e.g. "partition 'gpu' is not
    # defined here; the job runs in 'main'" (horizon sbatch and submit print them on stderr).
    warnings: list[str] = []
    # A task of an array: how many tasks the array has, so the submitter knows how many JobAccepted
    # (one per task, each with the same causation_id) its submission gets; 0: not an array's task.
    array_tasks: Annotated[int, Meta(description=(
        "A task of an array: how many tasks the array has, which is how many JobAccepted its submission gets "
        "(one per task, each with the submission's `causation_id`); 0: the job is not an array's task."))] = 0


class JobRejected(Event, tag="JobRejected", kw_only=True):
    job_id: JobId
    tenant: str
    reason: Annotated[str, Meta(description="Why, in words a person can act on: the value and what is accepted.")]
    field: Annotated[str, Meta(description="The field at fault (`resources.memory`), or empty.")] = ""
    submitted_seq: int = 0
    basis_seq: int = 0
    # The tenant limit the submission would pass (``max_pending_jobs``, ``max_array_tasks``,
    # ``max_pending_array_tasks``: TenantConfigured); empty: not a limit's refusal.
    limit: Annotated[str, Meta(description=(
        "The tenant limit it would pass (`max_pending_jobs`, `max_array_tasks`, `max_pending_array_tasks`; "
        "`horizon tenant set`), or empty."))] = ""


class InputRejected(Event, tag="InputRejected", kw_only=True):
    """The verdict on a client input that is not a well-formed request: not JSON, not an event,
    a field of the wrong type (``path`` is the JSON path, e.g. ``$.resources.gpus``), an event
    its subject does not take, a header a client may not send, or a body naming another tenant.
    ``causation_id`` is ``seq:<input_seq>``, the sequence the publisher's PubAck carried;
    ``msg_id`` the ``Nats-Msg-Id`` it sent (as sent); ``job_id`` the job id its body names, when
    one can be read. Published by submission, on the sender's feed like every verdict."""

    tenant: str
    input_seq: Annotated[int, Meta(description="The input's sequence, as its PubAck said.")]
    subject: str = ""
    verb: str = ""
    msg_id: Annotated[str, Meta(description="The Nats-Msg-Id the client sent, as sent.")] = ""
    job_id: JobId = ""
    path: Annotated[str, Meta(description=(
        "The JSON path of the field at fault, e.g. `$.resources.gpus`, a missing field's own (`$.job_id`), "
        "`$.type` for an event type the subject does not take; `headers` for a refused header; empty when the "
        "problem is not one field's (not JSON, not an object)."))] = ""
    reason: str
    basis_seq: int = 0


class JobCancelled(Event, tag="JobCancelled", kw_only=True):
    job_id: JobId
    reason: str = ""
    attempt: int = 0
    basis_seq: int = 0


class JobHeld(Event, tag="JobHeld", kw_only=True):
    job_id: JobId
    reason: str = ""
    basis_seq: int = 0


class JobReleased(Event, tag="JobReleased", kw_only=True):
    job_id: JobId
    basis_seq: int = 0


class JobPriorityChanged(Event, tag="JobPriorityChanged", kw_only=True):
    job_id: JobId
    priority_class: str
    nice: int = 0
    basis_seq: int = 0


class JobStopRequested(Event, tag="JobStopRequested", kw_only=True):
    """Submission asks the agent running ``job_id`` to stop it (a cancel of a started job).

    The agent signals the process, waits up to ``grace_period_s``, kills it,
    and reports ``JobCancelled`` for the attempt: the job's resources are
    released only then, so nothing else starts on its GPUs while it dies.
    """

    job_id: JobId
    attempt: int
    reason: str = ""
    grace_period_s: float = 10.0
    basis_seq: int = 0


class RequestRejected(Event, tag="RequestRejected", kw_only=True):
    """A cancel, hold, release or update that cannot be carried out, and why."""

    job_id: JobId
    tenant: str
    verb: Annotated[str, Meta(description="The verb of the request answered (`cancel`, `submit`, ...).")]
    reason: str
    request_seq: int = 0
    basis_seq: int = 0


# --------------------------------------------------------------------------
# Scheduling and placement's decisions
# --------------------------------------------------------------------------


class SchedulingCycleCompleted(Event, tag="SchedulingCycleCompleted", kw_only=True):
    """The scheduler's ordered candidates for one cycle (``horizon.evt.scheduling...<cycle>``)."""

    cycle: int
    basis_seq: int
    candidates: list[JobId] = []
    queued: int = 0
    borrowing: list[JobId] = []  # the candidates admitted only by borrowing idle quota of sibling accounts


class JobScheduled(Event, tag="JobScheduled", kw_only=True):
    """A placement decision: the exact allocation. ``horizon.evt.placement.JobScheduled.<job_id>``."""

    job_id: JobId
    attempt: int = 1
    allocations: list[NodeAllocation] = []
    basis_seq: int = 0
    cycle: int = 0
    backfilled: bool = False
    time_limit_s: float = 0.0
    borrowed: bool = False  # admitted beyond its account's quota, on an idle sibling's (reclaimable)
    # how long placement expects the attempt to run (its profile's runtime_estimate "predicted": the
    # user's history, at most time_limit_s, which stays the enforced limit); None: its time limit
    predicted_runtime_s: float | None = None


class JobResized(Event, tag="JobResized", kw_only=True):
    """An elastic job's allocation changed while it holds resources: ``allocations`` is the whole new one
    (the first node, where its batch script runs, never leaves). Placement grows a job toward its
    ``nodes`` when a cycle leaves room no candidate wanted (``horizon.evt.placement.JobResized.<job_id>``);
    preemption shrinks one toward its ``min_nodes`` instead of preempting it, for ``for_job``
    (``horizon.evt.preemption.JobResized.<job_id>``). The released nodes are free at once; the job's
    tasks there get SIGTERM, SIGKILL after ``grace_period_s``. The agent of the first node tells the job
    (``$HORIZON_RESIZE_FILE``, then SIGWINCH: docs/jobs.md)."""

    job_id: JobId
    attempt: int
    allocations: list[NodeAllocation] = []
    nodes: int = 0  # the world size now (len(allocations))
    previous_nodes: int = 0
    for_job: JobId = ""  # shrunk to make room for this job
    reason: str = ""
    grace_period_s: float = 0.0
    basis_seq: int = 0
    cycle: int = 0


class PlacementCycleCompleted(Event, tag="PlacementCycleCompleted", kw_only=True):
    """Placement has handled scheduling cycle ``cycle``: how many it placed and how many stay blocked."""

    cycle: int
    basis_seq: int = 0
    scheduled: int = 0
    blocked: int = 0


class PlacementBlocked(Event, tag="PlacementBlocked", kw_only=True):
    """Why a candidate could not be placed, per filter, and when it could start."""

    job_id: JobId
    cycle: int = 0
    basis_seq: int = 0
    reasons: list[BlockReason] = []
    earliest_start_ts: float | None = None
    reserved_nodes: list[NodeId] = []
    # no node could hold it even empty (a selector no node matches, nodes removed since it was accepted):
    # waits for the set of nodes to change
    fits_nowhere: bool = False


class JobUnschedulable(Event, tag="JobUnschedulable", kw_only=True):
    """Terminal: the job could not start within its scheduling timeout."""

    job_id: JobId
    reason: str
    basis_seq: int = 0


class JobDependencyNeverSatisfied(Event, tag="JobDependencyNeverSatisfied", kw_only=True):
    """Terminal: a dependency ended in a way that can never satisfy this job."""

    job_id: JobId
    dependency: Dependency
    reason: str
    basis_seq: int = 0


class ConfigRejected(Event, tag="ConfigRejected", kw_only=True):
    """An operator's configuration input (account, fair share, policy) that was not applied, and why."""

    verb: str
    reason: str
    request_seq: int = 0
    basis_seq: int = 0


class JobRequeued(Event, tag="JobRequeued", kw_only=True):
    job_id: JobId
    attempt: int
    reason: str = ""
    not_before_ts: float = 0.0
    basis_seq: int = 0
    checkpoint_ref: str | None = None


# --------------------------------------------------------------------------
# Preemption
# --------------------------------------------------------------------------


class PreemptionRequested(Event, tag="PreemptionRequested", kw_only=True):
    job_id: JobId
    attempt: int
    for_job: JobId
    grace_period_s: float = 30.0
    reason: str = ""
    basis_seq: int = 0


class JobPreempted(Event, tag="JobPreempted", kw_only=True):
    job_id: JobId
    attempt: int
    for_job: JobId = ""
    checkpoint_ref: str | None = None
    # the request's reason, for an attempt stopped by no preemptor (for_job ""): the job's reason then
    # ("" in logs written before it: "evicted")
    reason: str = ""


class JobCheckpointed(Event, tag="JobCheckpointed", kw_only=True):
    job_id: JobId
    attempt: int
    checkpoint_ref: str


# --------------------------------------------------------------------------
# Node agents' reports: horizon.evt.agent.<Type>.<job_id | node>
# --------------------------------------------------------------------------


class JobStarted(Event, tag="JobStarted", kw_only=True):
    job_id: JobId
    attempt: int
    node: NodeId
    pid: int | None = None
    stdout: str = ""  # the files the attempt writes on its node (horizon logs reads them through the agent)
    stderr: str = ""
    cwd: str = ""


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


# --------------------------------------------------------------------------
# Inventory's decisions: horizon.evt.inventory.<Type>.<node>
# --------------------------------------------------------------------------


class NodeReady(Event, tag="NodeReady", kw_only=True):
    node: NodeId
    basis_seq: int = 0


class NodeCordoned(Event, tag="NodeCordoned", kw_only=True):
    node: NodeId
    reason: str = ""
    basis_seq: int = 0


class NodeUncordoned(Event, tag="NodeUncordoned", kw_only=True):
    node: NodeId
    basis_seq: int = 0


class NodeDraining(Event, tag="NodeDraining", kw_only=True):
    """The node takes no new jobs; those on it run to their end, unless the drain says more
    (``horizon node drain NODE --migrate --deadline D``, docs/jobs.md, Draining a node):

    ``migrate``: its checkpointable jobs are stopped at once (checkpoint signal first) and requeued to
    resume elsewhere from their checkpoint; ``deadline_ts`` (0: none): what still runs there then is
    stopped, and requeued unless its spec says ``requeue`` false. ``jobs``: the jobs on the node when the
    drain was decided, each told what will happen to it in a ``JobDrainPlanned``."""

    node: NodeId
    reason: str = ""
    basis_seq: int = 0
    migrate: bool = False
    deadline_ts: float = 0.0
    jobs: list[JobId] = []
    grace_s: float | None = None  # each stop's grace period (None: inventory's eviction grace, 30 s)


class JobDrainPlanned(Event, tag="JobDrainPlanned", kw_only=True):
    """What a drain of ``node`` will do to the job's attempt there, decided with the ``NodeDraining``
    (``causation_id`` the operator's command): ``action`` is ``migrate`` (checkpointed now, requeued,
    resumed elsewhere from its checkpoint), ``finish`` (it ends by itself before the deadline, or there
    is none), ``requeue-at-deadline`` or ``end-at-deadline`` (if it still runs at ``deadline_ts`` it is
    stopped, then requeued, or ends for it is not requeueable). ``reason`` says why, in words."""

    job_id: JobId
    attempt: int
    node: NodeId
    action: str
    deadline_ts: float = 0.0
    reason: str = ""
    basis_seq: int = 0


class NodeLost(Event, tag="NodeLost", kw_only=True):
    node: NodeId
    reason: str = ""
    last_heartbeat_ts: float | None = None
    basis_seq: int = 0


class NodeTaintsChanged(Event, tag="NodeTaintsChanged", kw_only=True):
    """The node's taints now (an operator's taint/untaint). A ``NoExecute`` taint evicts the jobs
    on the node that do not tolerate it (``PreemptionRequested`` by inventory)."""

    node: NodeId
    taints: list[Taint] = []
    reason: str = ""
    basis_seq: int = 0


class NodeDatasetsChanged(Event, tag="NodeDatasetsChanged", kw_only=True):
    """The datasets the node holds now, the whole sorted list (the answer to an operator's
    ``horizon node add-datasets`` or ``remove-datasets``). Placement's ``locality`` score prefers, for a
    job that names datasets, the nodes holding them."""

    node: NodeId
    datasets: list[str] = []
    reason: str = ""
    basis_seq: int = 0


class NodeOvercommitChanged(Event, tag="NodeOvercommitChanged", kw_only=True):
    """The node's overcommit ratios now, both of them (the answer to an operator's ``horizon node set``).
    Placement packs the requests of burstable and best-effort jobs against capacity x ratio, those of
    guaranteed jobs against the capacity itself (docs/scheduling-policy.md, Overcommit). 1.0: none.
    They outlive a re-registration of the node."""

    node: NodeId
    cpu_overcommit: float = 1.0
    memory_overcommit: float = 1.0
    reason: str = ""
    basis_seq: int = 0


class NodeRemoved(Event, tag="NodeRemoved", kw_only=True):
    node: NodeId
    reason: str = ""
    basis_seq: int = 0


# --------------------------------------------------------------------------
# Time
# --------------------------------------------------------------------------


class ClockTicked(Event, tag="ClockTicked", kw_only=True):
    """Explicit time, published by a simulator at virtual time or a live ticker.

    Services treat it as any other trigger: "now" becomes ``now_ts``.
    """

    now_ts: float


AnyEvent = (
    JobSubmitted
    | JobCancelRequested
    | JobHoldRequested
    | JobReleaseRequested
    | JobUpdateRequested
    | NodeCommandIssued
    | AccountConfigured
    | UserConfigured
    | TenantConfigured
    | FairShareConfigured
    | PolicyConfigured
    | PreemptionConfigured
    | ProfileConfigured
    | ReservationConfigured
    | PartitionConfigured
    | PartitionPolicyConfigured
    | DatasetAvailable
    | JobAccepted
    | JobRejected
    | InputRejected
    | JobCancelled
    | JobHeld
    | JobReleased
    | JobPriorityChanged
    | JobStopRequested
    | RequestRejected
    | SchedulingCycleCompleted
    | PlacementCycleCompleted
    | JobScheduled
    | JobResized
    | PlacementBlocked
    | JobUnschedulable
    | ConfigRejected
    | JobDependencyNeverSatisfied
    | JobRequeued
    | PreemptionRequested
    | JobPreempted
    | JobCheckpointed
    | JobStepStarted
    | JobStepEnded
    | JobStarted
    | JobSucceeded
    | JobFailed
    | NodeRegistered
    | NodeReady
    | NodeCordoned
    | NodeUncordoned
    | NodeDraining
    | JobDrainPlanned
    | NodeTaintsChanged
    | NodeDatasetsChanged
    | NodeOvercommitChanged
    | NodeMemoryPressure
    | NodeLost
    | NodeRemoved
    | ClockTicked
)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in AnyEvent.__args__  # type: ignore[attr-defined]
}
