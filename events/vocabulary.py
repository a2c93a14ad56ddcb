"""The words and bounds the services check an event's plain fields against.

The catalogue keeps most enumerations as plain strings on purpose (a wrong
value decodes, and earns a rejection that names it), so the set of accepted
values lives in code that checks them. That code imports the sets from here,
and so does the published contract (``events/asyncapi.py``), which turns them
into JSON Schema enums and bounds: one copy, read by both.

The enumerations of a job (priority classes, restart policies, dependency
kinds, taint effects) are in ``events/catalogue/values.py`` beside the ``Literal``
types of ``JobSpec``; the ones here are checked by one service each:

====================  ==========================================================
constant              checked by
====================  ==========================================================
``NODE_ACTIONS``      inventory (``NodeCommandIssued.action``)
``TOLERATION_OPS``    submission (``Toleration.operator``)
``OPEN_MODES``        submission (``JobSubmitted.open_mode``)
``SELECTOR_OPS``      placement (``NodeSelectorRequirement.operator``; an unknown
                      operator is not refused, it matches no node)
``BACKFILL_MODES``    placement profiles (``ProfileConfigured.backfill``)
``RUNTIME_ESTIMATES`` placement profiles (``ProfileConfigured.runtime_estimate``)
``SCORE_WEIGHTS``     placement profiles (``ProfileConfigured.weights`` keys)
``VICTIM_ORDERS``     preemption (``PreemptionConfigured.victims``)
``QUEUE_POLICIES``    scheduling (``PolicyConfigured.policy``)
``PARTITION_STATES``  every fold of partitions (``PartitionConfigured.state``)
``UNKNOWN_PARTITION`` the same (``PartitionPolicyConfigured.unknown``)
``POLICY_WEIGHTS``    scheduling (``PolicyConfigured.weights`` keys)
``LICENSE_PATTERN``   scheduling and submission (``LicenseConfigured.name``,
                      ``JobSubmitted.licenses`` keys)
====================  ==========================================================

``Limits`` are submission's admission limits (a cluster may configure other
values; these are the defaults), and the bounds below it are fixed ones.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "NODE_ACTIONS", "TOLERATION_OPS", "OPEN_MODES", "SELECTOR_OPS", "BACKFILL_MODES", "SCORE_WEIGHTS",
    "RUNTIME_ESTIMATES", "VICTIM_ORDERS", "QUEUE_POLICIES", "POLICY_WEIGHTS", "Limits", "TenantLimits", "MAX_TASKS_PER_NODE",
    "MAX_RETRIES", "NICE_LIMIT", "RESERVATION_DEPTH", "GRACE_PERIOD_MAX_S", "MAX_CWD_LENGTH", "IMAGE_PATTERN",
    "TAINT_KEY_PATTERN", "TAINT_VALUE_PATTERN", "TAINT_KEY_MAX", "TAINT_VALUE_MAX", "PARTITION_STATES",
    "UNKNOWN_PARTITION", "PRIORITY_TIER_MAX", "DATASET_PATTERN", "DATASET_NAME_MAX", "MAX_DATASETS",
    "LICENSE_PATTERN", "MAX_LICENSE_COUNT", "MAX_LICENSES",
]

NODE_ACTIONS: tuple[str, ...] = ("cordon", "uncordon", "drain", "remove", "taint", "untaint", "add-datasets",
                                 "remove-datasets", "set")
TOLERATION_OPS: tuple[str, ...] = ("Equal", "Exists")
OPEN_MODES: tuple[str, ...] = ("truncate", "append")
SELECTOR_OPS: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
BACKFILL_MODES: tuple[str, ...] = ("none", "easy", "shadow", "greedy", "conservative", "short", "lane")
# Where backfilling's run times come from (services/domain/runtime_prediction.py).
RUNTIME_ESTIMATES: tuple[str, ...] = ("limit", "predicted")
# The score plugins' names (services/domain/fit/framework.py asserts its plugins are these).
SCORE_WEIGHTS: tuple[str, ...] = ("binpack", "spread", "numa", "interconnect", "fragmentation", "taints",
                                  "node_affinity", "locality", "cost")
# A dataset's name (JobSubmitted.datasets, NodeCommandIssued.datasets): submission and inventory refuse others.
DATASET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$"
DATASET_NAME_MAX = 128
MAX_DATASETS = 64  # per job, and per operator command
# A license's name (LicenseConfigured.name, the keys of JobSubmitted.licenses), matched whole: Slurm's local
# license names, and its remote ones' NAME@SERVER form, which an operator may define as a local count too.
# None of Slurm's separators (``,`` ``;`` ``:`` ``*`` ``|``), no spaces.
LICENSE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}(@[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$"
MAX_LICENSE_COUNT = 2**31 - 1  # a license's total, and a job's count of one (Slurm's are 32-bit)
MAX_LICENSES = 64  # different licenses one job may name
VICTIM_ORDERS: tuple[str, ...] = ("cheapest", "lowest-priority-youngest")
# The queue policies' names (services/domain/policy.py asserts its POLICIES are these).
QUEUE_POLICIES: tuple[str, ...] = ("fcfs", "sjf", "f1", "multifactor")
# A partition's state (Slurm's): up; down: jobs are accepted and wait; drain: no new jobs, those
# accepted still run.
PARTITION_STATES: tuple[str, ...] = ("up", "down", "drain")
# What a submission naming a partition the cluster does not define gets (services/domain/partitions.py).
UNKNOWN_PARTITION: tuple[str, ...] = ("default", "reject")
PRIORITY_TIER_MAX = 65_533  # Slurm's PriorityTier range is 0..65533
# The multifactor priority's factors, in the order it sums them.
POLICY_WEIGHTS: tuple[str, ...] = ("class", "fairshare", "age", "estimate", "size", "qos")


@dataclass(frozen=True, slots=True)
class Limits:
    """Admission limits of the cluster (configuration of the submission core)."""

    max_gpus_per_job: int = 512
    max_nodes_per_job: int = 1024
    max_time_limit_s: float = 30 * 86400.0
    default_time_limit_s: float = 3600.0
    max_name_length: int = 256
    max_command_bytes: int = 128 * 1024
    max_env_entries: int = 1024
    # Tasks per array. One submission becomes this many JobAccepted in one decision round
    # (~1 KB each: 10 MB, a fraction of a second for publish_many) and this many queued jobs
    # in every service (~0.9 KB each). It is also the scheduler's default number of candidates
    # per cycle, so a whole array can be offered at once. Slurm's default MaxArraySize is 1001;
    # larger sweeps are split into several arrays.
    max_array_tasks: int = 10_000
    # The normalised job, as JSON. Its JobAccepted must fit in one log message (the server's
    # max_payload, 1 MiB by default), and every service holds it in memory while the job lives;
    # the command alone may take 128 KiB. Whatever else is large (env, labels, payload) counts here.
    max_spec_bytes: int = 256 * 1024
    # An array's tasks all carry the spec: tasks x spec size is what one submission adds to each
    # service's memory and to one decision round (10,000 tasks of 6.5 KB, or 256 of 256 KiB).
    max_array_bytes: int = 64 * 1024 * 1024
    # Components of a heterogeneous job (Slurm's hetjob), the first included: each is a gang placed with
    # the others in one decision, so a job of many costs placement one search per component.
    max_components: int = 16


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's limits at the door under accounts (``TenantConfigured``, ``horizon tenant set``); these
    are the defaults, on for every tenant. 0 is no limit. Measured on a 2-core machine (docs/tenants.md,
    Limits and fairness): the whole stack works through about 2,000 stored inputs a second, each a
    delay for every other tenant's next input, so one tenant's burst is 1,000 of them; a job waiting
    in the queue costs every service's memory (10,000 pending: about 200 MB more for `up`), and an
    array's tasks are jobs like any other (they are not stored lazily)."""

    # A token bucket at the intake: ``burst`` inputs at once, then this many a second on average.
    max_inputs_per_s: float = 100.0
    burst: int = 1_000
    # Jobs of the tenant waiting in the queue (pending or held), each task of an array one of them.
    max_pending_jobs: int = 10_000
    # Tasks of one array (Slurm's MaxArraySize is 1001 by default: indices 0-1000).
    max_array_tasks: int = 1_000
    # Tasks of the tenant's arrays waiting in the queue, all arrays together.
    max_pending_array_tasks: int = 10_000


MAX_TASKS_PER_NODE = 4096
MAX_RETRIES = 100
# nice is -NICE_LIMIT..NICE_LIMIT; below 0 only for an operator (it raises the priority)
NICE_LIMIT = 10_000
RESERVATION_DEPTH = (1, 1000)  # ProfileConfigured.reservation_depth, inclusive
GRACE_PERIOD_MAX_S = 86400.0  # PreemptionConfigured.grace_period_s is 0..this
MAX_CWD_LENGTH = 4096  # JobSubmitted.cwd: an absolute path of at most this many characters
# An OCI image reference (JobSubmitted.image, matched whole): [registry/]path[:tag][@digest], no
# spaces, not an option.
IMAGE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}"
# A taint's key and value (matched whole), as Kubernetes' label keys and values: letters, digits and
# these signs, starting and ending with a letter or digit; the value may be empty.
TAINT_KEY_PATTERN = r"[A-Za-z0-9]([A-Za-z0-9_./-]*[A-Za-z0-9])?"
TAINT_VALUE_PATTERN = r"([A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)?"
TAINT_KEY_MAX = 253
TAINT_VALUE_MAX = 63
