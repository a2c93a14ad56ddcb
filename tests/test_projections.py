"""A projection killed mid-stream and restarted has exactly the rows of one rebuilt from scratch
(both read models: jobs, and the scheduler's standing: queue, nodes, allocations, usage)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events.codec import encode
from services.agent.app import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.sim.driver import InProcessBus, SimSettings, make_cores, simulate
from services.sim.traces import SimJob

pytestmark = pytest.mark.timeout(240)
HORIZON = [sys.executable, "-m", "services.cli.main"]


def _workload(n: int) -> list[SimJob]:
    jobs = []
    for i in range(n):
        cls = ("critical", "high", "normal", "normal", "low")[i % 5]
        jobs.append(SimJob(f"p{i:04d}", float(i * 7 % 900), 60.0 + (i * 37) % 600, 600.0 + (i * 37) % 600,
                           gpus=1 + i % 8, priority_class=cls, account=f"acct{i % 3}", user=f"u{i % 7}",
                           exit_code=1 if i % 23 == 0 else 0, restart_policy="on-failure", max_retries=1))
    return jobs


def _log_records(n: int):
    settings = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=8)
    bus = InProcessBus(make_cores(settings), keep_records=True)
    asyncio.run(simulate(_workload(n), local_nodes(8, gpus_per_node=8, prefix="n"), settings, bus))
    return bus.records


async def _publish(url: str, records) -> int:
    log_ = await JetStreamLog.open(url, name="test-loader")
    try:
        for i in range(0, len(records), 2000):
            chunk = records[i:i + 2000]
            await log_.publish_many([Outgoing(r.subject, r.data, f"load-{r.seq}") for r in chunk])
        return await log_.last_seq()
    finally:
        await log_.close()


def _position(db: Path, projection: str = "jobs") -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            row = con.execute("SELECT last_seq FROM tracking WHERE projection = ?", (projection,)).fetchone()
            return row[0] if row else 0
    except sqlite3.OperationalError:
        return 0  # the schema is not there yet


JOBS_TABLES = ("jobs", "job_events", "attempts", "decisions", "tracking")
STANDING_TABLES = ("queue", "nodes", "allocations", "usage", "usage_history", "settings", "tracking")


def _dump(db: Path, tables: tuple[str, ...] = JOBS_TABLES) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as con:
        return {table: con.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall() for table in tables}


def _service(url: str, data_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([*HORIZON, "service", "projections", "--nats", url, "--data-dir", str(data_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_killed_projection_restarts_into_the_rows_of_a_rebuild(nats_server, tmp_path):
    records = _log_records(200)
    asyncio.run(_publish(nats_server.url, records))
    last_evt = max(i + 1 for i, r in enumerate(records) if r.subject.startswith("horizon.evt."))
    killed_dir, rebuilt_dir = tmp_path / "killed", tmp_path / "rebuilt"
    db = killed_dir / "projections" / "jobs.sqlite"

    proc = _service(nats_server.url, killed_dir)
    killed_at = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            killed_at = _position(db)
            if killed_at > 0:
                os.kill(proc.pid, signal.SIGKILL)  # mid-stream, no goodbye
                break
            time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert 0 < killed_at < last_evt, (killed_at, last_evt)

    standing = killed_dir / "projections" / "standing.sqlite"
    proc = _service(nats_server.url, killed_dir)  # restart: resumes from its own position
    try:
        deadline = time.monotonic() + 120
        while _position(db) < last_evt or _position(standing, "standing") < len(records):
            assert time.monotonic() < deadline, f"stuck at {_position(db)} of {last_evt}"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    out = subprocess.run([*HORIZON, "projections", "rebuild", "--nats", nats_server.url, "--data-dir",
                          str(rebuilt_dir)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"jobs read model rebuilt to log seq {last_evt}" in out.stdout
    assert f"standing read model rebuilt to log seq {len(records)}" in out.stdout
    killed, rebuilt = _dump(db), _dump(rebuilt_dir / "projections" / "jobs.sqlite")
    assert len(rebuilt["jobs"]) == 200 and len(rebuilt["job_events"]) > 2_000
    assert len(rebuilt["attempts"]) >= 200 and len(rebuilt["decisions"]) > 1_000
    assert any(row[7] == "PREEMPTED" for row in rebuilt["attempts"])  # outcome of a preempted attempt kept
    for table in ("jobs", "job_events", "attempts", "decisions", "tracking"):
        assert killed[table] == rebuilt[table], table
    killed, rebuilt = _dump(standing, STANDING_TABLES), _dump(rebuilt_dir / "projections" / "standing.sqlite",
                                                              STANDING_TABLES)
    assert len(rebuilt["nodes"]) == 8 and rebuilt["usage"]  # (the log spans seconds: no hour of usage history)
    for table in STANDING_TABLES:
        assert killed[table] == rebuilt[table], table
