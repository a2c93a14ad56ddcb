"""The process executor for real: environment and devices, exit codes and stderr, time limits, cancel."""

from __future__ import annotations

import pytest

from services.nodes.spec import local_nodes
from tests.e2e import assert_replays, job_json, publish_all, wait_until
from tests.helpers import job_file

pytestmark = pytest.mark.timeout(120)


async def test_process_jobs_report_exit_stderr_time_limit_and_cancel(running_horizon, tmp_path):
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=4), executor="process")
    tally, js = h.tally, h.js
    await publish_all(js, [
        ("horizon.in.acme.submit", job_json(
            "env", resources={"gpus": 2},
            command=["bash", "-c", 'echo "devices=$CUDA_VISIBLE_DEVICES job=$HORIZON_JOB_ID x=$X" >&2; exit 3'],
            env={"X": "42"}), "env"),
        ("horizon.in.acme.submit", job_json("ok", command=["true"]), "ok"),
        ("horizon.in.acme.submit", job_json("slow", command=["sleep", "30"], time_limit_s=1), "slow"),
        ("horizon.in.acme.submit", job_json("victim", command=["sleep", "30"]), "victim"),
        ("horizon.in.acme.submit", job_json("missing", command=["/no/such/binary"]), "missing"),
    ])
    await wait_until(lambda: tally.has("JobStarted", "victim"), 20, "victim to start")
    await js.publish("horizon.in.acme.cancel",
                     b'{"type": "JobCancelRequested", "job_id": "victim", "tenant": "acme"}',
                     headers={"Nats-Msg-Id": "cancel-victim"})
    await wait_until(lambda: all(tally.has(k, j) for k, j in [
        ("JobFailed", "env"), ("JobSucceeded", "ok"), ("JobFailed", "slow"), ("JobCancelled", "victim"),
        ("JobFailed", "missing")]), 30, "every job to end")
    await h.stop()
    env = tally.last[("JobFailed", "env")]
    assert env["exit_code"] == 3
    assert "devices=0,1 job=env x=42" in env["stderr_tail"]
    assert "time limit of 1 s exceeded" in tally.last[("JobFailed", "slow")]["reason"]
    assert tally.has("JobStopRequested", "victim")
    assert "could not start" in tally.last[("JobFailed", "missing")]["reason"]
    assert "devices=0,1" in job_file(tmp_path / "jobs", "env", 1, "stderr").read_text()
    assert_replays(await h.records())


async def test_an_attempt_outlives_its_executor_and_is_adopted_by_the_next(tmp_path):
    """A new executor on the same directory (a restarted agent) watches the attempt the first one
    started, and learns its real end, also when it ended while no one watched."""
    from events import catalogue as c
    from services.nodes.backends.process.executors import ProcessExecutor

    spec = c.JobSpec(tenant="acme", command=["sh", "-c", "sleep 1; echo done; exit 7"])
    alloc = c.NodeAllocation(node="n", cpus_milli=1000, memory_bytes=1 << 30)
    first = ProcessExecutor(tmp_path)
    execution = await first.start("orphan", 1, spec, alloc)
    assert execution.pid is not None
    del first, execution  # the agent is gone; the supervisor is not
    second = ProcessExecutor(tmp_path)
    assert second.running() == [("orphan", 1)]
    adopted = second.adopt("orphan", 1, alloc)
    assert adopted is not None
    outcome = await adopted.wait()
    assert outcome.exit_code == 7 and not outcome.out_of_memory and outcome.runtime_s >= 0.9
    assert job_file(tmp_path, "orphan", 1, "stdout").read_text() == "done\n"
    # ended while no agent watched: a third executor still finds the status
    assert ProcessExecutor(tmp_path).adopt("orphan", 1, alloc) is not None
    assert ProcessExecutor(tmp_path).running() == []
    assert ProcessExecutor(tmp_path).adopt("never", 1, alloc) is None
