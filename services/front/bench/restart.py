"""Benchmarks 3 and 6 of ``horizon bench`` (services/front/bench/harness.py): replay speed, and restart time from snapshots as the log grows."""

from __future__ import annotations

import os
import time
from typing import Any


from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject, input_subject
from services.domain.envelope import decision_id
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.submission.relay import layout_marker
from services.front.bench.sizes import Sizes

__all__ = ["bench_replay", "bench_snapshot"]


def _lifecycle(first_job: int, jobs: int) -> list[Outgoing]:
    """Five records per job: submitted, accepted, scheduled, started, succeeded (one node, one GPU)."""
    node = "rn-00"
    batch: list[Outgoing] = []
    for i in range(first_job, first_job + jobs):
        job_id = f"r-{i:07d}"
        sub = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(gpus=1))
        acc = c.JobAccepted(id=decision_id("submission", c.JobAccepted, job_id), correlation_id=job_id, source="submission",
                            job_id=job_id, spec=c.JobSpec(tenant="bench", gpus=1), basis_seq=1)
        sch = c.JobScheduled(id=decision_id("placement", c.JobScheduled, job_id, 1), correlation_id=job_id, source="placement",
                             job_id=job_id, attempt=1, basis_seq=1,
                             allocations=[c.NodeAllocation(node=node, device_ids=["gpu0"])])
        sta = c.JobStarted(id=decision_id("agent", c.JobStarted, job_id, 1), correlation_id=job_id, source="agent", job_id=job_id,
                           attempt=1, node=node)
        suc = c.JobSucceeded(id=decision_id("agent", c.JobSucceeded, job_id, 1), correlation_id=job_id, source="agent",
                             job_id=job_id, attempt=1, node=node)
        batch.append(Outgoing(input_subject("bench", "submit"), encode(sub), job_id))
        for ev, svc in ((acc, "submission"), (sch, "placement"), (sta, "agent"), (suc, "agent")):
            batch.append(Outgoing(event_subject(svc, ev), encode(ev), ev.id))
    return batch

async def _publish_lifecycles(log: JetStreamLog, first_job: int, jobs: int) -> None:
    """The jobs' records, after the layout marker submission writes first on a new log (docs/architecture.md
    section 3): the log as ``horizon up`` writes it, which the services past the marker read with one filter."""
    if first_job == 0:
        marker = layout_marker(0)
        await log.publish(event_subject("submission", marker), encode(marker), msg_id=marker.id)
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
