"""Preemption in the simulator's report, and Horizon's victim choice against Kueue's default order
(docs/benchmarks.md, "Preemption: Horizon's victim choice vs Kueue's default order")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from services.front.bench.preemption import gpus_first, run_one
from services.front.bench.preemption_workload import generate, write
from services.front.cli.simulate import simulate_cmd
from services.front.sim.simulation import run_simulation

HOUR = 3600.0


def _three_jobs(tmp_path: Path) -> Path:
    # One node of 8 GPUs. "narrow" (1 GPU) runs from 0 and "wide" (7 GPUs) from 2400; the node is full
    # when the high-priority "vip" (1 GPU, 600 s) arrives at 3600 and must preempt one of the two.
    jobs = [
        {"job_id": "narrow", "submit_s": 0, "runtime_s": 10 * HOUR, "gpus": 1, "priority_class": "low"},
        {"job_id": "wide", "submit_s": 2400, "runtime_s": 2 * HOUR, "gpus": 7, "priority_class": "low"},
        {"job_id": "vip", "submit_s": 3600, "runtime_s": 600, "gpus": 1, "priority_class": "high"},
    ]
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"config": [], "jobs": jobs}))
    return path


def _simulate(path: Path, victims: str | None):
    return asyncio.run(run_simulation(str(path), in_process=True, nodes=1, gpus_per_node=8, backfill=True,
                                      preemption_victims=victims))


def test_preemption_metrics_on_three_jobs_worked_by_hand(tmp_path):
    path = _three_jobs(tmp_path)

    # Horizon's "cheapest": the least work lost. "narrow" has run 1 GPU x 3,600 s = 3,600 GPU-s,
    # "wide" 7 GPUs x 1,200 s = 8,400 GPU-s: "narrow" is stopped, losing 3,600 GPU-s. "vip" runs
    # 3600-4200 on its GPU; "narrow" starts over at 4200 and ends at 4200 + 36,000 = 40,200.
    out, run = _simulate(path, None)
    assert out["preemption_victims"] == "cheapest"
    assert [(a.start_s, a.end_s, a.outcome) for a in run.results["narrow"].attempts] == [
        (0.0, 3600.0, "PREEMPTED"), (4200.0, 40200.0, "SUCCEEDED")]
    assert run.results["vip"].start_s == 3600.0
    assert out["preemptions"] == 1 and out["retries"] == 1
    assert out["preempted_gpu_s"] == 3600.0
    assert out["preemptions_by_class"] == {"low": 1} and out["preempted_gpu_s_by_class"] == {"low": 3600.0}
    # Every job started at once: waits 0, bounded slowdown 1. To the end: narrow (40,200 - 0) / 36,000
    # = 1.11667, wide and vip 1: mean 3.11667 / 3 = 1.03889.
    assert out["mean_wait_s_by_class"] == {"high": 0.0, "low": 0.0}
    assert out["mean_bounded_slowdown"] == 1.0
    assert out["mean_bounded_slowdown_to_end"] == pytest.approx((40200 / 36000 + 1 + 1) / 3)
    assert out["outcomes"] == {"SUCCEEDED": 3}

    # Kueue's order: the same class, so the most recently started: "wide". Lost: 7 GPUs x (3600 - 2400) s
    # = 8,400 GPU-s. "wide" starts over when "vip" ends (7 GPUs free again at 4200), ends at 11,400.
    out, run = _simulate(path, "lowest-priority-youngest")
    assert out["preemption_victims"] == "lowest-priority-youngest"
    assert [(a.start_s, a.end_s, a.outcome) for a in run.results["wide"].attempts] == [
        (2400.0, 3600.0, "PREEMPTED"), (4200.0, 11400.0, "SUCCEEDED")]
    assert out["preemptions"] == 1 and out["preempted_gpu_s"] == 8400.0
    assert out["preempted_gpu_s_by_class"] == {"low": 8400.0}
    # wide: (11,400 - 2,400) / 7,200 = 1.25; narrow and vip 1: mean 3.25 / 3.
    assert out["mean_bounded_slowdown_to_end"] == pytest.approx(3.25 / 3)


def test_the_former_gpus_first_order_stops_the_narrow_old_job(tmp_path):
    # GpusFirst (services/front/bench/preemption.py, the order first specified) ranks GPUs before work lost:
    # on a node holding "old" (1 GPU since 0) and "young" (7 GPUs since 3300) it stops "old",
    # 1 x 3,600 = 3,600 GPU-s, where the least work lost is "young", 7 x 300 = 2,100 GPU-s.
    jobs = [
        {"job_id": "old", "submit_s": 0, "runtime_s": 10 * HOUR, "gpus": 1, "priority_class": "low"},
        {"job_id": "young", "submit_s": 3300, "runtime_s": 2 * HOUR, "gpus": 7, "priority_class": "low"},
        {"job_id": "vip", "submit_s": 3600, "runtime_s": 600, "gpus": 1, "priority_class": "high"},
    ]
    path = tmp_path / "old-young.json"
    path.write_text(json.dumps({"config": [], "jobs": jobs}))
    former = gpus_first(path, nodes=1, gpus_per_node=8)
    assert former["lost_gpu_hours"] == pytest.approx(3600 / 3600) and former["all_finished"]
    out, run = _simulate(path, None)
    assert [a.outcome for a in run.results["young"].attempts] == ["PREEMPTED", "SUCCEEDED"]
    assert out["preempted_gpu_s"] == 2100.0


def test_simulate_cli_prints_preemptions_and_takes_the_victim_order(tmp_path):
    path = _three_jobs(tmp_path)
    args = [str(path), "--in-process", "--nodes", "1", "--gpus-per-node", "8", "--backfill"]
    text = CliRunner().invoke(simulate_cmd, [*args, "--preemption-victims", "lowest-priority-youngest"])
    assert text.exit_code == 0, text.output
    assert "preemptions                  1  (victim order lowest-priority-youngest)" in text.output
    assert "GPU-hours lost to preemption 2.333  (low 2.3)" in text.output  # 8,400 GPU-s
    quiet = CliRunner().invoke(simulate_cmd, [*args[:1], "--in-process", "--nodes", "2", "--gpus-per-node", "8"])
    assert quiet.exit_code == 0 and "preemptions" not in quiet.output  # nothing preempted: nothing shown
    bad = CliRunner().invoke(simulate_cmd, [*args, "--preemption-victims", "oldest"])
    assert bad.exit_code != 0


def test_the_workload_generator_is_deterministic():
    a, b = generate(seed=3, nodes=8, hours=4), generate(seed=3, nodes=8, hours=4)
    assert a == b and a["jobs"] and a != generate(seed=4, nodes=8, hours=4)
    classes = {j["priority_class"] for j in a["jobs"]}
    assert classes == {"critical", "high", "normal", "low", "scavenger"}
    assert all(j["gpus"] % j.get("nodes", 1) == 0 for j in a["jobs"])  # gangs of whole nodes


# A small version of docs/workloads/preemption-mixed.json: 16 nodes, 12 hours (about 200 jobs). At this size
# Horizon's order lost less than Kueue's for each of seeds 1-10 (docs/results/preemption-results.json, "sweeps"); at
# 32 nodes for 4 of seeds 1-5: the claim is statistical, this seed is one of many that hold it.
SMALL = {"seed": 2, "nodes": 16, "hours": 12.0}


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("preemption") / "small.json"
    write(path, generate(**SMALL))
    return {v: run_one(path, v, SMALL["nodes"], 8) for v in ("cheapest", "lowest-priority-youngest")}


def test_both_victim_orders_finish_every_job(small_runs):
    for r in small_runs.values():
        assert r["all_finished"] and r["outcomes"] == {"SUCCEEDED": r["jobs"]}
        assert r["preemptions"] > 0 and r["lost_gpu_hours"] > 0


def test_cheapest_loses_no_more_gpu_time_than_lowest_priority_youngest(small_runs):
    assert small_runs["cheapest"]["lost_gpu_hours"] <= small_runs["lowest-priority-youngest"]["lost_gpu_hours"]
