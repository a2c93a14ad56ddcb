"""Chaos: every part its own OS process, SIGKILLed and restarted at random under a workload; nats-server too.

    python -m services.front.bench.chaos [--jobs 20000] [--kills 5] [--parts P,Q] [--server-restarts 2]
        [--seed 1] [--agents 2] [--standbys 0] [--nodes 16] [--gpus-per-node 8] [--runtime 0.2:2]
        [--rate 0] [--gap 2:6] [--max-down 2] [--timeout 7200] [--keep DIR] [--json]

1. **Server.** The bundled nats-server on a free loopback port with a temporary store. A restart
   stops it (SIGKILL or SIGTERM) and starts it again on the same port and store, so every client
   reconnects by itself.
2. **Parts.** ``horizon service NAME --nats URL`` for the five services, the projections and
   ``--agents`` agents (``--executor sim``, ``--nodes`` nodes between them), each in its own
   process group, readiness by sd_notify (``READY=1`` on its own ``$NOTIFY_SOCKET`` once caught up;
   ``chaos_parts.py``).
   ``--standbys N`` runs N more instances of each service (``scheduling#2``, ...): hot standbys
   folding the log while the holder of the service's leader lease decides.
3. **Workload.** ``--jobs`` simulated jobs, generated from the seed: 0 to 8 GPUs or 2-node gangs
   of 8, several CPU and memory sizes, runtimes in ``--runtime``, priority classes high/normal/low
   (so preemption has work), some retried on failure, some failing, some cancelled. Submitted
   pipelined (``publish_many``, 100 a batch) at ``--rate`` per second, or (0, the default) in as
   many equal slices as there are faults plus one, a slice before each fault, so that every fault
   strikes a loaded system.
4. **Faults.** A plan drawn from the seed: every part (or those in ``--parts``) killed ``--kills``
   times (SIGKILL by PID), in random order, with the server restarts among them. One at a time:
   kill, stay down a random time up to ``--max-down`` s, start again, wait until it is ready, wait
   a random gap. A part that dies on its own is reported and started again. Recovery is measured
   twice: until the new incarnation is ready, and until the service's next record lands in the log
   (stored after the restart; with standbys, after the kill, whichever instance decides).
5. **Verdict.** Once every job is terminal and the plan is done: the parts are stopped by PID,
   the whole log is read and ``horizon check --nats URL --json`` runs on it. The run passes when
   the check passes, every submitted job has exactly one verdict and ends in a terminal state, no
   part died on its own, and no duplicate decision landed (``chaos_verdict.duplicates``).

Randomness is the driver's alone (one ``random.Random(seed)``); the services decide from the log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode, encode
from events.subjects import input_subject
from services.runtime.jetstream import JetStreamLog
from services.runtime.lease import LEASE_BUCKET
from services.runtime.log import LogError, Outgoing
from services.domain.protocol import Record
from services.front.bench.chaos_parts import HORIZON, Part, publisher
from services.front.bench.chaos_verdict import accounting, duplicates, horizon_check, recovery_summary, render
from services.runtime.natsserver import NatsServer
from services.domain.jobs import FAILURES, TERMINAL, JobState, JobTable

__all__ = ["ChaosConfig", "DECIDERS", "run_chaos", "fault_plan", "make_parts", "workload", "main"]

DECIDERS = ("submission", "scheduling", "placement", "preemption", "inventory")
TENANT = "chaos"
CRASH_LOOP = 10  # a part that dies on its own more often than this ends the run


@dataclass(frozen=True)
class ChaosConfig:
    jobs: int = 20_000
    kills: int = 5  # per part
    kill: tuple[str, ...] = ()  # the parts to kill (agents as agent-0, agent-1, ...); empty: all
    server_restarts: int = 2
    seed: int = 1
    agents: int = 2
    standbys: int = 0  # extra instances of each of the five services (hot standbys behind its leader lease)
    nodes: int = 16  # over all agents
    gpus_per_node: int = 8
    runtime_s: tuple[float, float] = (0.2, 2.0)
    rate: float = 0.0  # submissions per second; 0: paced by the faults (a slice before each)
    gap_s: tuple[float, float] = (2.0, 6.0)  # between a restarted part's readiness and the next fault
    max_down_s: float = 2.0
    heartbeat_timeout_s: float = 10.0
    timeout_s: float = 7200.0
    ready_timeout_s: float = 180.0


# ---------------------------------------------------------------------------- workload


def workload(cfg: ChaosConfig) -> tuple[list[c.JobSubmitted], set[str]]:
    """The jobs, and the ids of those to cancel, drawn from the seed (the same every run)."""
    rng = random.Random(f"workload/{cfg.seed}")
    jobs, cancel = [], set()
    lo, hi = cfg.runtime_s
    for i in range(cfg.jobs):
        job_id = f"chaos-{i:06d}"
        shape = rng.random()
        nodes, gpus = (2, cfg.gpus_per_node) if shape < 0.04 else (1, rng.choice((0, 1, 1, 1, 2, 2, 4, 8)))
        gpus = min(gpus, cfg.gpus_per_node)
        klass = rng.choices(("high", "normal", "low"), (1, 7, 2))[0]
        retried = rng.random() < 0.2
        fails = not retried and rng.random() < 0.05  # a retried job fails only when a fault fails it
        jobs.append(c.JobSubmitted(
            job_id=job_id, tenant=TENANT, correlation_id=job_id, source="bench-chaos", user=f"u{i % 7}",
            resources=c.ResourceRequest(cpus=rng.choice((1, 2, 4, 8)), memory=f"{rng.choice((1, 4, 16, 32))}Gi",
                                        gpus=gpus),
            nodes=nodes, time_limit_s=60.0, priority_class=klass,
            restart_policy="on-failure" if retried else "never", max_retries=2 if retried else 0,
            sim_runtime_s=round(rng.uniform(lo, hi), 2), sim_exit_code=1 if fails else 0,
        ))
        if not retried and rng.random() < 0.02:
            cancel.add(job_id)
    return jobs, cancel


# ---------------------------------------------------------------------------- the parts


def make_parts(cfg: ChaosConfig, url: str, work: Path) -> list[Part]:
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "notify").mkdir(parents=True, exist_ok=True)
    base = [*HORIZON, "service"]
    common = ["--nats", url, "--data-dir", str(work / "data"), "--executor", "sim",
              "--heartbeat-timeout", str(cfg.heartbeat_timeout_s)]
    names = [(name if k == 0 else f"{name}#{k + 1}", name) for name in DECIDERS for k in range(cfg.standbys + 1)]
    parts = [Part(part, [*base, name, *common], work / "logs" / f"{part}.log", work / "notify", service=name)
             for part, name in [*names, ("projections", "projections")]]
    per = [cfg.nodes // cfg.agents + (1 if i < cfg.nodes % cfg.agents else 0) for i in range(cfg.agents)]
    for i, count in enumerate(per):
        prefix = f"a{i}"
        width = max(2, len(str(count - 1)))
        parts.append(Part(f"agent-{i}", [*base, "agent", *common, "--nodes", str(count), "--node-prefix", prefix,
                                         "--gpus-per-node", str(cfg.gpus_per_node)],
                          work / "logs" / f"agent-{i}.log", work / "notify",
                          nodes=tuple(f"{prefix}-{n:0{width}d}" for n in range(count)), service="agent"))
    return parts


# ---------------------------------------------------------------------------- following the log


@dataclass
class Progress:
    """The driver's own fold of the log, as it grows."""

    table: JobTable = field(default_factory=JobTable)
    next_seq: int = 1
    submitted: int = 0
    # (part, since, t0, report, key): report[key] = seconds from t0 to part's first record stored after since
    firsts: list[tuple[Part, float, float, dict[str, Any], str]] = field(default_factory=list)
    submit_retries: int = 0
    # Paced submission (rate 0): fault i comes once marks[i] jobs are submitted, and the jobs after a
    # mark wait until its fault is done, so that every fault strikes a loaded system.
    marks: list[int] = field(default_factory=list)
    faults_done: int = 0
    retries: Counter[str] = field(default_factory=Counter)  # job -> requeues granted (as scheduling counts them)
    owed: set[str] = field(default_factory=set)  # jobs ended with a requeue to come

    def on_transition(self, tr: Any) -> None:
        """Mirror of scheduling's ``_may_retry``: which endings a ``JobRequeued`` will follow."""
        job, spec = tr.job, tr.job.spec
        if tr.after not in TERMINAL:
            self.owed.discard(job.job_id)
            return
        if tr.before in TERMINAL or spec is None:
            return
        grant = tr.after is JobState.PREEMPTED or (
            self.retries[job.job_id] < spec.max_retries
            and ((tr.after in FAILURES and spec.restart_policy in ("on-failure", "always"))
                 or (tr.after is JobState.SUCCEEDED and spec.restart_policy == "always")))
        if grant:
            self.retries[job.job_id] += 1
            self.owed.add(job.job_id)

    def ended(self) -> int:
        """Jobs that have ended for good: terminal, and no requeue to come."""
        return sum(1 for job in self.table.jobs.values() if job.state in TERMINAL and job.job_id not in self.owed)


