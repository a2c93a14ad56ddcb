"""``horizon bench --scale``: the 100k-GPU figures, the curves over nodes x backlog, partitions 1/2/4.

The loaded cluster (``ScaleSizes``: 12,500 nodes x 8 GPUs and a backlog of 1,000,000 one-GPU jobs by
default; with ``--nodes``/``--backlog``, the grid's largest cell) runs on its own nats-server with
the five decision services as processes, in phases (``SERVICES``; the throughput phase runs the three a
decision needs, inventory, scheduling and placement, as ``bench_scheduling`` does):

1. **Empty log.** The five services start on an empty log; once each says it has caught up
   (``READY=1`` on its notify socket, services/front/bench/processes.py), its resident memory
   (``VmRSS``, /proc/PID/status) is taken; they stop.
2. **The backlog.** ``backlog`` ``JobAccepted`` are published, no node registered yet (so nothing
   is scheduled while memory is taken); the services start again and fold it (``catch_up_s``).
   Once each has caught up (``READY=1``, then 1 s for its first decision round to pass): its RSS
   again. ``bytes_per_queued_job`` = (RSS with the backlog - RSS on the empty log) / backlog, per
   service; the largest of the five is the figure, each is in ``bytes_per_queued_job_by_service``.
   A service that snapshots has just dumped its state (once caught up) and holds the dump while it
   uploads, which this RSS includes; ``bytes_per_queued_job_before_restart_by_service`` is the same
   taken again in phase 3, after the upload (what the allocator kept of it included).
3. **Restart.** For each service in turn: if its core takes snapshots (``snapshot_every``; they
   snapshot every 50,000 records and once caught up), wait until its snapshot at the log's end is
   stored; take its RSS; SIGTERM it (by PID), start it again and time it from the start of the new
   process to its ``READY=1`` (it has caught up: loaded its snapshot and folded the tail, or, with
   no snapshot, folded the whole log). ``restart_s`` is the largest; ``restart_s_by_service`` each,
   with the snapshot it restored from (its log line), if any.
4. **Throughput.** The nodes register; instantaneous agents end every scheduled job at once and
   heartbeat every node. ``jobs_per_s`` is the *sustained* rate of decisions: first attempts of
   ``JobScheduled`` per second from the first ``JobScheduled`` to the last (the stream's
   timestamps), until the whole backlog has been scheduled; ``cycle_p99_ms`` as in
   ``bench_scheduling`` (``SchedulingCycleCompleted`` to its ``PlacementCycleCompleted``).
5. **Latency.** Once the backlog has drained, submission starts again (from its snapshot of
   phase 3, then it folds what phase 4 added); then ``latency_jobs`` jobs, one at a time: ``JobSubmitted`` published (acknowledged by
   the stream) to its ``JobScheduled`` read by the harness; ``latency_p99_ms``.

The **curves**: decisions/s (sustained, as in 4) and cycle p99 for every cell of the grid
(``bench_scheduling``'s shape: nodes and backlog in the log, then the services start), each on a
fresh server; the loaded cluster's cell is taken from phase 4 instead of being run twice.
The **partitions**: ``bench_partitions`` on 1,000 nodes x 50,000 with 1, 2 and 4 pairs of leaders;
``ratio_2`` and ``ratio_4`` are their rates over one pair's, same run.

Every phase waits under a budget derived from its size (``stage.budget``); a miss fails the
stage with what it waited for and how far it got, and the other stages still run.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.codec import encode
from events.subjects import input_subject
from services.front.bench.hops import latency_hops
from services.front.bench.partitions import bench_partitions
from services.front.bench.processes import is_ready, rss_bytes, spawn, stop_processes
from services.front.bench.sizes import ScaleSizes
from services.front.bench.stage import budget, close_within, run_stage, status, wait_for, StageFailed
from services.front.bench.throughput import HEARTBEAT_TIMEOUT, node_names, publish_backlog, publish_nodes, run_scheduling
from services.front.bench.watch import Agents, SchedulingWatch
from services.front.sim.metrics import percentile
from services.runtime.jetstream import JetStreamLog
from services.runtime.natsserver import NatsServer

__all__ = ["run_scale", "scale_budget", "CONTRACT", "SERVICES"]

SERVICES = ("inventory", "scheduling", "placement", "submission", "preemption")  # memory and restart: all five
DECIDING = ("inventory", "scheduling", "placement")  # what the throughput phase runs (as bench_scheduling)
CONTRACT = ("nodes", "backlog", "jobs_per_s", "cycle_p99_ms", "bytes_per_queued_job", "restart_s", "latency_p99_ms")
# Wall seconds per record while the three services fold a log on two cores (~50 us each, measured;
# 250,000 took them 42-48 s on a busy machine)
FOLD_S = 300e-6
# ... per record of the log for a snapshot to be dumped and stored, and loaded at a restart (a
# scheduling snapshot was 1.2 KB per queued job at 250,000: 302 MB, stored in 3.5 s, a restart 10.6 s)
SNAPSHOT_S = 100e-6
_RESTORED = re.compile(r"restored from the snapshot at seq (\d+)")


def _args(name: str) -> tuple[str, ...]:
    return ("--heartbeat-timeout", HEARTBEAT_TIMEOUT) if name == "inventory" else ()


def _snapshot_every(name: str) -> int:
    """Records between ``name``'s snapshots (0: its core takes none), as the service builds its core."""
    from services.domain.protocol import snapshot_interval
    from services.front.registry import make_core

    return snapshot_interval(make_core(name))


