"""``horizon up`` and ``horizon service a,b,c`` read the log once for their decision services, read
models and agent (services/runtime/fanout.py): one consumer where there were eight, and every decision still reproduces."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time

import pytest

from events.subjects import STREAM
from services.front.host.check import check_log
from services.nodes.spec import local_nodes
from services.runtime.jetstream import JetStreamLog
from tests.e2e import assert_replays, job_json, publish_all, wait_until
from tests.front.test_cli_up import HORIZON

pytestmark = pytest.mark.timeout(180)


async def _consumers(url: str) -> int:
    log_ = await JetStreamLog.open(url, name="counting", create=False)
    try:
        return int((await log_.js.stream_info(STREAM)).state.consumer_count)
    finally:
        await log_.close()


@pytest.mark.parametrize("shared", [True, False])
async def test_up_reads_once_for_its_decision_services_and_every_decision_reproduces(running_horizon, shared):
    h = await running_horizon(nodes=local_nodes(8, gpus_per_node=8), executor="sim", shared_reader=shared)
    stack, tally = h.stack, h.tally
    items = [("horizon.in.acme.submit", job_json(f"j-{i:04d}", resources={"gpus": 1 + i % 3}, sim_runtime_s=0.02),
              f"j-{i:04d}") for i in range(600)]
    await publish_all(h.js, items)
    await wait_until(lambda: tally.count("JobSucceeded") == 600, 120, "600 jobs to finish")
    # One consumer for the five decision services, the two read models and the agent (else eight). A part
    # that started behind the reader once another part followed live reads on its own until it reaches
    # the reader, then joins it (services/runtime/fanout.py): on a loaded machine the last to start (the
    # jobs view) may still be chasing the burst when it ends, and joins moments later.
    if shared:
        await wait_until(lambda: stack.reader is not None and stack.reader.parts == 5 + 2 + 1, 10,
                         "every part on the one reader")
        assert await _consumers(h.url) == 1
    else:
        assert stack.reader is None and await _consumers(h.url) == 5 + 2 + 1
    # A part killed and restarted (a crash) joins the others again and decides on.
    await stack.kill("scheduling")
    await stack.restart("scheduling")
    more = [("horizon.in.acme.submit", job_json(f"k-{i:03d}", resources={"gpus": 1}, sim_runtime_s=0.02),
             f"k-{i:03d}") for i in range(100)]
    await publish_all(h.js, more)
    await wait_until(lambda: tally.count("JobSucceeded") == 700, 60, "100 more jobs to finish")
    if shared:
        await wait_until(lambda: stack.reader is not None and stack.reader.parts == 5 + 2 + 1, 10,
                         "the restarted part back on the one reader")
        assert await _consumers(h.url) == 1
    assert stack.failed() == []
    await h.stop()
    records = await h.records()
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert_replays(records)


def test_service_runs_several_decision_services_on_one_consumer(nats_server, tmp_path):
    err_path = tmp_path / "service.err"
    with err_path.open("w") as err:
        proc = subprocess.Popen([*HORIZON, "service", "scheduling,placement,preemption", "--nats", nats_server.url,
                                 "--data-dir", str(tmp_path / "h"), "--lease-ttl", "2"],
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.time() + 60
        while "running against" not in err_path.read_text() and time.time() < deadline:
            assert proc.poll() is None, err_path.read_text()
            time.sleep(0.1)
        text = err_path.read_text()
        assert re.search(r"scheduling, placement, preemption running against .* on one reader", text), text
        assert asyncio.run(_consumers(nats_server.url)) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=30) == 0, err_path.read_text()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise


@pytest.mark.parametrize("names, says", [
    ("scheduling,agent", "only decision services"),
    ("scheduling,scheduling", "names a service twice"),
    ("scheduling,nope", "'nope' is not a part"),
])
def test_service_refuses_a_bad_list_of_parts(tmp_path, names, says):
    done = subprocess.run([*HORIZON, "service", names, "--nats", "nats://127.0.0.1:1", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
