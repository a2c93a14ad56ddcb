"""The scheduler view's fold as bytes: what a restarted ``SchedulerView`` loads instead of replaying.

``SchedulerView`` (``projections/scheduling.py``) folds the whole log through
two cores: the scheduling core (the queue, fair share, quotas) and the
preemption core (the cluster ledger the nodes and allocations tables show,
and what a preemption dry run needs). ``StandingStore`` keeps the bytes this
module writes in its ``fold_state`` table, in the same transaction as the
rows they produced, so a restart loads the fold at that sequence and follows
the log from the next one.

What is written:

* the scheduling state, by ``QueueFold.dump`` (its own format and
  fingerprint: ``services/scheduling/core.py``, docs/benchmarks.md §4);
* the preemption state, field by field (the preemption core has no
  ``dump``): its inner scheduling state by the scheduling core's ``dump``
  again (with the one job table the preemption ledger follows too), the
  cluster nodes and ledger, its configuration and its bookkeeping. Maps
  keep their order, so the loaded state iterates exactly as the folded one
  did;
* what the view folds itself: the next hour of usage history to sample,
  rejected operator inputs, the tenants seen under each association.

**Trust.** ``load`` answers None, and the view replays from sequence 1,
when the bytes are of another format, of a view configured otherwise (the
policy, virtual time, the sampling interval), or of code whose preemption
state, nodes, jobs or configuration have other fields than the ones this
module writes (``SHAPE``). When this code does not know every field of the
preemption state (``supported`` is False: a field was added and not here),
no state is written or read at all: a replay is slower, never wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import deque
from types import MappingProxyType

import msgspec

from events import catalogue as c
from services.domain.preemption.planner import PreemptionPlanner
from services.domain.preemption.state import PreemptionConfig, PreemptionState
from services.runtime.service import collector_paused
from services.domain.queue.fold import QueueFold
from services.domain.queue.state import SchedulingState
from services.domain.cluster import Node
from services.domain.jobs import Job

__all__ = ["FORMAT", "SHAPE", "supported", "ViewExtras", "dump_view", "load_view"]

FORMAT = 3  # 2: the log's layout (services/domain/protocol.py CoreState); 3: preemption's table is its view's

# Every attribute of a PreemptionState this module writes (and how, below). A new one makes
# ``supported`` False until it is handled here.
_PREEMPTION_FIELDS = frozenset({
    "seq", "now", "sched", "jobs", "cluster", "config", "blocked", "preempted", "checkpoint_ts", "stopping",
    "no_cascade", "recent", "candidates", "blocked_seq", "round_ended", "running_by_class", "borrowed_running",
    "config_rejections", "held", "layout", "layout_seq", "relayed_seq",
})
_NODE_FIELDS = ("name", "cpus_milli", "memory_bytes", "gpus", "labels", "taints", "datasets", "cpu_overcommit",
                "memory_overcommit", "drain_migrate", "drain_deadline_ts", "drain_grace_s",
                "registered_seq",
                "ready_seq", "lost_seq", "ready", "cordoned", "draining", "lost", "removed", "used_cpus_milli",
                "used_memory_bytes", "used_devices", "jobs", "kind", "simulated", "isolation", "backend", "unhealthy_gpus",
                "foreign", "registered_taints")
_CONFIG_FIELDS = ("rules", "victims", "grace_period_s", "max_preemptions", "per_minute", "per_account_per_minute")


def _shape() -> tuple[bool, str]:
    state_fields = sorted(vars(PreemptionState(SchedulingState())))
    node_fields = [f.name for f in dataclasses.fields(Node)]
    config_fields = [f.name for f in dataclasses.fields(PreemptionConfig)]
    job_fields = [f.name for f in dataclasses.fields(Job)]
    known = (set(state_fields) == _PREEMPTION_FIELDS and tuple(node_fields) == _NODE_FIELDS
             and tuple(config_fields) == _CONFIG_FIELDS)
    text = json.dumps([state_fields, node_fields, config_fields, job_fields])
    return known, hashlib.sha256(text.encode()).hexdigest()[:16]


supported, SHAPE = _shape()


class _Node(msgspec.Struct, array_like=True):
    name: str
    cpus_milli: int
    memory_bytes: int
    gpus: list[c.GpuDevice]
    labels: dict[str, str]
    taints: list[c.Taint]
    seqs: tuple[int, int, int]  # registered, ready, lost
    flags: tuple[bool, bool, bool, bool, bool]  # ready, cordoned, draining, lost, removed
    used_cpus_milli: int
    used_memory_bytes: int
    used_devices: dict[str, str]
    jobs: dict[str, c.NodeAllocation]
    simulated: bool = False
    isolation: str = ""
    datasets: list[str] = []
    overcommit: tuple[float, float] = (1.0, 1.0)  # cpu, memory
    drain: tuple[bool, float, float | None] = (False, 0.0, None)  # migrate, deadline_ts, grace_s
    backend: str = ""  # the execution backend that registered it
    foreign: c.ForeignUse | None = None  # what work its backend did not place holds there
    registered_taints: list[c.Taint] = []  # the taints of its last registration


class _Config(msgspec.Struct, array_like=True):
    rules: dict[str, list[str]]
    victims: str
    grace_period_s: float
    max_preemptions: int
    per_minute: int
    per_account_per_minute: int


class _Preemption(msgspec.Struct, array_like=True):
    seq: int
    now: float
    sched: bytes  # with the job table
    nodes: list[_Node]
    config: _Config
    blocked: dict[str, c.PlacementBlocked]
    preempted: dict[str, int]
    checkpoint_ts: dict[str, float]
    stopping: dict[str, str]
    no_cascade: list[str]
    recent: list[tuple[float, str]]
    candidates: dict[int, list[str]]
    blocked_seq: dict[str, int]
    round_ended: dict[str, int]
    running_by_class: dict[str, int]
    borrowed_running: int
    config_rejections: dict[int, str]
    held: dict[str, list[str]]
    layout: tuple[int, int, int] = (1, 0, 0)  # the log's layout, its marker's seq, the last relayed input


class ViewExtras(msgspec.Struct, array_like=True):
    """What ``SchedulerView`` folds besides the two cores."""

    next_sample: float = 0.0  # log time of the next hourly usage sample
    rejected: dict[int, str] = {}  # operator input seq -> why it was not applied
    tenants: dict[str, list[str]] = {}  # association -> tenants whose jobs were charged to it


class _View(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    seq: int
    scheduling: bytes
    preemption: bytes
    extras: ViewExtras


def _fingerprint(core: QueueFold, preemption: PreemptionPlanner, sample_every_s: float) -> str:
    return (f"standing/{FORMAT}/{SHAPE}/{core.policy}/{core.max_candidates}/{int(core.virtual_time)}/"
            f"{int(preemption.virtual_time)}/{sample_every_s:g}")


def _inner(preemption: PreemptionPlanner) -> QueueFold:
    """The scheduling core the preemption core folds its inner view with."""
    return preemption.queue  # the same fold, so the same dump and load


# ---------------------------------------------------------------------------- writing


def dump_view(core: QueueFold, state: SchedulingState, preemption: PreemptionPlanner, pstate: PreemptionState,
              extras: ViewExtras, sample_every_s: float) -> bytes:
    """The view's whole fold at ``state.seq`` (both states must be at the same sequence)."""
    if not supported:
        raise RuntimeError("this code does not know every field of PreemptionState: see projections/fold_state.py")
    assert state.seq == pstate.seq, (state.seq, pstate.seq)
    view = _View(format=FORMAT, fingerprint=_fingerprint(core, preemption, sample_every_s), seq=state.seq,
                 scheduling=core.dump(state), preemption=_dump_preemption(preemption, pstate), extras=extras)
    return msgspec.msgpack.encode(view)


