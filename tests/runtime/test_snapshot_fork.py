"""Snapshot dumps in a forked child (services/runtime/dumper.py).

* The bytes are those the synchronous dump gives at the same seq, for each of the five cores'
  states (a simulated run) and after the parent has moved on (copy-on-write keeps the child's view).
* A child that crashes, raises or hangs is reported with a warning, reaped (no zombie), counted,
  and the service goes on folding and deciding, with its last snapshot standing; after
  ``MAX_FORK_FAILURES`` in a row the runner dumps synchronously.
* ``HORIZON_SNAPSHOT_FORK=0`` turns forking off; at most one child at a time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Any

import pytest

from services.front.sim.buses import InProcessBus
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.traces import SimJob
from services.nodes.spec import local_nodes
from services.runtime.dumper import FORK_VARIABLE, MAX_FORK_FAILURES, SnapshotDumper, fork_dumps_enabled
from services.runtime.jetstream import JetStreamLog
from services.runtime.service import ServiceRunner
from services.runtime.snapshots import DumpPacer, SnapshotUploader
from tests.runtime.test_snapshots import ToyCore, ToyState, caught_up, submissions, until

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not fork_dumps_enabled(), reason="forked dumps need POSIX and os.fork")]


class Saved:
    """An uploader's store: what was offered, in order."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes]] = []

    async def save(self, name: str, seq: int, data: bytes) -> None:
        self.items.append((seq, data))


def make_dumper(dump: Any, *, fork: bool = True, rest: float = 0.0) -> tuple[SnapshotDumper, Saved]:
    saved = Saved()
    return SnapshotDumper("toy", dump, SnapshotUploader("toy", saved.save), pacer=DumpPacer(rest=rest),
                          fork=fork), saved


async def dumped(dumper: SnapshotDumper, state: Any, seq: int) -> None:
    dumper.dump(state, seq)
    await dumper.flush()
    await dumper.uploader.flush()


def assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def simulated_states() -> list[tuple[Any, Any]]:
    """The five cores and their states after a small simulated run (jobs placed, run, ended, queued)."""
    settings = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=4)
    bus = InProcessBus(make_cores(settings), keep_records=True)
    jobs = [SimJob(job_id=f"s{i}", submit_s=i * 5.0, runtime_s=60.0 + (i % 7) * 30, estimate_s=600.0,
                   gpus=1 + i % 3, account="ab"[i % 2], user=f"u{i % 3}") for i in range(40)]
    asyncio.run(simulate(jobs, local_nodes(2, gpus_per_node=4, prefix="sn"), settings, bus))
    return list(bus.cores)


def test_a_forked_dump_gives_the_bytes_of_the_synchronous_dump_for_every_core():
    states = simulated_states()
    assert len(states) == 5

    async def both() -> None:
        for core, state in states:
            forked, by_fork = make_dumper(core.dump)
            inline, by_call = make_dumper(core.dump, fork=False)
            await dumped(forked, state, state.seq)
            await dumped(inline, state, state.seq)
            assert forked.forks == 1 and inline.forks == 0, core.name
            assert by_fork.items == by_call.items == [(state.seq, core.dump(state))], core.name
            assert_reaped(forked.last_child_pid)
            restored = core.load(by_fork.items[0][1])  # and it loads as the state it was
            assert restored is not None and core.dump(restored) == by_call.items[0][1], core.name

    asyncio.run(both())


async def test_the_child_dumps_the_state_as_at_the_fork_while_the_parent_moves_on():
    core = ToyCore()
    state = ToyState()
    state.seq, state.submitted = 7, [f"j{i}" for i in range(100_000)]
    expected = core.dump(state)
    dumper, saved = make_dumper(core.dump)
    dumper.dump(state, 7)
    assert not dumper.ready()  # one child at a time
    state.seq = 8
    state.submitted.clear()  # the parent's next batch mutates the state: the child's copy does not see it
    await dumper.flush()
    await dumper.uploader.flush()
    assert saved.items == [(7, expected)]
    assert dumper.ready() and dumper.failures == 0 and dumper.last_blocked_s < 1.0
    assert_reaped(dumper.last_child_pid)


