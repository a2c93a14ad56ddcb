"""Job steps for real: srun inside a job, across two node agents that talk over a real nats-server,
and the whole path through `horizon up` and `horizon sbatch` to `horizon sacct`.

Two agents on this machine, each hosting one node of its own (as two machines would), so a step's
tasks on the other node go through that node's agent (horizon.step.<node>) and their output comes
back over NATS; real processes, in the job's cgroups where the machine has them.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nats
import pytest

from events import catalogue as c
from services.nodes.agent.app import NodeAgent
from services.nodes.backends.process.executors import ProcessExecutor, kill_attempts
from services.nodes.spec import local_nodes
from services.front.host.stack import Stack
from services.runtime.jetstream import JetStreamLog
from tests.e2e import Tally, events_of, job_json, publish_all, read_log, wait_until
from tests.nodes.test_real_nodes import Up

pytestmark = pytest.mark.timeout(240)


class TwoAgents:
    """The services and projections of a Stack, and two agents of one node each."""

    def __init__(self, url: str, base: Path, urls: dict[str, str] | None = None) -> None:
        self.url = url
        self.base = base
        self.nodes = local_nodes(2, gpus_per_node=4, cpus=8, memory_bytes=8 << 30)
        self.urls = urls or {}
        self.stack = Stack(url, base / "stack", executor="process", urls=self.urls)
        self.agents: list[NodeAgent] = []
        self.logs: list[JetStreamLog] = []

    async def start(self) -> None:
        await self.stack.start()
        for i, spec in enumerate(self.nodes):
            await self.start_agent(i)

    async def start_agent(self, i: int) -> NodeAgent:
        spec = self.nodes[i]
        log_ = await JetStreamLog.open(self.urls.get("agent", self.url), name=f"agent-{i}", create=False)
        executor = ProcessExecutor(self.base / f"agent{i}", {spec.name: spec})
        agent = NodeAgent(log_, [spec], executor, nc=log_.nc, name=f"agent-{i}", grace_period_s=3.0)
        await agent.start()
        if i < len(self.agents):
            self.agents[i], self.logs[i] = agent, log_
        else:
            self.agents.append(agent)
            self.logs.append(log_)
        return agent

    async def stop_agent(self, i: int) -> None:
        await self.agents[i].stop()
        await self.logs[i].close()

    async def stop(self) -> None:
        for i in range(len(self.agents)):
            try:
                await self.stop_agent(i)
            except Exception:  # noqa: BLE001 - already stopped
                pass
        for i in range(len(self.nodes)):
            kill_attempts(self.base / f"agent{i}")
        await self.stack.stop()


def _job(job_id: str, script: str, work: Path, **fields) -> tuple[str, bytes, str]:
    # its output in <job_id>.out: named by the job's name (%x), %j being its number
    body = {"command": ["bash", "-c", script], "nodes": 2, "tasks_per_node": 2, "cwd": str(work), "name": job_id,
            "stdout": str(work / "%x.out"), "resources": {"cpus": 2, "memory": "256Mi", "gpus": 1},
            "time_limit_s": 120}
    body.update(fields)
    return ("horizon.in.acme.submit", job_json(job_id, **body), job_id)


STEPS = r"""
echo "NODES $SLURM_JOB_NODELIST $SLURM_TASKS_PER_NODE $SLURM_NTASKS"
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS $CUDA_VISIBLE_DEVICES'
srun -l --gpus-per-task=1 bash -c 'echo GPU $CUDA_VISIBLE_DEVICES'
echo "BYTES $(srun bash -c 'head -c 300000 /dev/zero | tr "\0" x; echo' | wc -c)"
srun -N 3 true; echo "TOOBIG $?"
srun bash -c 'echo err $SLURM_PROCID >&2; exit $SLURM_PROCID'; echo "FAILED $?"
echo "HOSTS $(scontrol show hostnames | tr '\n' ' ')"
"""


async def test_a_step_runs_its_tasks_on_both_nodes_through_their_agents(nats_server, tmp_path):
    cluster = TwoAgents(nats_server.url, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    await cluster.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    try:
        await publish_all(nc.jetstream(), [_job("steps", STEPS, work)])
        await wait_until(lambda: tally.has("JobSucceeded", "steps") or tally.has("JobFailed", "steps"), 90,
                         "the job to end")
        assert tally.has("JobSucceeded", "steps"), tally.last.get(("JobFailed", "steps"))
    finally:
        await nc.close()
        await cluster.stop()
    out = (work / "steps.out").read_text()
    lines = out.splitlines()
    assert "NODES node-[00-01] 2(x2) 4" in lines, out
    tasks = sorted(line.split()[1:] for line in lines if line.startswith("TASK"))
    batch = next(n.name for n in cluster.nodes if f"TASK 0 0 0 0 {n.name} 4 0,1" in out)
    other = next(n.name for n in cluster.nodes if n.name != batch)
    assert tasks == [["0", "0", "0", "0", batch, "4", "0,1"], ["0", "1", "1", "0", batch, "4", "0,1"],
                     ["0", "2", "0", "1", other, "4", "0,1"], ["0", "3", "1", "1", other, "4", "0,1"]], out
    assert sorted(line for line in lines if "GPU" in line) == ["0: GPU 0", "1: GPU 1", "2: GPU 0", "3: GPU 1"]
    assert "BYTES 1200004" in lines, out  # four tasks' 300,001 bytes each, whole, through NATS for two of them
    assert any(line.startswith("srun: error: the step asks for 3 nodes; the job holds 2") for line in lines), out
    assert "TOOBIG 1" in lines and "FAILED 3" in lines
    assert f"srun: error: {other}: task 3: Exited with exit code 3" in lines
    assert sorted(line for line in lines if line.startswith("err")) == ["err 0", "err 1", "err 2", "err 3"]
    assert f"HOSTS node-00 node-01 " in lines

    records = await read_log(nats_server.url)
    steps = [e for e in events_of(records) if isinstance(e, (c.JobStepStarted, c.JobStepEnded))]
    assert [(type(e).__name__, e.step) for e in steps] == [
        (kind, n) for n in range(4) for kind in ("JobStepStarted", "JobStepEnded")]  # the refused one made none
    ended = {e.step: e for e in steps if isinstance(e, c.JobStepEnded)}
    assert [ended[n].task_exit_codes for n in range(4)] == [[0] * 4, [0] * 4, [0] * 4, [0, 1, 2, 3]]
    assert (ended[3].exit_code, ended[3].signal, ended[3].cancelled) == (3, 0, False)
    assert ended[0].id == "agent/JobStepEnded/steps/1/0" and ended[0].source == f"agent/{batch}"
    started = next(e for e in steps if isinstance(e, c.JobStepStarted) and e.step == 1)
    assert (started.nodes, started.tasks, started.tasks_per_node, started.gpus_per_task) == (
        [batch, other], 4, [2, 2], 1)


async def test_steps_under_accounts_go_between_agents_only(tmp_path):
    """With deploy/nats/auth.conf: the agents (user agent) run a step across their nodes over
    horizon.step.<node>; a tenant's user cannot reach those subjects."""
    from services.runtime.natsserver import NatsServer
    from tests.front.test_auth import AUTH_CONF, SERVICE_USERS, url

    server = NatsServer(store_dir=tmp_path / "js", port=0, config=AUTH_CONF)
    server.start()
    cluster = TwoAgents(url(server, "admin"), tmp_path, urls={u: url(server, u) for u in (*SERVICE_USERS, "admin")})
    work = tmp_path / "work"
    work.mkdir()
    try:
        await cluster.start()
        admin = await nats.connect(url(server, "admin"))
        tally = Tally()
        await admin.subscribe("horizon.evt.>", cb=tally.on_msg)
        await publish_all(admin.jetstream(), [_job("acct", "srun bash -c 'echo TASK $SLURMD_NODENAME'", work,
                                                   tasks_per_node=1)])
        await wait_until(lambda: tally.has("JobSucceeded", "acct") and tally.has("JobStepEnded", "acct"), 60,
                         "the job and its step to end")
        assert tally.last[("JobStepEnded", "acct")]["task_exit_codes"] == [0, 0]
        assert sorted((work / "acct.out").read_text().split()) == ["TASK", "TASK", "node-00", "node-01"]
        alice = await nats.connect(url(server, "alice"))
        for subject in ("horizon.step.node-00", "horizon.step.node-01"):
            with pytest.raises(nats.errors.NoRespondersError):
                await alice.request(subject, b'{"op": "signal"}', timeout=2)
        await alice.close()
        await admin.close()
    finally:
        await cluster.stop()
        server.stop()


