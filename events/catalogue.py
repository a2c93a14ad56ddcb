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
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec

from events.base import Event

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

    cpus: float | str = 1
    # None: not given, so the job's partition's default memory per CPU or GPU applies (else 1 GiB).
    # The default stays "1Gi": a submission that leaves the field out means what it always meant.
    memory: int | str | None = "1Gi"
    gpus: int = 0
    gpu_type: str | None = None
    gpu_memory: int | str | None = None
    # Limits above the requests (Kubernetes' limits): what the job's cgroup may use on its node, per
    # task, in the forms of ``cpus`` and ``memory``. None: the request is the limit (what a job always
    # got). Requests equal to limits make a job "guaranteed", limits above them "burstable", and no
    # requests at all (``cpus`` 0, ``memory`` 0, no GPUs) "best-effort" (docs/jobs.md, QoS classes).
    cpu_limit: float | str | None = None
    memory_limit: int | str | None = None


class Dependency(_Part, kw_only=True):
    kind: str = "after-ok"
    job_id: str = ""


class Toleration(_Part, kw_only=True):
    """Kubernetes-style: ``key`` empty with ``operator="Exists"`` tolerates everything."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty tolerates every effect


class Taint(_Part, kw_only=True):
    key: str
    value: str = ""
    effect: str = "NoSchedule"


class AffinityTerm(_Part, kw_only=True):
    """Inter-job (anti-)affinity: jobs whose labels match ``match_labels``, within ``topology_key``."""

    match_labels: dict[str, str] = {}
    topology_key: str = "node"


class NodeSelectorRequirement(_Part, kw_only=True):
    """Required node affinity: ``key`` ``operator`` (In, NotIn, Exists, DoesNotExist) ``values``."""

    key: str
    operator: str = "In"
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

    signal: str
    before_s: float = 60.0
    batch_only: bool = False


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
    gpu_type: str | None = None
    gpu_variant: str | None = None
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
    array: str | None = None  # the array's job id (the submitted id) when this job is one task of an array
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

    node: str
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

    gpus: int | None = None
    cpus_milli: int | None = None
    memory_bytes: int | None = None
    running_jobs: int | None = None
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

    job_id: str
    tenant: str
    account: str = DEFAULT_ACCOUNT  # under accounts, the tenant's own account (docs/tenants.md)
    user: str = ""
    name: str = ""
    command: list[str] = []
    env: dict[str, str] = {}
    payload: Any = None
    resources: ResourceRequest = ResourceRequest()
    nodes: int = 1
    tasks_per_node: int = 1
    time_limit_s: float | None = None
    scheduling_timeout_s: float | None = None
    priority_class: str = "normal"
    nice: int = 0
    qos: str = ""
    profile: str = "default"
    # Slurm's -p a,b: the partitions it may run in, the first that can run it is taken; empty: the
    # default partition. A name the cluster does not define: see PartitionPolicyConfigured.
    partitions: list[str] = []
    dependencies: list[Dependency] = []
    array: str | None = None
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    restart_policy: str = "never"
    max_retries: int = 0
    preemptible: bool = True
    min_runtime_s: float = 0.0
    checkpoint_signal: str | None = None
    labels: dict[str, str] = {}
    sim_runtime_s: float | None = None
    sim_exit_code: int = 0
    cwd: str = ""  # absolute; the submitter's working directory (horizon submit records it)
    stdout: str = ""  # Slurm's --output pattern
    stderr: str = ""  # Slurm's --error pattern
    open_mode: str = "truncate"  # Slurm's --open-mode: truncate or append
    image: str = ""  # run in a container of this image (Podman on the node)
    # Slurm's option forms and directives (horizon sbatch); what each does: JobSpec's fields of the
    # same names and docs/slurm.md.
    gpus_per_node: int = 0  # GPUs per node shared by its tasks (resources.gpus must then be 0)
    exclusive: bool = False
    whole_node_memory: bool = False  # all of each node's memory (resources.memory is then ignored)
    constraint: str = ""
    nodelist: list[str] = []  # host lists (node[01-04])
    exclude_nodes: list[str] = []
    requeue: bool = True
    time_min_s: float | None = None
    limit_signal: LimitSignal | None = None
    singleton: bool = False
    hold: bool = False  # accepted held, until a release
    begin_ts: float | None = None  # not before this time (seconds since the epoch)
    dependency_timeout_s: float | None = None  # give up when dependencies are not met this long after acceptance
    deadline_ts: float | None = None  # Slurm's --deadline (seconds since the epoch): ends if it cannot end by then
    after_datasets: list[str] = []  # datasets it waits for (DatasetAvailable; --dependency afterdata:NAME)
    datasets: list[str] = []  # the datasets it reads: placement prefers nodes that hold them
    # An elastic gang: ``nodes`` is the most, ``min_nodes`` the least (Slurm's --nodes MIN-MAX);
    # ``min_available``: the least number of its tasks (Volcano's minAvailable), rounded up to whole nodes
    # of ``tasks_per_node``. Neither given: a rigid job of ``nodes``.
    min_nodes: int | None = None
    min_available: int | None = None
    assembly_timeout_s: float | None = None  # a gang that cannot assemble its least size by then ends


class JobCancelRequested(Event, tag="JobCancelRequested", kw_only=True):
    """``horizon.in.<tenant>.cancel``."""

    job_id: str
    tenant: str
    reason: str = ""
    user: str = ""


class JobHoldRequested(Event, tag="JobHoldRequested", kw_only=True):
    """``horizon.in.<tenant>.hold``: keep a pending job from starting until released."""

    job_id: str
    tenant: str
    reason: str = ""
    user: str = ""


class JobReleaseRequested(Event, tag="JobReleaseRequested", kw_only=True):
    """``horizon.in.<tenant>.release``."""

    job_id: str
    tenant: str
    user: str = ""


class JobUpdateRequested(Event, tag="JobUpdateRequested", kw_only=True):
    """``horizon.in.<tenant>.update``: change the priority class or nice of a pending job."""

    job_id: str
    tenant: str
    priority_class: str | None = None
    nice: int | None = None
    user: str = ""


# Operator inputs: horizon.in._admin.<verb>


class NodeCommandIssued(Event, tag="NodeCommandIssued", kw_only=True):
    """``horizon.in._admin.node``: an operator cordons, uncordons, drains, removes, taints or untaints a node.

    ``taint`` / ``untaint`` carry the ``taint`` (untaint matches by key and effect);
    ``add-datasets`` / ``remove-datasets`` carry the dataset names the node now holds or no longer holds.
    """

    node: str
    action: str  # cordon | uncordon | drain | remove | taint | untaint | add-datasets | remove-datasets
    reason: str = ""
    user: str = ""
    taint: Taint | None = None
    datasets: list[str] = []  # for add-datasets / remove-datasets
    # for "set" (horizon node set NODE --cpu-overcommit R --mem-overcommit R): the node's overcommit
    # ratios, requests of burstable and best-effort jobs packed against capacity x ratio (None: unchanged)
    cpu_overcommit: float | None = None
    memory_overcommit: float | None = None
    # for "drain" (horizon node drain NODE --migrate --deadline D): move the node's checkpointable jobs
    # away (checkpoint, requeue, resume elsewhere), and stop what still runs there deadline_s after the
    # command (None: the other jobs run to their end, as a plain drain)
    migrate: bool = False
    deadline_s: float | None = None
    # for "drain": the grace each stopped job gets to checkpoint and exit (kubectl drain's --grace-period);
    # None: inventory's eviction grace, 30 s
    grace_s: float | None = None


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

    account: str
    parent: str | None = None
    shares: float = 1.0
    quota: Quota = Quota()
    borrowing: bool = False
    priority_boost: float = 0.0
    user: str = ""
    max_priority_class: PriorityClass | None = None
    # The tenants whose jobs may charge this account (``horizon account set NAME --tenant T``);
    # empty: any tenant's. A tenant's submission naming an account not open to it is rejected.
    tenants: list[str] = []


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

    tenant: str
    max_inputs_per_s: float | None = None
    burst: int | None = None
    max_pending_jobs: int | None = None
    max_array_tasks: int | None = None
    max_pending_array_tasks: int | None = None
    user: str = ""


class FairShareConfigured(Event, tag="FairShareConfigured", kw_only=True):
    """``horizon.in._admin.fairshare``: decay half-life and resource weights.

    It replaces every weight: a field left out takes the default here, so an event that
    leaves out ``cpu_weight`` bills cores at 0, not at the 1/16 per core a log without any
    ``FairShareConfigured`` bills (``horizon fairshare set`` always sends all three).
    The defaults stay as first published, so that old events decode as they were decided."""

    half_life_s: float = 7 * 86400.0
    gpu_weight: float = 1.0
    cpu_weight: float = 0.0
    memory_weight: float = 0.0  # per GiB-second
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
    weights: dict[str, float] = {}
    backfill: str = "easy"
    reservation_depth: int = 16
    user: str = ""
    runtime_estimate: str = "limit"


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

    name: str
    nodes: list[str] = []
    node_labels: dict[str, str] = {}
    default: bool = False
    state: str = "up"
    max_time_s: float | None = None
    default_time_s: float | None = None
    default_mem_per_cpu: int | None = None
    default_mem_per_gpu: int | None = None
    max_nodes: int | None = None
    allowed_accounts: list[str] = []
    allowed_qos: list[str] = []
    priority_tier: int = 0
    profile: str = ""
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

    unknown: str = "default"
    user: str = ""


class ReservationConfigured(Event, tag="ReservationConfigured", kw_only=True):
    """``horizon.in._admin.reservation``: an advance reservation of ``nodes`` for ``account``
    from ``start_ts`` to ``end_ts``: in that window only the account's jobs use those nodes,
    and other jobs may use them before it only if they end (by their time limit) before it
    starts. ``cancelled`` withdraws the reservation of that name.
    """

    name: str
    account: str
    nodes: list[str] = []
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

    rules: dict[str, list[str]] = {}
    victims: str | None = None
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

    policy: str | None = None
    weights: dict[str, float] = {}
    max_age_s: float | None = None
    estimate_ref_s: float | None = None
    qos_boost: dict[str, float] = {}
    backoff_base_s: float | None = None
    backoff_max_s: float | None = None
    user: str = ""


# --------------------------------------------------------------------------
# Submission's decisions: horizon.evt.submission.<Type>.<job_id>
# --------------------------------------------------------------------------


class JobAccepted(Event, tag="JobAccepted", kw_only=True):
    job_id: str
    spec: JobSpec
    submitted_seq: int = 0
    submitted_ts: float = 0.0
    basis_seq: int = 0
    # What the submitter should know though the job was accepted, e.g. "partition 'gpu' is not
    # defined here; the job runs in 'main'" (horizon sbatch and submit print them on stderr).
    warnings: list[str] = []
    # A task of an array: how many tasks the array has, so the submitter knows how many JobAccepted
    # (one per task, each with the same causation_id) its submission gets; 0: not an array's task.
    array_tasks: int = 0


class JobRejected(Event, tag="JobRejected", kw_only=True):
    job_id: str
    tenant: str
    reason: str
    field: str = ""
    submitted_seq: int = 0
    basis_seq: int = 0
    # The tenant limit the submission would pass (``max_pending_jobs``, ``max_array_tasks``,
    # ``max_pending_array_tasks``: TenantConfigured); empty: not a limit's refusal.
    limit: str = ""


class InputRejected(Event, tag="InputRejected", kw_only=True):
    """The verdict on a client input that is not a well-formed request: not JSON, not an event,
    a field of the wrong type (``path`` is the JSON path, e.g. ``$.resources.gpus``), an event
    its subject does not take, a header a client may not send, or a body naming another tenant.
    ``causation_id`` is ``seq:<input_seq>``, the sequence the publisher's PubAck carried;
    ``msg_id`` the ``Nats-Msg-Id`` it sent (as sent); ``job_id`` the job id its body names, when
    one can be read. Published by submission, on the sender's feed like every verdict."""

    tenant: str
    input_seq: int
    subject: str = ""
    verb: str = ""
    msg_id: str = ""
    job_id: str = ""
    path: str = ""
    reason: str
    basis_seq: int = 0


