"""Two projection instances in the queue group ``projections`` share the queries and agree.

Each instance is what ``horizon service projections`` runs (``Stack.start_projection``): the jobs
read model with its ``QueryServer`` and the scheduler's standing (``SchedulerView`` over a
``StandingStore``), each instance with its own NATS connection and its own SQLite files, following
one real nats-server. Requests go to the plain subjects; NATS hands each to one member of the
group. Every handler is wrapped to count which instance answered.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import nats
import pytest

from projections.job_server import QueryServer
from projections.jobs import JobsProjection
from projections.scheduling import SchedulerView
from projections.scheduling_reports import priority_report
from projections.standing import StandingStore
from projections.tenants import as_tenant_sees
from services.runtime.jetstream import JetStreamLog
from services.scheduling.core import SchedulingCore
from tests.projections.test_projections import _log_records, _publish
from tests.projections.test_standing import _cut_at_longest_queue


def _as_tenant(tenant: str, body: dict[str, Any]) -> dict[str, Any]:
    """A store's answer as a tenant's subject gives it (``as_tenant_sees``: here its jobs, submitted without
    the intake, show no number: docs/tenants.md, Job numbers)."""
    as_tenant_sees(tenant, body["jobs"])
    return body

pytestmark = pytest.mark.timeout(240)

ROUNDS = 12  # of each request below: NATS picks a member at random for each message


class Instance:
    """One projections service: both read models, their query servers, a tally of answers."""

    def __init__(self, name: str, data_dir: Path) -> None:
        self.name = name
        self.data_dir = data_dir
        self.answered: Counter[str] = Counter()

    async def start(self, url: str) -> None:
        self.log = await JetStreamLog.open(url, name=f"projections-{self.name}")
        self.jobs = JobsProjection(self.log, self.data_dir / "jobs.sqlite")
        await self.jobs.open()
        self.store = StandingStore(self.data_dir / "standing.sqlite")
        for method in ("query_queue", "query_nodes", "query_allocations", "query_usage"):
            self._count(self.store, method)
        self.server = QueryServer(self.log.nc, self.jobs)
        for method in ("_jobs", "_job", "_decisions"):  # the callbacks: a job's answer also lists jobs
            self._count(self.server, method)
        await self.server.start()
        self.view = SchedulerView(self.log, self.log.nc, SchedulingCore(), store=self.store, flush_every_s=0.05)
        self._count(self.view, "_priority")
        await self.jobs.start()
        await self.view.start()

    def _count(self, obj: Any, method: str) -> None:
        inner = getattr(obj, method)

        async def counted(*args: Any, **kw: Any) -> Any:
            self.answered[method] += 1
            return await inner(*args, **kw)

        setattr(obj, method, counted)

    async def stop(self) -> None:
        await self.view.stop()
        await self.server.stop()
        await self.jobs.stop()
        await self.log.close()


def test_two_instances_share_the_queries_and_agree(nats_server, tmp_path):
    records, waiting = _cut_at_longest_queue(_log_records(80))
    assert waiting >= 10
    asyncio.run(_share(nats_server.url, records, waiting, tmp_path))


async def _share(url: str, records, waiting: int, tmp_path: Path) -> None:
    end = await _publish(url, records)
    last_evt = max(i + 1 for i, r in enumerate(records) if r.subject.startswith("horizon.evt."))
    a, b = Instance("a", tmp_path / "a"), Instance("b", tmp_path / "b")
    await a.start(url)
    await b.start(url)
    nc = await nats.connect(url)
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while not all(i.jobs.last_seq >= last_evt and i.store.last_seq >= end for i in (a, b)):
            assert asyncio.get_running_loop().time() < deadline, [(i.jobs.last_seq, i.store.last_seq) for i in (a, b)]
            await asyncio.sleep(0.05)

        queue = await a.store.query_queue({"limit": 1000})
        a.answered.clear()
        first = queue["jobs"][0]
        tenant, account, job_id = first["tenant"], first["account"], first["job_id"]
        requests: list[tuple[str, dict[str, Any]]] = [
            ("horizon.query.queue", {"limit": 5, "offset": 2}),
            ("horizon.query.queue", {"account": account}),
            (f"horizon.query.queue.{tenant}", {}),
            ("horizon.query.jobs", {"states": ["PENDING"], "limit": 7}),
            ("horizon.query.job", {"job_id": job_id}),
            ("horizon.query.decisions", {"job_id": job_id}),
            ("horizon.query.nodes", {}),
            ("horizon.query.allocations", {"limit": 3}),
            ("horizon.query.usage", {"tenant": tenant, "limit": 4}),
            ("horizon.query.priority", {"job_id": job_id}),
        ]
        replies: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(requests))}
        for _ in range(ROUNDS):
            for i, (subject, body) in enumerate(requests):
                msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
                replies[i].append(json.loads(msg.data))

        # shared: each instance answered some, of the list queries and overall; every request answered once
        total_a, total_b = sum(a.answered.values()), sum(b.answered.values())
        assert total_a > 0 and total_b > 0, (a.answered, b.answered)
        assert total_a + total_b == ROUNDS * len(requests)
        assert a.answered["query_queue"] > 0 and b.answered["query_queue"] > 0, (a.answered, b.answered)

        # agreed: every answer to a request is the same, whoever gave it, and it is what the rows say
        expected = {
            0: await a.store.query_queue({"limit": 5, "offset": 2}),
            1: await a.store.query_queue({"account": account}),
            2: _as_tenant(tenant, await a.store.query_queue({"tenant": tenant})),
            3: json.loads(json.dumps(await a.jobs.query_jobs(states=["PENDING"], limit=7))),
            4: json.loads(json.dumps(await a.jobs.query_job(job_id))),
            5: json.loads(json.dumps(await b.jobs.query_decisions(job_id=job_id))),
            6: await b.store.query_nodes({}),
            7: await b.store.query_allocations({"limit": 3}),
            8: await b.store.query_usage({"tenant": tenant, "limit": 4}),
            9: json.loads(json.dumps(priority_report(b.view.core, b.view.state, job_id))),
        }
        for i, got in replies.items():
            assert all(reply == got[0] for reply in got), requests[i]
            assert "error" not in got[0], (requests[i], got[0])
            assert got[0] == json.loads(json.dumps(expected[i])), requests[i]
        assert replies[0][0]["total"] == waiting and len(replies[0][0]["jobs"]) == 5
        assert replies[9][0]["why_kind"] and replies[9][0]["why"]
    finally:
        await nc.close()
        await a.stop()
        await b.stop()
