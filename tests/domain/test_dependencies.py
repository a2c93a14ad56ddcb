"""Dependencies: forward references, cycles refused at submission and named, chains and a diamond
run in order, and a dependency that can never be met ends its dependant with the reason."""

from __future__ import annotations

import asyncio

import pytest

from events import catalogue as c
from events.resources import parse_memory
from services.nodes.spec import local_nodes
from services.domain.dependencies import NEVER, WAITING, dependency_status
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from services.domain.jobs import JobTable
from services.submission.core import SubmissionCore
from tests.helpers import Feed, accepted, node


def feed() -> Feed:
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    return f


def job(job_id: str, *deps: str, kind: str = "after-ok", **kw) -> c.JobSubmitted:
    kw.setdefault("command", ["true"])  # an empty command is rejected
    return c.JobSubmitted(job_id=job_id, tenant="acme", resources=c.ResourceRequest(gpus=1),
                          dependencies=[c.Dependency(kind=kind, job_id=d) for d in deps], **kw)


# ----------------------------------------------------------------------------- submission


def test_a_dependency_may_name_a_job_not_submitted_yet():
    f = feed()
    f.input("acme", "submit", job("b", "a"))
    [accepted_b] = f.settle()
    assert isinstance(accepted_b, c.JobAccepted)
    status = dependency_status(c.Dependency(job_id="a"), f.state.jobs, set())
    assert status == (WAITING, "waiting for a: not submitted yet")


def test_a_cycle_is_rejected_naming_it():
    f = feed()
    f.input("acme", "submit", job("a", "b"))
    f.input("acme", "submit", job("b", "c"))
    f.settle()
    f.input("acme", "submit", job("c", "a"))
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobRejected) and verdict.field == "dependencies"
    assert verdict.reason == ("dependencies: cycle c -> a -> b -> c: each job depends on the next, "
                              "so none of them could ever start")
    # in one round, and through an array's task
    f.input("acme", "submit", job("x", "sweep_1"))
    f.input("acme", "submit", c.JobSubmitted(job_id="sweep", tenant="acme", array="0-3", command=["true"],
                                             dependencies=[c.Dependency(job_id="x")]))
    x, sweep = f.settle()
    assert isinstance(x, c.JobAccepted) and isinstance(sweep, c.JobRejected)
    assert sweep.reason.startswith("dependencies: cycle sweep -> x -> sweep_1 (a task of sweep): ")
    # the search goes past a dead end (q is not submitted) to the path that closes the cycle
    f.input("acme", "submit", job("p", "q", "r"))
    f.input("acme", "submit", job("r", "p"))
    p, r = f.settle()
    assert isinstance(p, c.JobAccepted) and r.reason.startswith("dependencies: cycle r -> p -> r:")
    assert f.decide() == []


def test_only_jobs_still_waiting_can_close_a_cycle():
    f = feed()
    f.input("acme", "submit", job("a", "b"))
    f.settle()
    f.input("acme", "cancel", c.JobCancelRequested(job_id="a", tenant="acme"))
    f.settle()
    f.input("acme", "submit", job("b", "a", kind="after-any"))  # a ended: it waits for nothing any more
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobAccepted)


def test_self_and_rejected_dependencies_are_refused():
    f = feed()
    f.input("acme", "submit", job("me", "me"))
    f.input("acme", "submit", c.JobSubmitted(job_id="bad", tenant="acme", time_limit_s=-1, command=["true"]))
    f.input("acme", "submit", job("after-bad", "bad"))
    me, bad, after_bad = f.settle()
    assert me.field == "dependencies[0].job_id" and me.reason.endswith("a job cannot depend on itself")
    assert isinstance(bad, c.JobRejected)
    assert isinstance(after_bad, c.JobRejected) and after_bad.field == "dependencies[0].job_id"
    assert after_bad.reason == "dependencies[0].job_id: 'bad' was rejected, so it will never run"


