"""What leases and fencing cost: the same workload through ``horizon up``'s stack with and without them.

    python -m services.front.bench.fencing [--jobs 2000] [--latency-jobs 100] [--repeats 3] [--nodes 40]

With leases every decision round is published fenced (``EventLog.publish_fenced``): one
message as one publish, two or more as a JetStream atomic batch, whose commit the server syncs
to disk. Without, rounds are pipelined (``publish_many``). Each repeat runs both modes, each on
its own fresh nats-server and in-process stack (simulated executor, ``--nodes`` nodes of 64 CPUs):

* **burst**: ``--jobs`` one-CPU jobs that run for a minute, submitted at once; the time from
  the first submission to the last ``JobScheduled`` (all fit: scheduling, not waiting, is timed);
* **latency**: ``--latency-jobs`` jobs submitted one at a time, each waiting for its
  ``JobScheduled`` (submission, scheduling and placement each decide once per job): the
  median and 95th percentile of submit-to-scheduled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import median, quantiles
from typing import Any

import nats

from events import catalogue as c
from events.codec import encode
from events.subjects import input_subject
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.runtime.natsserver import NatsServer
from services.front.host.stack import Stack

__all__ = ["measure", "main"]


def _job(job: str) -> Outgoing:
    event = c.JobSubmitted(job_id=job, tenant="acme", correlation_id=job, source="bench-fencing",
                           resources=c.ResourceRequest(cpus=1, memory="1Gi"), time_limit_s=600.0, sim_runtime_s=60.0)
    return Outgoing(input_subject("acme", "submit"), encode(event), job)


async def _until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.001)


async def measure(leases: bool, jobs: int, latency_jobs: int, nodes: int, work: Path) -> dict[str, float]:
    server = NatsServer(store_dir=work / "nats", port=0)
    server.start()
    stack = Stack(server.url, work / "data", nodes=local_nodes(nodes, gpus_per_node=0), executor="sim",
                  lease_ttl_s=10 if leases else None)
    try:
        await stack.start()
        if leases:
            await _until(lambda: all(p.obj.runner.leading if hasattr(p.obj, "runner") else p.obj.leading
                                     for n, p in stack.parts.items() if n in ("submission", "scheduling",
                                                                               "placement", "inventory")),
                         30, "every service to lead")
        nc = await nats.connect(server.url)
        client = await JetStreamLog.open(server.url, name="bench-fencing", create=False)
        scheduled: dict[str, float] = {}

        async def on_scheduled(msg: Any) -> None:
            scheduled[msg.subject.rsplit(".", 1)[1]] = time.monotonic()

        await nc.subscribe("horizon.evt.placement.JobScheduled.*", cb=on_scheduled)
        # latency first, on an empty queue
        waits = []
        for i in range(latency_jobs):
            job = f"lat-{i:04d}"
            t0 = time.monotonic()
            await client.publish_many([_job(job)])
            await _until(lambda: job in scheduled, 60, f"{job} to be scheduled")
            waits.append(scheduled[job] - t0)
        burst = [_job(f"burst-{i:05d}") for i in range(jobs)]
        t0 = time.monotonic()
        for i in range(0, jobs, 1000):
            await client.publish_many(burst[i:i + 1000])
        await _until(lambda: len(scheduled) >= latency_jobs + jobs, 600, "the burst to be scheduled")
        took = max(scheduled.values()) - t0
        await client.close()
        await nc.close()
    finally:
        await stack.stop()
        server.stop()
    p95 = quantiles(waits, n=20)[-1]
    return {"burst_s": round(took, 3), "burst_jobs_per_s": round(jobs / took), "latency_p50_ms":
            round(1000 * median(waits), 2), "latency_p95_ms": round(1000 * p95, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.front.bench.fencing", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=40)
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.latency_jobs < 2 or args.repeats < 1 or args.jobs + args.latency_jobs > args.nodes * 64:
        parser.error("--jobs, --repeats >= 1, --latency-jobs >= 2; --jobs + --latency-jobs at most 64 x --nodes "
                     "(all must fit at once, or the burst would time the jobs' run)")
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="horizon-fencing-") as tmp:
        for r in range(args.repeats):
            for mode in ("off", "on"):
                work = Path(tmp) / f"{mode}-{r}"
                runs[mode].append(asyncio.run(measure(mode == "on", args.jobs, args.latency_jobs, args.nodes, work)))
                print(f"repeat {r + 1} leases {mode}: {runs[mode][-1]}", file=sys.stderr)
    summary = {mode: {k: median(run[k] for run in rs) for k in rs[0]} for mode, rs in runs.items()}
    print(json.dumps({"jobs": args.jobs, "latency_jobs": args.latency_jobs, "repeats": args.repeats,
                      "median": summary, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
