"""The scheduler's standing as answers: pure functions of the folds the ``SchedulerView`` keeps.

Each takes the scheduling fold (``QueueFold``/``SchedulingState``) or the
preemption fold (``PreemptionPlanner``/``PreemptionState``) and a request, and
returns the body of one query view (``projections/scheduling.py`` lists them):
usage, partitions, licenses, priority, a dry-run preemption, the GPU map, and the
gauges' counts (queue length, GPUs by state).
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import catalogue as c
from services.domain.cluster import backend_name
from services.domain.fairshare import association
from services.domain.jobs import JobState
from services.domain.policy import WEIGHT_NAMES, Multifactor, make_policy
from services.domain.preemption.planner import PreemptionPlanner
from services.domain.queue.waiting import slurm_reason
from services.domain.preemption.state import PreemptionState
from services.domain.queue.fold import QueueFold
from services.domain.queue.state import SchedulingState
from projections.paging import page_fields

__all__ = [
    "PARTITION_FIELDS", "GPU_STATES", "usage_report", "partitions_report", "licenses_report", "priority_report",
    "preempt_report",
    "queue_length", "gpu_states", "gpu_map",
]

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


def licenses_report(state: SchedulingState, request: dict[str, Any]) -> dict[str, Any]:
    """The licenses (``scontrol show lic``, ``horizon license list``), by name: each one's total, what the
    jobs holding resources hold of it and what is free (``Licenses.report``). ``name``: one license, or a
    list; ``limit``/``offset`` page the rows."""
    unknown = set(request) - {"name", "limit", "offset"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; allowed: limit, name, offset")
    rows = state.licenses.report()
    wanted = request.get("name")
    if wanted:
        asked = wanted if isinstance(wanted, list) else [wanted]
        rows = [row for row in rows if row["name"] in asked]
    offset, limit = max(0, int(request.get("offset", 0))), max(0, int(request.get("limit", 1000)))
    page = rows[offset:offset + limit]
    following, ask = page_fields(offset, len(page), len(rows))
    return {"licenses": page, "total": len(rows), "offset": offset, "next_offset": following, "next": ask,
            "last_seq": state.seq}


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
        out["why"], out["why_kind"], out["why_code"] = why.why, why.kind, slurm_reason(why.kind, why.code)
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
    ``unhealthy`` (a health problem), ``busy`` (a job, or work its backend did not place, holds it),
    ``down`` (its node is lost or not ready yet), ``cordoned`` (its node is cordoned, draining or
    drained), ``held`` (its node is held for a preemptor while victims stop), ``reserved`` (a pending
    job's backfill reservation names its node: up to the job's GPUs per node), else ``free``."""
    reserved: dict[str, int] = {}
    for job in state.pending.values():
        if job.spec is not None and job.reserved_nodes:
            for name in job.reserved_nodes:
                reserved[name] = reserved.get(name, 0) + job.spec.gpus_on_node
    out = dict.fromkeys(GPU_STATES, 0)
    for node in pstate.cluster.nodes.values():
        if node.removed:
            continue
        busy_ids = set(node.used_devices) | node.foreign_devices  # a job holds it, or its backend's own work
        unhealthy = sum(1 for i, d in node.gpus.items() if d.health and i not in busy_ids)
        busy = len(busy_ids)
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
            foreign = holder is None and device_id in node.foreign_devices
            if device.health and holder is None and not foreign:
                gpu_state, why = "unhealthy", device.health
            elif holder is not None:
                gpu_state = "busy"
            elif foreign:
                assert node.foreign is not None
                gpu_state, why = "busy", f"{node.backend} job {', '.join(node.foreign.jobs)} (not Horizon's)"
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
                     "backend": backend_name(node.backend),
                     "cpus_milli": node.cpus_milli, "cpus_used_milli": node.used_cpus_milli + node.foreign_cpus_milli,
                     "memory_bytes": node.memory_bytes,
                     "memory_used_bytes": node.used_memory_bytes + node.foreign_memory_bytes,
                     "held_for": held, "gpus": devices})
    following, ask = page_fields(offset, len(rows), len(nodes))
    return {"nodes": rows, "total": len(nodes), "offset": offset, "next_offset": following, "next": ask,
            "counts": gpu_states(state, pstate), "queued": len(state.pending), "now": state.now,
            "last_seq": state.seq}
