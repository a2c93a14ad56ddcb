"""The cluster: nodes and the allocation ledger, folded from the log. Pure.

The ledger is never incremented by hand: a node's used devices, CPUs and
memory are exactly the allocations of the jobs that the job table says hold
resources (SCHEDULED or RUNNING) on it. ``Cluster.on_transition`` keeps the
two in step, and ``Cluster.check`` recomputes the ledger from the jobs to
prove it (used by the invariant checker and the property tests).

A device whose ``health`` is set (its agent saw an XID error, or lost it
from the bus) stays in ``Node.gpus`` (a job may still hold it) but is
neither free nor capacity: the fit filters and scores count the healthy
ones only (``Node.unhealthy_gpus``).

What work its backend did not place holds on a node (``NodeRegistered.foreign``: a job submitted
straight to Slurm) is *used* capacity, outside the ledger: not free (``free_cpus_milli``,
``free_memory_bytes``, ``free_devices`` and the fit filters take it off), but still the node's
capacity, so a job that needs the whole node waits for it rather than being judged never to fit.

Every node carries the label ``horizon.io/backend`` (``BACKEND_LABEL``) naming the backend that offers it
(``agent``, ``slurm``, ``kubernetes``: ``NodeRegistered.backend``), set by the fold over whatever the
registration said: a job's ``--node-selector horizon.io/backend=slurm`` (or an affinity, or a
partition's ``node_labels``) pins it to one backend (docs/backends.md, "One queue over several backends").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from functools import lru_cache
from dataclasses import dataclass, field

from events import catalogue as c
from services.domain.jobs import HOLDS_RESOURCES, JobTable, Transition
from services.domain.qos import overcommitted, qos_class

__all__ = ["BACKEND_LABEL", "backend_name", "registered_labels", "Node", "Cluster", "device_sort_key", "Request", "request_of", "least", "fold_cluster"]


BACKEND_LABEL = "horizon.io/backend"  # every node's: the backend that offers it (agent, slurm, kubernetes)


def backend_name(backend: str) -> str:
    """A node's backend by name ("": registered by Horizon's own node agent, ``agent``)."""
    return backend or "agent"


def registered_labels(event: c.NodeRegistered) -> dict[str, str]:
    """The labels a registration gives its node: its own, and ``BACKEND_LABEL`` (every fold of nodes the same)."""
    return {**event.labels, BACKEND_LABEL: backend_name(event.backend)}


@lru_cache(maxsize=65536)
def device_sort_key(device_id: str) -> tuple[object, ...]:
    """Natural order: gpu2 before gpu10 (deterministic, and what people expect)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", device_id))


