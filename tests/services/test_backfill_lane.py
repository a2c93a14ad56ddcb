"""Backfill mode ``lane``: ``short`` plus idle nodes that a fresh long job may not take
(``services/placement/lane.py``; docs/benchmarks.md, "A lane for short jobs"). Pure, then one
Lublin-1 window through the simulator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from events import catalogue as c
from services.front.sim.simulation import run_simulation
from services.domain.cluster import Cluster, fold_cluster
from services.domain.jobs import JobTable
from services.placement.backfill import FLAG_MODE, MODES
from services.placement.core import PlacementCore
from services.placement.lane import Lane, LaneLedger
from services.runtime.replay import replay_decisions
from tests.helpers import Feed, accepted, node, placement_cycle

NODES = 64  # one node in 64 is kept idle


def test_the_lane_keeps_one_node_in_sixty_four():
    lane = MODES["lane"].lane
    assert lane == Lane(long_s=3600.0, per=64, patience_s=1800.0)
    assert [lane.keep(n) for n in (1, 63, 64, 127, 128, 256, 1000)] == [0, 0, 1, 1, 2, 4, 15]
    assert lane.applies(3601.0, 0.0) and not lane.applies(3600.0, 0.0)  # over an hour is long
    assert lane.applies(7200.0, 1799.0) and not lane.applies(7200.0, 1800.0)  # patience runs out


def test_the_ledger_counts_idle_schedulable_nodes_less_what_the_decision_placed():
    """The module docstring's worked example: 256 nodes, 9 idle, keep 4."""
    cluster, jobs = Cluster(), JobTable()
    for i in range(256):
        fold_cluster(cluster, jobs, node(f"n{i:03d}", gpus=1), i + 1, 0.0)
        fold_cluster(cluster, jobs, c.NodeReady(node=f"n{i:03d}", basis_seq=i + 1), 300 + i, 0.0)
    lane = Lane()
    ledger = LaneLedger(cluster)
    assert len(ledger.idle) == 256
    ledger.take([c.NodeAllocation(node=f"n{i:03d}") for i in range(247)])  # 9 idle left
    five = [c.NodeAllocation(node=f"n{i:03d}") for i in range(247, 252)]
    six = [c.NodeAllocation(node=f"n{i:03d}") for i in range(247, 253)]
    assert ledger.defers(lane, five, None) is None  # 4 idle after it
    assert ledger.defers(lane, six, None) == 4  # 3 after it: under the lane
    assert ledger.defers(lane, six, frozenset(f"n{i:03d}" for i in range(10))) is None  # a 10-node partition: no lane
    replayed = LaneLedger(cluster, [[c.NodeAllocation(node=f"n{i:03d}") for i in range(247)]])
    assert replayed.idle == ledger.idle


def _feed() -> Feed:
    f = Feed(PlacementCore(backfill="lane"))
    for i in range(NODES):
        f.evt("agent", node(f"n{i:02d}", gpus=1))
        f.evt("inventory", c.NodeReady(node=f"n{i:02d}", basis_seq=f.seq))
    return f




def test_a_fresh_long_job_leaves_the_last_idle_node_to_short_jobs_until_its_patience_runs_out():
    f = _feed()
    fill = [f"fill{i}" for i in range(NODES - 2)]
    for job_id in fill:
        f.evt("submission", accepted(job_id, gpus=1, time_limit_s=600.0))
    started = placement_cycle(f, 1, fill)
    assert sum(isinstance(e, c.JobScheduled) for e in started) == NODES - 2  # short: no lane for them; 2 idle
    for job_id, limit in (("long1", 7200.0), ("long2", 7200.0), ("quick", 600.0)):
        f.evt("submission", accepted(job_id, gpus=1, time_limit_s=limit))
    out = placement_cycle(f, 2, ["long1", "long2", "quick"])
    scheduled = {e.job_id for e in out if isinstance(e, c.JobScheduled)}
    blocked = {e.job_id: e for e in out if isinstance(e, c.PlacementBlocked)}
    assert scheduled == {"long1", "quick"}  # long1 leaves 1 idle (= keep); quick is short
    [why] = blocked["long2"].reasons
    assert why.filter == "Lane"
    assert why.reason == ("it would leave fewer than 1 idle nodes for jobs of at most 3600 s (the short-job "
                          "lane); a job waits for it at most 1800 s")
    [quick] = [e.allocations[0].node for e in out if isinstance(e, c.JobScheduled) and e.job_id == "quick"]
    f.evt("agent", c.JobSucceeded(job_id="quick", attempt=1, node=quick), dt=10.0)
    out = placement_cycle(f, 3, ["long2"])
    assert not any(isinstance(e, c.JobScheduled) for e in out)  # still fresh: one idle node, kept
    f.evt("agent", c.JobSucceeded(job_id="fill0", attempt=1, node="n00"), dt=10.0)
    out = placement_cycle(f, 4, ["long2"])
    assert [e.job_id for e in out if isinstance(e, c.JobScheduled)] == ["long2"]  # two idle: one for it
    report = replay_decisions(PlacementCore(backfill="lane"), f.records)
    assert report.mismatches == [] and report.reproduced == report.decisions > 0


