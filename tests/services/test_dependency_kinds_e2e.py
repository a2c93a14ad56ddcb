"""Issue 19's dependencies through the real services over NATS: ``horizon submit --dependency
aftercheckpoint:J`` starts once J records its first checkpoint (here when a NoExecute taint evicts it,
which checkpoints it), ``afterdata:NAME`` once an operator announces the dataset (``horizon dataset
announce``), a dependency timeout ends a job whose dependency never comes, and a job that
could no longer end by its ``--deadline`` ends UNSCHEDULABLE. The log replays."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.nodes.spec import local_nodes
from tests.e2e import CHECKPOINTING, assert_replays, horizon, job_json, publish_all, wait_until

pytestmark = pytest.mark.timeout(120)


async def test_after_checkpoint_dependency_timeout_and_deadline(running_horizon):
    h = await running_horizon(nodes=local_nodes(2, gpus_per_node=4), executor="process", tick_interval_s=0.5)
    url, tally, js = h.url, h.tally, h.js
    await publish_all(js, [
        ("horizon.in.acme.submit", job_json("ckpt", resources={"gpus": 1}, command=["bash", "-c", CHECKPOINTING],
                                            checkpoint_signal="SIGUSR1"), "ckpt"),
        ("horizon.in.acme.submit", job_json("late", command=["true"], dependency_timeout_s=1.5,
                                            dependencies=[{"kind": "after-ok", "job_id": "never-sent"}]), "late"),
        # it waits for a job never sent; its 60 s limit must end by the deadline 62 s from now: 2 s to start
        ("horizon.in.acme.submit", job_json("due", command=["true"], time_limit_s=60, deadline_ts=time.time() + 62,
                                            dependencies=[{"kind": "after-ok", "job_id": "never-sent"}]), "due"),
    ])
    await wait_until(lambda: tally.has("JobStarted", "ckpt"), 20, "ckpt to start")
    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "eval", "--gpus", "0",
                                   "--dependency", "aftercheckpoint:ckpt", "--no-wait", "true")
    assert code == 0, err
    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "etl", "--gpus", "0",
                                   "--dependency", "afterdata:raw-2026", "--no-wait", "true")
    assert code == 0, err
    loop = asyncio.get_running_loop()
    until = loop.time() + 30
    while True:
        code, out, err = await horizon(url, "queue", "--why")
        if "ckpt's first checkpoint (after-checkpoint)" in out and \
                "waiting for dataset raw-2026 to be announced available (afterdata)" in out:
            break
        assert loop.time() < until, out + err
        await asyncio.sleep(0.3)
    await wait_until(lambda: tally.has("JobDependencyNeverSatisfied", "late"), 20, "the dependency timeout")
    await wait_until(lambda: tally.has("JobUnschedulable", "due"), 20, "the deadline")
    assert not tally.has("JobStarted", "eval") and not tally.has("JobStarted", "etl")
    code, out, err = await horizon(url, "dataset", "announce", "raw-2026", "--reason", "etl run 7")
    assert code == 0 and "dataset raw-2026 announcement applied" in out, out + err
    await wait_until(lambda: tally.has("JobSucceeded", "etl"), 30, "etl to run once its dataset is announced")
    node = tally.last[("JobStarted", "ckpt")]["node"]
    code, out, err = await horizon(url, "node", "taint", node, "gpu=broken:NoExecute", "--reason", "test")
    assert code == 0, err
    await wait_until(lambda: tally.has("JobCheckpointed", "ckpt"), 30, "ckpt to checkpoint")
    await wait_until(lambda: tally.has("JobSucceeded", "eval"), 30, "eval to run after the checkpoint")
    await wait_until(lambda: tally.has("JobStarted", "ckpt") and tally.last[("JobStarted", "ckpt")]["attempt"] == 2,
                     30, "ckpt to start again")
    code, out, err = await horizon(url, "cancel", "--tenant", "acme", "ckpt")
    await h.stop()
    late = tally.last[("JobDependencyNeverSatisfied", "late")]
    assert late["reason"].startswith("timeout: dependencies not met within 1.5 s of acceptance (waiting for ")
    due = tally.last[("JobUnschedulable", "due")]
    assert due["reason"].startswith("deadline: it could not end by ") and "time limit 60 s" in due["reason"]
    assert due["reason"].endswith(": waiting for never-sent: not submitted yet"), due["reason"]
    records = await h.records()
    assert_replays(records)