def _dump_preemption(core: PreemptionPlanner, state: PreemptionState) -> bytes:
    cfg = state.config
    snap = _Preemption(
        seq=state.seq, now=state.now, sched=_inner(core).dump(state.sched),
        nodes=[_Node(name=n.name, cpus_milli=n.cpus_milli, memory_bytes=n.memory_bytes, gpus=list(n.gpus.values()),
                     labels=n.labels, taints=n.taints, seqs=(n.registered_seq, n.ready_seq, n.lost_seq),
                     flags=(n.ready, n.cordoned, n.draining, n.lost, n.removed), used_cpus_milli=n.used_cpus_milli,
                     used_memory_bytes=n.used_memory_bytes, used_devices=n.used_devices, jobs=n.jobs,
                     simulated=n.simulated, isolation=n.isolation, datasets=sorted(n.datasets),
                     overcommit=(n.cpu_overcommit, n.memory_overcommit),
                     drain=(n.drain_migrate, n.drain_deadline_ts, n.drain_grace_s), backend=n.backend,
                     foreign=n.foreign, registered_taints=n.registered_taints)
               for n in state.cluster.nodes.values()],
        config=_Config(rules={k: list(v) for k, v in cfg.rules.items()}, victims=cfg.victims,
                       grace_period_s=cfg.grace_period_s, max_preemptions=cfg.max_preemptions,
                       per_minute=cfg.per_minute, per_account_per_minute=cfg.per_account_per_minute),
        blocked=state.blocked, preempted=state.preempted, checkpoint_ts=state.checkpoint_ts, stopping=state.stopping,
        no_cascade=sorted(state.no_cascade), recent=list(state.recent), candidates=state.candidates,
        blocked_seq=state.blocked_seq, round_ended=state.round_ended, running_by_class=state.running_by_class,
        borrowed_running=state.borrowed_running, config_rejections=state.config_rejections,
        held={node: sorted(jobs_) for node, jobs_ in state.held.items()},
        layout=(state.layout, state.layout_seq, state.relayed_seq),
    )
    return msgspec.msgpack.encode(snap)


