"""``horizon bench``: Horizon's speed, measured on the real path, as ratios to the raw bus in the same run.

Every benchmark starts its own nats-server (temporary store, free loopback
port) and measures the raw JetStream rate it stands on in the same run, so
the figures that matter are ratios that survive a noisy machine.

1. **intake**: raw pipelined publish of N ``JobSubmitted`` payloads into the
   stream; then an external client publishes N more while the submission
   service runs in its own process: accepted/s from the first publish to the
   last ``JobAccepted`` seen by a subscriber.
2. **scheduling**: ``nodes`` nodes x 8 GPUs are registered and ready and
   ``backlog`` accepted one-GPU jobs wait in the log; then inventory,
   scheduling and placement start (their own process) while a completer ends
   every scheduled job at once (as instantaneous agents). Jobs scheduled/s
   from the services' start to the last ``JobScheduled``, and the cycle
   latency (``SchedulingCycleCompleted`` to its ``PlacementCycleCompleted``,
   as seen by a subscriber).
3. **replay**: a log of ``events`` job-lifecycle events; the scheduling
   service's catch-up from sequence 1 (decoding and folding everything)
   against a raw read of the same stream in order (the same pull reader,
   no decoding).
   Then the state is snapshotted and the service restarted from it
   (``snapshot_restart_s``).
4. **latency**: ``horizon up --executor sim`` as a separate process on an idle
   cluster; one job at a time: submit -> ``JobScheduled`` received by an
   external subscriber.
5. **memory**: resident bytes per queued job in the scheduling core's state.
6. **snapshot**: the scheduling service's restart time as its log grows
   (``snapshot_events``), through the real ``ServiceRunner``: a full replay,
   from a snapshot ``snapshot_tail`` records before the end (load + tail), and
   from a snapshot at the end; with the snapshot's size and the time to dump,
   store and load it. Also the snapshot store's speed against nats-py's
   object store on one blob (``snapshot_blob_mb``), written and read back.
7. **partitions**: benchmark 2's shape with partition leaders
   (``services/front/bench/partitions.py``, docs/scaling.md): one pair of leaders
   over every node and the whole backlog, then two pairs each over half, then
   four over a quarter; the rates, their ratios, and each leader's CPU seconds
   per 1,000 of its jobs.

Every stage runs under a budget derived from its size (``stage_budget``; its
waits have smaller ones, ``services/front/bench/stage.py``): one that misses it,
or whose services die, fails with a message naming the stage, what it waited
for and how far it got; its processes are stopped by PID and the other stages
still run. What the stages count they read from the stream (a pull reader per
filter, ``services/front/bench/watch.py``), never from core NATS, where a slow
consumer loses messages.

``--scale`` (``run_scale_benchmarks``, ``services/front/bench/scale.py``): the
100k-GPU cluster, the curves over nodes x backlog and partitions 1/2/4.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.front.bench.latency import bench_latency
from services.front.bench.memory_use import bench_memory
from services.front.bench.partitions import bench_partitions
from services.front.bench.restart import bench_replay, bench_snapshot
from services.front.bench.scale import run_scale
from services.front.bench.sizes import ScaleSizes, Sizes
from services.front.bench.stage import StageFailed, budget, run_stage
from services.front.bench.throughput import bench_intake, bench_scheduling
from services.runtime.bytecode import compile_tree
from services.runtime.natsserver import NatsServer

__all__ = ["BENCHMARKS", "run_benchmarks", "run_scale_benchmarks", "stage_budget", "Sizes", "ScaleSizes"]


BENCHMARKS = {
    "intake": bench_intake,
    "scheduling": bench_scheduling,
    "replay": bench_replay,
    "latency": bench_latency,
    "memory": bench_memory,
    "snapshot": bench_snapshot,
    "partitions": bench_partitions,
}


def stage_budget(name: str, sizes: Sizes) -> float:
    """Seconds ``name`` may take at ``sizes`` (its waits have their own, smaller budgets and fail first
    with what they waited for)."""
    fold = 300e-6  # wall seconds per record the services fold, three on two cores
    return {
        "intake": budget(180, 0.004, sizes.intake_jobs),
        "scheduling": budget(180, fold + 0.002, sizes.backlog),
        "replay": budget(120, 200e-6, sizes.replay_events),
        "latency": budget(90, 0.05, sizes.latency_jobs),
        "memory": budget(60, 100e-6, sum(sizes.memory_jobs)),
        "snapshot": budget(120, 200e-6, sum(sizes.snapshot_events)),
        "partitions": len(sizes.partition_cases) * budget(180, fold + 0.002, sizes.backlog),
    }[name]


async def run_benchmarks(names: list[str], sizes: Sizes, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Each stage on its own nats-server under its budget; a stage that fails has ``{"error": why}``
    in place of its figures (``failed`` lists them) and the others still run."""
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    compile_tree()  # the services it starts begin as an installed Horizon's would (services/runtime/bytecode.py)
    for name in names:
        if progress:
            progress(name)
        try:
            results[name] = await run_stage(name, lambda n=name: _on_server(n, sizes), stage_budget(name, sizes))
        except StageFailed as exc:
            results[name] = {"error": str(exc)}
        if results[name].get("error"):  # failed, or in part (a partitions case) with the rest measured
            results.setdefault("failed", []).append(name)
    return results


async def _on_server(name: str, sizes: Sizes) -> Any:
    with tempfile.TemporaryDirectory(prefix=f"horizon-bench-{name}-") as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", port=0).start()
        try:
            return await BENCHMARKS[name](server.url, sizes)
        finally:
            server.stop()


async def run_scale_benchmarks(scale: ScaleSizes, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``horizon bench --scale`` (services/front/bench/scale.py); ``failed`` lists the stages that failed."""
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    compile_tree()
    results.update(await run_scale(scale, progress))
    failed = [name for name in ("scale", "partitions") if results[name].get("error")]
    failed += [f"curves {c['nodes']}x{c['backlog']}" for c in results["curves"] if c.get("error")]
    if failed:
        results["failed"] = failed
    return results
