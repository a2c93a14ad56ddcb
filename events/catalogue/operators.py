"""An operator's inputs: ``horizon.in._admin.<verb>``, one event type per verb."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from events.base import Event, NodeId
from events.catalogue.values import PriorityClass, Quota, Taint, _TENANT_LIMITS


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


class LicenseConfigured(Event, tag="LicenseConfigured", kw_only=True):
    """``horizon.in._admin.license``: a license, as Slurm's local ones (``Licenses=`` of slurm.conf): a
    count the whole cluster shares, on no node. A job asking for some (``JobSubmitted.licenses``, Slurm's
    ``-L matlab:2``) starts only when that many are free, holds them while it holds its resources, and
    gives them back when it ends. Configuring a license again sets its total (below what running jobs
    hold: they keep theirs, and nothing more starts until enough are back); ``removed`` withdraws it
    (its pending jobs wait until it exists again; submissions naming it are refused)."""

    name: Annotated[str, Meta(description=(
        "The license's name, as jobs name it (`matlab`; `nastran@slurmdb` too, Slurm's remote form, defined "
        "here as a local count)."))]
    count: Annotated[int, Meta(description="How many the cluster has: the total jobs share.")] = 0
    removed: bool = False
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
