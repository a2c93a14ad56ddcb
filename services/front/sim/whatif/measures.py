"""The numbers people decide on, from a replay: waits, bounded slowdown, utilisation, preemption and fair
share (``measure``), the baseline against what was recorded (``fidelity``) and two replays against each
other (``moves``)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

from events import catalogue as c
from events.base import Event
from services.front.sim.whatif.workload import RecordedJob, Workload

__all__ = ["measure", "fidelity", "moves", "capacity_of", "wait_of", "bounded_slowdown", "fairshare_distance",
           "STALE_BASIS", "BATCHED_ENDS", "AFTER_DIVERGENCE", "LATENCY"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def _summary(waits: list[float], bslds: list[float], never_started: int = 0) -> dict[str, Any]:
    if not waits:
        return {"jobs": 0, "never_started": never_started, "mean_wait_s": 0.0, "p50_wait_s": 0.0, "p90_wait_s": 0.0,
                "p99_wait_s": 0.0, "mean_bounded_slowdown": 0.0}
    return {"jobs": len(waits), "never_started": never_started, "mean_wait_s": sum(waits) / len(waits),
            "p50_wait_s": _pct(waits, 50), "p90_wait_s": _pct(waits, 90), "p99_wait_s": _pct(waits, 99),
            "mean_bounded_slowdown": sum(bslds) / len(bslds)}


def wait_of(info: RecordedJob, start_s: float | None, end_s: float) -> float:
    """A job's wait in a replay: from its submission to its first start. A job that never starts waits
    until its user gave up on it (the recorded cancel, replayed at its time) or else to the end of the
    span ``end_s``: a change that leaves jobs unstarted (nodes removed, a quota too small, a job rejected
    or found unschedulable) shows as waits at least that long, not as jobs that left the averages."""
    if start_s is not None:
        return start_s - info.submit_s
    until = info.cancel_s if info.cancel_s is not None and info.cancel_s <= end_s else end_s
    return max(0.0, until - info.submit_s)


def bounded_slowdown(wait: float, run: float) -> float:
    """max(1, (wait + run) / max(run, 10)): the 10 s bound of Feitelson et al. and RLScheduler."""
    return max(1.0, (wait + run) / max(run, 10.0))


def capacity_of(timed: Sequence[tuple[str, Event]]) -> tuple[int, float]:
    """(GPUs, cores) of the nodes registered in ``timed`` (each node's last registration)."""
    nodes = {e.node: (len(e.gpus), e.cpus_milli / 1000.0) for _, e in timed if isinstance(e, c.NodeRegistered)}
    return sum(g for g, _ in nodes.values()), sum(cp for _, cp in nodes.values())


def measure(workload: Workload, run: Any, config: Sequence[Event] = (),
            capacity: tuple[int, float] | None = None) -> dict[str, Any]:
    """The numbers of one replay, over the jobs submitted in the span, started or not (see docs/whatif.md
    for each): a job the replay never starts is counted (``never_started``) and waits until its user's
    cancel or the span's end (``wait_of``); ``capacity`` (GPUs, cores): the cluster's, when the replay
    changed its nodes."""
    rec = workload.recorded
    gpus_cluster = workload.capacity_gpus > 0
    cap_gpus, cap_cpus = capacity if capacity is not None else (workload.capacity_gpus, workload.capacity_cpus)
    span = workload.end_s - workload.start_s
    waits: list[float] = []
    bslds: list[float] = []
    groups: dict[str, dict[str, tuple[list[float], list[float], list[str]]]] = {
        k: {} for k in ("tenant", "account", "partition", "class")}
    busy = 0.0
    lost = 0.0
    delivered: dict[str, float] = {}
    never: list[str] = []
    for job_id, r in run.results.items():
        info = rec.get(job_id)
        if info is None:
            continue
        size = info.gpus if gpus_cluster else info.cpus
        for a in r.attempts:  # work inside the span, every job (carried-in ones too)
            inside = max(0.0, min(a.end_s, workload.end_s) - max(a.start_s, workload.start_s))
            busy += size * inside
            if a.outcome == "PREEMPTED":
                lost += info.gpus * max(0.0, a.end_s - a.start_s)
            delivered[info.account] = delivered.get(info.account, 0.0) + size * inside
    for job_id in sorted(workload.measured):  # every job submitted in the span, started or not
        info = rec[job_id]
        r = run.results.get(job_id)
        start = r.start_s if r is not None else None
        if start is None:
            never.append(job_id)
        wait = wait_of(info, start, workload.end_s)
        b = bounded_slowdown(wait, r.job.run_of(job_id, 1).runtime_s if r is not None else info.time_limit_s or 0.0)
        waits.append(wait)
        bslds.append(b)
        for kind, name in (("tenant", info.tenant), ("account", info.account), ("partition", info.partition or "-"),
                           ("class", info.priority_class)):
            w, s, n = groups[kind].setdefault(name, ([], [], []))
            w.append(wait)
            s.append(b)
            if start is None:
                n.append(job_id)
    total = cap_gpus if gpus_cluster else cap_cpus
    out: dict[str, Any] = _summary(waits, bslds, len(never))
    out.update({
        "never_started_jobs": never[:50],
        "utilization": busy / (total * span) if total and span > 0 else 0.0,
        "utilization_of": "GPUs" if gpus_cluster else "cores",
        "gpu_hours_lost_to_preemption": lost / 3600.0,
        "preemptions": sum(1 for r in run.results.values() for a in r.attempts if a.outcome == "PREEMPTED"),
    })
    for kind in ("tenant", "account", "partition", "class"):
        rows = []
        for name, (w, s, n) in sorted(groups[kind].items()):
            rows.append({kind: name, **_summary(w, s, len(n))})
        out[f"per_{kind}"] = rows
    out["fairshare"] = fairshare_distance(delivered, _targets(config, set(delivered)))
    return out


def _targets(config: Sequence[Event], active: set[str]) -> dict[str, float]:
    """Each active account's target share of the cluster: along its path from the root, its shares over
    the shares of its active siblings (Slurm's normalised shares; accounts never configured have 1 share)."""
    conf: dict[str, c.AccountConfigured] = {}
    for e in config:
        if isinstance(e, c.AccountConfigured):
            conf[e.account] = e
    parent = {a: (conf[a].parent if a in conf else None) for a in active}
    shares = {a: (conf[a].shares if a in conf else 1.0) for a in active}
    # ancestors of active accounts are active too
    todo = list(active)
    while todo:
        a = todo.pop()
        p = parent.get(a)
        if p and p not in parent:
            parent[p] = conf[p].parent if p in conf else None
            shares[p] = conf[p].shares if p in conf else 1.0
            todo.append(p)
    siblings: dict[str | None, float] = {}
    for a, p in parent.items():
        siblings[p] = siblings.get(p, 0.0) + shares[a]
    out = {}
    for a in active:
        target, node, seen = 1.0, a, set()
        while node is not None and node not in seen:
            seen.add(node)
            target *= shares[node] / siblings[parent[node]]
            node = parent[node]
        out[a] = target
    return out


def fairshare_distance(delivered: dict[str, float], targets: dict[str, float]) -> dict[str, Any]:
    """Delivered share (an account's resource-seconds in the span over all accounts') against its target;
    the distance is half the sum of the absolute differences over the leaf accounts that ran (0: every account
    got exactly its target, 1: as far as it can be)."""
    total = sum(delivered.values())
    leaves = [a for a in delivered]
    target_total = sum(targets.get(a, 0.0) for a in leaves) or 1.0
    rows = []
    distance = 0.0
    for a in sorted(leaves):
        got = delivered[a] / total if total else 0.0
        want = targets.get(a, 0.0) / target_total
        distance += abs(got - want)
        rows.append({"account": a, "delivered": got, "target": want})
    return {"distance": distance / 2, "accounts": rows}


STALE_BASIS = "placed live by a cycle that had not yet seen an end the log held before its decision"
BATCHED_ENDS = "placed live by a cycle that saw several ends at once; the replay may see them one by one"
AFTER_DIVERGENCE = "started on time, on nodes an earlier divergence had left otherwise in the replay"
# the causes that are the live services' latency, not the policy: such a job starts at its recorded time
LATENCY = (STALE_BASIS, BATCHED_ENDS, AFTER_DIVERGENCE)


def fidelity(workload: Workload, run: Any, tolerance_s: float) -> dict[str, Any]:
    """The baseline against the log, job by job: a job is reproduced when it started in both on the same
    nodes within ``tolerance_s`` of its recorded start (the live services' reaction time), or started in
    neither. Jobs whose course the log cannot tell (``Workload.notes``) are listed apart; ``on_time_elsewhere``
    counts the jobs that started at their recorded time on other nodes for a cause in ``LATENCY``."""
    reproduced = 0
    compared = 0
    diverged: list[dict[str, Any]] = []
    for job_id in sorted(workload.measured, key=lambda j: (workload.recorded[j].submit_s, j)):
        info = workload.recorded[job_id]
        r = run.results.get(job_id)
        start = r.start_s if r is not None else None
        compared += 1
        same = (start is None and info.start_s is None) or (
            start is not None and info.start_s is not None and abs(start - info.start_s) <= tolerance_s
            and (not info.nodes or sorted(r.allocation) == info.nodes))
        if same:
            reproduced += 1
        else:
            why = [note for note, ids in sorted(workload.notes.items()) if job_id in ids]
            if job_id in workload.stale_basis:
                why.append(STALE_BASIS)
            if job_id in workload.batched_ends:
                why.append(BATCHED_ENDS)
            diverged.append({"job_id": job_id, "recorded_start_s": info.start_s, "replayed_start_s": start,
                             "recorded_nodes": info.nodes, "replayed_nodes": sorted(r.allocation) if r else [],
                             "explained": bool(why), "why": why, "after": []})
    _after_divergences(diverged, tolerance_s)
    return {"compared": compared, "reproduced": reproduced, "tolerance_s": tolerance_s,
            "diverged": len(diverged), "unexplained": sum(1 for d in diverged if not d["explained"]),
            "on_time_elsewhere": sum(1 for d in diverged if _on_time_elsewhere(d, tolerance_s) and _latency(d)),
            "divergences": diverged[:50],
            "cannot_predict": {why: len(ids) for why, ids in sorted(workload.notes.items())}}


def _on_time_elsewhere(d: dict[str, Any], tolerance_s: float) -> bool:
    """Started in both runs within the tolerance, on other nodes."""
    rec, rep = d["recorded_start_s"], d["replayed_start_s"]
    if rec is None or rep is None or abs(rep - rec) > tolerance_s:
        return False
    return d["recorded_nodes"] != d["replayed_nodes"]


def _latency(d: dict[str, Any]) -> bool:
    """A divergence with a cause in ``LATENCY``."""
    return any(w in LATENCY for w in d["why"])


def _after_divergences(diverged: list[dict[str, Any]], tolerance_s: float) -> None:
    """Mark the divergences that follow from earlier ones (``AFTER_DIVERGENCE``, with the earlier jobs in
    ``after``): a job that started at its recorded time, on other nodes, where every node it was placed on
    in one run and not in the other had been the recorded or replayed placement of a job that diverged
    before it. Those nodes were not in the replay what they were live (one divergence that swaps two
    nodes' jobs swaps which of them comes free first after), so which of them a later job gets says
    nothing of the policy. Jobs placed at one moment are not each other's cause."""
    def moment(d: dict[str, Any]) -> float:
        return min(t for t in (d["recorded_start_s"], d["replayed_start_s"]) if t is not None)

    placed = sorted((d for d in diverged if d["recorded_start_s"] is not None or d["replayed_start_s"] is not None),
                    key=lambda d: (moment(d), d["job_id"]))
    last_on: dict[str, str] = {}  # node -> the latest diverged job placed there (in either run)
    for _, same_moment in itertools.groupby(placed, key=moment):
        group = list(same_moment)
        for d in group:
            moved = set(d["recorded_nodes"]) ^ set(d["replayed_nodes"])
            if _on_time_elsewhere(d, tolerance_s) and not _latency(d) and moved and moved <= last_on.keys():
                d["why"].append(AFTER_DIVERGENCE)
                d["after"] = sorted({last_on[n] for n in moved})
                d["explained"] = True
        for d in group:
            for node in (*d["recorded_nodes"], *d["replayed_nodes"]):
                last_on[node] = d["job_id"]


def moves(workload: Workload, base: Any, changed: Any, top: int = 10) -> dict[str, Any]:
    """Jobs that start earlier or later in the changed replay than in the baseline, and by how much."""
    shifts: list[tuple[float, str]] = []
    only_base = only_changed = 0
    for job_id in sorted(workload.measured):
        a, b = base.results.get(job_id), changed.results.get(job_id)
        sa, sb = (a.start_s if a else None), (b.start_s if b else None)
        if sa is None and sb is None:
            continue
        if sa is None:
            only_changed += 1
        elif sb is None:
            only_base += 1
        else:
            shifts.append((sb - sa, job_id))
    earlier = [-d for d, _ in shifts if d < 0]
    later = [d for d, _ in shifts if d > 0]

    def stats(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"jobs": 0, "mean_s": 0.0, "p50_s": 0.0, "p90_s": 0.0, "max_s": 0.0}
        return {"jobs": len(values), "mean_s": sum(values) / len(values), "p50_s": _pct(values, 50),
                "p90_s": _pct(values, 90), "max_s": max(values)}

    biggest = sorted(shifts, key=lambda x: -abs(x[0]))[:top]
    return {"earlier": stats(earlier), "later": stats(later), "same": sum(1 for d, _ in shifts if d == 0),
            "started_only_in_baseline": only_base, "started_only_in_changed": only_changed,
            "biggest": [{"job_id": j, "tenant": workload.recorded[j].tenant, "shift_s": d} for d, j in biggest]}


def dumps(obj: Any) -> str:
    return json.dumps(obj)
