"""Snapshots on the real runner and the real nats-server, with a toy core defined here.

The toy core counts event types, lists the jobs submitted, and answers every
seventh submission with a ``JobRejected`` (so its state includes its own
decisions, and a restart must not decide them again). Its ``dump`` embeds a
version; ``load`` refuses another one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import msgspec
import pytest

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import WHOLE_LOG, event_subject, input_subject
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.domain.protocol import Record
from services.runtime.service import ServiceRunner
from services.domain.protocol import CoreState, snapshot_interval
from services.runtime.snapshots import SnapshotUploader

pytestmark = pytest.mark.timeout(60)


class ToyState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.submitted: list[str] = []
        self.to_reject: dict[str, int] = {}  # job -> the seq of its submission


class _Dump(msgspec.Struct, kw_only=True):
    version: str
    seq: int
    now: float
    counts: dict[str, int]
    submitted: list[str]
    to_reject: dict[str, int]


class ToyCore:
    name: ClassVar[str] = "toy"
    subjects = WHOLE_LOG
    virtual_time = False

    def __init__(self, snapshot_every: int = 100, version: str = "toy-1") -> None:
        self.snapshot_every = snapshot_every
        self.version = version

    def initial(self) -> ToyState:
        return ToyState()

    def evolve(self, state: ToyState, event: Event, record: Record) -> ToyState:
        state.counts[event.event_type] = state.counts.get(event.event_type, 0) + 1
        if isinstance(event, c.JobSubmitted):
            state.submitted.append(event.job_id)
            if len(state.submitted) % 7 == 0:
                state.to_reject[event.job_id] = record.seq
        elif isinstance(event, c.JobRejected):
            state.to_reject.pop(event.job_id, None)
        return state

    def decide(self, state: ToyState) -> list[Event]:
        return [
            c.JobRejected(id=f"toy/JobRejected/{job}", ts=state.now, correlation_id=job, source=self.name,
                          job_id=job, tenant="acme", reason=f"seventh, submitted at {seq}")
            for job, seq in sorted(state.to_reject.items())
        ]

    def dump(self, state: ToyState) -> bytes:
        return msgspec.msgpack.encode(_Dump(version=self.version, seq=state.seq, now=state.now, counts=state.counts,
                                            submitted=state.submitted, to_reject=state.to_reject))

    def load(self, data: bytes) -> ToyState | None:
        body = msgspec.msgpack.decode(data, type=_Dump)
        if body.version != self.version:
            return None
        state = ToyState()
        state.seq, state.now = body.seq, body.now
        state.counts, state.submitted, state.to_reject = body.counts, body.submitted, body.to_reject
        return state


def submissions(start: int, n: int) -> list[Outgoing]:
    out = []
    for i in range(start, start + n):
        job = f"t-{i:05d}"
        event = c.JobSubmitted(job_id=job, tenant="acme", resources=c.ResourceRequest(gpus=1))
        out.append(Outgoing(input_subject("acme", "submit"), encode(event), job))
    return out


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)


class Services:
    """Runners on their own connections, as separate processes would be; all stopped at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened: list[tuple[ServiceRunner[Any], JetStreamLog]] = []

    async def start(self, core: ToyCore, *, snapshots: bool = True,
                    spy: Callable[[int], Awaitable[None]] | None = None) -> ServiceRunner[Any]:
        log_ = await JetStreamLog.open(self.url, name="toy")
        if spy is not None:
            save = log_.save_snapshot

            async def observed(name: str, seq: int, data: bytes) -> None:
                await spy(seq)
                await save(name, seq, data)

            log_.save_snapshot = observed  # type: ignore[method-assign]
        runner = ServiceRunner(log_, core, snapshots=snapshots)
        await runner.start()
        self.opened.append((runner, log_))
        return runner

    async def stop(self, runner: ServiceRunner[Any]) -> None:
        for pair in list(self.opened):
            if pair[0] is runner:
                self.opened.remove(pair)
                await runner.stop()
                await pair[1].close()

    async def close(self) -> None:
        for runner, _ in list(self.opened):
            await self.stop(runner)


@pytest.fixture
async def services(nats_server):
    s = Services(nats_server.url)
    try:
        yield s
    finally:
        await s.close()


async def caught_up(runner: ServiceRunner[Any], log_: JetStreamLog) -> None:
    """Until the runner applied the whole log and its own decisions came back."""
    async def settled() -> bool:
        return runner.state.seq >= await log_.last_seq() and runner.state.seq >= runner.awaiting

    deadline = asyncio.get_running_loop().time() + 10
    while not await settled():
        assert asyncio.get_running_loop().time() < deadline, "runner did not catch up"
        await asyncio.sleep(0.02)


