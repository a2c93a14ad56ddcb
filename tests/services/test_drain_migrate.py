"""Drain with migration (issue 19): inventory's pure core, the plan per job and the deadline arithmetic.

The run through the real services over NATS is in ``tests/services/test_drain_migrate_e2e.py``.
"""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.domain.jobs import JobState
from services.inventory.core import EVICTION_GRACE_S, InventoryCore
from services.inventory.drain import Drain, limit_end, plan_job
from tests.helpers import Feed, accepted, node


def _run(f: Feed, job_id: str, where: str, gpu: int, limit_s: float, dt: float = 0.0, **spec) -> None:
    f.evt("submission", accepted(job_id, gpus=1, time_limit_s=limit_s, **spec), dt=dt)
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, time_limit_s=limit_s,
                                      allocations=[c.NodeAllocation(node=where, device_ids=[f"gpu{gpu}"])]), dt=0.0)
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=where), dt=0.0)


def cluster() -> tuple[Feed, float]:
    """n1 holds four jobs started at the same instant S, n2 one; returns the feed and S."""
    f = Feed(InventoryCore())
    f.evt("agent", node("n1"))
    f.evt("agent", node("n2"))
    f.settle()
    _run(f, "ckpt", "n1", 0, 3600, dt=1.0, checkpoint_signal="SIGUSR1")  # checkpoints: migrated
    started = f.time
    _run(f, "short", "n1", 1, 600)  # ends by the deadline: finishes
    _run(f, "long", "n1", 2, 3600)  # may outlive it: requeued at the deadline
    _run(f, "stuck", "n1", 3, 3600, checkpoint_signal="SIGUSR1", requeue=False)  # may not be requeued: ends then
    _run(f, "elsewhere", "n2", 0, 3600)
    assert {j: f.state.jobs.get(j).started_ts for j in ("ckpt", "short", "long", "stuck")} == dict.fromkeys(
        ("ckpt", "short", "long", "stuck"), started)
    return f, started


def test_the_plan_says_per_job_what_the_drain_will_do_with_the_deadline_worked_through():
    f, started = cluster()
    # The drain is issued 90 s after the jobs started (S + 90) with a 900 s deadline: deadline S + 990.
    f.admin("node", c.NodeCommandIssued(node="n1", action="drain", migrate=True, deadline_s=900.0, user="ops"), dt=90.0)
    now = f.time
    assert now == started + 90.0
    draining, *plans = f.settle()
    assert isinstance(draining, c.NodeDraining)
    assert (draining.migrate, draining.deadline_ts, draining.jobs) == (True, started + 990.0,
                                                                       ["ckpt", "long", "short", "stuck"])
    assert draining.causation_id == "seq:" + str(f.records[-len(plans) - 2].seq)  # the command's sequence
    by_job = {p.job_id: p for p in plans}
    assert all(isinstance(p, c.JobDrainPlanned) and p.node == "n1" and p.attempt == 1 and p.deadline_ts == started + 990.0
               and p.causation_id == draining.causation_id for p in plans)
    assert {j: p.action for j, p in by_job.items()} == {
        "ckpt": "migrate", "short": "finish", "long": "requeue-at-deadline", "stuck": "end-at-deadline"}
    # short: S + 600 <= S + 990; from now (S + 90) that is 510 s, the deadline 900 s
    assert by_job["short"].reason == ("not migrated: it has no checkpoint signal; its time limit ends it by 510 s "
                                      "from now, before the drain deadline in 900 s")
    # long: S + 3600 > S + 990 (3510 s from now)
    assert by_job["long"].reason == ("not migrated: it has no checkpoint signal; it may run past the drain deadline "
                                     "in 900 s (its time limit ends in 3510 s): if it still runs then, it is "
                                     "stopped and requeued on another node")
    assert by_job["stuck"].reason.startswith("not migrated: it may not be requeued; ")
    assert by_job["stuck"].reason.endswith("it is stopped and ends (it may not be requeued)")
    assert by_job["ckpt"].reason == ("node n1 drains with migration: checkpoint signal SIGUSR1 now (up to 30 s for "
                                     "the checkpoint), then requeued to resume on another node from its checkpoint")

    # 1. the migration: once the drain is folded, the checkpointable job is asked to stop, once
    [stop] = f.settle()
    assert isinstance(stop, c.PreemptionRequested)
    assert (stop.job_id, stop.attempt, stop.for_job, stop.grace_period_s) == ("ckpt", 1, "", EVICTION_GRACE_S)
    assert stop.reason == "node n1 drains with migration: checkpointed to resume on another node"
    assert f.decide() == []
    f.evt("agent", c.JobCheckpointed(job_id="ckpt", attempt=1, checkpoint_ref="step-42"))
    f.evt("agent", c.JobPreempted(job_id="ckpt", attempt=1, checkpoint_ref="step-42", reason=stop.reason))
    ckpt = f.state.jobs.get("ckpt")
    assert (ckpt.state, ckpt.checkpoint_ref, ckpt.reason) == (JobState.PREEMPTED, "step-42", stop.reason)
    # 2. short ends by itself; nothing else happens before the deadline (a clock tick 1 s before it)
    f.evt("agent", c.JobSucceeded(job_id="short", attempt=1, node="n1"))
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=started + 989.0 - f.time)
    assert f.state.now == started + 989.0 and f.decide() == []
    # 3. the tick at the deadline stops what is still there: long (requeued) and stuck (ends)
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=1.0)
    assert f.state.now == started + 990.0
    stops = f.settle()
    assert [(s.job_id, s.reason) for s in stops] == [
        ("long", "node n1 drain deadline passed: stopped, requeued"),
        ("stuck", "node n1 drain deadline passed: stopped, it may not be requeued, so it ends")]
    assert all(isinstance(s, c.PreemptionRequested) and s.for_job == "" for s in stops)
    assert f.decide() == []  # asked once per attempt; n2's job is untouched
    f.evt("agent", c.JobPreempted(job_id="stuck", attempt=1, reason=stops[1].reason))
    # it may not be requeued, so it has ended for good: inventory keeps only its outcome
    assert f.state.jobs.get("stuck").state is JobState.PREEMPTED and "stuck" not in f.state.jobs.jobs