class JobCancelled(Event, tag="JobCancelled", kw_only=True):
    job_id: str
    reason: str = ""
    attempt: int = 0
    basis_seq: int = 0


class JobHeld(Event, tag="JobHeld", kw_only=True):
    job_id: str
    reason: str = ""
    basis_seq: int = 0


class JobReleased(Event, tag="JobReleased", kw_only=True):
    job_id: str
    basis_seq: int = 0


class JobPriorityChanged(Event, tag="JobPriorityChanged", kw_only=True):
    job_id: str
    priority_class: str
    nice: int = 0
    basis_seq: int = 0


class JobStopRequested(Event, tag="JobStopRequested", kw_only=True):
    """Submission asks the agent running ``job_id`` to stop it (a cancel of a started job).

    The agent signals the process, waits up to ``grace_period_s``, kills it,
    and reports ``JobCancelled`` for the attempt: the job's resources are
    released only then, so nothing else starts on its GPUs while it dies.
    """

    job_id: str
    attempt: int
    reason: str = ""
    grace_period_s: float = 10.0
    basis_seq: int = 0


class RequestRejected(Event, tag="RequestRejected", kw_only=True):
    """A cancel, hold, release or update that cannot be carried out, and why."""

    job_id: str
    tenant: str
    verb: str
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
    candidates: list[str] = []
    queued: int = 0
    borrowing: list[str] = []  # the candidates admitted only by borrowing idle quota of sibling accounts


