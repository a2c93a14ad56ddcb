"""Inventory's adapter: the pure core on the shared runner, plus the heartbeat watch.

Heartbeats are frequent and not history, so they never enter the log: agents
publish an empty message on ``horizon.hb.<node>`` (core NATS) every second or
so. This adapter remembers when it last heard from each node (monotonic wall
clock: an *observation*, which is why it lives here and not in the core) and
records the two state changes that matter (as observations, with
``basis_seq`` 0: they are inputs from the outside world, not decisions a
replay of the log could reproduce):

* ``NodeLost`` when a ready node has been silent for ``timeout_s`` (msg id
  ``inventory/NodeLost/<node>/<ready seq>``: one loss per ready period, however
  many inventory instances notice it);
* ``NodeReady`` when a lost node is heard from again
  (``inventory/NodeReady/<node>/back/<lost seq>``).

A freshly started inventory gives every node a full timeout of grace before
judging it, since it has not had the chance to hear anyone yet.

The **clock**: decisions take "now" from the log, so when nothing happens,
time does not move for them, and a scheduling timeout or a restart backoff
would wait for the next unrelated event. ``Ticker`` publishes a
``ClockTicked`` every ``interval_s`` seconds (msg id
``clock/ClockTicked/<wall time // interval>``, so several inventories tick
once); the tick carries no decision, it only moves the log's time forward.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject, heartbeat_subject
from services.domain.envelope import Decider
from services.inventory.core import InventoryCore, InventoryState
from services.runtime.cancel import cancel_and_wait
from services.runtime.lease import Lease
from services.runtime.log import EventLog
from services.runtime.receive import subscribe_fast, unsubscribe_fast
from services.runtime.service import ServiceRunner

__all__ = ["HeartbeatWatch", "InventoryService", "Ticker"]

log = logging.getLogger("horizon.inventory")

_BEAT_PREFIX = len(heartbeat_subject(""))  # "horizon.hb.": the node follows


class HeartbeatWatch:
    def __init__(self, runner: ServiceRunner[InventoryState], nc: Any, *, timeout_s: float = 10.0) -> None:
        self.runner = runner
        self.nc = nc
        self.timeout_s = timeout_s
        self.last_seen: dict[str, float] = {}
        self.lost_marked: dict[str, float] = {}
        self._started = time.monotonic()
        self._sub: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        seen, clock = self.last_seen, time.monotonic

        def on_beat(subject: str, _reply: str, _headers: Any, _data: bytes) -> None:
            seen[subject[_BEAT_PREFIX:]] = clock()

        # Straight from the lean parser where the connection has it (services/runtime/receive.py): 12,500
        # nodes beat 12,500 times a second, and nats-py's Msg, queue and task per beat took a tenth of a core.
        self._sub = await subscribe_fast(self.nc, "horizon.hb.*", on_beat)
        self._task = asyncio.create_task(self._watch(), name="inventory-heartbeats")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await unsubscribe_fast(self.nc, self._sub)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, self.timeout_s / 5))
            try:
                await self.check(time.monotonic())
            except Exception:  # noqa: BLE001 - keep watching; the next round retries
                log.exception("heartbeat check failed")

    async def check(self, now: float) -> None:
        state = self.runner.state
        for node in state.cluster.sorted_nodes():
            if node.removed:
                continue
            seen = self.last_seen.get(node.name, self._started)
            if node.ready and not node.lost and now - seen > self.timeout_s:
                event = Decider("inventory", ts=time.time(), source="inventory")(
                    c.NodeLost, node.name, node.ready_seq,
                    correlation_id=node.name,
                    node=node.name,
                    reason=f"no heartbeat for {now - seen:.1f} s (timeout {self.timeout_s:g} s)",
                    last_heartbeat_ts=time.time() - (now - seen) if node.name in self.last_seen else None,
                )
                self.lost_marked[node.name] = now
                await self._record(event)
                log.warning("node %s lost: %s", node.name, event.reason)
            elif node.lost and seen > self.lost_marked.get(node.name, self._started) and now - seen < self.timeout_s:
                event = Decider("inventory", ts=time.time(), source="inventory")(
                    c.NodeReady, node.name, "back", node.lost_seq, correlation_id=node.name, node=node.name)
                await self._record(event)
                log.info("node %s is back", node.name)

    async def _record(self, event: c.Event) -> None:
        """Put an observation into the log (its deterministic id makes a second observer a duplicate)."""
        await self.runner.log.publish(event_subject("inventory", event), encode(event), msg_id=event.id)


class Ticker:
    """Publishes ``ClockTicked`` into the log every ``interval_s`` seconds of wall time."""

    def __init__(self, log_: EventLog, interval_s: float = 5.0) -> None:
        self.log = log_
        self.interval_s = interval_s
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s - time.time() % self.interval_s)
            try:
                await self.tick(time.time())
            except Exception as exc:  # noqa: BLE001 - the next tick retries; a missed tick only delays
                log.warning("clock tick not published: %s", exc)

    async def tick(self, wall: float) -> None:
        bucket = int(wall // self.interval_s)
        event = Decider("clock", ts=wall, source="clock")(c.ClockTicked, bucket, correlation_id=str(bucket), now_ts=wall)
        await self.log.publish(event_subject("clock", event), encode(event), msg_id=event.id)
        self.ticks += 1


class InventoryService:
    """The runner, the heartbeat watch and the clock, started and stopped together."""

    def __init__(self, log_: EventLog, nc: Any, *, heartbeat_timeout_s: float = 10.0, core: InventoryCore | None = None,
                 tick_interval_s: float | None = 5.0, lease: Lease | None = None) -> None:
        self.runner = ServiceRunner(log_, core or InventoryCore(), lease=lease)
        self.watch = HeartbeatWatch(self.runner, nc, timeout_s=heartbeat_timeout_s) if nc is not None else None
        self.ticker = Ticker(log_, tick_interval_s) if tick_interval_s else None

    async def run(self) -> None:
        await self.runner.start()
        if self.watch is not None:
            await self.watch.start()
        ticking = asyncio.create_task(self.ticker.run(), name="inventory-clock") if self.ticker else None
        try:
            await self.runner.wait()
        finally:
            if ticking is not None:
                await cancel_and_wait(ticking)
            if self.watch is not None:
                await self.watch.stop()
            await self.runner.stop()
