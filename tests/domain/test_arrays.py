"""Job arrays: the --array syntax, one submission into N tasks, requests on the array as one,
dependencies on a whole array, the %N throttle (simulated), and an array through the real services."""

from __future__ import annotations

import asyncio
import json

import pytest

from events import catalogue as c
from events.arrays import parse_array
from events.resources import ResourceError, parse_memory
from services.nodes.spec import local_nodes
from services.domain.dependencies import MET, NEVER, WAITING, dependency_status
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from services.domain.jobs import JobTable
from services.submission.core import SubmissionCore
from services.submission.normalise import Limits
from tests.helpers import Feed, accepted, node

# ----------------------------------------------------------------------------- syntax


@pytest.mark.parametrize(
    ("text", "indices", "limit"),
    [
        ("0-9", list(range(10)), 0),
        ("0-99%10", list(range(100)), 10),
        ("1,3,5-7", [1, 3, 5, 6, 7], 0),
        ("0-15:4", [0, 4, 8, 12], 0),
        ("0-15:4%2", [0, 4, 8, 12], 2),
        ("7", [7], 0),
        ("1-5,3,0", [0, 1, 2, 3, 4, 5], 0),  # overlaps merge, as Slurm's
        (" 2-4 %1", [2, 3, 4], 1),
    ],
)
def test_array_specs(text, indices, limit):
    spec = parse_array(text)
    assert list(spec.indices) == indices and spec.max_running == limit


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is not an array specification"),
        ("0-", "'0-', which is not an index or a range"),
        ("a-b", "'a-b', which is not an index or a range"),
        ("-1", "'-1', which is not an index or a range"),
        ("9-2", "the range '9-2', which ends before it starts"),
        ("0-9:0", "with a step of 0"),
        ("0-9%0", "%0, which is not a whole number of at least 1"),
        ("0-9%", "%, which is not a whole number"),
        ("0-1000000000", "above the largest allowed index 999999999"),
        ("0-10000", "makes 10,001 tasks; at most 10,000 per array"),
    ],
)
def test_bad_array_specs_say_what_is_wrong_and_what_is_accepted(text, words):
    with pytest.raises(ResourceError) as err:
        parse_array(text, max_tasks=10_000)
    assert words in str(err.value)
    assert str(err.value).startswith("array: ") and "accepted: indices and ranges" in str(err.value)


# ----------------------------------------------------------------------------- submission


def feed() -> Feed:
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    return f


def array_job(job_id: str, array: str, tenant: str = "acme", **kw) -> c.JobSubmitted:
    kw.setdefault("command", ["true"])  # an empty command is rejected
    return c.JobSubmitted(job_id=job_id, tenant=tenant, array=array, resources=c.ResourceRequest(gpus=1), **kw)


def test_one_submission_becomes_one_accepted_job_per_task_in_one_round():
    f = feed()
    f.input("acme", "submit", array_job("sweep", "0-6:3%2", priority_class="low"))
    out = f.settle()
    assert [e.id for e in out] == [f"submission/JobAccepted/sweep_{i}" for i in (0, 3, 6)]
    assert {e.basis_seq for e in out} == {2} and {e.submitted_seq for e in out} == {2}
    assert {e.causation_id for e in out} == {"seq:2"}
    assert [(e.job_id, e.correlation_id, e.spec.array, e.spec.array_index, e.spec.array_max_running) for e in out] == [
        (f"sweep_{i}", f"sweep_{i}", "sweep", i, 2) for i in (0, 3, 6)]
    assert {e.spec.priority_class for e in out} == {"low"}
    assert f.state.jobs.arrays == {"sweep": ["sweep_0", "sweep_3", "sweep_6"]}
    assert f.state.jobs.get("sweep") is None  # the array id is not a job
    f.input("acme", "submit", array_job("sweep", "0-99"))  # a resubmission is the same array: nothing new
    f.input("acme", "submit", array_job("sweep_3", "0-1"))  # a task's id is taken
    answers = f.settle()  # each is answered, and changes nothing
    assert [(type(e).__name__, e.job_id, e.verb) for e in answers] == [
        ("RequestRejected", "sweep", "submit"), ("RequestRejected", "sweep_3", "submit")]
    assert "already submitted" in answers[0].reason
    assert f.state.jobs.arrays == {"sweep": ["sweep_0", "sweep_3", "sweep_6"]}
    plain = f.state.jobs.get("sweep_0").spec
    assert plain.array == "sweep" and plain.array_index == 0


