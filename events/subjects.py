"""Subjects: the public contract of where every event is published.

==========================================  =====================================================
subject                                     what
==========================================  =====================================================
``horizon.in.<tenant>.<verb>``              client inputs; verbs ``submit cancel hold release update``
``horizon.in._admin.<verb>``                operator inputs; ``node account fairshare policy profile reservation preemption``,
                                            ``partition partition-policy dataset license``, and ``cancel hold release
                                            update`` of any job; from the log's ``LogLayoutChanged`` on, submission
                                            relays each (not the job requests) as ``InputRelayed``, which the other
                                            services apply instead (they read ``horizon.evt.>`` alone)
``horizon.intake.<tenant>.<verb>``          the intake (request/reply, every submission instance): a tenant's
                                            input under accounts, stored as ``horizon.in.<tenant>.<verb>``
                                            (tenants import it under that name; docs/tenants.md)
``horizon.evt.<service>.<Type>.<id>``       service outputs; ``<id>`` is the job or node; a partition
                                            leader's ``<service>`` is ``scheduling-<partitions>`` or
                                            ``placement-<partitions>`` (docs/scaling.md)
``horizon.query.<view>``                    request/reply read models (not in the stream)
``horizon.query.<view>.<tenant>``           the same about one tenant's jobs (jobs job queue allocations)
``horizon.tenant.<tenant>.evt.>``           the tenant feed: live events about its jobs, core NATS
``horizon.validate.<tenant>``               "would this JobSubmitted be accepted?", any submission instance
``horizon.hb.<node>``                       heartbeats, core NATS (not in the stream)
``horizon.logs.<node>[.<tenant>]``          request/reply: a job's output files, served by the node's agent
``horizon.step.<node>``                     request/reply between agents: run or signal a node's share of a
                                            job step (``srun``); ``horizon.step.io.<token>`` carries its
                                            output back to the batch node's agent (services/nodes/agent/steps.py)
``horizon.dlq.<service>``                   dead letters, stream ``HORIZON_DLQ``
==========================================  =====================================================

Tokens (tenant, ids) are restricted to ``[A-Za-z0-9_-]`` so that no value can
smuggle a ``.``, ``*`` or ``>`` into a subject. Tenants also may not start
with ``_`` (reserved for ``_admin``). A partition's name may hold dots too
(Slurm's ``test.q``): it goes into a leader's token as its ``partition_token``.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

from events import catalogue as c

__all__ = [
    "STREAM",
    "DLQ_STREAM",
    "INPUT_PREFIX",
    "EVENT_PREFIX",
    "VERBS",
    "ADMIN_VERBS",
    "ADMIN_TENANT",
    "RELAY_LAYOUT",
    "RELAYED_VERBS",
    "EVENTS_ONLY",
    "LAYOUT_MARKER",
    "PUBLISHERS",
    "DECISION_SERVICES",
    "PARTITIONED_SERVICES",
    "CYCLES_FILTER",
    "leader_token",
    "valid_partition",
    "partition_token",
    "service_of",
    "event_owner",
    "partner_token",
    "input_subject",
    "admin_subject",
    "event_subject",
    "dlq_subject",
    "query_subject",
    "heartbeat_subject",
    "parse_subject",
    "Subject",
    "valid_token",
    "valid_job_key",
    "job_key",
    "tenant_view",
    "user_login",
    "login_user",
    "intake_subject",
    "check_token",
    "INTAKE_PREFIX",
    "INTAKE_HEADER",
    "CLIENT_MSG_ID_HEADER",
    "REFUSED_HEADER",
    "USER_HEADER",
    "LIMITS_HEADER",
]

STREAM = "HORIZON"
INTAKE_PREFIX = "horizon.intake"
# Headers only the intake writes (it drops any a client sends): the tenant whose input this is
# (its job ids are then that tenant's own, ``<tenant>:<id>``), the client's own Nats-Msg-Id, and
# the headers the intake refused (the input is then answered with ``InputRejected``).
INTAKE_HEADER = "Horizon-Intake"
CLIENT_MSG_ID_HEADER = "Horizon-Client-Msg-Id"
REFUSED_HEADER = "Horizon-Refused-Headers"
# The user the server authenticated for a tenant's input (its NATS user, from the server's
# Nats-Request-Info), stamped by the intake: "-" when the server did not say (an import without
# `share: true`), which the submission core refuses.
USER_HEADER = "Horizon-User"
# The tenant's limits are in force for this input (docs/tenants.md, Limits and fairness): stamped by
# the intake since they exist, so the submission core applies them to what it stamped and a log
# written before them replays as it was decided.
LIMITS_HEADER = "Horizon-Limits"
KEY_SEPARATOR = ":"  # <tenant>:<id>, a tenant's job under accounts; ':' is in no tenant's id
DLQ_STREAM = "HORIZON_DLQ"
INPUT_PREFIX = "horizon.in"
EVENT_PREFIX = "horizon.evt"
STREAM_SUBJECTS = ("horizon.in.>", "horizon.evt.>")
# The filter that reads the whole HORIZON stream. One wildcard, not STREAM_SUBJECTS: a consumer
# with two filter subjects over interleaved inputs and outputs is read ~10x slower by the server
# (measured: 3,000 vs 34,000 msg/s, see services/runtime/pullreader.py).
WHOLE_LOG = ("horizon.>",)
DLQ_SUBJECTS = ("horizon.dlq.>",)
ADMIN_TENANT = "_admin"
# One filter per service (docs/architecture.md, "One filter per service"). From the log's
# ``LogLayoutChanged`` (layout ``RELAY_LAYOUT``) on, submission relays every operator input of a
# ``RELAYED_VERBS`` verb as an ``InputRelayed`` event, and the services but submission apply the relays,
# never a raw input: what they fold then sits under ``EVENTS_ONLY``, one filter subject, and they read
# that alone. Submission, which answers the inputs, reads the whole log.
RELAY_LAYOUT = 2
EVENTS_ONLY = (f"{EVENT_PREFIX}.>",)
LAYOUT_MARKER = f"{EVENT_PREFIX}.submission.LogLayoutChanged.>"  # where the marker is (one record)

# verb -> the one event type admitted on it
VERBS: dict[str, type[c.Event]] = {
    "submit": c.JobSubmitted,
    "cancel": c.JobCancelRequested,
    "hold": c.JobHoldRequested,
    "release": c.JobReleaseRequested,
    "update": c.JobUpdateRequested,
}
ADMIN_VERBS: dict[str, type[c.Event]] = {
    "node": c.NodeCommandIssued,
    "account": c.AccountConfigured,
    "user": c.UserConfigured,
    "tenant": c.TenantConfigured,  # a tenant's limits at the door (horizon tenant set)
    "fairshare": c.FairShareConfigured,
    "policy": c.PolicyConfigured,
    "profile": c.ProfileConfigured,
    "preemption": c.PreemptionConfigured,
    "reservation": c.ReservationConfigured,
    "partition": c.PartitionConfigured,
    "partition-policy": c.PartitionPolicyConfigured,
    "dataset": c.DatasetAvailable,  # a dataset is available: jobs waiting for it (afterdata) may start
    "license": c.LicenseConfigured,  # a license count the cluster shares (Slurm's Licenses=, sbatch -L)
    # an operator's requests about any tenant's job (owners use horizon.in.<tenant>.<verb>)
    "cancel": c.JobCancelRequested,
    "hold": c.JobHoldRequested,
    "release": c.JobReleaseRequested,
    "update": c.JobUpdateRequested,
}
# The operator inputs submission relays (layout 2): all but the requests about jobs, which it answers itself.
RELAYED_VERBS: frozenset[str] = frozenset(verb for verb in ADMIN_VERBS if verb not in VERBS)

# The services whose events are decisions: each a pure function of the log up to its basis_seq,
# which `horizon audit` replays (the agents' reports, the clock and client inputs are not).
DECISION_SERVICES: tuple[str, ...] = ("submission", "scheduling", "placement", "preemption", "inventory")

# Services that may run one leader per partition (or group of partitions) beside each other
# (docs/scaling.md): such a leader publishes under its own service token, ``<service>-<partitions>``
# (``scheduling-gpu``, ``placement-a-b``), so ``horizon.evt.scheduling-gpu.>`` is its fence, and
# ``service_of`` maps the token back to the service whose decisions they are.
PARTITIONED_SERVICES: tuple[str, ...] = ("scheduling", "placement")
# The filter of every scheduling leader's cycles: a cycle that admits a job under an account with
# a quota is fenced on it, so two partition leaders never admit against the same quota unseen.
CYCLES_FILTER = f"{EVENT_PREFIX}.*.SchedulingCycleCompleted.>"


def leader_token(service: str, partitions: tuple[str, ...] | list[str]) -> str:
    """The service token of ``service``'s leader for ``partitions`` (the plain name for none): each
    partition by its ``partition_token``, sorted, joined by ``-``."""
    if not partitions:
        return service
    if service not in PARTITIONED_SERVICES:
        raise ValueError(f"{service} has one leader for the whole cluster; by partition: "
                         f"{', '.join(PARTITIONED_SERVICES)}")
    for name in partitions:
        if not valid_partition(name):
            raise ValueError(f"partition: {name!r} is not a partition name; use 1-128 characters of letters, "
                             "digits, '_', '-' or '.'")
    return check_token(f"{service}-{'-'.join(sorted({partition_token(p) for p in partitions}))}", "leader")


_PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def valid_partition(name: str) -> bool:
    """A partition's name: a token, or with dots too (Slurm's ``test.q``), which no subject may carry
    as they are: ``partition_token`` is what goes into one."""
    return isinstance(name, str) and _PARTITION_RE.match(name) is not None


def partition_token(name: str) -> str:
    """A partition's name as a subject token: itself when it is one; else its characters a token may
    not hold (the dots) as ``_``, then ``_`` and 8 hex digits of its SHA-1, so that ``test.q`` and a
    partition ``test_q`` are two tokens (``test.q`` -> ``test_q_<8 hex>``)."""
    if valid_token(name):
        return name
    digest = hashlib.sha1(name.encode("utf-8", "replace")).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:119] + "_" + digest


def event_owner(subject: str) -> str:
    """The ``<service>`` token of an output subject (``horizon.evt.<service>.<Type>.<aggregate>``); "" for others."""
    parts = subject.split(".", 3)
    return parts[2] if len(parts) > 3 and parts[0] == "horizon" and parts[1] == "evt" else ""


def service_of(owner: str) -> str:
    """The service an output subject's ``<service>`` token belongs to (``scheduling-gpu``: scheduling)."""
    head, dash, _rest = owner.partition("-")
    return head if dash and head in PARTITIONED_SERVICES else owner


