"""Benchmark ``partitions`` of ``horizon bench``: scheduling throughput with 1 vs 2 partition leaders.

The shape of ``bench_scheduling`` (services/front/bench/throughput.py): a backlog of accepted one-GPU jobs
on ``sizes.nodes`` nodes of 8 GPUs, instantaneous agents (every scheduled job succeeds at once),
and the jobs scheduled per second until the whole backlog has run. Here the scheduling and
placement services run as partition leaders (``horizon service scheduling --partition P``,
docs/scaling.md), each in its own process, in two cases on the same machine in one run:

* ``one``: one partition with every node and the whole backlog, one pair of leaders;
* ``two``: two partitions, each half the nodes and half the backlog, a pair of leaders each.

Each case gets a fresh nats-server, so neither folds the other's log. The rate is counted as
``bench_scheduling`` counts it, from the services' start (``jobs_per_s``, ``ratio``), and from the
first job scheduled (``steady_jobs_per_s``, ``steady_ratio``: start-up, which weighs on ``--quick``
with four processes starting on the same cores, left out). Besides the rate, each
partition's leaders' CPU time (``/proc/<pid>/stat`` utime + stime) per 1,000 of its jobs, counted
from the partition's first ``JobScheduled`` to its last (start-up and catch-up left out), and
over the whole run.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import nats

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.domain.envelope import decision_id
from services.nodes.spec import local_nodes
from services.front.bench.processes import HORIZON, profile, stop_processes
from services.front.bench.sizes import Sizes
from services.front.bench.throughput import complete_instantly
from services.runtime import receive
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.runtime.natsserver import NatsServer

__all__ = ["bench_partitions", "cpu_seconds"]

_scheduled = msgspec.json.Decoder(c.JobScheduled)
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 is state
    return (int(fields[11]) + int(fields[12])) / _TICK


def _spawn(url: str, name: str, partitions: tuple[str, ...], logs: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = [*HORIZON, "service", name, "--nats", url, *extra]
    for p in partitions:
        args += ["--partition", p]
    label = "-".join((name, *partitions))
    with open(logs / f"{label}.log", "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=out)
    proc.log_path = logs / f"{label}.log"  # type: ignore[attr-defined]
    profile(proc, label)
    return proc


def _alive(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is not None:
            tail = Path(proc.log_path).read_text(errors="replace").strip().splitlines()[-5:]  # type: ignore[attr-defined]
            raise RuntimeError(f"{' '.join(map(str, proc.args[3:]))} exited with {proc.returncode}: " + " | ".join(tail))


async def _case(sizes: Sizes, parts: int) -> dict[str, Any]:
    """One case on its own nats-server: ``parts`` partitions over the nodes and the backlog."""
    with tempfile.TemporaryDirectory(prefix=f"horizon-bench-partitions-{parts}-") as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", port=0).start()
        try:
            return await _run(server.url, sizes, parts, Path(tmp))
        finally:
            server.stop()


async def _run(url: str, sizes: Sizes, parts: int, tmp: Path) -> dict[str, Any]:
    names = [f"p{k}" for k in range(parts)]
    nodes = local_nodes(sizes.nodes, gpus_per_node=8, prefix="bn")
    log = await JetStreamLog.open(url, name="bench-partitions")
    items: list[Outgoing] = []
    for k, name in enumerate(names):  # partition k: every parts-th node, and every parts-th job
        cfg = c.PartitionConfigured(id=f"bench/partition/{name}", name=name, default=k == 0,
                                    nodes=[n.name for n in nodes[k::parts]])
        items.append(Outgoing(admin_subject("partition"), encode(cfg), cfg.id))
    for spec in nodes:
        reg = spec.registration("bench")
        items.append(Outgoing(event_subject("agent", reg), encode(reg), reg.id))
    partition_of: dict[str, str] = {}
    for i in range(sizes.backlog):
        job_id = f"q-{i:07d}"
        partition_of[job_id] = names[i % parts]
        accepted = c.JobAccepted(id=decision_id("submission", c.JobAccepted, job_id), correlation_id=job_id, source="submission",
                                 job_id=job_id, spec=c.JobSpec(tenant="bench", gpus=1, time_limit_s=600.0,
                                                               partition=names[i % parts]),
                                 submitted_ts=time.time(), basis_seq=1)
        items.append(Outgoing(event_subject("submission", accepted), encode(accepted), accepted.id))
    for i in range(0, len(items), 5_000):
        await log.publish_many(items[i : i + 5_000])

    nc = await nats.connect(url)
    scheduled = {name: 0 for name in names}
    seen: set[str] = set()  # jobs scheduled at least once (a requeued one is scheduled again)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    cpu_first: dict[str, dict[str, float]] = {}
    to_complete: list[tuple[str, int, str]] = []
    wake = asyncio.Event()
    procs: dict[str, dict[str, subprocess.Popen[bytes]]] = {}

    def cpu_of(name: str) -> dict[str, float]:
        return {role: cpu_seconds(p.pid) for role, p in procs[name].items()}

    def on_event(_subject: str, _reply: str, _headers: Any, data: bytes) -> None:
        body = _scheduled.decode(data)
        name = partition_of[body.job_id]
        now = time.perf_counter()
        if name not in first:
            first[name] = now
            cpu_first[name] = cpu_of(name)
        if body.job_id not in seen:
            seen.add(body.job_id)
            scheduled[name] += 1
            last[name] = now
        to_complete.append((body.job_id, body.attempt, body.allocations[0].node))
        wake.set()

    async def heartbeats() -> None:
        # The nodes' agents would heartbeat; without it inventory rightly declares them lost.
        while True:
            for spec in nodes:
                await nc.publish(f"horizon.hb.{spec.name}", b"")
            await asyncio.sleep(1.0)

    cycles = {name: 0 for name in names}

    def on_cycle(subject: str, _reply: str, _headers: Any, _data: bytes) -> None:
        owner = subject.split(".")[2]  # placement-<partition>
        name = owner.partition("-")[2]
        if name in cycles:
            cycles[name] += 1

    receive.install(nc)
    await receive.subscribe_fast(nc, "horizon.evt.*.JobScheduled.>", on_event)
    await receive.subscribe_fast(nc, "horizon.evt.*.PlacementCycleCompleted.>", on_cycle)
    beats = asyncio.create_task(heartbeats())
    task = asyncio.create_task(complete_instantly(log, to_complete, wake))
    logs = tmp / "logs"
    logs.mkdir()
    started = time.perf_counter()
    # A heartbeat timeout well above a loaded machine's hiccups: a node declared lost mid-run would
    # fail its jobs and measure the requeues instead.
    inventory = _spawn(url, "inventory", (), logs, "--heartbeat-timeout", "120")
    for name in names:
        procs[name] = {role: _spawn(url, role, (name,), logs) for role in ("scheduling", "placement")}
    every = [inventory, *(p for pair in procs.values() for p in pair.values())]
    try:
        deadline = time.monotonic() + 1800
        while sum(scheduled.values()) < sizes.backlog:
            if time.monotonic() > deadline:
                raise TimeoutError("benchmark: timed out waiting for the backlog to be scheduled")
            _alive(every)
            await asyncio.sleep(0.01)
        ended = max(last.values())
        cpu_end = {name: cpu_of(name) for name in names}
        inventory_cpu = cpu_seconds(inventory.pid)
    finally:
        task.cancel()
        beats.cancel()
        await asyncio.gather(task, beats, return_exceptions=True)
        stop_processes(every)
        for closing in (nc.close(), log.close()):
            try:
                await asyncio.wait_for(closing, 10.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the figures are taken; the server goes next
                pass
    out: dict[str, Any] = {"partitions": parts, "nodes": sizes.nodes, "backlog": sizes.backlog,
                           "elapsed_s": round(ended - started, 2),
                           "jobs_per_s": round(sizes.backlog / (ended - started)),
                           # from the first JobScheduled of any partition: start-up and catch-up left out
                           "steady_jobs_per_s": round(sizes.backlog / max(1e-9, ended - min(first.values()))),
                           "inventory_cpu_s": round(inventory_cpu, 2), "by_partition": {}}
    for name in names:
        jobs = scheduled[name]
        steady = {role: cpu_end[name][role] - cpu_first[name][role] for role in cpu_end[name]}
        out["by_partition"][name] = {
            "jobs": jobs,
            "jobs_per_s": round(jobs / (last[name] - started)),
            "cycles": cycles[name],
            "jobs_per_cycle": round(jobs / max(1, cycles[name]), 1),
            "cpu_s": {role: round(v, 2) for role, v in cpu_end[name].items()},
            "cpu_s_per_1000_jobs": {role: round(v * 1000 / max(1, jobs), 3) for role, v in steady.items()},
        }
    return out


async def bench_partitions(url: str, sizes: Sizes) -> dict[str, Any]:
    """``one`` and ``two`` partitions, same nodes and backlog, each on a fresh server (``url`` unused)."""
    one = await _case(sizes, 1)
    two = await _case(sizes, 2)
    return {"one": one, "two": two, "ratio": round(two["jobs_per_s"] / one["jobs_per_s"], 3),
            "steady_ratio": round(two["steady_jobs_per_s"] / one["steady_jobs_per_s"], 3), "cpus": os.cpu_count()}