@pytest.mark.parametrize(
    ("job", "field", "words"),
    [
        (array_job("a1", "0-20"), "array", "makes 21 tasks; at most 20 per array"),
        (array_job("a2", "3-1"), "array", "ends before it starts"),
        (array_job("a3", "0-3%0"), "array", "%0"),
        (array_job("x" * 124, "0,99999"), "array", "would be longer than 128 characters"),
        (array_job("a4", "0-3", dependencies=[c.Dependency(job_id="a4_2")]), "dependencies[0].job_id",
         "'a4_2' is a task of this array; an array cannot depend on its own tasks"),
    ],
)
def test_bad_arrays_are_rejected_as_one_naming_the_field(job, field, words):
    f = Feed(SubmissionCore(limits=Limits(max_array_tasks=20)))
    f.evt("agent", node("n1"))
    f.input("acme", "submit", job)
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobRejected) and verdict.job_id == job.job_id
    assert verdict.field == field and verdict.reason.startswith(f"{field}: ") and words in verdict.reason


def test_an_array_whose_task_ids_are_taken_is_rejected():
    f = feed()
    f.input("acme", "submit", c.JobSubmitted(job_id="run_2", tenant="acme", command=["true"]))
    f.input("acme", "submit", array_job("run", "0-3"))
    plain, verdict = f.settle()
    assert isinstance(plain, c.JobAccepted)
    assert isinstance(verdict, c.JobRejected) and verdict.field == "array"
    assert "task 'run_2' would take the id of an existing job" in verdict.reason
    # within one round too, and the later plain submission of a task id is the array's task
    f.input("acme", "submit", array_job("b", "0-1"))
    f.input("acme", "submit", c.JobSubmitted(job_id="b_1", tenant="acme", name="other", command=["true"]))
    out = f.settle()
    assert [e.job_id for e in out] == ["b_0", "b_1"] and out[1].spec.array == "b"
    assert f.decide() == []


def test_an_array_round_cut_short_is_finished_after_a_restart():
    f = feed()
    f.input("acme", "submit", array_job("sweep", "0-4"))
    decided = f.decide()
    assert len(decided) == 5
    for event in decided[:2]:  # the process died after storing two of the five
        f.evt("submission", event, dt=0.001)
    f.evt("agent", node("n2"))  # something else happened meanwhile: the rest is decided on a newer basis
    rest = f.settle()
    assert [e.job_id for e in rest] == ["sweep_2", "sweep_3", "sweep_4"]
    assert [e.spec for e in rest] == [e.spec for e in decided[2:]]
    assert f.decide() == []
    f.input("acme", "submit", array_job("sweep", "0-4"))
    [again] = f.settle()  # now a resubmission: answered, nothing new
    assert isinstance(again, c.RequestRejected) and again.verb == "submit" and again.job_id == "sweep"


