"""Submission's pure core: admission with reasons, idempotence, cancel / hold / release / update."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.submission.core import SubmissionCore
from tests.helpers import Feed, node


def feed_with_cluster() -> Feed:
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1", gpu_type="a100", variant="80gb"))
    return f


def submit(job_id: str, tenant: str = "acme", **kw) -> c.JobSubmitted:
    resources = kw.pop("resources", c.ResourceRequest(gpus=1, gpu_type="a100"))
    kw.setdefault("command", ["true"])  # an empty command is rejected (tests/services/test_capacity.py)
    return c.JobSubmitted(job_id=job_id, tenant=tenant, resources=resources, **kw)


def test_a_valid_job_is_accepted_with_a_normalised_spec():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1", resources=c.ResourceRequest(cpus="2.5", memory="16Gi", gpus=2,
                                                                        gpu_type="A100-80GB"), time_limit_s=600))
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobAccepted)
    assert verdict.id == "submission/JobAccepted/j1" and verdict.basis_seq == 2
    s = verdict.spec
    assert (s.cpus_milli, s.memory_bytes, s.gpus, s.gpu_type, s.gpu_variant, s.time_limit_s) == (
        2500, 16 * 2**30, 2, "a100", "80gb", 600.0)
    assert verdict.submitted_seq == 2 and verdict.submitted_ts == f.records[1].time
    assert f.decide() == []  # folded its own verdict: nothing more to say


@pytest.mark.parametrize(
    ("job", "field", "words"),
    [
        (submit("b1", resources=c.ResourceRequest(gpus=-1)), "resources.gpus", "-1 is negative"),
        (submit("b2", resources=c.ResourceRequest(memory="lots")), "resources.memory", "'lots' is not a memory size"),
        (submit("b3", resources=c.ResourceRequest(gpus=1, gpu_type="h100")), "resources.gpu_type",
         "'h100' is not a GPU model of this cluster; known: a100, a100-80gb"),
        (submit("b4", tenant="globex"), "tenant", "'globex' does not match the subject's tenant 'acme'"),
        (submit("b5", time_limit_s=-60), "time_limit_s", "is not a non-negative finite number"),  # 0: no limit
        (submit("b6", priority_class="urgent"), "priority_class", "'urgent' is not one of critical, high"),
        (submit("b7", resources=c.ResourceRequest(cpus="8Q")), "resources.cpus", "'8Q' is not a CPU amount"),
        (submit("b.8"), "job_id", "must be 1-128 letters"),
    ],
)
def test_bad_submissions_are_rejected_naming_the_field(job, field, words):
    f = feed_with_cluster()
    f.input("acme", "submit", job)
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobRejected)
    assert verdict.field == field
    assert verdict.reason.startswith(f"{field}: ")
    assert words in verdict.reason


def test_a_resubmission_is_the_same_job_and_is_answered():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1"))
    f.input("acme", "submit", submit("j1", name="again"))  # same job id, a new message
    accepted, repeat = f.settle()
    assert isinstance(accepted, c.JobAccepted) and accepted.spec.name != "again"
    assert isinstance(repeat, c.RequestRejected) and repeat.verb == "submit" and repeat.causation_id == "seq:3"
    assert "being judged" in repeat.reason
    f.input("acme", "submit", submit("j1"))
    [repeat] = f.settle()
    assert "already submitted and it was accepted (PENDING)" in repeat.reason
    assert f.settle() == []


def test_cancel_hold_release_update():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1"))
    f.settle()
    f.input("acme", "hold", c.JobHoldRequested(job_id="j1", tenant="acme"))
    [held] = f.settle()
    assert isinstance(held, c.JobHeld) and held.causation_id == f"seq:{held.basis_seq}"
    f.input("acme", "hold", c.JobHoldRequested(job_id="j1", tenant="acme"))
    [again] = f.settle()
    assert isinstance(again, c.RequestRejected) and "only a pending job can be held" in again.reason
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", priority_class="low"))
    [changed] = f.settle()
    assert isinstance(changed, c.JobPriorityChanged) and changed.priority_class == "low"
    f.input("acme", "release", c.JobReleaseRequested(job_id="j1", tenant="acme"))
    assert isinstance(f.settle()[0], c.JobReleased)
    f.input("globex", "cancel", c.JobCancelRequested(job_id="j1", tenant="globex"))
    [foreign] = f.settle()
    assert isinstance(foreign, c.RequestRejected) and "no job 'j1' in tenant 'globex'" in foreign.reason
    f.input("acme", "cancel", c.JobCancelRequested(job_id="j1", tenant="acme"))
    [cancelled] = f.settle()
    assert isinstance(cancelled, c.JobCancelled)
    assert f.decide() == []


def test_cancelling_a_running_job_asks_its_agent_to_stop_it():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1"))
    f.settle()
    f.evt("placement", c.JobScheduled(job_id="j1", attempt=1, allocations=[c.NodeAllocation(node="n1", device_ids=["gpu0"])]))
    f.evt("agent", c.JobStarted(job_id="j1", attempt=1, node="n1"))
    f.input("acme", "cancel", c.JobCancelRequested(job_id="j1", tenant="acme", reason="wrong data"))
    [stop] = f.settle()
    assert isinstance(stop, c.JobStopRequested) and stop.attempt == 1 and stop.reason == "wrong data"


def test_an_owner_may_only_lower_a_priority_and_an_operator_may_change_it_either_way():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1", priority_class="normal", nice=10))
    f.settle()
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", priority_class="high"))
    [up] = f.settle()
    assert isinstance(up, c.RequestRejected) and up.verb == "update"
    assert up.reason.startswith("priority_class: raising j1 from 'normal' to 'high' needs an operator")
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", nice=5))
    [less_nice] = f.settle()
    assert isinstance(less_nice, c.RequestRejected)
    assert less_nice.reason.startswith("nice: lowering j1's nice from 10 to 5 raises its priority")
    # lower class and higher nice together: allowed
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", priority_class="low", nice=20))
    [down] = f.settle()
    assert isinstance(down, c.JobPriorityChanged) and (down.priority_class, down.nice) == ("low", 20)
    # an operator raises it back, beyond where it started; the answer names no tenant but _admin's request
    f.admin("update", c.JobUpdateRequested(job_id="j1", tenant="_admin", priority_class="critical", nice=-100))
    [raised] = f.settle()
    assert isinstance(raised, c.JobPriorityChanged) and (raised.priority_class, raised.nice) == ("critical", -100)
    assert raised.id == f"submission/JobPriorityChanged/j1/{f.seq - 1}"
    assert f.state.jobs.get("j1").spec.priority_class == "critical"
    # two owner updates in one round: the second is judged against the first
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", priority_class="low"))
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", priority_class="normal"))
    lowered, refused = f.settle()
    assert isinstance(lowered, c.JobPriorityChanged) and isinstance(refused, c.RequestRejected)
    assert "from 'low' to 'normal'" in refused.reason
    assert f.decide() == []


def test_operators_act_on_any_tenants_jobs_on_the_admin_subjects():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1"))
    f.input("globex", "submit", submit("g1", tenant="globex"))
    f.settle()
    f.admin("hold", c.JobHoldRequested(job_id="j1", tenant="_admin", user="ops"))
    f.admin("cancel", c.JobCancelRequested(job_id="g1", tenant="globex", reason="maintenance"))
    held, cancelled = f.settle()
    assert isinstance(held, c.JobHeld) and held.reason == "hold requested by ops"
    assert isinstance(cancelled, c.JobCancelled) and cancelled.reason == "maintenance"
    f.admin("release", c.JobReleaseRequested(job_id="j1", tenant="globex"))  # neither _admin nor j1's tenant
    [wrong] = f.settle()
    assert isinstance(wrong, c.RequestRejected) and wrong.tenant == "_admin"
    assert wrong.reason == "tenant 'globex' is neither '_admin' nor the job's tenant 'acme'"
    f.admin("release", c.JobReleaseRequested(job_id="nope", tenant="_admin"))
    [unknown] = f.settle()
    assert isinstance(unknown, c.RequestRejected) and unknown.reason == "no job 'nope' in tenant '_admin'"
    # node and configuration commands share the admin subjects: not submission's to answer
    f.admin("node", c.NodeCommandIssued(node="n1", action="cordon"))
    f.admin("account", c.AccountConfigured(account="a", shares=2))
    assert f.decide() == []
    # an owner still cannot touch another tenant's job
    f.input("globex", "release", c.JobReleaseRequested(job_id="j1", tenant="globex"))
    [foreign] = f.settle()
    assert isinstance(foreign, c.RequestRejected) and foreign.reason == "no job 'j1' in tenant 'globex'"


# ---------------------------------------------------------------------------------------------
# Raising priority is for operators: negative nice, and an account's highest class


def test_a_tenant_may_not_submit_a_negative_nice():
    """As in Slurm: a negative nice raises the priority (P = ... - nice), so only an operator may set one,
    and operators do it on the admin subject (horizon update --admin)."""
    f = feed_with_cluster()
    f.input("acme", "submit", submit("minus", nice=-10_000))
    f.input("acme", "submit", submit("minus1", nice=-1))
    f.input("acme", "submit", submit("zero", nice=0))
    f.input("acme", "submit", submit("plus", nice=10_000))
    f.input("acme", "submit", submit("way-out", nice=-10_001))
    out = {e.job_id: e for e in f.settle()}
    for job_id in ("minus", "minus1"):
        assert isinstance(out[job_id], c.JobRejected) and out[job_id].field == "nice"
        assert out[job_id].reason.startswith("nice: only an operator may set a negative nice; ")
        assert "horizon.in._admin.update" in out[job_id].reason
    assert isinstance(out["zero"], c.JobAccepted) and isinstance(out["plus"], c.JobAccepted)
    assert out["way-out"].reason == "nice: -10001 is outside -10000..10000"
    # the way to a negative nice: an operator's update
    f.admin("update", c.JobUpdateRequested(job_id="zero", tenant="_admin", nice=-500))
    [changed] = f.settle()
    assert isinstance(changed, c.JobPriorityChanged) and changed.nice == -500


def test_an_account_limits_the_class_its_tenants_may_ask_for():
    """org allows at most high, and team under it at most normal; proj under org has no limit of its
    own but is bounded by org's; free and accounts nobody configured are unlimited."""
    f = feed_with_cluster()
    f.admin("account", c.AccountConfigured(account="org", max_priority_class="high"))
    f.admin("account", c.AccountConfigured(account="proj", parent="org"))
    f.admin("account", c.AccountConfigured(account="team", parent="org", max_priority_class="normal"))
    f.admin("account", c.AccountConfigured(account="free"))
    assert f.state.class_limit("proj") == ("org", "high")
    assert f.state.class_limit("team") == ("team", "normal")  # the strictest on the path
    assert f.state.class_limit("free") is None and f.state.class_limit("adhoc") is None
    f.input("acme", "submit", submit("p-crit", account="proj", priority_class="critical"))
    f.input("acme", "submit", submit("p-high", account="proj", priority_class="high"))
    f.input("acme", "submit", submit("t-high", account="team", priority_class="high"))
    f.input("acme", "submit", submit("t-low", account="team", priority_class="low"))
    f.input("acme", "submit", submit("f-crit", account="free", priority_class="critical"))
    f.input("acme", "submit", submit("a-crit", account="adhoc", priority_class="critical"))
    f.input("acme", "submit", submit("arr", account="org", priority_class="critical", array="0-3"))
    out = {e.job_id: e for e in f.settle()}
    assert {j for j, e in out.items() if isinstance(e, c.JobAccepted)} == {"p-high", "t-low", "f-crit", "a-crit"}
    assert out["p-crit"].field == "priority_class"
    assert out["p-crit"].reason == (
        "priority_class: 'critical' is above 'high', the highest class account 'org' allows its jobs; use one of "
        "high, normal, low, scavenger, or ask an operator (horizon update --admin, or horizon account set org "
        "--max-priority-class)")
    assert out["t-high"].reason.startswith("priority_class: 'high' is above 'normal', the highest class account "
                                           "'team' allows its jobs; use one of normal, low, scavenger")
    assert isinstance(out["arr"], c.JobRejected) and "'critical' is above 'high'" in out["arr"].reason
    assert not any(j.startswith("arr_") for j in out)  # an array is refused whole
    assert f.decide() == []


