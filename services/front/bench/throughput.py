"""Benchmarks 1 and 2 of ``horizon bench`` (services/front/bench/harness.py): intake and scheduling throughput.

Both count what they measure from the stream (``watch.Tally``: a pull reader on one filter, every
stored event exactly once, with the time the stream stored it) and wait under a budget derived
from their size (``stage.wait_for``: a miss names the stage, what it waited for and how far it got).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject, input_subject
from services.domain.envelope import decision_id
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.front.bench.processes import spawn, stop_processes
from services.front.bench.sizes import Sizes
from services.front.bench.stage import budget, close_within, status, wait_for
from services.front.bench.watch import ACCEPTED, Agents, SchedulingWatch, Tally

__all__ = ["bench_intake", "bench_scheduling", "submitted", "node_names", "publish_nodes", "publish_backlog",
           "run_scheduling", "HEARTBEAT_TIMEOUT"]

# Inventory's heartbeat timeout in the throughput benchmarks: well above a loaded machine's hiccups
# (a node declared lost mid-run would fail its jobs and measure the requeues instead).
HEARTBEAT_TIMEOUT = "60"


def submitted(i: int, prefix: str = "b") -> tuple[str, bytes, str]:
    job_id = f"{prefix}-{i:07d}"
    body = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(cpus=1, memory="1Gi", gpus=1),
                          sim_runtime_s=0.0)
    return input_subject("bench", "submit"), encode(body), job_id


async def _publish(log: JetStreamLog, items: Iterator[Outgoing], chunk: int = 5_000) -> int:
    """Pipelined, ``chunk`` at a time (never the whole backlog in memory); how many."""
    n = 0
    part: list[Outgoing] = []
    for item in items:
        part.append(item)
        if len(part) == chunk:
            await log.publish_many(part)
            n, part = n + len(part), []
    if part:
        await log.publish_many(part)
        n += len(part)
    return n


async def _raw_publish_rate(log: JetStreamLog, n: int, prefix: str) -> float:
    items = [Outgoing(s, d, m) for s, d, m in (submitted(i, prefix) for i in range(n))]
    started = time.perf_counter()
    await _publish(log, iter(items))
    return n / (time.perf_counter() - started)


async def bench_intake(url: str, sizes: Sizes) -> dict[str, Any]:
    stage = "intake"
    log = await JetStreamLog.open(url, name="bench-intake")
    procs: list[Any] = []
    accepted = Tally(ACCEPTED)
    try:
        status(stage, "publishing the raw payloads")
        raw = await _raw_publish_rate(log, sizes.intake_jobs, "raw")
        # Register one GPU node so GPU requests are admissible, then start submission in its own process.
        reg = local_nodes(1)[0].registration("bench")
        await log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
        await accepted.start(log, 1)
        procs = [spawn(url, "submission")]
        n = sizes.intake_jobs
        # the service first accepts the raw payloads already in the log (its catch-up); then the clock starts
        await wait_for(stage, "the raw payloads to be accepted too", lambda: accepted.count >= n,
                       budget(120, 0.002, n), lambda: f"{accepted.count:,} of {n:,} JobAccepted")
        items = [Outgoing(s, d, m) for s, d, m in (submitted(i, "in") for i in range(n))]
        started = time.time()
        await _publish(log, iter(items))
        await wait_for(stage, "acceptances", lambda: accepted.count >= 2 * n, budget(60, 0.002, n),
                       lambda: f"{accepted.count - n:,} of {n:,} JobAccepted")
        assert accepted.last is not None
        rate = n / (accepted.last - started)
    finally:
        stop_processes(procs)
        await accepted.stop()
        await close_within(log.close())
    return {"accepted_per_s": round(rate), "raw_publish_per_s": round(raw), "ratio": round(rate / raw, 3),
            "jobs": sizes.intake_jobs}


def node_names(nodes: int, prefix: str = "bn") -> list[str]:
    return [spec.name for spec in local_nodes(nodes, gpus_per_node=8, prefix=prefix)]


async def publish_nodes(log: JetStreamLog, nodes: int, partitions: list[str] | None = None, prefix: str = "bn") -> list[str]:
    """``nodes`` nodes of 8 GPUs registered (and, with ``partitions``, node k in partition k mod P); their names."""
    specs = local_nodes(nodes, gpus_per_node=8, prefix=prefix)
    items: list[Outgoing] = []
    for k, name in enumerate(partitions or []):
        cfg = c.PartitionConfigured(id=f"bench/partition/{name}", name=name, default=k == 0,
                                    nodes=[n.name for n in specs[k::len(partitions or [])]])
        items.append(Outgoing(admin_subject("partition"), encode(cfg), cfg.id))
    for spec in specs:
        reg = spec.registration("bench")
        items.append(Outgoing(event_subject("agent", reg), encode(reg), reg.id))
    await _publish(log, iter(items))
    return [spec.name for spec in specs]


def _accepted(first: int, n: int, partitions: list[str] | None, prefix: str) -> Iterator[Outgoing]:
    now = time.time()
    for i in range(first, first + n):
        job_id = f"{prefix}-{i:07d}"
        spec = c.JobSpec(tenant="bench", gpus=1, time_limit_s=600.0,
                         partition=partitions[i % len(partitions)] if partitions else "")
        accepted = c.JobAccepted(id=decision_id("submission", c.JobAccepted, job_id), correlation_id=job_id,
                                 source="submission", job_id=job_id, spec=spec, submitted_ts=now, basis_seq=1)
        yield Outgoing(event_subject("submission", accepted), encode(accepted), accepted.id)


async def publish_backlog(log: JetStreamLog, backlog: int, partitions: list[str] | None = None, prefix: str = "q",
                          first: int = 0) -> int:
    """``backlog`` accepted one-GPU jobs (job i in partition i mod P), published a chunk at a time."""
    return await _publish(log, _accepted(first, backlog, partitions, prefix))


async def run_scheduling(url: str, stage: str, nodes: int, backlog: int) -> dict[str, Any]:
    """Benchmark 2's shape at any size: nodes and backlog in the log, then the three services
    started; the figures (from the services' start, and sustained: first to last ``JobScheduled``)."""
    log = await JetStreamLog.open(url, name=f"bench-{stage}")
    procs: list[Any] = []
    watch: SchedulingWatch | None = None
    agents: Agents | None = None
    try:
        status(stage, f"publishing {nodes:,} nodes and a backlog of {backlog:,}")
        names = await publish_nodes(log, nodes)
        await publish_backlog(log, backlog)
        agents = await Agents(log, names).start(url)
        watch = await SchedulingWatch(log, agents).start(await log.last_seq() + 1)
        started = time.time()
        procs = [spawn(url, "inventory", "--heartbeat-timeout", HEARTBEAT_TIMEOUT), spawn(url, "scheduling"),
                 spawn(url, "placement")]
        w = watch
        await wait_for(stage, f"{backlog:,} JobScheduled", lambda: w.jobs >= backlog,
                       budget(120, 0.002, backlog), lambda: w.progress(backlog))
        assert w.last is not None and w.first is not None
        elapsed = w.last - started
        sustained = w.last - w.first
    finally:
        stop_processes(procs)
        if agents is not None:
            await agents.stop()
        if watch is not None:
            await watch.stop()
        await close_within(log.close())
    return {"jobs_per_s": round(backlog / elapsed), "nodes": nodes, "backlog": backlog,
            "elapsed_s": round(elapsed, 2), "cycles": len(w.cycle_ms), "cycle_p50_ms": w.cycle_p(50),
            "cycle_p99_ms": w.cycle_p(99), "sustained_jobs_per_s": round(backlog / max(sustained, 1e-9)),
            "node_lost": w.node_lost}


async def bench_scheduling(url: str, sizes: Sizes) -> dict[str, Any]:
    """``nodes`` x 8 GPUs and ``backlog`` accepted jobs in the log; inventory, scheduling and placement
    start; jobs scheduled/s from their start to the last ``JobScheduled``, and the cycle latency
    (``SchedulingCycleCompleted`` to its ``PlacementCycleCompleted``, the stream's timestamps)."""
    return await run_scheduling(url, "scheduling", sizes.nodes, sizes.backlog)
