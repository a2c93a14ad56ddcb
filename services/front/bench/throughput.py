"""Benchmarks 1 and 2 of ``horizon bench`` (services/front/bench/harness.py): intake and scheduling throughput."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import nats

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject, input_subject
from services.domain.envelope import decision_id
from services.nodes.spec import local_nodes
from services.runtime import receive
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.front.sim.metrics import percentile
from services.front.bench.processes import service_processes, stop_processes, wait_until
from services.front.bench.sizes import Sizes

__all__ = ["bench_intake", "bench_scheduling", "complete_instantly", "submitted"]

_scheduled = msgspec.json.Decoder(c.JobScheduled)


def submitted(i: int, prefix: str = "b") -> tuple[str, bytes, str]:
    job_id = f"{prefix}-{i:07d}"
    body = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(cpus=1, memory="1Gi", gpus=1),
                          sim_runtime_s=0.0)
    return input_subject("bench", "submit"), encode(body), job_id

async def _raw_publish_rate(log: JetStreamLog, n: int, prefix: str) -> float:
    items = [Outgoing(s, d, m) for s, d, m in (submitted(i, prefix) for i in range(n))]
    started = time.perf_counter()
    for i in range(0, n, 5_000):
        await log.publish_many(items[i : i + 5_000])
    return n / (time.perf_counter() - started)

async def bench_intake(url: str, sizes: Sizes) -> dict[str, Any]:
    log = await JetStreamLog.open(url, name="bench-intake")
    raw = await _raw_publish_rate(log, sizes.intake_jobs, "raw")
    # Register one GPU node so GPU requests are admissible, then start submission in its own process.
    reg = local_nodes(1)[0].registration("bench")
    await log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
    procs = service_processes(url, "submission")
    nc = await nats.connect(url)
    accepted = 0
    last = [0.0]

    def on_accept(_subject: str, _reply: str, _headers: Any, _data: bytes) -> None:
        nonlocal accepted
        accepted += 1
        last[0] = time.perf_counter()

    receive.install(nc)
    await receive.subscribe_fast(nc, "horizon.evt.submission.JobAccepted.>", on_accept)
    try:
        # the service first accepts the raw payloads already in the log (its catch-up); then the clock starts
        await wait_until(lambda: accepted >= sizes.intake_jobs, 300, "the raw payloads to be accepted too")
        accepted = 0
        items = [Outgoing(s, d, m) for s, d, m in (submitted(i, "in") for i in range(sizes.intake_jobs))]
        started = time.perf_counter()
        for i in range(0, len(items), 5_000):
            await log.publish_many(items[i : i + 5_000])
        await wait_until(lambda: accepted >= sizes.intake_jobs, 300, "acceptances")
        rate = sizes.intake_jobs / (last[0] - started)
    finally:
        await nc.close()
        stop_processes(procs)
        await log.close()
    return {"accepted_per_s": round(rate), "raw_publish_per_s": round(raw), "ratio": round(rate / raw, 3),
            "jobs": sizes.intake_jobs}

async def complete_instantly(log: JetStreamLog, to_complete: list[tuple[str, int, str]], wake: asyncio.Event) -> None:
    """Instantaneous agents: every scheduled job (job, attempt, node) in ``to_complete`` ends at once,
    freeing its resources, whenever ``wake`` is set."""
    while True:
        await wake.wait()
        wake.clear()
        batch, to_complete[:] = list(to_complete), []
        out = []
        for job_id, attempt, node in batch:
            done = c.JobSucceeded(id=decision_id("agent", c.JobSucceeded, job_id, attempt), correlation_id=job_id,
                                  source=f"agent/{node}", job_id=job_id, attempt=attempt, node=node)
            out.append(Outgoing(event_subject("agent", done), encode(done), done.id))
        if out:
            await log.publish_many(out)


async def bench_scheduling(url: str, sizes: Sizes) -> dict[str, Any]:
    log = await JetStreamLog.open(url, name="bench-scheduling")
    items: list[Outgoing] = []
    for spec in local_nodes(sizes.nodes, gpus_per_node=8, prefix="bn"):
        reg = spec.registration("bench")
        items.append(Outgoing(event_subject("agent", reg), encode(reg), reg.id))
    for i in range(sizes.backlog):
        job_id = f"q-{i:07d}"
        accepted = c.JobAccepted(id=decision_id("submission", c.JobAccepted, job_id), correlation_id=job_id, source="submission",
                                 job_id=job_id, spec=c.JobSpec(tenant="bench", gpus=1, time_limit_s=600.0),
                                 submitted_ts=time.time(), basis_seq=1)
        items.append(Outgoing(event_subject("submission", accepted), encode(accepted), accepted.id))
    for i in range(0, len(items), 5_000):
        await log.publish_many(items[i : i + 5_000])
    nc = await nats.connect(url)
    scheduled = 0
    last = [0.0]
    cycle_start: dict[str, float] = {}
    cycle_ms: list[float] = []
    to_complete: list[tuple[str, int, str]] = []
    wake = asyncio.Event()

    def on_event(subject: str, _reply: str, _headers: Any, data: bytes) -> None:
        nonlocal scheduled
        kind = subject.split(".")[3]
        now = time.perf_counter()
        if kind == "JobScheduled":
            scheduled += 1
            last[0] = now
            body = _scheduled.decode(data)
            to_complete.append((body.job_id, body.attempt, body.allocations[0].node))
            wake.set()
        elif kind == "SchedulingCycleCompleted":
            cycle_start[subject.rsplit(".", 1)[1]] = now
        elif kind == "PlacementCycleCompleted":
            begun = cycle_start.pop(subject.rsplit(".", 1)[1], None)
            if begun is not None:
                cycle_ms.append((now - begun) * 1000)

    async def heartbeats() -> None:
        # The nodes' agents would heartbeat; without it inventory rightly declares them lost.
        names = [f"bn-{i:0{max(2, len(str(sizes.nodes - 1)))}d}" for i in range(sizes.nodes)]
        while True:
            for name in names:
                await nc.publish(f"horizon.hb.{name}", b"")
            await asyncio.sleep(1.0)

    # The harness stands in for the agents on other machines: it reads only what it answers, on the
    # lean path, so that the two cores go to the services being measured.
    receive.install(nc)
    for subject in ("horizon.evt.placement.>", "horizon.evt.scheduling.SchedulingCycleCompleted.>"):
        await receive.subscribe_fast(nc, subject, on_event)
    beats = asyncio.create_task(heartbeats())
    task = asyncio.create_task(complete_instantly(log, to_complete, wake))
    started = time.perf_counter()
    procs = service_processes(url, "inventory", "scheduling", "placement")
    try:
        await wait_until(lambda: scheduled >= sizes.backlog, 1800, "the backlog to be scheduled")
        elapsed = last[0] - started
    finally:
        task.cancel()
        beats.cancel()
        await asyncio.gather(task, beats, return_exceptions=True)
        await nc.close()
        stop_processes(procs)
        await log.close()
    return {"jobs_per_s": round(sizes.backlog / elapsed), "nodes": sizes.nodes, "backlog": sizes.backlog,
            "elapsed_s": round(elapsed, 2), "cycles": len(cycle_ms),
            "cycle_p50_ms": round(percentile(cycle_ms, 50), 1) if cycle_ms else None,
            "cycle_p99_ms": round(percentile(cycle_ms, 99), 1) if cycle_ms else None}
