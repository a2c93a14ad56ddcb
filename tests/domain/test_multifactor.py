"""Multifactor priority, factor by factor, worked by hand; the sort key agrees with ``horizon show``.

Default weights: class 100,000, fairshare 10,000, age 1,000, estimate 4,000, size 500,
qos 2,000; max age 7 days (604,800 s); estimate reference 1 h.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import catalogue as c
from projections.scheduling import priority_report
from services.scheduling.core import SchedulingCore
from services.domain.policy import WEIGHT_NAMES, Context, Multifactor, PolicyConfig
from services.domain.jobs import Job, JobState
from tests.helpers import Feed, accepted, node

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scheduling-policy.md"
WEEK = 7 * 86_400.0
MF = Multifactor()


def job(job_id: str, seq: int = 1, accepted_ts: float = 0.0, **kw) -> Job:
    kw.setdefault("gpus", 1)
    return Job(job_id, c.JobSpec(tenant="t", **kw), JobState.PENDING, accepted_seq=seq, accepted_ts=accepted_ts)


def order(jobs: list[Job], ctx: Context) -> list[str]:
    return [j.job_id for j in sorted(jobs, key=lambda j: MF.key(j, ctx))]


# ---------------------------------------------------------------------------------------------
# The worked example of docs/scheduling-policy.md


def test_the_documented_worked_example_is_what_the_code_computes():
    """A normal job of a user with fair-share factor 0.5, waiting 12 h, a 1 h estimate, 4 GPUs,
    no QOS, nice 0:

        class     100,000 * 0.5                     = 50,000
        fairshare  10,000 * 0.5                     =  5,000
        age         1,000 * 43,200/604,800          =     71.428571...
        estimate    4,000 * 3,600/(3,600 + 3,600)   =  2,000
        size          500 * 1/(1 + log2 4)          =    166.666666...
        qos         2,000 * 0                       =      0
                                                      57,238.095238...  ->  57,238.1
    """
    j = job("ex", accepted_ts=0.0, account="proj", user="ana", gpus=4, time_limit_s=3600.0)
    ctx = Context(now=12 * 3600.0, config=PolicyConfig(), fairshare={"proj/ana": 0.5})
    f = MF.factors(j, ctx)
    assert f == {"class": 0.5, "fairshare": 0.5, "age": pytest.approx(43_200 / 604_800), "estimate": 0.5,
                 "size": pytest.approx(1 / 3), "qos": 0.0}
    by_hand = 50_000 + 5_000 + 1_000 * 43_200 / 604_800 + 2_000 + 500 / 3
    assert by_hand == pytest.approx(57_238.095238, abs=1e-6)
    p = MF.priority(j, ctx)
    assert p == pytest.approx(by_hand, rel=1e-15)
    assert f"{p:,.1f}" == "57,238.1"
    # the figure printed in the docs (and in the class docstring) is this one
    text = DOCS.read_text()
    example = text[text.index("Worked example with the defaults"):]
    assert re.search(r"= ([\d,]+\.\d)\n", example).group(1) == "57,238.1"
    assert "57238.1" in Multifactor.__doc__


# ---------------------------------------------------------------------------------------------
# Each factor changes the order


def test_nice_is_subtracted_as_is_and_changes_the_order():
    """a waited 3,600 s, b 3,000 s (now 3,600): the only difference is age,
    1,000 * 3,600/604,800 = 5.952 against 4.960, so a leads by 0.992; nice 1 on a costs it 1."""
    a, b = job("a", 1, 0.0), job("b", 2, 600.0)
    ctx = Context(now=3600.0)
    pa, pb = MF.priority(a, ctx), MF.priority(b, ctx)
    # 50,000 class + 10,000 fair share (no standings yet: 1) + 2,000 estimate + 500 size (1 GPU) + age
    assert pa == pytest.approx(62_500 + 1000 * 3600 / WEEK) and pa == pytest.approx(62_505.952, abs=1e-3)
    assert pb == pytest.approx(62_500 + 1000 * 3000 / WEEK) and pb == pytest.approx(62_504.960, abs=1e-3)
    assert order([a, b], ctx) == ["a", "b"]
    a1 = job("a", 1, 0.0, nice=1)
    assert MF.priority(a1, ctx) == pytest.approx(pa - 1)
    assert order([a1, b], ctx) == ["b", "a"]
    # a negative nice (operators only) lifts a job by as much: -30,000 bridges a class (25,000)
    low = job("low", 3, 600.0, priority_class="low", nice=-30_000)
    assert MF.priority(low, ctx) == pytest.approx(pb - 25_000 + 30_000)
    assert order([a, b, low], ctx) == ["low", "a", "b"]


def test_a_qos_boost_changes_the_order():
    """qos_boost express = 0.5 adds 2,000 * 0.5 = 1,000: the newer express job passes the older one;
    a QOS nobody configured adds nothing."""
    a, b = job("a", 1, 0.0), job("b", 2, 600.0, qos="express")
    plain = Context(now=3600.0)
    assert order([a, b], plain) == ["a", "b"]  # express not configured: factor 0
    assert MF.factors(b, plain)["qos"] == 0.0
    ctx = Context(now=3600.0, config=PolicyConfig(qos_boost={"express": 0.5}))
    assert MF.factors(b, ctx)["qos"] == 0.5
    assert MF.priority(b, ctx) - MF.priority(a, ctx) == pytest.approx(1_000 - 1000 * 600 / WEEK)  # 999.008
    assert order([a, b], ctx) == ["b", "a"]
    other = job("c", 3, 600.0, qos="bulk")
    assert MF.factors(other, ctx)["qos"] == 0.0


def test_an_account_boost_changes_the_order():
    """vip has a boost of 3,000; std's user is better served (factor 1 against 0.8: 10,000 * 0.2 =
    2,000 ahead), so without the boost std goes first, with it vip by 3,000 - 2,000 - age 0.992."""
    a = job("std-job", 1, 0.0, account="std", user="u")
    b = job("vip-job", 2, 600.0, account="vip", user="v")
    standings = {"std/u": 1.0, "vip/v": 0.8}
    ctx = Context(now=3600.0, fairshare=standings)
    assert MF.priority(a, ctx) - MF.priority(b, ctx) == pytest.approx(2_000 + 1000 * 600 / WEEK)
    assert order([a, b], ctx) == ["std-job", "vip-job"]
    boosted = Context(now=3600.0, fairshare=standings, boosts={"vip": 3_000.0})
    assert MF.priority(b, boosted) - MF.priority(a, boosted) == pytest.approx(1_000 - 1000 * 600 / WEEK)
    assert order([a, b], boosted) == ["vip-job", "std-job"]


def test_the_age_factor_is_capped_at_max_age():
    """age = min(1, wait / max_age_s): 14 days and 7 days of waiting are both worth 1,000;
    with max_age_s 1 h, 30 min is worth 500 and anything from 1 h on 1,000."""
    now = 20 * 86_400.0
    two_weeks, one_week, a_day = job("2w", 1, now - 2 * WEEK), job("1w", 2, now - WEEK), job("1d", 3, now - 86_400)
    ctx = Context(now=now)
    assert [MF.factors(j, ctx)["age"] for j in (two_weeks, one_week)] == [1.0, 1.0]
    assert MF.factors(a_day, ctx)["age"] == pytest.approx(1 / 7)
    assert MF.priority(two_weeks, ctx) == MF.priority(one_week, ctx) == 62_500 + 1_000
    assert order([one_week, two_weeks], ctx) == ["2w", "1w"]  # equal: acceptance order decides
    hour = Context(now=now, config=PolicyConfig(max_age_s=3600.0))
    half, full, long_ = job("h", 1, now - 1800), job("f", 2, now - 3600), job("l", 3, now - 10 * 3600)
    assert [MF.factors(j, hour)["age"] for j in (half, full, long_)] == [0.5, 1.0, 1.0]
    assert [MF.priority(j, hour) - 62_500 for j in (half, full, long_)] == [500.0, 1_000.0, 1_000.0]
    # a job accepted "after" now (a clock behind the acceptance) has age 0, never negative
    assert MF.factors(job("future", 4, now + 60), ctx)["age"] == 0.0


def test_boosts_nice_and_qos_through_the_scheduling_core():
    """The same three factors from the log: AccountConfigured.priority_boost, PolicyConfigured.qos_boost
    and the job's nice, as the scheduler orders its candidates."""
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    f.admin("account", c.AccountConfigured(account="vip", priority_boost=500.0))
    f.admin("policy", c.PolicyConfigured(qos_boost={"express": 0.25}))  # 2,000 * 0.25 = 500
    f.evt("submission", accepted("first"))
    f.evt("submission", accepted("niced", nice=10))
    f.evt("submission", accepted("vip", account="vip"))
    f.evt("submission", accepted("express", qos="express"))
    f.evt("submission", accepted("last"))
    [cycle] = f.settle()
    # vip +500 and express +500 lead (vip older); then first, last (age); niced -10 last of all
    assert cycle.candidates == ["vip", "express", "first", "last", "niced"]