async def follow(client: JetStreamLog, progress: Progress, parts: list[Part]) -> None:
    """Read from the next sequence again and again (a fresh read survives a server restart)."""
    while True:
        try:
            async for batch in client.read(progress.next_seq):
                for record in batch:
                    progress.next_seq = record.seq + 1
                    try:
                        event: Any = decode(record.data)
                    except DecodeError:
                        event = None
                    for waiting in list(progress.firsts):
                        part, since, t0, report, key = waiting
                        if record.time >= since and publisher(part, record, event):
                            report[key] = round(record.time - t0, 2)
                            progress.firsts.remove(waiting)
                    if event is None:
                        continue
                    tr = progress.table.apply(event, record.seq, record.time)
                    if tr is not None:
                        progress.on_transition(tr)
        except Exception:  # noqa: BLE001 - the server went away mid-read: read again
            pass
        await asyncio.sleep(0.5)


async def submit(client: JetStreamLog, cfg: ChaosConfig, jobs: list[c.JobSubmitted], cancel: set[str],
                 progress: Progress) -> None:
    """Batches of 100 (cancels for the previous batch's chosen jobs ride with the next one); a batch
    the log does not acknowledge is sent again under the same msg ids, so it is stored once."""
    started = time.monotonic()
    previous: list[str] = []
    for first in range(0, len(jobs) + 100, 100):
        batch = jobs[first:first + 100]
        items = [Outgoing(input_subject(TENANT, "submit"), encode(j), j.job_id) for j in batch]
        items += [Outgoing(input_subject(TENANT, "cancel"),
                           encode(c.JobCancelRequested(job_id=j, tenant=TENANT, reason="chaos", correlation_id=j)),
                           f"chaos/cancel/{j}") for j in previous if j in cancel]
        previous = [j.job_id for j in batch]
        if not items:
            break
        while sum(1 for m in progress.marks if m <= progress.submitted) > progress.faults_done:
            await asyncio.sleep(0.05)
        while True:
            try:
                await client.publish_many(items)
                break
            except LogError:  # the server is down longer than the pipeline's retries
                progress.submit_retries += 1
                await asyncio.sleep(1.0)
        progress.submitted += len(batch)
        if cfg.rate > 0:
            await asyncio.sleep(max(0.0, started + progress.submitted / cfg.rate - time.monotonic()))