def test_a_plain_drain_plans_finish_and_stops_nothing():
    f, _ = cluster()
    f.admin("node", c.NodeCommandIssued(node="n1", action="drain"))
    draining, *plans = f.settle()
    assert (draining.migrate, draining.deadline_ts) == (False, 0.0)
    assert {p.job_id: (p.action, p.reason) for p in plans} == dict.fromkeys(
        ("ckpt", "long", "short", "stuck"), ("finish", "node n1 drains: it runs to its end (no deadline)"))
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=10 * 3600.0)
    assert f.decide() == []



def test_a_drain_gives_its_own_grace_to_the_checkpoint():
    f, _ = cluster()
    f.admin("node", c.NodeCommandIssued(node="n1", action="drain", migrate=True, grace_s=300.0))
    draining, *plans = f.settle()
    assert draining.grace_s == 300.0 and f.state.cluster.nodes["n1"].drain_grace_s == 300.0
    assert "(up to 300 s for the checkpoint)" in next(p for p in plans if p.job_id == "ckpt").reason
    [stop] = f.settle()
    assert (stop.job_id, stop.grace_period_s) == ("ckpt", 300.0)


def test_without_migrate_a_checkpointable_job_is_checkpointed_at_the_deadline():
    f, started = cluster()
    f.admin("node", c.NodeCommandIssued(node="n1", action="drain", deadline_s=60.0), dt=0.0)
    _, *plans = f.settle()
    ckpt = next(p for p in plans if p.job_id == "ckpt")
    assert ckpt.action == "requeue-at-deadline"
    assert ckpt.reason == ("it may run past the drain deadline in 60 s (its time limit ends in 3600 s): if it still "
                           "runs then, it is stopped (its checkpoint signal first, to resume from the checkpoint) "
                           "and requeued on another node")
    assert f.settle() == []  # nothing before the deadline
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=60.0)
    assert [(s.job_id, s.reason) for s in f.settle()] == [
        (j, "node n1 drain deadline passed: stopped, requeued") for j in ("ckpt", "long", "short")] + [
        ("stuck", "node n1 drain deadline passed: stopped, it may not be requeued, so it ends")]