async def _all_ready(stage: str, procs: dict[str, subprocess.Popen[bytes]], what: str, budget_s: float) -> dict[str, float]:
    """Seconds from now until each process said READY=1."""
    started = time.monotonic()
    at: dict[str, float] = {}

    def reached() -> bool:
        for name, proc in procs.items():
            if name not in at and is_ready(proc):
                at[name] = time.monotonic() - started
        return len(at) == len(procs)

    await wait_for(stage, what, reached, budget_s,
                   lambda: f"ready: {', '.join(sorted(at)) or 'none'}; not yet: {', '.join(sorted(set(procs) - set(at)))}")
    return at


async def _rss_settled(procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, int]:
    await asyncio.sleep(1.0)  # the first decision round after catching up, and its garbage, pass
    return {name: rss_bytes(proc.pid) for name, proc in procs.items()}


async def _start(url: str, stage: str, what: str, budget_s: float) -> tuple[dict[str, subprocess.Popen[bytes]], dict[str, float]]:
    procs = {name: spawn(url, name, *_args(name)) for name in SERVICES}
    return procs, await _all_ready(stage, procs, what, budget_s)


async def _snapshot_seq(log: JetStreamLog, name: str) -> int:
    from nats.js.errors import NotFoundError

    from services.runtime.snapshots import SNAPSHOT_STREAM, decode_manifest, manifest_subject

    try:
        raw = await log.js.get_last_msg(SNAPSHOT_STREAM, manifest_subject(name))
    except NotFoundError:
        return 0
    return int(decode_manifest(raw.data or b"").seq)


async def _restart(url: str, log: JetStreamLog, stage: str, procs: dict[str, subprocess.Popen[bytes]],
                   end: int) -> dict[str, dict[str, Any]]:
    """Phase 3: each service stopped and started again, timed to READY=1. ``end``: the log's last
    seq when they started; a service that snapshots has one there once caught up (if ``end`` is at
    least its interval), and it must be stored before the stop."""
    out: dict[str, dict[str, Any]] = {}
    for name in SERVICES:
        every = _snapshot_every(name)
        snapshot = every > 0 and end >= every
        if snapshot:
            stored = await _snapshot_seq(log, name)
            waited = time.monotonic()
            status(stage, f"waiting for {name}'s snapshot at seq {end:,} to be stored")
            while stored < end:
                if time.monotonic() - waited > budget(30, SNAPSHOT_S, end):
                    raise StageFailed(f"{stage}: {name}'s snapshot is at seq {stored:,}, not at {end:,} (where it "
                                      f"caught up), {time.monotonic() - waited:.0f} s after it caught up")
                await asyncio.sleep(0.2)
                stored = await _snapshot_seq(log, name)
        await asyncio.sleep(1.0)  # the first decision round after catching up, and its garbage, pass
        rss = rss_bytes(procs[name].pid)  # with the backlog folded and no snapshot buffer held any more
        stop_processes([procs[name]])
        status(stage, f"restarting {name}")
        started = time.monotonic()
        procs[name] = p = spawn(url, name, *_args(name))
        await wait_for(stage, f"{name} to catch up after its restart", lambda: is_ready(p),
                       budget(30, SNAPSHOT_S if snapshot else FOLD_S, end))
        took = time.monotonic() - started
        found = _RESTORED.search(Path(p.log_path).read_text(errors="replace"))  # type: ignore[attr-defined]
        out[name] = {"restart_s": round(took, 3), "snapshot_every": every, "rss_bytes": rss,
                     "restored_from_seq": int(found.group(1)) if found else None}
    return out


