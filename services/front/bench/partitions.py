"""Benchmark ``partitions`` of ``horizon bench``: scheduling throughput with 1, 2 and 4 pairs of partition leaders.

The shape of ``bench_scheduling`` (services/front/bench/throughput.py): a backlog of accepted one-GPU jobs
on ``sizes.nodes`` nodes of 8 GPUs, instantaneous agents (every scheduled job succeeds at once),
and the jobs scheduled per second until the whole backlog has run. Here the scheduling and
placement services run as partition leaders (``horizon service scheduling --partition P``,
docs/scaling.md), each in its own process, in cases on the same machine in one run
(``Sizes.partition_cases``, default 1, 2 and 4):

* ``one``: one partition with every node and the whole backlog, one pair of leaders;
* ``two``: two partitions, each half the nodes and half the backlog, a pair of leaders each;
* ``four``: four partitions, a quarter each.

Each case gets a fresh nats-server, so none folds another's log. The rate is counted as
``bench_scheduling`` counts it (from the stream, ``watch.SchedulingWatch``), from the services'
start (``jobs_per_s``, ``ratio_2``, ``ratio_4``; ``ratio`` is ``ratio_2``, as before), and from the
first job scheduled (``steady_jobs_per_s``, ``steady_ratio_K``: start-up, which weighs on ``--quick``
with many processes starting on the same cores, left out). Besides the rate, each
partition's leaders' CPU time (``/proc/<pid>/stat`` utime + stime) per 1,000 of its jobs, counted
from the partition's first ``JobScheduled`` to its last (start-up and catch-up left out), and
over the whole run. And the whole case's CPU (``cpu_s``: the services, nats-server, this harness)
over its elapsed time, ``cores_busy``: one pair that keeps the machine's cores busy leaves nothing
for a second, so ``ceiling_ratio`` (cores / one pair's ``cores_busy``) bounds what ``ratio_K`` can be
on this machine unless a pair's cost per job falls.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from services.front.bench.processes import spawn, stop_processes
from services.front.bench.sizes import Sizes
from services.front.bench.stage import StageFailed, budget, close_within, status, wait_for
from services.front.bench.throughput import HEARTBEAT_TIMEOUT, publish_backlog, publish_nodes
from services.front.bench.watch import Agents, SchedulingWatch
from services.runtime.jetstream import JetStreamLog
from services.runtime.natsserver import NatsServer

__all__ = ["bench_partitions", "cpu_seconds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 is state
    return (int(fields[11]) + int(fields[12])) / _TICK


async def _case(sizes: Sizes, parts: int) -> dict[str, Any]:
    """One case on its own nats-server: ``parts`` partitions over the nodes and the backlog."""
    with tempfile.TemporaryDirectory(prefix=f"horizon-bench-partitions-{parts}-") as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", port=0).start()
        try:
            return await _run(server.url, sizes, parts, server.pid)
        finally:
            server.stop()


async def _run(url: str, sizes: Sizes, parts: int, server_pid: int | None) -> dict[str, Any]:
    stage = "partitions"
    names = [f"p{k}" for k in range(parts)]
    owner_of = {f"placement-{name}": name for name in names}
    log = await JetStreamLog.open(url, name="bench-partitions")
    every: list[subprocess.Popen[bytes]] = []
    procs: dict[str, dict[str, subprocess.Popen[bytes]]] = {}
    cpu_first: dict[str, dict[str, float]] = {}
    watch: SchedulingWatch | None = None
    agents: Agents | None = None

    def cpu_of(name: str) -> dict[str, float]:
        return {role: cpu_seconds(p.pid) for role, p in procs[name].items()}

    try:
        status(stage, f"{parts} partitions: publishing {sizes.nodes:,} nodes and a backlog of {sizes.backlog:,}")
        nodes = await publish_nodes(log, sizes.nodes, partitions=names)
        await publish_backlog(log, sizes.backlog, partitions=names)
        agents = await Agents(log, nodes).start(url)
        watch = await SchedulingWatch(log, agents).start(await log.last_seq() + 1)
        started = time.time()
        machine_first = (cpu_seconds(server_pid) if server_pid else 0.0, time.process_time())
        inventory = spawn(url, "inventory", "--heartbeat-timeout", HEARTBEAT_TIMEOUT)
        for name in names:
            procs[name] = {role: spawn(url, role, "--partition", name, label=f"{role}-{name}")
                           for role in ("scheduling", "placement")}
        every = [inventory, *(p for pair in procs.values() for p in pair.values())]
        w = watch

        def reached() -> bool:
            for owner, name in owner_of.items():  # each partition's CPU from its first JobScheduled
                if name not in cpu_first and owner in w.by_owner:
                    cpu_first[name] = cpu_of(name)
            return w.jobs >= sizes.backlog

        await wait_for(stage, f"{sizes.backlog:,} JobScheduled over {parts} partition(s)", reached,
                       budget(120, 0.002, sizes.backlog), lambda: w.progress(sizes.backlog))
        assert w.last is not None and w.first is not None
        ended = w.last
        cpu_end = {name: cpu_of(name) for name in names}
        inventory_cpu = cpu_seconds(inventory.pid)
        machine_end = (cpu_seconds(server_pid) if server_pid else 0.0, time.process_time())
    finally:
        stop_processes(every)
        if agents is not None:
            await agents.stop()
        if watch is not None:
            await watch.stop()
        await close_within(log.close())
    out: dict[str, Any] = {"partitions": parts, "nodes": sizes.nodes, "backlog": sizes.backlog,
                           "elapsed_s": round(ended - started, 2),
                           "jobs_per_s": round(sizes.backlog / (ended - started)),
                           # from the first JobScheduled of any partition: start-up and catch-up left out
                           "steady_jobs_per_s": round(sizes.backlog / max(1e-9, ended - w.first)),
                           "inventory_cpu_s": round(inventory_cpu, 2), "node_lost": w.node_lost, "by_partition": {}}
    # Every CPU second the case took, from the services' start to the last JobScheduled: the services,
    # nats-server and this harness (its instantaneous agents and the watch); ``cores_busy`` is that
    # over the elapsed time (two cores: at most 2.0)
    services_cpu = inventory_cpu + sum(v for pair in cpu_end.values() for v in pair.values())
    server_cpu, harness_cpu = (machine_end[0] - machine_first[0], machine_end[1] - machine_first[1])
    out["cpu_s"] = {"services": round(services_cpu, 2), "nats_server": round(server_cpu, 2),
                    "harness": round(harness_cpu, 2)}
    out["cores_busy"] = round((services_cpu + server_cpu + harness_cpu) / max(1e-9, ended - started), 2)
    for owner, name in owner_of.items():
        jobs = w.by_owner.get(owner, 0)
        first_cpu = cpu_first.get(name, {role: 0.0 for role in cpu_end[name]})
        steady = {role: cpu_end[name][role] - first_cpu[role] for role in cpu_end[name]}
        out["by_partition"][name] = {
            "jobs": jobs,
            "jobs_per_s": round(jobs / max(1e-9, w.owner_last.get(owner, started) - started)),
            "cycles": w.cycles_by_owner.get(owner, 0),
            "jobs_per_cycle": round(jobs / max(1, w.cycles_by_owner.get(owner, 0)), 1),
            "cpu_s": {role: round(v, 2) for role, v in cpu_end[name].items()},
            "cpu_s_per_1000_jobs": {role: round(v * 1000 / max(1, jobs), 3) for role, v in steady.items()},
        }
    return out


async def bench_partitions(url: str, sizes: Sizes) -> dict[str, Any]:
    """One, two and four pairs of leaders (``sizes.partition_cases``), same nodes and backlog, each on a
    fresh server (``url`` unused); ``ratio_K``: K pairs' jobs/s over one pair's, same run. A case that
    fails is ``{"error": why}``, its ratio ``None`` and ``error`` says which; the other cases still run."""
    cases: dict[int, dict[str, Any]] = {}
    for parts in sizes.partition_cases:
        try:
            cases[parts] = await _case(sizes, parts)
        except StageFailed as exc:
            cases[parts] = {"error": str(exc)}
    one = cases.get(1, {})
    out: dict[str, Any] = {_WORDS.get(parts, f"p{parts}"): case for parts, case in cases.items()}
    for parts, case in cases.items():
        if parts != 1:
            ok = "error" not in case and one and "error" not in one
            out[f"ratio_{parts}"] = round(case["jobs_per_s"] / one["jobs_per_s"], 3) if ok else None
            out[f"steady_ratio_{parts}"] = (round(case["steady_jobs_per_s"] / one["steady_jobs_per_s"], 3)
                                            if ok else None)
    if one and "error" not in one:
        # what K pairs could reach over one if each cost what one does: the cores one leaves idle
        out["ceiling_ratio"] = round((os.cpu_count() or 1) / max(0.01, one["cores_busy"]), 2)
    if 2 in cases:  # the keys of the 1-vs-2 benchmark, kept
        out["ratio"], out["steady_ratio"] = out["ratio_2"], out["steady_ratio_2"]
    out["cpus"] = os.cpu_count()
    errors = [case["error"] for case in cases.values() if "error" in case]
    if errors:
        out["error"] = "; ".join(errors)
    return out


_WORDS = {1: "one", 2: "two", 4: "four"}