# ---------------------------------------------------------------------------- faults


def fault_plan(cfg: ChaosConfig, parts: list[Part], rng: random.Random) -> list[str]:
    """Every part ``cfg.kills`` times in random order, with ``nats-server`` at random places among them."""
    plan = [p.name for p in parts if not cfg.kill or p.name in cfg.kill for _ in range(cfg.kills)]
    rng.shuffle(plan)
    for at in sorted(rng.sample(range(1, len(plan) + 1), min(cfg.server_restarts, len(plan))), reverse=True):
        plan.insert(at, "nats-server")
    plan += ["nats-server"] * max(0, cfg.server_restarts - plan.count("nats-server"))
    return plan


@dataclass
class Chaos:
    cfg: ChaosConfig
    server: NatsServer
    parts: list[Part]
    progress: Progress
    rng: random.Random
    client: Any = None  # the driver's JetStreamLog
    t_start: float = field(default_factory=time.time)
    faults: list[dict[str, Any]] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)  # parts that died on their own
    down: set[str] = field(default_factory=set)  # parts this driver has killed and not yet restarted

    def _watch_for(self, part: Part, since: float, t0: float, report: dict[str, Any], key: str) -> None:
        """Fill ``report[key]`` with the seconds from ``t0`` to ``part``'s first record stored after ``since``."""
        report[key] = None
        self.progress.firsts.append((part, since, t0, report, key))

    async def wait_ready(self, part: Part) -> float | None:
        """Seconds until ``part`` says READY=1; None if it exits first or does not within the timeout."""
        t0 = time.monotonic()
        while not part.poll_ready():
            if part.exited() is not None or time.monotonic() - t0 > self.cfg.ready_timeout_s:
                return None
            await asyncio.sleep(0.02)
        return round(time.monotonic() - t0, 2)

    async def _leads(self, part: Part) -> bool | None:
        """Whether ``part`` holds its service's leader lease now (None: no lease to read)."""
        try:
            msg = await self.client.js.get_last_msg(f"KV_{LEASE_BUCKET}", f"$KV.{LEASE_BUCKET}.{part.service}")
            holder = json.loads(msg.data or b"{}").get("holder", "")
        except Exception:  # noqa: BLE001 - no bucket, no key (lapsed or released), or the server is away
            return None
        return part.proc is not None and holder.split(":")[1:2] == [str(part.proc.pid)]

    def _live(self) -> int:
        return sum(1 for job in self.progress.table.jobs.values() if job.state not in TERMINAL)

    async def kill_part(self, part: Part) -> dict[str, Any]:
        """SIGKILL, down a random while, start again; recovery = until ready, and until its next record."""
        down = round(self.rng.uniform(0.0, self.cfg.max_down_s), 2)
        report: dict[str, Any] = {"fault": "kill", "part": part.name, "at_s": round(time.time() - self.t_start, 1),
                                  "live_jobs": self._live(), "down_s": down}
        if part.service in DECIDERS:
            report["was_leader"] = await self._leads(part)
        self.down.add(part.name)
        t0 = time.time()
        report["pid"] = part.kill()
        if self.cfg.standbys and part.service in DECIDERS:  # the service goes on in another instance
            self._watch_for(part, t0, t0, report, "next_record_s")
        await asyncio.sleep(down)
        part.spawn()
        self.down.discard(part.name)
        spawned = time.time()
        if part.service != "projections" and "next_record_s" not in report:  # projections publish nothing
            self._watch_for(part, spawned, t0, report, "next_record_s")
        ready = await self.wait_ready(part)
        report["ready_after_start_s"] = ready
        report["recover_s"] = None if ready is None else round(time.time() - t0, 2)
        return report

    async def restart_server(self, number: int) -> dict[str, Any]:
        """SIGKILL (odd restarts) or SIGTERM (even), down a while, start on the same port and store."""
        how = "SIGKILL" if number % 2 else "SIGTERM"
        down = round(self.rng.uniform(0.5, max(0.5, self.cfg.max_down_s)), 2)
        report: dict[str, Any] = {"fault": "server", "signal": how, "at_s": round(time.time() - self.t_start, 1),
                                  "live_jobs": self._live(), "down_s": down, "pid": self.server.pid}
        t0 = time.time()
        if how == "SIGKILL":
            self.server.kill()
        self.server.stop()  # SIGTERM if still running; the store directory is ours and stays
        await asyncio.sleep(down)
        self.server.start()  # here, in the main thread: the server's PR_SET_PDEATHSIG follows the thread
        up = time.time()
        report["server_ready_s"] = round(up - t0, 2)
        report["next_record_s"] = {}
        for part in self.parts:
            if part.name not in ("projections", "preemption"):  # publish nothing / only when there is need
                self._watch_for(part, up, t0, report["next_record_s"], part.name)
        return report

    async def run_plan(self, plan: list[str]) -> None:
        by_name = {p.name: p for p in self.parts}
        servers = 0
        for i, name in enumerate(plan):
            while i < len(self.progress.marks) and self.progress.submitted < self.progress.marks[i]:
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.rng.uniform(*self.cfg.gap_s))
            if name == "nats-server":
                servers += 1
                self.faults.append(await self.restart_server(servers))
            else:
                self.faults.append(await self.kill_part(by_name[name]))
            self.progress.faults_done += 1

    async def watch_parts(self) -> None:
        """A part that dies without being killed is a finding: note it with its last words, start it again."""
        while True:
            await asyncio.sleep(0.5)
            for part in self.parts:
                code = part.exited()
                if code is None or part.name in self.down:
                    continue
                self.unexpected.append({"part": part.name, "exit_code": code, "at_s": round(time.time() - self.t_start, 1),
                                        "log_tail": part.tail()})
                if sum(1 for u in self.unexpected if u["part"] == part.name) > CRASH_LOOP:
                    raise RuntimeError(f"{part.name} is in a crash loop (died {CRASH_LOOP + 1} times on its own): "
                                       f"{part.tail()}")
                part._close()
                part.spawn()


