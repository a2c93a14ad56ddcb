"""The five services and the agent end to end, on a real nats-server, as separate asyncio tasks."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import nats
import pytest

from events import catalogue as c
from services.nodes.agent.app import NodeAgent
from services.nodes.backends.process.executors import SimExecutor
from services.nodes.spec import local_nodes
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.preemption.core import PreemptionCore
from services.front.host.check import check_log
from services.runtime.replay import replay_decisions
from services.front.host.stack import Stack
from services.scheduling.core import SchedulingCore
from services.submission.core import SubmissionCore
from tests.e2e import Tally, events_of, read_log, wait_until

pytestmark = pytest.mark.timeout(180)


def job_json(job_id: str, tenant: str = "acme", **fields) -> bytes:
    body = {"type": "JobSubmitted", "job_id": job_id, "tenant": tenant}
    body.update(fields)
    return json.dumps(body).encode()


async def publish_all(js, items: list[tuple[str, bytes, str]], window: int = 200) -> None:
    for i in range(0, len(items), window):
        await asyncio.gather(*[js.publish(s, d, headers={"Nats-Msg-Id": m}) for s, d, m in items[i:i + window]])


def assert_replays(records) -> None:
    for core in (SubmissionCore(), SchedulingCore(), PlacementCore(), PreemptionCore(), InventoryCore()):
        report = replay_decisions(core, records)
        assert report.mismatches == [], (core.name, report.mismatches[:3])
        assert report.reproduced == report.decisions


@pytest.fixture
async def stack_factory(nats_server, tmp_path):
    made: list[Stack] = []

    async def make(**kw) -> Stack:
        kw.setdefault("executor", "sim")
        stack = Stack(nats_server.url, tmp_path / f"stack{len(made)}", **kw)
        made.append(stack)
        await stack.start()
        return stack

    yield make
    for stack in made:
        await stack.stop()


async def test_an_external_client_gets_exactly_one_decision_per_job(nats_server, stack_factory):
    stack = await stack_factory(nodes=local_nodes(16, gpus_per_node=8))
    nc = await nats.connect(nats_server.url)
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
    await publish_all(nc.jetstream(), items)
    await wait_until(lambda: len(decisions) == 1000, 120, "1,000 scheduling decisions")
    await asyncio.sleep(0.5)  # a second decision for any job would have arrived by now
    await nc.close()
    assert set(decisions) == {f"ext-{i:04d}" for i in range(1000)}
    assert set(decisions.values()) == {1}
    node_devices = {n.name: {g.id for g in n.gpus} for n in stack.nodes}
    for job_id, allocs in allocations.items():
        for alloc in allocs:
            assert set(alloc["device_ids"]) <= node_devices[alloc["node"]], job_id
    records = await read_log(nats_server.url)
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert result.scheduled == 1000
    assert stack.failed() == []


async def test_a_job_no_node_can_hold_does_not_block_the_small_ones(nats_server, stack_factory):
    """Too big for any node: refused at submission (issue 16). Held by none for its selector:
    accepted, and placement says why it fits nowhere while the small jobs pass it."""
    await stack_factory(nodes=local_nodes(4, gpus_per_node=8))
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    items = [("horizon.in.acme.submit", job_json("huge", resources={"gpus": 16}, priority_class="critical",
                                                 command=["true"]), "huge"),
             ("horizon.in.acme.submit", job_json("picky", resources={"gpus": 1}, priority_class="critical",
                                                 node_selector={"zone": "nowhere"}, command=["true"]), "picky")]
    items += [("horizon.in.acme.submit", job_json(f"small-{i}", resources={"gpus": 1}, sim_runtime_s=0.05),
               f"small-{i}") for i in range(100)]
    await publish_all(nc.jetstream(), items)
    await wait_until(lambda: tally.count("JobSucceeded") == 100, 60, "100 small jobs to finish")
    await nc.close()
    assert tally.last[("JobRejected", "huge")]["reason"] == (
        "resources.gpus: 16 GPUs per node (16 per task x 1 task per node) is more than any node has: "
        "the largest has 8 a100 GPUs")
    assert not tally.has("JobScheduled", "picky")
    blocked = tally.last[("PlacementBlocked", "picky")]
    assert blocked["reasons"] == [{"reason": "labels do not match the node selector zone=nowhere", "nodes": 4,
                                   "filter": "NodeSelector"}]
    assert blocked["fits_nowhere"] is True


async def test_killing_scheduling_and_placement_mid_burst_loses_and_repeats_nothing(nats_server, stack_factory):
    stack = await stack_factory(nodes=local_nodes(32, gpus_per_node=8))
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    items = [("horizon.in.acme.submit", job_json(f"b-{i:04d}", resources={"gpus": 1}, sim_runtime_s=0.02),
              f"b-{i:04d}") for i in range(2000)]
    publisher = asyncio.create_task(publish_all(nc.jetstream(), items))
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
    await nc.close()
    records = await read_log(nats_server.url)
    scheduled = Counter(e.job_id for e in events_of(records) if isinstance(e, c.JobScheduled))
    assert len(scheduled) == 2000 and set(scheduled.values()) == {1}
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert_replays(records)


async def test_a_silent_node_is_lost_its_jobs_fail_and_its_devices_are_not_offered(nats_server, stack_factory):
    stack = await stack_factory(heartbeat_timeout_s=0.8)
    steady = NodeAgent(stack.parts["inventory"].log, local_nodes(1, prefix="steady"), SimExecutor(),
                       nc=stack.parts["inventory"].log.nc, name="agent-steady", heartbeat_interval_s=0.1)
    lonely_log = stack.parts["submission"].log
    lonely = NodeAgent(lonely_log, local_nodes(1, prefix="lonely"), SimExecutor(), nc=lonely_log.nc,
                       name="agent-lonely", heartbeat_interval_s=0.1)
    await steady.start()
    await lonely.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    js = nc.jetstream()
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
    await nc.close()
    await steady.stop()
    records = await read_log(nats_server.url)
    assert check_log(records).ok
    assert_replays(records)


async def test_bad_submissions_are_rejected_with_the_field_and_garbage_is_dead_lettered(nats_server, stack_factory):
    stack = await stack_factory(nodes=local_nodes(1))
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    bad = {
        "neg-gpus": ("acme", {"resources": {"gpus": -1}}, "resources.gpus"),
        "lots-mem": ("acme", {"resources": {"memory": "lots"}}, "resources.memory"),
        "odd-gpu": ("acme", {"resources": {"gpus": 1, "gpu_type": "tpu-v5"}}, "resources.gpu_type"),
        "wrong-tenant": ("globex", {}, "tenant"),
        "zero-time": ("acme", {"time_limit_s": 0}, "time_limit_s"),
    }
    items = [("horizon.in.acme.submit", job_json(job_id, tenant=tenant, command=["true"], **fields), job_id)
             for job_id, (tenant, fields, _) in bad.items()]
    items.append(("horizon.in.acme.submit", b"\xff not json", "garbage"))
    await publish_all(nc.jetstream(), items)
    await wait_until(lambda: all(tally.has("JobRejected", j) for j in bad), 15, "five rejections")
    for job_id, (_, _, field) in bad.items():
        rejection = tally.last[("JobRejected", job_id)]
        assert rejection["field"] == field
        assert rejection["reason"].startswith(field + ":")
    letters = await stack.parts["submission"].log.dead_letters("submission")
    assert [d.data for d in letters] == [b"\xff not json"]
    assert "not a JSON object" in letters[0].error
    await nc.close()