async def test_restart_from_a_snapshot_equals_a_full_replay(services, js_log):
    await js_log.publish_many(submissions(0, 250))
    first = await services.start(ToyCore(snapshot_every=100))
    await caught_up(first, js_log)
    await first.flush_snapshots()
    assert first.stats.restored_from_seq == 0
    assert first.stats.snapshots_saved >= 1  # after catching up with 250+ records
    for start in range(250, 400, 30):  # the live tail, in several batches
        await js_log.publish_many(submissions(start, 30))
        await until(lambda: first.state.seq >= first.awaiting and len(first.state.submitted) >= start + 30, "tail")
    await caught_up(first, js_log)
    await first.flush_snapshots()
    assert first.stats.snapshots_saved >= 2
    # Read after the stop: a dump that came due while the pacer rested is taken when it is ready, which
    # can be after the flush, and a graceful stop lets it be stored.
    await services.stop(first)
    snapshot_seq = first.stats.snapshot_seq
    await js_log.publish_many(submissions(400, 25))  # while it is down
    end = await js_log.last_seq()
    assert snapshot_seq < end

    restarted = await services.start(ToyCore(snapshot_every=100))
    full = await services.start(ToyCore(snapshot_every=100), snapshots=False)
    await caught_up(restarted, js_log)
    await caught_up(full, js_log)
    assert restarted.stats.restored_from_seq == snapshot_seq
    assert full.stats.restored_from_seq == 0
    core = ToyCore()
    assert core.dump(restarted.state) == core.dump(full.state)
    assert len(restarted.state.submitted) == 425
    # the restarted service answered only the sevenths that arrived while it was down (the 406th,
    # 413th and 420th submissions), nothing twice; the full replay, started after, had nothing left
    assert (restarted.stats.decisions, restarted.stats.duplicates) == (3, 0)
    assert (full.stats.decisions, full.stats.duplicates) == (0, 0)
    counts = restarted.state.counts
    assert counts["JobRejected"] == 425 // 7 and not restarted.state.to_reject


async def test_an_incompatible_snapshot_means_a_full_replay(services, js_log, caplog):
    await js_log.publish_many(submissions(0, 120))
    old = await services.start(ToyCore(snapshot_every=50, version="toy-1"))
    await caught_up(old, js_log)
    await old.flush_snapshots()
    assert old.stats.snapshots_saved == 1
    await services.stop(old)
    with caplog.at_level(logging.WARNING, logger="horizon.service"):
        new = await services.start(ToyCore(snapshot_every=50, version="toy-2"))
    assert new.stats.restored_from_seq == 0
    assert "another version or configuration" in caplog.text
    await caught_up(new, js_log)
    assert ToyCore(version="x").dump(new.state) == ToyCore(version="x").dump(old.state)
    # the new version's own snapshot (written after its full replay) is trusted by it
    await new.flush_snapshots()
    await services.stop(new)
    again = await services.start(ToyCore(snapshot_every=50, version="toy-2"))
    assert again.stats.restored_from_seq == new.stats.snapshot_seq > 0


async def test_a_snapshot_past_the_end_of_the_log_is_not_trusted(services, js_log, caplog):
    await js_log.publish_many(submissions(0, 10))
    forged = ToyCore().dump(ToyState())  # a state "at seq 0" claimed to be at 5,000
    await js_log.save_snapshot("toy", 5_000, forged)
    with caplog.at_level(logging.WARNING, logger="horizon.service"):
        runner = await services.start(ToyCore(snapshot_every=1_000))
    assert runner.stats.restored_from_seq == 0
    assert "past the end of the log" in caplog.text
    await caught_up(runner, js_log)
    assert len(runner.state.submitted) == 10
    # a state whose own seq disagrees with the snapshot's is refused too
    await js_log.save_snapshot("toy", 3, forged)
    with caplog.at_level(logging.WARNING, logger="horizon.service"):
        other = await services.start(ToyCore(snapshot_every=1_000))
    assert other.stats.restored_from_seq == 0
    assert "the snapshot says 3" in caplog.text