# ---------------------------------------------------------------------------- the run


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _read_all(client: JetStreamLog) -> list[Record]:
    out: list[Record] = []
    async for batch in client.read(1):
        out.extend(batch)
    return out


async def run_chaos(cfg: ChaosConfig, work: Path) -> dict[str, Any]:
    """Phases 1-5 of the module docstring in ``work``; the figures as a dict (``ok`` the verdict)."""
    rng = random.Random(f"faults/{cfg.seed}")
    jobs, cancel = workload(cfg)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    server = NatsServer(store_dir=work / "nats", port=_free_port(), log_file=work / "logs" / "nats-server.log")
    server.start()
    parts = make_parts(cfg, server.url, work)
    progress = Progress()
    chaos = Chaos(cfg, server, parts, progress, rng)
    tasks: list[asyncio.Task[Any]] = []
    client: JetStreamLog | None = None
    try:
        client = await JetStreamLog.open(server.url, name="horizon-chaos")  # creates the streams
        chaos.client = client
        for part in parts:
            part.spawn()
        for part in parts:
            if await chaos.wait_ready(part) is None:
                raise RuntimeError(f"{part.name} did not start: {part.tail()}")
        startup_s = round(time.time() - chaos.t_start, 1)
        plan = fault_plan(cfg, parts, rng)
        if cfg.rate <= 0:
            progress.marks = [len(jobs) * (i + 1) // (len(plan) + 1) for i in range(len(plan))]
        follower = asyncio.create_task(follow(client, progress, parts))
        watcher = asyncio.create_task(chaos.watch_parts())
        submitter = asyncio.create_task(submit(client, cfg, jobs, cancel, progress))
        faults = asyncio.create_task(chaos.run_plan(plan))
        tasks = [follower, watcher, submitter, faults]
        t_work = time.time()
        while not (submitter.done() and faults.done() and progress.ended() == len(jobs)
                   and len(progress.table.jobs) >= len(jobs)):
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            if time.time() - t_work > cfg.timeout_s:
                raise TimeoutError(f"{progress.ended()} of {len(jobs)} jobs ended for good within {cfg.timeout_s:.0f} s "
                                   f"({len(chaos.faults)} of {len(plan)} faults done)")
            await asyncio.sleep(0.5)
        work_s = round(time.time() - t_work, 1)
        await asyncio.sleep(2.0)  # the last records' first-record watches
        watcher.cancel()
        for part in parts:  # SIGTERM by PID; the log is then still
            part.stop()
        follower.cancel()
        records = await _read_all(client)
    finally:
        for task in tasks:
            task.cancel()
        for part in parts:
            part.stop()
        if client is not None:
            await client.close()
    try:
        check = await asyncio.to_thread(horizon_check, server.url, cfg.timeout_s)
    finally:
        server.stop()
    dup = duplicates(records)
    acc = accounting(records, [j.job_id for j in jobs])
    kills = Counter(f["part"] for f in chaos.faults if f["fault"] == "kill")
    report = {
        "config": {**{k: v for k, v in vars(cfg).items()}, "runtime_s": list(cfg.runtime_s), "gap_s": list(cfg.gap_s)},
        "startup_s": startup_s, "work_s": work_s, "total_s": round(time.time() - chaos.t_start, 1),
        "records": len(records), "jobs": acc, "cancels_sent": len(cancel), "submit_retries": progress.submit_retries,
        "kills": dict(sorted(kills.items())), "server_restarts": sum(1 for f in chaos.faults if f["fault"] == "server"),
        "faults": chaos.faults, "recovery": recovery_summary(chaos.faults), "unexpected_exits": chaos.unexpected,
        "duplicates": dup, "check": check,
    }
    report["ok"] = bool(acc["ok"] and dup["total"] == 0 and not chaos.unexpected and check.get("exit_code") == 0
                        and all(f.get("recover_s") is not None for f in chaos.faults if f["fault"] == "kill"))
    return report


def _pair(text: str, what: str) -> tuple[float, float]:
    try:
        lo, _, hi = text.partition(":")
        pair = (float(lo), float(hi or lo))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not SECONDS or MIN:MAX") from None
    if not 0 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} needs 0 <= MIN <= MAX")
    return pair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.front.bench.chaos", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of every part")
    parser.add_argument("--parts", default="", help="the parts to kill, comma-separated (default: all; "
                                                    "agents are agent-0, agent-1, ...)")
    parser.add_argument("--server-restarts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--standbys", type=int, default=0,
                        help="extra instances of each service (hot standbys: the lease holder decides)")
    parser.add_argument("--nodes", type=int, default=16, help="nodes over all agents")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--runtime", type=lambda t: _pair(t, "--runtime"), default=(0.2, 2.0),
                        help="simulated run time of a job, MIN:MAX seconds")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="submissions per second (0: a slice of the jobs before each fault)")
    parser.add_argument("--gap", type=lambda t: _pair(t, "--gap"), default=(2.0, 6.0),
                        help="MIN:MAX seconds between a restarted part's readiness and the next fault")
    parser.add_argument("--max-down", type=float, default=2.0, help="longest a killed part or the server stays down")
    parser.add_argument("--heartbeat-timeout", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=7200.0, help="give up after this many seconds of workload")
    parser.add_argument("--keep", type=Path, default=None, help="work in this directory and keep it (logs, store)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = parser.parse_args(argv)
    if (args.jobs < 1 or args.agents < 1 or args.nodes < args.agents or args.kills < 0 or args.server_restarts < 0
            or args.standbys < 0):
        parser.error("need --jobs >= 1, --agents >= 1, --nodes >= --agents, --kills, --server-restarts and "
                     "--standbys >= 0")
    kill = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    known = [*(n if k == 0 else f"{n}#{k + 1}" for n in DECIDERS for k in range(args.standbys + 1)), "projections",
             *(f"agent-{i}" for i in range(args.agents))]
    if set(kill) - set(known):
        parser.error(f"--parts: unknown {', '.join(sorted(set(kill) - set(known)))}; parts: {', '.join(known)}")
    cfg = ChaosConfig(jobs=args.jobs, kills=args.kills, kill=kill, server_restarts=args.server_restarts, seed=args.seed,
                      agents=args.agents, standbys=args.standbys, nodes=args.nodes, gpus_per_node=args.gpus_per_node, runtime_s=args.runtime,
                      rate=args.rate, gap_s=args.gap, max_down_s=args.max_down,
                      heartbeat_timeout_s=args.heartbeat_timeout, timeout_s=args.timeout)
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            work = args.keep
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="horizon-chaos-")))
        try:
            report = asyncio.run(run_chaos(cfg, work))
        except (RuntimeError, TimeoutError, LogError) as exc:
            print(f"error: {exc} (logs in {work / 'logs'})", file=sys.stderr)
            return 1
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