def _running(marker: str) -> list[str]:
    done = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return done.stdout.split()


async def test_a_cancel_stops_the_steps_tasks_on_every_node_and_a_lost_coordinator_stops_its_shares(
        nats_server, tmp_path):
    cluster = TwoAgents(nats_server.url, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    marker = f"step-marker-{uuid.uuid4().hex}"
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)' {marker}"  # each task's child, found by its marker
    (work / "task.sh").write_text(f'trap "echo TERM $SLURMD_NODENAME; exit 5" TERM\necho UP $SLURMD_NODENAME\n'
                                  f"{sleeper} &\nwait\n")
    (work / "silent.sh").write_text(f"echo UP\nexec {sleeper}-2\n")
    await cluster.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    js = nc.jetstream()
    try:
        await publish_all(js, [_job("victim", "srun bash task.sh", work, tasks_per_node=1)])
        out = work / "victim.out"
        await wait_until(lambda: out.exists() and out.read_text().count("UP ") == 2, 60, "both tasks to run")
        assert len(_running(marker)) == 2  # a sleeper per task
        await js.publish("horizon.in.acme.cancel", b'{"type": "JobCancelRequested", "job_id": "victim", '
                         b'"tenant": "acme"}', headers={"Nats-Msg-Id": "cancel-victim"})
        await wait_until(lambda: tally.has("JobCancelled", "victim") and tally.has("JobStepEnded", "victim"), 30,
                         "the job and its step to end")
        await wait_until(lambda: not _running(marker), 15, "the step's tasks to be gone on both nodes")
        ended = tally.last[("JobStepEnded", "victim")]
        assert ended["cancelled"] and sorted(ended["task_exit_codes"]) == [5, 5], ended  # their trap ran
        assert sorted(line for line in out.read_text().splitlines() if line.startswith("TERM")) == [
            "TERM node-00", "TERM node-01"]

        # The coordinating agent vanishes (its connection drops, as when its machine dies) while a silent
        # step runs: the other node's agent, asking every few seconds, gets no answer and stops its share.
        marker2 = f"{marker}-2"
        await publish_all(js, [_job("orphan", "srun bash silent.sh", work, tasks_per_node=1)])
        out2 = work / "orphan.out"
        await wait_until(lambda: out2.exists() and out2.read_text().count("UP") == 2, 60, "both tasks to run")
        batch = tally.last[("JobStarted", "orphan")]["node"]
        i = [n.name for n in cluster.nodes].index(batch)
        await cluster.logs[i].nc.close()
        other_pids = lambda: [p for p in _running(marker2)  # noqa: E731 - the other node's tasks
                              if f"HORIZON_NODE={cluster.nodes[1 - i].name}".encode() in
                              Path(f"/proc/{p}/environ").read_bytes()]
        assert other_pids()
        await wait_until(lambda: not other_pids(), 30, "the other node's share to stop")
    finally:
        await nc.close()
        await cluster.stop()
    assert not _running(marker)


