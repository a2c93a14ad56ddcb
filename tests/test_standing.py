"""The scheduler's standing in SQLite (queue, nodes, allocations, usage): rows are what the
scheduler's fold shows, queries page and filter them, and a view stopped part way and restarted
writes exactly the rows of a rebuild from scratch."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from projections.scheduling import SchedulerView
from projections.standing import StandingStore
from services.cli.projections import rebuild_standing
from services.runtime.jetstream import JetStreamLog
from services.runtime.service import fold_record
from services.scheduling.core import SchedulingCore
from services.state.jobs import JobState, JobTable
from events.codec import decode
from tests.test_projections import STANDING_TABLES, _dump, _log_records, _publish

pytestmark = pytest.mark.timeout(240)


def _cut_at_longest_queue(records):
    """The log up to where the most jobs wait: a standing worth comparing."""
    table, best, cut = JobTable(), -1, 0
    for i, r in enumerate(records):
        event = decode(r.data)
        table.apply(event, r.seq, r.time)
        waiting = sum(1 for j in table.jobs.values() if j.state in (JobState.PENDING, JobState.HELD))
        if waiting > best:
            best, cut = waiting, i + 1
    return records[:cut], best


async def _follow_until(view: SchedulerView, seq: int, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while view.state.seq < seq:
        assert asyncio.get_running_loop().time() < deadline, f"view stuck at {view.state.seq} of {seq}"
        await asyncio.sleep(0.05)


def test_standing_rows_page_filter_and_survive_a_restart(nats_server, tmp_path: Path):
    records, waiting = _cut_at_longest_queue(_log_records(160))
    assert waiting >= 20
    asyncio.run(_check(nats_server.url, records, waiting, tmp_path))


async def _check(url: str, records, waiting: int, tmp_path: Path) -> None:
    end = await _publish(url, records)
    db = tmp_path / "standing.sqlite"

    # a view that stops part way (its tables at some sequence), then a new one on the same file
    log_ = await JetStreamLog.open(url, name="standing-test")
    try:
        first = SchedulerView(log_, log_.nc, SchedulingCore(), store=StandingStore(db), flush_every_s=0.05)
        await first.start()
        await _follow_until(first, end // 2)
        await first.stop()
        with sqlite3.connect(db) as con:
            stopped_at = con.execute("SELECT last_seq FROM tracking").fetchone()[0]
        assert 0 < stopped_at <= end

        store = StandingStore(db)
        view = SchedulerView(log_, log_.nc, SchedulingCore(), store=store, flush_every_s=0.05)
        await view.start()
        await asyncio.wait_for(view.caught_up.wait(), 60)
        await _follow_until(view, end)
        while store.last_seq < end:
            await asyncio.sleep(0.05)

        # the queue is the scheduler's order at that sequence, with its priorities
        core = SchedulingCore()
        state = core.initial()
        async for batch in log_.read(1, until_seq=end):  # as stored: the log's times, not the simulator's
            for r in batch:
                state, _, _ = fold_record(core, state, r)
        ordered = [j.job_id for j in core.ordered_queue(state)]
        everything = await store.query_queue({"limit": 10_000})
        pending = [row for row in everything["jobs"] if row["state"] == "PENDING"]
        assert [row["job_id"] for row in pending] == ordered and everything["last_seq"] == end
        assert [row["rank"] for row in pending] == list(range(1, len(ordered) + 1))
        assert all(row["why"] and row["priority"] is not None and set(row["factors"]) >= {"age", "fairshare"}
                   for row in pending)
        # filters and paging are the same slice of the same order
        account = pending[0]["account"]
        mine = [row["job_id"] for row in everything["jobs"] if row["account"] == account]
        page = await store.query_queue({"account": account, "limit": 3, "offset": 2})
        assert [row["job_id"] for row in page["jobs"]] == mine[2:5] and page["total"] == len(mine)
        user = pending[-1]["user"]
        by_user = await store.query_queue({"user": user, "states": ["PENDING"]})
        assert {row["user"] for row in by_user["jobs"]} == {user} and by_user["total"] >= 1
        with pytest.raises(ValueError, match="unknown filter 'colour'"):
            await store.query_queue({"colour": "red"})
        # nodes and what runs on them
        nodes = await store.query_nodes({})
        assert nodes["total"] == 8 and [n["node"] for n in nodes["nodes"]] == sorted(n["node"] for n in nodes["nodes"])
        busy = [n for n in nodes["nodes"] if n["jobs"]]
        assert busy and all(n["gpus_used"] > 0 for n in busy)
        allocations = await store.query_allocations({"node": busy[0]["node"]})
        assert sorted(a["job_id"] for a in allocations["allocations"]) == busy[0]["jobs"]
        assert sum(len(a["device_ids"]) for a in allocations["allocations"]) == busy[0]["gpus_used"]
        assert (await store.query_nodes({"gpu_type": "a100", "limit": 2}))["total"] == 8
        assert (await store.query_nodes({"gpu_type": "h100"}))["nodes"] == []
        # usage: the fair-share tree
        usage = await store.query_usage({})
        assert {r["account"] for r in usage["rows"]} >= {"acct0", "acct1", "acct2"}
        assert (await store.query_usage({"account": "acct1"}))["rows"][0]["account"] == "acct1"
        # a tenant's scoped subject: its jobs only, whatever it asks
        tenant = pending[0]["tenant"]
        reply = json.loads((await log_.nc.request(f"horizon.query.queue.{tenant}", b"{}", timeout=5)).data)
        assert reply["total"] == everything["total"]
        reply = json.loads((await log_.nc.request("horizon.query.queue.someone-else", b"{}", timeout=5)).data)
        assert reply["jobs"] == [] and reply["total"] == 0
        reply = json.loads((await log_.nc.request("horizon.query.queue.someone-else",
                                                  json.dumps({"tenant": tenant}).encode(), timeout=5)).data)
        assert reply == {"error": f"tenant 'someone-else' may see only its own jobs, not {tenant!r}'s"}
        await view.stop()
    finally:
        await log_.close()

    # a rebuild from scratch writes the same rows
    fresh = tmp_path / "rebuilt" / "standing.sqlite"
    assert await rebuild_standing(url, fresh) == end
    restarted, rebuilt = _dump(db, STANDING_TABLES), _dump(fresh, STANDING_TABLES)
    assert len(rebuilt["queue"]) == waiting
    for table in STANDING_TABLES:
        assert restarted[table] == rebuilt[table], table