# ---------------------------------------------------------------------------------------------
# The sort key and the explanation agree


classes = st.sampled_from(c.PRIORITY_CLASSES)
weights = st.fixed_dictionaries({name: st.floats(0, 1e6, allow_nan=False) for name in WEIGHT_NAMES})


@st.composite
def cases(draw):
    spec = c.JobSpec(
        tenant="t", account=draw(st.sampled_from(["a", "b", "vip"])), user=draw(st.sampled_from(["", "x", "y"])),
        priority_class=draw(classes), gpus=draw(st.integers(0, 8)), cpus_milli=draw(st.integers(1, 256_000)),
        nodes=draw(st.integers(1, 64)), tasks_per_node=draw(st.integers(1, 8)),
        time_limit_s=draw(st.floats(1, 30 * 86_400)), nice=draw(st.integers(-10_000, 10_000)),
        qos=draw(st.sampled_from(["", "express", "bulk"])))
    j = Job("j", spec, JobState.PENDING, accepted_seq=1, accepted_ts=draw(st.floats(0, 1e7)))
    cfg = PolicyConfig(weights=draw(weights), max_age_s=draw(st.floats(1, 1e7)),
                       estimate_ref_s=draw(st.floats(1, 1e5)),
                       qos_boost=draw(st.dictionaries(st.sampled_from(["", "express", "bulk"]), st.floats(0, 1))))
    fairshare = draw(st.dictionaries(st.sampled_from(["a/-", "a/x", "b/y", "vip/-", "vip/x"]), st.floats(0.01, 1)))
    boosts = draw(st.dictionaries(st.sampled_from(["a", "b", "vip"]), st.floats(-1e5, 1e5)))
    return j, Context(now=draw(st.floats(0, 2e7)), config=cfg, fairshare=fairshare, boosts=boosts)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_sort_key_is_the_sum_of_the_explained_factors_exactly(case):
    """``priority`` (the sort key) == sum over WEIGHT_NAMES of weight * factor, + boost - nice, to the bit:
    both read the one formula, and this is the sum ``horizon show`` prints."""
    j, ctx = case
    f = MF.factors(j, ctx)
    assert list(f) == list(WEIGHT_NAMES)
    assert all(0.0 <= v <= 1.0 for v in f.values())
    total = sum(f[name] * ctx.config.weights[name] for name in WEIGHT_NAMES)
    total += ctx.boosts.get(j.spec.account, 0.0)
    assert total - j.spec.nice == MF.priority(j, ctx)
    assert MF.key(j, ctx) == (-MF.priority(j, ctx), 1)


