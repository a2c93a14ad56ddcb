"""The scheduler's standing as a read model: fair-share usage (like sshare) and each job's priority.

This view folds the log through the scheduling core itself (``evolve`` only,
never ``decide``), so the shares, usage, factors and reasons it shows are
exactly the ones the scheduler decides on, as of the last event it applied.
The fold is in memory; what it shows is materialised in SQLite by
``StandingStore`` (``projections/standing.py``: queue, nodes and allocations,
usage and its hourly history, each flush one transaction with its sequence),
and the list queries are answered from there with paging and filters.

The fold is stored with the rows (``projections/fold_state.py``): with every
flush while dumping it costs at most ``state_cheap_s``, else once at least
``state_every`` records have passed since the last one, and at stop. ``start``
loads it and follows the log from the next sequence; without one it can trust,
it folds from sequence 1 (``horizon projections rebuild`` always does).

Served on (queue group ``projections``):

* ``horizon.query.queue`` -> ``{"jobs": [...], "total", "offset", "last_seq", "now", "policy"}``:
  pending jobs in scheduling order (``rank``), then held ones, each with its priority and
  factors, why it waits, each filter's verdict and its reservation; filters ``tenant``,
  ``account``, ``user``, ``state``, ``priority_class``, ``job_id``; ``limit`` and ``offset``;
* ``horizon.query.nodes`` -> ``{"nodes": [...], "total", "offset", "last_seq"}`` (like sinfo), each
  node with the jobs on it; filters ``state``, ``node``, ``gpu_type``; paged;
* ``horizon.query.allocations`` -> every running attempt's share of each node; filters ``node``,
  ``job_id``, ``tenant``, ``account``, ``user``, ``state`` (SCHEDULED or RUNNING); paged;
* ``horizon.query.queue.<tenant>``, ``horizon.query.allocations.<tenant>``: the same, about that
  tenant's jobs only (what a tenant's account imports under ``deploy/nats/auth.conf``);
* ``horizon.query.usage`` -> ``{"rows": [...], "now", "half_life_s", "weights", "last_seq"}``: one
  row per account and user association, depth first (``FairShare.report``), with the tenants
  whose jobs were charged under it; filters ``account``, ``user``, ``tenant``; ``limit``/``offset``
  page the rows; with ``{"history": true}`` also ``"history"``: every account's usage and fair-share
  factor at each hour boundary of log time (``account``, ``tenant``, ``from_ts``, ``to_ts``; then
  ``limit``/``offset`` page the history);
* ``horizon.query.priority`` with ``{"job_id": J}`` -> the job's priority factor
  by factor (value, weight, weighted), its position among the pending jobs,
  why it waits, its deadline and restart backoff; with ``{"limit": N}`` the first
  N pending jobs in order with their priorities;
* ``horizon.query.preempt`` with ``{"job_id": J}`` -> what preempting for J would do now: the
  victims the preemption service's policy would choose, each with its nodes, class, GPUs, cost
  and why it may be preempted (``horizon preempt --dry-run``);
* ``horizon.query.partitions`` -> ``{"partitions": [...], "total", "offset", "default", "unknown",
  "last_seq"}``: each partition's configuration, whether it is the default, its registered nodes
  (``members``); the rule for a name not defined (``unknown``); filter ``name``, paged;
* ``horizon.query.gpus`` -> ``{"nodes": [...], "total", "offset", "counts", "queued", "now",
  "last_seq"}``: each node with every GPU's id, model, NUMA node, state (free, busy, reserved,
  held, cordoned, down, unhealthy) and the job and tenant on it (``gpu_map``); filter ``node``, paged;
* ``horizon.query.config`` with ``{"seq": N}`` -> whether the operator input at
  sequence N has been seen, and the reason if it was rejected
  (``{"seen": bool, "rejected": reason | null, "last_seq"}``).

Every answer fits in one message (``projections/paging.py``): the listings (queue, nodes,
allocations, usage and its history, priority's list) are cut to a page that does and carry
``offset``, ``total``, ``next_offset`` and ``next``; anything else that would not fit is an error
naming the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Any

import msgspec

from events import catalogue as c
from events.codec import decode_json
from services.runtime.consume import readable
from services.runtime.log import READ_MODEL_LINGER_S, EventLog
from services.domain.protocol import Record
from services.domain.preemption.planner import PreemptionPlanner
from services.domain.preemption.state import PreemptionState
from services.domain.protocol import fold_event
from services.domain.queue.fold import QueueFold
from services.domain.queue.state import SchedulingState
from services.domain.fairshare import association
from services.domain.policy import WEIGHT_NAMES, Multifactor, make_policy
from services.domain.jobs import JobState
from projections import fold_state
from projections.tenants import as_tenant_sees, scope, tenant_keys
from projections.paging import Listing, Pager, page_fields
from projections.standing import StandingStore

__all__ = ["SchedulerView", "priority_report", "usage_report", "partitions_report", "gpu_map", "PARTITION_FIELDS"]

log = logging.getLogger("horizon.projections")

STOP_SAVE_S = 3.0  # at stop, the last store of the rows and the fold gets this long (a head start only)

_USAGE_HISTORY = Listing("history", total="history_total", offset="history_offset", next_offset="history_next_offset")
# Each view's listing; usage's history pages instead of its rows when it is asked for (the rows come whole).
_LISTINGS: dict[str, Any] = {
    "queue": Listing("jobs"), "nodes": Listing("nodes"), "allocations": Listing("allocations"),
    "usage": lambda request: _USAGE_HISTORY if request.get("history") else Listing("rows"),
    "priority": Listing("jobs"), "partitions": Listing("partitions"), "gpus": Listing("nodes"),
}
# A partitions row's configuration fields, as PartitionConfigured names them.
PARTITION_FIELDS = ("nodes", "node_labels", "state", "max_time_s", "default_time_s", "default_mem_per_cpu",
                    "default_mem_per_gpu", "max_nodes", "allowed_accounts", "allowed_qos", "priority_tier", "profile")


def usage_report(core: QueueFold, state: SchedulingState) -> dict[str, Any]:
    fs = state.fairshare
    return {
        "rows": fs.report(state.now), "now": state.now, "half_life_s": fs.half_life_s,
        "weights": {"gpu": fs.gpu_weight, "cpu": fs.cpu_weight, "memory_gib": fs.memory_weight,
                    "dominant_share": fs.dominant_share},
        "last_seq": state.seq,
    }


def partitions_report(state: SchedulingState, request: dict[str, Any]) -> dict[str, Any]:
    """The partitions (``horizon partition list``, ``horizon sinfo``), by name: each one's configuration,
    whether it is the default, and its registered nodes (``members``); the rule for an unknown name.
    ``name``: one partition, or a list; ``limit``/``offset`` page the rows."""
    unknown = set(request) - {"name", "limit", "offset"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; allowed: limit, name, offset")
    parts = state.partitions
    wanted = request.get("name")
    names = parts.names()
    if wanted:
        asked = wanted if isinstance(wanted, list) else [wanted]
        names = [n for n in names if n in asked]
    offset, limit = max(0, int(request.get("offset", 0))), max(0, int(request.get("limit", 1000)))
    rows = []
    for name in names[offset:offset + limit]:
        cfg = parts.configs[name]
        members = list(parts.members(name))
        rows.append({"name": name, "default": parts.default == name,
                     **{field: msgspec.to_builtins(getattr(cfg, field)) for field in PARTITION_FIELDS},
                     "members": members, "total_nodes": len(members)})
    following, ask = page_fields(offset, len(rows), len(names))
    return {"partitions": rows, "total": len(names), "offset": offset, "next_offset": following, "next": ask,
            "default": parts.default, "unknown": parts.unknown, "last_seq": state.seq}


def priority_report(core: QueueFold, state: SchedulingState, job_id: str | None = None,
                    limit: int = 50, offset: int = 0) -> dict[str, Any]:
    ctx = core.context(state)
    policy = make_policy(state.config.policy)
    ordered = core.ordered_queue(state, ctx=ctx)
    base = {"policy": state.config.policy, "now": state.now, "last_seq": state.seq, "queued": len(ordered)}
    if job_id is None:
        waiting = core.waiting_all(state, ordered, ctx)  # one pass, not a scan per row
        offset, limit = max(0, offset), max(0, limit)
        rows = [_row(core, state, job, ctx, i + 1, waiting)
                for i, job in enumerate(ordered[offset:offset + limit], offset)]
        following, ask = page_fields(offset, len(rows), len(ordered))
        return {**base, "jobs": rows, "total": len(ordered), "offset": offset, "next_offset": following,
                "next": ask}
    job = state.jobs.get(job_id)
    if job is None:
        return {**base, "error": f"no job {job_id!r} is known to the scheduler"}
    position = next((i + 1 for i, j in enumerate(ordered) if j.job_id == job_id), None)
    row = _row(core, state, job, ctx, position)
    if isinstance(policy, Multifactor) and job.spec is not None:
        factors = policy.factors(job, ctx)
        weights = ctx.config.weights
        row["factors"] = [{"factor": name, "value": factors[name], "weight": weights[name],
                           "weighted": factors[name] * weights[name]} for name in WEIGHT_NAMES]
        row["account_boost"] = ctx.boosts.get(job.spec.account, 0.0)
        row["nice"] = job.spec.nice
    return {**base, **row}


def _row(core: QueueFold, state: SchedulingState, job: Any, ctx: Any, position: int | None,
         waiting: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = job.spec
    policy = make_policy(state.config.policy)
    out: dict[str, Any] = {"job_id": job.job_id, "state": job.state.value, "position": position}
    if spec is None:
        return out
    out.update(account=spec.account, user=spec.user, association=association(spec),
               priority_class=spec.priority_class, borrowed=job.borrowed)
    if isinstance(policy, Multifactor):
        out["priority"] = policy.priority(job, ctx)
    if job.state in (JobState.PENDING, JobState.HELD):
        why = waiting[job.job_id] if waiting is not None else core.waiting(state, job, ctx)
        out["why"], out["why_kind"] = why.why, why.kind
        out["reasons"] = [{"filter": r.filter, "nodes": r.nodes, "reason": r.reason} for r in job.last_block]
        if job.reserved_at is not None:
            out["reserved_at"] = job.reserved_at
            out["reserved_nodes"] = list(job.reserved_nodes)
        if job.job_id in state.deadlines:
            out["deadline_ts"] = state.deadlines[job.job_id]
        if job.not_before_ts > state.now:
            out["not_before_ts"] = job.not_before_ts
    return out


def preempt_report(core: PreemptionPlanner, state: PreemptionState, job_id: str) -> dict[str, Any]:
    plan = core.plan(state, job_id)
    victims = []
    for v in plan.victims:
        job = state.jobs.jobs[v]
        gpus, lost, age = core.cost(state, job)
        victims.append({"job_id": v, "account": job.spec.account if job.spec else "",  # type: ignore[union-attr]
                        "priority_class": job.spec.priority_class if job.spec else "",
                        "nodes": sorted(a.node for a in job.allocations), "gpus": gpus, "work_lost_s": lost,
                        "running_s": age, "why": plan.reasons.get(v, "")})
    shrinks = [{"job_id": v, "account": state.jobs.jobs[v].spec.account,  # type: ignore[union-attr]
                "nodes": [a.node for a in state.jobs.jobs[v].allocations], "gives_back": released,
                "why": plan.reasons.get(v, "")} for v, released in sorted(plan.shrinks.items())]
    return {"job_id": job_id, "victims": victims, "shrinks": shrinks, "nodes": plan.nodes,
            "cost": {"gpus": plan.cost[0], "work_lost_s": plan.cost[1], "running_s": plan.cost[2]},
            "why_not": plan.why_not, "order": state.config.victims, "last_seq": state.seq}


GPU_STATES = ("free", "busy", "reserved", "held", "cordoned", "down", "unhealthy")


def queue_length(state: SchedulingState) -> dict[tuple[str, str], int]:
    """Pending jobs by (partition, tenant); a job accepted where no partition is defined counts
    under partition ``none``."""
    counts: dict[tuple[str, str], int] = {}
    for job in state.pending.values():
        if job.spec is not None:
            key = (job.spec.partition or "none", job.spec.tenant)
            counts[key] = counts.get(key, 0) + 1
    return counts


def gpu_states(state: SchedulingState, pstate: PreemptionState) -> dict[str, int]:
    """Every GPU of the cluster's nodes (removed ones aside) in one state, the first that applies:
    ``unhealthy`` (a health problem), ``busy`` (a job holds it), ``down`` (its node is lost or not
    ready yet), ``cordoned`` (its node is cordoned, draining or drained), ``held`` (its node is held
    for a preemptor while victims stop), ``reserved`` (a pending job's backfill reservation names its
    node: up to the job's GPUs per node), else ``free``."""
    reserved: dict[str, int] = {}
    for job in state.pending.values():
        if job.spec is not None and job.reserved_nodes:
            for name in job.reserved_nodes:
                reserved[name] = reserved.get(name, 0) + job.spec.gpus_on_node
    out = dict.fromkeys(GPU_STATES, 0)
    for node in pstate.cluster.nodes.values():
        if node.removed:
            continue
        unhealthy = sum(1 for i, d in node.gpus.items() if d.health and i not in node.used_devices)
        busy = len(node.used_devices)
        rest = len(node.gpus) - unhealthy - busy
        out["unhealthy"] += unhealthy
        out["busy"] += busy
        if node.lost or not node.ready:
            out["down"] += rest
        elif node.cordoned or node.draining:
            out["cordoned"] += rest
        elif pstate.held.get(node.name):
            out["held"] += rest
        else:
            kept = min(rest, reserved.get(node.name, 0))
            out["reserved"] += kept
            out["free"] += rest - kept
    return out


def gpu_map(state: SchedulingState, pstate: PreemptionState, request: dict[str, Any]) -> dict[str, Any]:
    """Every node with each of its GPUs (``horizon.query.gpus``, the dashboard's cluster view): the
    device's id, model, NUMA node and state, as ``gpu_states`` counts them, with the job (and its
    tenant) that holds it, reserves it or is held for. A pending job's reservation takes the node's
    first free devices, as many as it needs there; a node held for a preemptor holds its free ones.
    ``node``: one node or a list; ``limit``/``offset`` page the nodes (removed ones aside)."""
    from services.domain.cluster import device_sort_key

    unknown = set(request) - {"node", "limit", "offset"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; allowed: limit, node, offset")
    wanted = request.get("node")
    asked = set(wanted if isinstance(wanted, list) else [wanted]) if wanted else None
    nodes = [n for n in pstate.cluster.sorted_nodes() if not n.removed and (asked is None or n.name in asked)]
    offset, limit = max(0, int(request.get("offset", 0))), max(0, int(request.get("limit", 1000)))
    jobs = state.jobs.jobs
    reservations: dict[str, list[tuple[str, int]]] = {}
    for job in state.pending.values():
        if job.spec is not None and job.reserved_nodes:
            for name in job.reserved_nodes:
                reservations.setdefault(name, []).append((job.job_id, job.spec.gpus_on_node))

    def tenant_of(job_id: str | None) -> str | None:
        job = jobs.get(job_id) if job_id else None
        return job.spec.tenant if job is not None and job.spec is not None else None

    rows = []
    for node in nodes[offset:offset + limit]:
        held = sorted(pstate.held.get(node.name) or ())
        waiting = [job for job, need in reservations.get(node.name, []) for _ in range(need)]
        devices = []
        for device_id, device in sorted(node.gpus.items(), key=lambda kv: device_sort_key(kv[0])):
            holder = node.used_devices.get(device_id)
            job_id, why = holder, ""
            if device.health and holder is None:
                gpu_state, why = "unhealthy", device.health
            elif holder is not None:
                gpu_state = "busy"
            elif node.lost or not node.ready:
                gpu_state = "down"
            elif node.cordoned or node.draining:
                gpu_state = "cordoned"
            elif held:
                gpu_state, job_id = "held", held[0]
            elif waiting:
                gpu_state, job_id = "reserved", waiting.pop(0)
            else:
                gpu_state = "free"
            devices.append({"id": device_id, "type": device.type, "numa": device.numa_node,
                            "interconnect": device.interconnect, "state": gpu_state, "job_id": job_id,
                            "tenant": tenant_of(job_id), "why": why})
        rows.append({"node": node.name, "state": node.status, "simulated": node.simulated,
                     "cpus_milli": node.cpus_milli, "cpus_used_milli": node.used_cpus_milli,
                     "memory_bytes": node.memory_bytes, "memory_used_bytes": node.used_memory_bytes,
                     "held_for": held, "gpus": devices})
    following, ask = page_fields(offset, len(rows), len(nodes))
    return {"nodes": rows, "total": len(nodes), "offset": offset, "next_offset": following, "next": ask,
            "counts": gpu_states(state, pstate), "queued": len(state.pending), "now": state.now,
            "last_seq": state.seq}


class SchedulerView:
    def __init__(self, log_: EventLog, nc: Any, core: QueueFold | None = None, meter_provider: Any = None,
                 store: StandingStore | None = None, flush_every_s: float = 0.5, state_every: int = 50_000,
                 state_cheap_s: float = 0.02) -> None:
        self.log = log_
        self.store = store
        self.flush_every_s = flush_every_s  # at least; a slow flush stretches it (see _flush_loop)
        # The fold goes with a flush when the last dump took at most state_cheap_s, else once
        # state_every records have passed (the scheduling service's snapshot interval).
        self.state_every = state_every
        self.state_cheap_s = state_cheap_s
        self.state_seq = 0  # the sequence of the fold stored in the database
        self.dump_s = 0.0  # what the last dump took (wall time: pacing, not a decision)
        self.resumed_from = 0  # the sequence of the stored fold this view started from (0: from the start)
        self.tenants: dict[str, set[str]] = {}  # association -> tenants whose jobs were charged to it
        self.caught_up = asyncio.Event()  # the tables show the end of the log as it was at start
        self.nc = nc
        self.core = core or QueueFold()
        self.state = self.core.initial()
        self.rejected: dict[int, str] = {}  # operator input seq -> why it was not applied
        self.preemption = PreemptionPlanner()
        self.pstate = self.preemption.initial()
        self._cycle_ts: dict[int, float] = {}
        self.history: list[dict[str, Any]] = []  # usage per account at each hour of log time (not yet stored)
        self.sample_every_s = 3600.0
        self._next_sample = 0.0
        self._latency: Any = None
        self._wait: Any = None
        if meter_provider is not None:
            self._metrics(meter_provider)
        self._follower: Any = None
        self._flusher: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self._start_end = 0
        self._subs: list[Any] = []
        self.pager = Pager(nc)

    async def apply(self, batch: list[Record]) -> None:
        for record, event in readable(batch, self.state.seq):
            if event is None:
                self.state.seq = self.pstate.seq = record.seq
            else:
                self._sample(record.time)
                # the histograms count what happens while the view runs, not the history it catches up
                # with at start (Prometheus would read that as a burst)
                if self._wait is not None and isinstance(event, c.JobScheduled) and record.seq > self._start_end:
                    self._record_wait(event, record.time)
                self.state = fold_event(self.core, self.state, record, event)
                self.pstate = fold_event(self.preemption, self.pstate, record, event)
                if isinstance(event, c.JobAccepted):
                    spec = event.spec
                    self.tenants.setdefault(association(spec), set()).add(spec.tenant)
                if self._latency is not None:
                    if isinstance(event, c.SchedulingCycleCompleted):
                        self._cycle_ts[event.cycle] = record.time
                    elif isinstance(event, c.PlacementCycleCompleted) and event.cycle in self._cycle_ts:
                        self._latency.record(max(0.0, record.time - self._cycle_ts.pop(event.cycle)) * 1000.0)
                if isinstance(event, c.ConfigRejected):
                    self.rejected[event.request_seq] = event.reason

    def _metrics(self, meter_provider: Any) -> None:
        """Gauges of the scheduler's standing: queue depth by class and account, utilisation and
        fragmentation of GPUs; the cycle latency (decided to placed, by log time) as a histogram."""
        from opentelemetry.metrics import Observation

        meter = meter_provider.get_meter("horizon")

        def depth(_options: Any) -> list[Observation]:
            counts: dict[tuple[str, str], int] = {}
            for job in self.state.pending.values():
                if job.spec is not None:
                    key = (job.spec.priority_class, job.spec.account)
                    counts[key] = counts.get(key, 0) + 1
            out = [Observation(n, {"class": k[0], "account": k[1]}) for k, n in sorted(counts.items())]
            return out + [Observation(sum(counts.values()), {"class": "all", "account": "all"})]

        def gpus(_options: Any) -> list[Observation]:
            total = used = stranded = 0
            for node in self.pstate.cluster.nodes.values():
                if node.removed:
                    continue
                healthy = len(node.gpus) - node.unhealthy_gpus  # an unhealthy GPU is no capacity
                free_here = len(node.free_devices()) if node.unhealthy_gpus else healthy - len(node.used_devices)
                total += healthy
                used += healthy - free_here
                if node.used_devices:
                    stranded += free_here  # free, but on a node in use
            free = total - used
            return [Observation(used / total if total else 0.0, {"what": "utilisation"}),
                    Observation(stranded / free if free else 0.0, {"what": "fragmentation"})]

        meter.create_observable_gauge("horizon.queue.depth", callbacks=[depth], description="pending jobs")
        meter.create_observable_gauge("horizon.queue.length", callbacks=[lambda _o: [
            Observation(n, {"partition": k[0], "tenant": k[1]}) for k, n in sorted(queue_length(self.state).items())]],
            description="pending jobs by partition and tenant")
        meter.create_observable_gauge("horizon.gpus.state", callbacks=[lambda _o: [
            Observation(n, {"state": k}) for k, n in gpu_states(self.state, self.pstate).items()]],
            description="GPUs by state: free, busy, reserved, held, cordoned, down, unhealthy")
        meter.create_observable_gauge("horizon.gpus", callbacks=[gpus],
                                      description="GPU utilisation, and the share of free GPUs on nodes in use")
        self._latency = meter.create_histogram("horizon.cycle.latency", unit="ms",
                                               description="from a scheduling cycle to its placement, by log time")
        self._wait = meter.create_histogram("horizon.job.wait", unit="s",
                                            description="a job's wait in the queue until it was placed, by log time")

    def _record_wait(self, event: c.JobScheduled, now: float) -> None:
        """The wait of a job placed now: since it was accepted, or since its last attempt ended (a
        requeued job), by log time; a placement of a job not pending (raced, stale) is no wait."""
        job = self.state.jobs.jobs.get(event.job_id)
        if job is None or job.spec is None or job.state is not JobState.PENDING:
            return
        since = max(job.accepted_ts, job.ended_ts)
        if since:
            self._wait.record(max(0.0, now - since), {"partition": job.spec.partition or "none",
                                                       "priority_class": job.spec.priority_class})

    def _sample(self, now: float) -> None:
        """Usage at every hour boundary the log's time has passed (at most a day of them at once)."""
        if not self._next_sample:
            self._next_sample = (now // self.sample_every_s + 1) * self.sample_every_s
            return
        if now < self._next_sample:
            return
        if now - self._next_sample > 24 * self.sample_every_s:  # a long quiet gap: skip to the last day
            self._next_sample = (now // self.sample_every_s - 23) * self.sample_every_s
        fs = self.state.fairshare
        while self._next_sample <= now:
            at = self._next_sample
            factors = fs.factors(at)
            for name, acc in fs.accounts.items():
                if acc.parent is None:
                    continue
                self.history.append({"ts": at, "account": name, "usage": fs.usage_at(acc, at),
                                     "running": acc.running, "fairshare": factors.get(name)})
            self._next_sample += self.sample_every_s
        if self.store is None and len(self.history) > 200_000:
            del self.history[: len(self.history) - 200_000]

    async def flush(self) -> bool:
        """Write what the fold shows to the store (one transaction; see ``StandingStore.flush``)."""
        if self.store is None:
            return False
        async with self._flush_lock:
            return await self._flush()

    async def _flush(self) -> bool:
        assert self.store is not None
        samples, self.history = self.history, []
        rows = [(h["ts"], h["account"], h["usage"], h["running"], h["fairshare"]) for h in samples]
        seq = self.state.seq
        due = seq > self.store.last_seq and fold_state.supported and (
            self.dump_s <= self.state_cheap_s or seq - self.state_seq >= self.state_every)
        data = self.dump_state() if due else None  # before the first await: the fold at ``seq``
        try:
            written = await self.store.flush(self.core, self.state, self.pstate, rows, self.tenants, data)
        except BaseException:
            self.history = samples + self.history
            raise
        if written and data is not None:
            self.state_seq = seq
        if self.store.last_seq >= self._start_end:
            self.caught_up.set()
        return written

    def dump_state(self) -> bytes:
        """The whole fold as bytes (``projections/fold_state.py``); times itself into ``dump_s``."""
        started = time.perf_counter()
        extras = fold_state.ViewExtras(next_sample=self._next_sample, rejected=dict(sorted(self.rejected.items())),
                                       tenants={k: sorted(v) for k, v in sorted(self.tenants.items())})
        data = fold_state.dump_view(self.core, self.state, self.preemption, self.pstate, extras, self.sample_every_s)
        self.dump_s = time.perf_counter() - started
        return data

    async def _resume(self) -> None:
        """Load the fold stored with the rows, if there is one this view can trust."""
        assert self.store is not None
        stored = await self.store.stored_state()
        if stored is None:
            if self.store.last_seq:
                log.info("standing: no stored fold; folding from seq 1 (rows at seq %d)", self.store.last_seq)
            return
        seq, data = stored
        started = time.perf_counter()
        loaded = fold_state.load_view(data, self.core, self.preemption, self.sample_every_s)
        if loaded is None:
            log.warning("standing: the stored fold at seq %d is of another format or configuration; "
                        "folding from seq 1", seq)
            return
        self.state, self.pstate, extras = loaded
        self._next_sample = extras.next_sample
        self.rejected = dict(extras.rejected)
        self.tenants = {k: set(v) for k, v in extras.tenants.items()}
        self.state_seq = self.resumed_from = seq
        log.info("standing: resumed from the fold stored at seq %d (%d bytes, loaded in %.3f s; rows at seq %d)",
                 seq, len(data), time.perf_counter() - started, self.store.last_seq)

    async def _flush_loop(self) -> None:
        """Flush whenever the fold has moved, at most every ``flush_every_s`` and never more than a
        fifth of the time (a big queue takes a while to write: the view must not spend its life on it)."""
        pause = self.flush_every_s
        while True:
            await asyncio.sleep(pause)
            if self.store is None or self.state.seq <= self.store.last_seq:
                continue
            started = time.monotonic()
            try:
                await self.flush()
            except Exception:  # a full disk or a locked file: keep folding, try again later
                log.exception("writing the scheduler's standing failed; retrying")
            pause = max(self.flush_every_s, 4 * (time.monotonic() - started))

    def config_status(self, seq: int) -> dict[str, Any]:
        pending = self.state.config_rejections.get(seq)
        reason = self.rejected.get(seq) or (pending[1] if pending else None)
        return {"seen": self.state.seq >= seq, "rejected": reason, "last_seq": self.state.seq}

    async def start(self) -> None:
        if self.store is not None:
            if self.store.db is None:
                await self.store.open()
            await self._resume()
            self._start_end = max(await self.log.last_seq(), self.store.last_seq)
            if self.store.last_seq >= self._start_end:
                self.caught_up.set()
            self._flusher = asyncio.create_task(self._flush_loop(), name="standing-flush")
            for view, handler in (("queue", self.store.query_queue), ("nodes", self.store.query_nodes),
                                  ("allocations", self.store.query_allocations), ("usage", self.store.query_usage)):
                self._subs.append(await self.nc.subscribe(f"horizon.query.{view}", queue="projections",
                                                          cb=self._stored(view, handler)))
            for view, handler in (("queue", self.store.query_queue), ("allocations", self.store.query_allocations)):
                # a tenant's view of the queue and of where its jobs run (see QueryServer in job_server.py)
                self._subs.append(await self.nc.subscribe(f"horizon.query.{view}.*", queue="projections",
                                                          cb=self._stored(view, handler)))
        else:
            self._subs.append(await self.nc.subscribe("horizon.query.usage", queue="projections", cb=self._usage))
        self._follower = await self.log.follow(self.apply, from_seq=self.state.seq + 1, linger_s=READ_MODEL_LINGER_S)
        self._subs.append(await self.nc.subscribe("horizon.query.priority", queue="projections", cb=self._priority))
        self._subs.append(await self.nc.subscribe("horizon.query.config", queue="projections", cb=self._config))
        self._subs.append(await self.nc.subscribe("horizon.query.preempt", queue="projections", cb=self._preempt))
        self._subs.append(await self.nc.subscribe("horizon.query.partitions", queue="projections",
                                                  cb=self._partitions))
        self._subs.append(await self.nc.subscribe("horizon.query.gpus", queue="projections", cb=self._gpus))

    def _stored(self, view: str, handler: Any) -> Any:
        """A query answered from the store, once it shows everything the fold has applied (a reader
        sees what the view knows, not what it knew at the last periodic flush); on a tenant's
        subject, about that tenant's jobs only; in pages of about one message (``_page_of``)."""
        async def answer(msg: Any) -> None:
            async def ask(request: dict[str, Any]) -> dict[str, Any]:
                tenant = scope(msg.subject)
                if tenant is not None:
                    if request.get("tenant") not in (None, "", tenant):
                        raise ValueError(f"tenant {tenant!r} may see only its own jobs, not {request['tenant']!r}'s")
                    request["tenant"] = tenant
                if self.store is not None and self.state.seq > self.store.last_seq:
                    await self.flush()
                if tenant is None:
                    return await handler(request)  # type: ignore[no-any-return]
                body: dict[str, Any] = {}
                for job_id in tenant_keys(tenant, [request["job_id"]]) if request.get("job_id") else [None]:
                    body = await handler({**request, "job_id": job_id} if job_id else request)
                    if any(isinstance(rows, list) and rows for rows in body.values()):
                        break
                for rows in body.values():  # the tenant's jobs by the ids it gave them
                    if isinstance(rows, list):
                        as_tenant_sees(tenant, (row for row in rows if isinstance(row, dict)))
                return body

            await self._reply(msg, lambda request: ask(self._page_of(view, request)), view, _LISTINGS[view])

        return answer

    def _page_of(self, view: str, request: dict[str, Any]) -> dict[str, Any]:
        """A ``limit`` asked for is read at most about one message's worth at a time (the rest is for
        the next pages); without one, the view's default page is read."""
        if "limit" in request:
            request["limit"] = self.pager.rows(view, request["limit"])
        return request

    async def _preempt(self, msg: Any) -> None:
        await self._reply(msg, lambda request: preempt_report(self.preemption, self.pstate, str(request["job_id"])),
                          "preempt")

    async def _partitions(self, msg: Any) -> None:
        await self._reply(msg, lambda request: partitions_report(self.state, request), "partitions",
                          _LISTINGS["partitions"])

    async def _gpus(self, msg: Any) -> None:
        await self._reply(msg, lambda request: gpu_map(self.state, self.pstate, request), "gpus", _LISTINGS["gpus"])

    async def _config(self, msg: Any) -> None:
        await self._reply(msg, lambda request: self.config_status(int(request["seq"])), "config")

    async def _usage(self, msg: Any) -> None:
        def answer(request: dict[str, Any]) -> dict[str, Any]:
            body = usage_report(self.core, self.state)
            if request.get("history"):
                account = request.get("account")
                body["history"] = [h for h in self.history if account is None or h["account"] == account]
            return body

        await self._reply(msg, answer, "usage", _LISTINGS["usage"])

    async def _priority(self, msg: Any) -> None:
        await self._reply(msg, lambda request: priority_report(
            self.core, self.state, request.get("job_id"), self.pager.rows("priority", request.get("limit", 50)),
            int(request.get("offset", 0))), "priority", _LISTINGS["priority"])

    async def _reply(self, msg: Any, answer: Any, view: str, listing: Any = None) -> None:
        """Answer ``msg`` with ``answer(request)``, encoded to fit in one message (``listing``: the
        ``Listing`` of the answer, or a function of the request that picks it)."""
        if not msg.reply:
            return
        try:
            request = decode_json(msg.data or b"{}")  # a tenant's, as sent: too deep is a ValueError
            if not isinstance(request, dict):
                raise ValueError("the request must be a JSON object")
            body = answer(request)
            if inspect.isawaitable(body):
                body = await body
        except (ValueError, TypeError, KeyError) as exc:
            body, request = {"error": str(exc)}, {}
        listing = listing(request) if callable(listing) else listing
        await self.nc.publish(msg.reply, self.pager.encode(view, body, listing))

    async def stop(self) -> None:
        """Stop following and serving; store what the fold has reached if that takes at most
        ``STOP_SAVE_S``; close the store in any case.

        The last store is only a head start for the next start (the rows and the fold are stored
        with their sequence in one transaction, so one cut short leaves the previous one whole).
        The close is in a ``finally``: aiosqlite's worker thread is no daemon, and a store left
        open (a stop cancelled again while it flushed 60,000 jobs) kept ``horizon up``'s process
        alive for good after it had printed "stopped" (issue 31)."""
        try:
            for sub in self._subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            if self._follower is not None:
                await self._follower.stop()
            if self._flusher is not None:
                self._flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._flusher
            if self.store is not None and self.store.db is not None:
                began = time.monotonic()
                try:
                    await asyncio.wait_for(self._last_store(), STOP_SAVE_S)
                except asyncio.TimeoutError:
                    log.info("standing: the last store took more than %.0f s; the next start folds from the "
                             "one before (seq %d)", STOP_SAVE_S, self.store.last_seq)
                except Exception as exc:  # noqa: BLE001 - a head start lost, nothing else
                    log.info("standing: the last store failed (%s)", exc)
                else:
                    log.info("standing: stored seq %d at stop in %.1f s", self.store.last_seq,
                             time.monotonic() - began)
        finally:
            if self.store is not None:
                await self.store.close()

    async def _last_store(self) -> None:
        await self.flush()  # what the fold had reached
        async with self._flush_lock:
            if self.state_seq < self.state.seq == self.store.last_seq and fold_state.supported:  # type: ignore[union-attr]
                if await self.store.save_state(self.state.seq, self.dump_state()):  # type: ignore[union-attr]
                    self.state_seq = self.state.seq

