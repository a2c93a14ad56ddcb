"""For each service: apply a recorded log to the pure core, decide, compare with what the log recorded."""

from __future__ import annotations

import functools
import json

import pytest

from events import catalogue as c
from services.nodes.spec import local_nodes
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.preemption.core import PreemptionCore
from services.runtime.memory_log import MemoryLog
from services.runtime.replay import replay_decisions
from services.scheduling.core import SchedulingCore
from services.submission.core import SubmissionCore
from tests.e2e import job_json, publish_all, wait_until

pytestmark = pytest.mark.timeout(120)

# as the services run: submission marks the log's layout (services/submission/part.py)
CORES = [functools.partial(SubmissionCore, mark_layout=True), SchedulingCore, PlacementCore, PreemptionCore,
         InventoryCore]


async def test_every_service_reproduces_its_recorded_decisions(running_horizon):
    h = await running_horizon(nodes=local_nodes(3, gpus_per_node=4), executor="sim")
    tally, js = h.tally, h.js
    jobs = [(f"mix-{i:03d}", {"resources": {"gpus": i % 5}, "sim_runtime_s": 0.05 * (i % 4),
                              "priority_class": ["low", "normal", "high"][i % 3],
                              "restart_policy": "on-failure" if i % 7 == 0 else "never", "max_retries": 1,
                              "sim_exit_code": 1 if i % 7 == 0 else 0}) for i in range(120)]
    jobs.append(("mix-bad", {"resources": {"gpus": -1}}))
    jobs.append(("mix-held", {"resources": {"gpus": 4}, "sim_runtime_s": 0.05}))
    await publish_all(js, [("horizon.in.acme.submit", job_json(j, **f), j) for j, f in jobs])
    await js.publish("horizon.in.acme.hold", json.dumps(
        {"type": "JobHoldRequested", "job_id": "mix-held", "tenant": "acme"}).encode(), headers={"Nats-Msg-Id": "h1"})
    await js.publish("horizon.in.acme.cancel", json.dumps(
        {"type": "JobCancelRequested", "job_id": "mix-119", "tenant": "acme"}).encode(), headers={"Nats-Msg-Id": "c1"})
    await js.publish("horizon.in._admin.node", json.dumps(
        {"type": "NodeCommandIssued", "node": "node-02", "action": "cordon"}).encode(), headers={"Nats-Msg-Id": "n1"})
    await wait_until(lambda: tally.has("NodeCordoned", "node-02"), 20, "the cordon")
    await wait_until(lambda: tally.has("JobHeld", "mix-held") or tally.has("RequestRejected", "mix-held"), 20,
                     "an answer to the hold")
    await js.publish("horizon.in._admin.node", json.dumps(
        {"type": "NodeCommandIssued", "node": "node-02", "action": "uncordon"}).encode(), headers={"Nats-Msg-Id": "n2"})
    if tally.has("JobHeld", "mix-held"):
        await js.publish("horizon.in.acme.release", json.dumps(
            {"type": "JobReleaseRequested", "job_id": "mix-held", "tenant": "acme"}).encode(),
            headers={"Nats-Msg-Id": "r1"})
    ends = ("JobSucceeded", "JobFailed", "JobCancelled", "JobRejected")
    def unfinished():
        return [j for j, _ in jobs if not any(tally.has(k, j) for k in ends)]

    try:
        await wait_until(lambda: not unfinished(), 60, "every job to end")
    except AssertionError:
        raise AssertionError(f"unfinished: {unfinished()}") from None
    await h.stop()
    records = await h.records()
    totals = {}
    for core_cls in CORES:
        report = replay_decisions(core_cls(), records)
        assert report.mismatches == [], (report.service, report.mismatches[:2])
        assert report.reproduced == report.decisions
        totals[report.service] = report.decisions
    assert totals["submission"] >= len(jobs) and totals["scheduling"] > 0 and totals["placement"] > 0
    assert totals["inventory"] >= 3  # three NodeReady, a cordon, an uncordon

    # A tampered decision is caught: change the devices of one recorded JobScheduled.
    from events.codec import decode, encode
    from services.domain.protocol import Record

    forged = []
    done = False
    for r in records:
        event = decode(r.data)
        if not done and isinstance(event, c.JobScheduled) and event.allocations[0].device_ids:
            import msgspec

            alloc = msgspec.structs.replace(event.allocations[0], device_ids=["gpu3"])
            r = Record(r.seq, r.subject, encode(msgspec.structs.replace(event, allocations=[alloc])), r.time, r.headers)
            done = True
        forged.append(r)
    report = replay_decisions(PlacementCore(), forged)
    assert len(report.mismatches) >= 1 and report.mismatches[0]["type"] == "JobScheduled"


async def test_the_in_memory_log_runs_the_same_services():
    """The pure cores on the MemoryLog: the same runner, no NATS (what the simulator will use)."""
    from services.runtime.service import ServiceRunner
    from events.codec import encode

    log = MemoryLog()
    runners = [ServiceRunner(log, core_cls()) for core_cls in CORES]
    for runner in runners:
        await runner.start()
    for spec in local_nodes(1, gpus_per_node=2):
        reg = spec.registration("agent")
        await log.publish("horizon.evt.agent.NodeRegistered." + spec.name, encode(reg), msg_id=reg.id)
    for i in range(3):
        sub = c.JobSubmitted(job_id=f"m{i}", tenant="acme", resources=c.ResourceRequest(gpus=1), command=["true"])
        await log.publish("horizon.in.acme.submit", encode(sub), msg_id=sub.job_id)
    import asyncio

    for _ in range(100):
        await asyncio.sleep(0.01)
        kinds = [json.loads(r.data)["type"] for r in log.records]
        if kinds.count("JobScheduled") == 2 and "PlacementBlocked" in kinds:
            break
    for runner in runners:
        await runner.stop()
    kinds = [json.loads(r.data)["type"] for r in log.records]
    assert kinds.count("JobAccepted") == 3 and kinds.count("JobScheduled") == 2
    for core_cls in CORES:
        report = replay_decisions(core_cls(), log.records)
        assert report.mismatches == []
