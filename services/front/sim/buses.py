"""The simulator's buses: how the driver's events reach the services' cores, and when they are done.

Two buses, one driver (``InProcessBus`` and ``NatsBus``), so the decisions
can be compared:

* in process, the cores are called directly; "quiescent" is a fixpoint: every
  core is asked to decide, in a fixed order, until none has anything to say;
* over NATS, the services are the real ``ServiceRunner``s following the
  JetStream log. The barrier: read the stream's last sequence ``L``; wait
  until every runner reports it is idle at ``L`` or later (it has applied
  everything up to ``L``, all its own publications have come back, and its
  ``decide`` returned nothing); read the last sequence again: if it is still
  ``L``, nothing is in flight anywhere, else repeat with the new ``L``. A
  runner cannot report idle at ``L`` while it is publishing decisions based
  on ``L``, so an unchanged ``L`` after everyone reported means quiescence.

Both buses see the same events in the same causal order at every barrier (the
driver, ``services/front/sim/driver.py``, guarantees it), so per-job start times and
allocations are identical (tested).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from events.base import Event
from events.codec import decode, encode
from events.subjects import event_subject
from services.domain.protocol import Record, fold_event
from services.runtime.log import Outgoing

__all__ = ["Bus", "InProcessBus", "NatsBus", "WATCHED"]

# The decisions the driver acts on or records, collected by every bus at each barrier.
WATCHED = frozenset({"JobScheduled", "JobRequeued", "JobRejected", "JobDependencyNeverSatisfied", "JobUnschedulable",
                     "JobCancelled", "PreemptionRequested", "JobResized", "JobStopRequested"})


class Bus(Protocol):
    async def publish(self, items: Sequence[tuple[str, Event]]) -> None: ...

    async def settle(self) -> list[Event]:
        """Wait for quiescence; return the decisions of the ``WATCHED`` types made since the last call."""
        ...

    async def close(self) -> None: ...


class InProcessBus:
    """The cores called directly: no I/O, no encoding round trip beyond one ``encode`` per event."""

    def __init__(self, cores: list[Any], keep_records: bool = False) -> None:
        self.cores = [(core, core.initial()) for core in cores]
        self.seq = 0
        self.keep_records = keep_records
        self.records: list[Record] = []
        self._decided: list[Event] = []

    def _fold(self, subject: str, event: Event) -> None:
        self.seq += 1
        record = Record(self.seq, subject, encode(event) if self.keep_records else b"", event.ts)
        if self.keep_records:
            self.records.append(record)
        for i, (core, state) in enumerate(self.cores):
            self.cores[i] = (core, fold_event(core, state, record, event))
        if event.event_type in WATCHED:
            self._decided.append(event)

    async def publish(self, items: Sequence[tuple[str, Event]]) -> None:
        for subject, event in items:
            self._fold(subject, event)

    async def settle(self) -> list[Event]:
        quiet = False
        while not quiet:
            quiet = True
            for core, state in list(self.cores):
                decisions = core.decide(state)
                for event in decisions:
                    self._fold(event_subject(core.name, event), event)
                quiet = quiet and not decisions
        out, self._decided = self._decided, []
        return out

    async def close(self) -> None:
        return None


class NatsBus:
    """The real service runners, each on its own connection, following the JetStream log."""

    def __init__(self, url: str, cores: list[Any], settle_timeout_s: float = 120.0, require_empty: bool = True) -> None:
        self.url = url
        self.cores = cores
        self.settle_timeout_s = settle_timeout_s
        self.require_empty = require_empty
        self.runners: list[Any] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.log: Any = None
        self._started_at = 0
        # One follower of the log collects the decisions (as any subscriber would), instead
        # of a new consumer per step; ``_seen_seq`` says how far it has read.
        self._follower: Any = None
        self._seen_seq = 0
        self._seen = asyncio.Event()
        self._decided: list[Event] = []

    async def start(self) -> None:
        from services.runtime.jetstream import JetStreamLog
        from services.runtime.service import ServiceRunner

        self.log = await JetStreamLog.open(self.url, name="horizon-simulator")
        self._seen_seq = self._started_at = await self.log.last_seq()
        if self.require_empty and self._started_at:
            raise ValueError(f"the log at {self.url} is not empty ({self._started_at} events): a simulation "
                             f"needs a server of its own (omit --nats to get one)")

        async def collect(batch: list[Record]) -> None:
            for record in batch:
                parts = record.subject.split(".", 4)
                if len(parts) == 5 and parts[1] == "evt" and parts[3] in WATCHED:
                    event = decode(record.data)
                    if event.event_type == parts[3]:
                        self._decided.append(event)
            self._seen_seq = batch[-1].seq
            self._seen.set()

        self._follower = await self.log.follow(collect, from_seq=self._started_at + 1)
        for core in self.cores:
            runner_log = await JetStreamLog.open(self.url, name=f"horizon-sim-{core.name}", create=False)
            runner = ServiceRunner(runner_log, core)
            self.runners.append(runner)
            self.tasks.append(asyncio.create_task(runner.run(), name=f"sim-{core.name}"))
        for runner, task in zip(self.runners, self.tasks, strict=True):
            waiter = asyncio.ensure_future(runner.ready.wait())
            await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                raise RuntimeError(f"{runner.name} failed to start: {task.exception()!r}")

    async def publish(self, items: Sequence[tuple[str, Event]]) -> None:
        if items:
            await self.log.publish_many([Outgoing(s, encode(e), e.id) for s, e in items])

    async def _barrier(self) -> int:
        """Wait for quiescence; return the log's last sequence at that point."""
        deadline = asyncio.get_running_loop().time() + self.settle_timeout_s
        while True:
            last = await self.log.last_seq()
            for runner, task in zip(self.runners, self.tasks, strict=True):
                while runner.idle_seq < last:
                    if task.done():
                        raise RuntimeError(f"{runner.name} stopped: {task.exception()!r}")
                    runner.progress.clear()
                    remaining = deadline - asyncio.get_running_loop().time()
                    if remaining <= 0:
                        raise TimeoutError(f"{runner.name} did not settle (idle at {runner.idle_seq}, log at {last})")
                    try:
                        await asyncio.wait_for(runner.progress.wait(), min(remaining, 1.0))
                    except asyncio.TimeoutError:
                        pass
            if await self.log.last_seq() == last:
                return last

    async def settle(self) -> list[Event]:
        last = await self._barrier()
        while self._seen_seq < last:
            self._seen.clear()
            await asyncio.wait_for(self._seen.wait(), self.settle_timeout_s)
        out, self._decided = self._decided, []
        return out

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
        for runner in self.runners:
            await runner.log.close()
        if self.log is not None:
            await self.log.close()
