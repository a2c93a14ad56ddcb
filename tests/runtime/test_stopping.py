"""Stopping for sure (issue 31): ``horizon up`` with tens of thousands of pending jobs exits within
seconds of Ctrl-C.

What kept it alive: the parts stopped one after another, so while the first wound down the others
went on deciding, snapshotting and answering on the shared event loop, and the projections' stop
(a last store of 60,000 jobs) outlasted the 10 s after which ``Stack.stop`` cancels a part again;
that second cancellation cut the stop short before the SQLite databases were closed, and
aiosqlite's worker thread is no daemon: the process printed "stopped" and never exited.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time

import nats
import pytest

from events import catalogue as c
from events.codec import encode
from projections.jobs import JobsProjection
from projections.scheduling import SchedulerView
from projections.standing import StandingStore
from services.domain.queue.fold import QueueFold
from services.front.host.stack import every_step
from tests.front.test_cli_up import free_port

pytestmark = pytest.mark.timeout(120)
HORIZON = [sys.executable, "-m", "services.front.cli.main"]


def sqlite_threads() -> list[threading.Thread]:
    """aiosqlite's worker threads still running (one per open connection)."""
    return [t for t in threading.enumerate() if getattr(t, "_target", None) is not None
            and t._target.__name__ == "_connection_worker_thread"]  # type: ignore[attr-defined]


async def test_a_stop_cancelled_again_still_closes_the_projections_databases(js_log, tmp_path):
    """Each stop is cancelled at once (as a second cancel of ``Stack.stop`` cuts a slow stop short),
    yet both databases are closed and their threads end: none is left to keep the process alive."""
    before = set(sqlite_threads())
    projection = JobsProjection(js_log, tmp_path / "jobs.sqlite")
    await projection.open()
    view = SchedulerView(js_log, js_log.nc, QueueFold(), store=StandingStore(tmp_path / "standing.sqlite"))
    await projection.start()
    await view.start()
    assert len(set(sqlite_threads()) - before) == 2

    stopping = asyncio.create_task(every_step(view.stop, projection.stop))
    await asyncio.sleep(0)  # each step begins, then the cancellation arrives mid-way
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    deadline = time.monotonic() + 10
    while set(sqlite_threads()) - before and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not set(sqlite_threads()) - before
    assert projection.db is None and view.store is not None and view.store.db is None


async def test_every_step_runs_each_step_and_raises_the_first_error():
    ran: list[str] = []

    async def fails() -> None:
        ran.append("fails")
        raise asyncio.CancelledError

    async def closes() -> None:
        ran.append("closes")

    with pytest.raises(asyncio.CancelledError):
        await every_step(fails, closes)
    assert ran == ["fails", "closes"]


async def _flood(url: str, n: int) -> None:
    """``n`` one-GPU submissions straight into the stream (no accounts: the operator's way)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    now = time.time()
    for start in range(0, n, 1000):
        await asyncio.gather(*(js.publish(
            "horizon.in.default.submit",
            encode(c.JobSubmitted(ts=now, source="test", correlation_id=f"f{i}", job_id=f"f{i}", tenant="default",
                                  command=["true"], resources=c.ResourceRequest(gpus=1), sim_runtime_s=3600.0)),
            headers={"Nats-Msg-Id": f"f{i}"}) for i in range(start, min(n, start + 1000))))
    await nc.close()


def test_up_with_twenty_thousand_pending_jobs_stops_within_seconds_of_ctrl_c(tmp_path):
    port = free_port()
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--ui-port", "0", "--data-dir", str(tmp_path / "h"),
                           "--nodes", "2", "--gpus-per-node", "2", "--executor", "sim"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        url = up.stdout.readline().strip()
        assert url == f"nats://127.0.0.1:{port}", up.stderr.read()
        asyncio.run(_flood(url, 20_000))
        time.sleep(3)  # the services busy with them: accepting, queueing, snapshotting
        sent = time.monotonic()
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    err = up.stderr.read()
    assert code == 0 and err.rstrip().endswith("stopped"), err
    assert took < 15, f"{took:.1f} s from SIGINT to exit"  # 6 s here (5 s of it a last snapshot's grace)
