"""Partitions, as Slurm users know them: named sets of nodes with defaults and limits. Pure.

One fold, ``Partitions``, that every part needing partitions keeps alike: submission (which
partition a job gets, its defaults and limits), scheduling (priority tiers; it answers the
operator's configuration it cannot apply with ``ConfigRejected``), placement and preemption (a job
runs on its partition's nodes only), and the projections (``horizon sinfo``, ``horizon partition
list``). It folds:

* ``PartitionConfigured`` (``horizon.in._admin.partition``): a partition's whole configuration,
  or its removal. One that ``check`` refuses changes nothing, in every fold;
* ``PartitionPolicyConfigured`` (``horizon.in._admin.partition-policy``): what a submission that
  names a partition the cluster does not define gets (``default`` or ``reject``);
* ``NodeRegistered`` / ``NodeRemoved``: the nodes and their labels, which a partition's node list
  and label selector are matched against (a node that registers later joins the partitions that
  name it: membership is computed, never stored); ``horizon.io/backend`` among them, as the cluster's
  fold sets it (a partition of one backend's nodes: ``--label horizon.io/backend=slurm``);
* ``ProfileConfigured``: the placement profiles that exist (a partition may name one), applied
  exactly when placement applies them (``check_profile``, on the operator's subject).

**Which partition a job gets** (``candidates`` and ``limit_problem``; submission applies them in
``services/submission/partition_choice.py``). A job names a list (Slurm's ``-p a,b``) or none:

1. no partition is defined at all: the job runs on any node (``JobSpec.partition`` ""), as before
   partitions existed; a name given gets a warning (or, under ``reject``, a rejection);
2. none named: the default partition (none defined as default: a rejection listing them);
3. a name the cluster does not define: under ``reject`` a rejection naming it; under ``default``
   (the rule until an operator sets one) it is replaced by the default partition, and the job's
   ``JobAccepted`` carries a warning naming the partition it used;
4. of the candidates, in order, the first that can run the job: not draining, within its limits
   (time, nodes, accounts, QOS) and with nodes that could ever hold it. None can: a rejection
   naming each partition and its limit.

A partition's defaults apply to a job that gave no value of its own: ``default_time_s`` (else its
``max_time_s``, else the cluster's default time), ``default_mem_per_gpu`` x the task's GPUs for a
job with GPUs, else ``default_mem_per_cpu`` x its CPUs (else 1 GiB per task).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import parse_subject, valid_partition, valid_token
from events.vocabulary import PARTITION_STATES, PRIORITY_TIER_MAX, UNKNOWN_PARTITION
from services.domain.cluster import registered_labels
from services.domain.fit.cycle import PartitionView
from services.domain.fit.profile import check_profile
from services.domain.hostlist import HostlistError, NodePattern

__all__ = ["Partitions", "PartitionView", "PartitionsData", "Candidates", "check_partition", "limit_problem",
           "default_time", "default_memory", "duration", "DEFAULT_MEMORY_BYTES"]

DEFAULT_MEMORY_BYTES = 1 << 30  # per task, when neither the job nor its partition says (ResourceRequest's "1Gi")


@dataclass(frozen=True, slots=True)
class Candidates:
    """The partitions a submission may run in, in order, the names it gave that are not defined,
    and (field, reason) when it cannot run anywhere whatever its size."""

    names: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    problem: tuple[str, str] | None = None
    none_defined: bool = False  # no partition exists: the job runs on any node


class PartitionsData(msgspec.Struct, array_like=True):
    """The fold as a snapshot carries it (``services/domain/queue/codec.py``)."""

    configs: list[c.PartitionConfigured]
    default: str | None
    unknown: str
    nodes: dict[str, dict[str, str]]
    profiles: list[str]


def duration(seconds: float) -> str:
    """Slurm's way of writing a time limit: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    s = max(0, int(math.ceil(seconds)))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def _positive(value: float | None) -> bool:
    return value is None or (not isinstance(value, bool) and value > 0 and math.isfinite(value))


