"""The one reading loop (services/runtime/follow.py): history to the end, caught up, then the live tail."""

from __future__ import annotations

import asyncio

from events import encode
from events.catalogue import JobSubmitted
from services.domain.protocol import Record
from services.runtime.follow import LogFollow, dead_letter_to, each, read_through
from services.runtime.log import Outgoing
from services.runtime.memory_log import MemoryLog


async def _publish(log_, n: int, first: int = 0) -> None:
    await log_.publish_many([Outgoing("horizon.evt.t.E.a", str(i).encode(), f"r{i}") for i in range(first, first + n)])


async def test_history_then_caught_up_then_live(event_log):
    await _publish(event_log, 6)
    order: list[tuple[str, int]] = []
    grown = asyncio.Event()

    def history(batch: list[Record]) -> None:  # a plain function is a handler too
        order.extend(("history", r.seq) for r in batch)

    async def live(batch: list[Record]) -> None:
        order.extend(("live", r.seq) for r in batch)
        if order[-1][1] >= 9:
            grown.set()

    async def caught_up(end: int) -> None:
        order.append(("caught up", end))

    follow = LogFollow(event_log, live, from_seq=3, history=history, on_caught_up=caught_up,
                       subjects=("horizon.evt.>",))
    await follow.start()
    assert follow.end == 6
    await follow.until_caught_up()
    assert follow.caught_up.is_set()
    await _publish(event_log, 3, first=6)
    await asyncio.wait_for(grown.wait(), 10)
    await follow.stop()
    await follow.stop()  # idempotent
    assert order == [("history", s) for s in range(3, 7)] + [("caught up", 6)] + [("live", s) for s in (7, 8, 9)]


async def test_a_position_past_the_end_follows_from_there(event_log):
    """A read model whose rows are ahead of the log's end (it was rebuilt elsewhere) neither
    re-reads nor skips: it follows from its own position."""
    await _publish(event_log, 3)
    seen: list[int] = []
    follow = LogFollow(event_log, lambda batch: seen.extend(r.seq for r in batch), from_seq=6)
    await follow.start()
    await follow.until_caught_up()
    await _publish(event_log, 4, first=3)
    for _ in range(200):  # the two records may come in one batch or two
        if seen and seen[-1] >= 7:
            break
        await asyncio.sleep(0.05)
    await follow.stop()
    assert seen == [6, 7]


async def test_read_through_reads_to_the_end_as_of_the_call():
    log_ = MemoryLog()
    await _publish(log_, 5)
    await log_.publish("horizon.in.acme.submit", encode(JobSubmitted(job_id="j", tenant="acme")), msg_id="j")
    seen: list[int] = []
    end = await read_through(log_, lambda batch: seen.extend(r.seq for r in batch), from_seq=2,
                             subjects=("horizon.evt.>",))
    assert end == 6 and seen == [2, 3, 4, 5]
    assert await read_through(log_, lambda batch: seen.append(-1), from_seq=7) == 6
    assert seen[-1] == 5  # nothing past the end


async def test_each_decodes_and_skips_or_dead_letters_as_told():
    log_ = MemoryLog()
    await log_.publish("horizon.in.acme.submit", encode(JobSubmitted(job_id="a", tenant="acme")), msg_id="a")
    await log_.publish("horizon.in.acme.submit", b"not json", msg_id="bad")
    await log_.publish("horizon.in.acme.submit", encode(JobSubmitted(job_id="b", tenant="acme")), msg_id="b")
    jobs: list[str] = []
    await read_through(log_, each(lambda record, event: jobs.append(event.job_id)))
    assert jobs == ["a", "b"] and await log_.dead_letters() == []
    await read_through(log_, each(lambda record, event: None, undecodable=dead_letter_to(log_, "submission")))
    assert [d.seq for d in await log_.dead_letters("submission")] == [2]


async def test_a_failing_handler_is_raised_by_wait():
    log_ = MemoryLog()
    await _publish(log_, 2)

    def broken(batch: list[Record]) -> None:
        raise RuntimeError("boom")

    follow = LogFollow(log_, broken)
    await follow.start()
    try:
        await asyncio.wait_for(follow.wait(), 5)
    except RuntimeError as exc:
        assert "boom" in str(exc)
    else:
        raise AssertionError("the handler's error was not raised")
    finally:
        await follow.stop()


async def test_next_seq_is_the_first_record_of_a_filter_past_a_position(event_log):
    """What the layout's probe asks instead of the filter's last record (a visit of every subject it
    matches, on JetStream): is there an event past the state?"""
    await _publish(event_log, 3)  # 1-3: events
    await event_log.publish("horizon.in.acme.submit", encode(JobSubmitted(job_id="j", tenant="acme")), msg_id="j")
    assert await event_log.next_seq("horizon.evt.>", 0) == 1
    assert await event_log.next_seq("horizon.evt.>", 2) == 3
    assert await event_log.next_seq("horizon.evt.>", 3) == 0  # only an input past it
    assert await event_log.next_seq("horizon.in.>", 1) == 4
    assert await event_log.next_seq("horizon.evt.>", 9) == 0  # past the end