class JobScheduled(Event, tag="JobScheduled", kw_only=True):
    """A placement decision: the exact allocation. ``horizon.evt.placement.JobScheduled.<job_id>``."""

    job_id: str
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

    job_id: str
    attempt: int
    allocations: list[NodeAllocation] = []
    nodes: int = 0  # the world size now (len(allocations))
    previous_nodes: int = 0
    for_job: str = ""  # shrunk to make room for this job
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

    job_id: str
    cycle: int = 0
    basis_seq: int = 0
    reasons: list[BlockReason] = []
    earliest_start_ts: float | None = None
    reserved_nodes: list[str] = []
    # no node could hold it even empty (a selector no node matches, nodes removed since it was accepted):
    # waits for the set of nodes to change
    fits_nowhere: bool = False


class JobUnschedulable(Event, tag="JobUnschedulable", kw_only=True):
    """Terminal: the job could not start within its scheduling timeout."""

    job_id: str
    reason: str
    basis_seq: int = 0


class JobDependencyNeverSatisfied(Event, tag="JobDependencyNeverSatisfied", kw_only=True):
    """Terminal: a dependency ended in a way that can never satisfy this job."""

    job_id: str
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
    job_id: str
    attempt: int
    reason: str = ""
    not_before_ts: float = 0.0
    basis_seq: int = 0
    checkpoint_ref: str | None = None


