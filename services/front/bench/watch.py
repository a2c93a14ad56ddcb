"""What a throughput benchmark counts, read from the stream itself, and the agents it stands in for.

**Counting from the stream, not from core NATS.** The harness used to count ``JobScheduled`` and the
cycles from core subscriptions. A core subscription is best effort: nats-server cuts a consumer
that falls 64 MB or its write deadline behind ("Slow Consumer Detected") and what it had not sent
is gone, and a harness that missed one ``JobScheduled`` waited for it for its whole timeout. Here
each count is a ``Tally``: a pull reader on one filter subject from the stream's end at the
start of the measurement (services/runtime/pullreader.py: in order, lost deliveries seen as a gap
and read again), so every stored event is counted exactly once and carries the time the stream
stored it. One filter each (one filter is served ~25x faster than several, docs/benchmarks.md §2).

**The agents.** ``Agents`` ends every scheduled job at once (``JobSucceeded``, as instantaneous
agents would) and heartbeats every node once a second on the lean publish path. It stops
cooperatively and for sure (``stage.stop_tasks``).

Times: ``first``/``last`` are the stream's timestamps (seconds since the epoch, one clock: the
server's, on this machine) of the first and last counted record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import nats

from events import catalogue as c
from events.codec import encode
from events.subjects import EVENT_PREFIX, event_owner, event_subject
from services.domain.envelope import decision_id
from services.domain.protocol import Record
from services.front.bench.stage import close_within, stop_tasks
from services.front.sim.metrics import percentile
from services.runtime import receive
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing

__all__ = ["Tally", "SchedulingWatch", "Agents", "SCHEDULED", "ACCEPTED", "NODE_LOST"]

SCHEDULED = f"{EVENT_PREFIX}.*.JobScheduled.>"
ACCEPTED = f"{EVENT_PREFIX}.submission.JobAccepted.>"
NODE_LOST = f"{EVENT_PREFIX}.inventory.NodeLost.>"
SCHEDULING_CYCLES = f"{EVENT_PREFIX}.*.SchedulingCycleCompleted.>"
PLACEMENT_CYCLES = f"{EVENT_PREFIX}.*.PlacementCycleCompleted.>"

_scheduled = msgspec.json.Decoder(c.JobScheduled)


class Tally:
    """The records of one filter subject from ``from_seq`` on, counted (``on_record`` sees each)."""

    def __init__(self, subject: str, on_record: Callable[[Record], None] | None = None) -> None:
        self.subject = subject
        self.on_record = on_record
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.last_seq = 0
        self._follower: Any = None

    async def start(self, log: JetStreamLog, from_seq: int) -> Tally:
        async def handle(batch: list[Record]) -> None:
            for record in batch:
                if record.seq <= self.last_seq:
                    continue
                self.last_seq = record.seq
                self.count += 1
                if self.first is None:
                    self.first = record.time
                self.last = record.time
                if self.on_record is not None:
                    self.on_record(record)

        self._follower = await log.follow(handle, from_seq=from_seq, subjects=(self.subject,))
        return self

    async def stop(self) -> None:
        if self._follower is not None:
            follower, self._follower = self._follower, None
            await close_within(follower.stop(), timeout_s=15.0)


class Agents:
    """Instantaneous agents for the nodes ``names``: every job scheduled on them succeeds at once,
    and each node heartbeats once a second (or never, with ``heartbeat_s`` 0)."""

    def __init__(self, log: JetStreamLog, names: list[str], heartbeat_s: float = 1.0) -> None:
        self.log = log
        self.names = names
        self.heartbeat_s = heartbeat_s
        self.to_complete: list[tuple[str, int, str]] = []
        self.wake = asyncio.Event()
        self.completed = 0
        self._stopping = False
        self._nc: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def scheduled(self, body: c.JobScheduled) -> None:
        self.to_complete.append((body.job_id, body.attempt, body.allocations[0].node))
        self.wake.set()

    async def start(self, url: str) -> Agents:
        self._nc = receive.install(await nats.connect(url))
        self._tasks = [asyncio.create_task(self._complete(), name="bench-completer")]
        if self.heartbeat_s > 0 and self.names:
            self._tasks.append(asyncio.create_task(self._beat(), name="bench-heartbeats"))
        return self

    async def _complete(self) -> None:
        while not self._stopping:
            await self.wake.wait()
            self.wake.clear()
            batch, self.to_complete[:] = list(self.to_complete), []
            out = []
            for job_id, attempt, node in batch:
                done = c.JobSucceeded(id=decision_id("agent", c.JobSucceeded, job_id, attempt), correlation_id=job_id,
                                      source=f"agent/{node}", job_id=job_id, attempt=attempt, node=node)
                out.append(Outgoing(event_subject("agent", done), encode(done), done.id))
            for i in range(0, len(out), 5_000):
                await self.log.publish_many(out[i : i + 5_000])
            self.completed += len(out)

    async def _beat(self) -> None:
        subjects = [f"horizon.hb.{name}" for name in self.names]
        loop = asyncio.get_running_loop()
        while not self._stopping:
            due = loop.time() + self.heartbeat_s
            for subject in subjects:
                await receive.publish(self._nc, subject, b"")
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def stop(self) -> None:
        self._stopping = True
        self.wake.set()
        await stop_tasks(*self._tasks)
        if self._nc is not None:
            await close_within(self._nc.close())


class SchedulingWatch:
    """``JobScheduled`` (first attempts: each job once), the cycles and ``NodeLost``, read from the
    stream from ``from_seq``, with the agents answering every ``JobScheduled``."""

    def __init__(self, log: JetStreamLog, agents: Agents | None = None) -> None:
        self.log = log
        self.agents = agents
        self.jobs = 0  # distinct jobs scheduled (first attempts)
        self.first: float | None = None
        self.last: float | None = None
        self.by_owner: dict[str, int] = {}  # first attempts per deciding leader (placement-p0 ...)
        self.owner_first: dict[str, float] = {}
        self.owner_last: dict[str, float] = {}
        self.cycles_by_owner: dict[str, int] = {}
        self._cycle_start: dict[str, float] = {}
        self._cycle_end: dict[str, float] = {}
        self.cycle_ms: list[float] = []
        self.on_job: Callable[[str], Any] | None = None  # told each JobScheduled's job (latency)
        self.tallies = [Tally(SCHEDULED, self._on_scheduled), Tally(SCHEDULING_CYCLES, self._on_cycle_start),
                        Tally(PLACEMENT_CYCLES, self._on_cycle_end), Tally(NODE_LOST)]

    @property
    def node_lost(self) -> int:
        return self.tallies[3].count

    def _on_scheduled(self, record: Record) -> None:
        body = _scheduled.decode(record.data)
        if self.agents is not None:
            self.agents.scheduled(body)
        if self.on_job is not None:
            self.on_job(body.job_id)
        if body.attempt != 1:
            return
        self.jobs += 1
        owner = event_owner(record.subject)
        self.by_owner[owner] = self.by_owner.get(owner, 0) + 1
        self.owner_first.setdefault(owner, record.time)
        self.owner_last[owner] = record.time
        if self.first is None:
            self.first = record.time
        self.last = record.time

    def _on_cycle_start(self, record: Record) -> None:
        key = record.subject.rsplit(".", 1)[1]
        end = self._cycle_end.pop(key, None)
        if end is not None:  # the two filters are read apart: either may come first
            self.cycle_ms.append((end - record.time) * 1000)
        else:
            self._cycle_start[key] = record.time

    def _on_cycle_end(self, record: Record) -> None:
        owner = event_owner(record.subject)
        self.cycles_by_owner[owner] = self.cycles_by_owner.get(owner, 0) + 1
        key = record.subject.rsplit(".", 1)[1]
        begun = self._cycle_start.pop(key, None)
        if begun is not None:
            self.cycle_ms.append((record.time - begun) * 1000)
        else:
            self._cycle_end[key] = record.time

    async def start(self, from_seq: int) -> SchedulingWatch:
        for tally in self.tallies:
            await tally.start(self.log, from_seq)
        return self

    async def stop(self) -> None:
        for tally in self.tallies:
            await tally.stop()

    def cycle_p(self, q: float) -> float | None:
        return round(percentile(self.cycle_ms, q), 1) if self.cycle_ms else None

    async def progress(self, want: int, what: str = "JobScheduled") -> str:
        from services.front.bench.processes import running

        procs = running()
        alive = sum(1 for p in procs if p.poll() is None)
        try:
            seq = f"{await asyncio.wait_for(self.log.last_seq(), 5.0):,}"
        except Exception:  # noqa: BLE001 - the message goes out with what is known
            seq = "unknown"
        return (f"{self.jobs:,} of {want:,} {what}; {alive} of {len(procs)} services alive; log at seq {seq}; "
                f"{self.node_lost:,} NodeLost seen; {len(self.cycle_ms):,} cycles")
