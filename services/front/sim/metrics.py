"""What a simulation run is judged by.

* wait = start of the first attempt - submit; run = the job's actual run time;
* bounded slowdown = max(1, (wait + run) / max(run, 10)) (10 s bound, as RLScheduler);
* utilisation = sum(run * procs) / ((start of the last job - submit of the first) * capacity),
  RLScheduler's definition, with capacity = processors (or GPUs) of the cluster;
* makespan = end of the last job - submit of the first;
* preemptions = PREEMPTED attempts; preempted GPU-seconds = for each of them,
  the job's GPUs x (end - start) of that attempt: the work it lost, since a
  simulated job does not checkpoint and starts over (also per priority class);
* bounded slowdown to the end = max(1, (end of the last attempt - submit) / max(run, 10)),
  which, unlike the bounded slowdown above (first start), counts what a preempted
  or retried job lost.
"""

from __future__ import annotations

import math
from typing import Any

from events.catalogue import PRIORITY_CLASSES
from services.nodes.spec import NodeSpec
from services.front.sim.driver import SimRun
from services.front.sim.traces import SimJob

__all__ = ["report", "percentile", "job_gpus", "preemption_report"]


_RANK = {name: i for i, name in enumerate(PRIORITY_CLASSES)}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _capacity(nodes: list[NodeSpec], gpus: bool) -> float:
    if gpus:
        return float(sum(len(n.gpus) for n in nodes))
    return sum(n.cpus_milli for n in nodes) / 1000.0


def job_gpus(job: SimJob, gpus: bool = True) -> int:
    """GPUs a trace job asks for in total (on a GPU cluster its processors become GPUs, as in
    ``submission_for``); 0 on a CPU cluster, where GPUs are not requested."""
    return (job.gpus or job.procs) if gpus else 0


def preemption_report(run: SimRun, *, gpus: bool = True) -> dict[str, Any]:
    """How many attempts were preempted and the GPU-seconds they lost, in total and per class."""
    count = 0
    lost = 0.0
    count_by: dict[str, int] = {}
    lost_by: dict[str, float] = {}
    for r in run.results.values():
        size = job_gpus(r.job, gpus)
        for a in r.attempts:
            if a.outcome != "PREEMPTED":
                continue
            cls = r.job.priority_class
            gpu_s = size * max(0.0, a.end_s - a.start_s)
            count += 1
            lost += gpu_s
            count_by[cls] = count_by.get(cls, 0) + 1
            lost_by[cls] = lost_by.get(cls, 0.0) + gpu_s
    return {"preemptions": count, "preempted_gpu_s": lost,
            "preemptions_by_class": _by_class(count_by), "preempted_gpu_s_by_class": _by_class(lost_by)}


def _by_class(values: dict[str, Any]) -> dict[str, Any]:
    """Highest class first (critical ... scavenger), then any other name."""
    return dict(sorted(values.items(), key=lambda kv: (_RANK.get(kv[0], len(_RANK)), kv[0])))


def report(run: SimRun, *, gpus: bool = False) -> dict[str, Any]:
    done = [r for r in run.results.values() if r.start_s is not None]
    if not done:
        return {"jobs": 0, "unstarted": len(run.unstarted)}
    waits = [r.start_s - r.job.submit_s for r in done]  # type: ignore[operator]
    bsld = [max(1.0, (w + r.job.runtime_s) / max(r.job.runtime_s, 10.0)) for w, r in zip(waits, done, strict=True)]
    to_end = [max(1.0, (r.end_s - r.job.submit_s) / max(r.job.runtime_s, 10.0)) for r in done]  # type: ignore[operator]
    waits_by: dict[str, list[float]] = {}
    for w, r in zip(waits, done, strict=True):
        waits_by.setdefault(r.job.priority_class, []).append(w)
    first_submit = min(r.job.submit_s for r in done)
    last_start = max(r.start_s for r in done)  # type: ignore[type-var]
    last_end = max(r.end_s for r in done)  # type: ignore[type-var]
    work = sum(r.job.runtime_s * ((r.job.gpus or r.job.procs) if gpus else r.job.procs) for r in done)
    span = last_start - first_submit  # type: ignore[operator]
    capacity = _capacity(run.nodes, gpus)
    return {
        "jobs": len(done),
        "unstarted": len(run.unstarted),
        "mean_wait_s": sum(waits) / len(waits),
        "p50_wait_s": percentile(waits, 50),
        "p90_wait_s": percentile(waits, 90),
        "p99_wait_s": percentile(waits, 99),
        "max_wait_s": max(waits),
        "mean_bounded_slowdown": sum(bsld) / len(bsld),
        "mean_bounded_slowdown_to_end": sum(to_end) / len(to_end),
        "mean_wait_s_by_class": _by_class({k: sum(v) / len(v) for k, v in waits_by.items()}),
        "utilization": work / (span * capacity) if span > 0 and capacity else 0.0,
        "makespan_s": last_end - first_submit,  # type: ignore[operator]
        "backfilled": sum(1 for r in done if r.backfilled),
        **preemption_report(run, gpus=gpus),
        "steps": run.steps,
        "wall_s": run.wall_s,
        "jobs_per_s": len(done) / run.wall_s if run.wall_s > 0 else 0.0,
    }
