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
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject, input_subject
from services.agent.app import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.runtime.natsserver import NatsServer
from services.sim.metrics import percentile

__all__ = ["BENCHMARKS", "run_benchmarks", "Sizes"]

HORIZON = [sys.executable, "-m", "services.cli.main"]


class Sizes:
    def __init__(self, quick: bool = False) -> None:
        self.intake_jobs = 5_000 if quick else 50_000
        self.nodes = 100 if quick else 1_000
        self.backlog = 5_000 if quick else 50_000
        self.replay_events = 50_000 if quick else 1_000_000
        self.latency_jobs = 200 if quick else 2_000
        self.memory_jobs = (10_000, 100_000) if quick else (100_000, 1_000_000)
        self.snapshot_events = (5_000, 10_000) if quick else (20_000, 50_000, 100_000, 200_000)
        self.snapshot_tail = 1_000 if quick else 10_000
        self.snapshot_blob_mb = 4 if quick else 50


def _submitted(i: int, prefix: str = "b") -> tuple[str, bytes, str]:
    job_id = f"{prefix}-{i:07d}"
    body = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(cpus=1, memory="1Gi", gpus=1),
                          sim_runtime_s=0.0)
    return input_subject("bench", "submit"), encode(body), job_id


def _service_process(url: str, *names: str) -> list[subprocess.Popen[bytes]]:
    logs = Path(tempfile.mkdtemp(prefix="horizon-bench-logs-"))
    procs = []
    for name in names:
        with open(logs / f"{name}.log", "wb") as out:
            proc = subprocess.Popen([*HORIZON, "service", name, "--nats", url], stdout=out, stderr=out)
        proc.log_path = logs / f"{name}.log"  # type: ignore[attr-defined]
        procs.append(proc)
    _RUNNING.extend(procs)
    return procs


_RUNNING: list[subprocess.Popen[bytes]] = []


def _check_alive() -> None:
    """A service that died ends the benchmark with its last words, rather than a long wait."""
    for proc in _RUNNING:
        if proc.poll() is not None:
            tail = Path(proc.log_path).read_text(errors="replace").strip().splitlines()[-5:]  # type: ignore[attr-defined]
            raise RuntimeError(f"{' '.join(map(str, proc.args[3:4]))} exited with {proc.returncode}: " + " | ".join(tail))


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc in _RUNNING:
            _RUNNING.remove(proc)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: timed out waiting for {what}")
        _check_alive()
        await asyncio.sleep(0.01)


async def _raw_publish_rate(log: JetStreamLog, n: int, prefix: str) -> float:
    items = [Outgoing(s, d, m) for s, d, m in (_submitted(i, prefix) for i in range(n))]
    started = time.perf_counter()
    for i in range(0, n, 5_000):
        await log.publish_many(items[i : i + 5_000])
    return n / (time.perf_counter() - started)


# ---------------------------------------------------------------------------- 1. intake


async def bench_intake(url: str, sizes: Sizes) -> dict[str, Any]:
    log = await JetStreamLog.open(url, name="bench-intake")
    raw = await _raw_publish_rate(log, sizes.intake_jobs, "raw")
    # Register one GPU node so GPU requests are admissible, then start submission in its own process.
    reg = local_nodes(1)[0].registration("bench")
    await log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
    procs = _service_process(url, "submission")
    nc = await nats.connect(url)
    accepted = 0
    last = [0.0]

    async def on_accept(msg: Any) -> None:
        nonlocal accepted
        if msg.subject.startswith("horizon.evt.submission.JobAccepted."):
            accepted += 1
            last[0] = time.perf_counter()

    await nc.subscribe("horizon.evt.submission.*.*", cb=on_accept)
    try:
        # the service first accepts the raw payloads already in the log (its catch-up); then the clock starts
        await _wait(lambda: accepted >= sizes.intake_jobs, 300, "the raw payloads to be accepted too")
        accepted = 0
        items = [Outgoing(s, d, m) for s, d, m in (_submitted(i, "in") for i in range(sizes.intake_jobs))]
        started = time.perf_counter()
        for i in range(0, len(items), 5_000):
            await log.publish_many(items[i : i + 5_000])
        await _wait(lambda: accepted >= sizes.intake_jobs, 300, "acceptances")
        rate = sizes.intake_jobs / (last[0] - started)
    finally:
        await nc.close()
        _stop(procs)
        await log.close()
    return {"accepted_per_s": round(rate), "raw_publish_per_s": round(raw), "ratio": round(rate / raw, 3),
            "jobs": sizes.intake_jobs}


