"""The pull reader when deliveries are lost on the way (found reading large snapshots).

A subscription that falls too far behind has messages dropped by the client
(nats-py's pending-bytes limit), and a connection too far behind is cut by the
server; an ephemeral consumer without acks does not send them again. The
reader must notice (a gap in the consumer's delivery sequence, or requests
expiring while records are still pending) and read again from the first
record it lacks, on a new consumer, without being confused by what the
replaced consumer still delivers. Here the subscription's limit is made tiny
and its callback slow, so deliveries are lost all the time.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from services.runtime.log import Outgoing
from services.runtime.pullreader import PullReader

pytestmark = pytest.mark.timeout(60)


async def test_a_replay_losing_deliveries_still_reads_every_record_once_in_order(js_log, monkeypatch, caplog):
    items = [Outgoing(f"horizon.evt.t.E.{i}", i.to_bytes(4, "big") + os.urandom(20_000), f"r{i}") for i in range(400)]
    for i in range(0, len(items), 100):
        await js_log.publish_many(items[i : i + 100])

    async def start(self: PullReader) -> None:
        await self._create()
        self._sub = await self.nc.subscribe(self._inbox + ".*", cb=self._on_msg, pending_bytes_limit=300_000)
        self._watchdog = asyncio.create_task(self._watch())
        await self._request()

    on_msg = PullReader._on_msg

    async def slow(self: PullReader, msg: object) -> None:
        await asyncio.sleep(0.0005)
        await on_msg(self, msg)

    monkeypatch.setattr(PullReader, "start", start)
    monkeypatch.setattr(PullReader, "_on_msg", slow)
    original_init = PullReader.__init__

    def init(self: PullReader, *args: object, **kw: object) -> None:
        original_init(self, *args, **kw)  # type: ignore[arg-type]
        self.expires_s = 0.5  # a lost tail is noticed when requests expire

    monkeypatch.setattr(PullReader, "__init__", init)
    records = []
    async for batch in js_log.read(1, batch=100):
        records.extend(batch)
    assert [r.seq for r in records] == list(range(1, 401))
    assert [int.from_bytes(r.data[:4], "big") for r in records] == list(range(400))
    assert "lost" in caplog.text or "not received" in caplog.text  # the test did lose deliveries
