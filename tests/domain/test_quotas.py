"""Quotas and borrowing: the admission check by hand, and the whole log of a simulated contention."""

from __future__ import annotations

import asyncio

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from services.domain.protocol import Record
from services.scheduling.core import SchedulingCore
from services.domain.fairshare import FairShare
from services.domain.quotas import BLOCKED, BORROW, OK, Amount, Quotas, amount_of
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from tests.helpers import Feed, accepted, node

HOUR = 3600.0


def _tree(borrowing: bool = True) -> tuple[FairShare, Quotas]:
    fs = FairShare()
    fs.configure_account(c.AccountConfigured(account="org"), 0.0)
    fs.configure_account(c.AccountConfigured(account="a", parent="org", quota=c.Quota(gpus=8, running_jobs=3),
                                             borrowing=borrowing), 0.0)
    fs.configure_account(c.AccountConfigured(account="b", parent="org", quota=c.Quota(gpus=8)), 0.0)
    return fs, Quotas()


def _spec(account: str, gpus: int) -> c.JobSpec:
    return c.JobSpec(tenant="t", account=account, user="u", gpus=gpus)


def test_admission_by_hand():
    fs, q = _tree()
    leaf_a = fs.leaf_for(_spec("a", 1), 0.0).name
    leaf_b = fs.leaf_for(_spec("b", 1), 0.0).name
    q.charge(fs, leaf_a, amount_of(_spec("a", 6)), +1)  # a holds 6 of its 8
    assert q.admit(fs, leaf_a, amount_of(_spec("a", 2)), {}) == (OK, "")
    # 6 + 4 > 8: b is idle with 8 unused, so a may borrow 2
    assert q.admit(fs, leaf_a, amount_of(_spec("a", 4)), {})[0] == BORROW
    # 6 + 12 > 8 + 8: more than b can lend
    verdict, why = q.admit(fs, leaf_a, amount_of(_spec("a", 12)), {})
    assert verdict == BLOCKED and "lend only 8 GPUs, borrowing needs 10 GPUs" in why
    # b has a job waiting: it lends nothing
    q.wait(fs, leaf_b, +1)
    verdict, why = q.admit(fs, leaf_a, amount_of(_spec("a", 4)), {})
    assert verdict == BLOCKED and "account a quota: 6 GPUs in use + 4 GPUs > limit 8 GPUs" in why
    q.wait(fs, leaf_b, -1)
    # candidates earlier in the same cycle count: 2 admitted, then 1 more would exceed the 3 running jobs
    cycle: dict[str, Amount] = {}
    Quotas.add_cycle(fs, leaf_a, amount_of(_spec("a", 1)), cycle)
    Quotas.add_cycle(fs, leaf_a, amount_of(_spec("a", 1)), cycle)
    verdict, why = q.admit(fs, leaf_a, amount_of(_spec("a", 0)), cycle)
    assert verdict == BLOCKED and "running jobs" in why  # running_jobs is never borrowed


def test_without_borrowing_the_limit_is_hard():
    fs, q = _tree(borrowing=False)
    leaf_a = fs.leaf_for(_spec("a", 1), 0.0).name
    assert q.admit(fs, leaf_a, amount_of(_spec("a", 9)), {})[0] == BLOCKED


def test_scheduler_leaves_quota_blocked_jobs_out_and_marks_borrowers():
    f = Feed(SchedulingCore(policy="fcfs"))
    f.evt("agent", node("n1", gpus=8))
    f.admin("account", c.AccountConfigured(account="a", quota=c.Quota(gpus=4), borrowing=True))
    f.admin("account", c.AccountConfigured(account="b", quota=c.Quota(gpus=4)))
    f.admin("account", c.AccountConfigured(account="x", shares=-1))  # invalid: answered, not applied
    f.evt("submission", accepted("a1", gpus=4, account="a"))
    f.evt("submission", accepted("a2", gpus=4, account="a"))
    out = f.settle()
    [rejected] = [e for e in out if isinstance(e, c.ConfigRejected)]
    assert rejected.verb == "account" and "shares" in rejected.reason
    [cycle] = [e for e in out if isinstance(e, c.SchedulingCycleCompleted)]
    assert cycle.candidates == ["a1", "a2"] and cycle.borrowing == ["a2"]  # b is idle: a borrows its 4
    # now b has work waiting: a may not borrow any more
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, scheduled=0))
    f.evt("submission", accepted("b1", gpus=4, account="b"))
    [cycle2] = [e for e in f.settle() if isinstance(e, c.SchedulingCycleCompleted)]
    assert cycle2.candidates == ["a1", "b1"] and cycle2.borrowing == []


