"""One reader for the parts of a process (services/runtime/fanout.py), against a real nats-server:
each part gets exactly its records, in order, once, from its own position; a slow part neither loses
records nor makes the reader buffer without bound; a part that fails or stops leaves the others going."""

from __future__ import annotations

import asyncio
from typing import Any

from events import encode
from events.catalogue import ClockTicked, JobSubmitted
from events.codec import DecodeError
from events.subjects import STREAM, event_subject
from services.domain.protocol import Record
from services.runtime.fanout import SharedReader
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing


def _tick(i: int) -> Outgoing:
    e = ClockTicked(id=f"tick-{i}", correlation_id=str(i), now_ts=float(i), ts=float(i), source="clock")
    return Outgoing(event_subject("clock", e), encode(e), e.id)


def _submit(i: int) -> Outgoing:
    return Outgoing("horizon.in.acme.submit", encode(JobSubmitted(id=f"s-{i}", job_id=f"j{i}", tenant="acme")),
                    f"s-{i}")


async def _publish(log_: JetStreamLog, first: int, n: int) -> None:
    """Records ``first..first+n-1``: every third a client input, the others events."""
    await log_.publish_many([_submit(i) if i % 3 == 0 else _tick(i) for i in range(first, first + n)])


class Part:
    """What a runner does with its follower: history, caught up, live; everything noted."""

    def __init__(self, reader: SharedReader, log_: JetStreamLog, from_seq: int, subjects: tuple[str, ...],
                 slow_s: float = 0.0, fail_at: int = 0) -> None:
        self.history: list[int] = []
        self.live: list[int] = []
        self.caught_up_at: int | None = None
        self.events: list[Any] = []
        self.slow_s = slow_s
        self.fail_at = fail_at
        self.follow = reader.follow(log_, self.on_live, from_seq=from_seq, subjects=subjects, history=self.on_history,
                                    on_caught_up=self.on_caught_up, name=f"part-{from_seq}")

    def _note(self, batch: list[Record]) -> None:
        events = getattr(batch, "events", None)
        if events is not None:
            assert len(events) == len(batch)
            self.events.extend(events)

    def on_history(self, batch: list[Record]) -> None:
        assert self.caught_up_at is None, "history after caught up"
        self._note(batch)
        self.history.extend(r.seq for r in batch)

    async def on_live(self, batch: list[Record]) -> None:
        assert self.caught_up_at is not None, "live before caught up"
        if self.fail_at and any(r.seq >= self.fail_at for r in batch):
            raise RuntimeError(f"boom at {self.fail_at}")
        self._note(batch)
        self.live.extend(r.seq for r in batch)
        if self.slow_s:
            await asyncio.sleep(self.slow_s)  # a decision in flight

    def on_caught_up(self, end: int) -> None:
        self.caught_up_at = end

    @property
    def seqs(self) -> list[int]:
        return self.history + self.live


def _expected(first: int, last: int, evt_only: bool) -> list[int]:
    return [s for s in range(first, last + 1) if not (evt_only and s % 3 == 1)]  # seq s holds record s-1