def check_partition(ev: c.PartitionConfigured, profiles: Iterable[str] = ("default",),
                    defined: Iterable[str] = ()) -> str | None:
    """Why ``ev`` cannot be applied (the ``ConfigRejected`` reason), or None."""
    if not valid_partition(ev.name):
        return f"name: {ev.name[:200]!r} must be 1-128 letters, digits, '_', '-' or '.'"
    if ev.removed:
        return None if ev.name in defined else f"name: no partition {ev.name!r} to remove"
    if not ev.nodes and not ev.node_labels:
        return ("nodes: name its nodes (a host list such as node[01-04], a glob such as gpu-*, or ALL), "
                "or give node_labels")
    try:
        NodePattern(ev.nodes)
    except HostlistError as exc:
        return f"nodes: {exc}"
    for key in ev.node_labels:
        if not key:
            return "node_labels: a label needs a key"
    if ev.state not in PARTITION_STATES:
        return f"state: {ev.state!r} is not one of {', '.join(PARTITION_STATES)}"
    for name in ("max_time_s", "default_time_s"):
        if not _positive(getattr(ev, name)):
            return f"{name}: {getattr(ev, name)!r} must be a positive number of seconds"
    if ev.max_time_s is not None and ev.default_time_s is not None and ev.default_time_s > ev.max_time_s:
        return (f"default_time_s: {duration(ev.default_time_s)} is above the partition's max_time_s "
                f"{duration(ev.max_time_s)}")
    for name in ("default_mem_per_cpu", "default_mem_per_gpu", "max_nodes"):
        value = getattr(ev, name)
        if value is not None and (isinstance(value, bool) or value < 1):
            return f"{name}: {value!r} must be 1 or more"
    for name in ("allowed_accounts", "allowed_qos"):
        for value in getattr(ev, name):
            if not valid_token(value):
                return f"{name}: {value[:200]!r} must be 1-128 letters, digits, '_' or '-'"
    if isinstance(ev.priority_tier, bool) or not 0 <= ev.priority_tier <= PRIORITY_TIER_MAX:
        return f"priority_tier: {ev.priority_tier!r} must be between 0 and {PRIORITY_TIER_MAX}"
    if ev.profile and ev.profile not in profiles:
        return (f"profile: {ev.profile[:200]!r} is not a configured placement profile (profiles: "
                f"{', '.join(sorted(profiles))}); configure it first: horizon profile set {ev.profile[:200]}")
    return None


def limit_problem(cfg: c.PartitionConfigured, *, time_limit_s: float, time_given: bool, nodes: int, account: str,
                  qos: str) -> tuple[str, str] | None:
    """(field, reason) when ``cfg``'s state or limits refuse the job, naming the partition and the limit."""
    name = cfg.name
    if cfg.state == "drain":
        return ("partitions", f"partition {name!r} is draining: it takes no new jobs (the jobs already in it "
                              "still run); name another partition")
    if cfg.max_time_s is not None and time_limit_s > cfg.max_time_s:
        how = "" if time_given else " (the job gave none: this is its default)"
        return ("time_limit_s", f"{duration(time_limit_s)}{how} is above partition {name!r}'s time limit of "
                                f"{duration(cfg.max_time_s)} (MaxTime); ask for --time={duration(cfg.max_time_s)} "
                                "or less")
    if cfg.max_nodes is not None and nodes > cfg.max_nodes:
        return ("nodes", f"{nodes} nodes is above partition {name!r}'s limit of {cfg.max_nodes} (MaxNodes)")
    if cfg.allowed_accounts and account not in cfg.allowed_accounts:
        return ("account", f"account {account!r} may not use partition {name!r} (AllowAccounts: "
                           f"{', '.join(cfg.allowed_accounts)})")
    if cfg.allowed_qos and (qos or "normal") not in cfg.allowed_qos:
        return ("qos", f"QOS {qos or 'normal'!r} may not use partition {name!r} (AllowQos: "
                       f"{', '.join(cfg.allowed_qos)})")
    return None


