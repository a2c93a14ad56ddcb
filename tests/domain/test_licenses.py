"""Licenses (Slurm's -L, issue 34 item 3): the fold, the admission arithmetic, why a job waits, snapshots,
and a partition leader's view. Pure: the cores fed as the log would feed them (tests/helpers.py)."""

from __future__ import annotations

import pytest

from events import catalogue as c
from events.subjects import admin_subject
from services.domain.licenses import Licenses, check_license, licenses_text, request_problem
from services.domain.queue.waiting import slurm_reason
from services.scheduling.core import SchedulingCore
from services.scheduling.partitioned import PartitionedSchedulingCore
from tests.helpers import Feed, accepted, node

ADMIN = admin_subject("license")


def lic(name: str, count: int = 0, removed: bool = False) -> c.LicenseConfigured:
    return c.LicenseConfigured(name=name, count=count, removed=removed, user="ops")


# ------------------------------------------------------------------ the fold and the arithmetic


def test_an_operator_defines_sets_and_removes_a_license():
    licenses = Licenses()
    assert licenses.apply(lic("matlab", 3), ADMIN) is None and licenses.totals == {"matlab": 3}
    assert licenses.apply(lic("matlab", 5), ADMIN) is None and licenses.totals == {"matlab": 5}
    assert licenses.apply(lic("nastran@slurmdb", 12), ADMIN) is None  # Slurm's remote form, counted here
    assert licenses.apply(lic("matlab", removed=True), ADMIN) is None and "matlab" not in licenses.totals


@pytest.mark.parametrize("event, subject, why", [
    (lic("matlab", 3), "horizon.in.acme.license", "accepted only on horizon.in._admin.license"),
    (lic("mat lab", 3), ADMIN, "'mat lab' is not a license name"),
    (lic("a|b", 3), ADMIN, "is not a license name"),
    (lic("matlab", -1), ADMIN, "count: -1 must be between 0 and"),
    (lic("matlab", 2**31), ADMIN, "must be between 0 and 2147483647"),
])
def test_a_configuration_that_cannot_be_applied_changes_nothing_and_says_why(event, subject, why):
    licenses = Licenses({"matlab": 1})
    assert why in (licenses.apply(event, subject) or "")
    assert licenses.totals == {"matlab": 1}
    assert check_license(event, subject) == licenses.apply(event, subject)


def test_the_worked_example_of_the_module():
    """matlab has 3 and a running job holds 2: a job needing 2 waits; one needing 1 is admitted, and a
    second needing 1 behind it in the same cycle waits for the next (2 + 1 taken ahead + 1 > 3)."""
    licenses = Licenses({"matlab": 3})
    licenses.charge({"matlab": 2}, +1)
    assert licenses.judge({"matlab": 2}) == "license matlab: 2 of 3 in use, needs 2"
    cycle: dict[str, int] = {}
    assert licenses.judge({"matlab": 1}, cycle) == ""
    licenses.add_cycle({"matlab": 1}, cycle)
    assert licenses.judge({"matlab": 1}, cycle) == "license matlab: 2 of 3 in use and 1 taken by jobs ahead of it, needs 1"
    licenses.charge({"matlab": 2}, -1)
    assert licenses.used == {} and licenses.judge({"matlab": 3}) == ""


def test_what_submission_refuses_and_what_it_lets_wait():
    licenses = Licenses({"matlab": 3, "abaqus": 1})
    assert licenses.problem({"matlab": 3, "abaqus": 1}) is None  # all in use now: it waits, it is not refused
    assert licenses.problem({"ansys": 1}) == "license 'ansys' is not defined (licenses here: abaqus, matlab)"
    assert licenses.problem({"matlab": 4}) == ("4 matlab licenses is more than the cluster's 3: the job could never "
                                               "start; ask for 3 or fewer")
    assert "defines no licenses; an operator adds one with horizon license set NAME COUNT" in Licenses().problem(
        {"matlab": 1})
    assert request_problem({"matlab": 0}) == "matlab: 0 must be a count between 1 and 2147483647"
    assert "is not a license name" in request_problem({"a,b": 1})
    assert request_problem({f"l{i}": 1 for i in range(65)}) == "65 licenses; at most 64 different ones"
    assert licenses_text({"matlab": 2, "abaqus": 1}) == "abaqus:1,matlab:2"


