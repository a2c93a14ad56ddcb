"""A client's inputs: ``horizon.in.<tenant>.<verb>``, one event type per verb."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from msgspec import Meta

from events.arrays import MAX_INDEX
from events.base import Event, JobId
from events.catalogue.values import (DEFAULT_ACCOUNT, Affinity, Dependency, LimitSignal, ResourceRequest, Toleration,
                                     _LIMITS, _Part)


class ComponentRequest(_Part, kw_only=True):
    """A heterogeneous job's component after the first, as a client writes it (Slurm's ``#SBATCH hetjob``,
    ``sbatch A : B``): its own shape, each field as ``JobSubmitted``'s field of the same name. Everything
    else is the job's."""

    resources: ResourceRequest = ResourceRequest()
    nodes: int = 1
    tasks_per_node: int = 1
    ntasks: int | None = None
    spread_tasks: bool = False
    memory_per_node: int | None = None
    gpus_per_node: int = 0
    exclusive: bool = False
    whole_node_memory: bool = False
    constraint: str = ""
    partitions: Annotated[list[str], Meta(description=(
        "The partitions it names (Slurm's per-component `-p`): empty, or the one the job gets, as a job's "
        "components run in one partition."))] = []


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
    submit_env: Annotated[dict[str, str] | None, Meta(description=(
        "The environment the job starts from, as sbatch's `--export` takes it from the submitting shell (Slurm's "
        "default: all of it): over the node's PATH and locale and the running user's HOME, USER, LOGNAME and "
        "SHELL, under the job's own variables (SLURM_JOB_ID, CUDA_VISIBLE_DEVICES, ...) and `env`. `null`: the "
        "job starts from the node agent's environment (horizon submit)."))] = None
    payload: Annotated[Any, Meta(description=(
        "Opaque JSON for an external executor; Horizon passes it through."))] = None
    resources: ResourceRequest = ResourceRequest()
    nodes: Annotated[int, Meta(description="Nodes of the gang.")] = 1
    tasks_per_node: Annotated[int, Meta(description=(
        "Tasks on each node; the job needs nodes x tasks_per_node tasks, placed all at once."))] = 1
    ntasks: Annotated[int | None, Meta(description=(
        "The job's tasks in all (Slurm's `--ntasks`) when fewer than nodes x tasks_per_node: laid out over its "
        "nodes in order, each node its tasks_per_node while leaving at least one for each node after it "
        "(`-N 3 -n 7`: 3, 3 and 1); the gang still holds tasks_per_node on every node. With `spread_tasks`: "
        "the tasks to spread. `null`: nodes x tasks_per_node."))] = None
    spread_tasks: Annotated[bool, Meta(description=(
        "Slurm's `--ntasks` without `--nodes`: submission chooses `nodes` and `tasks_per_node` (then not read), "
        "the fewest nodes of the job's partition that could hold `ntasks` tasks, as many on each as the gang's "
        "one shape allows (128 tasks on 48-CPU nodes: 3 nodes of 43)."))] = False
    memory_per_node: Annotated[int | None, Meta(description=(
        "Slurm's `--mem` in bytes with `spread_tasks`: each node's memory, shared by its tasks once submission "
        "has chosen how many (`resources.memory` is then not read)."))] = None
    time_limit_s: Annotated[float | None, Meta(description=(
        "Its run-time limit, also the estimate backfill uses; `null`: the cluster's default "
        f"({_LIMITS.default_time_limit_s:g} s unless configured otherwise); 0: no limit (Slurm's `--time=0`, "
        "`UNLIMITED`): its partition's MaxTime, else the cluster's most "
        f"({_LIMITS.max_time_limit_s:g} s unless configured otherwise)."))] = None
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
    licenses: Annotated[dict[str, int], Meta(description=(
        "Licenses it needs while it runs (Slurm's `-L matlab:2,abaqus`): name -> how many, each a license the "
        "operator defined (`LicenseConfigured`). It starts only when all are free; a name not defined, or more "
        "than the cluster's total, is refused."))] = {}
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
    components: Annotated[list[ComponentRequest], Meta(description=(
        "A heterogeneous job (Slurm's `#SBATCH hetjob`, `sbatch A : B`): its components after the first, the "
        f"first being this submission's own shape; at most {_LIMITS.max_components - 1}. All are placed at once, "
        "each on nodes of its own; the batch script runs on the first component's first node."))] = []


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