async def _latency(url: str, log: JetStreamLog, stage: str, watch: SchedulingWatch, jobs: int,
                   backlog: int) -> tuple[list[float], dict[str, Any]]:
    """Phase 5: submission started (it folds the log first), then ``jobs`` jobs one at a time; the
    samples, and where their time went (``hops.latency_hops``)."""
    sub = spawn(url, "submission")
    await wait_for(stage, "submission to catch up", lambda: is_ready(sub), budget(60, FOLD_S, 3 * backlog))
    first = await log.last_seq() + 1
    arrived: dict[str, float] = {}
    watch.on_job = lambda job_id: arrived.setdefault(job_id, time.perf_counter())
    samples: list[float] = []
    try:
        for i in range(jobs):
            job_id = f"lat-{i:05d}"
            body = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(gpus=1), sim_runtime_s=0.0)
            sent = time.perf_counter()
            await log.publish(input_subject("bench", "submit"), encode(body), msg_id=job_id)
            await wait_for(stage, f"JobScheduled of {job_id} (latency job {i + 1} of {jobs})",
                           lambda: job_id in arrived, budget(10), every_s=0.0005)
            samples.append((arrived[job_id] - sent) * 1000)
    finally:
        watch.on_job = None
        stop_processes([sub])
    return samples, await latency_hops(log, first, "lat-")


async def _loaded(url: str, ss: ScaleSizes) -> dict[str, Any]:
    """Phases 1-5 of the module docstring on the server at ``url``."""
    stage, n, backlog = "scale", ss.nodes, ss.backlog
    log = await JetStreamLog.open(url, name="bench-scale")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    agents: Agents | None = None
    watch: SchedulingWatch | None = None
    try:
        procs, _ = await _start(url, stage, "the services on an empty log", budget(60))
        empty = await _rss_settled(procs)
        stop_processes(list(procs.values()))
        status(stage, f"publishing a backlog of {backlog:,}")
        started = time.monotonic()
        await asyncio.wait_for(publish_backlog(log, backlog), budget(60, 100e-6, backlog))
        publish_s = time.monotonic() - started
        end = await log.last_seq()
        procs, catch_up = await _start(url, stage, f"the services to fold a backlog of {backlog:,}",
                                       budget(60, FOLD_S, backlog))
        full = await _rss_settled(procs)
        per_job = {name: round((full[name] - empty[name]) / backlog) for name in SERVICES}
        restarts = await _restart(url, log, stage, procs, end)
        later = {name: restarts[name].pop("rss_bytes") for name in SERVICES}
        # 4. throughput, with the three services a decision needs (submission comes back in phase 5)
        stop_processes([procs.pop(name) for name in SERVICES if name not in DECIDING])
        agents = await Agents(log, node_names(n)).start(url)
        watch = await SchedulingWatch(log, agents).start(await log.last_seq() + 1)
        await publish_nodes(log, n)
        w = watch
        await wait_for(stage, f"{backlog:,} JobScheduled on {n:,} nodes", lambda: w.jobs >= backlog,
                       budget(120, 0.002, backlog), lambda: w.progress(backlog))
        assert w.first is not None and w.last is not None
        sustained = w.last - w.first
        cycles = (len(w.cycle_ms), w.cycle_p(50), w.cycle_p(99))
        samples, hops = await _latency(url, log, stage, w, ss.latency_jobs, backlog)
    finally:
        stop_processes(list(procs.values()))
        if agents is not None:
            await agents.stop()
        if watch is not None:
            await watch.stop()
        await close_within(log.close())
    return {
        "nodes": n, "backlog": backlog, "jobs_per_s": round(backlog / max(sustained, 1e-9)),
        "cycle_p99_ms": cycles[2], "bytes_per_queued_job": max(per_job.values()),
        "restart_s": max(r["restart_s"] for r in restarts.values()),
        "latency_p99_ms": round(percentile(samples, 99), 2),
        # the rest: how each was taken
        "gpus": n * 8, "scheduling_s": round(sustained, 2), "cycles": cycles[0], "cycle_p50_ms": cycles[1],
        "node_lost": w.node_lost, "publish_backlog_s": round(publish_s, 2),
        "catch_up_s_by_service": {k: round(v, 2) for k, v in catch_up.items()},
        "bytes_per_queued_job_by_service": per_job,
        "rss_bytes_by_service": {name: {"empty": empty[name], "backlog": full[name], "before_restart": later[name]}
                                 for name in SERVICES},
        "bytes_per_queued_job_before_restart_by_service": {
            name: round((later[name] - empty[name]) / backlog) for name in SERVICES},
        "restart_s_by_service": restarts,
        "latency_p50_ms": round(percentile(samples, 50), 2), "latency_p999_ms": round(percentile(samples, 99.9), 2),
        "latency_max_ms": round(max(samples), 2),
        "latency_jobs": len(samples), "latency_hops": hops,
    }


