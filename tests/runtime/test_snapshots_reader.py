"""The pull reader when deliveries are lost on the way (found reading large snapshots).

A connection too far behind is cut by the server, and what it had not sent
is gone; a subscription on nats-py's own path has messages dropped by the
client past its pending-bytes limit. An ephemeral consumer without acks does
not send them again. The reader must notice (a gap in the consumer's delivery
sequence, or requests expiring while records are still pending) and read
again from the first record it lacks, on a new consumer, without being
confused by what the replaced consumer still delivers. The first test loses
deliveries on the reader's own (lean) path, in the middle and at the tail;
the second on nats-py's path, with the subscription's limit made tiny and
its callback slow, so deliveries are lost all the time.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from services.runtime.log import Outgoing
from services.runtime.pullreader import PullReader

pytestmark = pytest.mark.timeout(60)


def _slow_init(monkeypatch: pytest.MonkeyPatch) -> None:
    original_init = PullReader.__init__

    def init(self: PullReader, *args: object, **kw: object) -> None:
        original_init(self, *args, **kw)  # type: ignore[arg-type]
        self.expires_s = 0.5  # a lost tail is noticed when requests expire

    monkeypatch.setattr(PullReader, "__init__", init)


async def test_a_replay_losing_deliveries_on_the_lean_path_still_reads_every_record_once(js_log, monkeypatch, caplog):
    items = [Outgoing(f"horizon.evt.t.E.{i}", i.to_bytes(4, "big") + os.urandom(2_000), f"r{i}") for i in range(400)]
    await js_log.publish_many(items)
    on_msg = PullReader._on_msg
    lost: set[int] = set()

    def lossy(self: PullReader, subject: str, reply: str, headers: dict[str, str] | None, data: bytes) -> None:
        seq = int.from_bytes(data[:4], "big") + 1 if reply.startswith("$JS.ACK.") else 0
        if seq in (50, 51, 230, 400) and seq not in lost:
            lost.add(seq)  # each lost once: seq 400 is the tail, noticed only when requests expire
            return
        on_msg(self, subject, reply, headers, data)

    monkeypatch.setattr(PullReader, "_on_msg", lossy)
    _slow_init(monkeypatch)
    records = []
    async for batch in js_log.read(1, batch=100):
        records.extend(batch)
    assert lost == {50, 51, 230, 400}
    assert [r.seq for r in records] == list(range(1, 401))
    assert [int.from_bytes(r.data[:4], "big") for r in records] == list(range(400))
    assert "lost" in caplog.text and "not received" in caplog.text


async def test_a_replay_losing_deliveries_still_reads_every_record_once_in_order(js_log, monkeypatch, caplog):
    items = [Outgoing(f"horizon.evt.t.E.{i}", i.to_bytes(4, "big") + os.urandom(20_000), f"r{i}") for i in range(400)]
    for i in range(0, len(items), 100):
        await js_log.publish_many(items[i : i + 100])

    async def start(self: PullReader) -> None:
        await self._create()

        async def slow(msg: Any) -> None:  # nats-py's path: a queue per subscription, a callback per message
            await asyncio.sleep(0.0005)
            self._on_msg(msg.subject, msg.reply, msg.headers, msg.data)

        self._sub = await self.nc.subscribe(self._inbox + ".*", cb=slow, pending_bytes_limit=300_000)
        self._watchdog = asyncio.create_task(self._watch())
        await self._request()

    monkeypatch.setattr(PullReader, "start", start)
    _slow_init(monkeypatch)
    records = []
    async for batch in js_log.read(1, batch=100):
        records.extend(batch)
    assert [r.seq for r in records] == list(range(1, 401))
    assert [int.from_bytes(r.data[:4], "big") for r in records] == list(range(400))
    assert "lost" in caplog.text or "not received" in caplog.text  # the test did lose deliveries