def test_requests_about_an_array_answer_for_every_live_task():
    f = feed()
    f.input("acme", "submit", array_job("sweep", "0-3"))
    f.settle()
    f.evt("placement", c.JobScheduled(job_id="sweep_0", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("agent", c.JobStarted(job_id="sweep_0", attempt=1, node="n1"))
    f.evt("agent", c.JobSucceeded(job_id="sweep_0", attempt=1))
    f.evt("placement", c.JobScheduled(job_id="sweep_1", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.input("globex", "hold", c.JobHoldRequested(job_id="sweep", tenant="globex"))
    [foreign] = f.settle()  # another tenant learns nothing about the array, not even its tasks
    assert (foreign.job_id, foreign.reason) == ("sweep", "no job 'sweep' in tenant 'globex'")
    f.input("acme", "hold", c.JobHoldRequested(job_id="sweep", tenant="acme"))
    out = f.settle()  # sweep_0 has ended: not named; sweep_1 runs: it cannot be held
    assert [(type(e).__name__, e.job_id) for e in out] == [
        ("RequestRejected", "sweep_1"), ("JobHeld", "sweep_2"), ("JobHeld", "sweep_3")]
    assert out[0].reason == "only a pending job can be held; sweep_1 is SCHEDULED"
    assert len({e.id for e in out}) == 3 and {e.causation_id for e in out} == {f"seq:{f.seq - 3}"}
    f.input("acme", "release", c.JobReleaseRequested(job_id="sweep", tenant="acme"))
    f.input("acme", "cancel", c.JobCancelRequested(job_id="sweep", tenant="acme"))  # judged after the release
    out = f.settle()
    assert [(type(e).__name__, e.job_id) for e in out] == [
        ("RequestRejected", "sweep_1"), ("JobReleased", "sweep_2"), ("JobReleased", "sweep_3"),
        ("JobStopRequested", "sweep_1"), ("JobCancelled", "sweep_2"), ("JobCancelled", "sweep_3")]
    f.evt("agent", c.JobCancelled(job_id="sweep_1", attempt=1))
    f.input("acme", "cancel", c.JobCancelRequested(job_id="sweep", tenant="acme"))
    [none] = f.settle()
    assert isinstance(none, c.RequestRejected) and none.job_id == "sweep"
    assert none.reason == "array sweep has no live task: all 4 have ended"
    f.input("globex", "cancel", c.JobCancelRequested(job_id="sweep", tenant="globex"))
    [foreign] = f.settle()
    assert foreign.reason == "no job 'sweep' in tenant 'globex'"
    assert f.decide() == []


def test_an_array_request_cut_short_answers_only_the_rest_after_a_restart():
    f = feed()
    f.input("acme", "submit", array_job("sweep", "0-2"))
    f.settle()
    f.admin("update", c.JobUpdateRequested(job_id="sweep", tenant="_admin", priority_class="high"))
    decided = f.decide()
    f.evt("submission", decided[0], dt=0.001)  # one answer stored, then a crash
    rest = f.settle()
    assert [e.job_id for e in rest] == ["sweep_1", "sweep_2"]
    assert [e.id for e in rest] == [e.id for e in decided[1:]]
    assert f.decide() == []


# ----------------------------------------------------------------------------- dependencies on arrays


def test_a_dependency_on_an_array_is_on_all_its_tasks():
    jobs = JobTable()
    for i in range(3):
        jobs.apply(accepted(f"a_{i}", array="a", array_index=i), i + 1, 0.0)
    dep = {kind: c.Dependency(kind=kind, job_id="a") for kind in c.DEPENDENCY_KINDS}

    def status(kind):
        return dependency_status(dep[kind], jobs, set())

    def run(job_id, outcome, seq):
        jobs.apply(c.JobScheduled(job_id=job_id, attempt=1), seq, 10.0)
        jobs.apply(c.JobStarted(job_id=job_id, attempt=1, node="n1"), seq + 1, 11.0)
        jobs.apply(outcome(job_id=job_id, attempt=1), seq + 2, 12.0)

    assert status("after-ok") == (WAITING, "waiting for a: 3 of 3 tasks not ended (after-ok)")
    run("a_0", c.JobSucceeded, 10)
    run("a_1", c.JobSucceeded, 20)
    assert status("after")[0] == WAITING and status("after-any")[0] == WAITING
    assert status("after-ok") == (WAITING, "waiting for a: 1 of 3 tasks not ended (after-ok)")
    run("a_2", c.JobFailed, 30)
    assert status("after") == (MET, "") and status("after-any") == (MET, "")
    assert status("after-ok") == (NEVER, "a_2 ended FAILED, not SUCCEEDED (after-ok on array a)")
    assert status("after-not-ok") == (MET, "")
    # the failed task will be retried: not over yet
    assert dependency_status(dep["after-ok"], jobs, {"a_2"})[0] == WAITING
    jobs.apply(c.JobRequeued(job_id="a_2", attempt=1), 40, 13.0)
    run_again = c.JobScheduled(job_id="a_2", attempt=2)
    jobs.apply(run_again, 41, 14.0)
    jobs.apply(c.JobSucceeded(job_id="a_2", attempt=2), 42, 15.0)
    assert status("after-ok") == (MET, "")
    assert status("after-not-ok") == (NEVER, "all 3 tasks of a SUCCEEDED (after-not-ok)")


# ----------------------------------------------------------------------------- the %N throttle, simulated


def peak_holding(results) -> int:
    """The most tasks holding resources at any instant (an attempt holds them from start to end)."""
    edges = sorted((t, d) for r in results for a in r.attempts for t, d in ((a.start_s, 1), (a.end_s, -1)))
    held = peak = 0
    for _, delta in edges:  # at one instant ends (-1) come before starts (+1)
        held += delta
        peak = max(peak, held)
    return peak


def gpu_cluster(nodes: int, gpus: int):
    settings = SimSettings(gpus_per_node=gpus, backfill="easy")
    specs = local_nodes(nodes, gpus_per_node=gpus, cpus=64, memory_bytes=parse_memory("1Ti"), prefix="n")
    return specs, settings


@pytest.mark.timeout(60)
def test_an_array_of_1000_with_percent_10_never_runs_more_than_10_at_once():
    specs, settings = gpu_cluster(4, 4)  # 16 GPUs: room for 16 tasks at once
    jobs = [SimJob("sweep", 0, 10, 20, gpus=1, array="0-999%10"),
            SimJob("free", 0, 10, 20, gpus=1, array="0-99"),
            SimJob("later", 5, 7, 20, gpus=1, array="0-49%3")]
    run = asyncio.run(simulate(jobs, specs, settings, InProcessBus(make_cores(settings))))
    assert run.unstarted == []
    sweep = [r for j, r in run.results.items() if j.startswith("sweep_")]
    assert len(sweep) == 1000 and {r.state for r in sweep} == {"SUCCEEDED"}
    assert peak_holding(sweep) == 10
    assert peak_holding([r for j, r in run.results.items() if j.startswith("later_")]) == 3
    # the GPUs the sweep may not use go to the unlimited array behind it: the limit blocks nobody else
    assert peak_holding([r for j, r in run.results.items() if j.startswith("free_")]) == 6
    assert peak_holding(run.results.values()) == 16


# ----------------------------------------------------------------------------- through the real services


@pytest.mark.timeout(120)
async def test_an_array_and_a_dependency_pair_through_the_services(running_horizon, tmp_path):
    from services.front.host.check import check_log
    from tests.e2e import assert_replays, events_of, wait_until

    h = await running_horizon(data_dir=tmp_path / "stack", executor="sim", nodes=local_nodes(2, gpus_per_node=4))
    tally, js = h.tally, h.js

    def body(job_id, **fields):
        return json.dumps({"type": "JobSubmitted", "job_id": job_id, "tenant": "acme",
                           "resources": {"gpus": 1}, **fields}).encode()

    # the dependant first: "first" is not submitted yet, so "second" waits for it
    await js.publish("horizon.in.acme.submit", body("second", sim_runtime_s=0.05,
                                                    dependencies=[{"kind": "after-ok", "job_id": "first"}]),
                     headers={"Nats-Msg-Id": "second"})
    await js.publish("horizon.in.acme.submit", body("sweep", array="0-5%2", sim_runtime_s=0.2),
                     headers={"Nats-Msg-Id": "sweep"})
    await wait_until(lambda: tally.has("JobAccepted", "sweep_5"), 10, "the array's tasks to be accepted")
    await js.publish("horizon.in.acme.submit", body("first", sim_runtime_s=0.3), headers={"Nats-Msg-Id": "first"})
    done = ["first", "second"] + [f"sweep_{i}" for i in range(6)]
    await wait_until(lambda: all(tally.has("JobSucceeded", j) for j in done), 60, "every job to succeed")
    await h.stop()
    records = await h.records()
    events = [(r.seq, e) for r, e in zip(records, events_of(records), strict=True)]
    held = peak = 0
    for _, e in events:  # the log's order: at most 2 of the array hold resources at once
        if isinstance(e, c.JobScheduled) and e.job_id.startswith("sweep_"):
            held += 1
            peak = max(peak, held)
        elif isinstance(e, (c.JobSucceeded, c.JobFailed)) and e.job_id.startswith("sweep_"):
            held -= 1
    assert peak == 2
    seq_of = {(type(e).__name__, getattr(e, "job_id", "")): s for s, e in events}
    assert seq_of[("JobScheduled", "second")] > seq_of[("JobSucceeded", "first")]
    result = check_log(records)
    assert result.ok, result.problems[:5]
    assert_replays(records)


@pytest.mark.timeout(120)
async def test_the_cli_holds_reprioritises_and_cancels_an_array_as_owner_and_operator(running_horizon, tmp_path):
    from click.testing import CliRunner

    from services.front.cli.main import cli

    h = await running_horizon(data_dir=tmp_path / "stack", executor="sim", nodes=local_nodes(1, gpus_per_node=1))

    async def horizon(*args: str):
        result = await asyncio.to_thread(CliRunner().invoke, cli, [args[0], "--nats", h.url, *args[1:]])
        return result.exit_code, result.output

    # waiting for prep, never submitted: the tasks stay pending, whatever the timing (two GPUs per
    # task on a one-GPU node would be refused: no node could ever hold them)
    code, out = await horizon("submit", "--tenant", "acme", "--job-id", "sweep", "--array", "0-3%2", "--gpus", "1",
                              "--dependency", "afterok:prep", "--", "true")
    assert (code, out.strip()) == (0, "sweep")
    code, out = await horizon("submit", "--tenant", "acme", "--job-id", "after", "--dependency",
                              "afterok:sweep:prep", "--", "true")
    assert code == 0, out
    assert await horizon("hold", "--tenant", "acme", "sweep") == (0, "sweep: 4 tasks: 4 held\n")
    code, out = await horizon("update", "--tenant", "acme", "sweep", "--priority-class", "high")
    assert code == 1 and "update sweep: priority_class: raising sweep_0 from 'normal' to 'high' needs an operator" in out
    assert await horizon("update", "--admin", "sweep", "--priority-class", "high") == (
        0, "sweep: 4 tasks: 4 priority changed\n")
    assert await horizon("cancel", "--admin", "sweep", "--reason", "wrong data") == (
        0, "sweep: 4 tasks: 4 cancelled\n")
    code, out = await horizon("release", "--tenant", "acme", "sweep")
    assert code == 1 and "release sweep: array sweep has no live task: all 4 have ended" in out
    await h.stop()
