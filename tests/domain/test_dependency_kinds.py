"""Issue 19's dependencies in the scheduling core: ``after-checkpoint`` (a job's first checkpoint), a
dependency timeout, and Slurm's ``--deadline``; with the worked timelines (Feed: "now" is the log's
time, t0 = 1 000 000 s, each event 1 s after the last unless told)."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.front.slurm.sbatch_options import SbatchError
from services.domain.dependencies import MET, NEVER, WAITING, dependency_status
from services.scheduling.core import SchedulingCore
from services.submission.core import SubmissionCore
from tests.helpers import Feed, accepted, node

T0 = 1_000_000.0


def _alloc() -> list[c.NodeAllocation]:
    return [c.NodeAllocation(node="n1")]


def _dep(job_id: str, kind: str = "after-checkpoint") -> tuple[c.Dependency, ...]:
    return (c.Dependency(kind=kind, job_id=job_id),)


def _run(f: Feed, job_id: str, cycle: int) -> None:
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=_alloc()))
    f.evt("placement", c.PlacementCycleCompleted(cycle=cycle, scheduled=1))
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node="n1"))


def test_after_checkpoint_waits_for_the_first_checkpoint_and_stays_met_after_the_job_ends():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("train", checkpoint_signal="USR1"))
    f.evt("submission", accepted("eval", dependencies=_dep("train")))
    [cycle] = f.settle()
    assert cycle.candidates == ["train"]
    _run(f, "train", 1)
    assert f.settle() == []
    eval_job = f.state.jobs.get("eval")
    assert f.core.waiting(f.state, eval_job)[:2] == ("dependency", "waiting for train's first checkpoint (after-checkpoint)")
    f.evt("agent", c.JobCheckpointed(job_id="train", attempt=1, checkpoint_ref="s3://ck/1"))
    [second] = f.settle()
    assert second.candidates == ["eval"]
    # the job ends and is settled (only its outcome kept): the dependency is still met
    f.evt("agent", c.JobSucceeded(job_id="train", attempt=1))
    assert "train" not in f.state.jobs.jobs and "train" in f.state.jobs.checkpointed
    assert dependency_status(_dep("train")[0], f.state.jobs, set()) == (MET, "")
    # and a snapshot keeps it
    restored = f.core.load(f.core.dump(f.state))
    assert restored is not None and restored.jobs.checkpointed == {"train"}


def test_after_checkpoint_on_a_job_that_ended_without_one_can_never_be_met():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("quick"))
    f.evt("submission", accepted("after", dependencies=_dep("quick")))
    f.settle()
    _run(f, "quick", 1)
    assert dependency_status(_dep("quick")[0], f.state.jobs, set())[0] == WAITING
    f.evt("agent", c.JobSucceeded(job_id="quick", attempt=1))
    [never] = f.settle()
    assert isinstance(never, c.JobDependencyNeverSatisfied) and never.job_id == "after"
    assert never.reason == "quick ended SUCCEEDED without a checkpoint (after-checkpoint)"
    assert dependency_status(_dep("quick")[0], f.state.jobs, set())[0] == NEVER


def test_a_dependency_timeout_ends_the_dependant_at_acceptance_plus_the_timeout():
    # accepted at t0+2 with a 60 s timeout: still waiting at t0+61, ended at the tick of t0+62
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))                                                   # t0+1
    f.evt("submission", accepted("late", dependency_timeout_s=60.0, dependencies=_dep("never-sent", "after-ok")))
    assert f.state.jobs.get("late").accepted_ts == T0 + 2
    assert f.settle() == []  # no candidate: it waits
    why = f.core.waiting(f.state, f.state.jobs.get("late")).why
    assert why == f"waiting for never-sent: not submitted yet; gives up at t={T0 + 62:.0f} (dependency timeout)"
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=59.0)                          # t0+61: 1 s to go
    assert f.decide() == []
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=1.0)                           # t0+62
    [gone] = f.settle()
    assert isinstance(gone, c.JobDependencyNeverSatisfied) and gone.dependency.job_id == "never-sent"
    assert gone.reason == ("timeout: dependencies not met within 60 s of acceptance "
                           "(waiting for never-sent: not submitted yet)")
    assert f.state.jobs.get("late").state.value == "DEPENDENCY_NEVER_SATISFIED"
    assert f.decide() == []


def test_a_dependency_met_in_time_is_not_timed_out():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("first"))
    f.evt("submission", accepted("then", dependency_timeout_s=30.0, dependencies=_dep("first", "after")))
    f.settle()
    _run(f, "first", 1)                                                         # started: "after" met
    [cycle] = f.settle()
    assert cycle.candidates == ["then"]
    f.evt("placement", c.PlacementCycleCompleted(cycle=2, scheduled=0), dt=100.0)  # past the timeout
    assert not any(isinstance(e, c.JobDependencyNeverSatisfied) for e in f.settle())


def test_a_deadline_ends_a_pending_job_once_now_plus_its_limit_is_past_it():
    # deadline t0+1000, limit 600 s: it must start by t0+400; at t0+401 it ends UNSCHEDULABLE
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1", gpus=1))                                          # t0+1
    f.evt("submission", accepted("hog", time_limit_s=3600.0))                   # t0+2
    f.evt("submission", accepted("due", time_limit_s=600.0, deadline_ts=T0 + 1000))  # t0+3
    [cycle] = f.settle()
    f.evt("placement", c.JobScheduled(job_id="hog", attempt=1, allocations=_alloc()))
    f.evt("placement", c.PlacementBlocked(job_id="due", cycle=1, reasons=[
        c.BlockReason(reason="only 0 free GPUs", nodes=1, filter="GpuCapacity")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=1, blocked=1))  # t0+6
    assert f.decide() == []
    why = f.core.waiting(f.state, f.state.jobs.get("due")).why
    assert why.endswith(f"; must start by t={T0 + 400:.0f} to end by its deadline t={T0 + 1000:.0f} (--deadline)")
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=T0 + 400 - f.time)             # t0+400: now + 600 = deadline
    assert f.decide() == []
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=1.0)                           # t0+401
    [gone] = f.settle()
    assert isinstance(gone, c.JobUnschedulable) and gone.job_id == "due"
    assert gone.reason == ("deadline: it could not end by 1970-01-12T14:03:20Z (now + its time limit "
                           "600 s is 1 s past it): 1 nodes: only 0 free GPUs")
    assert f.state.jobs.get("due").state.value == "UNSCHEDULABLE"
    assert f.decide() == []


def test_submission_checks_the_new_fields():
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    sub = dict(tenant="acme", command=["true"])
    f.input("acme", "submit", c.JobSubmitted(job_id="a", dependency_timeout_s=0, **sub))
    f.input("acme", "submit", c.JobSubmitted(job_id="b", begin_ts=T0 + 100, deadline_ts=T0 + 50, **sub))
    f.input("acme", "submit", c.JobSubmitted(job_id="c", deadline_ts=T0 + 5000, dependency_timeout_s=600.0,
                                             dependencies=[c.Dependency(kind="after-checkpoint", job_id="x")], **sub))
    a, b, ok = f.settle()
    assert isinstance(a, c.JobRejected) and a.field == "dependency_timeout_s"
    assert isinstance(b, c.JobRejected) and b.field == "deadline_ts"
    assert isinstance(ok, c.JobAccepted)
    assert (ok.spec.deadline_ts, ok.spec.dependency_timeout_s) == (T0 + 5000, 600.0)
    assert ok.spec.dependencies[0].kind == "after-checkpoint"


def test_sbatch_deadline_and_aftercheckpoint():
    from tests.front.test_sbatch import NOW, parse

    fields = parse("--deadline=now+2hours\n-d aftercheckpoint:train")
    assert fields["deadline_ts"] == NOW.timestamp() + 7200
    assert fields["dependencies"] == [c.Dependency(kind="after-checkpoint", job_id="train")]
    with pytest.raises(SbatchError, match="Incompatible begin and deadline"):
        parse("--begin=now+1hour\n--deadline=now+10minutes")


def test_afterdata_waits_until_an_operator_announces_the_dataset():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("etl", after_datasets=("imagenet-v2",), dependency_timeout_s=600.0))
    assert f.settle() == []
    assert f.core.waiting(f.state, f.state.jobs.get("etl")).why.startswith(
        "waiting for dataset imagenet-v2 to be announced available (afterdata); gives up at t=")
    # a name that is no token is answered, not applied
    f.admin("dataset", c.DatasetAvailable(dataset="bad name"))
    [rejected] = f.settle()
    assert isinstance(rejected, c.ConfigRejected) and rejected.verb == "dataset"
    assert rejected.reason == "'bad name' is not a dataset name (letters, digits, ._-)"
    f.admin("dataset", c.DatasetAvailable(dataset="imagenet-v2", reason="etl run 7"))
    [cycle] = f.settle()
    assert cycle.candidates == ["etl"]
    restored = f.core.load(f.core.dump(f.state))
    assert restored is not None and restored.datasets == {"imagenet-v2"}


def test_a_dataset_never_announced_times_out_naming_it():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.evt("submission", accepted("etl", after_datasets=("raw",), dependency_timeout_s=30.0))  # t0+2
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=30.0)                                   # t0+32
    [gone] = f.settle()
    assert isinstance(gone, c.JobDependencyNeverSatisfied)
    assert gone.dependency == c.Dependency(kind="after-data", job_id="raw")
    assert gone.reason == "timeout: dependencies not met within 30 s of acceptance (dataset raw not announced)"


def test_afterdata_on_the_command_lines():
    from tests.front.test_sbatch import parse

    assert parse("-d afterok:a,afterdata:raw:clean")["after_datasets"] == ["raw", "clean"]
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    f.input("acme", "submit", c.JobSubmitted(job_id="j", tenant="acme", command=["true"],
                                             after_datasets=["b", "a", "b"]))
    f.input("acme", "submit", c.JobSubmitted(job_id="k", tenant="acme", command=["true"], after_datasets=["a b"]))
    ok, bad = f.settle()
    assert ok.spec.after_datasets == ("a", "b")
    assert isinstance(bad, c.JobRejected) and bad.field == "after_datasets[0]"
