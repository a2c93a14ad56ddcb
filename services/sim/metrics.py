"""What a simulation run is judged by.

* wait = start - submit; run = the job's actual run time;
* bounded slowdown = max(1, (wait + run) / max(run, 10)) (10 s bound, as RLScheduler);
* utilisation = sum(run * procs) / ((start of the last job - submit of the first) * capacity),
  RLScheduler's definition, with capacity = processors (or GPUs) of the cluster;
* makespan = end of the last job - submit of the first.
"""

from __future__ import annotations

import math
from typing import Any

from services.agent.app import NodeSpec
from services.sim.driver import SimRun

__all__ = ["report", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _capacity(nodes: list[NodeSpec], gpus: bool) -> float:
    if gpus:
        return float(sum(len(n.gpus) for n in nodes))
    return sum(n.cpus_milli for n in nodes) / 1000.0


def report(run: SimRun, *, gpus: bool = False) -> dict[str, Any]:
    done = [r for r in run.results.values() if r.start_s is not None]
    if not done:
        return {"jobs": 0, "unstarted": len(run.unstarted)}
    waits = [r.start_s - r.job.submit_s for r in done]  # type: ignore[operator]
    bsld = [max(1.0, (w + r.job.runtime_s) / max(r.job.runtime_s, 10.0)) for w, r in zip(waits, done, strict=True)]
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
        "utilization": work / (span * capacity) if span > 0 and capacity else 0.0,
        "makespan_s": last_end - first_submit,  # type: ignore[operator]
        "backfilled": sum(1 for r in done if r.backfilled),
        "steps": run.steps,
        "wall_s": run.wall_s,
        "jobs_per_s": len(done) / run.wall_s if run.wall_s > 0 else 0.0,
    }
