"""Operators configure accounts, fair share and policy from the CLI and see the answer; users see
their job's priority factor by factor (`horizon show`) and the fair-share standings (`horizon usage`)."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from services.nodes.spec import local_nodes
from tests.e2e import assert_replays, horizon, job_json, publish_all, read_log

pytestmark = pytest.mark.timeout(120)


async def test_configuration_from_the_cli_and_what_users_see(running_horizon):
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=4), executor="sim")
    url = h.url
    code, out, err = await horizon(url, "account", "set", "research", "--shares", "2", "--quota-gpus", "4")
    assert code == 0 and "account research applied" in out, err
    code, out, err = await horizon(url, "account", "set", "ml", "--parent", "research", "--quota-gpu-type",
                                   "a100=2", "--boost", "5")
    assert code == 0, err
    code, out, err = await horizon(url, "account", "set", "lost", "--parent", "nowhere")
    assert code == 1 and "rejected: parent: account 'nowhere' is not configured" in err
    assert "Traceback" not in err
    code, out, err = await horizon(url, "fairshare", "set", "--half-life", "1d", "--json")
    assert code == 0 and json.loads(out)["applied"] is True, err
    code, out, err = await horizon(url, "policy", "set", "--weight", "fairshare=20000", "--backoff-base", "5s")
    assert code == 0 and "policy applied" in out, err
    code, out, err = await horizon(url, "policy", "set", "--weight", "speed=1")
    assert code == 1 and "weights: 'speed' is not one of class, fairshare, age" in err

    nc = await nats.connect(url)
    js = nc.jetstream()
    await publish_all(js, [
        ("horizon.in.acme.submit", job_json("big", account="ml", user="ann", resources={"gpus": 2, "gpu_type": "a100"},
                                            sim_runtime_s=600), "big"),
        ("horizon.in.acme.submit", job_json("next", account="ml", user="bob", resources={"gpus": 2, "gpu_type": "a100"},
                                            sim_runtime_s=1), "next"),
    ])
    await nc.close()

    async def waiting_on_quota() -> bool:
        code, out, _ = await horizon(url, "show", "next", "--json")
        body = json.loads(out) if code == 0 else {}
        return "quota" in (body.get("priority") or {}).get("why", "")

    deadline = asyncio.get_running_loop().time() + 30
    while not await waiting_on_quota():
        assert asyncio.get_running_loop().time() < deadline, "next never waited on the a100 quota"
        await asyncio.sleep(0.3)
    code, out, err = await horizon(url, "show", "next")
    assert code == 0, err
    assert "priority" in out and "fairshare" in out and "age" in out
    assert "waiting: account ml quota: 2 a100 GPUs in use + 2 a100 GPUs > limit 2 a100 GPUs" in out
    assert "boost 5" in out
    code, out, err = await horizon(url, "usage", "--json")
    assert code == 0, err
    rows = {(r["account"], r["user"]): r for r in json.loads(out)["rows"]}
    assert rows[("research", "")]["raw_shares"] == 2 and rows[("ml", "")]["parent"] == "research"
    assert rows[("ml", "ann")]["running"] == 1 and rows[("research", "")]["quota"] == {"gpus": 4}
    assert json.loads(out)["half_life_s"] == 86400
    code, out, err = await horizon(url, "usage")
    assert code == 0 and "research" in out and "ann" in out and "half-life 1 d" in out, err
    code, out, err = await horizon(url, "usage", "-u", "ann", "--json")
    assert code == 0, err
    assert {(r["account"], r["user"]) for r in json.loads(out)["rows"]} == {("ml", "ann")}
    code, out, err = await horizon(url, "usage", "-A", "research", "--json")
    assert code == 0 and {r["account"] for r in json.loads(out)["rows"]} == {"research"}, out
    code, out, err = await horizon(url, "usage", "--tenant", "nobody", "--json")
    assert code == 0 and json.loads(out)["rows"] == [], out
    await h.stop()
    assert_replays(await read_log(url))


async def test_profiles_reservations_and_why_a_job_waits_from_the_cli(running_horizon):
    h = await running_horizon(nodes=local_nodes(2, gpus_per_node=4), executor="sim")
    url = h.url
    code, out, err = await horizon(url, "profile", "set", "wide", "--weight", "spread=10", "--weight", "binpack=0",
                                   "--backfill", "conservative", "--depth", "4")
    assert code == 0 and "profile wide applied" in out, err
    code, out, err = await horizon(url, "profile", "set", "bad", "--weight", "speed=1")
    assert code == 2 and "weights: 'speed' is not one of binpack" in err
    code, out, err = await horizon(url, "reservation", "create", "late", "--account", "vip", "--nodes", "node-01",
                                   "--start", "+2h", "--end", "+1h")
    assert code == 2 and "the window must end after it starts" in err
    code, out, err = await horizon(url, "reservation", "create", "demo", "--account", "vip", "--nodes", "node-01",
                                   "--start", "+1d", "--end", "+2d")
    assert code == 0 and "reservation demo applied" in out, err
    for i in range(2):
        code, out, err = await horizon(url, "submit", "--gpus", "4", "--sim-runtime", "600", "--time", "10m",
                                       "--job-id", f"hog{i}", "--priority-class", "high", "--", "x")
        assert code == 0, err
    code, out, err = await horizon(url, "submit", "--gpus", "4", "--job-id", "next", "--profile", "wide", "--", "x")
    assert code == 0, err
    code, out, err = await horizon(url, "submit", "--gpus", "1", "--job-id", "picky", "--node-selector", "zone=eu",
                                   "--", "x")
    assert code == 0, err

    deadline = asyncio.get_running_loop().time() + 30
    while True:
        code, out, err = await horizon(url, "queue", "--why")
        if "reserved on nodes node-0" in out and "NodeSelector" in out:
            break
        assert asyncio.get_running_loop().time() < deadline, out + err
        await asyncio.sleep(0.3)
    assert "GpuFree" in out and "too few free GPUs (needs 4)" in out
    assert "2 nodes  NodeSelector     labels do not match the node selector zone=eu" in out
    code, out, err = await horizon(url, "queue", "--why", "--json")
    kinds = {r["job_id"]: r["why"].get("why_kind") for r in json.loads(out)}
    assert kinds["picky"] == "fits-nowhere" and kinds["next"] in ("reservation", "resources"), kinds
    code, out, err = await horizon(url, "queue", "--why")
    assert "[fits-nowhere]" in out, out
    code, out, err = await horizon(url, "show", "next")
    assert code == 0 and "reserved on nodes node-0" in out, err
    await h.stop()
    assert_replays(await read_log(url))


async def test_preemption_dry_run_then_for_real_through_the_services(running_horizon):
    from services.front.host.check import check_log

    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=8), executor="sim")
    url = h.url
    code, out, err = await horizon(url, "preemption", "set", "--per-minute", "0")  # hold preemption back
    assert code == 0 and "preemption settings applied" in out, err
    code, out, err = await horizon(url, "preemption", "set", "--rule", "low=normal")
    assert code == 2 and "may only preempt lower classes" in err
    for job_id in ("old", "young"):
        code, out, err = await horizon(url, "submit", "--gpus", "4", "--sim-runtime", "600", "--job-id", job_id,
                                       "--", "x")
        assert code == 0, err
        await asyncio.sleep(1.2)  # "young" starts later: less work to lose
    code, out, err = await horizon(url, "submit", "--gpus", "4", "--job-id", "vip", "--priority-class",
                                   "critical", "--sim-runtime", "1", "--", "x")
    assert code == 0, err
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        code, out, err = await horizon(url, "preempt", "vip", "--dry-run", "--json")
        body = json.loads(out) if code == 0 else {}
        if body.get("victims"):
            break
        assert asyncio.get_running_loop().time() < deadline, out + err
        await asyncio.sleep(0.3)
    assert [v["job_id"] for v in body["victims"]] == ["young"] and body["cost"]["gpus"] == 4
    assert body["victims"][0]["why"] == "class normal < critical"
    code, out, err = await horizon(url, "preempt", "vip", "--dry-run")
    assert "would stop 1 job(s)" in out and "young" in out, err
    code, out, err = await horizon(url, "preemption", "set", "--per-minute", "60")
    assert code == 0, err
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        records = await read_log(url)
        subjects = [r.subject for r in records]
        if "horizon.evt.agent.JobSucceeded.vip" in subjects:
            break
        assert asyncio.get_running_loop().time() < deadline, subjects[-20:]
        await asyncio.sleep(0.3)
    assert "horizon.evt.agent.JobPreempted.young" in subjects
    assert "horizon.evt.scheduling.JobRequeued.young" in subjects
    assert "horizon.evt.agent.JobPreempted.old" not in subjects
    await h.stop()
    records = await read_log(url)
    assert check_log(records).ok
    assert_replays(records)


async def test_horizon_check_passes_a_real_log_and_fails_a_forged_over_allocation(running_horizon):
    from events.codec import decode

    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=4), executor="sim")
    url = h.url
    for i in range(3):
        code, out, err = await horizon(url, "submit", "--gpus", "2", "--sim-runtime", "0.2", "--job-id", f"c{i}",
                                       "--", "x")
        assert code == 0, err
    deadline = asyncio.get_running_loop().time() + 30
    while sum(r.subject.startswith("horizon.evt.agent.JobSucceeded.") for r in await read_log(url)) < 3:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.2)
    # "long" holds 2 of the 4 GPUs past the end of the log; "late" (4 GPUs) waits behind it
    for job_id, gpus, runtime in (("long", "2", "600"), ("late", "4", "1")):
        code, out, err = await horizon(url, "submit", "--gpus", gpus, "--sim-runtime", runtime, "--job-id",
                                       job_id, "--", "x")
        assert code == 0, err
    deadline = asyncio.get_running_loop().time() + 30
    while not {"horizon.evt.agent.JobStarted.long", "horizon.evt.placement.PlacementBlocked.late"} <= {
            r.subject for r in await read_log(url)}:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.2)
    await h.stop()
    code, out, err = await horizon(url, "check", "--json")
    body = json.loads(out)
    assert code == 0 and body["problems"] == [] and body["audit"]["mismatches"] == 0, out + err
    assert (body["jobs"], body["ended"], body["live"]) == (5, 3, 2)
    # a forged JobScheduled giving "late" (accepted, waiting) a GPU "long" holds: over-allocated, not reproduced
    records = await read_log(url)
    [held] = [decode(r.data) for r in records if r.subject == "horizon.evt.placement.JobScheduled.long"]
    node, device = held.allocations[0].node, held.allocations[0].device_ids[0]
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.publish("horizon.evt.placement.JobScheduled.late", json.dumps({
        "type": "JobScheduled", "job_id": "late", "attempt": 1, "basis_seq": records[-1].seq, "source": "placement",
        "allocations": [{"node": node, "device_ids": [device], "cpus_milli": 1000, "memory_bytes": 1}],
    }).encode(), headers={"Nats-Msg-Id": "forged"})
    await nc.close()
    code, out, err = await horizon(url, "check", "--json")
    body = json.loads(out)
    problems = body["problems"]
    assert code == 1 and problems[0] == f"seq {records[-1].seq + 1}: {node}/{device} given to late while long holds it"
    assert f"{node}/{device}: allocated to both late and long" in problems, problems  # and so the ledger at the end
    assert body["audit"]["mismatches"] >= 1
    code, out, err = await horizon(url, "check")
    assert code == 1 and "FAILED" in out and f"{node}/{device} given to late while long holds it" in out, out + err
