"""A mixed-priority GPU workload on which the choice of preemption victims matters.

Deterministic: everything is drawn from one ``random.Random(seed)``, so the
same parameters always write the same file (this is workload generation, not a
decision of the scheduler). The committed workload is
``docs/workloads/preemption-mixed.json``, written by::

    python -m services.front.bench.preemption_workload docs/workloads/preemption-mixed.json

What it holds (defaults: 64 nodes x 8 GPUs, 48 simulated hours of arrivals):

* **Background training**, ~85% of the jobs: classes normal 45%, low 30%,
  scavenger 25%; 1, 2, 4 or 8 GPUs on one node (30/20/25/15%) or a gang of
  2 or 4 whole 8-GPU nodes (7/3%); run times log-normal around 2 h (15 min to
  16 h); time limits 1 to 2 times the run time. A backlog worth about the
  cluster arrives in the first 10 minutes (the trace starts on a busy cluster),
  then Poisson arrivals sized so that they alone offer ``load`` times the
  cluster's capacity (1.1 by default: the queue never drains).
  Normal jobs may preempt low and scavenger ones (the default class rules).
* **Bursts of urgent jobs**, on top: every 30 to 90 minutes, 6 to 30 jobs within
  5 minutes (evaluation sweeps, a deadline, a demo), 70% high and 30%
  critical; 1, 2, 4 or 8 GPUs (25/25/30/15%) or a 2-node gang (5%); 5 to
  60 minutes each (log-normal around 20 min). Plus a trickle of single high
  jobs (about two an hour). Both counts are for 64 nodes and scale with the
  cluster.
* Six team accounts with three users each; urgent and background jobs come
  from the same teams.

Jobs start at many different times, so at any burst the running jobs differ
in age (minutes to hours) and size (1 GPU to 32): which of them are stopped
decides how much work is thrown away. Simulated jobs do not checkpoint: a
preempted attempt's work is lost, and the job starts over when requeued.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

__all__ = ["generate", "DEFAULTS"]

TEAMS = ("vision", "nlp", "speech", "rl", "robotics", "research")
DEFAULTS: dict[str, Any] = {"seed": 7, "nodes": 64, "gpus_per_node": 8, "hours": 48.0, "load": 1.1}

MINUTE, HOUR = 60.0, 3600.0


def _pick(rng: random.Random, table: list[tuple[Any, float]]) -> Any:
    x = rng.random() * sum(w for _, w in table)
    for value, weight in table:
        x -= weight
        if x < 0:
            return value
    return table[-1][0]


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


def _shape(rng: random.Random, table: list[tuple[tuple[int, int], float]], gpus_per_node: int) -> tuple[int, int]:
    """(GPUs in total, nodes): a single-node size, or a gang of whole nodes."""
    gpus, nodes = _pick(rng, table)
    return min(gpus, gpus_per_node * nodes), nodes


def generate(seed: int = DEFAULTS["seed"], nodes: int = DEFAULTS["nodes"],
             gpus_per_node: int = DEFAULTS["gpus_per_node"], hours: float = DEFAULTS["hours"],
             load: float = DEFAULTS["load"], bursts: bool = True) -> dict[str, Any]:
    """The workload as a job-list object (``{"config": [...], "jobs": [...]}``, services/front/sim/traces.py)."""
    rng = random.Random(seed)
    g = gpus_per_node
    capacity_gpu_s = nodes * g * hours * HOUR
    background_shapes = [((1, 1), 30), ((2, 1), 20), ((4, 1), 25), ((g, 1), 15), ((2 * g, 2), 7), ((4 * g, 4), 3)]
    urgent_shapes = [((1, 1), 25), ((2, 1), 25), ((4, 1), 30), ((g, 1), 15), ((2 * g, 2), 5)]
    users = {team: [f"{team}-{k}" for k in range(3)] for team in TEAMS}
    jobs: list[dict[str, Any]] = []

    def add(kind: str, submit: float, runtime: float, gpus: int, job_nodes: int, cls: str) -> None:
        team = rng.choice(TEAMS)
        runtime = float(round(runtime))
        estimate = float(math.ceil(runtime * rng.uniform(1.0, 2.0) / MINUTE) * MINUTE)
        job = {"job_id": f"{kind}-{len(jobs):05d}", "submit_s": float(round(submit)), "runtime_s": runtime,
               "estimate_s": estimate, "gpus": gpus, "priority_class": cls, "account": team,
               "user": rng.choice(users[team])}
        if job_nodes > 1:
            job["nodes"] = job_nodes
        jobs.append(job)

    def background(submit: float) -> float:
        gpus, job_nodes = _shape(rng, background_shapes, g)
        runtime = _lognormal(rng, 2 * HOUR, 0.9, 15 * MINUTE, 16 * HOUR)
        cls = _pick(rng, [("normal", 45), ("low", 30), ("scavenger", 25)])
        add("train", submit, runtime, gpus, job_nodes, cls)
        return gpus * runtime

    # A busy cluster from the start: a backlog worth about the whole cluster in the first 10 minutes.
    filled = 0.0
    while filled < nodes * g:
        before = len(jobs)
        background(rng.uniform(0.0, 10 * MINUTE))
        filled += jobs[before]["gpus"]
    # Then Poisson arrivals of background work offering ``load`` times the capacity over the hours.
    probe = random.Random(seed + 1)  # the mean GPU-seconds of a background job, estimated on the side
    mean_work = sum(_shape(probe, background_shapes, g)[0] * _lognormal(probe, 2 * HOUR, 0.9, 15 * MINUTE, 16 * HOUR)
                    for _ in range(4000)) / 4000
    rate = load * capacity_gpu_s / mean_work / (hours * HOUR)  # background jobs per second
    t = 10 * MINUTE
    while True:
        t += rng.expovariate(rate)
        if t >= hours * HOUR:
            break
        background(t)
    scale = nodes / 64  # urgent work grows with the cluster, as the background does
    if bursts:
        t = rng.uniform(20 * MINUTE, 60 * MINUTE)
        while t < hours * HOUR:
            for _ in range(max(1, round(rng.randint(6, 30) * scale))):
                gpus, job_nodes = _shape(rng, urgent_shapes, g)
                runtime = _lognormal(rng, 20 * MINUTE, 0.7, 5 * MINUTE, 60 * MINUTE)
                cls = _pick(rng, [("high", 70), ("critical", 30)])
                add("urgent", t + rng.uniform(0.0, 5 * MINUTE), runtime, gpus, job_nodes, cls)
            t += rng.uniform(30 * MINUTE, 90 * MINUTE)
        t = 0.0
        while True:
            t += rng.expovariate(2 * scale / HOUR)
            if t >= hours * HOUR:
                break
            gpus, job_nodes = _shape(rng, urgent_shapes, g)
            add("urgent", t, _lognormal(rng, 20 * MINUTE, 0.7, 5 * MINUTE, 60 * MINUTE), gpus, job_nodes, "high")
    jobs.sort(key=lambda j: (j["submit_s"], j["job_id"]))
    return {"config": [], "jobs": jobs}


def write(path: Path, workload: dict[str, Any]) -> None:
    """One job per line: small, stable diffs, still one JSON object."""
    head = {k: v for k, v in workload.items() if k != "jobs"}
    lines = ["{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in head.items())
             + ', "jobs": [']
    jobs = workload["jobs"]
    for i, job in enumerate(jobs):
        lines.append(json.dumps(job, sort_keys=True) + ("," if i < len(jobs) - 1 else ""))
    lines.append("]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--no-bursts", action="store_true")
    args = parser.parse_args(argv)
    workload = generate(seed=args.seed, nodes=args.nodes, gpus_per_node=args.gpus_per_node, hours=args.hours,
                        load=args.load, bursts=not args.no_bursts)
    write(args.out, workload)
    jobs = workload["jobs"]
    classes: dict[str, int] = {}
    for job in jobs:
        classes[job["priority_class"]] = classes.get(job["priority_class"], 0) + 1
    print(f"{args.out}: {len(jobs)} jobs, {classes}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