def test_a_lowered_total_or_a_removed_license_keeps_what_is_held_and_lets_nothing_more_start():
    licenses = Licenses({"matlab": 3})
    licenses.charge({"matlab": 3}, +1)
    licenses.apply(lic("matlab", 1), ADMIN)
    assert licenses.judge({"matlab": 1}) == "license matlab: 3 of 1 in use, needs 1"
    assert licenses.judge({"matlab": 2}) == "license matlab: needs 2, the cluster has 1: waits until an operator raises it"
    licenses.apply(lic("matlab", removed=True), ADMIN)
    assert licenses.judge({"matlab": 1}).startswith("license matlab is not defined (it was removed)")
    assert licenses.report() == [{"name": "matlab", "total": 0, "used": 3, "free": 0, "reserved": 0,
                                  "remote": False, "defined": False}]


# ------------------------------------------------------------------ the scheduler


def _feed(core=None) -> Feed:
    f = Feed(core or SchedulingCore())
    f.evt("agent", node("n1", gpus=8))
    f.admin("license", lic("matlab", 1))
    return f


def _placed(f: Feed, cycle: c.SchedulingCycleCompleted, *job_ids: str) -> None:
    for job_id in job_ids:
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, cycle=cycle.cycle,
                                          allocations=[c.NodeAllocation(node="n1")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=cycle.cycle, scheduled=len(job_ids), basis_seq=cycle.basis_seq))


def test_two_jobs_competing_for_one_license_run_one_after_the_other():
    f = _feed()
    f.evt("submission", accepted("first", licenses={"matlab": 1}))
    f.evt("submission", accepted("second", licenses={"matlab": 1}))
    f.evt("submission", accepted("free"))  # asks for none: never held back
    [cycle] = f.settle()
    assert cycle.candidates == ["first", "free"]  # second: matlab is taken by first, ahead of it in the cycle
    core, state = f.core, f.state
    kind, why, code = core.waiting(state, state.jobs.jobs["second"])
    # placement has not placed cycle 1 yet: its candidate's license counts as taken
    assert (kind, why) == ("licenses", "license matlab: 0 of 1 in use and 1 taken by jobs ahead of it, needs 1")
    _placed(f, cycle, "first", "free")
    assert state.licenses.used == {"matlab": 1}
    assert f.decide() == []  # nothing could start since: no cycle
    kind, why, code = core.waiting(state, state.jobs.jobs["second"])
    assert (kind, why, slurm_reason(kind, code)) == ("licenses", "license matlab: 1 of 1 in use, needs 1", "Licenses")
    assert core.waiting_all(state)["second"] == (kind, why, code)
    f.evt("agent", c.JobStarted(job_id="first", attempt=1, node="n1"))
    f.evt("agent", c.JobSucceeded(job_id="first", attempt=1, exit_code=0))
    assert state.licenses.used == {}
    [again] = f.settle()
    assert again.candidates == ["second"]
    _placed(f, again, "second")
    assert state.licenses.used == {"matlab": 1}


def test_a_requeued_job_gives_its_licenses_back_and_asks_again():
    f = _feed()
    f.evt("submission", accepted("solver", licenses={"matlab": 1}, restart_policy="on-failure", max_retries=1))
    [cycle] = f.settle()
    _placed(f, cycle, "solver")
    f.evt("agent", c.JobFailed(job_id="solver", attempt=1, exit_code=1))
    assert f.state.licenses.used == {}
    out = f.settle()
    assert [type(e).__name__ for e in out] == ["JobRequeued"]
    assert "solver" in f.state.licensed