def test_a_long_job_that_waited_its_patience_takes_the_last_node():
    f = _feed()
    fill = [f"fill{i}" for i in range(NODES - 1)]
    for job_id in fill:
        f.evt("submission", accepted(job_id, gpus=1, time_limit_s=600.0))
    placement_cycle(f, 1, fill)
    f.evt("submission", accepted("long", gpus=1, time_limit_s=7200.0))
    assert not any(isinstance(e, c.JobScheduled) for e in placement_cycle(f, 2, ["long"]))
    out = placement_cycle(f, 3, ["long"], dt=1800.0)  # accepted 1800 s (and a little) ago
    assert [e.job_id for e in out if isinstance(e, c.JobScheduled)] == ["long"]


def test_a_cluster_under_sixty_four_nodes_has_no_lane():
    f = Feed(PlacementCore(backfill="lane"))
    for i in range(4):
        f.evt("agent", node(f"n{i}", gpus=1))
        f.evt("inventory", c.NodeReady(node=f"n{i}", basis_seq=f.seq))
    for i in range(4):
        f.evt("submission", accepted(f"long{i}", gpus=1, time_limit_s=86400.0))
    out = placement_cycle(f, 1, [f"long{i}" for i in range(4)])
    assert sum(isinstance(e, c.JobScheduled) for e in out) == 4


def test_the_simulate_flag_alone_selects_lane():
    assert FLAG_MODE == "lane"
    lane, short = MODES["lane"], MODES["short"]
    assert (lane.depth, lane.hole_fraction, lane.stacked, lane.stops) == (short.depth, short.hole_fraction,
                                                                          False, False)


LUBLIN = Path(__file__).resolve().parents[3] / "shared" / "traces" / "lublin_256.swf"


@pytest.mark.skipif(not LUBLIN.exists(), reason="../shared/traces is not beside this checkout")
@pytest.mark.timeout(300)
def test_lublin_window_3316_with_the_lane_as_recorded():
    """The window whose whole-cluster jobs make short jobs wait longest (strict order 43.49, ``short``
    43.25): the lane gives 25.875938205142052 (docs/benchmarks.md); deterministic, so held to the bit.
    A change that moves it changes scheduling decisions: look, then re-measure the table."""
    out, _ = asyncio.run(run_simulation(str(LUBLIN), start=3316, length=1024, policy="multifactor",
                                        backfill="lane", in_process=True))
    assert out["jobs"] == 1024
    assert out["mean_bounded_slowdown"] == 25.875938205142052


@pytest.mark.timeout(300)
def test_the_lane_over_nats_decides_as_in_process(tmp_path):
    """64 one-core nodes (one kept idle). A 62-node job runs 600 s; long ``a`` takes node 63 of 64
    (one idle after it: kept), long ``b`` a second later would leave none, so it waits; short ``c``
    arrives at 10 s and takes the kept node at once. When the big job ends at 600, ``b`` starts
    (accepted 598 s ago, within its patience, but 62 idle nodes now). Under ``short`` ``b`` takes
    the last node at 2 s and ``c`` waits for 600. The real services over NATS decide the same."""
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([
        {"submit_s": 0, "runtime_s": 600, "procs": 62},
        {"submit_s": 1, "runtime_s": 7000, "procs": 1},
        {"submit_s": 2, "runtime_s": 7000, "procs": 1},
        {"submit_s": 10, "runtime_s": 60, "procs": 1},
    ]))
    common = {"nodes": 64, "cpus_per_node": 1, "policy": "fcfs"}
    _, lane = asyncio.run(run_simulation(str(path), in_process=True, backfill="lane", **common))
    _, short = asyncio.run(run_simulation(str(path), in_process=True, backfill="short", **common))
    _, real = asyncio.run(run_simulation(str(path), in_process=False, backfill="lane", **common))
    starts = {j: r.start_s for j, r in lane.results.items()}
    assert starts == {"job-0": 0, "job-1": 1, "job-2": 600, "job-3": 10}
    assert {j: r.start_s for j, r in short.results.items()} == {"job-0": 0, "job-1": 1, "job-2": 2, "job-3": 600}
    assert {j: (r.start_s, r.allocation) for j, r in real.results.items()} == \
        {j: (r.start_s, r.allocation) for j, r in lane.results.items()}
