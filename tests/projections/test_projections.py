"""A projection killed mid-stream and restarted has exactly the rows of one rebuilt from scratch
(both read models: jobs, and the scheduler's standing: queue, nodes, allocations, usage, and the
fold the standing resumes from)."""

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

from events.codec import decode
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from services.domain.jobs import JobState, JobTable

pytestmark = pytest.mark.timeout(240)
HORIZON = [sys.executable, "-m", "services.front.cli.main"]


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


def _tables(db: Path) -> tuple[str, ...]:
    """Every table of the database (rows, position, stored fold: all of it is compared)."""
    with sqlite3.connect(db) as con:
        return tuple(sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")))


def _dump(db: Path, tables: tuple[str, ...] = JOBS_TABLES) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as con:
        return {table: con.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall() for table in tables}


def _service(url: str, data_dir: Path, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen([*HORIZON, "service", "projections", "--nats", url, "--data-dir", str(data_dir)],
                            stdout=subprocess.DEVNULL, stderr=stderr)


def _waiting_after_each(records) -> list[int]:
    """How many jobs wait (pending or held) once each record is applied."""
    table, out = JobTable(), []
    for r in records:
        table.apply(decode(r.data), r.seq, r.time)
        out.append(sum(1 for j in table.jobs.values() if j.state in (JobState.PENDING, JobState.HELD)))
    return out


def _standing_at(db: Path) -> tuple[int, int, int]:
    """(rows' sequence, queued jobs, sequence of the stored fold), read in one statement: one snapshot."""
    if not db.exists():
        return 0, 0, 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            row = con.execute("SELECT (SELECT last_seq FROM tracking WHERE projection = 'standing'), "
                              "(SELECT COUNT(*) FROM queue), (SELECT seq FROM fold_state)").fetchone()
    except sqlite3.OperationalError:
        return 0, 0, 0  # the schema is not there yet
    return tuple(v or 0 for v in row)  # type: ignore[return-value]


def test_a_killed_projection_restarts_into_the_rows_of_a_rebuild(nats_server, tmp_path):
    """SIGKILL once the standing store has written a non-empty queue (and its fold), with more of
    the log still to come; restart; every table of both databases equals a rebuild's, and the
    log ends with jobs still queued and running, so queue and allocations are compared full."""
    records = _log_records(200)
    waiting = _waiting_after_each(records)
    end = max(range(len(records)), key=lambda i: (waiting[i], -i)) + 1  # where the most jobs wait
    records = records[:end]
    first = len(records) // 2  # published before the kill; the rest while the projection is dead
    assert waiting[end - 1] >= 20 and waiting[first - 1] >= 5, (waiting[end - 1], waiting[first - 1])
    asyncio.run(_publish(nats_server.url, records[:first]))
    killed_dir, rebuilt_dir = tmp_path / "killed", tmp_path / "rebuilt"
    jobs_db = killed_dir / "projections" / "jobs.sqlite"
    standing = killed_dir / "projections" / "standing.sqlite"

    proc = _service(nats_server.url, killed_dir)
    at_kill = (0, 0, 0)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            at_kill = _standing_at(standing)
            if at_kill[0] > 0 and at_kill[1] > 0:
                os.kill(proc.pid, signal.SIGKILL)  # mid-stream, no goodbye
                break
            time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    rows_at, queued_at, fold_at = at_kill
    assert 0 < rows_at <= first < len(records) and queued_at > 0 and 0 < fold_at <= rows_at, at_kill
    jobs_at = _position(jobs_db)

    end_seq = asyncio.run(_publish(nats_server.url, records[first:]))
    last_evt = max(i + 1 for i, r in enumerate(records) if r.subject.startswith("horizon.evt."))
    assert end_seq == len(records) and jobs_at < last_evt
    log_file = tmp_path / "restarted.log"
    with log_file.open("w") as err:
        proc = _service(nats_server.url, killed_dir, stderr=err)  # restart: resumes from its own position
        try:
            deadline = time.monotonic() + 120
            while _position(jobs_db) < last_evt or _position(standing, "standing") < end_seq:
                assert time.monotonic() < deadline, f"stuck at {_position(jobs_db)} of {last_evt}"
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    assert f"resumed from the fold stored at seq {fold_at} " in log_file.read_text()  # not from seq 1

    out = subprocess.run([*HORIZON, "projections", "rebuild", "--nats", nats_server.url, "--data-dir",
                          str(rebuilt_dir)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"jobs read model rebuilt to log seq {last_evt}" in out.stdout
    assert f"standing read model rebuilt to log seq {end_seq}" in out.stdout
    tables = _tables(rebuilt_dir / "projections" / "jobs.sqlite")
    assert _tables(jobs_db) == tables and set(tables) >= set(JOBS_TABLES)
    killed, rebuilt = _dump(jobs_db, tables), _dump(rebuilt_dir / "projections" / "jobs.sqlite", tables)
    assert len(rebuilt["jobs"]) >= 150 and len(rebuilt["job_events"]) > 1_000
    assert len(rebuilt["attempts"]) >= 50 and len(rebuilt["decisions"]) > 500
    assert any(row[7] == "PREEMPTED" for row in rebuilt["attempts"])  # outcome of a preempted attempt kept
    for table in tables:
        assert killed[table] == rebuilt[table], table
    tables = _tables(rebuilt_dir / "projections" / "standing.sqlite")
    assert _tables(standing) == tables and set(tables) >= {*STANDING_TABLES, "fold_state"}
    killed, rebuilt = _dump(standing, tables), _dump(rebuilt_dir / "projections" / "standing.sqlite", tables)
    assert len(rebuilt["nodes"]) == 8 and rebuilt["usage"]  # (the log spans seconds: no hour of usage history)
    assert len(rebuilt["queue"]) == waiting[end - 1] and rebuilt["allocations"]  # compared full, not empty
    assert rebuilt["fold_state"][0][1] == end_seq
    for table in tables:  # the stored fold too: the resumed one is, byte for byte, the rebuild's
        assert killed[table] == rebuilt[table], table