def test_dependency_statuses_for_unknown_and_rejected_jobs():
    jobs = JobTable()
    jobs.apply(c.JobRejected(job_id="gone", tenant="acme", reason="no"), 1, 0.0)
    jobs.apply(accepted("here"), 2, 0.0)
    assert dependency_status(c.Dependency(job_id="gone"), jobs, set()) == (NEVER, "gone was rejected")
    assert dependency_status(c.Dependency(job_id="later", kind="after-any"), jobs, set()) == (
        WAITING, "waiting for later: not submitted yet")
    assert dependency_status(c.Dependency(job_id="here"), jobs, set()) == (WAITING, "waiting for here (after-ok)")


# ----------------------------------------------------------------------------- simulated workflows


def run(jobs: list[SimJob], nodes: int = 2, gpus: int = 4):
    settings = SimSettings(gpus_per_node=gpus, backfill="easy")
    specs = local_nodes(nodes, gpus_per_node=gpus, cpus=64, memory_bytes=parse_memory("1Ti"), prefix="n")
    return asyncio.run(simulate(jobs, specs, settings, InProcessBus(make_cores(settings))))


@pytest.mark.timeout(60)
def test_a_chain_of_100_and_a_diamond_run_in_order_whatever_the_submission_order():
    chain = [SimJob(f"c{i:03d}", 0, 5, 10, gpus=1, dependencies=(("after-ok", f"c{i - 1:03d}"),) if i else ())
             for i in range(100)]
    diamond = [
        SimJob("bottom", 0, 3, 10, gpus=1, dependencies=(("after-ok", "left"), ("after-ok", "right"))),
        SimJob("left", 0, 7, 10, gpus=1, dependencies=(("after-ok", "top"),)),
        SimJob("right", 0, 3, 10, gpus=1, dependencies=(("after-any", "top"),)),
        SimJob("top", 2, 5, 10, gpus=1),  # arrives last: the others wait for it
    ]
    result = run(list(reversed(chain)) + diamond)  # each link names one not submitted yet
    assert result.unstarted == []
    r = result.results
    for i in range(1, 100):
        assert r[f"c{i:03d}"].start_s == r[f"c{i - 1:03d}"].end_s, i
    assert r["c099"].end_s == 500
    assert (r["top"].start_s, r["left"].start_s, r["right"].start_s, r["bottom"].start_s) == (2, 7, 7, 14)
    assert {x.state for x in r.values()} == {"SUCCEEDED"}


@pytest.mark.timeout(60)
def test_after_ok_on_a_failing_job_ends_the_dependant_with_the_reason():
    result = run([
        SimJob("flaky", 0, 5, 10, gpus=1, exit_code=3),
        SimJob("needs-ok", 1, 5, 10, gpus=1, dependencies=(("after-ok", "flaky"),)),
        SimJob("cleanup", 1, 5, 10, gpus=1, dependencies=(("after-not-ok", "flaky"),)),
        SimJob("retried", 0, 4, 10, gpus=1, fail_attempts=1, restart_policy="on-failure", max_retries=2),
        SimJob("after-retried", 0, 1, 10, gpus=1, dependencies=(("after-ok", "retried"),)),
        SimJob("ring-a", 0, 1, 10, dependencies=(("after-ok", "ring-b"),)),
        SimJob("ring-b", 1, 1, 10, dependencies=(("after-ok", "ring-a"),)),
    ])
    r = result.results
    assert (r["flaky"].state, r["flaky"].reason) == ("FAILED", "exit code 3")
    assert r["needs-ok"].state == "DEPENDENCY_NEVER_SATISFIED" and r["needs-ok"].start_s is None
    assert r["needs-ok"].reason == "flaky ended FAILED, not SUCCEEDED (after-ok)"
    assert r["cleanup"].start_s == 5 and r["cleanup"].state == "SUCCEEDED"
    # a failure the restart policy retries is not the end: the dependant waits for the retry
    assert [(a.attempt, a.outcome) for a in r["retried"].attempts] == [(1, "FAILED"), (2, "SUCCEEDED")]
    assert r["after-retried"].start_s == r["retried"].end_s and r["after-retried"].state == "SUCCEEDED"
    # the second of a cycle is refused; the first, waiting for a job that never came, then never can start
    assert r["ring-b"].state == "REJECTED" and "cycle ring-b -> ring-a -> ring-b" in r["ring-b"].reason
    assert r["ring-a"].state == "DEPENDENCY_NEVER_SATISFIED" and r["ring-a"].reason == "ring-b was rejected"