def test_a_class_limit_bounds_an_owners_update_but_not_an_operators():
    """A limit set after a job was accepted leaves the job as it is; an owner's change must bring it
    within the limit (even one that only raises nice), an operator's need not."""
    f = feed_with_cluster()
    f.admin("account", c.AccountConfigured(account="free"))
    f.input("acme", "submit", submit("old", account="free", priority_class="critical"))
    [ok] = f.settle()
    assert isinstance(ok, c.JobAccepted)
    f.admin("account", c.AccountConfigured(account="free", max_priority_class="normal"))
    f.input("acme", "update", c.JobUpdateRequested(job_id="old", tenant="acme", nice=50))
    [refused] = f.settle()
    assert isinstance(refused, c.RequestRejected) and refused.verb == "update"
    assert refused.reason.startswith("priority_class: for old, 'critical' is above 'normal', the highest class "
                                     "account 'free' allows its jobs; use one of normal, low, scavenger")
    f.input("acme", "update", c.JobUpdateRequested(job_id="old", tenant="acme", priority_class="high", nice=50))
    [still] = f.settle()
    assert isinstance(still, c.RequestRejected) and "'high' is above 'normal'" in still.reason
    f.input("acme", "update", c.JobUpdateRequested(job_id="old", tenant="acme", priority_class="normal", nice=50))
    [within] = f.settle()
    assert isinstance(within, c.JobPriorityChanged) and (within.priority_class, within.nice) == ("normal", 50)
    # an operator is not limited, on updates ...
    f.admin("update", c.JobUpdateRequested(job_id="old", tenant="_admin", priority_class="critical", nice=0))
    [raised] = f.settle()
    assert isinstance(raised, c.JobPriorityChanged) and raised.priority_class == "critical"
    # ... and configuring the account again without a limit lifts it
    f.admin("account", c.AccountConfigured(account="free"))
    f.input("acme", "submit", submit("new", account="free", priority_class="critical"))
    [accepted] = f.settle()
    assert isinstance(accepted, c.JobAccepted)


