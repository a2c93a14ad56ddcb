"""Takeover: a leader service SIGKILLed under load, its hot standby taking over, measured.

    python -m services.front.bench.takeover [--service scheduling] [--ttl 10] [--jobs 2000] [--rounds 3]
        [--nodes 16] [--gpus-per-node 8] [--keep DIR] [--json]

1. **Parts.** A private nats-server; ``horizon service NAME --nats URL --lease-ttl TTL`` as
   separate processes for the five services and one agent (``--executor sim``), plus a second
   instance of ``--service``: a hot standby. Readiness by sd_notify, as under systemd.
2. **Rounds.** Each round submits ``--jobs`` one-GPU jobs (pipelined), waits until a fifth of them
   are scheduled, and SIGKILLs whichever instance of ``--service`` holds the lease (its pid is in
   the lease record in ``HORIZON_LEASES``). It then measures, from the kill: the time until
   another holder's lease record appears (*takeover*), and until the first decision of the
   service stored after the kill (*first decision*); the killed instance is started again and
   becomes the standby for the next round. The round ends when all its jobs are scheduled.
3. **Verdict.** The whole log is read: no decision stored twice (``services.front.bench.chaos``'s
   count: same id, same job attempt scheduled twice, same cycle twice, ...), and
   ``horizon check --nats URL --json`` passes.

A killed holder cannot release its lease: the standby waits for the TTL to run out, so the
takeover is expected between ``ttl - ttl/3`` (the holder had renewed just before dying) and
``ttl`` plus the standby's poll interval (at most 1 s) and the server's expiry lag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nats

from events import catalogue as c
from events.codec import DecodeError, decode, encode
from events.subjects import input_subject
from services.front.bench.chaos_parts import HORIZON, Part
from services.front.bench.chaos_verdict import duplicates, horizon_check
from services.runtime.jetstream import JetStreamLog
from services.runtime.lease import Lease
from services.runtime.log import Outgoing
from services.domain.protocol import Record
from services.runtime.natsserver import NatsServer

__all__ = ["run_takeover", "main"]

SERVICES = ("submission", "scheduling", "placement", "preemption", "inventory")


def _parts(service: str, ttl: int, url: str, work: Path, nodes: int, gpus: int) -> list[Part]:
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "notify").mkdir(parents=True, exist_ok=True)
    common = ["--nats", url, "--data-dir", str(work / "data"), "--executor", "sim", "--lease-ttl", str(ttl)]
    names = [*SERVICES, f"{service}#2"]
    parts = [Part(n, [*HORIZON, "service", n.split("#")[0], *common], work / "logs" / f"{n}.log", work / "notify")
             for n in names]
    parts.append(Part("agent", [*HORIZON, "service", "agent", *common, "--nodes", str(nodes), "--gpus-per-node",
                                str(gpus)], work / "logs" / "agent.log", work / "notify"))
    return parts


async def _until(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.01) -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)
    return time.monotonic() - t0


async def _ready(parts: list[Part], timeout_s: float = 120.0) -> None:
    await _until(lambda: all(p.poll_ready() or p.exited() is not None for p in parts), timeout_s, "readiness", 0.05)
    dead = [f"{p.name}: {p.tail()}" for p in parts if p.exited() is not None]
    if dead:
        raise RuntimeError(f"parts died during start-up: {dead}")


def _jobs(round_: int, count: int) -> list[Outgoing]:
    out = []
    for i in range(count):
        job = f"r{round_}-{i:05d}"
        event = c.JobSubmitted(job_id=job, tenant="acme", correlation_id=job, source="bench-takeover",
                               resources=c.ResourceRequest(cpus=1, memory="1Gi", gpus=1), time_limit_s=60.0,
                               sim_runtime_s=0.2)
        out.append(Outgoing(input_subject("acme", "submit"), encode(event), job))
    return out


async def run_takeover(service: str, ttl: int, jobs: int, rounds: int, nodes: int, gpus: int,
                       work: Path) -> dict[str, Any]:
    server = NatsServer(store_dir=work / "nats", port=0, log_file=work / "nats-server.log")
    server.start()
    parts = _parts(service, ttl, server.url, work, nodes, gpus)
    report: dict[str, Any] = {"service": service, "ttl_s": ttl, "jobs_per_round": jobs, "rounds": []}
    client = await JetStreamLog.open(server.url, name="bench-takeover")
    nc = await nats.connect(server.url)
    probe = Lease(nc, service, ttl_s=ttl, holder="bench-probe")
    scheduled: set[str] = set()
    decided_at: list[float] = []  # monotonic arrival of each decision of the service

    async def on_event(msg: Any) -> None:
        if msg.subject.startswith(f"horizon.evt.{service}."):
            decided_at.append(time.monotonic())
        if msg.subject.startswith("horizon.evt.placement.JobScheduled."):
            scheduled.add(msg.subject.rsplit(".", 1)[1])

    try:
        for part in parts:
            part.spawn()
            if part.name == service:  # the first instance leads: start it, and the rest, in order
                await _ready([part])
        await _ready(parts)
        await nc.subscribe("horizon.evt.>", cb=on_event)
        by_pid = {p.proc.pid: p for p in parts if p.proc is not None}
        for round_ in range(rounds):
            batch = _jobs(round_, jobs)
            names = {o.msg_id for o in batch}
            for i in range(0, len(batch), 500):
                await client.publish_many(batch[i:i + 500])
            await _until(lambda: len(names & scheduled) >= jobs // 5, 300, "a fifth of the round's jobs")
            _, record, _ = await probe.current()
            if record is None:
                raise RuntimeError(f"nobody holds the {service} lease")
            victim = by_pid[int(record.holder.split(":")[1])]
            killed_at = time.monotonic()
            victim.kill()
            while True:
                _, now, _ = await probe.current()
                if now is not None and now.holder != record.holder:
                    took = time.monotonic() - killed_at
                    break
                if time.monotonic() - killed_at > ttl * 3 + 10:
                    raise TimeoutError("no takeover")
                await asyncio.sleep(0.01)
            await _until(lambda: bool(decided_at) and decided_at[-1] > killed_at, ttl * 3 + 10, "a new decision")
            first = min(t for t in decided_at if t > killed_at) - killed_at
            victim.spawn()  # the next round's standby
            await _ready([victim])
            by_pid = {p.proc.pid: p for p in parts if p.proc is not None}
            await _until(lambda: names <= scheduled, 600, "every job of the round to be scheduled", 0.05)
            report["rounds"].append({"killed": f"{victim.name} (pid {record.holder.split(':')[1]})",
                                     "takeover_s": round(took, 3), "first_decision_s": round(first, 3),
                                     "all_scheduled_after_s": round(time.monotonic() - killed_at, 1)})
        records: list[Record] = []
        async for part_records in client.read(1):
            records.extend(part_records)
        report["records"] = len(records)
        report["duplicates"] = duplicates(records)
        verdicts = Counter()
        for r in records:
            if r.subject.startswith("horizon.evt.submission."):
                with contextlib.suppress(DecodeError):
                    event = decode(r.data)
                    if isinstance(event, (c.JobAccepted, c.JobRejected)):
                        verdicts[type(event).__name__] += 1
        report["verdicts"] = dict(verdicts)
    finally:
        for part in reversed(parts):
            part.stop()
        with contextlib.suppress(Exception):
            await nc.close()
        with contextlib.suppress(Exception):
            await client.close()
    try:
        report["check"] = horizon_check(server.url, 600)
    finally:
        server.stop()
    report["ok"] = (report["duplicates"]["total"] == 0 and report["check"].get("exit_code") == 0
                    and len(report["rounds"]) == rounds)
    return report


def render(report: dict[str, Any]) -> str:
    lines = [f"{report['service']}: lease ttl {report['ttl_s']} s, {report['jobs_per_round']} jobs per round"]
    for i, r in enumerate(report["rounds"], 1):
        lines.append(f"  round {i}: killed {r['killed']}; takeover after {r['takeover_s']:.2f} s, first decision "
                     f"after {r['first_decision_s']:.2f} s, all jobs scheduled {r['all_scheduled_after_s']:.1f} s "
                     f"after the kill")
    check = report.get("check", {})
    lines.append(f"  log: {report.get('records')} records, duplicate decisions {report['duplicates']['total']}, "
                 f"horizon check exit {check.get('exit_code')} ({check.get('problems')} problems)")
    lines.append("  OK" if report["ok"] else "  FAILED")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.front.bench.takeover", description=__doc__.split("\n")[0])
    parser.add_argument("--service", choices=SERVICES, default="scheduling")
    parser.add_argument("--ttl", type=int, default=10, help="lease TTL in whole seconds")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="work directory to keep (logs, store); default: a temporary one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.ttl < 1 or args.jobs < 5 or args.rounds < 1:
        parser.error("--ttl >= 1, --jobs >= 5 and --rounds >= 1")
    with tempfile.TemporaryDirectory(prefix="horizon-takeover-") as tmp:
        work = args.keep or Path(tmp)
        report = asyncio.run(run_takeover(args.service, args.ttl, args.jobs, args.rounds, args.nodes,
                                          args.gpus_per_node, work))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