async def _until(check: Any, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def _consumers(log_: JetStreamLog) -> int:
    info = await log_.js.stream_info(STREAM)
    return int(info.state.consumer_count)


async def test_parts_from_different_positions_get_their_records_once_in_order(nats_server):
    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader_log = await JetStreamLog.open(nats_server.url, name="reader", create=False)
    part_logs = [await JetStreamLog.open(nats_server.url, name=f"p{i}", create=False) for i in range(3)]
    reader = SharedReader(reader_log)
    try:
        await _publish(writer, 0, 3000)
        parts = [Part(reader, part_logs[0], 2001, ("horizon.>",)),  # restored from a later snapshot
                 Part(reader, part_logs[1], 1, ("horizon.>",)),  # from the start
                 Part(reader, part_logs[2], 1001, ("horizon.evt.>",))]  # its own filter: events only
        for p in parts:
            await p.follow.start()
        await asyncio.gather(*(p.follow.until_caught_up() for p in parts))
        assert [p.caught_up_at for p in parts] == [3000, 3000, 3000]
        assert await _consumers(writer) == 1  # one consumer for the three
        await _publish(writer, 3000, 500)
        await _until(lambda: all(p.seqs and p.seqs[-1] == 3500 for p in parts))
        for p, first, evt_only in zip(parts, (2001, 1, 1001), (False, False, True), strict=True):
            assert p.seqs == _expected(first, 3500, evt_only)
            assert p.history == _expected(first, 3000, evt_only)
        # Each record decoded at most once (a part that joined after another had caught up read its
        # history alone, as LogFollow does; on a loaded machine that can happen), the same object
        # handed to every part that takes it: the live records came to all three from the reader.
        assert reader.decoded <= 3500
        by_seq = [dict(zip(p.seqs[-len(p.events):], p.events, strict=True)) for p in parts]
        assert by_seq[0][3102] is by_seq[1][3102] is by_seq[2][3102]
        assert isinstance(by_seq[1][3100], JobSubmitted) and isinstance(by_seq[1][3102], ClockTicked)
        assert reader.consumers <= 3  # the first, and a rewind for each part that joined needing more
        assert await _consumers(writer) == 1
        for p in parts:
            await p.follow.stop()
        assert reader.parts == 0
        assert await _consumers(writer) == 0  # the last part out stops the consumer
    finally:
        await reader.close()
        for log_ in (writer, reader_log, *part_logs):
            await log_.close()


async def test_a_part_joining_once_others_follow_reads_its_history_alone_then_joins(nats_server):
    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader_log = await JetStreamLog.open(nats_server.url, name="reader", create=False)
    reader = SharedReader(reader_log)
    try:
        await _publish(writer, 0, 1000)
        first = Part(reader, writer, 1, ("horizon.>",))
        await first.follow.start()
        await first.follow.until_caught_up()
        publishing = asyncio.create_task(_keep_publishing(writer, 1000, 1000))
        late = Part(reader, writer, 1, ("horizon.>",))  # a part restarted after a crash, from seq 1
        await late.follow.start()
        await late.follow.until_caught_up()
        await publishing
        await _until(lambda: first.seqs[-1:] == [2000] and late.seqs[-1:] == [2000])
        assert first.seqs == list(range(1, 2001)) and late.seqs == list(range(1, 2001))
        assert late.caught_up_at is not None and late.history == list(range(1, late.caught_up_at + 1))
        assert reader.consumers == 1  # the live part was not rewound
        assert reader.parts == 2 and await _consumers(writer) == 1
        await first.follow.stop()
        await late.follow.stop()
    finally:
        await reader.close()
        await reader_log.close()
        await writer.close()


async def _keep_publishing(log_: JetStreamLog, first: int, n: int) -> None:
    for start in range(first, first + n, 50):
        await _publish(log_, start, 50)
        await asyncio.sleep(0.01)


async def test_a_slow_part_loses_nothing_and_the_reader_buffers_a_bounded_lag(nats_server):
    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader_log = await JetStreamLog.open(nats_server.url, name="reader", create=False)
    reader = SharedReader(reader_log, max_lag=200)
    try:
        fast = Part(reader, writer, 1, ("horizon.>",))
        slow = Part(reader, writer, 1, ("horizon.>",), slow_s=0.05)
        for p in (fast, slow):
            await p.follow.start()
            await p.follow.until_caught_up()
        most = 0

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, slow.follow.queued, fast.follow.queued)
                await asyncio.sleep(0.002)

        watching = asyncio.create_task(watch())
        await _publish(writer, 0, 5000)
        await _until(lambda: slow.seqs[-1:] == [5000] and fast.seqs[-1:] == [5000], timeout_s=60)
        watching.cancel()
        assert fast.seqs == list(range(1, 5001)) and slow.seqs == list(range(1, 5001))
        assert 0 < most <= 2 * 200  # max_lag, and at most one slice of max_lag past it
        # The slow part took what piled up while it decided as few large batches.
        assert len(slow.live) == 5000
        await fast.follow.stop()
        await slow.follow.stop()
    finally:
        await reader.close()
        await reader_log.close()
        await writer.close()