def test_a_class_limit_applies_only_when_the_scheduler_would_apply_the_account():
    """Submission judges AccountConfigured with the scheduler's own check: one it refuses (a parent
    never configured) sets no limit; an account a job created implicitly is a valid parent."""
    f = feed_with_cluster()
    f.admin("account", c.AccountConfigured(account="x", parent="nowhere", max_priority_class="low"))
    f.input("acme", "submit", submit("implicit", account="adhoc"))  # creates account adhoc, as in scheduling
    f.settle()
    f.admin("account", c.AccountConfigured(account="child", parent="adhoc", max_priority_class="low"))
    f.input("acme", "submit", submit("x1", account="x", priority_class="critical"))
    f.input("acme", "submit", submit("c1", account="child", priority_class="normal"))
    out = {e.job_id: e for e in f.settle()}
    assert isinstance(out["x1"], c.JobAccepted)  # x was never configured: no limit
    assert isinstance(out["c1"], c.JobRejected) and "'normal' is above 'low'" in out["c1"].reason
    # the configuration must come from the admin subject (a tenant's is refused upstream; ignored here)
    assert f.state.class_limit("x") is None


def test_old_account_configurations_decode_with_no_limit():
    from events.codec import DecodeError, decode

    old = decode(b'{"type":"AccountConfigured","account":"ml","shares":2.0,"priority_boost":5.0}')
    assert isinstance(old, c.AccountConfigured) and old.max_priority_class is None
    new = decode(b'{"type":"AccountConfigured","account":"ml","max_priority_class":"high"}')
    assert new.max_priority_class == "high"
    with pytest.raises(DecodeError):
        decode(b'{"type":"AccountConfigured","account":"ml","max_priority_class":"urgent"}')