def test_a_job_placed_on_the_node_as_the_drain_came_is_migrated_too_and_uncordon_ends_the_drain():
    f, _ = cluster()
    f.admin("node", c.NodeCommandIssued(node="n1", action="drain", migrate=True))
    f.settle()
    [first] = f.settle()
    assert first.job_id == "ckpt"
    # placement had placed one more before it folded NodeDraining: the rule catches it as well
    f.evt("submission", accepted("late", gpus=1, checkpoint_signal="USR2"))
    f.evt("placement", c.JobScheduled(job_id="late", attempt=1, allocations=[
        c.NodeAllocation(node="n1", device_ids=["gpu4"])]))
    [late] = f.settle()
    assert (late.job_id, late.attempt) == ("late", 1)
    # the drain is the node's, in the ledger every service keeps, and outlives its agent's re-registration
    f.evt("agent", node("n1"))
    n1 = f.state.cluster.nodes["n1"]
    assert (n1.draining, n1.drain_migrate, n1.drain_deadline_ts) == (True, True, 0.0)
    assert f.settle() == []
    f.admin("node", c.NodeCommandIssued(node="n1", action="uncordon"))
    f.settle()
    assert (f.state.cluster.nodes["n1"].drain_migrate, f.state.cluster.nodes["n1"].drain_deadline_ts) == (False, 0.0)
    f.evt("submission", accepted("after", gpus=1, checkpoint_signal="USR2"))
    f.evt("placement", c.JobScheduled(job_id="after", attempt=1, allocations=[
        c.NodeAllocation(node="n1", device_ids=["gpu5"])]))
    assert f.decide() == []


@pytest.mark.parametrize("cmd, why", [
    (c.NodeCommandIssued(node="n1", action="drain", deadline_s=-5.0), "a drain deadline is a number of seconds, "
                                                                      "0 or more, not -5.0"),
    (c.NodeCommandIssued(node="n1", action="cordon", migrate=True), "--migrate, --deadline and --grace are for drain, not cordon"),
    (c.NodeCommandIssued(node="n9", action="drain", migrate=True), "no node 'n9'"),
    (c.NodeCommandIssued(node="n1", action="drain", grace_s=-1.0), "a drain's grace is between 0 and 86400 s, not -1.0"),
])
def test_bad_drain_commands_are_refused(cmd, why):
    f, _ = cluster()
    f.admin("node", cmd)
    [answer] = f.settle()
    assert isinstance(answer, c.RequestRejected) and why in answer.reason


def test_limit_end_and_plan_of_a_job_placed_but_not_started():
    f, _ = cluster()
    f.evt("submission", accepted("placed", gpus=1, time_limit_s=100.0))
    f.evt("placement", c.JobScheduled(job_id="placed", attempt=1, time_limit_s=100.0, allocations=[
        c.NodeAllocation(node="n2", device_ids=["gpu1"])]))
    job = f.state.jobs.get("placed")
    now = f.time + 5
    # not started yet: its limit counts from now
    assert limit_end(job, now) == now + 100.0
    assert plan_job(job, "n2", Drain(deadline_ts=now + 100.0), now, 30.0)[0] == "finish"
    assert plan_job(job, "n2", Drain(deadline_ts=now + 99.0), now, 30.0)[0] == "requeue-at-deadline"


def test_the_command_prints_the_plan_and_refuses_drain_options_elsewhere():
    from click.testing import CliRunner

    from services.front.client.drain import drain_note, plan_lines, when
    from services.front.cli.main import cli

    answer = {"migrate": True, "deadline_ts": 2_000_000.0, "jobs": ["ckpt", "long", "lost"]}
    plan = [{"job_id": "ckpt", "attempt": 1, "action": "migrate", "reason": "why ckpt"},
            {"job_id": "long", "attempt": 2, "action": "requeue-at-deadline", "reason": "why long"}]
    assert plan_lines("n1", answer, plan) == [
        f"n1: draining (checkpointable jobs migrate, deadline {when(2_000_000.0)})",
        "  ckpt  attempt 1  migrate              why ckpt",
        "  long  attempt 2  requeue-at-deadline  why long",
        "  (no plan received for lost: horizon show JOB has it)"]
    assert plan_lines("n2", {"jobs": []}, []) == ["n2: draining", "  no jobs on it: it is drained"]
    row = {"node": "n1", "state": "draining", "drain_migrate": True, "drain_deadline_ts": None, "jobs": ["long"]}
    assert drain_note(row) == "n1 draining: checkpointable jobs migrate; each job's plan: horizon show JOB (long)"
    assert drain_note({**row, "drain_migrate": False}) == ""  # a plain drain needs no note
    result = CliRunner().invoke(cli, ["node", "cordon", "n1", "--migrate", "--nats", "nats://127.0.0.1:1"])
    assert result.exit_code == 2 and "--migrate, --deadline, --grace and --json are for node drain, not node cordon" in result.output
    result = CliRunner().invoke(cli, ["node", "drain", "n1", "--deadline", "soon", "--nats", "nats://127.0.0.1:1"])
    assert result.exit_code == 2 and "--deadline" in result.output