# A step's task counts the USR1s it gets (--signal=USR1@N without B:), then ends.
COUNTER = ("import os, signal, time\n"
           "got = []\n"
           "signal.signal(signal.SIGUSR1, lambda n, f: got.append(time.time()))\n"
           "print('UP', os.environ['SLURMD_NODENAME'], flush=True)\n"
           "end = time.time() + 6\n"
           "while time.time() < end:\n"
           "    time.sleep(0.05)\n"
           "print('USR1', os.environ['SLURMD_NODENAME'], os.environ['SLURM_PROCID'], len(got), flush=True)\n")


async def test_the_jobs_signal_reaches_every_task_of_a_step_once(nats_server, tmp_path):
    """Slurm's --signal (not B:) goes to the job's steps: here through srun, which passes it on to every
    task on every node; a task on the batch node is not signalled a second time through the cgroup."""
    cluster = TwoAgents(nats_server.url, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "counter.py").write_text(COUNTER)
    await cluster.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    try:
        await publish_all(nc.jetstream(), [_job("signalled", f"srun {sys.executable} counter.py; echo END", work,
                                                time_limit_s=9, limit_signal={"signal": "USR1", "before_s": 6})])
        await wait_until(lambda: tally.has("JobSucceeded", "signalled") or tally.has("JobFailed", "signalled"), 60,
                         "the job to end")
    finally:
        await nc.close()
        await cluster.stop()
    lines = (work / "signalled.out").read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("USR1")) == [
        "USR1 node-00 0 1", "USR1 node-00 1 1", "USR1 node-01 2 1", "USR1 node-01 3 1"], lines


