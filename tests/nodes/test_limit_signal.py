"""Slurm's --signal on real processes: the agent sends the signal that many seconds before the attempt's time
limit, to the batch shell alone with B:, else to the job's other processes and not the shell (which has no
trap here and would die of it). Small limits: the jobs run a few seconds."""

from __future__ import annotations

import os
import signal
import sys
import time

import nats
import pytest

from services.nodes.spec import local_nodes
from services.nodes.backends.process.signals import deliver, group_members
from services.front.host.stack import Stack
from tests.e2e import Tally, assert_replays, job_json, publish_all, read_log, wait_until

pytestmark = pytest.mark.timeout(120)

# The batch shell traps USR1 itself (B:): it writes when it got it, and ends the job.
BATCH = 'trap \'date +%s.%N > "$OUT"; exit 0\' USR1; date +%s.%N > "$OUT.start"; while :; do sleep 0.1; done'
# The batch shell has no trap; its child (a step, as srun would start) writes and exits on USR1.
CHILD = ("import signal, sys, time, os\n"
         "def got(n, f):\n"
         "    open(os.environ['OUT'], 'w').write(repr(time.time()))\n"
         "    sys.exit(0)\n"
         "signal.signal(signal.SIGUSR1, got)\n"
         "open(os.environ['OUT'] + '.start', 'w').write(repr(time.time()))\n"
         "time.sleep(60)\n")


async def test_the_signal_comes_that_many_seconds_before_the_limit(nats_server, tmp_path):
    stack = Stack(nats_server.url, tmp_path / "stack", nodes=local_nodes(1, gpus_per_node=0), executor="process")
    await stack.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    batch_out, step_out = tmp_path / "batch", tmp_path / "step"
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    try:
        await publish_all(nc.jetstream(), [
            ("horizon.in.acme.submit", job_json(
                "batch", command=["bash", "-c", BATCH], env={"OUT": str(batch_out)}, time_limit_s=6,
                limit_signal={"signal": "USR1", "before_s": 3, "batch_only": True}), "batch"),
            ("horizon.in.acme.submit", job_json(
                "steps", command=["bash", "-c", f'{sys.executable} {child} & wait'], env={"OUT": str(step_out)},
                time_limit_s=6, limit_signal={"signal": "SIGUSR1", "before_s": 3}), "steps"),
        ])
        await wait_until(lambda: tally.has("JobSucceeded", "batch") and tally.has("JobSucceeded", "steps"), 30,
                         "both jobs to end after their signal")
    finally:
        await nc.close()
        await stack.stop()
    for out in (batch_out, step_out):
        started, signalled = float((out.parent / (out.name + ".start")).read_text()), float(out.read_text())
        # 6 s limit, 3 s before it: about 3 s after the start (the process starts a little after the clock)
        assert 2.0 <= signalled - started <= 4.0, (out.name, signalled - started)
    # the shell without a trap was not signalled: it waited for its child and ended with its 0
    assert tally.last[("JobSucceeded", "steps")]["exit_code"] == 0
    assert_replays(await read_log(nats_server.url))


def test_deliver_skips_the_main_process_unless_batch_only():
    """Signal a process group's members but its leader (a shell here, as the job's main process)."""
    import subprocess

    shell = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.time() + 5
        while len(group_members(shell.pid)) < 3 and time.time() < deadline:
            time.sleep(0.05)
        members = group_members(shell.pid)
        assert shell.pid in members and len(members) == 3
        assert deliver(shell.pid, signal.SIGTERM, batch_only=False) == 2  # the two sleeps
        shell.wait(timeout=10)  # its children gone, wait returns: the shell itself was spared
        assert shell.returncode != -signal.SIGTERM
        again = subprocess.Popen(["bash", "-c", "sleep 30"], start_new_session=True)
        assert deliver(again.pid, signal.SIGTERM, batch_only=True) == 1
        assert again.wait(timeout=10) == -signal.SIGTERM
    finally:
        for p in (shell,):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