# --------------------------------------------------------------------------
# Preemption
# --------------------------------------------------------------------------


class PreemptionRequested(Event, tag="PreemptionRequested", kw_only=True):
    job_id: str
    attempt: int
    for_job: str
    grace_period_s: float = 30.0
    reason: str = ""
    basis_seq: int = 0


class JobPreempted(Event, tag="JobPreempted", kw_only=True):
    job_id: str
    attempt: int
    for_job: str = ""
    checkpoint_ref: str | None = None
    # the request's reason, for an attempt stopped by no preemptor (for_job ""): the job's reason then
    # ("" in logs written before it: "evicted")
    reason: str = ""


class JobCheckpointed(Event, tag="JobCheckpointed", kw_only=True):
    job_id: str
    attempt: int
    checkpoint_ref: str


# --------------------------------------------------------------------------
# Node agents' reports: horizon.evt.agent.<Type>.<job_id | node>
# --------------------------------------------------------------------------


class JobStarted(Event, tag="JobStarted", kw_only=True):
    job_id: str
    attempt: int
    node: str
    pid: int | None = None
    stdout: str = ""  # the files the attempt writes on its node (horizon logs reads them through the agent)
    stderr: str = ""
    cwd: str = ""


class JobSucceeded(Event, tag="JobSucceeded", kw_only=True):
    job_id: str
    attempt: int
    node: str = ""
    exit_code: int = 0
    runtime_s: float = 0.0


class JobFailed(Event, tag="JobFailed", kw_only=True):
    job_id: str
    attempt: int
    node: str = ""
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

    job_id: str
    attempt: int
    step: int
    name: str = ""
    nodes: list[str] = []
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

    job_id: str
    attempt: int
    step: int
    name: str = ""
    nodes: list[str] = []
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

    job_id: str
    attempt: int
    used_bytes: int