def test_srun_and_sacct_through_horizon_up_and_sbatch(tmp_path):
    """The issue's end-to-end: a 2-node job of 2 tasks per node whose script runs srun and scontrol
    ends SUCCEEDED with the right lines, and sacct shows its batch script and steps with exit codes."""
    up = Up(tmp_path / "h", "--nodes", "2", "--gpus-per-node", "4", "--executor", "process")
    work = tmp_path / "project"
    work.mkdir()
    script = work / "ddp.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2\n#SBATCH --gres=gpu:2\n#SBATCH -t 5\n#SBATCH -o ddp-%j.out\n"
        "srun bash -c 'echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'\n"
        "scontrol show hostnames $SLURM_JOB_NODELIST\n"
        "srun -n 1 bash -c 'exit 7'; echo \"step 1 said $?\"\n"
        "scontrol show job | grep -o 'NumTasks=[0-9]*'\n")
    up.start()
    try:
        done = up.cli("sbatch", "--parsable", str(script), cwd=work)
        assert done.returncode == 0, done.stderr
        assert "srun" not in done.stderr and "scontrol" not in done.stderr  # no warning: they work here
        job = done.stdout.strip()
        row = up.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=90)
        assert row["state"] == "SUCCEEDED", (row, (work / f"ddp-{job}.out").read_text())
        lines = (work / f"ddp-{job}.out").read_text().splitlines()
        # the four tasks run at once: their lines come in any order (under load rank 1 wrote before rank 0)
        assert sorted(lines[:4]) == ["0 0 0 node-00 0,1", "1 1 0 node-00 0,1", "2 0 1 node-01 0,1",
                                     "3 1 1 node-01 0,1"] and lines[4:6] == ["node-00", "node-01"], lines
        assert "step 1 said 7" in lines and "NumTasks=4" in lines, lines
        sacct = up.cli("sacct", "-j", job, "-P", "-n", "-o", "JobID,JobName,State,ExitCode,NNodes,NTasks,NodeList")
        assert sacct.returncode == 0, sacct.stderr
        assert sacct.stdout.splitlines() == [
            f"{job}|ddp.sh|COMPLETED|0:0|2|4|node-[00-01]",
            f"{job}.batch|batch|COMPLETED|0:0|1|1|node-00",
            f"{job}.0|bash|COMPLETED|0:0|2|4|node-[00-01]",
            f"{job}.1|bash|FAILED|7:0|1|1|node-00"], sacct.stdout
        shown = up.cli("show", job).stdout
        assert f"step {job}.1 bash: FAILED, 1 task(s) on node-00, exit 7:0" in shown, shown
        steps = up.cli("scontrol", "show", "step", f"{job}.1").stdout  # outside the job: the read model
        assert f"StepId={job}.1 " in steps and "State=FAILED" in steps and "ExitCode=7:0" in steps, steps
        text = up.cli("scontrol", "show", "job", job).stdout
        fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
        assert (fields["JobState"], fields["NumNodes"], fields["NumTasks"], fields["NodeList"], fields["StdOut"]) == (
            "COMPLETED", "2", "4", "node-[00-01]", str(work / f"ddp-{job}.out")), text
    finally:
        assert up.stop() == 0