# ---------------------------------------------------------------------------- 2. scheduling


async def bench_scheduling(url: str, sizes: Sizes) -> dict[str, Any]:
    log = await JetStreamLog.open(url, name="bench-scheduling")
    items: list[Outgoing] = []
    for spec in local_nodes(sizes.nodes, gpus_per_node=8, prefix="bn"):
        reg = spec.registration("bench")
        items.append(Outgoing(event_subject("agent", reg), encode(reg), reg.id))
    for i in range(sizes.backlog):
        job_id = f"q-{i:07d}"
        accepted = c.JobAccepted(id=f"submission/JobAccepted/{job_id}", correlation_id=job_id, source="submission",
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

    async def on_event(msg: Any) -> None:
        nonlocal scheduled
        kind = msg.subject.split(".")[3]
        now = time.perf_counter()
        if kind == "JobScheduled":
            scheduled += 1
            last[0] = now
            body = json.loads(msg.data)
            to_complete.append((body["job_id"], body["attempt"], body["allocations"][0]["node"]))
            wake.set()
        elif kind == "SchedulingCycleCompleted":
            cycle_start[msg.subject.rsplit(".", 1)[1]] = now
        elif kind == "PlacementCycleCompleted":
            begun = cycle_start.pop(msg.subject.rsplit(".", 1)[1], None)
            if begun is not None:
                cycle_ms.append((now - begun) * 1000)

    async def completer() -> None:
        # Instantaneous agents: every scheduled job ends at once, freeing its GPU.
        while True:
            await wake.wait()
            wake.clear()
            batch, to_complete[:] = list(to_complete), []
            out = []
            for job_id, attempt, node in batch:
                done = c.JobSucceeded(id=f"agent/JobSucceeded/{job_id}/{attempt}", correlation_id=job_id,
                                      source=f"agent/{node}", job_id=job_id, attempt=attempt, node=node)
                out.append(Outgoing(event_subject("agent", done), encode(done), done.id))
            if out:
                await log.publish_many(out)

    async def heartbeats() -> None:
        # The nodes' agents would heartbeat; without it inventory rightly declares them lost.
        names = [f"bn-{i:0{max(2, len(str(sizes.nodes - 1)))}d}" for i in range(sizes.nodes)]
        while True:
            for name in names:
                await nc.publish(f"horizon.hb.{name}", b"")
            await asyncio.sleep(1.0)

    await nc.subscribe("horizon.evt.>", cb=on_event)
    beats = asyncio.create_task(heartbeats())
    task = asyncio.create_task(completer())
    started = time.perf_counter()
    procs = _service_process(url, "inventory", "scheduling", "placement")
    try:
        await _wait(lambda: scheduled >= sizes.backlog, 1800, "the backlog to be scheduled")
        elapsed = last[0] - started
    finally:
        task.cancel()
        beats.cancel()
        await nc.close()
        _stop(procs)
        await log.close()
    return {"jobs_per_s": round(sizes.backlog / elapsed), "nodes": sizes.nodes, "backlog": sizes.backlog,
            "elapsed_s": round(elapsed, 2), "cycles": len(cycle_ms),
            "cycle_p50_ms": round(percentile(cycle_ms, 50), 1) if cycle_ms else None,
            "cycle_p99_ms": round(percentile(cycle_ms, 99), 1) if cycle_ms else None}


# ---------------------------------------------------------------------------- 3. replay


def _lifecycle(first_job: int, jobs: int) -> list[Outgoing]:
    """Five records per job: submitted, accepted, scheduled, started, succeeded (one node, one GPU)."""
    node = "rn-00"
    batch: list[Outgoing] = []
    for i in range(first_job, first_job + jobs):
        job_id = f"r-{i:07d}"
        sub = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(gpus=1))
        acc = c.JobAccepted(id=f"submission/JobAccepted/{job_id}", correlation_id=job_id, source="submission",
                            job_id=job_id, spec=c.JobSpec(tenant="bench", gpus=1), basis_seq=1)
        sch = c.JobScheduled(id=f"placement/JobScheduled/{job_id}/1", correlation_id=job_id, source="placement",
                             job_id=job_id, attempt=1, basis_seq=1,
                             allocations=[c.NodeAllocation(node=node, device_ids=["gpu0"])])
        sta = c.JobStarted(id=f"agent/JobStarted/{job_id}/1", correlation_id=job_id, source="agent", job_id=job_id,
                           attempt=1, node=node)
        suc = c.JobSucceeded(id=f"agent/JobSucceeded/{job_id}/1", correlation_id=job_id, source="agent",
                             job_id=job_id, attempt=1, node=node)
        batch.append(Outgoing(input_subject("bench", "submit"), encode(sub), job_id))
        for ev, svc in ((acc, "submission"), (sch, "placement"), (sta, "agent"), (suc, "agent")):
            batch.append(Outgoing(event_subject(svc, ev), encode(ev), ev.id))
    return batch