def test_a_license_defined_later_lets_a_waiting_job_start_and_a_bad_one_is_answered():
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.admin("license", lic("matlab", 1))
    f.admin("license", lic("matlab", removed=True))
    f.evt("submission", accepted("late", licenses={"matlab": 1}))  # accepted before the removal was folded
    assert f.settle() == []  # no candidate: the license is gone
    assert f.core.waiting(f.state, f.state.jobs.jobs["late"]).why.startswith("license matlab is not defined")
    f.admin("license", lic("matlab", 2))
    f.admin("license", lic("bad name", 2))
    out = f.settle()
    [rejected] = [e for e in out if isinstance(e, c.ConfigRejected)]
    assert rejected.verb == "license" and "'bad name' is not a license name" in rejected.reason
    [cycle] = [e for e in out if isinstance(e, c.SchedulingCycleCompleted)]
    assert cycle.candidates == ["late"]


def test_the_snapshot_keeps_the_totals_and_rebuilds_what_is_held():
    f = _feed()
    f.admin("license", lic("abaqus", 4))
    f.evt("submission", accepted("run", licenses={"matlab": 1, "abaqus": 2}))
    f.evt("submission", accepted("wait", licenses={"matlab": 1}))
    [cycle] = f.settle()
    _placed(f, cycle, "run")
    core = f.core
    data = core.dump(f.state)
    loaded = core.load(data)
    assert loaded is not None
    assert loaded.licenses.totals == {"abaqus": 4, "matlab": 1}
    assert loaded.licenses.used == {"abaqus": 2, "matlab": 1} == f.state.licenses.used
    assert loaded.licensed == {"wait"} == f.state.licensed
    assert core.dump(loaded) == data


# ------------------------------------------------------------------ partition leaders


def test_a_partition_leader_counts_the_licenses_of_another_leaders_open_cycle_and_fences_its_own():
    a = PartitionedSchedulingCore(partitions=("a",))
    f = Feed(a)
    f.evt("agent", node("n1"))
    f.admin("license", lic("matlab", 1))
    f.evt("submission", accepted("of-b", licenses={"matlab": 1}, partition="b"))
    f.evt("submission", accepted("of-a", licenses={"matlab": 1}, partition="a"))
    # leader b's cycle offers its job: not placed yet, it holds matlab for every leader
    f.evt("scheduling-b", c.SchedulingCycleCompleted(cycle=1, candidates=["of-b"], basis_seq=f.seq))
    assert a.candidates(f.state)[0] == []
    assert a.charges_quota(f.state, ["of-a"]) and not a.charges_quota(f.state, [])
    f.evt("placement-b", c.PlacementCycleCompleted(cycle=1, scheduled=0, basis_seq=f.seq))
    assert [j.job_id for j in a.candidates(f.state)[0]] == ["of-a"]
    assert f.state.licenses.used == {}  # the view was a copy


# ------------------------------------------------------------------ preemption


def _blocked_vip(taker: bool) -> list[str]:
    """A critical job, blocked by placement while matlab was free, on a node a low job fills; then
    (``taker``) a job without GPUs takes the one matlab license: the victims preemption would choose."""
    from services.preemption.core import PreemptionCore

    f = Feed(PreemptionCore())
    f.evt("agent", node("n0", gpus=8))
    f.evt("inventory", c.NodeReady(node="n0", basis_seq=1))
    f.admin("license", lic("matlab", 1))
    f.evt("submission", accepted("low", gpus=8, priority_class="low"))
    f.evt("submission", accepted("taker", gpus=0, priority_class="low", licenses={"matlab": 1}))
    for job_id, devices in (("low", [f"gpu{k}" for k in range(8)]), ("taker", [])):
        if job_id == "low" or taker:
            f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(
                node="n0", device_ids=devices, cpus_milli=1000, memory_bytes=1 << 30)]))
            f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node="n0"))
    f.evt("submission", accepted("vip", gpus=8, priority_class="critical", licenses={"matlab": 1}))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["vip"], basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    return sorted(e.job_id for e in f.decide() if isinstance(e, c.PreemptionRequested))


def test_a_job_waiting_for_licenses_does_not_preempt_for_room():
    assert _blocked_vip(taker=False) == ["low"]  # matlab free: room is all it needs
    assert _blocked_vip(taker=True) == []  # matlab taken since: stopping low would not start it
