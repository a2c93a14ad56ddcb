"""NoExecute eviction and the agent's side of preemption, on a real nats-server.

End to end: an operator taints a node ``NoExecute`` from the CLI; the jobs there that do not
tolerate it are stopped (one checkpointing first) and reported ``JobPreempted``, requeued by
scheduling and started again on the other node, while the tolerating job keeps running.
Then the agent alone, fed by hand: one preemption per attempt, late requests ignored, a cancel
wins over a preemption, and a simulated job simply stops.
"""

from __future__ import annotations

import asyncio
import json
import signal

import msgspec
import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject
from services.nodes.agent.app import NodeAgent
from services.nodes.backends.process.executors import ProcessExecutor, SimExecutor
from services.nodes.backends.protocol import Outcome
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from tests.e2e import CHECKPOINTING, Tally, assert_replays, events_of, horizon, job_json, publish_all, wait_until
from tests.helpers import job_file

pytestmark = pytest.mark.timeout(120)


def started_on(tally: Tally, job_id: str) -> str:
    return tally.last[("JobStarted", job_id)]["node"]


async def test_no_execute_taint_evicts_checkpoints_and_requeues_elsewhere(running_horizon, tmp_path):
    h = await running_horizon(nodes=local_nodes(2, gpus_per_node=4), executor="process")
    url, tally, js = h.url, h.tally, h.js
    await publish_all(js, [
        ("horizon.in.acme.submit", job_json("victim", resources={"gpus": 1}, command=["sleep", "60"]), "victim"),
        ("horizon.in.acme.submit", job_json("ckpt", resources={"gpus": 1}, command=["bash", "-c", CHECKPOINTING],
                                            checkpoint_signal="SIGUSR1"), "ckpt"),
        ("horizon.in.acme.submit", job_json("tolerant", resources={"gpus": 1}, command=["sleep", "60"],
                                            tolerations=[{"key": "gpu", "operator": "Exists",
                                                          "effect": "NoExecute"}]), "tolerant"),
    ])
    await wait_until(lambda: all(tally.has("JobStarted", j) for j in ("victim", "ckpt", "tolerant")), 20,
                     "three jobs to start")
    # Bin packing put all three on node-00. A 2-GPU filler then takes node-01, which makes node-01
    # the best fit for the evicted jobs whether or not placement filters on taints: this test is
    # about eviction, not about the filter.
    await publish_all(js, [("horizon.in.acme.submit",
                            job_json("filler", resources={"gpus": 2}, command=["sleep", "60"]), "filler")])
    await wait_until(lambda: tally.has("JobStarted", "filler"), 20, "the filler to start")
    assert [started_on(tally, j) for j in ("victim", "ckpt", "tolerant", "filler")] == ["node-00"] * 3 + ["node-01"]

    code, out, err = await horizon(url, "node", "taint", "node-00", "gpu=broken:NoExecute", "--reason", "ECC errors")
    assert code == 0 and out.strip() == "node-00: taints gpu=broken:NoExecute", err

    def restarted(job_id: str) -> bool:
        body = tally.last.get(("JobStarted", job_id))
        return body is not None and body["attempt"] == 2

    await wait_until(lambda: restarted("victim") and restarted("ckpt"), 30, "both evicted jobs to start again")
    assert started_on(tally, "victim") == started_on(tally, "ckpt") == "node-01"
    deadline = asyncio.get_running_loop().time() + 10
    while True:  # the nodes view follows the log a moment behind our subscription
        code, out, err = await horizon(url, "nodes", "--json")
        rows = {n["node"]: n for n in json.loads(out)}
        if rows["node-00"]["jobs"] == ["tolerant"] or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert rows["node-00"]["taints"] == [{"key": "gpu", "value": "broken", "effect": "NoExecute"}]
    assert rows["node-00"]["jobs"] == ["tolerant"] and rows["node-01"]["taints"] == []
    code, out, err = await horizon(url, "nodes")
    assert "TAINTS" in out and "gpu=broken:NoExecute" in out, err
    await wait_until(lambda: job_file(tmp_path / "jobs", "ckpt", 2, "stderr").exists()
                     and "resumed" in job_file(tmp_path / "jobs", "ckpt", 2, "stderr").read_text(), 10, "attempt 2 to say")
    code, out, err = await horizon(url, "node", "untaint", "node-00", "gpu")
    assert code == 0 and out.strip() == "node-00: no taints", err
    code, out, err = await horizon(url, "node", "untaint", "node-00", "gpu")
    assert code == 1 and "node-00 has no taint gpu (its taints: none)" in err
    await h.stop()

    assert job_file(tmp_path / "jobs", "ckpt", 1, "stderr").read_text().splitlines()[0] == "resumed from nothing"
    assert job_file(tmp_path / "jobs", "ckpt", 2, "stderr").read_text().splitlines()[0] == "resumed from ckpt-of-attempt-1"
    records = await h.records()
    events = events_of(records)
    requests = [e for e in events if isinstance(e, c.PreemptionRequested)]
    assert sorted((e.job_id, e.attempt, e.source) for e in requests) == [("ckpt", 1, "inventory"),
                                                                          ("victim", 1, "inventory")]
    assert all(e.reason == "node node-00 taint gpu=broken:NoExecute is not tolerated" and e.for_job == ""
               for e in requests)
    ends = [(type(e).__name__, e.job_id, getattr(e, "checkpoint_ref", None)) for e in events
            if isinstance(e, (c.JobCheckpointed, c.JobPreempted, c.JobFailed, c.JobCancelled, c.JobSucceeded))]
    assert sorted(ends) == [("JobCheckpointed", "ckpt", "ckpt-of-attempt-1"),
                            ("JobPreempted", "ckpt", "ckpt-of-attempt-1"),
                            ("JobPreempted", "victim", None)]
    assert ends.index(("JobCheckpointed", "ckpt", "ckpt-of-attempt-1")) < ends.index(
        ("JobPreempted", "ckpt", "ckpt-of-attempt-1"))
    requeued = {e.job_id: e for e in events if isinstance(e, c.JobRequeued)}
    assert set(requeued) == {"victim", "ckpt"} and all(e.not_before_ts == e.ts for e in requeued.values())
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert_replays(records)


