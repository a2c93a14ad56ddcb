"""Trace simulation: readers, the in-process and NATS modes agree, and FCFS reproduces the published table."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.front.sim.simulation import run_simulation
from services.front.sim.traces import read_trace, window

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
LUBLIN = TRACES / "lublin_256.swf"
needs_trace = pytest.mark.skipif(not LUBLIN.exists(), reason="../shared/traces is not beside this checkout")

SWF = """; Version: 2
; MaxNodes: 8
; MaxProcs: 16
1   0 -1  100  4 -1 -1  2 200 -1 1 3 -1 -1 0 -1 -1 -1
2  10 -1    0  1 -1 -1  1  -1 -1 1 3 -1 -1 0 -1 -1 -1
3  20 -1   -1  2 -1 -1  6  -1 -1 1 4 -1 -1 0 -1 -1 -1
"""


def test_swf_reading_follows_the_conventions(tmp_path):
    path = tmp_path / "t.swf"
    path.write_text(SWF)
    trace = read_trace(path)
    assert (trace.max_nodes, trace.max_procs) == (8, 16)
    assert [j.job_id for j in trace.jobs] == ["swf-1", "swf-3"]  # run time 0 dropped
    first, third = trace.jobs
    assert (first.procs, first.estimate_s, first.runtime_s, first.user) == (4, 200.0, 100.0, "u3")
    assert (third.procs, third.runtime_s, third.estimate_s) == (6, 10.0, 10.0)  # negative run -> 10; estimate = run


def test_job_lists_and_a_gpu_cluster(tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([
        {"submit_s": 0, "runtime_s": 50, "gpus": 4, "account": "a"},
        {"submit_s": 5, "runtime_s": 20, "gpus": 8, "account": "b"},
        {"submit_s": 6, "runtime_s": 10, "gpus": 2, "estimate_s": 10},
        {"submit_s": 7, "runtime_s": 100, "gpus": 2},
    ]))
    out, run = asyncio.run(run_simulation(str(path), in_process=True, nodes=2, gpus_per_node=4, backfill=True,
                                          policy="fcfs"))
    starts = {j: r.start_s for j, r in run.results.items()}
    # job-1 (two whole nodes) waits for job-0 and holds a reservation at 50; job-2 ends by then, so it
    # backfills at once; job-3 would still run at 50 on a reserved node, so it waits until job-1 ends.
    assert starts == {"job-0": 0, "job-1": 50, "job-2": 6, "job-3": 70}
    assert out["jobs"] == 4 and out["makespan_s"] == 170 and out["backfilled"] == 1


@needs_trace
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("policy", "backfill"), [("fcfs", True), ("sjf", False), ("multifactor", True)])
def test_in_process_and_nats_modes_decide_identically(policy, backfill):
    common = {"start": 2756, "length": 40, "policy": policy, "backfill": backfill}
    _, fast = asyncio.run(run_simulation(str(LUBLIN), in_process=True, **common))
    _, real = asyncio.run(run_simulation(str(LUBLIN), in_process=False, **common))
    fast_starts = {j: (r.start_s, r.allocation) for j, r in fast.results.items()}
    real_starts = {j: (r.start_s, r.allocation) for j, r in real.results.items()}
    assert fast_starts == real_starts
    assert all(start is not None for start, _ in fast_starts.values())


@needs_trace
@pytest.mark.timeout(300)
def test_fcfs_without_backfill_matches_the_published_window_within_one_percent():
    reference = json.loads((TRACES / "lublin1_reference.json").read_text())
    published = reference["results"]["Lublin-1/bsld/no_backfill"]["FCFS"]["per_window"][0]
    out, _ = asyncio.run(run_simulation(str(LUBLIN), start=1981, length=1024, policy="fcfs", in_process=True))
    assert out["jobs"] == 1024
    assert abs(out["mean_bounded_slowdown"] - published) / published < 0.01


@needs_trace
def test_the_cli_prints_the_contract_keys():
    out = subprocess.run([sys.executable, "-m", "services.front.cli.main", "simulate", str(LUBLIN), "--window", "1981:32",
                          "--policy", "f1", "--backfill", "--in-process", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert {"jobs", "mean_wait_s", "mean_bounded_slowdown", "utilization", "makespan_s"} <= set(body)
    assert body["jobs"] == 32


def test_windows_are_checked():
    trace = read_trace(LUBLIN) if LUBLIN.exists() else None
    if trace is None:
        pytest.skip("no trace")
    with pytest.raises(ValueError, match="the trace has 10000 jobs"):
        window(trace, 10000, 5)


def test_the_benchmark_harness_runs_from_one_command():
    out = subprocess.run([sys.executable, "-m", "services.front.cli.main", "bench", "--quick", "--only", "replay", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert {"events_per_s", "raw_read_per_s", "snapshot_restart_s"} <= set(body["replay"])
    assert body["replay"]["events"] == 50_001  # the layout marker, then 10,000 jobs of 5 records


WORKFLOW = {
    "config": [{"type": "AccountConfigured", "account": "a", "shares": 2},
               {"type": "AccountConfigured", "account": "b", "shares": 1}],
    "jobs": [
        {"job_id": "prep", "submit_s": 0, "runtime_s": 30, "gpus": 2, "account": "a"},
        {"job_id": "sweep", "submit_s": 0, "runtime_s": 20, "gpus": 1, "array": "0-11%3", "account": "a",
         "dependencies": ["after-ok:prep"]},
        {"job_id": "report", "submit_s": 1, "runtime_s": 5, "gpus": 1, "dependencies": [["after-any", "sweep"]]},
        {"job_id": "flaky", "submit_s": 2, "runtime_s": 10, "gpus": 4, "account": "b", "fail_attempts": 1,
         "restart_policy": "on-failure", "max_retries": 2},
        {"job_id": "broken", "submit_s": 3, "runtime_s": 10, "gpus": 1, "account": "b", "exit_code": 2},
        {"job_id": "after-broken", "submit_s": 3, "runtime_s": 10, "gpus": 1,
         "dependencies": [{"kind": "after-ok", "job_id": "broken"}]},
        {"job_id": "filler", "submit_s": 4, "runtime_s": 15, "gpus": 2, "nice": 100, "qos": "batch"},
    ],
}


def test_job_lists_carry_arrays_dependencies_failures_and_configuration(tmp_path):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(WORKFLOW))
    trace = read_trace(path)
    assert [e.event_type for e in trace.config] == ["AccountConfigured", "AccountConfigured"]
    assert trace.config[0].shares == 2
    by_id = {j.job_id: j for j in trace.jobs}
    assert by_id["sweep"].array == "0-11%3" and by_id["sweep"].dependencies == (("after-ok", "prep"),)
    assert by_id["report"].dependencies == (("after-any", "sweep"),)
    assert (by_id["flaky"].fail_attempts, by_id["flaky"].restart_policy, by_id["flaky"].max_retries) == (1, "on-failure", 2)
    assert [by_id["flaky"].outcome(n) for n in (1, 2)] == [1, 0] and by_id["broken"].outcome(3) == 2
    csv_path = tmp_path / "wf.csv"
    csv_path.write_text("job_id,submit_s,runtime_s,dependencies,array\nx,0,5,,0-3%2\ny,1,5,after-ok:x,\n")
    x, y = read_trace(csv_path).jobs
    assert (x.array, x.dependencies, y.array, y.dependencies) == ("0-3%2", (), None, (("after-ok", "x"),))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"config": [{"type": "JobScheduled", "job_id": "x"}], "jobs": []}))
    with pytest.raises(ValueError, match="config\\[0\\] has type 'JobScheduled'; operator events: AccountConfigured"):
        read_trace(bad)


@pytest.mark.timeout(120)
def test_a_workflow_decides_identically_in_process_and_over_nats(tmp_path):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(WORKFLOW))
    common = {"nodes": 2, "gpus_per_node": 4, "backfill": True}
    out, fast = asyncio.run(run_simulation(str(path), in_process=True, **common))
    _, real = asyncio.run(run_simulation(str(path), in_process=False, **common))

    def story(run):
        return {j: (r.state, r.reason, [(a.attempt, a.start_s, a.end_s, a.nodes, a.outcome) for a in r.attempts])
                for j, r in run.results.items()}

    assert story(fast) == story(real)
    r = fast.results
    assert r["sweep_0"].start_s == 30 and max(x.end_s for j, x in r.items() if j.startswith("sweep_")) == 110
    assert r["report"].start_s == 110
    assert [a.outcome for a in r["flaky"].attempts] == ["FAILED", "SUCCEEDED"]
    assert r["after-broken"].state == "DEPENDENCY_NEVER_SATISFIED"
    assert out["outcomes"] == {"DEPENDENCY_NEVER_SATISFIED": 1, "FAILED": 1, "SUCCEEDED": 16}
    assert out["retries"] == 1 and out["jobs"] == 17
