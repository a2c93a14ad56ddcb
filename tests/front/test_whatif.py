"""``horizon whatif`` (issue 23): the pure parts directly, then a live run recorded and replayed.

The acceptance test records a live run (``horizon up --executor sim``: two nodes of two GPUs, tenants
``alpha`` and ``beta`` competing for them), then replays it: with no change, every recorded start is
reproduced (job by job: the same time within the tolerance, the same nodes); with the fair-share weight
set to 0, the tenant fair share favoured (beta, which had used nothing when the GPUs freed) waits longer
and alpha less.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject, input_subject
from services.domain.protocol import Record
from services.front.sim.driver import Attempt, JobResult, SimRun
from services.front.sim import whatif as w
from services.front.sim.whatif import measures
from services.front.sim.traces import TaskRun
from tests.front.test_cli_up import free_port

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
T0 = 1_790_000_000.0


# ---------------------------------------------------------------------- --set


def test_set_keys_become_operator_events_on_top_of_the_configuration_in_force():
    changes = w.parse_sets(["policy.weight.fairshare=20000", "fairshare.half_life=3d", "backfill=conservative",
                            "account.beta.shares=4", "account.beta.quota.gpus=64", "preemption.victims=cheapest",
                            "preemption.rules.high=low,normal", "policy.max_age=2d"])
    base = [c.FairShareConfigured(half_life_s=86400.0, gpu_weight=2.0, cpu_weight=0.5),
            c.AccountConfigured(account="beta", shares=1.0, parent="lab", tenants=["beta"])]
    events = {type(e).__name__: e for e in w.change_events(changes, base, backfill="easy")}
    assert events["PolicyConfigured"].weights == {"fairshare": 20000.0}
    assert events["PolicyConfigured"].max_age_s == 2 * 86400.0
    fs = events["FairShareConfigured"]  # replaces the whole configuration: the rest is kept from the log
    assert (fs.half_life_s, fs.gpu_weight, fs.cpu_weight) == (3 * 86400.0, 2.0, 0.5)
    assert events["ProfileConfigured"].name == "default" and events["ProfileConfigured"].backfill == "conservative"
    acc = events["AccountConfigured"]
    assert (acc.account, acc.shares, acc.parent, acc.tenants, acc.quota.gpus) == ("beta", 4.0, "lab", ["beta"], 64)
    assert events["PreemptionConfigured"].rules == {"high": ["low", "normal"]}
    # no FairShareConfigured in the log: the billing in force is 1/16 GPU per core, kept
    only = w.change_events(w.parse_sets(["fairshare.half_life=12h"]), [], backfill="easy")
    assert only[0].cpu_weight == pytest.approx(1 / 16) and only[0].half_life_s == 43200.0


@pytest.mark.parametrize("item, message", [
    ("policy.weight.fairness=1", "no weight 'fairness'"),
    ("policy.weight.fairshare=lots", "'lots' is not a number"),
    ("policy.weight.age=-1", "a weight is 0 or more"),
    ("fairshare.half_life=soon", "is not a duration"),
    ("fairshare.half_life=0", "the half-life is more than 0"),
    ("backfill=sometimes", "'sometimes' is not one of"),
    ("preemption.rules.high=urgent", "'urgent' is not a priority class"),
    ("account.beta.shares=0", "shares are more than 0"),
    ("account.beta.quota.memory=lots", "not an amount of memory"),
    ("quota.gpus=3", "unknown key"),
    ("policy.weight.fairshare", "use KEY=VALUE"),
])
def test_bad_set_keys_and_values_say_what_is_wrong(item, message):
    with pytest.raises(w.WhatIfError, match=message.replace("(", r"\(")):
        w.parse_sets([item])


def test_times_durations_and_node_classes():
    assert w.parse_duration("90") == 90 and w.parse_duration("15m") == 900 and w.parse_duration("1w") == 604800
    seqs = {5: T0 + 50}.get
    assert w.parse_when("5", T0 + 100, seqs) == T0 + 50
    assert w.parse_when("7d", T0 + 100, seqs) == T0 + 100 - 7 * 86400
    assert w.parse_when("2026-01-01T00:00:00Z", T0, seqs) == 1767225600.0
    with pytest.raises(w.WhatIfError, match="seq 9 is not in the log"):
        w.parse_when("9", T0, seqs)
    with pytest.raises(w.WhatIfError, match="neither a seq"):
        w.parse_when("yesterday", T0, seqs)
    assert w.parse_add_nodes("4x8a100") == (4, 8, "a100")
    assert w.parse_add_nodes("10x0") == (10, 0, None)
    with pytest.raises(w.WhatIfError, match="COUNTxGPUS"):
        w.parse_add_nodes("four")


def test_a_bad_set_is_a_one_line_cli_error_before_the_log_is_read():
    out = subprocess.run([*HORIZON, "whatif", "--nats", f"nats://127.0.0.1:{free_port()}", "--set", "policy.x=1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "--set policy.x: unknown key" in out.stderr


# ---------------------------------------------------------------------- the log -> a workload


class Log:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, subject: str, event: c.Event) -> None:
        self.records.append(Record(len(self.records) + 1, subject, encode(event), event.ts))

    def submit(self, job_id: str, t: float, tenant: str = "alpha", gpus: int = 1, limit: float = 600.0) -> None:
        self.add(input_subject(tenant, "submit"), c.JobSubmitted(
            id=job_id, ts=t, job_id=job_id, tenant=tenant, account=tenant, time_limit_s=limit,
            resources=c.ResourceRequest(cpus=1, memory="1Gi", gpus=gpus), sim_runtime_s=1.0))

    def run(self, job_id: str, start: float, end: float | None, how: str = "ok", attempt: int = 1,
            node: str = "n1") -> None:
        self.add(event_subject("scheduling", c.JobScheduled(job_id="x", attempt=1)), c.JobScheduled(
            id=f"s/{job_id}/{attempt}", ts=start, job_id=job_id, attempt=attempt,
            allocations=[c.NodeAllocation(node=node)]))
        self.add("horizon.evt.agent.JobStarted." + job_id, c.JobStarted(ts=start, job_id=job_id, attempt=attempt,
                                                                       node=node))
        if end is None:
            return
        if how == "ok":
            self.add("horizon.evt.agent.JobSucceeded." + job_id, c.JobSucceeded(ts=end, job_id=job_id, attempt=attempt))
        elif how == "failed":
            self.add("horizon.evt.agent.JobFailed." + job_id, c.JobFailed(ts=end, job_id=job_id, attempt=attempt,
                                                                         exit_code=1))
        elif how == "preempted":
            self.add("horizon.evt.agent.JobPreempted." + job_id, c.JobPreempted(
                ts=end, job_id=job_id, attempt=attempt, for_job="other"))
        elif how == "cancelled":
            self.add("horizon.evt.agent.JobCancelled." + job_id, c.JobCancelled(ts=end, job_id=job_id, attempt=attempt))


def test_the_log_becomes_a_workload_with_recorded_run_times_and_what_it_cannot_tell():
    log = Log()
    reg = c.NodeRegistered(ts=T0 - 100, node="n1", cpus_milli=8000, memory_bytes=2**34,
                           gpus=[c.GpuDevice(id=str(i), type="a100") for i in range(4)])
    log.add("horizon.evt.agent.NodeRegistered.n1", reg)
    log.add(admin_subject("fairshare"), c.FairShareConfigured(ts=T0 - 50, half_life_s=3600.0))
    log.submit("old-done", T0 - 500)
    log.run("old-done", T0 - 490, T0 - 400)  # over before the span: not replayed
    log.submit("old-running", T0 - 300)
    log.run("old-running", T0 - 290, T0 + 10)  # carried in: replayed, not measured
    log.submit("ok", T0 + 1)
    log.run("ok", T0 + 2, T0 + 32)  # ran 30 s
    log.submit("twice", T0 + 3)
    log.run("twice", T0 + 4, T0 + 9, how="preempted")
    log.run("twice", T0 + 20, T0 + 70, attempt=2)  # the completed attempt ran 50 s
    log.submit("retried", T0 + 4)
    log.run("retried", T0 + 4, T0 + 14, how="failed")
    log.run("retried", T0 + 30, T0 + 50, attempt=2)  # the retry that succeeded ran 20 s
    log.submit("never", T0 + 5, limit=900.0)  # never started: its time limit
    log.submit("stopped", T0 + 6)
    log.run("stopped", T0 + 7, None)
    log.add(input_subject("alpha", "cancel"), c.JobCancelRequested(ts=T0 + 40, job_id="stopped", tenant="alpha"))
    log.add("horizon.evt.agent.JobCancelled.stopped", c.JobCancelled(ts=T0 + 41, job_id="stopped", attempt=1))
    log.submit("late", T0 + 5000)  # after the span
    wl = w.workload_from_log(log.records, T0, T0 + 1000)
    runs = {j.job_id: j.runtime_s for j in wl.jobs}
    assert runs == {"old-running": 300.0, "ok": 30.0, "twice": 50.0, "retried": 20.0, "never": 900.0,
                    "stopped": 600.0}
    assert wl.measured == {"ok", "twice", "retried", "never", "stopped"}
    pinned = {j.job_id: j.recorded_run for j in wl.jobs if j.recorded_run is not None}
    assert pinned == {"old-running": (T0 - 290, T0 + 10, 1.0), "ok": (T0 + 2, T0 + 32, 1.0)}
    assert wl.recorded["old-running"].carried_in
    assert wl.recorded["ok"].start_s == T0 + 2 and wl.recorded["ok"].nodes == ["n1"]
    assert wl.capacity_gpus == 4
    assert wl.notes == {
        "cancelled while running: runs its time limit, the cancel replayed at its time": ["stopped"],
        "never started: runs its time limit if it starts": ["never"],
        "preempted: runs as long as its completed attempt": ["twice"],
    }
    subjects = [s for s, _ in wl.timed]
    assert subjects[:2] == ["horizon.evt.agent.NodeRegistered.n1", admin_subject("fairshare")]
    assert input_subject("alpha", "cancel") in subjects  # the user's cancel, replayed at its time
    assert [type(e).__name__ for e in wl.base_config] == ["FairShareConfigured"]
    # the submissions are the recorded events: tenant, account and resources as submitted
    ok = next(j for j in wl.jobs if j.job_id == "ok")
    assert ok.submitted.tenant == "alpha" and ok.subject == input_subject("alpha", "submit")
    # a warm-up replays the jobs of the hour before too (not measured): the span starts with their usage
    warm = w.workload_from_log(log.records, T0, T0 + 1000, warm_from_s=T0 - 3600)
    assert {j.job_id for j in warm.jobs} == set(runs) | {"old-done"} and warm.measured == wl.measured
    with pytest.raises(w.WhatIfError, match="the span is empty"):
        w.workload_from_log(log.records, T0, T0 - 1)


def test_rejected_jobs_are_not_workload_a_job_that_could_not_start_held_its_node_and_array_tasks_run_as_they_ran():
    log = Log()
    log.add("horizon.evt.agent.NodeRegistered.n1", c.NodeRegistered(ts=T0 - 100, node="n1", cpus_milli=2000,
                                                                     memory_bytes=2**34))
    log.submit("empty", T0 + 1)  # rejected (an empty command): never demand on the cluster
    log.add("horizon.evt.submission.JobRejected.empty", c.JobRejected(ts=T0 + 1, job_id="empty", tenant="alpha",
                                                                                   field="command", reason="is empty"))
    log.submit("missing", T0 + 2)  # placed, then failed before the agent started it (no JobStarted)
    log.add(event_subject("placement", c.JobScheduled(job_id="x", attempt=1)), c.JobScheduled(
        id="s/missing", ts=T0 + 2.01, job_id="missing", attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    log.add("horizon.evt.agent.JobFailed.missing", c.JobFailed(ts=T0 + 2.08, job_id="missing", attempt=1,
                                                               exit_code=127, reason="could not start"))
    log.add(input_subject("alpha", "submit"), c.JobSubmitted(
        id="arr", ts=T0 + 3, job_id="arr", tenant="alpha", account="alpha", array="0-1", time_limit_s=600.0,
        resources=c.ResourceRequest(cpus=1, memory="1Gi")))
    log.run("arr_0", T0 + 3, T0 + 5)
    log.run("arr_1", T0 + 3, T0 + 9, how="failed")
    log.submit("stopped", T0 + 4)
    log.run("stopped", T0 + 10, None)
    log.add(input_subject("alpha", "cancel"), c.JobCancelRequested(ts=T0 + 12, job_id="stopped", tenant="alpha"))
    log.add("horizon.evt.agent.JobCancelled.stopped", c.JobCancelled(ts=T0 + 12.1, job_id="stopped", attempt=1))
    wl = w.workload_from_log(log.records, T0, T0 + 100)
    assert {j.job_id for j in wl.jobs} == {"missing", "arr", "stopped"} and wl.rejected == ["empty"]
    assert wl.measured == {"missing", "arr_0", "arr_1", "stopped"} and wl.describe()["rejected"] == 1
    missing = next(j for j in wl.jobs if j.job_id == "missing")
    # it held its node from its placement to its failure (80 ms), not for its time limit, and fails again
    assert wl.recorded["missing"].start_s == T0 + 2.01
    assert missing.runtime_s == pytest.approx(0.07) and missing.exit_code == 1
    assert missing.recorded_run == (T0 + 2.01, T0 + 2.08, 1.0)
    arr = next(j for j in wl.jobs if j.job_id == "arr")
    assert arr.array == "0-1"  # the driver follows each task
    assert arr.tasks == {"arr_0": TaskRun(2.0, 0, (T0 + 3, T0 + 5, 1.0)),
                         "arr_1": TaskRun(6.0, 1, (T0 + 3, T0 + 9, 1.0))}
    stopped = next(j for j in wl.jobs if j.job_id == "stopped")
    # cancelled while it ran: its time limit, the cancel at its time, and the stop when the agent stopped it
    assert stopped.runtime_s == 600.0 and stopped.recorded_stop == (T0 + 10, T0 + 12.1, 1.0)
    assert wl.recorded["stopped"].cancel_s == T0 + 12


# ---------------------------------------------------------------------- the numbers


def _workload(jobs: dict[str, tuple[str, float, int]], gpus: int, span: float) -> w.Workload:
    recorded = {j: w.RecordedJob(j, tenant, tenant, "", "normal", submit, size, 1.0, 600.0)
                for j, (tenant, submit, size) in jobs.items()}
    return w.Workload([], [], recorded, set(jobs), 0.0, span, 1, 1, gpus, 8.0)


def _run(starts: dict[str, tuple[float, float, str]]) -> SimRun:
    from services.front.sim.traces import SimJob

    results = {}
    for j, (start, run, outcome) in starts.items():
        r = JobResult(SimJob(j, 0.0, run, 600.0))
        r.start_s = start
        r.attempts = [Attempt(1, start, start + run, ["n1"], outcome)]
        results[j] = r
    return SimRun(results, [], 0.0, 0, [])


def test_metrics_arithmetic():
    # 4 GPUs for 100 s; a (alpha, 2 GPUs) waits 0 and runs 50; b (beta, 2 GPUs) waits 20 and runs 5;
    # c (beta, 1 GPU) waits 40, runs 30, preempted after 30 s of its 1 GPU
    wl = _workload({"a": ("alpha", 0.0, 2), "b": ("beta", 0.0, 2), "c": ("beta", 10.0, 1)}, gpus=4, span=100.0)
    out = w.measure(wl, _run({"a": (0.0, 50.0, "SUCCEEDED"), "b": (20.0, 5.0, "SUCCEEDED"),
                              "c": (50.0, 30.0, "PREEMPTED")}))
    assert out["mean_wait_s"] == pytest.approx(20.0)  # (0 + 20 + 40) / 3
    assert out["p50_wait_s"] == 20.0 and out["p99_wait_s"] == 40.0
    # bounded slowdown: a 1; b (20 + 5) / 10 = 2.5; c (40 + 30) / 30 = 2.333...
    assert out["mean_bounded_slowdown"] == pytest.approx((1 + 2.5 + 70 / 30) / 3)
    # utilisation: (2*50 + 2*5 + 1*30) / (4 * 100) = 0.35
    assert out["utilization"] == pytest.approx(0.35)
    assert out["gpu_hours_lost_to_preemption"] == pytest.approx(30 / 3600)
    beta = next(r for r in out["per_tenant"] if r["tenant"] == "beta")
    assert (beta["jobs"], beta["mean_wait_s"]) == (2, 30.0)
    # fair share: alpha delivered 100 of 140 GPU-seconds, beta 40; targets 1:1 -> distance (|5/7-1/2|+|2/7-1/2|)/2
    assert out["fairshare"]["distance"] == pytest.approx(3 / 14)


def test_a_job_that_never_starts_waits_until_its_users_cancel_or_the_end_of_the_span():
    # a (alpha) waits 10 s; b (beta) never starts and its user cancelled at 30 s: it waited 25 s;
    # c (beta) never starts, no cancel: it waits to the end of the span, 100 - 20 = 80 s
    wl = _workload({"a": ("alpha", 0.0, 1), "b": ("beta", 5.0, 1), "c": ("beta", 20.0, 1)}, gpus=1, span=100.0)
    wl.recorded["b"].cancel_s = 30.0
    run = _run({"a": (10.0, 50.0, "SUCCEEDED")})
    out = w.measure(wl, run)
    assert out["jobs"] == 3 and out["never_started"] == 2 and out["never_started_jobs"] == ["b", "c"]
    assert out["mean_wait_s"] == pytest.approx((10 + 25 + 80) / 3)
    assert out["p99_wait_s"] == 80.0
    beta = next(r for r in out["per_tenant"] if r["tenant"] == "beta")
    assert (beta["jobs"], beta["never_started"], beta["mean_wait_s"]) == (2, 2, 52.5)
    # the same jobs all started within 5 s: never starting is not a shorter wait
    started = w.measure(wl, _run({"a": (10.0, 50.0, "SUCCEEDED"), "b": (6.0, 5.0, "SUCCEEDED"),
                                  "c": (25.0, 5.0, "SUCCEEDED")}))
    assert started["never_started"] == 0 and started["mean_wait_s"] == pytest.approx((10 + 1 + 5) / 3)
    assert out["mean_wait_s"] > started["mean_wait_s"]


def test_fairshare_targets_follow_the_account_tree():
    config = [c.AccountConfigured(account="lab", shares=3.0), c.AccountConfigured(account="ops", shares=1.0),
              c.AccountConfigured(account="x", parent="lab", shares=1.0),
              c.AccountConfigured(account="y", parent="lab", shares=2.0)]
    targets = measures._targets(config, {"x", "y", "ops"})
    assert targets == pytest.approx({"x": 0.75 / 3, "y": 0.75 * 2 / 3, "ops": 0.25})


def test_moves_count_jobs_that_start_earlier_or_later():
    wl = _workload({"a": ("alpha", 0.0, 1), "b": ("beta", 0.0, 1), "c": ("beta", 0.0, 1)}, gpus=1, span=100.0)
    base = _run({"a": (0.0, 10.0, "SUCCEEDED"), "b": (10.0, 10.0, "SUCCEEDED"), "c": (20.0, 10.0, "SUCCEEDED")})
    changed = _run({"a": (20.0, 10.0, "SUCCEEDED"), "b": (0.0, 10.0, "SUCCEEDED"), "c": (20.0, 10.0, "SUCCEEDED")})
    mv = w.moves(wl, base, changed)
    assert mv["earlier"]["jobs"] == 1 and mv["earlier"]["max_s"] == 10.0
    assert mv["later"]["jobs"] == 1 and mv["later"]["max_s"] == 20.0
    assert mv["same"] == 1


# ---------------------------------------------------------------------- acceptance: a live run, replayed


async def _publish(url: str, items: list[tuple[str, c.Event]]) -> None:
    from services.runtime.jetstream import JetStreamLog
    from services.runtime.log import Outgoing

    log = await JetStreamLog.open(url, name="test-whatif", create=False)
    try:
        await log.publish_many([Outgoing(s, encode(e), e.id) for s, e in items])
    finally:
        await log.close()


async def _ended(url: str) -> int:
    from services.front.audit.log import read_log

    return sum(1 for r in await read_log(url) if ".JobSucceeded." in r.subject)


def _submission(job_id: str, tenant: str, run_s: float) -> tuple[str, c.JobSubmitted]:
    return input_subject(tenant, "submit"), c.JobSubmitted(
        id=job_id, ts=time.time(), source="test", correlation_id=job_id, job_id=job_id, tenant=tenant, account=tenant,
        resources=c.ResourceRequest(cpus=1, memory="64Mi", gpus=1), time_limit_s=60.0, sim_runtime_s=run_s)


def test_a_recorded_live_run_is_reproduced_and_a_fairshare_change_moves_the_waits(tmp_path: Path):
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(tmp_path / "h"), "--nodes", "2",
                           "--gpus-per-node", "2", "--executor", "sim", "--ui-port", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert up.stdout is not None and up.stdout.readline().strip() == url
        # alpha's four jobs take the four GPUs; beta's arrive behind them, then alpha's second four.
        # When alpha's first end, beta has used nothing: fair share puts beta's first.
        asyncio.run(_publish(url, [(admin_subject("account"), c.AccountConfigured(
            id=f"acct-{t}", ts=time.time(), account=t, shares=1.0)) for t in ("alpha", "beta")]))
        asyncio.run(_publish(url, [_submission(f"a{i}", "alpha", 2.0) for i in range(4)]))
        time.sleep(0.3)
        asyncio.run(_publish(url, [_submission(f"a{i}", "alpha", 2.0) for i in range(4, 8)]))
        time.sleep(0.3)
        asyncio.run(_publish(url, [_submission(f"b{i}", "beta", 3.0) for i in range(8)]))
        deadline = time.monotonic() + 60
        while asyncio.run(_ended(url)) < 16:
            assert time.monotonic() < deadline, "the live run did not finish"
            time.sleep(0.5)

        def whatif(*args: str) -> tuple[dict, dict]:
            starts = tmp_path / f"starts-{len(args)}.json"
            out = subprocess.run([*HORIZON, "whatif", "--nats", url, "--json", "--starts", str(starts), *args],
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
            return json.loads(out.stdout), json.loads(starts.read_text())

        result, starts = whatif()
        assert set(result) == {"baseline", "changed"}
        for side in result.values():
            for key in ("mean_wait_s", "mean_bounded_slowdown", "utilization", "per_tenant"):
                assert key in side
        assert len(starts) == 16
        for job_id, s in starts.items():  # every recorded start reproduced, job by job
            assert s["recorded_start_s"] is not None, job_id
            assert s["baseline_start_s"] == pytest.approx(s["recorded_start_s"], abs=1.0), (job_id, s)
            assert sorted(s["baseline_nodes"]) == s["recorded_nodes"], (job_id, s)
        fid = result["baseline"]["fidelity"]
        assert fid["reproduced"] == fid["compared"] == 16
        # no change: the changed replay is the baseline
        assert result["changed"]["mean_wait_s"] == pytest.approx(result["baseline"]["mean_wait_s"])
        order = sorted(starts, key=lambda j: (starts[j]["recorded_start_s"], j))
        assert order[4:8] == ["b0", "b1", "b2", "b3"]  # fair share put beta before alpha's older jobs

        result, starts = whatif("--set", "policy.weight.fairshare=0")
        base = {r["tenant"]: r for r in result["baseline"]["per_tenant"]}
        changed = {r["tenant"]: r for r in result["changed"]["per_tenant"]}
        # without fair share, age alone: alpha's older jobs go first; beta, favoured before, waits longer.
        # By how much: b0-b3 start when a4-a7 end, 2 s later than with fair share, and b4-b7 start as
        # before: 4 x 2 s over 8 jobs, exactly 1 s more (alpha: 4 x 3 s over 8, 1.5 s less), give or
        # take the live run's timing, so the bounds are half of that.
        assert changed["alpha"]["mean_wait_s"] < base["alpha"]["mean_wait_s"] - 0.75
        assert changed["beta"]["mean_wait_s"] > base["beta"]["mean_wait_s"] + 0.5
        assert all(starts[f"a{i}"]["changed_start_s"] < starts["b0"]["changed_start_s"] for i in range(8))
        assert result["changed"]["vs_baseline"]["earlier"]["jobs"] >= 4
        assert result["changed"]["changes"] == ["policy.weight.fairshare=0"]
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


# ---------------------------------------------------------------------- a simulated log, changed in each way


def test_node_classes_added_and_removed_and_any_configuration_event_move_the_waits_as_they_should():
    from services.front.bench.whatif_log import record_week, week_workload
    from services.front.sim.whatif.report import whatif_report

    jobs, specs, config = week_workload(nodes=4, days=0.5, load=3.0, seed=7, start_s=T0)
    records = record_week(jobs, specs, config)
    same, starts = whatif_report(records)
    fid = same["baseline"]["fidelity"]
    assert fid["reproduced"] == fid["compared"] == len(jobs)  # a complete log: every start reproduced
    assert same["changed"]["mean_wait_s"] == same["baseline"]["mean_wait_s"] > 0
    more, _ = whatif_report(records, add_nodes=("2x8a100",))
    assert more["changed"]["nodes_added"] == 2
    assert more["changed"]["mean_wait_s"] < more["baseline"]["mean_wait_s"]
    # the same work on 48 GPUs instead of 32: utilisation is measured against the changed cluster
    assert more["changed"]["utilization"] == pytest.approx(more["baseline"]["utilization"] * 32 / 48, rel=0.05)
    less, _ = whatif_report(records, remove=("gpu-03",))
    assert less["changed"]["nodes_removed"] == ["gpu-03"]
    assert less["changed"]["mean_wait_s"] > less["baseline"]["mean_wait_s"]
    fcfs, _ = whatif_report(records, config_json=('{"type": "PolicyConfigured", "policy": "fcfs"}',))
    assert fcfs["changed"]["changes"] == ['PolicyConfigured {"policy": "fcfs", "weights": {}, "max_age_s": null, '
                                          '"estimate_ref_s": null, "qos_boost": {}, "backoff_base_s": null, '
                                          '"backoff_max_s": null, "user": ""}']
    assert fcfs["changed"]["mean_wait_s"] != fcfs["baseline"]["mean_wait_s"]
    with pytest.raises(w.WhatIfError, match="no recorded node matches"):
        whatif_report(records, remove=("cpu-*",))
    with pytest.raises(w.WhatIfError, match="no job was submitted"):
        whatif_report(records, from_text="2020-01-01T00:00:00Z", to_text="2020-01-02T00:00:00Z")


def test_progress_is_reported_for_both_replays():
    from services.front.bench.whatif_log import record_week, week_workload
    from services.front.sim.whatif.report import whatif_report

    jobs, specs, config = week_workload(nodes=2, days=0.1, seed=2, start_s=T0)
    records = record_week(jobs, specs, config)
    seen: dict[str, list[tuple[int, int]]] = {}

    class Recorder:  # the part of services/front/client/progress.Bar whatif uses
        def add(self, label: str, total: int | None = None) -> Recorder:
            seen[label] = []
            self.label = label
            return self

        def update(self, done: int, total: int | None = None) -> None:
            seen[self.label].append((done, total))

    whatif_report(records, bar=Recorder())  # type: ignore[arg-type]
    assert set(seen) == {"baseline", "changed"}
    for updates in seen.values():
        assert updates[-1] == (len(jobs), len(jobs))
        assert [d for d, _ in updates] == sorted(d for d, _ in updates)


def test_a_placement_decided_before_an_end_it_could_not_see_is_a_known_cause():
    """basis_seq is what the live cycle knew; an end stored after it and before the decision was
    logged while the cycle decided: the replay, in time order, may see that node free."""
    from services.front.sim.whatif.workload import stale_basis

    placed = {("a", 1): (10, 15), ("b", 1): (11, 15), ("c", 1): (10, 30), ("c", 2): (40, 45)}
    ends = [11, 20, 41]  # a missed 11; b saw it (basis 11) and 20 came after it; c's first attempt missed 11 and 20
    assert stale_basis(placed, ends, {"a": [1], "b": [1], "c": [1, 2]}) == {"a", "c"}
    assert stale_basis(placed, [], {"a": [1]}) == set()


def test_a_placement_on_a_basis_that_took_in_several_ends_at_once_is_a_known_cause():
    """A live cycle busy while two ends came folds both and decides once; the replay, ending jobs at their
    replayed start plus runtime, may see them one at a time and place on the first node freed."""
    from services.front.sim.whatif.workload import batched_ends

    bases = [5, 12, 30, 40]  # placement's decisions (blocked or placed) were made on these bases
    placed = {("a", 1): (12, 13), ("b", 1): (30, 31), ("c", 1): (40, 41), ("c", 2): (50, 51)}
    ends = [8, 9, 20, 35, 45, 48]  # a took in 8 and 9 (since 5); b only 20 (since 12); c only 35 (since 30)
    assert batched_ends(placed, ends, bases, {"a": [1], "b": [1], "c": [1, 2]}) == {"a"}
    assert batched_ends({("d", 1): (50, 51)}, ends, bases, {"d": [1]}) == {"d"}  # 45 and 48 since 40
    assert batched_ends(placed, [], bases, {"a": [1]}) == set()


def test_a_job_on_nodes_an_earlier_divergence_swapped_follows_from_it():
    """Seen in a full suite run: a live cycle that took in two ends at once put two array tasks on node-02 and
    two on node-03, the replay the other way round; so node-03 came free first in one run and node-02 in
    the other, and the job after them started on time on the other node, as did the gang after it. Those
    follow from the first divergence; a job that moved to a node no earlier divergence touched, or one
    placed in the same cycle as the first, does not."""
    from types import SimpleNamespace

    def job(submit: float, start: float, nodes: list[str]) -> SimpleNamespace:
        return SimpleNamespace(submit_s=submit, start_s=start, nodes=nodes)

    recorded = {"arr_4": job(1, 10.0, ["n2"]), "arr_6": job(1, 10.0, ["n3"]), "same": job(1, 10.0, ["n0"]),
                "stopped": job(2, 12.0, ["n3"]), "gang": job(3, 13.0, ["n1", "n2"]), "far": job(4, 14.0, ["n4"]),
                "late": job(5, 15.0, ["n2"])}
    replayed = {"arr_4": (10.01, ["n3"]), "arr_6": (10.01, ["n2"]), "same": (10.0, ["n2"]),
                "stopped": (12.0, ["n2"]), "gang": (13.0, ["n1", "n3"]), "far": (14.0, ["n5"]),
                "late": (17.5, ["n3"])}
    workload = SimpleNamespace(measured=set(recorded), recorded=recorded, notes={}, stale_basis=set(),
                               batched_ends={"arr_4", "arr_6"})
    run = SimpleNamespace(results={j: SimpleNamespace(start_s=t, allocation=n) for j, (t, n) in replayed.items()})
    fid = measures.fidelity(workload, run, 1.0)
    by_id = {d["job_id"]: d for d in fid["divergences"]}
    assert [d["job_id"] for d in fid["divergences"]] == ["arr_4", "arr_6", "same", "stopped", "gang", "far", "late"]
    assert by_id["stopped"]["why"] == [w.AFTER_DIVERGENCE] and by_id["stopped"]["after"] == ["arr_6", "same"]
    assert by_id["gang"]["why"] == [w.AFTER_DIVERGENCE] and by_id["gang"]["after"] == ["stopped"]
    # placed with the first ones, not after them; a node no divergence touched; started too late to be latency
    assert not by_id["same"]["explained"] and not by_id["far"]["explained"] and not by_id["late"]["explained"]
    assert fid["unexplained"] == 3 and fid["on_time_elsewhere"] == 4 and fid["reproduced"] == 0