@dataclass(slots=True)
class Node:
    name: str
    cpus_milli: int
    memory_bytes: int
    gpus: dict[str, c.GpuDevice]
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[c.Taint] = field(default_factory=list)
    datasets: frozenset[str] = frozenset()  # what it holds (NodeDatasetsChanged): the locality score
    # requests of burstable and best-effort jobs are packed against capacity x ratio (NodeOvercommitChanged,
    # services/domain/qos.py); guaranteed jobs' against the capacity
    cpu_overcommit: float = 1.0
    memory_overcommit: float = 1.0
    # a drain's options (NodeDraining, services/inventory/drain.py): checkpointable jobs migrate, and
    # what still runs at the deadline is stopped (0: none); reset by an uncordon
    drain_migrate: bool = False
    drain_deadline_ts: float = 0.0
    drain_grace_s: float | None = None  # the grace of the jobs it stops (None: inventory's default)
    registered_seq: int = 0
    ready_seq: int = 0
    lost_seq: int = 0
    ready: bool = False
    cordoned: bool = False
    draining: bool = False
    lost: bool = False
    removed: bool = False
    used_cpus_milli: int = 0
    used_memory_bytes: int = 0
    used_devices: dict[str, str] = field(default_factory=dict)  # device id -> job id
    jobs: dict[str, c.NodeAllocation] = field(default_factory=dict)
    kind: tuple[object, ...] | None = None  # cached by the node index: hardware, labels, taints (see index.py)
    simulated: bool = False  # registered as a development node (its GPUs are not real devices)
    isolation: str = ""  # how its agent confines jobs, as it registered
    backend: str = ""  # the execution backend that registered it ("": the node agent)
    unhealthy_gpus: int = field(init=False, default=0)  # devices with a health problem (derived from gpus)
    foreign: c.ForeignUse | None = None  # what work its backend did not place holds (used, outside the ledger)
    # the taints its last registration gave (a backend's: Kubernetes' own taints); ``taints`` also holds
    # an operator's, which outlive a registration
    registered_taints: list[c.Taint] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.unhealthy_gpus = sum(1 for d in self.gpus.values() if d.health)

    @property
    def unhealthy(self) -> dict[str, str]:
        """Device id -> why it is unhealthy."""
        return {i: d.health for i, d in sorted(self.gpus.items(), key=lambda kv: device_sort_key(kv[0])) if d.health}

    @property
    def schedulable(self) -> bool:
        return self.ready and not (self.cordoned or self.draining or self.lost or self.removed)

    @property
    def status(self) -> str:
        if self.removed:
            return "removed"
        if self.lost:
            return "lost"
        if self.draining:
            return "draining" if self.jobs else "drained"
        if self.cordoned:
            return "cordoned"
        if not self.ready:
            return "registered"
        if not self.jobs and self.foreign is None:
            return "idle"
        return "allocated" if self.free_cpus_milli == 0 or not self.free_devices() and self.gpus else "mixed"

    @property
    def foreign_cpus_milli(self) -> int:
        return self.foreign.cpus_milli if self.foreign is not None else 0

    @property
    def foreign_memory_bytes(self) -> int:
        return self.foreign.memory_bytes if self.foreign is not None else 0

    @property
    def foreign_devices(self) -> frozenset[str]:
        return frozenset(self.foreign.devices) if self.foreign is not None else frozenset()

    @property
    def free_cpus_milli(self) -> int:
        return self.cpus_milli - self.used_cpus_milli - self.foreign_cpus_milli

    @property
    def free_memory_bytes(self) -> int:
        return self.memory_bytes - self.used_memory_bytes - self.foreign_memory_bytes

    def free_devices(self) -> list[c.GpuDevice]:
        foreign = self.foreign_devices
        return [d for i, d in sorted(self.gpus.items(), key=lambda kv: device_sort_key(kv[0]))
                if i not in self.used_devices and not d.health and i not in foreign]


Requirement = tuple[str, str, tuple[str, ...]]  # node label key, operator, values
Term = tuple[tuple[tuple[str, str], ...], str]  # job labels to match, topology key


