"""Benchmark 4 of ``horizon bench`` (services/front/bench/harness.py): one job at a time on an idle stack, submit to ``JobScheduled``.

With each job in flight alone, the stack is busy for the job and idle otherwise, so the latency
follows the CPU time ``horizon up`` spends per job (``cpu_ms_per_job``: its user + system time over
the jobs, ``/proc/<pid>/stat``, all of its threads; nats-server is a process of its own and not in
it): the figure a change to the code moves. The machine's speed moves it too, so two versions are
compared by alternating runs (docs/benchmarks.md section 2).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import nats

from events import catalogue as c
from events.codec import encode
from events.subjects import input_subject
from services.front.sim.metrics import percentile
from services.front.bench.hops import latency_hops
from services.front.bench.partitions import cpu_seconds
from services.front.bench.processes import HORIZON, profile
from services.front.bench.sizes import Sizes
from services.front.bench.stage import StageFailed, budget, close_within
from services.runtime.jetstream import JetStreamLog

__all__ = ["bench_latency"]


async def bench_latency(url_unused: str, sizes: Sizes) -> dict[str, Any]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="horizon-bench-up-") as tmp:
        up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", tmp, "--nodes", "16",
                               "--executor", "sim"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        profile(up, "up")
        try:
            try:  # in a thread: a blocking read would hold the event loop and with it every deadline
                line = (await asyncio.wait_for(asyncio.to_thread(up.stdout.readline), budget(60))).strip()  # type: ignore[union-attr]
            except asyncio.TimeoutError:
                raise StageFailed(f"latency: horizon up printed no URL within {budget(60):.0f} s") from None
            if not line.startswith("nats://"):
                raise StageFailed(f"latency: horizon up did not start (exit code {up.poll()}): {line!r}")
            nc = await nats.connect(line)
            js = nc.jetstream()
            arrived: dict[str, float] = {}
            got = asyncio.Event()

            async def on_scheduled(msg: Any) -> None:
                arrived[msg.subject.rsplit(".", 1)[1]] = time.perf_counter()
                got.set()

            await nc.subscribe("horizon.evt.placement.JobScheduled.*", cb=on_scheduled)
            samples = []
            cpu_before = cpu_seconds(up.pid)
            for i in range(sizes.latency_jobs):
                job_id = f"lat-{i:05d}"
                body = c.JobSubmitted(job_id=job_id, tenant="bench", resources=c.ResourceRequest(gpus=1),
                                      sim_runtime_s=0.001)
                got.clear()
                sent = time.perf_counter()
                await js.publish(input_subject("bench", "submit"), encode(body), headers={"Nats-Msg-Id": job_id})
                while job_id not in arrived:
                    try:
                        await asyncio.wait_for(got.wait(), budget(10))
                    except asyncio.TimeoutError:
                        raise StageFailed(f"latency: no JobScheduled for {job_id} (job {i + 1} of "
                                          f"{sizes.latency_jobs}) within {budget(10):.0f} s of its submission; "
                                          f"horizon up {'alive' if up.poll() is None else f'exited with {up.poll()}'}") from None
                    got.clear()
                samples.append((arrived[job_id] - sent) * 1000)
            cpu_ms_per_job = (cpu_seconds(up.pid) - cpu_before) * 1000 / len(samples)
            await close_within(nc.close())
            log = await JetStreamLog.open(line, name="bench-latency", create=False)
            try:
                hops = await latency_hops(log, 1, "lat-")
            finally:
                await close_within(log.close())
        finally:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()  # by its PID
                up.wait()
    # p99.9 is a nearest rank: with the full run's 2,000 jobs, the second slowest
    return {"p50_ms": round(percentile(samples, 50), 2), "p99_ms": round(percentile(samples, 99), 2),
            "p999_ms": round(percentile(samples, 99.9), 2), "max_ms": round(max(samples), 2), "jobs": len(samples),
            "cpu_ms_per_job": round(cpu_ms_per_job, 2), "hops": hops}
