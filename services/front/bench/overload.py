"""Overload: a burst of submissions as fast as one client can push them, into the real services.

    python -m services.front.bench.overload [--jobs 200000] [--nodes 0] [--settle-timeout 120] [--json]

1. **Server.** The bundled nats-server on a free loopback port with a temporary store; the
   streams are created by the client.
2. **Services.** The five services as ``horizon service NAME --nats URL`` processes under the
   ``Supervisor`` (own process groups, readiness by sd_notify, stopped by PID). With ``--nodes N``
   a sim agent hosts N nodes and the jobs run ``--runtime`` seconds; with 0 (the default) there
   are no nodes and every accepted job stays pending, so the queue holds the whole burst.
3. **Burst.** ``--jobs`` ``JobSubmitted`` on ``horizon.in.bench.submit`` (job id = msg id =
   ``ov-<i>``), pipelined with ``publish_many`` (core publish with reply inboxes, 4,096 in flight,
   unacknowledged ones re-published under the same msg id) in chunks of 10,000: the publish
   rate is what one Python client pushes.
4. **Drain.** A follower of ``horizon.evt.submission.>`` counts verdicts (``JobAccepted`` or
   ``JobRejected``) per job id until every job has one: the drain time, from the first publish.
5. **Rest.** Then until no service uses CPU for 2 s (or ``--settle-timeout``), so every service
   has folded the burst and what it decided from it.
6. **Accounting.** Lost: jobs without a verdict. Duplicated: jobs with more than one verdict,
   inputs stored twice (the stream's count on the input subject against ``--jobs``), PubAcks
   saying duplicate. Restarts: services that died and were restarted by the supervisor.
7. **Memory.** Every 0.25 s each service's RSS (``/proc/<pid>/status`` ``VmRSS``): its peak
   while the burst drains, its value at rest, and its ``VmHWM`` (the kernel's peak) at the end.

Why memory stays bounded while the burst is larger than any service can take at once: a service
reads the log with ``PullReader`` (``services/runtime/pullreader.py``), which asks for 1,000
records at a time, two requests outstanding, and stops asking while 20,000 records wait in its
buffer; the server keeps the rest. So what a service holds beyond its state is at most ~22,000
records, whatever the backlog, and the publisher holds at most its window. The state itself
grows with the jobs it keeps (a pending job is held by every service); compare the figures of a
50,000 and a 200,000 burst, per job, and the peak during the burst against the value at rest.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.codec import encode
from events.subjects import STREAM
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.domain.protocol import Record
from services.runtime.natsserver import NatsServer
from services.front.registry import SERVICES
from services.front.host.supervisor import ChildSpec, Supervisor

__all__ = ["OverloadResult", "run_overload", "main"]

SUBJECT = "horizon.in.bench.submit"
CHUNK = 10_000
SAMPLE_S = 0.25


@dataclass
class PartMemory:
    pid: int
    peak_burst_mb: float = 0.0  # highest VmRSS sampled from the first publish to the last verdict
    rest_mb: float = 0.0  # VmRSS once every service rests
    hwm_mb: float = 0.0  # VmHWM at the end: the kernel's peak over the process's life


@dataclass
class OverloadResult:
    jobs: int
    nodes: int
    publish_s: float = 0.0
    publish_rate: float = 0.0
    drain_s: float = 0.0  # first publish -> every job has its verdict
    rest_s: float = 0.0  # first publish -> every service rests (or the settle timeout)
    rested: bool = False
    accepted: int = 0
    rejected: int = 0
    lost: int = 0
    duplicated_verdicts: int = 0
    inputs_stored: int = 0
    duplicate_acks: int = 0
    restarts: dict[str, int] = field(default_factory=dict)
    log_records: int = 0
    memory: dict[str, PartMemory] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicated_verdicts == 0 and self.inputs_stored == self.jobs
                and self.duplicate_acks == 0 and not any(self.restarts.values()))


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0


def _submission(i: int, runtime_s: float | None) -> Outgoing:
    job_id = f"ov-{i}"
    event = c.JobSubmitted(id=job_id, job_id=job_id, tenant="bench", correlation_id=job_id, source="overload",
                           command=["true"], resources=c.ResourceRequest(cpus=1, memory="1Gi"),
                           sim_runtime_s=runtime_s)
    return Outgoing(SUBJECT, encode(event), job_id)


async def run_overload(jobs: int, *, nodes: int = 0, runtime_s: float = 0.05, settle_timeout_s: float = 120.0,
                       drain_timeout_s: float = 1800.0, work_dir: Path | None = None,
                       progress: Any = None) -> OverloadResult:
    """One burst of ``jobs`` submissions through a fresh server and fresh service processes."""
    say = progress or (lambda text: None)
    result = OverloadResult(jobs=jobs, nodes=nodes)
    tmp = tempfile.TemporaryDirectory(prefix="horizon-overload-") if work_dir is None else None
    root = Path(tmp.name) if tmp is not None else Path(work_dir)  # type: ignore[arg-type]
    server = NatsServer(store_dir=root / "nats", port=0)
    server.start()
    supervisor: Supervisor | None = None
    client: JetStreamLog | None = None
    try:
        client = await JetStreamLog.open(server.url, name="overload-client")
        base = [sys.executable, "-m", "services.front.cli.main", "service"]
        where = ["--nats", server.url, "--data-dir", str(root / "data")]
        specs = [ChildSpec(name, [*base, name, *where]) for name in SERVICES]
        if nodes:
            specs.append(ChildSpec("agent", [*base, "agent", *where, "--executor", "sim", "--nodes", str(nodes)]))
        supervisor = Supervisor(specs, root / "logs", stable_s=1e9)
        supervisor.start()
        waiting = await asyncio.to_thread(supervisor.wait_ready, 120.0)
        if waiting:
            raise RuntimeError(f"not ready after 120 s: {', '.join(waiting)} (see {root / 'logs'})")
        pids = supervisor.pids()
        result.memory = {name: PartMemory(pid) for name, pid in pids.items()}
        say(f"server {server.url}, services ready: {pids}")

        # The verdicts, counted per job by a follower of submission's output.
        verdicts: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        all_in = asyncio.Event()

        async def on_batch(batch: list[Record]) -> None:
            for record in batch:
                parts = record.subject.split(".", 4)  # horizon.evt.submission.<Type>.<job>
                if len(parts) == 5 and parts[3] in ("JobAccepted", "JobRejected") and parts[4].startswith("ov-"):
                    verdicts[parts[4]] += 1
                    kinds[parts[3]] += 1
            if len(verdicts) >= jobs:
                all_in.set()

        follower = await client.follow(on_batch, subjects=("horizon.evt.submission.>",))

        # Memory (and the supervisor's watch) every SAMPLE_S while the burst drains and the services settle.
        burst = True
        stop_sampling = asyncio.Event()

        async def sample() -> None:
            while not stop_sampling.is_set():
                supervisor.poll()  # type: ignore[union-attr]
                for mem in result.memory.values():
                    rss = _status_kb(mem.pid, "VmRSS") / 1024
                    if burst:
                        mem.peak_burst_mb = max(mem.peak_burst_mb, rss)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop_sampling.wait(), SAMPLE_S)

        sampler = asyncio.create_task(sample())
        items_per_chunk = [(i, min(i + CHUNK, jobs)) for i in range(0, jobs, CHUNK)]
        t0 = time.monotonic()
        for lo, hi in items_per_chunk:
            acks = await client.publish_many([_submission(i, runtime_s if nodes else None) for i in range(lo, hi)])
            result.duplicate_acks += sum(1 for a in acks if a.duplicate)
        result.publish_s = time.monotonic() - t0
        result.publish_rate = jobs / result.publish_s
        say(f"published {jobs:,} in {result.publish_s:.1f} s ({result.publish_rate:,.0f}/s)")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(all_in.wait(), drain_timeout_s)
        result.drain_s = time.monotonic() - t0
        burst = False
        say(f"{len(verdicts):,} of {jobs:,} jobs have their verdict after {result.drain_s:.1f} s")

        # Rest: no service uses CPU for 2 s.
        quiet_since, last = time.monotonic(), {n: _cpu_ticks(m.pid) for n, m in result.memory.items()}
        deadline = time.monotonic() + settle_timeout_s
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            now = {n: _cpu_ticks(m.pid) for n, m in result.memory.items()}
            if any(now[n] - last[n] > 2 for n in now):  # more than 20 ms of CPU in half a second
                quiet_since = time.monotonic()
            last = now
            if time.monotonic() - quiet_since >= 2.0:
                result.rested = True
                break
        result.rest_s = time.monotonic() - t0
        stop_sampling.set()
        await sampler
        for mem in result.memory.values():
            mem.rest_mb = _status_kb(mem.pid, "VmRSS") / 1024
            mem.hwm_mb = _status_kb(mem.pid, "VmHWM") / 1024
        await follower.stop()

        result.accepted, result.rejected = kinds["JobAccepted"], kinds["JobRejected"]
        result.lost = jobs - len(verdicts)
        result.duplicated_verdicts = sum(1 for n in verdicts.values() if n > 1)
        info = await client.js.stream_info(STREAM, subjects_filter=SUBJECT)
        result.inputs_stored = int((info.state.subjects or {}).get(SUBJECT, 0))
        result.log_records = int(info.state.last_seq)
        result.restarts = supervisor.restarts()
        return result
    finally:
        if client is not None:
            await client.close()
        if supervisor is not None:
            await asyncio.to_thread(supervisor.stop)
        server.stop()
        if tmp is not None:
            tmp.cleanup()


def report(result: OverloadResult) -> str:
    lines = [
        f"burst of {result.jobs:,} submissions, {result.nodes} nodes",
        f"publish: {result.publish_s:.1f} s, {result.publish_rate:,.0f} submissions/s (one client, pipelined)",
        f"drain: every job answered {result.drain_s:.1f} s after the first publish "
        f"({result.jobs / result.drain_s:,.0f}/s); services at rest after {result.rest_s:.1f} s"
        + ("" if result.rested else " (settle timeout: still busy)"),
        f"verdicts: {result.accepted:,} accepted, {result.rejected:,} rejected; lost {result.lost}, "
        f"jobs with two verdicts {result.duplicated_verdicts}, inputs stored {result.inputs_stored:,} "
        f"(duplicate acks {result.duplicate_acks}); log {result.log_records:,} records",
        f"restarts: {result.restarts}",
        "memory (MB):   peak in burst   at rest   VmHWM",
    ]
    for name, mem in result.memory.items():
        lines.append(f"  {name:<12} {mem.peak_burst_mb:>13.1f} {mem.rest_mb:>9.1f} {mem.hwm_mb:>7.1f}")
    lines.append("OK" if result.ok else "FAILED: lost, duplicated or restarted")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.front.bench.overload", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=0, help="sim nodes (0: none, every job stays pending)")
    parser.add_argument("--runtime", type=float, default=0.05, help="seconds a job runs on a sim node")
    parser.add_argument("--settle-timeout", type=float, default=120.0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the store and logs in this directory")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.jobs <= 0:
        parser.error("--jobs must be at least 1")
    result = asyncio.run(run_overload(args.jobs, nodes=args.nodes, runtime_s=args.runtime,
                                      settle_timeout_s=args.settle_timeout, work_dir=args.keep,
                                      progress=None if args.json else (lambda t: print(t, file=sys.stderr))))
    if args.json:
        out = asdict(result)
        out["ok"] = result.ok
        print(json.dumps(out, indent=1))
    else:
        print(report(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
