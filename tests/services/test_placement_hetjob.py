"""Heterogeneous jobs in placement (services/placement/hetjob.py), on the pure core: every component at
once or none, each on nodes of its own, in component order; a job that waits names the component; only
Horizon's own agents' nodes; a heterogeneous job reserves nothing and preempts nobody; replay is exact."""

from __future__ import annotations

import msgspec

from events import catalogue as c
from services.domain.hetjob import by_component, component_of, component_specs
from services.domain.quotas import amount_of
from services.front.host.check import check_log
from services.placement.core import PlacementCore
from services.runtime.replay import replay_decisions
from tests.helpers import Feed, accepted, node, placement_cycle, ready

GIB = 1 << 30


def cpu_node(name: str, cpus: int = 4, memory_gib: int = 16, backend: str = "") -> c.NodeRegistered:
    return msgspec.structs.replace(node(name, gpus=0, cpus=cpus, memory=memory_gib * GIB), backend=backend)


def het(job_id: str, *components: c.Component, **kw: object) -> c.JobAccepted:
    """A heterogeneous job: component 0 of one task with 8 GiB, then ``components``."""
    base = dict(gpus=0, cpus_milli=1000, memory_bytes=8 * GIB, nodes=1, tasks_per_node=1)
    base.update(kw)
    return msgspec.structs.replace(accepted(job_id, **base),
                                   spec=msgspec.structs.replace(accepted(job_id, **base).spec,
                                                                components=tuple(components)))


def scheduled(events: list[c.Event]) -> dict[str, list[c.NodeAllocation]]:
    return {e.job_id: list(e.allocations) for e in events if isinstance(e, c.JobScheduled)}


def blocked(events: list[c.Event]) -> dict[str, c.PlacementBlocked]:
    return {e.job_id: e for e in events if isinstance(e, c.PlacementBlocked)}


def test_components_are_placed_at_once_each_on_nodes_of_its_own_in_component_order() -> None:
    """Component 0: one task of 8 GiB; component 1: 2 nodes x 2 tasks of 1 CPU and 1 GiB, on three
    idle 4-CPU, 16 GiB nodes. The allocations are component 0's node, then component 1's two, never a
    node twice."""
    f = Feed(PlacementCore())
    ready(f, cpu_node("n1"), cpu_node("n2"), cpu_node("n3"))
    f.evt("submission", het("h", c.Component(nodes=2, tasks_per_node=2, cpus_milli=1000, memory_bytes=GIB)))
    out = scheduled(placement_cycle(f, 1, ["h"]))
    allocs = out["h"]
    assert [a.node for a in allocs] == ["n1", "n2", "n3"]
    assert [(a.cpus_milli, a.memory_bytes, a.tasks) for a in allocs] == [
        (1000, 8 * GIB, 1), (2000, 2 * GIB, 2), (2000, 2 * GIB, 2)]
    spec = f.state.jobs.jobs["h"].spec
    assert [[a.node for a in part] for part in by_component(spec, allocs)] == [["n1"], ["n2", "n3"]]
    assert component_of(spec, allocs) == [0, 1, 1]
    assert f.state.cluster.check(f.state.jobs) == []


def test_a_component_that_does_not_fit_holds_the_whole_job_and_is_named() -> None:
    """Two nodes: component 0 takes one, component 1 needs two of its own: nothing starts, and the
    reason is component 1's. A plain job behind it still starts (easy backfill)."""
    f = Feed(PlacementCore())
    ready(f, cpu_node("n1"), cpu_node("n2"))
    f.evt("submission", het("h", c.Component(nodes=2, cpus_milli=1000, memory_bytes=GIB)))
    f.evt("submission", accepted("plain", gpus=0, cpus_milli=1000, memory_bytes=GIB))
    out = placement_cycle(f, 1, ["h", "plain"])
    assert "h" not in scheduled(out) and "plain" in scheduled(out)
    why = blocked(out)["h"]
    assert why.reasons and all(r.reason.startswith("component 1: ") for r in why.reasons)
    assert why.earliest_start_ts is None and why.reserved_nodes == []  # a heterogeneous job reserves nothing
    assert not why.fits_nowhere  # its component 1 alone fits two empty nodes
    assert f.state.cluster.check(f.state.jobs) == []


def test_component_shapes_are_judged_each_against_its_nodes() -> None:
    """Component 0 asks 24 GiB: only the big node holds it; component 1's small tasks go elsewhere."""
    f = Feed(PlacementCore())
    ready(f, cpu_node("big", memory_gib=32), cpu_node("s1"), cpu_node("s2"))
    f.evt("submission", het("h", c.Component(nodes=2, cpus_milli=500, memory_bytes=GIB), memory_bytes=24 * GIB))
    allocs = scheduled(placement_cycle(f, 1, ["h"]))["h"]
    assert [a.node for a in allocs] == ["big", "s1", "s2"]


def test_a_component_that_could_never_fit_fits_nowhere() -> None:
    f = Feed(PlacementCore())
    ready(f, cpu_node("n1"), cpu_node("n2"))
    f.evt("submission", het("h", c.Component(nodes=1, cpus_milli=64000, memory_bytes=GIB)))
    why = blocked(placement_cycle(f, 1, ["h"]))["h"]
    assert why.fits_nowhere and why.reasons[0].reason.startswith("component 1: ")


def test_only_the_agents_nodes_run_a_heterogeneous_job() -> None:
    f = Feed(PlacementCore())
    ready(f, cpu_node("s1", backend="slurm"), cpu_node("s2", backend="slurm"), cpu_node("a1"), cpu_node("a2"))
    f.evt("submission", het("h", c.Component(nodes=1, cpus_milli=1000, memory_bytes=GIB)))
    assert [a.node for a in scheduled(placement_cycle(f, 1, ["h"]))["h"]] == ["a1", "a2"]
    g = Feed(PlacementCore())
    ready(g, cpu_node("s1", backend="slurm"), cpu_node("s2", backend="slurm"))
    g.evt("submission", het("h", c.Component(nodes=1, cpus_milli=1000, memory_bytes=GIB)))
    why = blocked(placement_cycle(g, 1, ["h"]))["h"]
    assert why.fits_nowhere and why.reasons[0].filter == "Hetjob"


def test_a_heterogeneous_job_costs_all_its_components() -> None:
    job = het("h", c.Component(nodes=2, tasks_per_node=2, cpus_milli=500, memory_bytes=GIB)).spec
    assert [s.nodes for s in component_specs(job)] == [1, 2]
    amount = amount_of(job)
    assert (amount.cpus_milli, amount.memory_bytes, amount.running_jobs) == (1000 + 4 * 500, 8 * GIB + 4 * GIB, 1)


def test_replay_is_exact_and_the_log_checks() -> None:
    f = Feed(PlacementCore())
    ready(f, cpu_node("n1"), cpu_node("n2"), cpu_node("n3"))
    f.evt("submission", het("h", c.Component(nodes=2, cpus_milli=1000, memory_bytes=GIB)))
    f.evt("submission", het("h2", c.Component(nodes=1, cpus_milli=1000, memory_bytes=GIB)))
    placement_cycle(f, 1, ["h", "h2"])
    assert check_log(f.records).ok  # the ledger follows the allocations, no node holds a job twice
    report = replay_decisions(PlacementCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches
