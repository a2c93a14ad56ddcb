"""Fair share: the decay maths by hand, Fair Tree by hand, and fairness through the simulator."""

from __future__ import annotations

import asyncio
import math

import pytest

from events import catalogue as c
from events.subjects import admin_subject
from services.nodes.spec import local_nodes
from services.domain.fairshare import FairShare
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob

H = 3600.0  # a one-hour half-life keeps the hand arithmetic short


def spec(account: str, user: str, gpus: int = 8) -> c.JobSpec:
    return c.JobSpec(tenant="t", account=account, user=user, gpus=gpus, cpus_milli=1000)


def test_decay_worked_by_hand():
    fs = FairShare(half_life_s=H, cpu_weight=0.0)
    leaf = fs.leaf_for(spec("a", "u"), 0.0).name
    assert leaf == "a/u"
    rate = fs.rate_of(spec("a", "u", gpus=8))
    assert rate == 8.0  # 8 GPUs x weight 1 (CPU weight 0 here)
    fs.start(leaf, rate, 0.0)
    # lambda = ln2/H. Running at R for one half-life from 0: U = R(1 - e^(-ln2))/lambda = 8 * 1/2 * H/ln2
    expected = 8 * 0.5 * H / math.log(2)
    assert expected == pytest.approx(20774.81, abs=0.01)  # 4 * 3600 / 0.693147 GPU-seconds
    assert fs.usage_at(fs.accounts[leaf], H) == pytest.approx(expected, rel=1e-12)
    fs.stop(leaf, rate, H)
    assert fs.accounts[leaf].usage == pytest.approx(expected, rel=1e-12)
    # idle for another half-life: half of it is gone; the account above holds the same
    assert fs.usage_at(fs.accounts[leaf], 2 * H) == pytest.approx(expected / 2, rel=1e-12)
    assert fs.usage_at(fs.accounts["a"], 2 * H) == pytest.approx(expected / 2, rel=1e-12)
    # and the limit of a job that never stops is R/lambda = 8 * H / ln2 (twice the one-half-life figure)
    fs.start(leaf, rate, 2 * H)
    assert fs.usage_at(fs.accounts[leaf], 100 * H) == pytest.approx(8 * H / math.log(2), rel=1e-9)


def test_usage_read_at_any_time_equals_usage_advanced_in_steps():
    """Reading does not change the ledger: replay (advanced only at rate changes) agrees with reads."""
    fs = FairShare(half_life_s=H)
    leaf = fs.leaf_for(spec("a", "u"), 0.0).name
    fs.start(leaf, 4.0, 0.0)
    before = fs.usage_at(fs.accounts[leaf], 5000.0)
    assert fs.accounts[leaf].usage == 0.0 and fs.accounts[leaf].usage_ts == 0.0
    assert fs.usage_at(fs.accounts[leaf], 5000.0) == before


def test_fair_tree_by_hand():
    """A (2 shares) and B (1 share) have used 100 each: LF_A = (2/3)/(1/2) = 4/3, LF_B = (1/3)/(1/2) = 2/3,
    so every user of A ranks above every user of B, whatever their own standing in A."""
    fs = FairShare(half_life_s=1e12)  # no decay within the test
    fs.configure_account(c.AccountConfigured(account="A", shares=2), 0.0)
    fs.configure_account(c.AccountConfigured(account="B", shares=1), 0.0)
    for account, user, used in (("A", "x", 90.0), ("A", "y", 10.0), ("B", "z", 100.0)):
        leaf = fs.leaf_for(spec(account, user), 0.0)
        leaf.usage = used
        for acc in fs.path(leaf.name)[1:]:
            acc.usage += used
    lf = fs.level_fairshare(0.0)
    assert lf["A"] == pytest.approx(4 / 3) and lf["B"] == pytest.approx(2 / 3)
    # inside A: x and y have one share each; x used 90% -> LF 0.5/0.9, y -> 0.5/0.1
    assert lf["A/x"] == pytest.approx(0.5 / 0.9) and lf["A/y"] == pytest.approx(5.0)
    # depth-first: A/y, A/x, then B/z; three leaves -> 3/3, 2/3, 1/3
    assert fs.factors(0.0) == {"A/y": 1.0, "A/x": pytest.approx(2 / 3), "B/z": pytest.approx(1 / 3)}
    # a newcomer of B with no usage is first in B but still after all of A
    fs.leaf_for(spec("B", "new"), 0.0)
    f = fs.factors(0.0)
    assert f["A/y"] > f["A/x"] > f["B/new"] > f["B/z"]


