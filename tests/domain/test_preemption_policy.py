"""Preemption policy, fed by hand: the requeue keeps the victim's age and checkpoint, operators'
class rules decide who may be preempted, the preemptor's filters decide where, and the worked
example of docs/preemption.md costs what the docs say."""

from __future__ import annotations

import msgspec

from events import catalogue as c
from services.preemption.core import PreemptionCore
from services.scheduling.core import SchedulingCore
from services.domain.jobs import JobState
from tests.helpers import Feed, accepted, node
from tests.services.test_preemption import _cluster, _left_blocked, _requests, _running


def test_a_preempted_job_is_requeued_at_once_with_its_age_and_its_checkpoint():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n0"))
    f.evt("submission", accepted("victim", priority_class="low", account="a", user="u"))
    f.evt("submission", accepted("later", priority_class="low", account="a", user="u"), dt=10.0)
    [first] = f.settle()
    assert first.candidates == ["victim", "later"]
    victim = f.state.jobs.get("victim")
    age = (victim.accepted_ts, victim.accepted_seq)
    f.evt("placement", c.JobScheduled(job_id="victim", attempt=1, allocations=[c.NodeAllocation(
        node="n0", device_ids=["gpu0"])]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1))
    f.evt("agent", c.JobStarted(job_id="victim", attempt=1, node="n0"), dt=100.0)
    f.evt("agent", c.JobCheckpointed(job_id="victim", attempt=1, checkpoint_ref="s3://ckpt/victim/7"), dt=500.0)
    f.evt("preemption", c.PreemptionRequested(job_id="victim", attempt=1, for_job="vip", basis_seq=1))
    f.evt("agent", c.JobPreempted(job_id="victim", attempt=1, for_job="vip", checkpoint_ref="s3://ckpt/victim/7"))
    preempted_at = f.time
    out = f.settle()
    [requeued] = [e for e in out if isinstance(e, c.JobRequeued)]
    # at once (no backoff: a preemption is not a retry, whatever the restart policy), with the checkpoint
    assert requeued.not_before_ts == requeued.ts == preempted_at
    assert requeued.checkpoint_ref == "s3://ckpt/victim/7"
    assert requeued.reason == "attempt 1 preempted: preempted for vip"
    assert f.state.retries.get("victim", 0) == 0
    victim = f.state.jobs.get("victim")
    assert victim.state is JobState.PENDING and victim.checkpoint_ref == "s3://ckpt/victim/7"
    assert (victim.accepted_ts, victim.accepted_seq) == age  # its age, as the age factor reads it
    # so it goes back ahead of the job accepted after it (same class, same account and user)
    cycle2 = next(e for e in out if isinstance(e, c.SchedulingCycleCompleted))
    f.evt("placement", c.PlacementCycleCompleted(cycle=cycle2.cycle, blocked=len(cycle2.candidates)))
    [again] = f.settle()
    assert again.candidates == ["victim", "later"]


def test_an_operators_class_rules_decide_who_may_be_preempted():
    f = _cluster("n0", "n1")
    _running(f, "lo", "n1", 0, 8, priority_class="low", dt=10_000.0)  # dear: it has run for hours
    _running(f, "norm", "n0", 0, 8, priority_class="normal")
    f.evt("submission", accepted("vip", gpus=8, priority_class="critical"))
    _left_blocked(f, 1, "vip")
    assert f.core.plan(f.state, "vip").victims == ["norm"]  # the default rules: the cheaper one
    # critical spares normal and high: the dearer low job goes instead
    f.admin("preemption", c.PreemptionConfigured(rules={"critical": ["low", "scavenger"]}))
    assert not [e for e in f.decide() if isinstance(e, c.ConfigRejected)]
    [request] = _requests(f.decide())
    assert (request.job_id, request.for_job) == ("lo", "vip")
    assert request.reason == "for vip (critical): class low < critical"
    assert f.state.config.rules["high"] == ("normal", "low", "scavenger")  # the other classes keep theirs


def test_a_rule_may_let_a_class_preempt_that_by_default_preempts_nobody():
    f = _cluster("n0")
    _running(f, "scav", "n0", 0, 8, priority_class="scavenger")
    f.evt("submission", accepted("lowly", gpus=8, priority_class="low"))
    _left_blocked(f, 1, "lowly")
    assert _requests(f.decide()) == []  # low preempts nobody by default
    f.admin("preemption", c.PreemptionConfigured(rules={"low": ["scavenger"]}))
    assert [(e.job_id, e.for_job) for e in _requests(f.decide())] == [("scav", "lowly")]


def test_a_preemptor_with_a_node_selector_preempts_only_on_matching_nodes():
    f = Feed(PreemptionCore())
    for name, zone in (("n0", "a"), ("n1", "b")):
        f.evt("agent", msgspec.structs.replace(node(name, gpus=8), labels={"zone": zone}))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
    _running(f, "on-a", "n0", 0, 8, priority_class="low", dt=10_000.0)  # dear
    _running(f, "on-b", "n1", 0, 8, priority_class="low")  # cheap, but in the wrong zone
    f.evt("submission", accepted("anywhere", gpus=8, priority_class="critical"))
    f.evt("submission", accepted("zoned", gpus=8, priority_class="critical", node_selector={"zone": "a"}))
    plan = f.core.plan(f.state, "anywhere")
    assert (plan.victims, plan.nodes) == (["on-b"], ["n1"])
    plan = f.core.plan(f.state, "zoned")
    assert (plan.victims, plan.nodes) == (["on-a"], ["n0"])
    _left_blocked(f, 1, "zoned")
    assert [(e.job_id, e.for_job) for e in _requests(f.decide())] == [("on-a", "zoned")]


def test_the_worked_example_of_the_docs_costs_what_the_docs_say():
    """docs/preemption.md: two 8-GPU nodes, one full with an 8-GPU job started at 0, the other with
    eight 1-GPU jobs started at 0, 100, ..., 700 s; at 1,000 s a critical job needs 4 GPUs on one
    node. Each job bills its GPUs plus one core at 1/16 (1.0625 per 1-GPU job, 8.0625 for the wide
    one). The wide node: 1,000 s x 8.0625 = 8,062.5 GPU-equivalent seconds, 8 GPUs. The other: its
    four youngest, (300 + 400 + 500 + 600) s x 1.0625 = 1,912.5, 4 GPUs (and 1,800 s of age)."""
    f = _cluster("n0", "n1")
    t0 = f.time

    def at(t: float) -> float:  # the dt that brings the log to t0 + t
        return t0 + t - f.time

    _running(f, "wide", "n0", 0, 8, dt=at(0.0))
    for i in range(8):
        _running(f, f"small{i}", "n1", i, 1, dt=at(100.0 * i))
    f.evt("submission", accepted("urgent", gpus=4, priority_class="critical"), dt=at(1000.0))
    assert f.state.now == t0 + 1000.0
    wide = f.state.jobs.get("wide")
    assert f.core.cost(f.state, wide) == (8.0, 8062.5, 1000.0)  # (GPUs, work lost, age): the wide node's option
    plan = f.core.plan(f.state, "urgent")
    assert (plan.victims, plan.nodes) == (["small4", "small5", "small6", "small7"], ["n1"])
    assert plan.cost == (4.0, 1912.5, 1800.0)  # (GPUs, work lost, age), summed over the set
    assert plan.cost[1] < f.core.cost(f.state, wide)[1]  # work lost decides first
