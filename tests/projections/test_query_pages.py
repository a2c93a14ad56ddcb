"""Queries never exceed the payload limit: every listing answers in pages under the server's
``max_payload`` and the CLI follows them (issue 17: ``horizon jobs --json`` lists 20,000 jobs).

A real nats-server; the jobs are ``JobAccepted`` events written straight into the log (no
scheduler), read by the jobs projection and its ``QueryServer``. A second connection listens on
``_INBOX.>`` and weighs every raw reply the projection sends to the CLI.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject
from projections.job_server import QueryServer
from projections.jobs import JobsProjection
from projections.paging import HEADROOM_BYTES, Listing, Pager, page_fields
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.runtime.natsserver import NatsServer
from tests.helpers import accepted
from tests.front.test_cli_slurm import horizon  # a CLI command in a thread, against the server at a URL

pytestmark = pytest.mark.timeout(180)




def _accepted(i: int) -> Outgoing:
    event = accepted(f"job-{i:05d}", tenant=("acme", "globex")[i % 2], account="ml", user=f"u{i % 7}",
                     name=f"sweep-{i}", command=["python", "train.py", f"--seed={i}"])
    return Outgoing(event_subject("submission", event), encode(event), f"load-{i}")


async def _write(url: str, items: list[Outgoing]) -> int:
    log_ = await JetStreamLog.open(url, name="test-loader")
    try:
        for i in range(0, len(items), 2000):
            await log_.publish_many(items[i:i + 2000])
        return await log_.last_seq()
    finally:
        await log_.close()


@asynccontextmanager
async def _serving(url: str, db: Path, end: int) -> AsyncIterator[QueryServer]:
    """The jobs projection caught up to ``end`` and its query server answering."""
    log_ = await JetStreamLog.open(url, name="projections")
    projection = JobsProjection(log_, db)
    server = QueryServer(log_.nc, projection)
    try:
        await projection.open()
        await server.start()
        await projection.start()
        deadline = asyncio.get_running_loop().time() + 60
        while projection.last_seq < end:
            assert asyncio.get_running_loop().time() < deadline, f"projection at {projection.last_seq} of {end}"
            await asyncio.sleep(0.05)
        yield server
    finally:
        await server.stop()
        await projection.stop()
        await log_.close()


@asynccontextmanager
async def _replies(url: str) -> AsyncIterator[list[int]]:
    """The size of every reply sent to any inbox while inside."""
    sizes: list[int] = []
    nc = await nats.connect(url)

    async def weigh(msg: Any) -> None:
        sizes.append(len(msg.data))

    sub = await nc.subscribe("_INBOX.>", cb=weigh)
    await nc.flush()
    try:
        yield sizes
    finally:
        await nc.flush()
        await asyncio.sleep(0.1)
        await sub.unsubscribe()
        await nc.close()


# ------------------------------------------------------------------ 20,000 jobs through the CLI


def test_horizon_jobs_json_lists_20000_jobs_in_pages_under_max_payload(nats_server, tmp_path):
    asyncio.run(_twenty_thousand(nats_server.url, tmp_path))


async def _twenty_thousand(url: str, tmp_path: Path) -> None:
    n = 20_000
    started = time.perf_counter()
    end = await _write(url, [_accepted(i) for i in range(n)])
    written = time.perf_counter()
    async with _serving(url, tmp_path / "jobs.sqlite", end) as server:
        projected = time.perf_counter()
        max_payload = server.nc.max_payload
        async with _replies(url) as sizes:
            code, out, err = await horizon(url, "jobs", "--json")
        listed = time.perf_counter()
        assert code == 0, err
        rows = json.loads(out)
        assert len(rows) == n
        assert [r["job_id"] for r in rows] == [f"job-{i:05d}" for i in range(n)]  # submission order, once each
        assert {r["state"] for r in rows} == {"PENDING"}
        assert set(rows[0]) >= {"job_id", "state", "tenant", "account", "user", "name", "allocation"}
        assert len(sizes) > 1, "the listing came in one reply: it was not paged"
        assert max(sizes) <= max_payload - HEADROOM_BYTES, (max(sizes), max_payload)
        assert sum(sizes) > max_payload  # more than one message's worth, so paging is what carried it

        # a filter and a window still page and keep their meaning
        code, out, err = await horizon(url, "jobs", "--json", "--tenant", "globex", "--offset", "3", "--limit", "5000")
        assert code == 0, err
        assert [r["job_id"] for r in json.loads(out)] == [f"job-{i:05d}" for i in range(7, n, 2)][:5000]
    print(f"\n20,000 jobs: written in {written - started:.1f} s, projected in {projected - written:.1f} s, "
          f"`horizon jobs --json` in {listed - projected:.1f} s over {len(sizes)} replies (largest {max(sizes):,} B)")


# ------------------------------------------------------------------ the protocol under a small max_payload


@pytest.fixture
def small_server(tmp_path: Path):
    """A nats-server whose max_payload is 64 KiB: pages are cut after a few dozen rows."""
    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 65536\n")
    server = NatsServer(store_dir=tmp_path / "js", port=0, config=conf)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_pages_follow_a_keyset_cursor_and_a_huge_history_pages_too(small_server, tmp_path, caplog):
    asyncio.run(_small(small_server.url, tmp_path, caplog))


def _blocked(job_id: str, i: int) -> Outgoing:
    reasons = [c.BlockReason(filter="gpu", nodes=3, reason=f"too few free GPUs, attempt {i}: " + "x" * 400)]
    event = c.PlacementBlocked(job_id=job_id, reasons=reasons, correlation_id=job_id, source="placement",
                               basis_seq=1, cycle=i)
    return Outgoing(event_subject("placement", event), encode(event), f"blocked-{job_id}-{i}")


async def _small(url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    items = [_accepted(i) for i in range(600)]
    items += [_blocked("job-00000", i) for i in range(400)]  # ~200 KB of history for one job
    end = await _write(url, items)
    async with _serving(url, tmp_path / "jobs.sqlite", end) as server:
        budget = server.nc.max_payload - HEADROOM_BYTES
        nc = await nats.connect(url)
        try:
            # raw pages: each under the limit, fewer rows than asked, and `next` leads on
            seen: list[str] = []
            request: dict[str, Any] = {"limit": 100_000, "states": ["PENDING"]}
            while True:
                msg = await nc.request("horizon.query.jobs", json.dumps(request).encode(), timeout=5)
                assert len(msg.data) <= budget
                page = json.loads(msg.data)
                assert page["offset"] == len(seen) and page["total"] == 600
                seen += [r["job_id"] for r in page["jobs"]]
                if page["next"] is None:
                    assert page["next_offset"] is None
                    break
                assert page["next_offset"] == len(seen) and set(page["next"]) == {"after", "offset"}
                request.update(page["next"])
            assert seen == [f"job-{i:05d}" for i in range(600)]

            # the old way (limit and offset, no cursor) still works, a page says where the next starts
            msg = await nc.request("horizon.query.jobs", json.dumps({"limit": 1000, "offset": 10}).encode(), timeout=5)
            page = json.loads(msg.data)
            assert 0 < len(page["jobs"]) < 590 and page["offset"] == 10
            assert page["next_offset"] == 10 + len(page["jobs"]) and page["jobs"][0]["job_id"] == "job-00010"

            # the huge history: raw pages under the limit; `horizon show` follows them to the end
            msg = await nc.request("horizon.query.job", json.dumps({"job_id": "job-00000"}).encode(), timeout=5)
            assert len(msg.data) <= budget
            first = json.loads(msg.data)
            assert first["job"]["job_id"] == "job-00000" and first["events_total"] == 401
            assert 0 < len(first["events"]) < 401 and first["next"] == {"offset": len(first["events"])}
        finally:
            await nc.close()

        async with _replies(url) as sizes:
            code, out, err = await horizon(url, "show", "job-00000", "--json")
        assert code == 0, err
        events = json.loads(out)["job"]["events"]
        assert [e["type"] for e in events] == ["JobAccepted"] + ["PlacementBlocked"] * 400
        assert len({e["seq"] for e in events}) == 401
        assert len(sizes) > 2 and max(sizes) <= budget

        # a CLI window over many pages
        code, out, err = await horizon(url, "jobs", "--json", "--offset", "100", "--limit", "300")
        assert [r["job_id"] for r in json.loads(out)] == [f"job-{i:05d}" for i in range(100, 400)]


def test_one_row_larger_than_a_message_is_an_error_naming_the_limit(small_server, tmp_path, caplog):
    asyncio.run(_giant(small_server.url, tmp_path, caplog))


async def _giant(url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A job whose reason is 62,000 bytes: under the 64 KiB a message may carry, so the event is in
    # the log, but its row, with the rest of an answer and the room kept for headers, is not.
    giant = c.PlacementBlocked(job_id="job-00001", reasons=[c.BlockReason(filter="gpu", nodes=1,
                                                                               reason="y" * 62_000)],
                               correlation_id="job-00001", source="placement", basis_seq=1, cycle=1)
    items = [_accepted(0), _accepted(1), _accepted(2),
             Outgoing(event_subject("placement", giant), encode(giant), "giant")]
    end = await _write(url, items)
    async with _serving(url, tmp_path / "jobs.sqlite", end):
        with caplog.at_level(logging.WARNING, logger="horizon.projections"):
            code, out, err = await horizon(url, "jobs", "--json")
        assert code != 0
        assert "does not fit in one message" in err and "max_payload is 65,536 bytes" in err, err
        assert any("horizon.query.jobs" in r.getMessage() and "max_payload 65536" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        # the rows before it still come, the page is cut just before it
        code, out, err = await horizon(url, "jobs", "--json", "--limit", "1")
        assert code == 0 and [r["job_id"] for r in json.loads(out)] == ["job-00000"], err


# ------------------------------------------------------------------ the pure parts


def test_page_fields_worked_through():
    assert page_fields(0, 1000, 2500) == (1000, {"offset": 1000})
    assert page_fields(2000, 500, 2500) == (None, None)
    assert page_fields(10, 5, 100, keyset=True, cursor=42) == (15, {"after": 42, "offset": 0})
    assert page_fields(10, 0, 100, keyset=True) == (10, {"after": None, "offset": 10})


class _Connection:
    """What a Pager reads of a NATS connection: the server's max_payload."""

    max_payload = 4096 + 1024


def test_the_pager_cuts_to_the_budget_and_keeps_the_cursor():
    pager = Pager(_Connection())
    rows = [{"job_id": f"j{i}", "seq": i, "pad": "z" * 90} for i in range(100)]
    body = {"jobs": rows, "total": 100, "offset": 0, "next_offset": None, "next": None}
    data = pager.encode("jobs", body, Listing("jobs", cursor=lambda row: row["seq"]))
    page = json.loads(data)
    assert len(data) <= pager.budget == 1024
    shown = len(page["jobs"])
    assert 0 < shown < 100 and page["jobs"] == rows[:shown]
    assert page["next_offset"] == shown and page["next"] == {"after": shown - 1, "offset": 0}
    assert pager.rows("jobs", 100_000) < 20  # the next read asks for about a message's worth
    whole = json.loads(pager.encode("jobs", {**body, "jobs": rows[:2]}, Listing("jobs")))
    assert whole["jobs"] == rows[:2] and whole["next"] is None