# ---------------------------------------------------------------------------- reading


def load_view(data: bytes, core: QueueFold, preemption: PreemptionPlanner,
              sample_every_s: float) -> tuple[SchedulingState, PreemptionState, ViewExtras] | None:
    """The fold ``dump_view`` wrote, or None if it must not be trusted (see the module docstring)."""
    if not supported:
        return None
    with collector_paused():
        try:
            view = msgspec.msgpack.decode(data, type=_View)
        except msgspec.DecodeError:
            return None  # another format's layout, or damaged
        if view.format != FORMAT or view.fingerprint != _fingerprint(core, preemption, sample_every_s):
            return None
        state = core.load(view.scheduling)
        pstate = _load_preemption(preemption, view.preemption)
    if state is None or pstate is None or state.seq != view.seq or pstate.seq != view.seq:
        return None
    return state, pstate, view.extras


def _load_preemption(core: PreemptionPlanner, data: bytes) -> PreemptionState | None:
    try:
        snap = msgspec.msgpack.decode(data, type=_Preemption)
    except msgspec.DecodeError:
        return None
    sched = _inner(core).load(snap.sched)
    if sched is None:
        return None
    state = PreemptionState(sched)
    state.seq, state.now = snap.seq, snap.now
    nodes = state.cluster.nodes
    for n in snap.nodes:
        node = Node(name=n.name, cpus_milli=n.cpus_milli, memory_bytes=n.memory_bytes, gpus={d.id: d for d in n.gpus},
                    labels=n.labels, taints=n.taints, used_cpus_milli=n.used_cpus_milli,
                    used_memory_bytes=n.used_memory_bytes, used_devices=n.used_devices, jobs=n.jobs,
                    simulated=n.simulated, isolation=n.isolation, datasets=frozenset(n.datasets),
                    cpu_overcommit=n.overcommit[0], memory_overcommit=n.overcommit[1], drain_migrate=n.drain[0],
                    drain_deadline_ts=n.drain[1], drain_grace_s=n.drain[2], backend=n.backend,
                    foreign=n.foreign, registered_taints=n.registered_taints)
        node.registered_seq, node.ready_seq, node.lost_seq = n.seqs
        node.ready, node.cordoned, node.draining, node.lost, node.removed = n.flags
        nodes[n.name] = node
    cfg = snap.config
    state.config = PreemptionConfig(
        rules=MappingProxyType({k: tuple(v) for k, v in cfg.rules.items()}), victims=cfg.victims,
        grace_period_s=cfg.grace_period_s, max_preemptions=cfg.max_preemptions, per_minute=cfg.per_minute,
        per_account_per_minute=cfg.per_account_per_minute)
    state.blocked, state.preempted, state.checkpoint_ts = snap.blocked, snap.preempted, snap.checkpoint_ts
    state.stopping, state.no_cascade, state.recent = snap.stopping, set(snap.no_cascade), deque(snap.recent)
    state.candidates, state.blocked_seq, state.round_ended = snap.candidates, snap.blocked_seq, snap.round_ended
    state.running_by_class, state.borrowed_running = snap.running_by_class, snap.borrowed_running
    state.config_rejections = snap.config_rejections
    state.held = {node: frozenset(jobs) for node, jobs in snap.held.items()}
    state.layout, state.layout_seq, state.relayed_seq = snap.layout
    return state

