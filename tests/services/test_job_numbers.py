"""Job numbers (Slurm's numeric job ids) as the submission core gives them, and the rules of
services/domain/job_numbers.py. The front (sbatch, squeue, scancel ... with a real nats-server):
tests/front/test_job_numbers.py."""

from __future__ import annotations

from events import catalogue as c
from services.domain.job_numbers import Reference, number_key, number_scope, parse_reference, slurm_id
from services.runtime.replay import replay_decisions
from services.submission.core import SubmissionCore
from tests.helpers import Feed, node
from tests.services.test_intake_core import Intake


def submit(job_id: str, tenant: str = "acme", **kw) -> c.JobSubmitted:
    kw.setdefault("command", ["true"])
    return c.JobSubmitted(job_id=job_id, tenant=tenant, **kw)


def feed() -> Feed:
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    return f


def numbers(events: list[c.Event]) -> list[tuple[str, int, int]]:
    return [(e.job_id, e.spec.number, e.spec.array_number) for e in events if isinstance(e, c.JobAccepted)]


def test_jobs_are_numbered_from_1_in_acceptance_order_and_a_rejected_job_takes_no_number():
    f = feed()
    f.input("acme", "submit", submit("a"))
    f.input("acme", "submit", submit("bad", time_limit_s=-1))  # rejected: no number
    f.input("acme", "submit", submit("b"))
    assert numbers(f.settle()) == [("a", 1, 0), ("b", 2, 0)]
    f.input("globex", "submit", submit("c", tenant="globex"))  # without accounts: one cluster-wide count
    assert numbers(f.settle()) == [("c", 3, 0)]


def test_an_arrays_tasks_are_consecutive_and_the_array_number_is_its_first_tasks():
    """A job before it; array sweep of 3 tasks (indices 0, 5, 9) in one round with a job after it:
    the tasks are 2, 3, 4 (array 2: 2_0, 2_5, 2_9), the job after them 5."""
    f = feed()
    f.input("acme", "submit", submit("first"))
    f.input("acme", "submit", submit("sweep", array="0,5,9"))
    f.input("acme", "submit", submit("after"))
    got = numbers(f.settle())
    assert got == [("first", 1, 0), ("sweep_0", 2, 2), ("sweep_5", 3, 2), ("sweep_9", 4, 2), ("after", 5, 0)]
    assert f.decide() == []  # folded: nothing left to decide
    tasks = [f.state.jobs.jobs[t].spec for t in ("sweep_0", "sweep_5", "sweep_9")]
    assert [slurm_id(s.number, s.array_number, s.array_index) for s in tasks] == ["2_0", "2_5", "2_9"]


def test_a_round_cut_short_finishes_the_array_with_the_numbers_that_follow():
    """The round decides 3 tasks and a job; only the first task reaches the log (a crash): the round
    decided again gives the same numbers to the rest."""
    f = feed()
    f.input("acme", "submit", submit("sweep", array="0-2"))
    f.input("acme", "submit", submit("after"))
    whole = f.decide()
    assert numbers(whole) == [("sweep_0", 1, 1), ("sweep_1", 2, 1), ("sweep_2", 3, 1), ("after", 4, 0)]
    f.evt("submission", whole[0], dt=0.001)  # only the first task was stored
    again = f.decide()
    assert numbers(again) == numbers(whole[1:])
    assert [e.id for e in again] == [e.id for e in whole[1:]]  # the same decisions, the same ids


def test_replay_gives_the_same_numbers():
    f = feed()
    for i in range(3):
        f.input("acme", "submit", submit(f"j{i}"))
        f.settle()
    f.input("acme", "submit", submit("arr", array="0-3"))
    f.input("acme", "submit", submit("k"))
    f.settle()
    report = replay_decisions(SubmissionCore(), f.records)
    assert report.mismatches == [] and report.reproduced == report.decisions == 8
    assert [f.state.jobs.jobs[j].spec.number for j in ("j0", "j1", "j2", "arr_0", "arr_3", "k")] == [1, 2, 3, 4, 7, 8]


def test_a_log_from_before_numbers_goes_on_from_1():
    """A JobAccepted without a number (an older Horizon's) counts for nothing; the next job is 1."""
    f = feed()
    f.evt("submission", c.JobAccepted(id="submission/JobAccepted/old", job_id="old",
                                      spec=c.JobSpec(tenant="acme"), basis_seq=1))
    f.input("acme", "submit", submit("new"))
    assert numbers(f.settle()) == [("new", 1, 0)]
    assert f.state.jobs.jobs["old"].spec.number == 0


def test_under_accounts_each_tenant_counts_its_own():
    """acme's jobs are 1, 2 and globex's 1, whatever the order: a tenant's numbers tell nothing of the
    others'. What the operator publishes itself (not through the intake) counts in the cluster's scope."""
    f = Intake(SubmissionCore())
    f.evt("agent", node("n1"))
    for uid, tenant in enumerate(("acme", "globex"), start=2001):
        f.admin("user", c.UserConfigured(tenant=tenant, name=tenant, uid=uid, gid=uid))
    f.send("acme", "submit", submit("a1"))
    f.send("globex", "submit", submit("g1", tenant="globex"))
    f.send("acme", "submit", submit("a2"))
    f.input("acme", "submit", submit("op"))  # the operator's publish (no intake): a raw id
    assert numbers(f.settle()) == [("acme:a1", 1, 0), ("globex:g1", 1, 0), ("acme:a2", 2, 0), ("op", 1, 0)]
    report = replay_decisions(SubmissionCore(), f.records)
    assert report.mismatches == []


def test_references_scopes_and_shown_ids():
    assert parse_reference("4213") == Reference(4213)
    assert parse_reference("4213_7") == Reference(4213, 7)
    assert parse_reference("4213.0") == Reference(4213, None, "0")
    assert parse_reference("4213_7.batch") == Reference(4213, 7, "batch")
    for text in ("0", "eval-7", "4213_", "4213.x", "12a", "1" * 16, "acme:4"):
        assert parse_reference(text) is None, text
    assert number_scope("acme:eval-7") == "acme" and number_scope("eval-7") == ""
    assert number_key("acme:eval-7", 12) == "acme:12" and number_key("eval-7", 12) == "12"
    assert slurm_id(0) == "" and slurm_id(12) == "12" and slurm_id(14, 12, 2) == "12_2"
