"""The scheduler's standing in SQLite (queue, nodes, allocations, usage): rows are what the
scheduler's fold shows, queries page and filter them, and a view stopped part way and restarted
resumes from the fold it stored (not from sequence 1) into exactly the rows of a rebuild from
scratch; a stored fold it cannot trust is ignored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from events.subjects import event_subject
from projections import fold_state
from projections.jobs import JobsProjection
from projections.scheduling import SchedulerView
from projections.standing import StandingStore, node_rows, queue_rows, usage_rows
from services.front.host.rebuild import rebuild_standing
from services.runtime.jetstream import JetStreamLog
from services.runtime.service import fold_record
from services.scheduling.core import SchedulingCore
from services.domain.jobs import JobState, JobTable
from events.codec import decode
from tests.helpers import node
from tests.projections.test_projections import STANDING_TABLES, _dump, _log_records, _publish, _tables
from tests.domain.test_waiting_reasons import World

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
    half = await _publish(url, records[: len(records) // 2])
    db = tmp_path / "standing.sqlite"

    # a view that stops part way (its tables and its fold at some sequence), then, while the log
    # goes on, a new one on the same file
    log_ = await JetStreamLog.open(url, name="standing-test")
    try:
        first = SchedulerView(log_, log_.nc, SchedulingCore(), store=StandingStore(db), flush_every_s=0.05)
        await first.start()
        await _follow_until(first, half)
        await first.stop()
        with sqlite3.connect(db) as con:
            stopped_at = con.execute("SELECT last_seq FROM tracking").fetchone()[0]
            state_at = con.execute("SELECT seq FROM fold_state").fetchone()[0]
        assert stopped_at == state_at == half
        end = await _publish(url, records[len(records) // 2:])
        assert half < end

        store = StandingStore(db)
        view = SchedulerView(log_, log_.nc, SchedulingCore(), store=store, flush_every_s=0.05)
        applied: list[int] = []
        fold = view.apply

        async def counting(batch):
            applied.extend(r.seq for r in batch)
            await fold(batch)

        view.apply = counting  # type: ignore[method-assign]
        await view.start()
        assert view.resumed_from == half and view.state.seq == half  # loaded, not replayed
        await asyncio.wait_for(view.caught_up.wait(), 60)
        await _follow_until(view, end)
        assert min(applied) == half + 1  # it followed the log from the next sequence
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
    assert _tables(db) == _tables(fresh) and set(_tables(fresh)) >= {*STANDING_TABLES, "fold_state"}
    restarted, rebuilt = _dump(db, _tables(fresh)), _dump(fresh, _tables(fresh))
    assert len(rebuilt["queue"]) == waiting
    for table in _tables(fresh):  # the fold too: the restarted view's, byte for byte, is the rebuild's
        assert restarted[table] == rebuilt[table], table


# ---------------------------------------------------------------------------- resuming


def test_a_fold_loaded_from_its_bytes_folds_on_exactly_like_the_one_that_stored_it():
    """In process: dump the view's fold part way, load it into a new view, fold the rest; the rows,
    a preemption dry run and the bytes of the fold are those of a view that folded everything."""
    assert fold_state.supported, "a PreemptionState field is not written by projections/fold_state.py"
    records = _log_records(160)

    async def go() -> None:
        whole = SchedulerView(None, None, SchedulingCore())  # type: ignore[arg-type]
        await whole.apply(records)
        for cut in (len(records) // 4, len(records) // 2, 3 * len(records) // 4):
            part = SchedulerView(None, None, SchedulingCore())  # type: ignore[arg-type]
            await part.apply(records[:cut])
            data = part.dump_state()
            again = SchedulerView(None, None, SchedulingCore())  # type: ignore[arg-type]
            loaded = fold_state.load_view(data, again.core, again.preemption, again.sample_every_s)
            assert loaded is not None
            again.state, again.pstate, extras = loaded
            again._next_sample, again.tenants = extras.next_sample, {k: set(v) for k, v in extras.tenants.items()}
            assert again.dump_state() == data
            await again.apply(records[cut:])
            assert again.dump_state() == whole.dump_state(), cut
            assert queue_rows(again.core, again.state) == queue_rows(whole.core, whole.state)
            assert node_rows(again.pstate) == node_rows(whole.pstate)
            assert usage_rows(again.state, again.tenants) == usage_rows(whole.state, whole.tenants)
        # another configuration, another format, or damage: not trusted
        assert fold_state.load_view(data, SchedulingCore(policy="fcfs"), whole.preemption, 3600.0) is None
        assert fold_state.load_view(data, whole.core, whole.preemption, 60.0) is None
        assert fold_state.load_view(data[:-7], whole.core, whole.preemption, 3600.0) is None
        assert fold_state.load_view(b"\x93\x02", whole.core, whole.preemption, 3600.0) is None

    asyncio.run(go())


def test_a_view_resumes_from_a_fold_older_than_its_rows_and_ignores_one_it_cannot_trust(nats_server, tmp_path):
    records, waiting = _cut_at_longest_queue(_log_records(160))
    assert waiting >= 20
    asyncio.run(_resume_cases(nats_server.url, records, tmp_path))


async def _abandon(view: SchedulerView) -> None:
    """Drop a view as a crash would: no last flush, no fold stored at stop."""
    for sub in view._subs:
        await sub.unsubscribe()
    await view._follower.stop()
    assert view._flusher is not None
    view._flusher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await view._flusher
    assert view.store is not None
    await view.store.close()


async def _resume_cases(url: str, records, tmp_path: Path) -> None:
    third = await _publish(url, records[: len(records) // 3])
    db = tmp_path / "standing.sqlite"
    log_ = await JetStreamLog.open(url, name="standing-resume")
    try:
        # 1. the fold is stored once, at a third of the log; the rows go on to the end; a crash
        view = SchedulerView(log_, log_.nc, SchedulingCore(), store=StandingStore(db), flush_every_s=0.05,
                             state_cheap_s=-1.0, state_every=1)
        await view.start()
        await _follow_until(view, third)
        while view.state_seq < third:
            await asyncio.sleep(0.02)
        view.state_every = 10**9  # no fold with the flushes from now on
        end = await _publish(url, records[len(records) // 3:])
        while view.store.last_seq < end:  # type: ignore[union-attr]
            await asyncio.sleep(0.02)
        await _abandon(view)
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT seq FROM fold_state").fetchone()[0] == third
            assert con.execute("SELECT last_seq FROM tracking").fetchone()[0] == end
            rows_before = _dump(db, STANDING_TABLES)

        # 2. restarted: from the older fold; nothing is written until it passes the rows
        view = SchedulerView(log_, log_.nc, SchedulingCore(), store=StandingStore(db), flush_every_s=0.05)
        await view.start()
        assert view.resumed_from == third and view.store.last_seq == end  # type: ignore[union-attr]
        await asyncio.wait_for(view.caught_up.wait(), 60)
        await _follow_until(view, end)
        assert _dump(db, STANDING_TABLES) == rows_before  # the same sequence, the same rows
        await view.stop()  # stores the fold at the end, beside the rows
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT seq FROM fold_state").fetchone()[0] == end

        fresh = tmp_path / "rebuilt" / "standing.sqlite"
        assert await rebuild_standing(url, fresh) == end
        assert _dump(db, _tables(fresh)) == _dump(fresh, _tables(fresh))

        # 3. a damaged fold, and one of another configuration: ignored, the log folded from 1
        with sqlite3.connect(db) as con:
            con.execute("UPDATE fold_state SET data = ?", (b"\x93\x01\xa3not a fold",))
        view = SchedulerView(log_, log_.nc, SchedulingCore(), store=StandingStore(db), flush_every_s=0.05)
        await view.start()
        assert view.resumed_from == 0 and view.state.seq < end
        await _follow_until(view, end)
        await view.stop()
        assert _dump(db, _tables(fresh)) == _dump(fresh, _tables(fresh))
        view = SchedulerView(log_, log_.nc, SchedulingCore(policy="fcfs"), store=StandingStore(db),
                             flush_every_s=0.05)
        await view.start()
        assert view.resumed_from == 0
        await _follow_until(view, end)
        await _abandon(view)
    finally:
        await log_.close()


def test_a_database_of_an_older_layout_is_emptied_and_refilled(tmp_path):
    db = tmp_path / "standing.sqlite"
    with sqlite3.connect(db) as con:  # the layout before queue.why_kind and fold_state
        con.execute("CREATE TABLE tracking (projection TEXT PRIMARY KEY, last_seq INTEGER NOT NULL)")
        con.execute("INSERT INTO tracking VALUES ('standing', 99)")
        con.execute("CREATE TABLE queue (job_id TEXT PRIMARY KEY, why TEXT)")

    async def go() -> int:
        store = StandingStore(db)
        await store.open()
        try:
            assert await store.stored_state() is None
            return store.last_seq
        finally:
            await store.close()

    assert asyncio.run(go()) == 0  # the view will fold from sequence 1 and write everything
    with sqlite3.connect(db) as con:
        columns = [r[1] for r in con.execute("PRAGMA table_info(queue)")]
    assert "why_kind" in columns


# ---------------------------------------------------------------------------- filters


async def _two_tenants() -> list:
    """A log of two tenants' jobs through the real cores: acme (accounts ml and shared), umbrella
    (bio and shared); some running, two placed but not started yet, some waiting."""
    w = World(keep_records=True)
    for name in ("n0", "n1"):
        reg = node(name, gpus=8)
        await w.send((event_subject("agent", reg), reg))
    await w.tick()
    w.now = 1.0
    await w.submit("a1", 2, account="ml", user="ann")
    await w.submit("a2", 2, account="shared", user="ann")
    await w.submit("u1", 2, tenant="umbrella", account="bio", user="cat")
    await w.tick()  # these three run
    w.now = 2.0
    await w.submit("a3", 2, account="ml", user="bob")
    await w.submit("u2", 2, tenant="umbrella", account="shared", user="cat")
    placed = await w.tick(start=False)  # placed, their agents silent
    assert sorted(e.job_id for e in placed) == ["a3", "u2"]
    w.now = 3.0
    await w.submit("u3", 8, tenant="umbrella", account="bio", user="dan")  # waits: no node has 8 free
    await w.tick()
    return w.bus.records


def test_usage_allocations_and_decisions_filter_by_tenant_state_and_page(tmp_path):
    async def go() -> None:
        records = await _two_tenants()
        store = StandingStore(tmp_path / "standing.sqlite")
        await store.open()
        view = SchedulerView(None, None, SchedulingCore(), store=store)  # type: ignore[arg-type]
        jobs = JobsProjection(None, tmp_path / "jobs.sqlite")  # type: ignore[arg-type]
        await jobs.open()
        try:
            await view.apply(records)
            assert await view.flush()
            await jobs.apply(records)

            # usage: the tree, each node with the tenants charged under it; a tenant's part of it
            every = await store.query_usage({})
            names = [(r["account"], r["user"]) for r in every["rows"]]
            assert every["total"] == len(names) == 9  # ml, shared, bio and six associations
            tenants = {(r["account"], r["user"]): r["tenants"] for r in every["rows"]}
            assert tenants[("shared", "")] == ["acme", "umbrella"] and tenants[("shared", "cat")] == ["umbrella"]
            assert tenants[("ml", "")] == ["acme"] and tenants[("bio", "dan")] == ["umbrella"]
            umbrella = await store.query_usage({"tenant": "umbrella"})
            assert [(r["account"], r["user"]) for r in umbrella["rows"]] == \
                [n for n in names if "umbrella" in tenants[n]]
            assert umbrella["total"] == 5 and {r["account"] for r in umbrella["rows"]} == {"bio", "shared"}
            page = await store.query_usage({"limit": 3, "offset": 2})
            assert [(r["account"], r["user"]) for r in page["rows"]] == names[2:5]
            assert page["total"] == 9 and page["offset"] == 2
            mine = await store.query_usage({"tenant": "acme", "user": "ann"})
            assert sorted((r["account"], r["user"]) for r in mine["rows"]) == [("ml", "ann"), ("shared", "ann")]
            assert (await store.query_usage({"tenant": "nobody"}))["rows"] == []
            with_history = await store.query_usage({"tenant": "acme", "history": True, "limit": 5})
            assert {r["account"] for r in with_history["rows"]} == {"ml", "shared"} and "history" in with_history
            with pytest.raises(ValueError, match="tenant: give one tenant"):
                await store.query_usage({"tenant": ["acme"]})

            # allocations: placed but not started, and running
            scheduled = await store.query_allocations({"state": "SCHEDULED"})
            assert sorted(a["job_id"] for a in scheduled["allocations"]) == ["a3", "u2"]
            running = await store.query_allocations({"states": ["RUNNING"]})
            assert sorted(a["job_id"] for a in running["allocations"]) == ["a1", "a2", "u1"]
            both = await store.query_allocations({"tenant": "umbrella", "states": ["SCHEDULED", "RUNNING"]})
            assert sorted(a["job_id"] for a in both["allocations"]) == ["u1", "u2"] and both["total"] == 2

            # decisions about one owner's jobs (cycle and node decisions belong to nobody)
            everything = await jobs.query_decisions()
            assert any(d["type"] == "SchedulingCycleCompleted" for d in everything["decisions"])
            theirs = await jobs.query_decisions(tenant="umbrella")
            assert {d["aggregate"] for d in theirs["decisions"]} == {"u1", "u2", "u3"}
            assert theirs["total"] == len(theirs["decisions"]) and \
                {d["type"] for d in theirs["decisions"]} >= {"JobAccepted", "JobScheduled"}
            anns = await jobs.query_decisions(account="ml", user="ann")
            assert {d["aggregate"] for d in anns["decisions"]} == {"a1"}
            first = await jobs.query_decisions(tenant="acme", limit=2, offset=1)
            acme = await jobs.query_decisions(tenant="acme")
            assert first["decisions"] == acme["decisions"][1:3] and first["total"] == acme["total"]
            assert (await jobs.query_decisions(tenant="acme", service="placement"))["decisions"] == \
                [d for d in acme["decisions"] if d["service"] == "placement"]
        finally:
            await store.close()
            await jobs.stop()

    asyncio.run(go())
