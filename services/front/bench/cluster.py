"""A workload through Horizon on a 3-node JetStream cluster while servers are SIGKILLed and brought back.

    python -m services.front.bench.cluster [--jobs 300] [--faults leader,busiest] [--down 5] [--runtime 1]
        [--nodes 4] [--gpus-per-node 8] [--rate 50] [--json]

1. Start the cluster from ``deploy/nats/cluster/n*.conf`` (``NatsCluster``: free loopback ports,
   its own stores) and the five services, the projections and an agent with simulated nodes in
   this process, each on its own connection given all three URLs, the stream with 3 replicas.
2. Submit ``--jobs`` simulated jobs at ``--rate`` per second (1 or 2 GPUs, ``--runtime`` s each).
3. Once 30% are submitted, for each fault in turn: SIGKILL a server by its PID (``leader``: the
   stream's leader; ``busiest``: the one most parts are connected to; or a server name), leave it
   down ``--down`` seconds while the workload goes on, start it again and wait until its replica
   of the stream is current.
4. Wait until every job has ended, then check the whole log as ``horizon check`` does (invariants
   and the replay of every decision) and report: jobs ended and how, the longest wait for a
   submission's acknowledgement, the longest gap between job endings, per fault which parts
   were connected to the victim and whether they reconnected on their own, how long a new
   stream leader and the catch-up took.

``run_workload`` is also what ``tests/domain/test_cluster.py`` runs, smaller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode, encode
from events.subjects import STREAM, input_subject
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog, StreamSettings
from services.runtime.log import Outgoing
from services.runtime.natscluster import NatsCluster
from services.front.host.stack import Stack
from services.domain.jobs import TERMINAL, JobTable

__all__ = ["ClusterRun", "run_workload", "main"]


@dataclass(frozen=True)
class ClusterRun:
    jobs: int = 300
    nodes: int = 4
    gpus_per_node: int = 8
    runtime_s: float = 1.0
    rate: float = 50.0  # submissions per second
    faults: tuple[str, ...] = ("leader",)
    kill_at: float = 0.3  # fraction of the jobs submitted before the first fault
    down_s: float = 5.0
    between_s: float = 3.0  # after a server is back and current, before the next fault
    timeout_s: float = 600.0


@dataclass
class _Progress:
    table: JobTable = field(default_factory=JobTable)
    next_seq: int = 1
    ended: dict[str, float] = field(default_factory=dict)  # job -> log time of its ending
    submitted: int = 0
    longest_ack_s: float = 0.0


def _job(i: int, cfg: ClusterRun) -> c.JobSubmitted:
    job_id = f"cl-{i:05d}"
    return c.JobSubmitted(job_id=job_id, tenant="acme", correlation_id=job_id, source="bench-cluster",
                          resources=c.ResourceRequest(cpus=1, memory="1Gi", gpus=1 + i % 2),
                          sim_runtime_s=cfg.runtime_s)


async def _submit(client: JetStreamLog, cfg: ClusterRun, progress: _Progress) -> None:
    """Batches of 10 at ``cfg.rate``; a batch whose acks do not come is re-sent under the same msg ids."""
    per_batch = 10
    start = time.monotonic()
    for first in range(0, cfg.jobs, per_batch):
        batch = [_job(i, cfg) for i in range(first, min(cfg.jobs, first + per_batch))]
        items = [Outgoing(input_subject("acme", "submit"), encode(j), j.job_id) for j in batch]
        t0 = time.monotonic()
        await client.publish_many(items)
        progress.longest_ack_s = max(progress.longest_ack_s, time.monotonic() - t0)
        progress.submitted += len(batch)
        due = start + progress.submitted / cfg.rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))


async def _follow(client: JetStreamLog, progress: _Progress) -> None:
    """Fold the log as it grows (fresh reads from the next sequence: a reader's server may die)."""
    while True:
        try:
            async for batch in client.read(progress.next_seq):
                for record in batch:
                    progress.next_seq = record.seq + 1
                    try:
                        event = decode(record.data)
                    except DecodeError:
                        continue
                    tr = progress.table.apply(event, record.seq, record.time)
                    if tr is not None and tr.after in TERMINAL:
                        progress.ended.setdefault(tr.job.job_id, record.time)
        except Exception:  # noqa: BLE001 - the server this read used went away: read again
            pass
        await asyncio.sleep(0.5)


def _port(nc: Any) -> int | None:
    url = nc.connected_url
    return url.port if url is not None and nc.is_connected else None


def _choose(cluster: NatsCluster, stack: Stack, victim: str) -> int:
    if victim == "leader":
        leader = cluster.stream_leader(STREAM)
        if leader is None:
            raise RuntimeError("the stream has no leader to kill")
        return cluster.index_of(leader)
    if victim == "busiest":
        ports = [_port(p.log.nc) for p in stack.parts.values()]
        counts = [sum(1 for p in ports if p == m.client_port) for m in cluster.members]
        return max(range(len(counts)), key=lambda i: (counts[i], -i))
    return cluster.index_of(victim)


async def _fault(cluster: NatsCluster, stack: Stack, cfg: ClusterRun, victim: str) -> dict[str, Any]:
    """SIGKILL one server; wait ``down_s``, and until another server leads the stream; start it
    again; wait until its replica is current (or it leads again)."""
    index = _choose(cluster, stack, victim)
    member = cluster.members[index]
    on_victim = {name: p.log.nc.stats["reconnects"] for name, p in stack.parts.items()
                 if _port(p.log.nc) == member.client_port}
    was_leader = cluster.stream_leader(STREAM) == member.name
    meta_before = cluster.meta_leader()
    t0 = time.monotonic()
    pid = cluster.kill(index)
    new_leader_s = None
    while time.monotonic() - t0 < cfg.down_s or new_leader_s is None:
        leader = await asyncio.to_thread(cluster.stream_leader, STREAM)
        if new_leader_s is None and leader is not None and leader != member.name:
            new_leader_s = time.monotonic() - t0
        if time.monotonic() - t0 > cfg.down_s + 60:
            break
        await asyncio.sleep(0.1)
    await asyncio.to_thread(cluster.restart, index)
    t1 = time.monotonic()
    caught_up_s = None
    while time.monotonic() - t1 < 120:
        leader = cluster.stream_leader(STREAM)
        state = cluster.stream_state(cluster.index_of(leader), STREAM) if leader else None
        peer = [r for r in (state or {}).get("replicas", []) if r.get("name") == member.name]
        if leader == member.name or (peer and peer[0].get("current")):
            caught_up_s = time.monotonic() - t1
            break
        await asyncio.sleep(0.1)
    reconnected = {}
    for name, before in on_victim.items():
        nc = stack.parts[name].log.nc
        for _ in range(100):  # the parts moved while it was down; give a straggler 10 s
            if nc.stats["reconnects"] > before and nc.is_connected:
                break
            await asyncio.sleep(0.1)
        reconnected[name] = nc.stats["reconnects"] > before and nc.is_connected
    return {
        "victim": member.name, "pid": pid, "was_stream_leader": was_leader,
        "was_meta_leader": meta_before == member.name, "down_s": round(t1 - t0, 2),
        "new_stream_leader_after_s": round(new_leader_s, 2) if new_leader_s is not None and was_leader else None,
        "stream_leader_after": cluster.stream_leader(STREAM), "caught_up_after_restart_s":
            None if caught_up_s is None else round(caught_up_s, 2),
        "parts_on_victim": sorted(on_victim), "reconnected": reconnected,
    }


async def _faults(cluster: NatsCluster, stack: Stack, cfg: ClusterRun, progress: _Progress) -> list[dict[str, Any]]:
    while progress.submitted < cfg.kill_at * cfg.jobs:
        await asyncio.sleep(0.05)
    out = []
    for i, victim in enumerate(cfg.faults):
        if i:
            await asyncio.sleep(cfg.between_s)
        out.append(await _fault(cluster, stack, cfg, victim))
    return out


def _longest_gap(times: list[float]) -> float:
    times = sorted(times)
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


async def run_workload(cluster: NatsCluster, data_dir: Path, cfg: ClusterRun) -> dict[str, Any]:
    """Phases 1-4 of the module docstring on a started cluster; the figures as a dict."""
    settings = StreamSettings(replicas=3)
    stack = Stack(cluster.url, data_dir, nodes=local_nodes(cfg.nodes, gpus_per_node=cfg.gpus_per_node),
                  executor="sim", settings=settings)
    t_start = time.monotonic()
    client = await JetStreamLog.open(cluster.url, name="horizon-bench-cluster", settings=settings)
    progress = _Progress()
    follower = asyncio.create_task(_follow(client, progress))
    try:
        await stack.start()
        info = await client.js.stream_info(STREAM)
        replicas = 1 + len(info.cluster.replicas or []) if info.cluster else 1
        submitter = asyncio.create_task(_submit(client, cfg, progress))
        faults = asyncio.create_task(_faults(cluster, stack, cfg, progress))
        deadline = time.monotonic() + cfg.timeout_s
        while len(progress.ended) < cfg.jobs or not faults.done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(progress.ended)} of {cfg.jobs} jobs ended within {cfg.timeout_s:.0f} s")
            for task in (submitter, faults):
                if task.done() and task.exception():
                    raise task.exception()  # type: ignore[misc]
            await asyncio.sleep(0.2)
        await submitter
        fault_reports = await faults
        wall_s = time.monotonic() - t_start
        failed = stack.failed()
        connected = {name: bool(p.log.nc.is_connected) for name, p in stack.parts.items()}
    finally:
        follower.cancel()
        await stack.stop()
        await client.close()
    states: dict[str, int] = {}
    for job in progress.table.jobs.values():
        states[job.state.value] = states.get(job.state.value, 0) + 1
    verdict = await asyncio.to_thread(_check, cluster.url)
    return {
        "config": {**asdict(cfg), "faults": list(cfg.faults)}, "stream_replicas": replicas,
        "wall_s": round(wall_s, 1), "jobs": len(progress.table.jobs), "states": states,
        "longest_submit_ack_s": round(progress.longest_ack_s, 2),
        "longest_gap_between_endings_s": round(_longest_gap(list(progress.ended.values())), 2),
        "faults": fault_reports, "parts_failed": failed, "parts_connected": connected, "check": verdict,
    }