async def test_snapshots_are_taken_every_k_records(services, js_log):
    saved: list[int] = []

    async def spy(seq: int) -> None:
        saved.append(seq)

    runner = await services.start(ToyCore(snapshot_every=50), spy=spy)
    assert saved == []  # an empty log: nothing to snapshot
    for start in range(0, 300, 10):
        await js_log.publish_many(submissions(start, 10))
        await until(lambda: len(runner.state.submitted) >= start + 10 and runner.state.seq >= runner.awaiting,
                    "a round")
        await runner.flush_snapshots()
    await caught_up(runner, js_log)
    await runner.flush_snapshots()
    assert saved, "no snapshot"
    assert all(b - a >= 50 for a, b in zip([0, *saved], saved, strict=False))
    # no gap of more than K plus one round (10 inputs and their answers) without a snapshot
    assert all(b - a < 50 + 12 for a, b in zip([0, *saved], saved, strict=False))
    assert runner.stats.snapshots_saved == len(saved) and runner.stats.snapshot_seq == saved[-1]
    # K = 0 disables them: nothing saved, nothing loaded
    off = ToyCore(snapshot_every=0)
    assert snapshot_interval(off) == 0
    quiet = await services.start(off, spy=spy)
    await caught_up(quiet, js_log)
    assert quiet.stats.restored_from_seq == 0 and quiet.stats.snapshots_saved == 0


async def test_a_failed_upload_is_logged_and_the_service_goes_on(services, js_log, caplog):
    calls = 0

    async def failing_once(seq: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("the snapshot store is away")

    await js_log.publish_many(submissions(0, 60))
    with caplog.at_level(logging.WARNING, logger="horizon.snapshots"):
        runner = await services.start(ToyCore(snapshot_every=50), spy=failing_once)
        await runner.flush_snapshots()
    assert "not saved" in caplog.text and runner.stats.snapshot_failures == 1
    # Not this test's subject: the pacer's rest after the first dump (9x its encoding's wall time, long
    # on a loaded machine) could still run when the tail came, and an idle runner dumps at a record only
    runner.pacer.rest, runner.pacer.not_before = 0.0, float("-inf")
    await js_log.publish_many(submissions(60, 60))
    await until(lambda: len(runner.state.submitted) == 120, "the tail after a failed upload")
    await caught_up(runner, js_log)
    await runner.flush_snapshots()
    assert runner.stats.snapshots_saved == 1 and await js_log.load_snapshot("toy") is not None


async def test_a_dump_the_pacer_held_back_is_taken_when_it_may_be_with_no_record_after(services, js_log):
    saved: list[int] = []

    async def spy(seq: int) -> None:
        saved.append(seq)

    await js_log.publish_many(submissions(0, 60))
    runner = await services.start(ToyCore(snapshot_every=50), spy=spy)
    await runner.flush_snapshots()
    assert len(saved) == 1
    now = [1000.0]  # the pacer's clock, frozen: resting for one more second after that dump
    runner.pacer.clock, runner.pacer.not_before = (lambda: now[0]), 1001.0
    await js_log.publish_many(submissions(60, 60))
    await until(lambda: len(runner.state.submitted) == 120, "the tail")
    await caught_up(runner, js_log)
    await asyncio.sleep(0.3)
    assert len(saved) == 1 and not runner.dumper.ready()  # due, held back; and no record is coming
    now[0] = 1001.0  # the rest is over
    await until(lambda: len(saved) == 2, "the held-back dump, with no record after it")
    assert saved[-1] == runner.state.seq == await js_log.last_seq()


async def test_a_newer_dump_supersedes_a_queued_one():
    gate = asyncio.Event()
    stored: list[int] = []

    async def slow_save(name: str, seq: int, data: bytes) -> None:
        await gate.wait()
        stored.append(seq)

    uploader = SnapshotUploader("toy", slow_save)
    uploader.offer(10, b"a")
    await asyncio.sleep(0)  # the first upload is under way
    uploader.offer(20, b"b")
    uploader.offer(30, b"c")  # replaces 20, still queued
    assert uploader.busy
    gate.set()
    await uploader.flush()
    assert stored == [10, 30] and uploader.superseded == 1 and uploader.saved_seq == 30


def test_the_pacer_keeps_dumps_to_a_tenth_of_the_time():
    from services.runtime.snapshots import DumpPacer

    now = [100.0]
    pacer = DumpPacer(rest=9.0, clock=lambda: now[0])
    assert pacer.ready()  # the first dump waits for nothing

    def dump() -> bytes:
        now[0] += 2.0  # a dump of a big state: 2 s
        return b"state"

    assert pacer.timed(dump) == b"state" and pacer.last_s == 2.0
    now[0] += 17.9
    assert not pacer.ready()  # 9 x 2 s must pass after it ended
    now[0] += 0.1
    assert pacer.ready()
    pacer.timed(lambda: b"small")  # a quick dump (0 s) lets the next come at once
    assert pacer.ready()
