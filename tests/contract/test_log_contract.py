"""One contract, two implementations: MemoryLog and JetStreamLog behave alike."""

from __future__ import annotations

import asyncio
import logging
import os

import msgspec
import pytest

from services.runtime.log import LogConflict, Outgoing
from services.domain.protocol import Record
from services.runtime.snapshots import split


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


async def test_a_lingering_follower_takes_records_published_one_by_one_as_one_batch(event_log):
    batches: list[list[int]] = []
    done = asyncio.Event()

    async def handler(batch: list[Record]) -> None:
        batches.append([r.seq for r in batch])
        if sum(map(len, batches)) >= 5:
            done.set()

    follower = await event_log.follow(handler, subjects=("horizon.evt.>",), linger_s=0.5)
    for i in range(5):  # each its own publish, well within the half second after the first
        await event_log.publish("horizon.evt.t.E.a", b"x", msg_id=f"l{i}")
    await asyncio.wait_for(done.wait(), 10)
    await follower.stop()
    assert batches == [[1, 2, 3, 4, 5]]


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


# ---------------------------------------------------------------- snapshots
# A partial or corrupt snapshot is simulated with the two steps of a save, which both
# implementations expose for these tests: ``_write_snapshot_chunks`` then ``_commit_snapshot``.


async def test_snapshot_round_trip(event_log):
    assert await event_log.load_snapshot("scheduling") is None
    await event_log.save_snapshot("scheduling", 42, b"state at 42")
    await event_log.save_snapshot("placement", 7, b"")
    assert await event_log.load_snapshot("scheduling") == (42, b"state at 42")
    assert await event_log.load_snapshot("placement") == (7, b"")
    assert await event_log.load_snapshot("inventory") is None


async def test_the_latest_snapshot_saved_wins(event_log):
    for seq in (10, 30, 20):
        await event_log.save_snapshot("scheduling", seq, f"state {seq}".encode())
    assert await event_log.load_snapshot("scheduling") == (20, b"state 20")


async def test_a_snapshot_larger_than_a_message(event_log):
    data = os.urandom(3 * 1024 * 1024 + 17)  # over the 1 MiB max_payload: chunked
    await event_log.save_snapshot("scheduling", 99, data)
    assert await event_log.load_snapshot("scheduling") == (99, data)
    data2 = os.urandom(2 * 1024 * 1024)
    await event_log.save_snapshot("scheduling", 120, data2)
    assert await event_log.load_snapshot("scheduling") == (120, data2)


async def test_a_partially_written_snapshot_is_never_loaded(event_log):
    await event_log.save_snapshot("scheduling", 10, b"complete")
    # a writer that died after storing chunks, before its manifest
    await event_log._write_snapshot_chunks("scheduling", "20-deadbeef", [b"half of ", b"it"])
    assert await event_log.load_snapshot("scheduling") == (10, b"complete")


async def test_a_corrupt_snapshot_is_ignored_with_a_warning(event_log, caplog):
    await event_log.save_snapshot("scheduling", 10, os.urandom(1_500_000))
    good = await event_log._snapshot_manifest("scheduling")
    bad_manifests = {
        "sha256": msgspec.structs.replace(good, id="11-a", sha256="0" * 64),
        "chunks missing": msgspec.structs.replace(good, id="12-b", chunks=good.chunks + 1),
        "another log": msgspec.structs.replace(good, id="13-c", log_id="HORIZON@another"),
    }
    for reason, manifest in bad_manifests.items():
        garbage = split(b"z" * good.size)  # as many chunks and bytes as the good one, other bytes
        first = await event_log._write_snapshot_chunks("scheduling", manifest.id, garbage)
        await event_log._commit_snapshot(msgspec.structs.replace(manifest, first_chunk_seq=first))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert await event_log.load_snapshot("scheduling") is None
        assert reason in caplog.text
    # a good one after them is trusted again
    await event_log.save_snapshot("scheduling", 30, b"fine")
    assert await event_log.load_snapshot("scheduling") == (30, b"fine")
