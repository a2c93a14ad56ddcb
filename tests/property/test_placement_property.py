"""Property tests of placement over random clusters and job streams (hypothesis):

* no device, CPU or byte of memory is ever allocated beyond capacity (the whole-log checker);
* a gang is placed whole or not at all, one allocation per node, each the job's per-node request;
* every placement satisfies every filter of the job: ready node, selector, required node affinity,
  NoSchedule/NoExecute taints tolerated, GPU type and memory, inter-job anti-affinity.

And the backfill property through the simulator: with exact estimates, no backfilled job ever
delays the head's reservation (every head starts no later than the first reservation it was
given). Under ``conservative`` the deeper reservations are recomputed every cycle and may shift
when the jobs ahead of them start on other nodes than their reservations named; the head's holds.
"""

from __future__ import annotations

import asyncio

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from services.placement.core import PlacementCore
from services.domain.fit.filters.labels import requirement_holds
from services.domain.taints import untolerated
from services.front.host.check import check_log
from services.domain.cluster import request_of
from tests.helpers import Feed, accepted, node

ZONES = ["eu", "us"]
TAINTS = [None, c.Taint(key="gpu", value="bad"), c.Taint(key="spot", effect="NoExecute"),
          c.Taint(key="old", effect="PreferNoSchedule")]


@st.composite
def scenarios(draw):
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        reg = node(f"n{i}", gpus=draw(st.sampled_from([0, 2, 4, 8])), gpu_type=draw(st.sampled_from(["a100", "h100"])),
                   cpus=draw(st.sampled_from([4, 16])))
        labels = {"zone": draw(st.sampled_from(ZONES)), "rack": f"r{i % 3}"}
        nodes.append((msgspec.structs.replace(reg, labels=labels), draw(st.sampled_from(TAINTS))))
    jobs = []
    for j in range(draw(st.integers(1, 25))):
        kw: dict = {"gpus": draw(st.sampled_from([0, 1, 2, 4, 8])), "cpus_milli": draw(st.sampled_from([500, 2000, 8000])),
                    "nodes": draw(st.sampled_from([1, 1, 1, 2, 3])), "time_limit_s": float(draw(st.integers(60, 3600)))}
        if kw["gpus"] and draw(st.booleans()):
            kw["gpu_type"] = draw(st.sampled_from(["a100", "h100"]))
        if draw(st.booleans()):
            kw["node_selector"] = {"zone": draw(st.sampled_from(ZONES))}
        if draw(st.booleans()):
            kw["tolerations"] = (c.Toleration(operator="Exists"),)
        if draw(st.integers(0, 3)) == 0:
            kw["affinity"] = c.Affinity(node_required=[c.NodeSelectorRequirement(key="rack", operator="NotIn",
                                                                                 values=["r0"])])
        if draw(st.integers(0, 3)) == 0:
            kw["labels"] = {"app": "db"}
            kw["affinity"] = c.Affinity(job_anti_affinity=[c.AffinityTerm(match_labels={"app": "db"},
                                                                          topology_key="node")])
        jobs.append((f"j{j:02d}", kw))
    ends = draw(st.lists(st.integers(0, 24), max_size=10))
    mode = draw(st.sampled_from(["easy", "conservative", "greedy", "none"]))
    return nodes, jobs, ends, mode


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_placements_respect_capacity_gangs_and_every_filter(scenario):
    nodes, jobs, ends, mode = scenario
    f = Feed(PlacementCore(backfill=mode))
    for reg, taint in nodes:
        f.evt("agent", reg)
        f.evt("inventory", c.NodeReady(node=reg.node, basis_seq=1))
        if taint is not None:
            f.evt("inventory", c.NodeTaintsChanged(node=reg.node, taints=[taint]))
    for job_id, kw in jobs:
        f.evt("submission", accepted(job_id, **kw))
    specs = {job_id: f.state.jobs.get(job_id).spec for job_id, _ in jobs}
    cycle = 0
    for round_ in range(3):
        cycle += 1
        pending = [j for j, _ in jobs if f.state.jobs.get(j).state.value == "PENDING"]
        f.evt("scheduling", c.SchedulingCycleCompleted(cycle=cycle, candidates=pending, basis_seq=f.seq))
        out = f.settle()
        for event in out:
            if isinstance(event, c.JobScheduled):
                _check_placement(f, specs[event.job_id], event)
        f.evt("placement", c.PlacementCycleCompleted(cycle=cycle))  # no-op if already folded
        for k in ends[round_ * 3: round_ * 3 + 3]:
            job_id = jobs[k % len(jobs)][0]
            job = f.state.jobs.get(job_id)
            if job.state.value == "SCHEDULED":
                f.evt("agent", c.JobSucceeded(job_id=job_id, attempt=job.attempt))
    report = check_log(f.records)
    assert report.ok, report.problems[:5]