# ---------------------------------------------------------------- the agent alone, fed by hand


class Feeder:
    """Publishes what the services would have decided about one job on node n."""

    def __init__(self, log) -> None:
        self.log = log
        self.n = 0

    async def put(self, service: str, event: c.Event) -> None:
        self.n += 1
        key = getattr(event, "job_id", "") or getattr(event, "node", "")
        event = msgspec.structs.replace(event, id=event.id or f"test/{self.n}", correlation_id=key, source=service)
        await self.log.publish(event_subject(service, event), encode(event), msg_id=event.id)

    async def run(self, job_id: str, spec: c.JobSpec, node: str = "n-00") -> None:
        await self.put("submission", c.JobAccepted(job_id=job_id, spec=spec))
        await self.put("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[
            c.NodeAllocation(node=node, cpus_milli=1000, memory_bytes=2**30)]))

    def preempt(self, job_id: str, attempt: int = 1, grace: float = 5.0, by: str = "inventory") -> c.PreemptionRequested:
        return c.PreemptionRequested(job_id=job_id, attempt=attempt, for_job="" if by == "inventory" else "vip",
                                     grace_period_s=grace, reason="test", basis_seq=1)


async def agent_events(js_log, job_id: str) -> list[c.Event]:
    records = []
    async for batch in js_log.read(1, until_seq=await js_log.last_seq()):
        records.extend(batch)
    return [e for e in events_of(records) if e.source.startswith("agent") and getattr(e, "job_id", "") == job_id]