@dataclass(frozen=True, slots=True)
class Request:
    """What a job needs on each of its nodes, and where it may go: a hashable value, so that
    jobs of one shape share one evaluation per kind of node."""

    cpus_milli: int
    memory_bytes: int
    gpus: int
    gpu_type: str | None
    gpu_variant: str | None
    gpu_memory_bytes: int
    nodes: int
    tasks_per_node: int
    min_nodes: int = 0  # an elastic gang's least (0: rigid): it takes as many of ``nodes`` as fit, this many at least
    selector: tuple[tuple[str, str], ...] = ()
    required: tuple[Requirement, ...] = ()
    preferred: tuple[Requirement, ...] = ()
    tolerations: tuple[c.Toleration, ...] = ()
    affinity: tuple[Term, ...] = ()
    anti_affinity: tuple[Term, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    profile: str = "default"
    partition: str = ""  # jobs of different partitions never share an evaluation
    # Slurm's directives (services/domain/fit/filters/slurm.py): whole nodes, all of their memory,
    # node features, named nodes
    exclusive: bool = False
    whole_memory: bool = False
    constraint: str = ""
    nodelist: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()
    datasets: tuple[str, ...] = ()  # what it reads: the locality score prefers nodes holding them
    guaranteed: bool = True  # its QoS class is guaranteed: packed against a node's real capacity only

    @property
    def named(self) -> bool:
        """Whether the answer depends on the node's name (a node list or exclusions), so that nodes
        of one kind do not all answer alike."""
        return bool(self.nodelist or self.exclude)

    @property
    def topological(self) -> bool:
        """Whether the answer depends on which jobs run where (evaluated node by node)."""
        return bool(self.affinity or self.anti_affinity)


def _requirements(items: object) -> tuple[Requirement, ...]:
    return tuple((r.key, r.operator, tuple(r.values)) for r in items)  # type: ignore[attr-defined]


def _terms(items: object) -> tuple[Term, ...]:
    return tuple((tuple(sorted(t.match_labels.items())), t.topology_key) for t in items)  # type: ignore[attr-defined]


def request_of(spec: c.JobSpec) -> Request:
    per_node = spec.tasks_per_node
    aff = spec.affinity
    return Request(
        cpus_milli=spec.cpus_milli * per_node,
        memory_bytes=spec.memory_bytes * per_node,
        gpus=spec.gpus_on_node,
        gpu_type=spec.gpu_type,
        gpu_variant=spec.gpu_variant,
        gpu_memory_bytes=spec.gpu_memory_bytes,
        nodes=spec.nodes,
        tasks_per_node=per_node,
        min_nodes=spec.min_nodes if spec.elastic else 0,
        selector=tuple(sorted(spec.node_selector.items())),
        required=_requirements(aff.node_required) if aff else (),
        preferred=_requirements(aff.node_preferred) if aff else (),
        tolerations=tuple(spec.tolerations),
        affinity=_terms(aff.job_affinity) if aff else (),
        anti_affinity=_terms(aff.job_anti_affinity) if aff else (),
        labels=tuple(sorted(spec.labels.items())),
        profile=spec.profile,
        partition=spec.partition,
        exclusive=spec.exclusive,
        whole_memory=spec.whole_node_memory,
        constraint=spec.constraint,
        nodelist=frozenset(spec.nodelist),
        exclude=frozenset(spec.exclude_nodes),
        datasets=tuple(spec.datasets),
        guaranteed=qos_class(spec) == "guaranteed",
    )


def least(req: Request) -> Request:
    """The rigid request of an elastic gang at its least size (what a reservation or a preemption makes
    room for); a rigid request itself."""
    return dataclasses.replace(req, nodes=req.min_nodes, min_nodes=0) if req.min_nodes else req


def device_matches(device: c.GpuDevice, req: Request) -> bool:
    if req.gpu_type is not None and device.type != req.gpu_type:
        return False
    if req.gpu_variant is not None and device.variant != req.gpu_variant:
        return False
    return device.memory_bytes >= req.gpu_memory_bytes


def _holds(use: c.ForeignUse) -> bool:
    return bool(use.cpus_milli or use.memory_bytes or use.devices or use.jobs)


_NODE_STATE_EVENTS = (c.NodeReady, c.NodeLost, c.NodeCordoned, c.NodeUncordoned, c.NodeDraining, c.NodeRemoved,
                      c.NodeTaintsChanged, c.NodeDatasetsChanged, c.NodeOvercommitChanged)


class Cluster:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        # the nodes not plainly in service: not ready, lost, removed, draining, or with a NoExecute
        # taint; inventory's decisions are about these alone, so a round costs what is irregular,
        # not the cluster's size (12,500 nodes: a sort and three scans of all of them per round)
        self.irregular: set[str] = set()

    def track(self, node: Node) -> None:
        """Keep ``irregular`` in step with ``node``, after a change to its state."""
        if (not node.ready or node.lost or node.removed or node.draining
                or any(t.effect == "NoExecute" for t in node.taints)):
            self.irregular.add(node.name)
        else:
            self.irregular.discard(node.name)

    def sorted_irregular(self) -> list[Node]:
        return [self.nodes[name] for name in sorted(self.irregular)]

    def sorted_nodes(self) -> list[Node]:
        return [self.nodes[name] for name in sorted(self.nodes)]

    # ---------------------------------------------------------------- folding

    def apply(self, event: c.Event, seq: int) -> bool:
        """Fold a node event; returns True if the set of usable capacity may have changed."""
        if isinstance(event, c.NodeRegistered):
            self._register(event, seq)
            return True
        if not isinstance(event, _NODE_STATE_EVENTS):
            return False
        node = self.nodes.get(event.node)  # type: ignore[attr-defined]
        if node is None or (node.removed and isinstance(event, c.NodeReady)):
            return False
        match event:
            case c.NodeReady():
                node.ready, node.lost, node.ready_seq = True, False, seq
            case c.NodeLost():
                node.lost, node.lost_seq = True, seq
            case c.NodeCordoned():
                node.cordoned = True
            case c.NodeUncordoned():
                node.cordoned, node.draining = False, False
                node.drain_migrate, node.drain_deadline_ts, node.drain_grace_s = False, 0.0, None
            case c.NodeDraining():
                node.draining = True
                node.drain_migrate, node.drain_deadline_ts = event.migrate, event.deadline_ts
                node.drain_grace_s = event.grace_s
            case c.NodeRemoved():
                node.removed, node.ready = True, False
            case c.NodeTaintsChanged(taints=taints):
                node.taints = list(taints)
                node.kind = None
            case c.NodeDatasetsChanged(datasets=datasets):
                node.datasets = frozenset(datasets)
                node.kind = None
            case c.NodeOvercommitChanged(cpu_overcommit=cpu, memory_overcommit=memory):
                node.cpu_overcommit, node.memory_overcommit = cpu, memory
                node.kind = None
        self.track(node)
        return True

    def _register(self, event: c.NodeRegistered, seq: int) -> None:
        name = event.node
        old = self.nodes.get(name)
        node = Node(
            name=name,
            cpus_milli=event.cpus_milli,
            memory_bytes=event.memory_bytes,
            gpus={d.id: d for d in event.gpus},
            labels=registered_labels(event),
            taints=list(event.taints),
            registered_taints=list(event.taints),
            registered_seq=seq,
            simulated=event.simulated,
            isolation=event.isolation,
            backend=event.backend,
            foreign=event.foreign if event.foreign is not None and _holds(event.foreign) else None,
        )
        if old is not None and not old.removed:
            # Re-registration (an agent restarted): keep the node's state and ledger.
            node.ready, node.cordoned, node.draining, node.lost = old.ready, old.cordoned, old.draining, old.lost
            node.drain_migrate, node.drain_deadline_ts = old.drain_migrate, old.drain_deadline_ts
            node.drain_grace_s = old.drain_grace_s
            node.ready_seq, node.lost_seq = old.ready_seq, old.lost_seq
            node.used_cpus_milli, node.used_memory_bytes = old.used_cpus_milli, old.used_memory_bytes
            node.used_devices, node.jobs = old.used_devices, old.jobs
            # taints set by operators since outlive a registration; the registration's own follow it (a
            # Kubernetes node's taints come and go with the cluster: node.kubernetes.io/not-ready)
            node.taints = [t for t in old.taints if t not in old.registered_taints or t in event.taints] + \
                [t for t in event.taints if t not in old.taints]
            node.datasets = old.datasets  # and so do the datasets they said it holds
            node.cpu_overcommit, node.memory_overcommit = old.cpu_overcommit, old.memory_overcommit  # and its ratios
        self.nodes[name] = node
        self.track(node)

    def on_transition(self, tr: Transition) -> bool:
        """Keep the ledger in step with the job table; True if capacity was freed."""
        was = tr.before in HOLDS_RESOURCES
        now = tr.after in HOLDS_RESOURCES
        if now and not was:
            for alloc in tr.job.allocations:
                self._take(tr.job.job_id, alloc)
            return False
        if was and not now:
            for alloc in tr.job.allocations:
                self._give_back(tr.job.job_id, alloc)
            return True
        return False

    def _take(self, job_id: str, alloc: c.NodeAllocation) -> None:
        node = self.nodes.get(alloc.node)
        if node is None:
            return
        node.jobs[job_id] = alloc
        node.used_cpus_milli += alloc.cpus_milli
        node.used_memory_bytes += alloc.memory_bytes
        for device in alloc.device_ids:
            node.used_devices[device] = job_id

    def _give_back(self, job_id: str, alloc: c.NodeAllocation) -> None:
        node = self.nodes.get(alloc.node)
        if node is None or node.jobs.pop(job_id, None) is None:
            return
        node.used_cpus_milli -= alloc.cpus_milli
        node.used_memory_bytes -= alloc.memory_bytes
        for device in alloc.device_ids:
            if node.used_devices.get(device) == job_id:
                del node.used_devices[device]

    # ---------------------------------------------------------------- checking

    def check(self, jobs: JobTable) -> list[str]:
        """Recompute the ledger from the jobs; return every discrepancy or over-allocation."""
        problems: list[str] = []
        expected: dict[str, dict[str, str]] = {name: {} for name in self.nodes}
        cpus: dict[str, int] = dict.fromkeys(self.nodes, 0)
        mem: dict[str, int] = dict.fromkeys(self.nodes, 0)
        for job in sorted(jobs.jobs.values(), key=lambda j: j.job_id):
            if job.state not in HOLDS_RESOURCES:
                continue
            for alloc in job.allocations:
                if alloc.node not in self.nodes:
                    problems.append(f"{job.job_id}: allocated on unknown node {alloc.node}")
                    continue
                cpus[alloc.node] += alloc.cpus_milli
                mem[alloc.node] += alloc.memory_bytes
                for device in alloc.device_ids:
                    other = expected[alloc.node].get(device)
                    if other is not None:
                        problems.append(f"{alloc.node}/{device}: allocated to both {other} and {job.job_id}")
                    expected[alloc.node][device] = job.job_id
                    if device not in self.nodes[alloc.node].gpus:
                        problems.append(f"{job.job_id}: device {device} does not exist on {alloc.node}")
        for name, node in sorted(self.nodes.items()):
            cpu_room = overcommitted(node.cpus_milli, node.cpu_overcommit)
            memory_room = overcommitted(node.memory_bytes, node.memory_overcommit)
            if cpus[name] > cpu_room:
                problems.append(f"{name}: {cpus[name]} millicores allocated of {cpu_room}")
            if mem[name] > memory_room:
                problems.append(f"{name}: {mem[name]} bytes allocated of {memory_room}")
            if (cpus[name], mem[name]) != (node.used_cpus_milli, node.used_memory_bytes):
                problems.append(
                    f"{name}: ledger holds {node.used_cpus_milli} millicores / {node.used_memory_bytes} bytes, "
                    f"jobs hold {cpus[name]} / {mem[name]}"
                )
            if expected[name] != node.used_devices:
                # (device, holder) pairs: the two sides may name the same devices for different jobs
                problems.append(f"{name}: ledger {sorted(node.used_devices.items())} != jobs "
                                f"{sorted(expected[name].items())}")
        return problems


def fold_cluster(cluster: Cluster, jobs: JobTable, event: c.Event, seq: int, now: float,
                 owner: Callable[[], Transition | None] | None = None) -> Transition | None:
    """Fold one event into the cluster and the job table together, the ledger following the jobs.

    Returns the job transition it caused (``None`` for node events and no-ops). ``owner``: when another
    fold owns ``jobs`` (the preemption fold shares its scheduler's view's table), that fold applied to
    this event (every event, node events too), returning the transition it made in the table.
    """
    if cluster.apply(event, seq):
        if owner is not None:
            owner()
        return None
    # an elastic job's nodes changed (JobResized, no transition), or its backend chose other GPUs than
    # placement (JobStarted.devices): the ledger follows the job's new allocations
    job = jobs.jobs.get(event.job_id) if isinstance(event, (c.JobResized, c.JobStarted)) else None
    before = job.allocations if job is not None else ()
    tr = jobs.apply(event, seq, now) if owner is None else owner()
    if job is not None and job.allocations is not before and job.state in HOLDS_RESOURCES:
        for alloc in before:
            cluster._give_back(job.job_id, alloc)
        for alloc in job.allocations:
            cluster._take(job.job_id, alloc)
    if tr is not None:
        cluster.on_transition(tr)
    return tr