def _check(url: str) -> dict[str, Any]:
    """``horizon check`` on the whole log: invariants, endings, and every decision replayed."""
    from services.front.audit.config import AuditConfig, audit_cores
    from services.front.audit.log import read_log
    from services.front.host.check import check_log
    from services.runtime.replay import audit

    records = asyncio.run(read_log(url))
    report = check_log(records)
    problems = list(report.problems)
    result = audit(records, audit_cores(AuditConfig(), records))
    return {"records": report.records, "problems": problems, "decisions": result.decisions,
            "reproduced": result.reproduced, "mismatches": len(result.mismatches)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.front.bench.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--faults", default="leader,busiest",
                        help="servers to SIGKILL in turn: leader, busiest or a server name (horizon-n1...)")
    parser.add_argument("--down", type=float, default=5.0, help="seconds each killed server stays down")
    parser.add_argument("--runtime", type=float, default=1.0, help="seconds each simulated job runs")
    parser.add_argument("--rate", type=float, default=50.0, help="submissions per second")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("horizon.reader").setLevel(logging.INFO)  # consumers recreated after a server loss
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    cfg = ClusterRun(jobs=args.jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node, runtime_s=args.runtime,
                     rate=args.rate, faults=faults, down_s=args.down)
    with tempfile.TemporaryDirectory(prefix="horizon-cluster-") as tmp:
        with NatsCluster(Path(tmp) / "cluster") as cluster:
            try:
                report = asyncio.run(run_workload(cluster, Path(tmp) / "data", cfg))
            except (KeyError, RuntimeError, TimeoutError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
    ok = (report["states"] == {"SUCCEEDED": cfg.jobs} and not report["check"]["problems"]
          and not report["check"]["mismatches"] and not report["parts_failed"]
          and all(report["parts_connected"].values())
          and all(all(f["reconnected"].values()) for f in report["faults"]))
    report["ok"] = ok
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        ck = report["check"]
        print(f"{report['jobs']} jobs in {report['wall_s']} s on {report['stream_replicas']} replicas: {report['states']}")
        print(f"longest submit ack {report['longest_submit_ack_s']} s, longest gap between job endings "
              f"{report['longest_gap_between_endings_s']} s")
        for f in report["faults"]:
            elected = (f"new stream leader after {f['new_stream_leader_after_s']} s, "
                       if f["was_stream_leader"] else "")
            print(f"killed {f['victim']} (pid {f['pid']}, stream leader: {f['was_stream_leader']}, meta leader: "
                  f"{f['was_meta_leader']}) for {f['down_s']} s: {elected}replica current "
                  f"{f['caught_up_after_restart_s']} s after restart, stream leader then {f['stream_leader_after']}; "
                  f"parts on it {f['parts_on_victim']}, reconnected {f['reconnected']}")
        print(f"check: {ck['records']} records, {len(ck['problems'])} problems, decisions {ck['decisions']}, "
              f"reproduced {ck['reproduced']}, mismatches {ck['mismatches']}")
        print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