class NodeMemoryPressure(Event, tag="NodeMemoryPressure", kw_only=True):
    """An agent's observation: the jobs on ``node`` use more memory than it may give them, the
    node's ``memory_bytes`` less the ``reserve_bytes`` kept free (the kubelet's eviction threshold).
    ``jobs``: every attempt's use, by job id. Inventory answers by evicting (``JobFailed`` with
    ``evicted``) best-effort jobs first, then burstable ones over their request, until the use it
    measured, less what the evicted used, is under the line (``services/domain/qos.py``). Not a
    decision: the agent's measure, which the log keeps as an input that replays."""

    node: str
    memory_bytes: int
    reserve_bytes: int = 0
    used_bytes: int = 0
    jobs: list[JobMemoryUse] = []


class NodeRegistered(Event, tag="NodeRegistered", kw_only=True):
    node: str
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
    node: str
    basis_seq: int = 0


class NodeCordoned(Event, tag="NodeCordoned", kw_only=True):
    node: str
    reason: str = ""
    basis_seq: int = 0


class NodeUncordoned(Event, tag="NodeUncordoned", kw_only=True):
    node: str
    basis_seq: int = 0


class NodeDraining(Event, tag="NodeDraining", kw_only=True):
    """The node takes no new jobs; those on it run to their end, unless the drain says more
    (``horizon node drain NODE --migrate --deadline D``, docs/jobs.md, Draining a node):

    ``migrate``: its checkpointable jobs are stopped at once (checkpoint signal first) and requeued to
    resume elsewhere from their checkpoint; ``deadline_ts`` (0: none): what still runs there then is
    stopped, and requeued unless its spec says ``requeue`` false. ``jobs``: the jobs on the node when the
    drain was decided, each told what will happen to it in a ``JobDrainPlanned``."""

    node: str
    reason: str = ""
    basis_seq: int = 0
    migrate: bool = False
    deadline_ts: float = 0.0
    jobs: list[str] = []
    grace_s: float | None = None  # each stop's grace period (None: inventory's eviction grace, 30 s)


class JobDrainPlanned(Event, tag="JobDrainPlanned", kw_only=True):
    """What a drain of ``node`` will do to the job's attempt there, decided with the ``NodeDraining``
    (``causation_id`` the operator's command): ``action`` is ``migrate`` (checkpointed now, requeued,
    resumed elsewhere from its checkpoint), ``finish`` (it ends by itself before the deadline, or there
    is none), ``requeue-at-deadline`` or ``end-at-deadline`` (if it still runs at ``deadline_ts`` it is
    stopped, then requeued, or ends for it is not requeueable). ``reason`` says why, in words."""

    job_id: str
    attempt: int
    node: str
    action: str
    deadline_ts: float = 0.0
    reason: str = ""
    basis_seq: int = 0


class NodeLost(Event, tag="NodeLost", kw_only=True):
    node: str
    reason: str = ""
    last_heartbeat_ts: float | None = None
    basis_seq: int = 0


class NodeTaintsChanged(Event, tag="NodeTaintsChanged", kw_only=True):
    """The node's taints now (an operator's taint/untaint). A ``NoExecute`` taint evicts the jobs
    on the node that do not tolerate it (``PreemptionRequested`` by inventory)."""

    node: str
    taints: list[Taint] = []
    reason: str = ""
    basis_seq: int = 0


class NodeDatasetsChanged(Event, tag="NodeDatasetsChanged", kw_only=True):
    """The datasets the node holds now, the whole sorted list (the answer to an operator's
    ``horizon node add-datasets`` or ``remove-datasets``). Placement's ``locality`` score prefers, for a
    job that names datasets, the nodes holding them."""

    node: str
    datasets: list[str] = []
    reason: str = ""
    basis_seq: int = 0


class NodeOvercommitChanged(Event, tag="NodeOvercommitChanged", kw_only=True):
    """The node's overcommit ratios now, both of them (the answer to an operator's ``horizon node set``).
    Placement packs the requests of burstable and best-effort jobs against capacity x ratio, those of
    guaranteed jobs against the capacity itself (docs/scheduling-policy.md, Overcommit). 1.0: none.
    They outlive a re-registration of the node."""

    node: str
    cpu_overcommit: float = 1.0
    memory_overcommit: float = 1.0
    reason: str = ""
    basis_seq: int = 0


class NodeRemoved(Event, tag="NodeRemoved", kw_only=True):
    node: str
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
