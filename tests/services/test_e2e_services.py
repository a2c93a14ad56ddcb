"""The decision services and the agent end to end, on a real nats-server, as separate asyncio tasks."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from events import catalogue as c
from services.nodes.agent.app import NodeAgent
from services.nodes.backends.process.executors import SimExecutor
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from tests.e2e import assert_replays, events_of, job_json, publish_all, wait_until

pytestmark = pytest.mark.timeout(180)


async def test_an_external_client_gets_exactly_one_decision_per_job(running_horizon):
    h = await running_horizon(nodes=local_nodes(16, gpus_per_node=8), executor="sim")
    stack, nc = h.stack, h.nc
    decisions: Counter[str] = Counter()
    allocations: dict[str, list] = {}

    async def on_decision(msg):
        body = json.loads(msg.data)
        decisions[body["job_id"]] += 1
        allocations[body["job_id"]] = body["allocations"]

    await nc.subscribe("horizon.evt.placement.JobScheduled.*", cb=on_decision)
    items = [("horizon.in.acme.submit",
              job_json(f"ext-{i:04d}", resources={"gpus": 1 + i % 2, "gpu_type": "a100", "memory": "8g"},
                       sim_runtime_s=0.05), f"ext-{i:04d}") for i in range(1000)]
    await publish_all(h.js, items)
    await wait_until(lambda: len(decisions) == 1000, 120, "1,000 scheduling decisions")
    await asyncio.sleep(0.5)  # a second decision for any job would have arrived by now
    assert set(decisions) == {f"ext-{i:04d}" for i in range(1000)}
    assert set(decisions.values()) == {1}
    node_devices = {n.name: {g.id for g in n.gpus} for n in stack.nodes}
    for job_id, allocs in allocations.items():
        for alloc in allocs:
            assert set(alloc["device_ids"]) <= node_devices[alloc["node"]], job_id
    records = await h.records()
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert result.scheduled == 1000
    assert stack.failed() == []


async def test_a_job_no_node_can_hold_does_not_block_the_small_ones(running_horizon):
    """Too big for any node: refused at submission (issue 16). Held by none for its selector:
    accepted, and placement says why it fits nowhere while the small jobs pass it."""
    h = await running_horizon(nodes=local_nodes(4, gpus_per_node=8), executor="sim")
    tally = h.tally
    items = [("horizon.in.acme.submit", job_json("huge", resources={"gpus": 16}, priority_class="critical",
                                                 command=["true"]), "huge"),
             ("horizon.in.acme.submit", job_json("picky", resources={"gpus": 1}, priority_class="critical",
                                                 node_selector={"zone": "nowhere"}, command=["true"]), "picky")]
    items += [("horizon.in.acme.submit", job_json(f"small-{i}", resources={"gpus": 1}, sim_runtime_s=0.05),
               f"small-{i}") for i in range(100)]
    await publish_all(h.js, items)
    await wait_until(lambda: tally.count("JobSucceeded") == 100, 60, "100 small jobs to finish")
    assert tally.last[("JobRejected", "huge")]["reason"] == (
        "resources.gpus: 16 GPUs per node (16 per task x 1 task per node) is more than any node has: "
        "the largest has 8 a100 GPUs")
    assert not tally.has("JobScheduled", "picky")
    blocked = tally.last[("PlacementBlocked", "picky")]
    assert blocked["reasons"] == [{"reason": "labels do not match the node selector zone=nowhere", "nodes": 4,
                                   "filter": "NodeSelector"}]
    assert blocked["fits_nowhere"] is True


async def test_killing_scheduling_and_placement_mid_burst_loses_and_repeats_nothing(running_horizon):
    h = await running_horizon(nodes=local_nodes(32, gpus_per_node=8), executor="sim")
    stack, tally = h.stack, h.tally
    items = [("horizon.in.acme.submit", job_json(f"b-{i:04d}", resources={"gpus": 1}, sim_runtime_s=0.02),
              f"b-{i:04d}") for i in range(2000)]
    publisher = asyncio.create_task(publish_all(h.js, items))
    await wait_until(lambda: tally.count("JobScheduled") >= 300, 60, "the burst to get going")
    await stack.kill("scheduling")
    await stack.kill("placement")
    await asyncio.sleep(0.5)
    await stack.restart("placement")
    await stack.restart("scheduling")
    await publisher
    try:
        await wait_until(lambda: tally.count("JobSucceeded") == 2000, 150, "all 2,000 jobs to finish")
    except AssertionError:
        sched, place = stack.parts["scheduling"].obj.state, stack.parts["placement"].obj.state
        raise AssertionError(
            f"{tally.by_type}; scheduling: pending={len(sched.pending)} cycle={sched.cycle} placed={sched.placed_cycle} "
            f"dirty={sched.dirty_seq} basis={sched.cycle_basis} seq={sched.seq}; placement: cycle={place.cycle} "
            f"done={place.done_cycle} seq={place.seq}; failed={stack.failed()}") from None
    records = await h.records()
    scheduled = Counter(e.job_id for e in events_of(records) if isinstance(e, c.JobScheduled))
    assert len(scheduled) == 2000 and set(scheduled.values()) == {1}
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert_replays(records)


async def test_a_silent_node_is_lost_its_jobs_fail_and_its_devices_are_not_offered(running_horizon):
    h = await running_horizon(heartbeat_timeout_s=0.8, executor="sim")
    stack, tally, js = h.stack, h.tally, h.js
    steady = NodeAgent(stack.parts["inventory"].log, local_nodes(1, prefix="steady"), SimExecutor(),
                       nc=stack.parts["inventory"].log.nc, name="agent-steady", heartbeat_interval_s=0.1)
    lonely_log = stack.parts["submission"].log
    lonely = NodeAgent(lonely_log, local_nodes(1, prefix="lonely"), SimExecutor(), nc=lonely_log.nc,
                       name="agent-lonely", heartbeat_interval_s=0.1)
    await steady.start()
    await lonely.start()
    await publish_all(js, [("horizon.in.acme.submit", job_json(f"long-{i}", resources={"gpus": 8}, sim_runtime_s=60),
                            f"long-{i}") for i in range(2)])
    await wait_until(lambda: tally.count("JobStarted") == 2, 20, "both long jobs to start")
    on_lonely = next(j for (kind, j), body in tally.last.items()
                     if kind == "JobStarted" and body["node"].startswith("lonely"))
    await lonely.stop()  # the agent goes silent (and its processes with it)
    await wait_until(lambda: tally.has("NodeLost", "lonely-00"), 10, "the node to be declared lost")
    await wait_until(lambda: tally.has("JobFailed", on_lonely), 10, "its job to be failed")
    assert tally.last[("JobFailed", on_lonely)]["reason"] == "node lonely-00 lost"
    await publish_all(js, [("horizon.in.acme.submit", job_json("after", resources={"gpus": 8}, command=["true"]), "after")])
    await wait_until(lambda: tally.has("PlacementBlocked", "after"), 10, "the new job to be blocked")
    reasons = {r["reason"]: r["nodes"] for r in tally.last[("PlacementBlocked", "after")]["reasons"]}
    assert reasons == {"node lost": 1, "too few free GPUs (needs 8)": 1}
    assert not tally.has("JobScheduled", "after")
    await steady.stop()
    records = await h.records()
    assert check_log(records).ok
    assert_replays(records)


async def test_bad_submissions_are_rejected_with_the_field_and_garbage_is_dead_lettered(running_horizon):
    h = await running_horizon(nodes=local_nodes(1), executor="sim")
    stack, tally = h.stack, h.tally
    bad = {
        "neg-gpus": ("acme", {"resources": {"gpus": -1}}, "resources.gpus"),
        "lots-mem": ("acme", {"resources": {"memory": "lots"}}, "resources.memory"),
        "odd-gpu": ("acme", {"resources": {"gpus": 1, "gpu_type": "tpu-v5"}}, "resources.gpu_type"),
        "wrong-tenant": ("globex", {}, "tenant"),
        "negative-time": ("acme", {"time_limit_s": -1}, "time_limit_s"),  # 0 is no limit (Slurm's --time=0)
    }
    items = [("horizon.in.acme.submit", job_json(job_id, tenant=tenant, command=["true"], **fields), job_id)
             for job_id, (tenant, fields, _) in bad.items()]
    items.append(("horizon.in.acme.submit", b"\xff not json", "garbage"))
    await publish_all(h.js, items)
    await wait_until(lambda: all(tally.has("JobRejected", j) for j in bad), 15, "five rejections")
    for job_id, (_, _, field) in bad.items():
        rejection = tally.last[("JobRejected", job_id)]
        assert rejection["field"] == field
        assert rejection["reason"].startswith(field + ":")
    letters = await stack.parts["submission"].log.dead_letters("submission")
    assert [d.data for d in letters] == [b"\xff not json"]
    assert "not a JSON object" in letters[0].error
