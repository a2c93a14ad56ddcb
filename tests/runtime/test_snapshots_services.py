"""Placement and inventory restart from their snapshots on the real runner and the real nats-server.

A log the in-process simulator wrote (nodes, jobs placed, run and ended) is published; a runner
of each core folds it and stores a snapshot; it is stopped, operator input and scheduling's next
cycle arrive while it is down, and it starts again: it loads the snapshot (its stats say from
which seq), folds the tail only, and answers what arrived while it was down exactly once, and its
state is byte for byte that of a runner that folded the whole log.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.front.sim.traces import SimJob
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.runtime.log import Outgoing
from tests.runtime.test_snapshots import Services, caught_up, until
from tests.services.test_snapshot_scheduling import simulated_log

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def services(nats_server):
    s = Services(nats_server.url)
    try:
        yield s
    finally:
        await s.close()


async def publish_simulated_log(js_log: Any) -> int:
    jobs = [SimJob(job_id=f"s{i}", submit_s=i * 10.0, runtime_s=50.0, estimate_s=60.0, gpus=2, account="a", user="u")
            for i in range(12)]
    records = await asyncio.to_thread(simulated_log, jobs, "fcfs", False)
    await js_log.publish_many([Outgoing(r.subject, r.data, f"sim-{r.seq}") for r in records])
    return len(records)


async def restart(services: Services, js_log: Any, make: Any, tail: list[Outgoing]) -> tuple[Any, Any]:
    """Fold the log with snapshots every 20 records, stop, publish ``tail``, start again; and a
    runner that folds the whole log, started after. Both caught up."""
    first = await services.start(make())
    await caught_up(first, js_log)
    await first.flush_snapshots()
    assert first.stats.snapshots_saved >= 1, "no snapshot was stored while folding the log"
    snapshot_seq = first.stats.snapshot_seq
    await services.stop(first)
    await js_log.publish_many(tail)
    restarted = await services.start(make())
    await until(lambda: restarted.stats.decisions >= 1, "the restarted runner's answer to the tail")
    await caught_up(restarted, js_log)
    assert restarted.stats.restored_from_seq == snapshot_seq > 0
    full = await services.start(make(), snapshots=False)
    await caught_up(full, js_log)
    assert full.stats.restored_from_seq == 0
    assert make().dump(restarted.state) == make().dump(full.state)
    return restarted, full


async def test_placement_restarts_from_its_snapshot_and_places_the_next_cycle(services, js_log):
    await publish_simulated_log(js_log)
    probe = PlacementCore()
    spec = c.JobSpec(tenant="sim", account="a", user="u", gpus=2, name="late")
    accepted = c.JobAccepted(job_id="late-1", spec=spec, source="submission", correlation_id="late-1")
    # scheduling's next cycle (the simulated log's last one was its 9th at most)
    cycle = c.SchedulingCycleCompleted(cycle=1000, basis_seq=0, candidates=["late-1"], source="scheduling",
                                       correlation_id="1000")
    tail = [Outgoing(event_subject(e.source, e), encode(e), e.correlation_id or "") for e in (accepted, cycle)]
    restarted, full = await restart(services, js_log, lambda: PlacementCore(snapshot_every=20), tail)
    job = restarted.state.jobs.jobs["late-1"]
    assert job.allocations and job.state.value == "SCHEDULED"
    assert (restarted.stats.decisions, restarted.stats.duplicates) == (2, 0)  # JobScheduled, cycle completed
    assert full.stats.decisions == 0 and probe.decide(full.state) == []


async def test_inventory_restarts_from_its_snapshot_and_answers_a_command(services, js_log):
    await publish_simulated_log(js_log)
    command = c.NodeCommandIssued(node="sn-00", action="cordon", reason="maintenance", user="ops")
    tail = [Outgoing(admin_subject("node"), encode(command), "cordon-sn-00")]
    restarted, full = await restart(services, js_log, lambda: InventoryCore(snapshot_every=20), tail)
    assert restarted.state.cluster.nodes["sn-00"].cordoned and not restarted.state.commands
    assert (restarted.stats.decisions, restarted.stats.duplicates) == (1, 0)
    assert full.stats.decisions == 0
