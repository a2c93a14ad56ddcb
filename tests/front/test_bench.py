"""``horizon bench``: every stage finishes or fails with a reason within its budget; ``--scale``'s contract.

The runs start real nats-servers and real service processes (the harness's own); the failing ones
use a tiny budget (``HORIZON_BENCH_BUDGET``) or a service that cannot start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from services.front.bench.plot import curves_svg, curves_table
from services.front.bench.processes import spawn, stop_all
from services.front.bench.stage import StageFailed, run_stage, stop_tasks, wait_for

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
CONTRACT = {"scale": {"nodes", "backlog", "jobs_per_s", "cycle_p99_ms", "bytes_per_queued_job", "restart_s",
                      "latency_p99_ms"},
            "partitions": {"ratio_2", "ratio_4"}}


def _bench(*args: str, budget: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if budget is not None:
        env["HORIZON_BENCH_BUDGET"] = budget
    return subprocess.run([*HORIZON, "bench", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_the_quick_scale_run_prints_every_contract_key(tmp_path: Path) -> None:
    plot, table = tmp_path / "curves.svg", tmp_path / "curves.md"
    started = time.monotonic()
    out = _bench("--scale", "--quick", "--json", "--plot", str(plot), "--table", str(table))
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    for section, keys in CONTRACT.items():
        assert keys <= set(result[section]), (section, sorted(result[section]))
        for key in keys:
            value = result[section][key]
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (section, key, value)
            assert value > 0, (section, key, value)
    scale = result["scale"]
    assert scale["nodes"] == 200 and scale["backlog"] == 5_000
    assert set(scale["bytes_per_queued_job_by_service"]) == {"inventory", "scheduling", "placement", "submission",
                                                              "preemption"}
    assert set(scale["restart_s_by_service"]) == set(scale["bytes_per_queued_job_by_service"])
    assert scale["bytes_per_queued_job"] == max(scale["bytes_per_queued_job_by_service"].values())
    assert scale["restart_s"] == max(r["restart_s"] for r in scale["restart_s_by_service"].values())
    assert scale["latency_p50_ms"] <= scale["latency_p99_ms"] <= scale["latency_p999_ms"] <= scale["latency_max_ms"]
    hops = scale["latency_hops"]  # each latency job's three hops, from the log's own timestamps
    assert hops["jobs"] == scale["latency_jobs"]
    for hop in ("submission", "scheduling", "placement"):
        assert 0 < hops[hop]["p50_ms"] <= hops[hop]["p99_ms"] <= hops[hop]["max_ms"] < scale["latency_max_ms"], hops
    cells = {(c["nodes"], c["backlog"]) for c in result["curves"]}
    assert cells == {(100, 2_000), (100, 5_000), (200, 2_000), (200, 5_000)}
    assert all(c["jobs_per_s"] > 0 and c["cycle_p99_ms"] is not None for c in result["curves"])
    ET.fromstring(plot.read_text())  # well-formed SVG
    assert "<polyline" in plot.read_text() and "| 200 |" in table.read_text()
    assert "failed" not in result
    print(f"--scale --quick took {took:.0f} s")


def test_the_latency_stage_says_what_each_job_cost_the_stack() -> None:
    """``--only latency`` (a ``horizon up`` of its own, one job at a time): the percentiles in order, each
    job's three hops from the log, and the CPU time ``up`` spent per job (above zero: it read /proc)."""
    out = _bench("--quick", "--only", "latency", "--json", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    latency = json.loads(out.stdout)["latency"]
    assert latency["jobs"] == latency["hops"]["jobs"] == 200
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"] <= latency["max_ms"]
    assert 0 < latency["cpu_ms_per_job"] < 1000, latency


def test_a_stage_that_cannot_finish_fails_in_its_budget_and_the_next_still_runs() -> None:
    # a two-hundredth of the budgets: the scheduling stage's wait for 5,000 JobScheduled gets ~0.65 s, from
    # the three services' spawn (a hundredth, 1.3 s, was enough for them to finish once placement got faster)
    started = time.monotonic()
    out = _bench("--quick", "--only", "scheduling", "--only", "memory", "--json", budget="0.005", timeout=180)
    took = time.monotonic() - started
    assert out.returncode == 1, out.stderr[-2000:]
    result = json.loads(out.stdout)
    error = result["scheduling"]["error"]
    assert error.startswith("scheduling: waited ") and "for 5,000 JobScheduled: " in error, error
    assert "of 5,000 JobScheduled" in error, error
    assert "services alive" in error and "log at seq" in error and "NodeLost seen" in error, error
    assert result["failed"][0] == "scheduling"
    assert "memory" in result  # the next stage ran (and, this short, it may fail too: with its own reason)
    assert "error: scheduling: " in out.stderr
    assert took < 120, took


def test_a_service_that_dies_ends_the_wait_with_its_last_words(tmp_path: Path) -> None:
    async def run() -> str:
        proc = spawn("nats://127.0.0.1:1", "scheduling", "--policy", "nonsense")
        try:
            await run_stage("teststage", lambda: wait_for("teststage", "something that never comes", lambda: False, 60.0), 60.0)
        except StageFailed as exc:
            assert proc.poll() is not None
            return str(exc)
        finally:
            stop_all()
        raise AssertionError("no failure")

    started = time.monotonic()
    message = asyncio.run(run())
    assert time.monotonic() - started < 30
    assert message.startswith("teststage: waiting for something that never comes: scheduling (pid ")
    assert "exited with 2" in message and "nonsense" in message, message


def test_a_stage_past_its_budget_is_cancelled_and_says_what_it_was_doing() -> None:
    from services.front.bench.stage import status

    async def stuck() -> None:
        status("teststage", "waiting for Godot")
        await asyncio.Event().wait()

    async def run() -> str:
        try:
            await run_stage("teststage", stuck, 0.2, grace_s=0.1)
        except StageFailed as exc:
            return str(exc)
        raise AssertionError("no failure")

    message = asyncio.run(run())
    assert message.startswith("teststage: not finished") and "it was waiting for Godot" in message, message


def test_stop_tasks_stops_a_task_whose_cancel_asyncio_wait_for_swallowed() -> None:
    """The hang of issue 35: Python 3.11's wait_for drops a cancel that lands as its inner future
    completes (gh-86296); the completer looped on and ``gather`` waited forever."""

    async def run() -> bool:
        done, wake = asyncio.Event(), asyncio.Event()

        async def completer() -> None:
            while True:
                await wake.wait()
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(done.wait(), 5.0)

        task = asyncio.create_task(completer())
        wake.set()
        await asyncio.sleep(0.01)
        done.set()
        await asyncio.sleep(0)
        await asyncio.wait_for(stop_tasks(task), 5.0)
        return task.done()

    assert asyncio.run(run())


def test_the_curves_table_and_plot() -> None:
    curves = [{"nodes": n, "backlog": b, "jobs_per_s": 1000 * n // 100 + b // 1000, "cycle_p99_ms": 10.0 * n / 100}
              for n in (100, 200) for b in (2_000, 5_000)]
    curves.append({"nodes": 400, "backlog": 2_000, "jobs_per_s": None, "cycle_p99_ms": None, "error": "x"})
    table = curves_table(curves)
    assert table.splitlines()[0].startswith("| nodes × 8 GPUs | backlog 2,000")
    assert "| 100 | 1,002; 10.0 | 1,005; 10.0 |" in table and "| 400 | failed | not run |" in table
    svg = ET.fromstring(curves_svg(curves))
    lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
    assert len(lines) == 4  # two node counts x two panels; the failed one draws no line


@pytest.mark.parametrize("args, said", [
    (["--scale", "--nodes", "12,five"], "give whole numbers"),
    (["--scale", "--backlog", "0"], "above 0"),
    (["--plot", "x.svg"], "go with --scale"),
    (["--scale", "--only", "intake"], "--only picks stages"),
])
def test_bad_options_get_a_clear_error(args: list[str], said: str) -> None:
    out = _bench(*args, timeout=60)
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_bad_budget_factor_gets_a_clear_error() -> None:
    out = _bench("--quick", "--only", "memory", budget="soon", timeout=60)
    assert out.returncode == 2 and "HORIZON_BENCH_BUDGET='soon' is not a number" in out.stderr, out.stderr