async def test_the_agent_preempts_once_per_attempt_ignores_late_requests_and_lets_cancel_win(js_log, tmp_path):
    agent = NodeAgent(js_log, local_nodes(1, prefix="n"), ProcessExecutor(tmp_path))
    await agent.start()
    feed = Feeder(js_log)
    signals = tmp_path / "signals"
    # Each job says when its traps are set: JobStarted comes as soon as the process exists, and a
    # signal that reaches bash before its trap line ends it (the test raced it on a cold start).
    counting = (f"trap 'echo usr1 >> {signals}; echo r1 > $HORIZON_CHECKPOINT_FILE' USR1\n"
                f"trap 'echo term >> {signals}; exit 143' TERM\n"
                f"touch {tmp_path / 'twice.ready'}\n"
                "while true; do sleep 0.05; done")
    try:
        await feed.run("twice", c.JobSpec(tenant="acme", command=("bash", "-c", counting), checkpoint_signal="USR1"))
        await feed.run("stubborn", c.JobSpec(tenant="acme", command=(
            "bash", "-c", f"trap '' USR2; touch {tmp_path / 'stubborn.ready'}; sleep 60"), checkpoint_signal="SIGUSR2"))

        async def reported(kind: type, job_id: str) -> bool:
            return any(isinstance(e, kind) for e in await agent_events(js_log, job_id))

        async def until(kind: type, job_id: str) -> None:
            deadline = asyncio.get_running_loop().time() + 20
            while not await reported(kind, job_id):
                assert asyncio.get_running_loop().time() < deadline, f"no {kind.__name__} for {job_id}"
                await asyncio.sleep(0.05)

        await until(c.JobStarted, "twice")
        await until(c.JobStarted, "stubborn")
        await wait_until(lambda: (tmp_path / "twice.ready").exists() and (tmp_path / "stubborn.ready").exists(), 10,
                         "the jobs to set their traps")
        # two requests for the same attempt (from inventory and from preemption), one for a later attempt
        await feed.put("inventory", feed.preempt("twice"))
        await feed.put("preemption", feed.preempt("twice", by="preemption"))
        await feed.put("inventory", feed.preempt("twice", attempt=2))
        await until(c.JobPreempted, "twice")
        await feed.put("inventory", c.PreemptionRequested(id="late", job_id="twice", attempt=1, for_job="",
                                                          basis_seq=1))  # after the attempt ended
        # stubborn ignores its checkpoint signal; a cancel during the 30 s it is given stops it now
        await feed.put("preemption", feed.preempt("stubborn", grace=30.0, by="preemption"))
        await wait_until(lambda: agent.running["stubborn"].stop_reason == "preempt", 10, "the preemption")
        t0 = asyncio.get_running_loop().time()
        await feed.put("submission", c.JobStopRequested(job_id="stubborn", attempt=1, reason="user cancel",
                                                        grace_period_s=1.0))
        await until(c.JobCancelled, "stubborn")
        assert asyncio.get_running_loop().time() - t0 < 10
        await asyncio.sleep(0.5)
        assert agent.running == {}
    finally:
        await agent.stop()
    assert signals.read_text().split() == ["usr1", "term"]  # signalled once, whatever was asked
    twice = [(type(e).__name__, getattr(e, "checkpoint_ref", None)) for e in await agent_events(js_log, "twice")]
    assert twice == [("JobStarted", None), ("JobCheckpointed", "r1"), ("JobPreempted", "r1")]
    preempted = next(e for e in await agent_events(js_log, "twice") if isinstance(e, c.JobPreempted))
    assert preempted.for_job == "" and preempted.id == "agent/JobPreempted/twice/1"
    stubborn = [type(e).__name__ for e in await agent_events(js_log, "stubborn")]
    assert stubborn == ["JobStarted", "JobCancelled"]  # the cancel wins: the job ends, it is not requeued


class _Watched:
    """An execution that remembers how ``stop`` ended it (the agent keeps no outcome of a preempted job)."""

    def __init__(self, inner, stops: list) -> None:
        self.inner, self.stops, self.pid = inner, stops, inner.pid
        self.files, self.started_wall = inner.files, inner.started_wall

    async def wait(self) -> Outcome:
        return await self.inner.wait()

    async def stop(self, grace_period_s: float) -> Outcome:
        outcome = await self.inner.stop(grace_period_s)
        self.stops.append((grace_period_s, outcome))
        return outcome

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        return await self.inner.checkpoint(signal_name, timeout_s)

    def checkpoint_ref(self) -> str | None:
        return self.inner.checkpoint_ref()