def test_quotas_hold_over_the_whole_log_and_borrowing_only_from_an_idle_lender():
    config = [
        ("account", c.AccountConfigured(account="org")),
        ("account", c.AccountConfigured(account="a", parent="org", quota=c.Quota(gpus=32), borrowing=True)),
        ("account", c.AccountConfigured(account="b", parent="org", quota=c.Quota(gpus=32))),
        ("account", c.AccountConfigured(account="c", quota=c.Quota(running_jobs=2))),
    ]
    jobs = [SimJob(f"a{i:03d}", 0.0, HOUR, HOUR, gpus=8, account="a", user="u") for i in range(60)]
    jobs += [SimJob(f"b{i:03d}", 5 * HOUR, HOUR, HOUR, gpus=8, account="b", user="u") for i in range(20)]
    jobs += [SimJob(f"c{i:03d}", 0.0, HOUR, HOUR, gpus=1, account="c", user="u") for i in range(10)]
    settings = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=8)
    bus = InProcessBus(make_cores(settings), keep_records=True)

    async def go():
        await bus.publish([(admin_subject(verb), ev) for verb, ev in config])
        return await simulate(jobs, local_nodes(8, gpus_per_node=8, prefix="n"), settings, bus)

    run = asyncio.run(go())
    assert not run.unstarted
    check = check_log(bus.records)
    assert check.ok, check.problems[:5]
    scheduled = [e for e in _events(bus.records) if isinstance(e, c.JobScheduled)]
    borrowed = [e for e in scheduled if e.borrowed]
    assert borrowed and check.borrowed == len(borrowed)
    assert all(e.job_id.startswith("a") for e in borrowed)
    # a borrowed only while b (the lender) had nothing waiting: b waits from 5 h until its jobs start
    b_waits = [(r.job.submit_s, r.start_s) for r in run.results.values() if r.job.account == "b"]
    for e in borrowed:
        t = run.results[e.job_id].start_s
        assert not any(sub <= t < start for sub, start in b_waits), (e.job_id, t)
    assert any(run.results[e.job_id].start_s < 5 * HOUR for e in borrowed)
    # while b was idle, a used the whole cluster (its 32 GPUs and b's 32) less c's single GPUs
    early = [r for r in run.results.values() if r.job.account == "a" and r.start_s == 0.0]
    assert len(early) == 7  # 7 x 8 GPUs: one node's GPUs go to c's 2 jobs (running_jobs quota 2)
    # c never ran more than 2 at once
    c_runs = sorted((r.start_s, r.end_s) for r in run.results.values() if r.job.account == "c")
    assert max(sum(1 for s, e in c_runs if s <= t < e) for t, _ in c_runs) == 2


def _events(records: list[Record]):
    from events.codec import decode

    return [decode(r.data) for r in records]


def test_check_log_flags_a_forged_over_quota_schedule():
    feed = Feed(SchedulingCore(policy="fcfs"))
    feed.evt("agent", node("n1", gpus=8))
    feed.admin("account", c.AccountConfigured(account="a", quota=c.Quota(gpus=4)))
    feed.evt("submission", accepted("a1", gpus=4, account="a"))
    feed.evt("submission", accepted("a2", gpus=4, account="a"))
    for job_id, devices in (("a1", ["gpu0", "gpu1", "gpu2", "gpu3"]), ("a2", ["gpu4", "gpu5", "gpu6", "gpu7"])):
        feed.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[
            c.NodeAllocation(node="n1", device_ids=devices, cpus_milli=1000, memory_bytes=1 << 30)]))
    problems = check_log(feed.records).problems
    assert any("account a holds 8 gpus without borrowing, quota 4" in p for p in problems), problems
    assert encode  # the records are the encoded events, as in the log


def _most_at_once(spans: list[tuple[float, float, int]]) -> int:
    """The most held at once, of (start, end, amount) spans."""
    return max(sum(n for s, e, n in spans if s <= t < e) for t, _, _ in spans)


def test_cpu_memory_and_gpu_type_quotas_hold_over_the_whole_log_with_borrowing():
    """In the simulator a job's task takes 1 CPU and 1 MiB: a's and b's CPU quotas of 4 are 4 jobs each,
    c's a100 quota of 6 GPUs binds before its 8 MiB of memory. a borrows b's CPUs while b is idle; when
    b's jobs come they start within b's own quota while a's borrowed ones still run (the cluster has
    room, so nothing is reclaimed): the cohort then holds 12 CPUs of its 8, which the checker allows."""
    config = [
        ("account", c.AccountConfigured(account="org")),
        ("account", c.AccountConfigured(account="a", parent="org", quota=c.Quota(cpus_milli=4000), borrowing=True)),
        ("account", c.AccountConfigured(account="b", parent="org", quota=c.Quota(cpus_milli=4000))),
        ("account", c.AccountConfigured(account="c", quota=c.Quota(memory_bytes=8 << 20, gpus_by_type={"a100": 6}))),
    ]
    jobs = [SimJob(f"a{i:02d}", 0.0, HOUR, HOUR, gpus=1, account="a", user="u") for i in range(24)]
    jobs += [SimJob(f"b{i:02d}", 1.5 * HOUR, HOUR, HOUR, gpus=1, account="b", user="u") for i in range(8)]
    jobs += [SimJob(f"c{i:02d}", 0.0, HOUR, HOUR, gpus=1 + i % 2, gpu_type="a100", account="c", user="u")
             for i in range(12)]
    settings = SimSettings(policy="fcfs", backfill="easy", gpus_per_node=8)
    bus = InProcessBus(make_cores(settings), keep_records=True)

    async def go():
        await bus.publish([(admin_subject(verb), ev) for verb, ev in config])
        return await simulate(jobs, local_nodes(4, gpus_per_node=8, prefix="n"), settings, bus)

    run = asyncio.run(go())
    assert not run.unstarted
    check = check_log(bus.records)
    assert check.ok, check.problems[:5]
    spans = {acc: [(r.start_s, r.end_s, r.job.gpus) for r in run.results.values() if r.job.account == acc]
             for acc in "abc"}
    assert _most_at_once([(s, e, 1) for s, e, _ in spans["a"]]) == 8  # its 4 CPUs and b's 4, borrowed
    assert _most_at_once([(s, e, 1) for s, e, _ in spans["b"]]) == 4
    assert _most_at_once(spans["c"]) == 6  # a100 GPUs
    assert check.borrowed >= 4
    cohort = [(s, e, 1) for acc in "ab" for s, e, _ in spans[acc]]
    assert _most_at_once(cohort) > 8  # the lender took its quota back while the borrowers ran on