async def _publish_lifecycles(log: JetStreamLog, first_job: int, jobs: int) -> None:
    for start in range(first_job, first_job + jobs, 1_000):
        await log.publish_many(_lifecycle(start, min(1_000, first_job + jobs - start)))


async def _restart(url: str, name: str, core: Any, *, snapshots: bool) -> tuple[float, Any]:
    """Seconds for a fresh ``ServiceRunner`` to catch up (connection opened beforehand), and the runner,
    stopped, its connection closed."""
    from services.runtime.service import ServiceRunner

    runner_log = await JetStreamLog.open(url, name=name, create=False)
    runner = ServiceRunner(runner_log, core, snapshots=snapshots)
    started = time.perf_counter()
    await runner.start()
    elapsed = time.perf_counter() - started
    await runner.stop()
    await runner_log.close()
    return elapsed, runner


async def bench_replay(url: str, sizes: Sizes) -> dict[str, Any]:
    from services.scheduling.core import SchedulingCore

    log = await JetStreamLog.open(url, name="bench-replay")
    per_job = 5  # submitted, accepted, scheduled, started, succeeded
    await _publish_lifecycles(log, 0, sizes.replay_events // per_job)
    total = await log.last_seq()
    # raw ordered read, no decoding
    started = time.perf_counter()
    count = 0
    async for records in log.read(1):
        count += len(records)
    raw = count / (time.perf_counter() - started)
    # the scheduling service rebuilding its state from sequence 1
    core = SchedulingCore()
    rebuild, runner = await _restart(url, "bench-replay-scheduling", core, snapshots=False)
    # then from a snapshot of that state at the end of the log
    await log.save_snapshot(core.name, runner.state.seq, core.dump(runner.state))
    from_snapshot, again = await _restart(url, "bench-replay-scheduling", core, snapshots=True)
    await log.close()
    if again.stats.restored_from_seq != total:
        raise RuntimeError(f"restart did not use the snapshot at {total}: {again.stats}")
    return {"events": total, "events_per_s": round(total / rebuild), "raw_read_per_s": round(raw),
            "ratio": round(total / rebuild / raw, 3), "rebuild_s": round(rebuild, 2),
            "snapshot_restart_s": round(from_snapshot, 3)}


# ---------------------------------------------------------------------------- 4. latency


async def bench_latency(url_unused: str, sizes: Sizes) -> dict[str, Any]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="horizon-bench-up-") as tmp:
        up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", tmp, "--nodes", "16",
                               "--executor", "sim"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = up.stdout.readline().strip()  # type: ignore[union-attr]
            if not line.startswith("nats://"):
                raise RuntimeError("horizon up did not start")
            nc = await nats.connect(line)
            js = nc.jetstream()
            arrived: dict[str, float] = {}
            got = asyncio.Event()

            async def on_scheduled(msg: Any) -> None:
                arrived[msg.subject.rsplit(".", 1)[1]] = time.perf_counter()
                got.set()

            await nc.subscribe("horizon.evt.placement.JobScheduled.*", cb=on_scheduled)
            samples = []
            for i in range(sizes.latency_jobs):
                job_id = f"lat-{i:05d}"
                body = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(gpus=1),
                                      sim_runtime_s=0.001)
                got.clear()
                sent = time.perf_counter()
                await js.publish(input_subject("bench", "submit"), encode(body), headers={"Nats-Msg-Id": job_id})
                while job_id not in arrived:
                    await asyncio.wait_for(got.wait(), 10)
                    got.clear()
                samples.append((arrived[job_id] - sent) * 1000)
            await nc.close()
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(timeout=30)
    return {"p50_ms": round(percentile(samples, 50), 2), "p99_ms": round(percentile(samples, 99), 2),
            "max_ms": round(max(samples), 2), "jobs": len(samples)}