def test_account_configuration_is_checked():
    fs = FairShare()
    assert "positive" in fs.check_account(c.AccountConfigured(account="a", shares=0))
    assert "configure it first" in fs.check_account(c.AccountConfigured(account="a", parent="nope"))
    fs.configure_account(c.AccountConfigured(account="org"), 0.0)
    fs.configure_account(c.AccountConfigured(account="proj", parent="org"), 0.0)
    assert "tree" in fs.check_account(c.AccountConfigured(account="org", parent="proj"))
    assert fs.check_account(c.AccountConfigured(account="proj", parent=None)) is None


GIB = 1 << 30


def test_billing_rates_weighted_and_dominant_by_hand():
    """A gang of 2 nodes x 4 tasks, each task 1 GPU, 8 cores, 32 GiB: 8 GPUs, 64 cores, 256 GiB.

    weighted, defaults (w_gpu 1, w_cpu 1/16, w_mem 0):    8 + 64/16 + 0        = 12 per second
    weighted, w_mem 1/64 per GiB:                          8 + 4 + 256/64       = 16
    dominant (MAX_TRES), w_mem 1/64:                       max(8, 4, 4)         =  8  (GPUs dominate)
    dominant, w_mem 1/16:                                  max(8, 4, 16)        = 16  (memory dominates)
    a CPU-only job of 128 cores, 64 GiB, weighted default: 128/16               =  8
    the same, dominant with w_mem 1/4:                     max(0, 8, 16)        = 16
    """
    gang = c.JobSpec(tenant="t", gpus=1, cpus_milli=8000, memory_bytes=32 * GIB, nodes=2, tasks_per_node=4)
    cpu_only = c.JobSpec(tenant="t", cpus_milli=128_000, memory_bytes=64 * GIB)
    assert FairShare().rate_of(gang) == 12.0
    assert FairShare(memory_weight=1 / 64).rate_of(gang) == 16.0
    assert FairShare(memory_weight=1 / 64, dominant_share=True).rate_of(gang) == 8.0
    assert FairShare(memory_weight=1 / 16, dominant_share=True).rate_of(gang) == 16.0
    assert FairShare().rate_of(cpu_only) == 8.0
    assert FairShare(memory_weight=0.25, dominant_share=True).rate_of(cpu_only) == 16.0
    assert FairShare(dominant_share=True).rate_of(cpu_only) == 8.0  # memory weight 0: the cores dominate


def test_fairshare_configured_sets_the_billing_and_usage_follows_it():
    """``FairShareConfigured`` (gpu 1, cpu 1/8, mem 1/32 per GiB, dominant) through the scheduler:
    the CPU-only job of 128 cores and 64 GiB bills max(0, 16, 2) = 16 per second; the gang
    (8 GPUs, 64 cores, 256 GiB) max(8, 8, 8) = 8. Over one half-life (1 h) from no usage an
    account charged at R holds R * (1 - 1/2) * H / ln 2: 16 -> 41,549.62, 8 -> 20,774.81."""
    from services.scheduling.core import SchedulingCore
    from tests.helpers import Feed, accepted

    f = Feed(SchedulingCore())
    f.admin("fairshare", c.FairShareConfigured(half_life_s=H, gpu_weight=1.0, cpu_weight=0.125,
                                               memory_weight=1 / 32, dominant_share=True))
    f.evt("submission", accepted("cpu", gpus=0, cpus_milli=128_000, memory_bytes=64 * GIB, account="c", user="u"))
    f.evt("submission", accepted("gang", gpus=1, cpus_milli=8000, memory_bytes=32 * GIB, nodes=2, tasks_per_node=4,
                                 account="g", user="u"))
    f.settle()
    start = f.time
    for job_id in ("cpu", "gang"):
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(node="n1")]), dt=0)
    assert (f.state.charges["cpu"].rate, f.state.charges["gang"].rate) == (16.0, 8.0)
    fs = f.state.fairshare
    half = 0.5 * H / math.log(2)
    assert fs.usage_at(fs.accounts["c"], start + H) == pytest.approx(16 * half, rel=1e-12)
    assert 16 * half == pytest.approx(41_549.62, abs=0.01)
    assert fs.usage_at(fs.accounts["g/u"], start + H) == pytest.approx(8 * half, rel=1e-12)
    assert 8 * half == pytest.approx(20_774.81, abs=0.01)