def partner_token(owner: str) -> str:
    """A partition leader's other half: ``scheduling-gpu`` <-> ``placement-gpu`` (the plain names too)."""
    head, dash, rest = owner.partition("-")
    other = {"scheduling": "placement", "placement": "scheduling"}.get(head)
    if other is None:
        raise ValueError(f"{owner!r} is no scheduling or placement leader")
    return f"{other}{dash}{rest}"


# Which service publishes each output event type (documentation, permissions, tests).
PUBLISHERS: dict[str, tuple[str, ...]] = {
    "JobAccepted": ("submission",),
    "JobRejected": ("submission",),
    "JobCancelled": ("submission", "agent"),
    "JobHeld": ("submission",),
    "JobReleased": ("submission",),
    "JobPriorityChanged": ("submission",),
    "JobStopRequested": ("submission",),
    "RequestRejected": ("submission", "inventory"),
    "InputRejected": ("submission",),
    "LogLayoutChanged": ("submission",),
    "InputRelayed": ("submission",),
    "PlacementCycleCompleted": ("placement",),
    "SchedulingCycleCompleted": ("scheduling",),
    "UsageCharged": ("scheduling",),
    "JobUnschedulable": ("scheduling",),
    "JobDependencyNeverSatisfied": ("scheduling",),
    "ConfigRejected": ("scheduling", "placement", "preemption"),
    "JobRequeued": ("scheduling",),
    "JobScheduled": ("placement",),
    "JobResized": ("placement", "preemption", "inventory"),
    "PlacementBlocked": ("placement",),
    "PreemptionRequested": ("preemption", "inventory"),
    "JobPreempted": ("agent",),
    "JobCheckpointed": ("agent",),
    "JobStarted": ("agent",),
    "JobSucceeded": ("agent",),
    "JobFailed": ("agent", "inventory"),
    "JobStepStarted": ("agent",),
    "JobStepEnded": ("agent",),
    "NodeRegistered": ("agent",),
    "NodeReady": ("inventory",),
    "NodeCordoned": ("inventory",),
    "NodeUncordoned": ("inventory",),
    "NodeDraining": ("inventory",),
    "JobDrainPlanned": ("inventory",),
    "NodeTaintsChanged": ("inventory",),
    "NodeDatasetsChanged": ("inventory",),
    "NodeOvercommitChanged": ("inventory",),
    "NodeMemoryPressure": ("agent",),
    "NodeLost": ("inventory",),
    "NodeRemoved": ("inventory",),
    "ClockTicked": ("clock",),
    # a leader's claim, by the runner of each service that runs under a lease (not a decision)
    "LeadershipClaimed": DECISION_SERVICES,
}

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_KEY_RE = re.compile(r"^[A-Za-z0-9-][A-Za-z0-9_-]{0,127}:[A-Za-z0-9_-]{1,128}$")