# ---------------------------------------------------------------------------- 5. memory


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memory_in_child(n: int) -> int:
    """Resident bytes that ``n`` queued jobs add to the scheduling state (run in a fresh process)."""
    code = f"""
import gc, os, sys
from events import catalogue as c
from services.runtime.log import Record
from services.scheduling.core import SchedulingCore
from services.bench.harness import _rss
core = SchedulingCore(); state = core.initial()
gc.collect(); before = _rss()
for i in range({n}):
    job_id = "m-%07d" % i
    ev = c.JobAccepted(id="submission/JobAccepted/" + job_id, job_id=job_id, source="submission",
                       spec=c.JobSpec(tenant="bench", account="a%d" % (i % 50), user="u%d" % (i % 500), gpus=1,
                                      command=["python", "train.py"], name=job_id))
    core.evolve(state, ev, Record(i + 1, "horizon.evt.submission.JobAccepted." + job_id, b"", 0.0))
gc.collect()
assert len(state.pending) == {n}
print(_rss() - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800, check=True)
    return int(out.stdout.strip())


async def bench_memory(url_unused: str, sizes: Sizes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes.memory_jobs:
        used = await asyncio.to_thread(_memory_in_child, n)
        out[f"bytes_per_queued_job_at_{n}"] = round(used / n)
    out["bytes_per_queued_job"] = out[f"bytes_per_queued_job_at_{sizes.memory_jobs[-1]}"]
    return out


# ---------------------------------------------------------------------------- 6. snapshot


async def _store_speed(log: JetStreamLog, megabytes: int) -> dict[str, float]:
    """MB/s writing and reading one blob: our snapshot store, and nats-py's object store."""
    from nats.js import api

    blob = os.urandom(megabytes << 20)
    started = time.perf_counter()
    await log.save_snapshot("bench-blob", 1, blob)
    written = time.perf_counter() - started
    started = time.perf_counter()
    loaded = await log.load_snapshot("bench-blob")
    read = time.perf_counter() - started
    assert loaded == (1, blob)
    store = await log.js.create_object_store("benchblob", config=api.ObjectStoreConfig(
        bucket="benchblob", storage=api.StorageType.FILE))
    started = time.perf_counter()
    await store.put("blob", blob)
    os_written = time.perf_counter() - started
    started = time.perf_counter()
    result = await store.get("blob")
    os_read = time.perf_counter() - started
    assert result.data == blob
    await log.js.delete_object_store("benchblob")
    return {"blob_mb": megabytes, "write_mb_per_s": round(megabytes / written), "read_mb_per_s": round(megabytes / read),
            "object_store_write_mb_per_s": round(megabytes / os_written),
            "object_store_read_mb_per_s": round(megabytes / os_read)}


