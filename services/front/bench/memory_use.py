"""Benchmark 5 of ``horizon bench`` (services/front/bench/harness.py): resident bytes per queued job in the scheduling state."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any


from services.front.bench.sizes import Sizes
from services.front.bench.stage import budget

__all__ = ["bench_memory"]


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def _memory_in_child(n: int, timeout_s: float = 1800) -> int:
    """Resident bytes that ``n`` queued jobs add to the scheduling state (run in a fresh process)."""
    code = f"""
import gc, os, sys
from events import catalogue as c
from services.domain.protocol import Record
from services.scheduling.core import SchedulingCore
from services.front.bench.memory_use import _rss
core = SchedulingCore(); state = core.initial()
gc.collect(); before = _rss()
for i in range({n}):
    job_id = "m-%07d" % i
    ev = c.JobAccepted(id="submission/JobAccepted/" + job_id, job_id=job_id, source="submission",
                       spec=c.JobSpec(tenant="bench", account="a%d" % (i % 50), user="u%d" % (i % 500), gpus=1,
                                      command=("python", "train.py"), name=job_id))
    core.evolve(state, ev, Record(i + 1, "horizon.evt.submission.JobAccepted." + job_id, b"", 0.0))
gc.collect()
assert len(state.pending) == {n}
print(_rss() - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s, check=True)
    return int(out.stdout.strip())

async def bench_memory(url_unused: str, sizes: Sizes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes.memory_jobs:
        used = await asyncio.to_thread(_memory_in_child, n, budget(60, 100e-6, n))
        out[f"bytes_per_queued_job_at_{n}"] = round(used / n)
    out["bytes_per_queued_job"] = out[f"bytes_per_queued_job_at_{sizes.memory_jobs[-1]}"]
    return out
