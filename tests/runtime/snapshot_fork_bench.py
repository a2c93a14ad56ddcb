"""How long a snapshot dump holds the event loop, synchronous against forked, and what the fork costs in memory.

Not a test (pytest does not collect it); run as

    .venv/bin/python -m tests.runtime.snapshot_fork_bench --jobs 250000 --repeat 3

It builds a scheduling core's state with ``--jobs`` queued jobs (as ``horizon bench``'s memory stage
does), then in one event loop, alternating the two paths ``--repeat`` times each:

* a *fold* task keeps folding new ``JobAccepted`` records, 100 every 10 ms (``--fold-rate``, 10,000
  a second by default, about a loaded service's rate; the state grows by that much during a dump),
  as a service would while a dump runs, and a *probe* task sleeps 1 ms at a time and records the longest gap;
* the dump runs through ``SnapshotDumper`` (fork=False: the runner's synchronous dump as before;
  fork=True: the child), and the uploader only keeps the bytes.

Per dump it prints: ``blocked_ms``, the time the loop was blocked (``last_blocked_s``: the whole
dump when synchronous; the fork, the pipe reads and the copy to ``bytes`` when forked);
``dump_call_ms``, the call that starts it (forked: the fork alone); ``max_stall_ms``, the longest
stall the probe saw; the records folded while the dump ran; ``wall_ms``, until the bytes were in;
``child_cpu_ms``, the child's user and system CPU in all (``wait4``); ``encode_ms``, what the
pacer counted (the wall time of the synchronous dump, or of the child's encoding); and memory: ``parent_extra_rss_mb``, the parent's RSS at its
peak during the dump over its RSS before, and ``extra_pss_mb``, the extra physical memory of
parent and child together (the sum of their PSS at its peak over the parent's before: the pages
copy-on-write copied, by either, the child's buffers, and what the fold added), sampled every
10 ms from a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import threading
import time
from typing import Any

from events import catalogue as c
from services.domain.protocol import Record
from services.runtime.dumper import SnapshotDumper
from services.runtime.service import long_lived_heap
from services.runtime.snapshots import DumpPacer, SnapshotUploader
from services.scheduling.core import SchedulingCore


def accepted(i: int) -> tuple[c.JobAccepted, Record]:
    job_id = "m-%07d" % i
    event = c.JobAccepted(id="submission/JobAccepted/" + job_id, job_id=job_id, source="submission",
                          spec=c.JobSpec(tenant="bench", account="a%d" % (i % 50), user="u%d" % (i % 500), gpus=1,
                                         command=("python", "train.py"), name=job_id))
    return event, Record(i + 1, "horizon.evt.submission.JobAccepted." + job_id, b"", 0.0)


def rollup(pid: int) -> dict[str, int]:
    """Rss and Pss of ``pid`` in bytes (0 if it is gone)."""
    out = {"Rss": 0, "Pss": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in out:
                    out[key] = int(rest.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


class Sampler(threading.Thread):
    """Peak parent RSS and peak parent+child PSS while a dump runs."""

    def __init__(self, dumper: SnapshotDumper) -> None:
        super().__init__(daemon=True)
        self.dumper = dumper
        self.stop = threading.Event()
        self.rss = self.pss = 0

    def run(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            mine = rollup(me)
            child = self.dumper.last_child_pid
            running = self.dumper._task is not None and not self.dumper._task.done()
            other = rollup(child) if child and running else {"Pss": 0}
            self.rss = max(self.rss, mine["Rss"])
            self.pss = max(self.pss, mine["Pss"] + other["Pss"])
            time.sleep(0.01)


async def one_dump(core: SchedulingCore, state: Any, fork: bool, next_job: list[int],
                   fold_rate: int) -> dict[str, float]:
    kept: list[bytes] = []

    async def keep(name: str, seq: int, data: bytes) -> None:
        kept.append(data)

    dumper = SnapshotDumper("scheduling", core.dump, SnapshotUploader("scheduling", keep), pacer=DumpPacer(rest=0),
                            fork=fork)
    gc.collect()
    before = rollup(os.getpid())
    dumping = asyncio.Event()
    stall = [0.0]
    folded = [0]

    async def probe() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            if dumping.is_set():
                stall[0] = max(stall[0], now - last)
            last = now

    async def fold() -> None:
        while True:
            for _ in range(100):
                event, record = accepted(next_job[0])
                next_job[0] += 1
                core.evolve(state, event, record)
                if dumping.is_set():
                    folded[0] += 1
            await asyncio.sleep(100 / fold_rate if fold_rate else 3600)

    tasks = [asyncio.create_task(probe()), asyncio.create_task(fold())]
    await asyncio.sleep(0.05)
    sampler = Sampler(dumper)
    sampler.start()
    started = time.perf_counter()
    cpu = time.process_time()
    dumping.set()
    dumper.dump(state, state.seq)
    fork_s = time.perf_counter() - started  # the fork alone (or the whole dump when synchronous)
    await dumper.flush()
    await dumper.uploader.flush()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu  # the parent's, while the dump ran (its fold too, and the sampler)
    dumping.clear()
    sampler.stop.set()
    sampler.join()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert len(kept) == 1 and dumper.failures == 0
    return {"blocked_ms": dumper.last_blocked_s * 1000, "dump_call_ms": fork_s * 1000,
            "max_stall_ms": stall[0] * 1000, "wall_ms": wall * 1000,
            "records_folded_meanwhile": folded[0], "encode_ms": dumper.pacer.last_s * 1000,
            "child_cpu_ms": dumper.last_child_cpu_s * 1000, "parent_cpu_ms": cpu * 1000,
            "bytes": len(kept[0]), "parent_extra_rss_mb": (sampler.rss - before["Rss"]) / 2**20,
            "extra_pss_mb": (sampler.pss - before["Pss"]) / 2**20}


async def main(jobs: int, repeat: int, fold_rate: int) -> None:
    long_lived_heap()  # as a runner does
    core = SchedulingCore()
    state = core.initial()
    started = time.perf_counter()
    for i in range(jobs):
        event, record = accepted(i)
        core.evolve(state, event, record)
    gc.collect()
    next_job = [jobs]
    print(f"state: {jobs:,} queued jobs in {time.perf_counter() - started:.1f} s, folding {fold_rate:,} records/s "
          f"during dumps, parent RSS {rollup(os.getpid())['Rss'] / 2**20:,.0f} MB")
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(repeat):
        for fork in (False, True):
            row = await one_dump(core, state, fork, next_job, fold_rate)
            results[fork].append(row)
            print(("forked" if fork else "sync  "), {k: round(v, 1) for k, v in row.items()})
    print("median of", repeat)
    for key in results[False][0]:
        sync = statistics.median(r[key] for r in results[False])
        forked = statistics.median(r[key] for r in results[True])
        ratio = f"{sync / forked:,.1f}x" if forked else "-"
        print(f"  {key:26} sync {sync:12,.1f}   forked {forked:12,.1f}   sync/forked {ratio}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fold-rate", type=int, default=10_000, help="records a second folded meanwhile (0: none)")
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.repeat, args.fold_rate))