async def bench_snapshot(url: str, sizes: Sizes) -> dict[str, Any]:
    """Restart time with and without snapshots as the log grows (the log is extended in place)."""
    from services.runtime.service import collector_paused
    from services.scheduling.core import SchedulingCore

    log = await JetStreamLog.open(url, name="bench-snapshot")
    core = SchedulingCore()
    tail = sizes.snapshot_tail
    rows: list[dict[str, Any]] = []
    jobs_done = 0
    for events in sizes.snapshot_events:
        # the log up to `events - tail`, a snapshot there (as a running service would have taken it) ...
        await _publish_lifecycles(log, jobs_done, (events - tail) // 5 - jobs_done)
        jobs_done = (events - tail) // 5
        _, runner = await _restart(url, "bench-snapshot-scheduling", core, snapshots=False)
        await log.save_snapshot(core.name, runner.state.seq, core.dump(runner.state))
        del runner
        # ... and `tail` records after it
        await _publish_lifecycles(log, jobs_done, events // 5 - jobs_done)
        jobs_done = events // 5
        total = await log.last_seq()
        full_s, _ = await _restart(url, "bench-snapshot-scheduling", core, snapshots=False)
        tail_s, tailed = await _restart(url, "bench-snapshot-scheduling", core, snapshots=True)
        if tailed.stats.restored_from_seq != total - tail:
            raise RuntimeError(f"restart did not use the snapshot at {total - tail}: {tailed.stats}")
        # a snapshot at the very end: dump, store and load timed on their own
        started = time.perf_counter()
        data = core.dump(tailed.state)
        dump_s = time.perf_counter() - started
        started = time.perf_counter()
        await log.save_snapshot(core.name, tailed.state.seq, data)
        save_s = time.perf_counter() - started
        started = time.perf_counter()
        loaded = await log.load_snapshot(core.name)
        fetch_s = time.perf_counter() - started
        assert loaded is not None
        started = time.perf_counter()
        with collector_paused():  # as the runner loads it
            core.load(loaded[1])
        load_s = time.perf_counter() - started
        del tailed, loaded
        end_s, at_end = await _restart(url, "bench-snapshot-scheduling", core, snapshots=True)
        if at_end.stats.restored_from_seq != total:
            raise RuntimeError(f"restart did not use the snapshot at {total}: {at_end.stats}")
        rows.append({"events": total, "jobs": jobs_done, "full_replay_s": round(full_s, 3),
                     "snapshot_plus_tail_s": round(tail_s, 3), "snapshot_at_end_s": round(end_s, 3),
                     "snapshot_bytes": len(data), "dump_s": round(dump_s, 3), "store_s": round(save_s, 3),
                     "fetch_s": round(fetch_s, 3), "load_s": round(load_s, 3)})
    store = await _store_speed(log, sizes.snapshot_blob_mb)
    await log.close()
    return {"tail": tail, "runs": rows, "store": store}


BENCHMARKS = {
    "intake": bench_intake,
    "scheduling": bench_scheduling,
    "replay": bench_replay,
    "latency": bench_latency,
    "memory": bench_memory,
    "snapshot": bench_snapshot,
}


async def run_benchmarks(names: list[str], sizes: Sizes, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    for name in names:
        if progress:
            progress(name)
        with tempfile.TemporaryDirectory(prefix=f"horizon-bench-{name}-") as tmp:
            server = NatsServer(store_dir=Path(tmp) / "js", port=0).start()
            try:
                results[name] = await BENCHMARKS[name](server.url, sizes)
            finally:
                server.stop()
    return results