class WatchedProcesses(ProcessExecutor):
    def __init__(self, output_dir) -> None:
        super().__init__(output_dir)
        self.stops: list[tuple[float, Outcome]] = []

    async def start(self, *args, **kwargs) -> _Watched:
        return _Watched(await super().start(*args, **kwargs), self.stops)


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (a child whose parent is gone waits for whoever reaps)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_a_job_that_ignores_sigterm_is_killed_when_the_grace_period_ends(js_log, tmp_path):
    """SIGTERM to the job's process group, SIGKILL once the grace period is over, and only then
    ``JobPreempted``: not before the grace period, and nothing of the job left running."""
    grace = 1.5
    executor = WatchedProcesses(tmp_path)
    agent = NodeAgent(js_log, local_nodes(1, prefix="n"), executor)
    await agent.start()
    feed = Feeder(js_log)
    ready, child = tmp_path / "deaf.ready", tmp_path / "deaf.child"
    # bash and its child both ignore SIGTERM (an ignored signal stays ignored across exec)
    deaf = f"trap '' TERM\nsleep 60 & echo $! > {child}\ntouch {ready}\nwait"
    try:
        await feed.run("deaf", c.JobSpec(tenant="acme", command=("bash", "-c", deaf)))
        await wait_until(lambda: ready.exists() and child.read_text().strip() and "deaf" in agent.running
                         and agent.running["deaf"].execution is not None, 10, "the job to ignore SIGTERM")
        leader = agent.running["deaf"].execution.pid
        helper = int(child.read_text())
        t0 = asyncio.get_running_loop().time()
        await feed.put("preemption", feed.preempt("deaf", grace=grace, by="preemption"))
        preempted_after = None
        deadline = t0 + 20
        while preempted_after is None:
            if any(isinstance(e, c.JobPreempted) for e in await agent_events(js_log, "deaf")):
                preempted_after = asyncio.get_running_loop().time() - t0
            else:
                assert asyncio.get_running_loop().time() < deadline, "no JobPreempted for deaf"
                await asyncio.sleep(0.02)
        await wait_until(lambda: _gone(leader) and _gone(helper), 5, "the job's processes to die")
        # the log can hold the report before the agent's publish has returned: until the agent lets the
        # job go, its own stop below would stop it once more (the full suite at 286a3ee saw two stops)
        await wait_until(lambda: "deaf" not in agent.running, 5, "the agent to let the job go")
    finally:
        await agent.stop()
    # SIGTERM did nothing: the agent waited the whole grace period, then SIGKILL ended the job
    assert grace <= preempted_after < grace + 3.0, preempted_after
    [(asked, outcome)] = executor.stops
    assert asked == grace and outcome.exit_code == -signal.SIGKILL and outcome.signalled
    reports = [(type(e).__name__, getattr(e, "for_job", None), getattr(e, "checkpoint_ref", 0))
               for e in await agent_events(js_log, "deaf")]
    assert reports == [("JobStarted", None, 0), ("JobPreempted", "vip", None)]


async def test_a_simulated_job_just_stops_and_a_restarted_agent_reports_a_pending_preemption(js_log, tmp_path):
    agent = NodeAgent(js_log, local_nodes(1, prefix="n"), SimExecutor())
    await agent.start()
    feed = Feeder(js_log)
    try:
        await feed.run("sim", c.JobSpec(tenant="acme", sim_runtime_s=60, checkpoint_signal="SIGUSR1"))
        await wait_until(lambda: "sim" in agent.running and agent.running["sim"].execution is not None, 10, "start")
        await feed.put("preemption", feed.preempt("sim", by="preemption"))
        await wait_until(lambda: "sim" not in agent.running, 10, "the simulated job to stop")
    finally:
        await agent.stop()
    await asyncio.sleep(0.2)
    assert [(type(e).__name__, getattr(e, "for_job", None), getattr(e, "checkpoint_ref", 0))
            for e in await agent_events(js_log, "sim")] == [("JobStarted", None, 0), ("JobPreempted", "vip", None)]

    # A preemption that arrives while no agent runs is answered by the next one: the process is gone.
    await feed.run("away", c.JobSpec(tenant="acme", sim_runtime_s=60))
    await feed.put("agent", c.JobStarted(job_id="away", attempt=1, node="n-00"))
    await feed.put("inventory", feed.preempt("away"))
    again = NodeAgent(js_log, local_nodes(1, prefix="n"), SimExecutor())
    await again.start()
    await again.stop()
    assert [type(e).__name__ for e in await agent_events(js_log, "away")] == ["JobStarted", "JobPreempted"]
