"""Time-driven decisions on a live cluster: the clock ticks through the log, so a scheduling timeout
and a restart backoff happen on time even when nothing else does."""

from __future__ import annotations

import pytest

from events.subjects import admin_subject
from services.nodes.spec import local_nodes
from tests.e2e import assert_replays, job_json, publish_all, wait_until

pytestmark = pytest.mark.timeout(90)


async def test_timeout_and_backoff_happen_on_the_clock(running_horizon):
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=4), executor="sim", tick_interval_s=0.5)
    tally, js = h.tally, h.js
    await js.publish(admin_subject("policy"), b'{"type": "PolicyConfigured", "backoff_base_s": 1.0}',
                     headers={"Nats-Msg-Id": "policy-1"})
    await publish_all(js, [
        ("horizon.in.acme.submit", job_json("hog", resources={"gpus": 4}, sim_runtime_s=60,
                                            priority_class="high"), "hog"),
        ("horizon.in.acme.submit", job_json("impatient", resources={"gpus": 2}, scheduling_timeout_s=1.5,
                                                command=["true"]), "impatient"),
        ("horizon.in.acme.submit", job_json("flaky", resources={"gpus": 0}, sim_runtime_s=0.1, sim_exit_code=1,
                                            restart_policy="on-failure", max_retries=1), "flaky"),
    ])
    await wait_until(lambda: tally.has("JobUnschedulable", "impatient"), 20, "the timeout")
    await wait_until(lambda: tally.count("JobFailed") >= 2, 20, "flaky's second attempt to fail")
    await h.stop()
    gone = tally.last[("JobUnschedulable", "impatient")]
    assert gone["reason"].startswith("not started within 1.5 s: ") and "GPU" in gone["reason"]
    requeued = tally.last[("JobRequeued", "flaky")]
    assert requeued["not_before_ts"] - requeued["ts"] == pytest.approx(1.0)
    records = await h.records()
    ticks = [r for r in records if ".ClockTicked." in r.subject]
    assert ticks, "the clock ticked through the log"
    started = [r for r in records if r.subject == "horizon.evt.agent.JobStarted.flaky"]
    assert len(started) == 2 and started[1].time - requeued["ts"] >= 1.0  # not before the backoff
    assert_replays(records)