def _check_placement(f: Feed, spec: c.JobSpec, event: c.JobScheduled) -> None:
    req = request_of(spec)
    allocs = event.allocations
    assert len(allocs) == spec.nodes and len({a.node for a in allocs}) == spec.nodes  # whole gang, distinct nodes
    cluster = f.state.cluster
    for alloc in allocs:
        n = cluster.nodes[alloc.node]
        assert n.schedulable
        assert alloc.cpus_milli == req.cpus_milli and alloc.memory_bytes == req.memory_bytes
        assert len(alloc.device_ids) == req.gpus
        for device in alloc.device_ids:
            d = n.gpus[device]
            assert spec.gpu_type is None or d.type == spec.gpu_type
        assert all(n.labels.get(k) == v for k, v in spec.node_selector.items())
        for r in req.required:
            assert requirement_holds(n.labels, r)
        assert not untolerated(spec.tolerations, n.taints, ("NoSchedule", "NoExecute"))
        if spec.labels.get("app") == "db":  # anti-affinity by node: no other db job on the node at that moment
            others = [j for j in n.jobs if j != event.job_id and f.state.jobs.get(j).spec.labels.get("app") == "db"]
            assert not others, (event.job_id, alloc.node, others)


# ---------------------------------------------------------------------------------------------
# Backfill never delays the reservation (through the simulator, exact estimates)


@st.composite
def workloads(draw):
    from services.front.sim.traces import SimJob

    out = []
    t = 0.0
    for i in range(draw(st.integers(5, 40))):
        t += draw(st.sampled_from([0, 0, 10, 60, 300]))
        run = float(draw(st.sampled_from([30, 120, 600, 1800])))
        out.append(SimJob(f"w{i:03d}", t, run, run, procs=draw(st.sampled_from([1, 2, 4, 8, 16]))))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(["easy", "conservative", "short"]))
def test_with_exact_estimates_no_backfilled_job_delays_a_reservation(jobs, mode):
    from events.codec import decode
    from services.nodes.spec import NodeSpec
    from services.front.sim.driver import SimSettings, make_cores, simulate
    from services.front.sim.buses import InProcessBus

    settings_ = SimSettings(policy="fcfs", backfill=mode)
    nodes = [NodeSpec(f"n{i:02d}", 1000, 1 << 40) for i in range(16)]
    bus = InProcessBus(make_cores(settings_), keep_records=True)
    run = asyncio.run(simulate(jobs, nodes, settings_, bus))
    promised: dict[str, float] = {}
    heads: set[int] = set()
    for record in bus.records:
        if ".PlacementBlocked." in record.subject:
            event = decode(record.data)
            if event.earliest_start_ts is not None and event.cycle not in heads:
                heads.add(event.cycle)  # the cycle's first reservation is the head's
                promised.setdefault(event.job_id, event.earliest_start_ts)  # the first promise made
    assert not run.unstarted
    for job_id, at in promised.items():
        assert run.results[job_id].start_s <= at + 1e-6, (job_id, run.results[job_id].start_s, at)