def test_three_level_fair_tree_by_hand():
    """org -> project -> user. orgA (1 share) holds projA1 (3) with users u1, u2 and projA2 (1) with
    u3; orgB (1) holds projB1 (1) with u4. Each user ran a 1-GPU job: u1 30 s, u2 10 s, u3 40 s,
    u4 20 s, one after another (decay negligible), so usage is A1 40, A2 40, orgA 80, B1 = orgB 20.

        level 1  orgA: S 1/2, U 80/100 -> LF 0.625     orgB: S 1/2, U 20/100 -> LF 2.5
        level 2  projA1: S 3/4, U 40/80 -> LF 1.5       projA2: S 1/4, U 1/2 -> LF 0.5
                 projB1: S 1, U 1 -> LF 1
        level 3  u1: S 1/2, U 30/40 -> LF 2/3   u2: S 1/2, U 10/40 -> LF 2   u3, u4: LF 1 (alone)

    Depth first, siblings by descending LF: orgB/projB1/u4, orgA/projA1/u2, orgA/projA1/u1,
    orgA/projA2/u3 -> factors 4/4, 3/4, 2/4, 1/4. u4 used more than u2 yet ranks first (its
    organisation is under-served); u3 is alone in its project yet last (its project is over-served
    within an over-served organisation).
    """
    fs = FairShare(half_life_s=1e9)  # decay within 100 s: a relative 7e-8, nothing to the ranks
    for account, parent, shares in (("orgA", None, 1), ("orgB", None, 1), ("projA1", "orgA", 3),
                                    ("projA2", "orgA", 1), ("projB1", "orgB", 1)):
        assert fs.check_account(c.AccountConfigured(account=account, parent=parent, shares=shares)) is None
        fs.configure_account(c.AccountConfigured(account=account, parent=parent, shares=shares), 0.0)
    t = 0.0
    for account, user, seconds in (("projA1", "u1", 30.0), ("projA1", "u2", 10.0), ("projA2", "u3", 40.0),
                                   ("projB1", "u4", 20.0)):  # one after another: 0-30, 30-40, 40-80, 80-100
        job = c.JobSpec(tenant="t", account=account, user=user, gpus=1, cpus_milli=0)
        leaf = fs.leaf_for(job, t).name
        assert fs.rate_of(job) == 1.0  # 1 GPU; no cores
        fs.start(leaf, 1.0, t)
        t += seconds
        fs.stop(leaf, 1.0, t)
    usage = {name: fs.usage_at(fs.accounts[name], 100.0) for name in ("orgA", "orgB", "projA1", "projA2")}
    assert usage == pytest.approx({"orgA": 80.0, "orgB": 20.0, "projA1": 40.0, "projA2": 40.0}, rel=1e-6)
    assert [a.name for a in fs.path("projA1/u1")] == ["projA1/u1", "projA1", "orgA"]
    lf = fs.level_fairshare(100.0)
    assert lf["orgA"] == pytest.approx(0.625) and lf["orgB"] == pytest.approx(2.5)
    assert lf["projA1"] == pytest.approx(1.5) and lf["projA2"] == pytest.approx(0.5)
    assert lf["projB1"] == pytest.approx(1.0)
    assert lf["projA1/u1"] == pytest.approx(2 / 3) and lf["projA1/u2"] == pytest.approx(2.0)
    assert lf["projA2/u3"] == pytest.approx(1.0) and lf["projB1/u4"] == pytest.approx(1.0)
    assert fs.factors(100.0) == {"projB1/u4": 1.0, "projA1/u2": 0.75, "projA1/u1": 0.5, "projA2/u3": 0.25}
    # sshare's view: depth first, siblings by LF
    rows = [(r["account"], r["user"], r["depth"]) for r in fs.report(100.0)]
    assert rows == [("orgB", "", 0), ("projB1", "", 1), ("projB1", "u4", 2),
                    ("orgA", "", 0), ("projA1", "", 1), ("projA1", "u2", 2), ("projA1", "u1", 2),
                    ("projA2", "", 1), ("projA2", "u3", 2)]


# ---------------------------------------------------------------------------------------------
# Through the simulator (the real cores at virtual time)

HOUR = 3600.0


def _jobs(account: str, user: str, count: int, at: float, gpus: int = 4, hours: float = 1.0) -> list[SimJob]:
    return [SimJob(f"{account}-{user}-{i:04d}", at, hours * HOUR, hours * HOUR, gpus=gpus, account=account, user=user)
            for i in range(count)]


def _run(jobs: list[SimJob], config: list[tuple[str, c.Event]]) -> dict:
    settings = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=8)
    nodes = local_nodes(8, gpus_per_node=8, prefix="n")  # 64 GPUs
    bus = InProcessBus(make_cores(settings))

    async def go():
        await bus.publish([(admin_subject(verb), ev) for verb, ev in config])
        return await simulate(jobs, nodes, settings, bus)

    return asyncio.run(go()).results


def _gpu_seconds(results, who, start: float, end: float) -> dict[str, float]:
    """GPU-seconds each key delivered within [start, end)."""
    out: dict[str, float] = {}
    for r in results.values():
        if r.start_s is None:
            continue
        a, b = max(start, r.start_s), min(end, r.end_s)
        if b > a:
            out[who(r.job)] = out.get(who(r.job), 0.0) + (b - a) * r.job.gpus
    return out


