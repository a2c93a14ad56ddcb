"""Drain with migration (issue 19) through the real services and agents over NATS.

Two nodes; four jobs on node-00. ``horizon node drain node-00 --migrate --deadline 15`` prints the
plan: the checkpointing job migrates (checkpointed, requeued, started on node-01 with its checkpoint
reference in ``$HORIZON_CHECKPOINT_REF``), a short job finishes on node-00, a long one is stopped at
the deadline and requeued on node-01, and one that may not be requeued is stopped then and ends
with the deadline as its reason. The log replays decision for decision.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from events import catalogue as c
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from tests.e2e import CHECKPOINTING, assert_replays, events_of, horizon, job_json, publish_all, wait_until
from tests.helpers import job_file

pytestmark = pytest.mark.timeout(150)

DEADLINE_S = 15.0


async def test_drain_migrates_the_checkpointing_job_lets_one_finish_and_stops_the_rest_at_the_deadline(
        running_horizon, tmp_path):
    # the log's clock ticks every 0.5 s: the deadline is met at the first tick past it
    h = await running_horizon(nodes=local_nodes(2, gpus_per_node=4), executor="process", tick_interval_s=0.5)
    url, tally, js = h.url, h.tally, h.js

    def attempt_started(job_id: str, attempt: int) -> bool:
        body = tally.last.get(("JobStarted", job_id))
        return body is not None and body["attempt"] == attempt

    def stderr(job_id: str, attempt: int) -> str:
        path = job_file(tmp_path / "jobs", job_id, attempt, "stderr")
        return path.read_text() if path.exists() else ""

    release = tmp_path / "release-quick"
    # node-01 cordoned while the jobs start, so that all four are on node-00
    code, out, err = await horizon(url, "node", "cordon", "node-01")
    assert code == 0, err
    await publish_all(js, [
        ("horizon.in.acme.submit", job_json("ckpt", resources={"gpus": 1}, command=["bash", "-c", CHECKPOINTING],
                                            checkpoint_signal="SIGUSR1"), "ckpt"),
        # quick runs until the test lets it end, after the drain: within its limit, before the deadline
        ("horizon.in.acme.submit", job_json("quick", resources={"gpus": 1}, command=[
            "bash", "-c", f"while [ ! -e {release} ]; do sleep 0.1; done"], time_limit_s=DEADLINE_S), "quick"),
        ("horizon.in.acme.submit", job_json("long", resources={"gpus": 1}, command=["sleep", "120"]), "long"),
        ("horizon.in.acme.submit", job_json("stuck", resources={"gpus": 1}, command=["sleep", "120"],
                                            requeue=False), "stuck"),
    ])
    await wait_until(lambda: all(attempt_started(j, 1) for j in ("ckpt", "quick", "long", "stuck")), 40,
                     "four jobs to start")
    assert {tally.last[("JobStarted", j)]["node"] for j in ("ckpt", "quick", "long", "stuck")} == {"node-00"}
    code, out, err = await horizon(url, "node", "uncordon", "node-01")
    assert code == 0, err
    await wait_until(lambda: "resumed from nothing" in stderr("ckpt", 1), 10, "ckpt to set its traps")

    code, out, err = await horizon(url, "node", "drain", "node-00", "--migrate", "--deadline", f"{DEADLINE_S:g}",
                                   "--grace", "20", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["type"] == "NodeDraining" and answer["migrate"] is True
    assert answer["jobs"] == ["ckpt", "long", "quick", "stuck"]
    plan = {p["job_id"]: p["action"] for p in answer["plan"]}
    assert plan == {"ckpt": "migrate", "quick": "finish", "long": "requeue-at-deadline",
                    "stuck": "end-at-deadline"}, answer["plan"]
    drained_at = asyncio.get_running_loop().time()
    release.touch()

    # 1. the checkpointing job is stopped at once and resumes on node-01 from its checkpoint
    await wait_until(lambda: attempt_started("ckpt", 2), 30, "ckpt to start again")
    assert tally.last[("JobStarted", "ckpt")]["node"] == "node-01"
    await wait_until(lambda: "resumed" in stderr("ckpt", 2), 10, "ckpt's attempt 2 to say")
    assert stderr("ckpt", 2).splitlines()[0] == "resumed from ckpt-of-attempt-1"
    assert asyncio.get_running_loop().time() - drained_at < DEADLINE_S  # before the deadline
    # 2. quick ends by itself on node-00
    await wait_until(lambda: tally.has("JobSucceeded", "quick"), 20, "quick to finish")
    # 3. at the deadline: long is requeued to node-01, stuck ends
    await wait_until(lambda: attempt_started("long", 2), 40, "long to start again after the deadline")
    assert tally.last[("JobStarted", "long")]["node"] == "node-01"
    await wait_until(lambda: tally.has("JobPreempted", "stuck"), 20, "stuck to be stopped")

    code, out, err = await horizon(url, "show", "ckpt")
    assert code == 0 and "drain of node-00: migrate" in out, out + err
    deadline = asyncio.get_running_loop().time() + 10
    while True:  # the read models follow the log a moment behind our subscription
        code, out, err = await horizon(url, "show", "stuck")
        if "state PREEMPTED" in out or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert "state PREEMPTED" in out and "drain of node-00: end-at-deadline" in out, out + err
    assert "reason: node node-00 drain deadline passed: stopped, it may not be requeued, so it ends" in out
    while True:
        code, out, err = await horizon(url, "nodes", "--json")
        rows = {n["node"]: n for n in json.loads(out)}
        if rows["node-00"]["state"] == "drained" or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert rows["node-00"]["state"] == "drained" and rows["node-00"]["jobs"] == []
    assert rows["node-00"]["drain_migrate"] is True and rows["node-00"]["drain_deadline_ts"] == answer["deadline_ts"]
    assert rows["node-01"]["drain_migrate"] is False and rows["node-01"]["drain_deadline_ts"] is None
    code, out, err = await horizon(url, "nodes")
    assert "node-00 drained: checkpointable jobs migrate, what still runs at " in out, out + err
    assert sorted(rows["node-01"]["jobs"]) == ["ckpt", "long"]
    # horizon audit replays the log: every decision, the drain's included, reproduced
    code, out, err = await horizon(url, "audit", "--json")
    report = json.loads(out)
    assert code == 0 and report["mismatches"] == [] and report["reproduced"] == report["decisions"], out + err
    code, out, err = await horizon(url, "audit", "--job", "ckpt")
    assert code == 0 and "drain of node-00 planned (attempt 1, deadline " in out, out + err
    assert "preempted (attempt 1), checkpoint ckpt-of-attempt-1: node node-00 drains with migration" in out
    await h.stop()

    records = await h.records()
    events = events_of(records)
    assert all(e.grace_period_s == 20.0 for e in events if isinstance(e, c.PreemptionRequested))
    stops = sorted((e.job_id, e.attempt, e.reason) for e in events if isinstance(e, c.PreemptionRequested))
    assert stops == [("ckpt", 1, "node node-00 drains with migration: checkpointed to resume on another node"),
                     ("long", 1, "node node-00 drain deadline passed: stopped, requeued"),
                     ("stuck", 1, "node node-00 drain deadline passed: stopped, it may not be requeued, so it ends")]
    planned = [e for e in events if isinstance(e, c.JobDrainPlanned)]
    assert sorted((e.job_id, e.action) for e in planned) == sorted(plan.items())
    requeued = {e.job_id: e for e in events if isinstance(e, c.JobRequeued)}
    assert set(requeued) == {"ckpt", "long"}
    assert requeued["ckpt"].checkpoint_ref == "ckpt-of-attempt-1"
    # the deadline's stop was decided on the log's time: at or after the deadline, not before
    [draining] = [e for e in events if isinstance(e, c.NodeDraining)]
    long_stop = next(e for e in events if isinstance(e, c.PreemptionRequested) and e.job_id == "long")
    assert long_stop.ts >= draining.deadline_ts == draining.ts + DEADLINE_S
    started = [(e.job_id, e.attempt, e.node) for e in events if isinstance(e, c.JobStarted)]
    assert all(node == "node-01" for _, attempt, node in started if attempt == 2)  # never back on the draining node
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert_replays(records)
