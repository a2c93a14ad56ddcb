"""One contract, two implementations: MemoryLog and JetStreamLog behave alike."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.log import LogConflict, Outgoing, Record


async def collect(log, **kw) -> list[Record]:
    out: list[Record] = []
    async for batch in log.read(**kw):
        out.extend(batch)
    return out


async def test_publish_is_deduplicated_by_msg_id(event_log):
    first = await event_log.publish("horizon.in.acme.submit", b"{}", msg_id="job-1")
    again = await event_log.publish("horizon.in.acme.submit", b"{}", msg_id="job-1")
    assert not first.duplicate
    assert again.duplicate and again.seq == first.seq
    assert await event_log.last_seq() == 1


async def test_expected_last_subject_sequence(event_log):
    subject = "horizon.evt.scheduling.Lease.x"
    ack = await event_log.publish(subject, b"a", msg_id="a", expected_last_subject_seq=0)
    await event_log.publish(subject, b"b", msg_id="b", expected_last_subject_seq=ack.seq)
    with pytest.raises(LogConflict):
        await event_log.publish(subject, b"c", msg_id="c", expected_last_subject_seq=ack.seq)


async def test_replay_from_sequence_is_in_log_order(event_log):
    items = [Outgoing(f"horizon.evt.test.E.{i % 7}", str(i).encode(), f"m{i}") for i in range(2500)]
    acks = await event_log.publish_many(items)
    assert [a.seq for a in acks] == list(range(1, 2501))
    records = await collect(event_log, from_seq=1)
    assert [r.seq for r in records] == list(range(1, 2501))
    assert [r.data for r in records] == [str(i).encode() for i in range(2500)]
    tail = await collect(event_log, from_seq=2001)
    assert [r.seq for r in tail] == list(range(2001, 2501))
    assert all(r.time > 0 for r in tail)
    filtered = await collect(event_log, from_seq=1, subjects=("horizon.evt.test.E.3",))
    assert [int(r.data) for r in filtered] == [i for i in range(2500) if i % 7 == 3]
    bounded = await collect(event_log, from_seq=10, until_seq=20)
    assert [r.seq for r in bounded] == list(range(10, 21))


async def test_replay_of_an_empty_selection_ends(event_log):
    await event_log.publish("horizon.evt.test.E.1", b"x", msg_id="x")
    assert await collect(event_log, subjects=("horizon.evt.nobody.>",)) == []
    assert await collect(event_log, from_seq=5) == []


async def test_publish_many_reports_duplicates(event_log):
    await event_log.publish_many([Outgoing("horizon.evt.t.E.a", b"1", "id-1"), Outgoing("horizon.evt.t.E.a", b"2", "id-2")])
    acks = await event_log.publish_many(
        [Outgoing("horizon.evt.t.E.a", b"2", "id-2"), Outgoing("horizon.evt.t.E.a", b"3", "id-3")]
    )
    assert [a.duplicate for a in acks] == [True, False]
    assert await event_log.last_seq() == 3


async def test_follow_delivers_existing_then_new(event_log):
    await event_log.publish_many([Outgoing("horizon.evt.t.E.a", str(i).encode(), f"f{i}") for i in range(10)])
    seen: list[int] = []
    grown = asyncio.Event()

    async def handler(batch: list[Record]) -> None:
        seen.extend(r.seq for r in batch)
        if len(seen) >= 15:
            grown.set()

    follower = await event_log.follow(handler, from_seq=3, subjects=("horizon.evt.>",))
    await event_log.publish_many([Outgoing("horizon.evt.t.E.a", b"n", f"g{i}") for i in range(7)])
    await asyncio.wait_for(grown.wait(), 10)
    await follower.stop()
    assert seen == list(range(3, 18))


async def test_durable_consumer_resumes_after_its_last_ack(event_log):
    await event_log.publish_many([Outgoing("horizon.in.acme.submit", str(i).encode(), f"d{i}") for i in range(100)])
    consumer = await event_log.durable("projection-test", subjects=("horizon.in.>",))
    got: list[int] = []
    while len(got) < 40:
        for delivery in await consumer.fetch(10, timeout_s=2):
            got.append(delivery.record.seq)
            await delivery.ack()
            if len(got) == 40:
                break
    await consumer.stop()
    # a new instance (a restarted service) resumes after seq 40; nothing missed, nothing twice
    consumer = await event_log.durable("projection-test", subjects=("horizon.in.>",))
    while len(got) < 100:
        batch = await consumer.fetch(50, timeout_s=2)
        assert batch, "consumer stalled"
        for delivery in batch:
            got.append(delivery.record.seq)
            await delivery.ack()
    await consumer.stop()
    assert got == list(range(1, 101))


async def test_dead_letters_keep_the_error(event_log):
    ack = await event_log.publish("horizon.in.acme.submit", b"junk", msg_id="junk")
    record = Record(ack.seq, "horizon.in.acme.submit", b"junk", 0.0)
    await event_log.dead_letter("submission", record, "not a JSON object:\nline two")
    await event_log.dead_letter("submission", record, "not a JSON object:\nline two")  # idempotent
    letters = await event_log.dead_letters("submission")
    assert len(letters) == 1
    assert letters[0].data == b"junk" and letters[0].seq == ack.seq
    assert letters[0].subject == "horizon.in.acme.submit"
    assert letters[0].error == "not a JSON object: line two"
