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
        (submit("b5", time_limit_s=0), "time_limit_s", "must be more than 0"),
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


def test_a_resubmission_is_the_same_job():
    f = feed_with_cluster()
    f.input("acme", "submit", submit("j1"))
    f.input("acme", "submit", submit("j1", name="again"))  # same job id, a new message
    assert len(f.settle()) == 1
    f.input("acme", "submit", submit("j1"))
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
    f.input("acme", "update", c.JobUpdateRequested(job_id="j1", tenant="acme", priority_class="high"))
    [changed] = f.settle()
    assert isinstance(changed, c.JobPriorityChanged) and changed.priority_class == "high"
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
