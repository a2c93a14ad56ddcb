"""A recorded log for ``horizon whatif`` at scale: a week of a GPU cluster, written straight to JetStream.

Building a week's log live would take a week; instead the simulator runs the workload through the real
cores (in process, at virtual time, event times a week back from now) and keeps every record it folded:
the submissions on their tenants' input subjects, the operator configuration, the nodes' registrations,
the agents' starts and ends, and every decision. ``write_log`` publishes those records, in order, to a
NATS server's Horizon stream; ``horizon whatif`` then reads it as it reads any live log (the measured
path is the real one: services/front/sim/whatif/report.py).

The workload (seeded): ``tenants`` tenants, each its own account with shares 4, 3, 2, 1, ...; jobs of
1, 2, 4 or 8 GPUs on one node, or 16 and 32 GPUs over whole 8-GPU nodes; run times log-normal
(median ``median_run_s``, capped at 24 h), time limits the run time rounded up to the hour and doubled;
arrivals Poisson, with a daytime peak, at the rate that offers ``load`` of the cluster's GPU-hours.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any

from events import catalogue as c
from events.resources import parse_memory
from events.subjects import admin_subject, input_subject
from services.nodes.spec import local_nodes
from services.domain.protocol import Record
from services.front.sim.traces import SimJob

__all__ = ["week_workload", "record_week", "write_log"]

SIZES = ((1, 0.35), (2, 0.2), (4, 0.2), (8, 0.15), (16, 0.07), (32, 0.03))
NAMES = ("vision", "nlp", "speech", "research", "robotics", "climate", "bio", "physics")


def week_workload(*, nodes: int = 125, gpus_per_node: int = 8, days: float = 7.0, load: float = 0.9,
                  median_run_s: float = 3600.0, tenants: int = 4, seed: int = 1,
                  start_s: float | None = None, classes: tuple[tuple[str, float], ...] = (("normal", 1.0),),
                  ) -> tuple[list[SimJob], list[Any], list[Any]]:
    """(jobs, node specs, configuration events). ``classes``: priority classes and their weights (one
    class by default: with several, the preemption planner's search for victims dominates the run time)."""
    rng = random.Random(seed)
    t0 = start_s if start_s is not None else math.floor(time.time() - days * 86400.0)
    specs = local_nodes(nodes, gpus_per_node=gpus_per_node, gpu_type="a100", cpus=64,
                        memory_bytes=parse_memory("1Ti"), prefix="gpu")
    names = NAMES[:tenants]
    config: list[Any] = [c.AccountConfigured(account=t, shares=float(tenants - i), tenants=[t])
                         for i, t in enumerate(names)]
    sigma = 1.2
    mean_run = min(86400.0, median_run_s * math.exp(sigma * sigma / 2))
    mean_gpus = sum(s * p for s, p in SIZES)
    rate = load * nodes * gpus_per_node / (mean_gpus * mean_run)  # jobs per second
    jobs: list[SimJob] = []
    t = 0.0
    n = 0
    weights = [tenants - i for i in range(tenants)]
    while True:
        t += rng.expovariate(rate * (1.3 if (t % 86400.0) < 43200.0 else 0.7))  # a busier half day
        if t >= days * 86400.0:
            break
        gpus = rng.choices([s for s, _ in SIZES], [p for _, p in SIZES])[0]
        run = min(86400.0, max(30.0, rng.lognormvariate(math.log(median_run_s), sigma)))
        limit = min(172800.0, math.ceil(run / 3600.0) * 7200.0)
        tenant = rng.choices(names, weights[::-1])[0]  # the smallest shares submit the most
        per_node = min(gpus, gpus_per_node)
        count = max(1, gpus // gpus_per_node)
        job_id = f"wk-{n:06d}"
        n += 1
        sub = c.JobSubmitted(
            id=job_id, ts=t0 + t, source="cli", correlation_id=job_id, job_id=job_id, tenant=tenant, account=tenant,
            user=f"{tenant}-u{rng.randrange(5)}", resources=c.ResourceRequest(cpus=4, memory="32Gi", gpus=per_node,
                                                                               gpu_type="a100"),
            nodes=count, time_limit_s=limit, priority_class=rng.choices([k for k, _ in classes], [p for _, p in classes])[0],
            sim_runtime_s=round(run, 1))
        jobs.append(SimJob(job_id, round(t0 + t, 3), round(run, 1), limit, gpus=gpus, account=tenant,
                           user=sub.user, priority_class=sub.priority_class, submitted=sub,
                           subject=input_subject(tenant, "submit")))
    return jobs, specs, config


def record_week(jobs: list[SimJob], specs: list[Any], config: list[Any], *, backfill: str = "easy",
                progress: Any = None) -> list[Record]:
    """The records of the workload run through the cores (in process), in log order."""
    from services.front.sim.buses import InProcessBus
    from services.front.sim.driver import SimSettings, simulate
    from services.front.sim.whatif import whatif_cores

    bus = InProcessBus(whatif_cores("multifactor", backfill), keep_records=True)
    timed = [(admin_subject("account"), e) for e in config]
    asyncio.run(simulate(jobs, specs, SimSettings(policy="multifactor", backfill=backfill), bus,
                         config=[e for _, e in timed], progress=progress))
    return bus.records


async def write_log(url: str, records: list[Record], batch: int = 2000) -> int:
    """Publish the records, in order, to the server's Horizon stream (which must be empty); the last seq."""
    from services.runtime.jetstream import JetStreamLog
    from services.runtime.log import Outgoing

    log = await JetStreamLog.open(url, name="horizon-whatif-log")
    try:
        if await log.last_seq():
            raise ValueError(f"the log at {url} is not empty: write a recorded week to a server of its own")
        for i in range(0, len(records), batch):
            await log.publish_many([Outgoing(r.subject, r.data, f"wk/{r.seq}") for r in records[i:i + batch]])
        return await log.last_seq()
    finally:
        await log.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m services.front.bench.whatif_log --nats URL [--nodes 125] [--days 7] [--seed 1]``: write a
    recorded week to an empty Horizon log (then run ``horizon whatif --nats URL``)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m services.front.bench.whatif_log")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    jobs, specs, config = week_workload(nodes=args.nodes, gpus_per_node=args.gpus_per_node, days=args.days,
                                        load=args.load, seed=args.seed)
    records = record_week(jobs, specs, config)
    recorded = time.perf_counter() - started
    last = asyncio.run(write_log(args.nats, records))
    print(f"{len(jobs):,} jobs on {args.nodes} nodes x {args.gpus_per_node} GPUs over {args.days:g} days: "
          f"{last:,} records (simulated in {recorded:,.0f} s, written in {time.perf_counter() - started - recorded:,.0f} s)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
