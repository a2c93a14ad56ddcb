"""The process executor for real: environment and devices, exit codes and stderr, time limits, cancel."""

from __future__ import annotations

import nats
import pytest

from services.agent.nodes import local_nodes
from services.host.stack import Stack
from tests.e2e import Tally, read_log, wait_until
from tests.test_e2e_services import assert_replays, job_json, publish_all

pytestmark = pytest.mark.timeout(120)


async def test_process_jobs_report_exit_stderr_time_limit_and_cancel(nats_server, tmp_path):
    stack = Stack(nats_server.url, tmp_path, nodes=local_nodes(1, gpus_per_node=4), executor="process")
    await stack.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    js = nc.jetstream()
    try:
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
    finally:
        await nc.close()
        await stack.stop()
    env = tally.last[("JobFailed", "env")]
    assert env["exit_code"] == 3
    assert "devices=0,1 job=env x=42" in env["stderr_tail"]
    assert "time limit of 1 s exceeded" in tally.last[("JobFailed", "slow")]["reason"]
    assert tally.has("JobStopRequested", "victim")
    assert "could not start" in tally.last[("JobFailed", "missing")]["reason"]
    assert (tmp_path / "jobs" / "env.1.err").exists()
    assert_replays(await read_log(nats_server.url))


async def test_a_job_left_by_a_killed_agent_is_found_and_ended(tmp_path):
    import os
    import signal

    from events import catalogue as c
    from services.agent.executors import ProcessExecutor

    spec = c.JobSpec(tenant="acme", command=["sleep", "30"])
    first = ProcessExecutor(tmp_path)
    execution = await first.start("orphan", 1, spec, c.NodeAllocation(node="n"))
    pid = execution.pid
    os.kill(pid, 0)  # running
    # a new agent (a new executor on the same directory) finds and kills it
    assert ProcessExecutor(tmp_path).reap_orphan("orphan", 1) is True
    outcome = await execution.wait()
    assert outcome.exit_code == -signal.SIGKILL
    assert not (tmp_path / "orphan.1.pid").exists()
    assert ProcessExecutor(tmp_path).reap_orphan("orphan", 1) is False