async def test_a_failing_part_leaves_and_the_others_go_on(nats_server):
    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader_log = await JetStreamLog.open(nats_server.url, name="reader", create=False)
    reader = SharedReader(reader_log, max_lag=100)
    try:
        good = Part(reader, writer, 1, ("horizon.>",))
        bad = Part(reader, writer, 1, ("horizon.>",), fail_at=50)
        stopping = Part(reader, writer, 1, ("horizon.>",))
        for p in (good, bad, stopping):
            await p.follow.start()
            await p.follow.until_caught_up()
        await _publish(writer, 0, 100)
        try:
            await asyncio.wait_for(bad.follow.wait(), 10)
        except RuntimeError as exc:
            assert "boom" in str(exc)
        else:
            raise AssertionError("the part's error was not raised by wait()")
        await stopping.follow.stop()
        await _publish(writer, 100, 2000)  # far more than max_lag: nobody waits for the parts that left
        await _until(lambda: good.seqs[-1:] == [2100])
        assert good.seqs == list(range(1, 2101))
        assert bad.seqs == list(range(1, len(bad.seqs) + 1)) and all(s < 50 for s in bad.seqs)
        assert reader.parts == 1
        await good.follow.stop()
        await bad.follow.stop()
    finally:
        await reader.close()
        await reader_log.close()
        await writer.close()


async def test_undecodable_records_reach_every_part_with_their_error(nats_server):
    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader_log = await JetStreamLog.open(nats_server.url, name="reader", create=False)
    reader = SharedReader(reader_log)
    try:
        await writer.publish("horizon.in.acme.submit", b"not json", msg_id="bad")
        await _publish(writer, 1, 2)
        parts = [Part(reader, writer, 1, ("horizon.>",)) for _ in range(2)]
        for p in parts:
            await p.follow.start()
        for p in parts:
            await p.follow.until_caught_up()
            assert p.seqs == [1, 2, 3]
        # The first to join reads on the shared consumer; the second too, unless the first had already
        # caught up when it joined (it then reads its history alone, undecoded, as LogFollow does).
        for p in parts[: 1 if not parts[1].events else 2]:
            assert isinstance(p.events[0], DecodeError) and isinstance(p.events[1], ClockTicked)
        await _publish(writer, 4, 1)  # a tick
        await _until(lambda: all(p.seqs[-1:] == [4] for p in parts))
        assert all(isinstance(p.events[-1], ClockTicked) for p in parts)  # live, both on the shared reader
        for p in parts:
            await p.follow.stop()
    finally:
        await reader.close()
        await reader_log.close()
        await writer.close()


async def test_if_the_reader_fails_every_part_learns_it_and_a_new_one_starts_afresh(nats_server):
    """The reader's own failure (a bug: here a part's subject test that raises) ends every part's wait
    with it, as a lost consumer would end LogFollow's; the next part to join starts a new consumer."""
    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader_log = await JetStreamLog.open(nats_server.url, name="reader", create=False)
    reader = SharedReader(reader_log)
    try:
        parts = [Part(reader, writer, 1, ("horizon.>",)) for _ in range(2)]
        for p in parts:
            await p.follow.start()
            await p.follow.until_caught_up()
        parts[1].follow.accepts = lambda subject: 1 / 0
        await _publish(writer, 0, 10)
        for p in parts:
            try:
                await asyncio.wait_for(p.follow.wait(), 10)
            except ZeroDivisionError:
                pass
            else:
                raise AssertionError("the reader's failure was not raised by wait()")
        assert reader.parts == 0
        again = Part(reader, writer, 1, ("horizon.>",))
        await again.follow.start()
        await again.follow.until_caught_up()
        await _publish(writer, 10, 5)
        await _until(lambda: again.seqs[-1:] == [15])
        assert again.seqs == list(range(1, 16))
        assert reader.consumers == 2 and await _consumers(writer) == 1
        for p in (*parts, again):
            await p.follow.stop()
        assert await _consumers(writer) == 0
    finally:
        await reader.close()
        await reader_log.close()
        await writer.close()
