"""The whole-log checker (``services.front.host.check``): a clean simulated log passes, and every kind of bad
log fails with the problem named. The bad logs are real events appended to a ``MemoryLog``, as the
services would have published them, with one decision or report forged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject, input_subject
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from services.runtime.memory_log import MemoryLog
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from tests.helpers import accepted, node

GIB = 1 << 30


class Log:
    """A ``MemoryLog`` written the way the services write it; each append returns its sequence."""

    def __init__(self) -> None:
        self.t = 1_000_000.0
        self.mem = MemoryLog(clock=lambda: self.t)

    def _append(self, subject: str, event: c.Event) -> int:
        self.t += 1.0
        return self.mem.append(subject, encode(event), msg_id=f"m{len(self.mem.records) + 1}").seq

    @property
    def seq(self) -> int:
        return len(self.mem.records)

    def evt(self, service: str, event: c.Event) -> int:
        return self._append(event_subject(service, event), event)

    def admin(self, verb: str, event: c.Event) -> int:
        return self._append(admin_subject(verb), event)

    # -- the usual facts

    def node(self, name: str = "n1", **kw: Any) -> int:
        self.evt("agent", node(name, **kw))
        return self.evt("inventory", c.NodeReady(node=name, basis_seq=self.seq))

    def accept(self, job_id: str, **kw: Any) -> int:
        kw.setdefault("gpus", 1)
        return self.evt("submission", accepted(job_id, **kw))

    def schedule(self, job_id: str, devices: tuple[str, ...] = (), *, on: str = "n1", cpus: int = 1,
                 memory: int = GIB, attempt: int = 1, basis: int | None = None, borrowed: bool = False) -> int:
        alloc = c.NodeAllocation(node=on, device_ids=list(devices), cpus_milli=cpus * 1000, memory_bytes=memory)
        return self.evt("placement", c.JobScheduled(job_id=job_id, attempt=attempt, allocations=[alloc],
                                                     basis_seq=self.seq if basis is None else basis,
                                                     borrowed=borrowed))

    def problems(self) -> list[str]:
        return check_log(self.mem.records).problems


def one(problems: list[str], text: str) -> str:
    found = [p for p in problems if text in p]
    assert len(found) == 1, (text, problems)
    return found[0]


# ---------------------------------------------------------------- a clean log passes


def test_a_clean_simulated_log_with_requeues_preemptions_timeouts_and_borrowing_passes():
    config = [
        c.AccountConfigured(account="org"),
        c.AccountConfigured(account="a", parent="org", quota=c.Quota(gpus=16, cpus_milli=200_000), borrowing=True),
        c.AccountConfigured(account="b", parent="org", quota=c.Quota(gpus=16, gpus_by_type={"a100": 16}),
                            borrowing=True),
        c.AccountConfigured(account="c", quota=c.Quota(running_jobs=3, memory_bytes=64 * GIB)),
    ]
    jobs = []
    for i in range(200):
        fails = i % 7 == 0
        jobs.append(SimJob(f"j{i:03d}", (i * 37) % 4000, 60 + (i * 53) % 900, 3600, gpus=(1, 2, 4, 8)[i % 4],
                           account="abc"[i % 3], user="uv"[i % 2],
                           priority_class=("normal", "low", "normal", "critical")[i % 4],
                           fail_attempts=1 if fails else 0, restart_policy="on-failure" if fails else "never",
                           max_retries=1, scheduling_timeout_s=300.0 if i % 5 == 0 else None))
    settings = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=8)
    bus = InProcessBus(make_cores(settings), keep_records=True)

    async def go() -> None:
        await bus.publish([(admin_subject("account"), ev) for ev in config])
        await simulate(jobs, local_nodes(4, gpus_per_node=8, prefix="n"), settings, bus)

    asyncio.run(go())
    result = check_log(bus.records)
    assert result.ok, result.problems[:5]
    kinds = {r.subject.split(".")[3] for r in bus.records}
    # the log is not trivially clean: it holds each thing the checker judges
    assert {"JobRequeued", "JobPreempted", "JobUnschedulable", "JobFailed"} <= kinds, kinds
    assert result.borrowed > 0 and result.scheduled > 200


# ---------------------------------------------------------------- capacity


def test_a_device_given_while_held_fails_and_given_again_after_the_end_passes():
    log = Log()
    log.node("n1", gpus=2)
    log.accept("a")
    log.accept("b")
    log.accept("c")
    log.schedule("a", ("gpu0",))
    assert log.problems() == []
    log.schedule("b", ("gpu0",))
    one(log.problems(), "n1/gpu0 given to b while a holds it")
    log.evt("agent", c.JobSucceeded(job_id="a", attempt=1))
    log.evt("agent", c.JobSucceeded(job_id="b", attempt=1))
    log.schedule("c", ("gpu0",))  # free again: no second problem
    assert len(log.problems()) == 1


def test_cpus_over_allocated_fail():
    log = Log()
    log.node("n1", gpus=0, cpus=8)
    log.accept("a", gpus=0, cpus_milli=6000)
    log.accept("b", gpus=0, cpus_milli=6000)
    log.schedule("a", cpus=6)
    log.schedule("b", cpus=6)
    one(log.problems(), "n1 CPUs over-allocated by b")


def test_memory_over_allocated_fails():
    log = Log()
    log.node("n1", gpus=0, memory=16 * GIB)
    log.accept("a", gpus=0, memory_bytes=10 * GIB)
    log.accept("b", gpus=0, memory_bytes=10 * GIB)
    log.schedule("a", memory=10 * GIB)
    log.schedule("b", memory=10 * GIB)
    one(log.problems(), "n1 memory over-allocated by b")


# ---------------------------------------------------------------- decisions


def test_an_attempt_scheduled_twice_fails():
    log = Log()
    log.node("n1")
    log.accept("a")
    log.schedule("a", ("gpu0",))
    log.schedule("a", ("gpu1",))
    one(log.problems(), "attempt 1 of a scheduled twice")


def test_a_decision_for_a_job_never_accepted_or_on_its_own_basis_fails():
    log = Log()
    log.node("n1")
    log.schedule("ghost", ("gpu0",))
    log.accept("a")
    seq = log.schedule("a", ("gpu1",), basis=log.seq + 1)
    problems = log.problems()
    one(problems, "ghost scheduled but never accepted")
    one(problems, f"a's JobScheduled states basis seq {seq}, not before it")


def test_a_decision_on_an_input_subject_is_skipped_as_the_services_skip_it():
    log = Log()
    log.node("n1", gpus=1)
    log.accept("a")
    log.accept("b")
    log.schedule("a", ("gpu0",))
    forged = c.JobScheduled(job_id="b", allocations=[c.NodeAllocation(node="n1", device_ids=["gpu0"])],
                            basis_seq=log.seq)
    log._append(input_subject("acme", "submit"), forged)
    assert log.problems() == []


# ---------------------------------------------------------------- a live node


@pytest.mark.parametrize(("change", "why"), [
    (c.NodeLost(node="n1"), "lost"),
    (c.NodeRemoved(node="n1"), "removed"),
    (c.NodeCordoned(node="n1"), "cordoned"),
    (c.NodeDraining(node="n1"), "draining"),
])
def test_placing_on_a_node_unfit_at_the_decisions_basis_fails(change: c.Event, why: str):
    log = Log()
    log.node("n1")
    log.accept("a")
    log.evt("inventory", change)
    log.schedule("a", ("gpu0",))  # basis: after the change
    one(log.problems(), f"a placed on n1, {why} at its basis (seq 4)")


def test_placing_on_a_node_not_ready_or_not_registered_at_the_basis_fails():
    log = Log()
    log.accept("a")
    log.accept("b")
    basis = log.seq
    log.evt("agent", node("n1"))
    log.schedule("a", ("gpu0",), basis=basis)  # registered after its basis
    log.schedule("b", ("gpu1",))  # registered, never ready
    problems = log.problems()
    one(problems, "a placed on n1, not registered at its basis (seq 2)")
    one(problems, "b placed on n1, not ready at its basis (seq 4)")


def test_a_node_lost_after_the_basis_is_a_race_the_failure_of_the_attempt_settles():
    log = Log()
    log.node("n1")
    log.accept("a")
    basis = log.seq
    lost = log.evt("inventory", c.NodeLost(node="n1", basis_seq=basis))
    log.schedule("a", ("gpu0",), basis=basis)  # decided before the loss, landed after it
    assert log.problems() == [f"a attempt 1 was placed on n1, lost after its basis (seq {basis}) and before "
                              f"seq {lost + 1}, and never ended"]
    log.evt("inventory", c.JobFailed(job_id="a", attempt=1, node="n1", reason="node n1 lost", node_lost=True,
                                     basis_seq=log.seq))
    assert log.problems() == []


def test_a_node_cordoned_after_the_basis_needs_no_ending():
    log = Log()
    log.node("n1")
    log.accept("a")
    basis = log.seq
    log.evt("inventory", c.NodeCordoned(node="n1", basis_seq=basis))
    log.schedule("a", ("gpu0",), basis=basis)
    assert log.problems() == []


# ---------------------------------------------------------------- endings


def _running(log: Log, job_id: str = "a") -> None:
    log.accept(job_id)
    log.schedule(job_id, ("gpu0",))
    log.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node="n1"))


def test_two_identical_endings_of_one_attempt_fail():
    log = Log()
    log.node("n1")
    _running(log)
    first = log.evt("agent", c.JobSucceeded(job_id="a", attempt=1))
    log.evt("agent", c.JobSucceeded(job_id="a", attempt=1, id="again"))
    assert log.problems() == [f"seq {first + 1}: a attempt 1 ended twice (JobSucceeded at seq {first}, "
                              f"then JobSucceeded)"]


def test_two_endings_of_different_kinds_of_one_attempt_fail():
    log = Log()
    log.node("n1")
    _running(log)
    failed = log.evt("agent", c.JobFailed(job_id="a", attempt=1, exit_code=1))
    log.evt("agent", c.JobCancelled(job_id="a", attempt=1))  # an agent's stop report after the job had ended
    log.evt("agent", c.JobPreempted(job_id="a", attempt=1))
    problems = log.problems()
    assert len(problems) == 2, problems
    one(problems, f"a attempt 1 ended twice (JobFailed at seq {failed}, then JobCancelled)")
    one(problems, f"a attempt 1 ended twice (JobFailed at seq {failed}, then JobPreempted)")


def test_two_endings_of_one_wait_fail():
    log = Log()
    log.accept("a")
    log.accept("b")
    log.evt("scheduling", c.JobUnschedulable(job_id="a", reason="timeout", basis_seq=log.seq))
    log.evt("submission", c.JobCancelled(job_id="a", attempt=0, basis_seq=2))
    log.evt("submission", c.JobCancelled(job_id="b", attempt=0, basis_seq=log.seq))
    log.evt("scheduling", c.JobDependencyNeverSatisfied(
        job_id="b", dependency=c.Dependency(kind="after-ok", job_id="x"), reason="x failed", basis_seq=log.seq))
    problems = log.problems()
    assert len(problems) == 2, problems
    one(problems, "a ended twice (JobUnschedulable at seq 3, then JobCancelled)")
    one(problems, "b ended twice (JobCancelled at seq 5, then JobDependencyNeverSatisfied)")


def test_an_ending_for_a_job_never_accepted_or_an_attempt_never_scheduled_fails():
    log = Log()
    log.node("n1")
    log.evt("agent", c.JobSucceeded(job_id="ghost", attempt=1))
    log.evt("submission", c.JobRejected(job_id="bad", tenant="acme", reason="no"))
    log.evt("submission", c.JobCancelled(job_id="bad"))
    _running(log)
    log.evt("agent", c.JobFailed(job_id="a", attempt=2, exit_code=1))
    log.accept("w")
    log.evt("submission", c.JobCancelled(job_id="w", attempt=0, basis_seq=log.seq))
    log.evt("submission", c.JobCancelled(job_id="w", attempt=3, basis_seq=log.seq))
    problems = log.problems()
    assert len(problems) == 4, problems
    one(problems, "JobSucceeded for ghost, which was never accepted")
    one(problems, "JobCancelled for bad, which was never accepted")
    one(problems, "JobFailed for attempt 2 of a, which was never scheduled")
    one(problems, "JobCancelled for w after attempt 3, which was never scheduled")


def test_a_requeued_job_cancelled_while_it_waits_and_a_cancel_that_lost_the_race_pass():
    log = Log()
    log.node("n1")
    _running(log, "a")
    log.evt("agent", c.JobFailed(job_id="a", attempt=1, exit_code=1))
    log.evt("scheduling", c.JobRequeued(job_id="a", attempt=1, basis_seq=log.seq))
    log.evt("submission", c.JobCancelled(job_id="a", attempt=1, basis_seq=log.seq))  # ends the wait after 1
    # b: a cancel decided while b waited lands after b's JobScheduled; the agent stops the attempt
    log.accept("b")
    basis = log.seq
    log.schedule("b", ("gpu1",))
    log.evt("submission", c.JobCancelled(job_id="b", attempt=0, basis_seq=basis))
    log.evt("agent", c.JobCancelled(job_id="b", attempt=1))
    # c: the timeout decided while c waited lands after c started, and c then succeeds
    log.accept("c")
    basis = log.seq
    log.schedule("c", ("gpu2",))
    log.evt("scheduling", c.JobUnschedulable(job_id="c", reason="timeout", basis_seq=basis))
    log.evt("agent", c.JobSucceeded(job_id="c", attempt=1))
    result = check_log(log.mem.records)
    assert result.problems == []
    assert {j: result.jobs.get(j).state.value for j in "abc"} == {  # type: ignore[union-attr]
        "a": "CANCELLED", "b": "CANCELLED", "c": "SUCCEEDED"}


# ---------------------------------------------------------------- quotas


@pytest.mark.parametrize(("quota", "job", "problem"), [
    (c.Quota(gpus=4), {"gpus": 3}, "account a holds 6 gpus without borrowing, quota 4"),
    (c.Quota(cpus_milli=4000), {"gpus": 0, "cpus_milli": 3000}, "account a holds 6000 cpus_milli without "
                                                                 "borrowing, quota 4000"),
    (c.Quota(memory_bytes=8 * GIB), {"gpus": 0, "memory_bytes": 5 * GIB},
     f"account a holds {10 * GIB} memory_bytes without borrowing, quota {8 * GIB}"),
    (c.Quota(gpus_by_type={"a100": 2}), {"gpus": 2, "gpu_type": "a100"},
     "account a holds 4 a100 GPUs without borrowing, quota 2"),
    (c.Quota(running_jobs=1), {"gpus": 0}, "account a runs 2 jobs, quota 1"),
])
def test_each_quota_exceeded_fails(quota: c.Quota, job: dict[str, Any], problem: str):
    log = Log()
    log.node("n1")
    log.admin("account", c.AccountConfigured(account="a", quota=quota))
    for i, job_id in enumerate(("a1", "a2")):
        log.accept(job_id, account="a", user="u", **job)
        devices = tuple(f"gpu{i * 4 + g}" for g in range(job.get("gpus", 1)))
        seq = log.schedule(job_id, devices, cpus=job.get("cpus_milli", 1000) // 1000,
                           memory=job.get("memory_bytes", GIB))
    assert log.problems() == [f"seq {seq}: {problem} (a2)"]


def _cohort(log: Log, *, borrowing: bool = True) -> None:
    log.node("n1", gpus=16)
    log.admin("account", c.AccountConfigured(account="org"))
    log.admin("account", c.AccountConfigured(account="a", parent="org", quota=c.Quota(gpus=4), borrowing=borrowing))
    log.admin("account", c.AccountConfigured(account="b", parent="org", quota=c.Quota(gpus=4)))


def _gpus(first: int, n: int = 4) -> tuple[str, ...]:
    return tuple(f"gpu{g}" for g in range(first, first + n))


def test_borrowing_within_the_cohort_passes_beyond_its_quotas_together_fails():
    log = Log()
    _cohort(log)
    for job_id in ("a1", "a2", "a3"):
        log.accept(job_id, gpus=4, account="a", user="u")
    log.schedule("a1", _gpus(0))
    log.schedule("a2", _gpus(4), borrowed=True)  # a 8 + b 0 <= 4 + 4
    assert log.problems() == []
    seq = log.schedule("a3", _gpus(8), borrowed=True)  # a 12 + b 0 > 4 + 4
    assert log.problems() == [f"seq {seq}: cohort of a (a, b) holds 12 gpus, over the 8 of their quotas "
                              f"together, as a3 borrows"]


def test_a_lender_taking_its_quota_back_may_take_the_cohort_over_until_reclaim():
    log = Log()
    _cohort(log)
    log.accept("a1", gpus=4, account="a", user="u")
    log.accept("a2", gpus=4, account="a", user="u")
    log.accept("b1", gpus=4, account="b", user="u")
    log.schedule("a1", _gpus(0))
    log.schedule("a2", _gpus(4), borrowed=True)
    log.schedule("b1", _gpus(8))  # b within its own 4: the cohort holds 12 of 8 until a2 is reclaimed
    assert log.problems() == []


def test_borrowed_jobs_count_against_an_account_that_may_not_borrow():
    log = Log()
    _cohort(log, borrowing=False)
    log.accept("a1", gpus=4, account="a", user="u")
    log.accept("a2", gpus=4, account="a", user="u")
    log.schedule("a1", _gpus(0))
    seq = log.schedule("a2", _gpus(4), borrowed=True)
    assert log.problems() == [f"seq {seq}: account a holds 8 gpus without borrowing, quota 4 (a2)"]


def test_an_account_that_borrows_still_holds_its_own_jobs_within_its_quota():
    log = Log()
    _cohort(log)
    log.accept("a1", gpus=4, account="a", user="u")
    log.accept("a2", gpus=4, account="a", user="u")
    log.schedule("a1", _gpus(0))
    seq = log.schedule("a2", _gpus(4))  # over its quota, and not admitted by borrowing
    assert log.problems() == [f"seq {seq}: account a holds 8 gpus without borrowing, quota 4 (a2)"]