def _decayed_usage(results, who, at: float, half_life: float) -> dict[str, float]:
    """The test's own oracle of decayed usage: sum of gpus * integral of 2^(-(at-t)/H) over the run."""
    lam = math.log(2) / half_life
    out: dict[str, float] = {}
    for r in results.values():
        if r.start_s is None or r.start_s >= at:
            continue
        end = min(at, r.end_s)
        value = r.job.gpus * (math.exp(-lam * (at - end)) - math.exp(-lam * (at - r.start_s))) / lam
        out[who(r.job)] = out.get(who(r.job), 0.0) + value
    return out


def _account(job: SimJob) -> str:
    return job.account


def test_shares_2_to_1_deliver_2_to_1_and_a_late_account_reaches_its_share_within_a_half_life():
    half_life = 6 * HOUR
    config = [
        ("fairshare", c.FairShareConfigured(half_life_s=half_life, gpu_weight=1.0, cpu_weight=0.0)),
        ("account", c.AccountConfigured(account="A", shares=2)),
        ("account", c.AccountConfigured(account="B", shares=1)),
        ("account", c.AccountConfigured(account="C", shares=1)),
    ]
    # A and B each have far more work than the 64 GPUs can do in a day; C arrives after the day
    jobs = _jobs("A", "a", 800, 0.0) + _jobs("B", "b", 800, 0.0) + _jobs("C", "c", 400, 24 * HOUR)
    results = _run(jobs, config)
    day = _gpu_seconds(results, _account, 0.0, 24 * HOUR)
    assert sum(day.values()) == pytest.approx(64 * 24 * HOUR, rel=0.01)  # saturated
    assert day["A"] / day["B"] == pytest.approx(2.0, rel=0.05)
    # C's shares are 1 of 4: within one half-life of its arrival its decayed usage reaches a quarter
    later = _decayed_usage(results, _account, 24 * HOUR + half_life, half_life)
    assert later["C"] / sum(later.values()) >= 0.25 * 0.95
    # and A keeps twice B meanwhile
    assert later["A"] / later["B"] == pytest.approx(2.0, rel=0.1)


def test_a_user_with_a_huge_history_yields_to_a_new_user_and_recovers_as_it_decays():
    half_life = 6 * HOUR
    config = [
        ("fairshare", c.FairShareConfigured(half_life_s=half_life, gpu_weight=1.0, cpu_weight=0.0)),
        ("account", c.AccountConfigured(account="lab", shares=1)),
    ]
    # "old" has the cluster to itself for a day, then "new" (same account) arrives with as much work
    jobs = _jobs("lab", "old", 1000, 0.0) + _jobs("lab", "new", 600, 24 * HOUR)
    results = _run(jobs, config)

    def user(job: SimJob) -> str:
        return job.user

    first = _gpu_seconds(results, user, 25 * HOUR, 28 * HOUR)
    assert first.get("new", 0.0) / sum(first.values()) > 0.9  # the newcomer takes every freed GPU
    late = _gpu_seconds(results, user, 40 * HOUR, 48 * HOUR)
    assert 0.4 <= late.get("old", 0.0) / sum(late.values()) <= 0.6  # old's history has decayed: even again


def test_the_usage_history_samples_every_hour_of_log_time():
    from projections.scheduling import SchedulerView
    from services.domain.protocol import Record
    from events.codec import encode
    from events.subjects import event_subject

    view = SchedulerView(log_=None, nc=None)  # type: ignore[arg-type]
    fs_events = [
        (admin_subject("fairshare"), c.FairShareConfigured(half_life_s=H, cpu_weight=0.0)),
        (admin_subject("account"), c.AccountConfigured(account="a")),
    ]
    records = [Record(i + 1, s, encode(e), 100.0) for i, (s, e) in enumerate(fs_events)]
    accepted = c.JobAccepted(job_id="j", spec=spec("a", "u"), correlation_id="j", source="submission")
    scheduled = c.JobScheduled(job_id="j", attempt=1, allocations=[c.NodeAllocation(node="n")], correlation_id="j",
                               source="placement")
    records += [Record(3, event_subject("submission", accepted), encode(accepted), 100.0),
                Record(4, event_subject("placement", scheduled), encode(scheduled), 3600.0),
                Record(5, "horizon.evt.clock.ClockTicked.x", encode(c.ClockTicked(now_ts=0.0)), 3 * 3600.0 + 1)]
    asyncio.run(view.apply(records))
    samples = [(h["ts"], round(h["usage"], 3)) for h in view.history if h["account"] == "a"]
    # the job runs 8 GPUs from 3600 s: at 7200 s, one half-life of running: 8 * H/2/ln2 = 20774.81
    assert samples == [(3600.0, 0.0), (7200.0, round(8 * 0.5 * H / math.log(2), 3)),
                       (10800.0, round(8 * 0.75 * H / math.log(2), 3))]