def valid_token(value: str) -> bool:
    return isinstance(value, str) and _TOKEN_RE.match(value) is not None


def valid_job_key(value: str) -> bool:
    """A job's key in the log: an id (a token), or ``<tenant>:<id>`` for a tenant's job that came
    through the intake (``job_key``). Both fit a subject token (NATS takes ':' in one)."""
    return valid_token(value) or (isinstance(value, str) and _KEY_RE.match(value) is not None)


def job_key(tenant: str, job_id: str) -> str:
    """The log's key of ``tenant``'s job ``job_id`` when it came through the intake: two tenants
    may use the same id, and nothing a tenant writes can name another tenant's job."""
    return f"{tenant}{KEY_SEPARATOR}{job_id}"


def user_login(tenant: str, name: str) -> str:
    """The NATS user of ``tenant``'s user ``name`` under accounts: ``<tenant>.<name>`` (NATS user names
    are one namespace across accounts, and no tenant name holds a '.'); the tenant's own login is
    named like the tenant, and is its user of that name."""
    return tenant if name == tenant else f"{tenant}.{name}"


def login_user(tenant: str, login: str) -> str:
    """The user of ``tenant`` a NATS user of its account is: ``user_login`` read back; a login of
    another form (a configuration written by hand, deploy/nats/auth.conf) is the user of its name."""
    prefix = tenant + "."
    return login[len(prefix):] if login.startswith(prefix) and len(login) > len(prefix) else login