def scale_budget(ss: ScaleSizes) -> float:
    """The loaded cluster's whole budget: the sum of its phases'."""
    b = ss.backlog
    return (budget(60) + budget(60, 100e-6, b) + budget(60, FOLD_S, b) + 2 * budget(30, SNAPSHOT_S, b)
            + 2 * budget(30, FOLD_S, b) + budget(120, 0.002, b) + budget(60, FOLD_S, 3 * b)
            + budget(60, 0.1, ss.latency_jobs) + 60)


async def _on_server(prefix: str, work: Any) -> Any:
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", port=0).start()
        try:
            return await work(server.url)
        finally:
            server.stop()


def _failed(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, StageFailed) else f"{type(exc).__name__}: {exc}"


async def run_scale(ss: ScaleSizes, progress: Any = None) -> dict[str, Any]:
    """Every stage of ``--scale``; a stage that fails has ``error`` (its contract keys ``None``)."""
    say = progress or (lambda _text: None)
    out: dict[str, Any] = {}
    say(f"scale: {ss.nodes:,} nodes x 8 GPUs, backlog {ss.backlog:,}")
    try:
        out["scale"] = await run_stage("scale", lambda: _on_server("horizon-bench-scale-", lambda url: _loaded(url, ss)),
                                       scale_budget(ss))
    except Exception as exc:  # noqa: BLE001 - reported; the other stages still run
        out["scale"] = {**{k: None for k in CONTRACT}, "nodes": ss.nodes, "backlog": ss.backlog, "error": _failed(exc)}
    curves = []
    for nodes, backlog in ss.cells():
        if (nodes, backlog) == (ss.nodes, ss.backlog) and "error" not in out["scale"]:
            s = out["scale"]
            curves.append({"nodes": nodes, "backlog": backlog, "jobs_per_s": s["jobs_per_s"],
                           "cycle_p99_ms": s["cycle_p99_ms"], "from": "scale"})
            continue
        say(f"curves: {nodes:,} nodes x backlog {backlog:,}")
        stage = f"curves {nodes}x{backlog}"
        try:
            r = await run_stage(stage, lambda n=nodes, b=backlog, st=stage: _on_server(
                "horizon-bench-grid-", lambda url: run_scheduling(url, st, n, b)), budget(180, FOLD_S + 0.002, backlog))
            curves.append({"nodes": nodes, "backlog": backlog, "jobs_per_s": r["sustained_jobs_per_s"],
                           "cycle_p99_ms": r["cycle_p99_ms"], "jobs_per_s_from_start": r["jobs_per_s"],
                           "cycles": r["cycles"], "node_lost": r["node_lost"]})
        except Exception as exc:  # noqa: BLE001 - reported; the other cells still run
            curves.append({"nodes": nodes, "backlog": backlog, "jobs_per_s": None, "cycle_p99_ms": None,
                           "error": _failed(exc)})
    out["curves"] = curves
    say(f"partitions: {ss.partitions.nodes:,} nodes, backlog {ss.partitions.backlog:,}, 1/2/4 pairs of leaders")
    psizes = ss.partitions
    try:
        parts = await run_stage("partitions", lambda: bench_partitions("", psizes),
                                len(psizes.partition_cases) * budget(180, FOLD_S + 0.002, psizes.backlog))
        out["partitions"] = {"ratio_2": parts.get("ratio_2"), "ratio_4": parts.get("ratio_4"), **parts}
    except Exception as exc:  # noqa: BLE001 - reported
        out["partitions"] = {"ratio_2": None, "ratio_4": None, "error": _failed(exc)}
    return out
