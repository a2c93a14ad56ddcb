"""The node index changes speed, never decisions: it agrees with a scan of every node (property test)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events import catalogue as c
from services.placement.core import place_job
from services.domain.fit.cycle import Overlay
from services.domain.fit.node import fit_node
from services.front.host.check import check_log
from services.domain.cluster import Request
from tests.helpers import Feed, accepted, node


def scan(cluster, req: Request, overlay: Overlay):
    """The reference: every node, sorted by (score, name)."""
    fits = []
    for name in sorted(cluster.nodes):
        n = cluster.nodes[name]
        if n.removed:
            continue
        fit = fit_node(n, req, overlay)
        if fit.ok:
            fits.append((fit.score, name, fit.devices))
    if len(fits) < req.nodes:
        return None
    fits.sort()
    return [(name, devices) for _, name, devices in fits[: req.nodes]]


@st.composite
def clusters(draw):
    from services.placement.core import PlacementCore

    f = Feed(PlacementCore())
    kinds = draw(st.lists(st.tuples(st.sampled_from([0, 2, 4, 8]), st.sampled_from(["a100", "h100"]),
                                    st.sampled_from([4, 16, 64])), min_size=1, max_size=4))
    count = draw(st.integers(min_value=1, max_value=12))
    for i in range(count):
        gpus, model, cpus = kinds[i % len(kinds)]
        f.evt("agent", node(f"n{i:02d}", gpus=gpus, gpu_type=model, cpus=cpus))
        if draw(st.booleans()) or i == 0:
            f.evt("inventory", c.NodeReady(node=f"n{i:02d}", basis_seq=1))
    # some running jobs
    for j in range(draw(st.integers(min_value=0, max_value=8))):
        gpus = draw(st.integers(min_value=0, max_value=4))
        f.evt("submission", accepted(f"r{j}", gpus=gpus, cpus_milli=draw(st.sampled_from([1000, 4000]))))
        state = f.state
        placed = place_job(state.cluster, Request(1000, 2**30, gpus, None, None, 0, 1, 1), Overlay())
        if placed.allocations:
            f.evt("placement", c.JobScheduled(job_id=f"r{j}", attempt=1, allocations=placed.allocations))
    return f.state.cluster


requests = st.builds(
    Request,
    cpus_milli=st.sampled_from([500, 1000, 4000, 16000]),
    memory_bytes=st.sampled_from([2**30, 2**36]),
    gpus=st.integers(min_value=0, max_value=8),
    gpu_type=st.sampled_from([None, "a100", "h100"]),
    gpu_variant=st.none(),
    gpu_memory_bytes=st.just(0),
    nodes=st.integers(min_value=1, max_value=3),
    tasks_per_node=st.just(1),
)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.lists(requests, min_size=1, max_size=6))
def test_index_and_scan_agree_and_never_overallocate(cluster, reqs):
    overlay = Overlay()
    from services.placement.index import NodeIndex

    index = NodeIndex(cluster, overlay)
    for req in reqs:
        expected = scan(cluster, req, overlay)
        placed = place_job(cluster, req, overlay, index)
        got = None if placed.allocations is None else [(a.node, a.device_ids) for a in placed.allocations]
        assert got == expected
        if placed.allocations:
            assert len({a.node for a in placed.allocations}) == req.nodes  # a gang, whole, on distinct nodes
            for alloc in placed.allocations:
                overlay.take(alloc)
                index.moved(alloc.node)
    # nothing beyond capacity: every node's taken resources fit
    for name, n in cluster.nodes.items():
        assert n.used_cpus_milli + overlay.cpus_milli.get(name, 0) <= n.cpus_milli
        taken = overlay.devices.get(name, set())
        assert not (taken & set(n.used_devices)) and taken <= set(n.gpus)


def test_a_full_cycle_is_a_valid_log():
    from services.placement.core import PlacementCore

    f = Feed(PlacementCore())
    for i in range(50):
        f.evt("agent", node(f"n{i:02d}"))
        f.evt("inventory", c.NodeReady(node=f"n{i:02d}", basis_seq=1))
    for j in range(500):
        f.evt("submission", accepted(f"j{j:03d}", gpus=1 + j % 4))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=[f"j{j:03d}" for j in range(500)], queued=500,
                                                   basis_seq=1))
    f.settle()
    result = check_log(f.records)
    assert result.ok, result.problems[:3]
    assert result.scheduled > 100
