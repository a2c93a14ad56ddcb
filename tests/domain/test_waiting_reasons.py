"""Every waiting job says specifically why it waits (``horizon queue --why``), like squeue's REASON.

The queue is built by the real cores (submission, scheduling, placement with EASY backfilling,
preemption, inventory) called in process at virtual time, as the simulator drives them; the
test plays the agents. Then each pending or held job must have one of the scheduling core's
``WAITING_KINDS`` and a sentence naming what it waits for, never a catch-all.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from events import catalogue as c
from events.subjects import admin_subject, event_subject, input_subject
from projections.standing import StandingStore, node_rows, queue_rows
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.preemption.core import PreemptionCore
from services.domain.queue.waiting import SLURM_REASONS, slurm_reason
from services.scheduling.core import WAITING_KINDS, SchedulingCore
from services.front.sim.buses import InProcessBus
from services.submission.core import SubmissionCore
from tests.helpers import Feed, accepted, node

TENANT = "acme"


class World:
    """The five cores on an in-process bus; ``at(t)`` moves virtual time, the test plays the agents."""

    def __init__(self, max_candidates: int = 100_000, keep_records: bool = False) -> None:
        self.scheduling = SchedulingCore(policy="fcfs", virtual_time=True, max_candidates=max_candidates)
        self.bus = InProcessBus([SubmissionCore(virtual_time=True), self.scheduling,
                                 PlacementCore(backfill="easy", virtual_time=True), PreemptionCore(virtual_time=True),
                                 InventoryCore(virtual_time=True)], keep_records=keep_records)
        self.now = 0.0
        self.ticks = 0
        self.decided: list[c.Event] = []

    @property
    def state(self):
        return self.bus.cores[1][1]

    @property
    def pstate(self):
        return self.bus.cores[3][1]

    async def send(self, *items: tuple[str, c.Event]) -> None:
        await self.bus.publish([(subject, msg_at(event, self.now)) for subject, event in items])
        self.decided += await self.bus.settle()

    async def submit(self, job_id: str, gpus: int, tenant: str = TENANT, **kw) -> None:
        kw.setdefault("time_limit_s", 1000.0)
        kw.setdefault("command", ["true"])  # an empty command is rejected
        await self.send((input_subject(tenant, "submit"), c.JobSubmitted(
            id=f"client/{job_id}", correlation_id=job_id, job_id=job_id, tenant=tenant,
            resources=c.ResourceRequest(gpus=gpus, cpus=1, memory="1Gi"), **kw)))

    async def tick(self, start: bool = True) -> list[c.JobScheduled]:
        """A tick: at virtual time the scheduler decides a cycle on it; placement follows. What it
        placed starts (the agents report it) unless ``start`` is False; returns what it placed."""
        self.ticks += 1
        tick = c.ClockTicked(id=f"clock/{self.ticks}", correlation_id="t", source="clock", now_ts=self.now)
        await self.send((event_subject("clock", tick), tick))
        placed = [e for e in self.decided if isinstance(e, c.JobScheduled)]
        self.decided = [e for e in self.decided if not isinstance(e, c.JobScheduled)]
        if start:
            for event in placed:
                await self.agent(c.JobStarted(job_id=event.job_id, attempt=event.attempt,
                                              node=event.allocations[0].node))
        return placed

    async def agent(self, event: c.JobStarted | c.JobFailed) -> None:
        event = msgspec.structs.replace(event, id=f"agent/{event.event_type}/{event.job_id}/{event.attempt}",
                                        correlation_id=event.job_id, source="agent/sim")
        await self.send((event_subject("agent", event), event))


def msg_at(event: c.Event, now: float) -> c.Event:
    return msgspec.structs.replace(event, ts=now)


async def build_queue() -> World:
    w = World(max_candidates=8)
    for name in ("n0", "n1"):
        reg = node(name, gpus=8)
        await w.send((event_subject("agent", reg), reg))
    await w.send((admin_subject("account"), c.AccountConfigured(id="cfg/capped", account="capped",
                                                                quota=c.Quota(gpus=2))))
    await w.tick()
    # t=1: the cluster fills up: n0 whole, n1 with 5 + 2 + 1 GPUs
    w.now = 1.0
    await w.submit("run-a", 8)
    await w.submit("run-b", 5)
    await w.submit("capped-1", 2, account="capped")
    await w.submit("flaky", 1, restart_policy="on-failure", max_retries=2)
    await w.tick()
    running = {j for j, job in w.state.jobs.jobs.items() if job.state.value == "RUNNING"}
    assert running == {"run-a", "run-b", "capped-1", "flaky"}, running
    # t=2: flaky fails (one GPU on n1 is free again, it waits out its backoff); the queue arrives
    w.now = 2.0
    await w.agent(c.JobFailed(job_id="flaky", attempt=1, exit_code=1, reason="exit code 1"))
    await w.submit("big", 8, nodes=2, priority_class="high")  # 16 GPUs: the head, reserved for t=1001
    await w.submit("small", 1, time_limit_s=5000.0)  # fits on n1 now, but would delay big's reservation
    # no node could ever hold it: its selector matches none (16 GPUs on one node would be refused at submission)
    await w.submit("wide", 1, node_selector={"zone": "nowhere"})
    await w.submit("capped-2", 1, account="capped")  # over its account's 2-GPU quota
    await w.submit("child", 1, dependencies=[c.Dependency(kind="after-ok", job_id="run-a")])
    await w.submit("sweep", 1, array="0-1%1", time_limit_s=5000.0)  # one task at a time
    await w.submit("kept", 1)
    await w.send((input_subject(TENANT, "hold"), c.JobHoldRequested(id="client/hold-kept", correlation_id="kept",
                                                                    job_id="kept", tenant=TENANT)))
    for i in range(6):  # more than the 8 candidates a cycle offers
        await w.submit(f"filler-{i}", 2, priority_class="low")
    await w.tick()
    # t=3: one more arrives after the cycle: the next cycle will offer it
    w.now = 3.0
    await w.submit("late", 1, priority_class="low")
    return w


EXPECTED = {
    "big": ("resources", ["free GPU", "reserved to start at t=1001"]),
    "small": ("reservation", ["would delay the reservation of big"]),
    "wide": ("fits-nowhere", ["zone=nowhere"]),
    "capped-2": ("quota", ["account capped quota"]),
    "child": ("dependency", ["run-a"]),
    "flaky": ("backoff", ["restart backoff until t=12", "exit code 1"]),
    "kept": ("held", ["held"]),
    "late": ("cycle", ["next scheduling cycle", "ahead of it", "head: big"]),
}


def test_every_waiting_job_has_a_specific_reason_of_the_expected_kind():
    w = asyncio.run(build_queue())
    state = w.state
    rows = queue_rows(w.scheduling, state)
    columns = dict(enumerate(["job_id", "rank", "state", "why", "why_kind"]))
    from projections.standing import QUEUE_COLUMNS

    at = {name: QUEUE_COLUMNS.index(name) for name in columns.values()}
    table = {r[at["job_id"]]: {name: r[at[name]] for name in at} for r in rows}
    waiting = {j for j, job in state.jobs.jobs.items() if job.state.value in ("PENDING", "HELD")}
    assert set(table) == waiting and len(waiting) >= 15
    for job_id, row in sorted(table.items()):
        assert row["why_kind"] in WAITING_KINDS, (job_id, row)
        assert row["why"] and "waiting for resources or for jobs ahead" not in row["why"], (job_id, row)
        # the single-job answer (timeouts, horizon show) is the queue's answer
        assert w.scheduling.waiting(state, state.jobs.jobs[job_id])[:2] == (row["why_kind"], row["why"]), job_id
    for job_id, (kind, words) in EXPECTED.items():
        assert table[job_id]["why_kind"] == kind, (job_id, table[job_id])
        for word in words:
            assert word in table[job_id]["why"], (job_id, word, table[job_id]["why"])
    # the array: one task tried (and blocked like small), the other held back by %1
    sweep = sorted(j for j in table if j.startswith("sweep_"))
    assert [table[j]["why_kind"] for j in sweep] == ["reservation", "array-limit"], [table[j] for j in sweep]
    assert "(%1)" in table[sweep[1]]["why"] and "1 queued ahead" in table[sweep[1]]["why"]
    # the low-priority fillers: those the 8-candidate cycle offered were tried by placement, the
    # others are behind the jobs that filled it
    fillers = [table[f"filler-{i}"] for i in range(6)]
    kinds = [f["why_kind"] for f in fillers]
    assert "priority" in kinds and set(kinds) <= {"resources", "reservation", "priority"}, fillers
    cut = next(f for f in fillers if f["why_kind"] == "priority")
    assert "ahead of it (head: big)" in cut["why"] and "first 8 jobs" in cut["why"], cut
    # every kind a person can act on is there
    assert {row["why_kind"] for row in table.values()} >= {"held", "dependency", "backoff", "fits-nowhere",
                                                            "array-limit", "quota", "reservation", "resources",
                                                            "cycle", "priority"}


# squeue's REASON for each: Slurm's codes, as tools that drive Slurm read them (the sentence stays for --why)
EXPECTED_CODES = {
    "big": "Resources", "small": "Priority", "wide": "BadConstraints", "capped-2": "AssocGrpGRES",
    "child": "Dependency", "flaky": "BeginTime", "kept": "JobHeldUser", "late": "None", "sweep_1": "JobArrayTaskLimit",
}


def test_every_waiting_job_has_slurms_reason_code():
    w = asyncio.run(build_queue())
    state = w.state
    codes = {job_id: slurm_reason(why.kind, why.code) for job_id, why in w.scheduling.waiting_all(state).items()}
    assert {job_id: codes[job_id] for job_id in EXPECTED_CODES} == EXPECTED_CODES
    assert set(codes.values()) <= set(SLURM_REASONS.values()) | {"AssocGrpGRES", "PartitionDown"}


def test_a_quotas_code_names_its_limit_and_where_it_comes_from():
    from services.domain.quotas import slurm_code

    assert [slurm_code(dim, "") for dim in ("gpus", "type:a100", "cpus_milli", "memory_bytes", "running_jobs")] == [
        "AssocGrpGRES", "AssocGrpGRES", "AssocGrpCpuLimit", "AssocGrpMemLimit", "AssocGrpJobsLimit"]
    assert slurm_code("running_jobs", "Slurm QOS gpuq GrpJobs") == "QOSGrpJobsLimit"  # the Slurm quota provider's
    assert slurm_code("gpus", "Slurm association c1/ml GrpTRES") == "AssocGrpGRES"


def test_the_queue_table_carries_the_kind_and_the_sentence(tmp_path):
    async def go():
        w = await build_queue()
        store = StandingStore(tmp_path / "standing.sqlite")
        await store.open()
        try:
            assert await store.flush(w.scheduling, w.state, w.pstate, [])
            body = await store.query_queue({"limit": 100})
            assert node_rows(w.pstate)[0]  # the ledger the view shows
            return body
        finally:
            await store.close()

    body = asyncio.run(go())
    kinds = {row["job_id"]: row["why_kind"] for row in body["jobs"]}
    assert kinds["small"] == "reservation" and kinds["kept"] == "held" and kinds["late"] == "cycle"
    assert all(row["why"] and row["why_kind"] in WAITING_KINDS for row in body["jobs"])


def test_a_candidate_placement_has_not_answered_yet_says_so():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("a"))
    f.evt("submission", accepted("b"))
    [cycle] = f.settle()
    assert cycle.candidates == ["a", "b"]
    core, state = f.core, f.state
    why = {j: core.waiting(state, state.jobs.jobs[j]) for j in ("a", "b")}
    assert why["a"] == ("placing", "candidate of scheduling cycle 1, not placed yet: first in the queue", "")
    assert why["b"] == ("placing", "candidate of scheduling cycle 1, not placed yet: 1 job ahead of it (head: a)", "")
    assert core.waiting_all(state) == why


def test_strict_order_names_the_job_that_stops_the_queue():
    f = Feed(SchedulingCore(policy="fcfs"))
    f.evt("agent", node("n1", gpus=8))
    f.evt("submission", accepted("wide", gpus=16))
    f.evt("submission", accepted("next", gpus=1))
    f.settle()
    # placement in strict order (backfill none): wide does not fit, next is not tried
    f.evt("placement", c.PlacementBlocked(job_id="wide", cycle=1, reasons=[
        c.BlockReason(reason="has 8 GPUs, needs 16", nodes=1, filter="GpuCapacity")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=0, blocked=1))
    core, state = f.core, f.state
    kind, why, code = core.waiting(state, state.jobs.jobs["next"])
    assert kind == "priority" and "behind wide, which does not fit now" in why and "1 job ahead" in why
    assert slurm_reason(kind, code) == "Priority"
    assert core.why_waiting(state, state.jobs.jobs["wide"]) == "1 nodes: has 8 GPUs, needs 16"


@pytest.mark.parametrize("kind", WAITING_KINDS)
def test_every_kind_is_documented(kind):
    from pathlib import Path

    events_md = (Path(__file__).parents[2] / "docs" / "events.md").read_text()
    assert f"`{kind}`" in events_md


def test_a_reservation_on_the_wall_clock_reads_as_a_date():
    from services.domain.timestamps import at, when

    assert at(1795727094.4) == "at 2026-11-26 21:04:54 UTC"  # 1,795,727,094 s after the epoch
    assert at(1001.0) == "at t=1001"  # a simulation's virtual time stays in seconds
    assert when(1795727094.4) == "2026-11-26 21:04:54 UTC" and when(1712.0) == "t=1712"
