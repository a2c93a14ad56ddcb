"""Property test of heterogeneous jobs in placement (hypothesis), over random clusters and streams that mix
jobs of one shape with heterogeneous ones:

* nothing is ever allocated beyond capacity (the whole-log checker), and replay decides the same;
* a heterogeneous job is placed whole or not at all: every component, each on its own ``nodes`` nodes,
  no node twice in the job, each node's allocation its component's per-node request;
* jobs of one shape keep the gang rule (whole, distinct nodes, their request).
"""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from services.domain.cluster import request_of
from services.domain.hetjob import by_component, component_specs
from services.front.host.check import check_log
from services.placement.core import PlacementCore
from services.runtime.replay import replay_decisions
from tests.helpers import Feed, accepted, node

GIB = 1 << 30


def _shape(draw: st.DrawFn) -> dict:
    return {"gpus": draw(st.sampled_from([0, 0, 1, 2, 4])), "cpus_milli": draw(st.sampled_from([500, 2000, 8000])),
            "memory_bytes": draw(st.sampled_from([GIB, 4 * GIB, 24 * GIB])), "nodes": draw(st.sampled_from([1, 1, 2, 3])),
            "tasks_per_node": draw(st.sampled_from([1, 2]))}


@st.composite
def scenarios(draw: st.DrawFn):
    nodes = [node(f"n{i}", gpus=draw(st.sampled_from([0, 4, 8])), cpus=draw(st.sampled_from([4, 16, 32])),
                  memory=draw(st.sampled_from([16, 64])) * GIB) for i in range(draw(st.integers(1, 8)))]
    jobs = []
    for j in range(draw(st.integers(1, 16))):
        kw = _shape(draw)
        kw["time_limit_s"] = float(draw(st.integers(60, 3600)))
        parts = tuple(c.Component(**_shape(draw)) for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))))
        jobs.append((f"j{j:02d}", kw, parts))
    ends = draw(st.lists(st.integers(0, 15), max_size=9))
    mode = draw(st.sampled_from(["easy", "conservative", "greedy", "none"]))
    return nodes, jobs, ends, mode


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_heterogeneous_jobs_are_placed_whole_each_component_on_nodes_of_its_own(scenario):
    nodes, jobs, ends, mode = scenario
    f = Feed(PlacementCore(backfill=mode))
    for reg in nodes:
        f.evt("agent", reg)
        f.evt("inventory", c.NodeReady(node=reg.node, basis_seq=1))
    for job_id, kw, parts in jobs:
        job = accepted(job_id, **kw)
        f.evt("submission", msgspec.structs.replace(job, spec=msgspec.structs.replace(job.spec, components=parts)))
    for cycle in range(1, 4):
        pending = [j for j, _, _ in jobs if f.state.jobs.get(j).state.value == "PENDING"]
        f.evt("scheduling", c.SchedulingCycleCompleted(cycle=cycle, candidates=pending, basis_seq=f.seq))
        for decided in f.settle():
            if isinstance(decided, c.JobScheduled):
                spec = f.state.jobs.get(decided.job_id).spec
                _check(spec, decided.allocations)
                if spec.components:
                    event("a heterogeneous job placed")
        for k in ends[(cycle - 1) * 3: cycle * 3]:
            job = f.state.jobs.get(jobs[k % len(jobs)][0])
            if job.state.value == "SCHEDULED":
                f.evt("agent", c.JobSucceeded(job_id=job.job_id, attempt=job.attempt))
    report = check_log(f.records)
    assert report.ok, report.problems[:5]
    replayed = replay_decisions(PlacementCore(backfill=mode), f.records)
    assert replayed.reproduced == replayed.decisions and not replayed.mismatches


def _check(spec: c.JobSpec, allocs: list[c.NodeAllocation]) -> None:
    shapes = component_specs(spec)
    assert len(allocs) == sum(s.nodes for s in shapes)  # every component, whole
    assert len({a.node for a in allocs}) == len(allocs)  # no node twice in the job
    for shape, part in zip(shapes, by_component(spec, allocs)):
        req = request_of(shape)
        assert len(part) == shape.nodes
        for alloc in part:
            assert (alloc.cpus_milli, alloc.memory_bytes, len(alloc.device_ids), alloc.tasks) == (
                req.cpus_milli, req.memory_bytes, req.gpus, req.tasks_per_node)