# ---------------------------------------------------------------------------------------------
# horizon show: priority_report


def test_horizon_show_rows_add_up_to_the_printed_priority():
    """One job through the core as ``horizon show`` reads it: its rows (value x weight), plus the
    account boost, minus nice, are the priority it prints and the scheduler sorts by.

    Job "ml-job" (account ml, boost 250; QOS express 0.5; nice 40; high; 2 GPUs; 30 min),
    accepted at t0 + 3 s and shown at t0 + 3 s + 3,600 s, the only user ever seen: fair share 1.

        class     100,000 * 0.75                    = 75,000
        fairshare  10,000 * 1                       = 10,000
        age         1,000 * 3,600/604,800           =      5.952381
        estimate    4,000 * 3,600/(3,600 + 1,800)   =  2,666.666667
        size          500 * 1/(1 + log2 2)          =    250
        qos         2,000 * 0.5                     =  1,000
        + boost 250 - nice 40                       = 89,132.619048
    """
    core = SchedulingCore()
    f = Feed(core)
    f.admin("account", c.AccountConfigured(account="ml", priority_boost=250.0))
    f.admin("policy", c.PolicyConfigured(qos_boost={"express": 0.5}))
    f.evt("submission", accepted("ml-job", account="ml", user="ana", qos="express", nice=40,
                                 priority_class="high", gpus=2, time_limit_s=1800.0))
    f.evt("submission", accepted("other", account="ml", user="ana"))
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=3599.0)  # t0 + 3 + 3,600
    report = priority_report(core, f.state, "ml-job")
    rows = {r["factor"]: r for r in report["factors"]}
    assert [r["factor"] for r in report["factors"]] == list(WEIGHT_NAMES)
    for r in report["factors"]:
        assert r["weighted"] == r["value"] * r["weight"]
    assert {name: r["weighted"] for name, r in rows.items()} == {
        "class": 75_000.0, "fairshare": 10_000.0, "age": pytest.approx(3600 / WEEK * 1000),
        "estimate": pytest.approx(4000 * 3600 / 5400), "size": 250.0, "qos": 1_000.0}
    assert (report["account_boost"], report["nice"]) == (250.0, 40)
    printed = sum(r["weighted"] for r in report["factors"]) + report["account_boost"] - report["nice"]
    assert printed == report["priority"]  # exactly: the same terms in the same order
    assert report["priority"] == pytest.approx(89_132.619048, abs=1e-6)
    assert report["position"] == 1 and report["queued"] == 2
    # every pending job in the listing adds up the same way
    listing = priority_report(core, f.state)
    assert [r["job_id"] for r in listing["jobs"]] == ["ml-job", "other"]
    assert math.isclose(listing["jobs"][0]["priority"], printed, rel_tol=0, abs_tol=0)