def default_time(cfg: c.PartitionConfigured | None, cluster_default_s: float) -> float:
    """A job's time limit when it gave none: the partition's DefaultTime, else its MaxTime (as Slurm),
    else the cluster's."""
    if cfg is not None and cfg.default_time_s is not None:
        return cfg.default_time_s
    if cfg is not None and cfg.max_time_s is not None:
        return cfg.max_time_s
    return cluster_default_s


def default_memory(cfg: c.PartitionConfigured | None, cpus_milli: int, gpus: int) -> int:
    """A task's memory when the job gave none: DefMemPerGPU x its GPUs (a job with GPUs), else
    DefMemPerCPU x its CPUs (a fraction of a CPU counts in proportion, rounded up to a byte),
    else 1 GiB."""
    if cfg is not None and gpus and cfg.default_mem_per_gpu is not None:
        return cfg.default_mem_per_gpu * gpus
    if cfg is not None and cfg.default_mem_per_cpu is not None:
        return -(-cfg.default_mem_per_cpu * cpus_milli // 1000)
    return DEFAULT_MEMORY_BYTES


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


class Partitions:
    """The partitions folded from the log, the nodes they are matched against, and the rule for an
    unknown name. ``version`` changes whenever what a partition holds or allows may have changed."""

    def __init__(self) -> None:
        self.configs: dict[str, c.PartitionConfigured] = {}
        self.patterns: dict[str, NodePattern] = {}
        self.default: str | None = None
        self.unknown = "default"
        self.nodes: dict[str, dict[str, str]] = {}  # registered, not removed -> labels
        self.profiles: set[str] = {"default"}
        self.version = 0
        self._members: dict[str, tuple[str, ...]] = {}
        self._memberships: dict[str, frozenset[str]] | None = None
        self._views: dict[str, PartitionView] = {}

    # ------------------------------------------------------------------ folding

    def apply(self, event: Event, subject: str) -> str | None:
        """Fold one record. For a partition configuration that cannot be applied, the reason (the
        caller answering the operator's inputs makes it a ``ConfigRejected``); else None."""
        if isinstance(event, c.NodeRegistered):
            labels = registered_labels(event)  # as the cluster's fold has them
            if self.nodes.get(event.node) != labels:
                self.nodes[event.node] = labels
                self._changed()
        elif isinstance(event, c.NodeRemoved):
            if self.nodes.pop(event.node, None) is not None:
                self._changed()
        elif isinstance(event, c.ProfileConfigured):
            if _admin(subject) and check_profile(event) is None:
                self.profiles.add(event.name)
        elif isinstance(event, c.PartitionConfigured):
            if not _admin(subject):
                return f"PartitionConfigured is accepted only on horizon.in._admin.partition, not {subject}"
            why = check_partition(event, self.profiles, self.configs)
            if why is None:
                self._configure(event)
            return why
        elif isinstance(event, c.PartitionPolicyConfigured):
            if not _admin(subject):
                return ("PartitionPolicyConfigured is accepted only on horizon.in._admin.partition-policy, "
                        f"not {subject}")
            if event.unknown not in UNKNOWN_PARTITION:
                return f"unknown: {event.unknown[:200]!r} is not one of {', '.join(UNKNOWN_PARTITION)}"
            self.unknown = event.unknown
            self.version += 1
        return None

    def _configure(self, ev: c.PartitionConfigured) -> None:
        if ev.removed:
            self.configs.pop(ev.name, None)
            self.patterns.pop(ev.name, None)
            if self.default == ev.name:
                self.default = None
        else:
            self.configs[ev.name] = ev
            self.patterns[ev.name] = NodePattern(ev.nodes) if ev.nodes else NodePattern(["ALL"])
            if ev.default:
                self.default = ev.name
            elif self.default == ev.name:
                self.default = None
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._members.clear()
        self._memberships = None
        self._views.clear()

    # ------------------------------------------------------------------ reading

    def __bool__(self) -> bool:
        return bool(self.configs)

    def names(self) -> list[str]:
        return sorted(self.configs)

    def members(self, name: str) -> tuple[str, ...]:
        """The registered nodes of partition ``name``, by name (none for an unknown partition)."""
        found = self._members.get(name)
        if found is None:
            cfg = self.configs.get(name)
            if cfg is None:
                return ()
            pattern = self.patterns[name]
            wanted = cfg.node_labels.items()
            found = tuple(node for node in sorted(self.nodes) if pattern.matches(node)
                          and all(self.nodes[node].get(k) == v for k, v in wanted))
            self._members[name] = found
        return found

    def memberships(self) -> Mapping[str, frozenset[str]]:
        """Node -> the partitions it is in (placement files nodes apart by it: two nodes alike in all
        else but their partitions answer a partition's job differently)."""
        if self._memberships is None:
            out: dict[str, set[str]] = {}
            for name in sorted(self.configs):
                for node in self.members(name):
                    out.setdefault(node, set()).add(name)
            self._memberships = {node: frozenset(names) for node, names in out.items()}
        return self._memberships

    def view(self, name: str) -> PartitionView | None:
        """What placement filters a job of partition ``name`` by; None for a job of no partition."""
        if not name:
            return None
        found = self._views.get(name)
        if found is None:  # kept until the partitions or the nodes change (placement asks once per job)
            cfg = self.configs.get(name)
            found = (PartitionView(name, frozenset(self.members(name)), cfg.state) if cfg is not None
                     else PartitionView(name, frozenset(), exists=False))
            if len(self._views) < 4096:
                self._views[name] = found
        return found

    def tier(self, name: str) -> int:
        cfg = self.configs.get(name)
        return cfg.priority_tier if cfg is not None else 0

    def tiered(self) -> bool:
        """Whether tiers differ at all (all equal: the queue's order is the policy's alone)."""
        return len({cfg.priority_tier for cfg in self.configs.values()}) > 1 or any(
            cfg.priority_tier for cfg in self.configs.values())

    def candidates(self, requested: Sequence[str]) -> Candidates:
        """The partitions a job naming ``requested`` may run in, in the order to try them (see the
        module's docstring), and the names it gave that are not defined."""
        names = list(dict.fromkeys(n.strip() for n in requested if n.strip()))
        if not self.configs:
            if names and self.unknown == "reject":
                return Candidates(problem=("partitions", f"invalid partition specified: {_names(names)}: this "
                                                         "cluster defines no partitions"))
            return Candidates(unknown=tuple(names), none_defined=True)
        unknown = [n for n in names if n not in self.configs]
        known = [n for n in names if n in self.configs]
        listing = ", ".join(sorted(self.configs))
        if unknown and self.unknown == "reject":
            return Candidates(problem=("partitions", f"invalid partition specified: {_names(unknown)} (partitions "
                                                     f"here: {listing})"))
        if not names or unknown:
            if self.default is not None and self.default not in known:
                known.append(self.default)
        if not known:
            why = (f"partition {_names(unknown)} is not defined here" if unknown else "no partition named")
            return Candidates(problem=("partitions", f"{why}, and this cluster has no default partition; name one "
                                                     f"of: {listing}"))
        return Candidates(tuple(known), tuple(unknown))

    # ------------------------------------------------------------------ snapshots

    def data(self) -> PartitionsData:
        return PartitionsData(list(self.configs.values()), self.default, self.unknown,
                              {n: dict(sorted(labels.items())) for n, labels in sorted(self.nodes.items())},
                              sorted(self.profiles))

    @classmethod
    def from_data(cls, data: PartitionsData) -> Partitions:
        out = cls()
        for cfg in data.configs:
            out.configs[cfg.name] = cfg
            out.patterns[cfg.name] = NodePattern(cfg.nodes) if cfg.nodes else NodePattern(["ALL"])
        out.default, out.unknown = data.default, data.unknown
        out.nodes = {n: dict(labels) for n, labels in data.nodes.items()}
        out.profiles = set(data.profiles)
        return out


def _admin(subject: str) -> bool:
    parsed = parse_subject(subject)
    return parsed is not None and parsed.kind == "admin"