def tenant_view(tenant: str, key: str) -> str:
    """The id ``tenant`` knows its job ``key`` by (``key`` without ``<tenant>:``)."""
    prefix = tenant + KEY_SEPARATOR
    return key[len(prefix):] if key.startswith(prefix) else key


def check_token(value: str, what: str) -> str:
    if not valid_token(value):
        raise ValueError(
            f"{what}: {value!r} is not allowed in a subject; use 1-128 characters of letters, digits, '_' or '-'"
        )
    return value


def input_subject(tenant: str, verb: str) -> str:
    if verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}; verbs: {', '.join(VERBS)}")
    check_token(tenant, "tenant")
    if tenant.startswith("_"):
        raise ValueError(f"tenant: {tenant!r} may not start with '_' (reserved)")
    return f"{INPUT_PREFIX}.{tenant}.{verb}"


def admin_subject(verb: str) -> str:
    if verb not in ADMIN_VERBS:
        raise ValueError(f"unknown admin verb {verb!r}; verbs: {', '.join(ADMIN_VERBS)}")
    return f"{INPUT_PREFIX}.{ADMIN_TENANT}.{verb}"


def event_subject(service: str, event: c.Event) -> str:
    """``horizon.evt.<service>.<Type>.<aggregate>``; an id unfit for a subject token (a rejected
    job id such as ``a.b``) becomes ``_invalid-<digest>`` so the event is still publishable."""
    aggregate = event.correlation_id or "_"
    if not valid_job_key(aggregate):
        aggregate = "_invalid-" + hashlib.sha1(aggregate.encode("utf-8", "replace")).hexdigest()[:16]
    return f"{EVENT_PREFIX}.{service}.{event.event_type}.{aggregate}"


def intake_subject(tenant: str, verb: str) -> str:
    return f"{INTAKE_PREFIX}.{tenant}.{verb}"


def dlq_subject(service: str) -> str:
    return f"horizon.dlq.{service}"


def query_subject(view: str) -> str:
    return f"horizon.query.{view}"


def heartbeat_subject(node: str) -> str:
    return f"horizon.hb.{node}"


class Subject(NamedTuple):
    """A parsed stream subject. ``kind`` is ``input``, ``admin`` or ``event``."""

    kind: str
    owner: str  # tenant (input), "_admin" (admin) or service (event)
    name: str  # verb (input, admin) or event type (event)
    aggregate: str = ""


def parse_subject(subject: str) -> Subject | None:
    """Parse a subject of the HORIZON stream; ``None`` for anything else."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[0] == "horizon" and parts[1] == "in":
        kind = "admin" if parts[2] == ADMIN_TENANT else "input"
        return Subject(kind, parts[2], parts[3])
    if len(parts) == 5 and parts[0] == "horizon" and parts[1] == "evt":
        return Subject("event", parts[2], parts[3], parts[4])
    return None


def expected_type(subject: Subject) -> type[c.Event] | None:
    """The event type an input subject admits (``None`` for output subjects)."""
    if subject.kind == "input":
        return VERBS.get(subject.name)
    if subject.kind == "admin":
        return ADMIN_VERBS.get(subject.name)
    return None