class Misbehaving:
    """A dump that misbehaves in a forked child only (the parent's own dump is fine)."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.parent = os.getpid()

    def __call__(self, state: Any) -> bytes:
        if os.getpid() != self.parent:
            if self.how == "killed":  # as by the OOM killer
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "exit":
                os._exit(3)
            if self.how == "raise":
                raise RuntimeError("no state here")
            if self.how == "hang":
                time.sleep(600)
        return b"fine"


@pytest.mark.parametrize(("how", "why"), [
    ("killed", "exited before writing its bytes"),
    ("exit", "exited before writing its bytes"),
    ("raise", "the dump raised RuntimeError: no state here"),
    ("hang", "no bytes after"),
])
async def test_a_child_that_fails_is_reported_reaped_and_the_last_snapshot_stands(how, why, caplog, monkeypatch):
    monkeypatch.setattr(SnapshotDumper, "timeout_s", 0.5)
    dumper, saved = make_dumper(Misbehaving(how))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="horizon.snapshots"):
        await dumped(dumper, ToyState(), 5)
    assert why in caplog.text and "the last snapshot stands" in caplog.text
    assert saved.items == [] and dumper.failures == 1 and dumper.fork
    assert time.monotonic() - started < 5
    assert_reaped(dumper.last_child_pid)


async def test_after_failures_in_a_row_it_dumps_in_process(caplog):
    dumper, saved = make_dumper(Misbehaving("exit"))
    with caplog.at_level(logging.WARNING, logger="horizon.snapshots"):
        for seq in range(1, MAX_FORK_FAILURES + 2):
            await dumped(dumper, ToyState(), seq)
    assert dumper.forks == MAX_FORK_FAILURES and dumper.failures == MAX_FORK_FAILURES and not dumper.fork
    assert "dumping in process from now on" in caplog.text
    assert saved.items == [(MAX_FORK_FAILURES + 1, b"fine")]  # the synchronous dump after them


def test_the_variable_turns_forking_off(monkeypatch):
    monkeypatch.setenv(FORK_VARIABLE, "0")
    assert not fork_dumps_enabled() and not make_dumper(bytes, fork=True)[0].fork
    monkeypatch.setenv(FORK_VARIABLE, "1")
    assert fork_dumps_enabled() and make_dumper(bytes)[0].fork and not make_dumper(bytes, fork=False)[0].fork


async def test_a_close_kills_a_child_still_dumping(monkeypatch):
    dumper, saved = make_dumper(Misbehaving("hang"))
    dumper.dump(ToyState(), 1)
    await asyncio.sleep(0.05)
    await dumper.close(grace_s=0.2)
    assert saved.items == []
    assert_reaped(dumper.last_child_pid)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists descriptors through /proc")
async def test_the_child_holds_no_descriptor_of_the_parent_but_stdio(nats_server, js_log):
    dumper, _ = make_dumper(Misbehaving("hang"))
    dumper.dump(ToyState(), 1)  # the parent has a NATS connection open (js_log), and pytest's files
    pid = dumper.last_child_pid
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        held = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
        if len(held) <= 4:
            break
        await asyncio.sleep(0.02)
    assert len(held) == 4 and {0, 1, 2} < held, held  # stdio and its end of the pipe
    assert len(os.listdir("/proc/self/fd")) > 4
    await dumper.close(grace_s=0)
    assert_reaped(pid)


class HangingToy(ToyCore):
    """The toy core of test_snapshots.py whose dump hangs in a forked child while ``hang`` is set."""

    def __init__(self, snapshot_every: int) -> None:
        super().__init__(snapshot_every=snapshot_every)
        self.hang = True
        self.parent = os.getpid()

    def dump(self, state: ToyState) -> bytes:
        if self.hang and os.getpid() != self.parent:
            time.sleep(600)
        return super().dump(state)


async def test_a_service_whose_dump_child_hangs_goes_on_folding_and_deciding(nats_server, js_log, caplog,
                                                                          monkeypatch):
    monkeypatch.setattr(SnapshotDumper, "timeout_s", 2.0)
    await js_log.publish_many(submissions(0, 60))
    log_ = await JetStreamLog.open(nats_server.url, name="toy")
    core = HangingToy(snapshot_every=50)
    runner = ServiceRunner(log_, core)
    assert runner.dumper is not None and runner.dumper.fork
    runner.pacer.rest = 0.0  # a failed dump would otherwise hold the next one back for 9 x 2 s
    try:
        with caplog.at_level(logging.WARNING, logger="horizon.snapshots"):
            await runner.start()  # caught up: a dump is due, and its child hangs
            child = runner.dumper.last_child_pid
            assert runner.dumper.forks == 1 and not runner.dumper.ready()
            # meanwhile the service folds and decides (every seventh submission is rejected)
            await js_log.publish_many(submissions(60, 30))
            await until(lambda: len(runner.state.submitted) == 90 and runner.stats.decisions == 90 // 7,
                        "folding and deciding while the dump child hangs")
            assert not runner.dumper.ready()  # still hung: no second child
            await runner.flush_snapshots()
        assert "no bytes after 2 s: killed" in caplog.text
        assert runner.stats.snapshot_failures == 1 and runner.stats.snapshots_saved == 0
        assert_reaped(child)
        core.hang = False  # the next dump is due after 50 more records, and works
        await js_log.publish_many(submissions(90, 60))
        await caught_up(runner, log_)
        for _ in range(100):  # a dump that came due while the second child ran is taken when it ends (when_ready)
            await runner.flush_snapshots()
            await asyncio.sleep(0.1)
            if runner.dumper.ready():
                break
        await runner.flush_snapshots()
        assert runner.stats.snapshots_saved >= 1 and runner.dumper.forks >= 2 and runner.stats.snapshot_failures == 1
        found = await log_.load_snapshot("toy")
        assert found is not None and found[0] == runner.stats.snapshot_seq
        loaded = core.load(found[1])
        assert loaded is not None and loaded.seq == found[0] and len(loaded.submitted) >= 100
    finally:
        await runner.stop()
        await log_.close()

