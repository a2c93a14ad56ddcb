"""A GPU whose agent reported it unhealthy (``GpuDevice.health``) is neither free nor capacity:
placement never chooses it, the capacity filter does not count it, the scores count only the healthy
ones; the node keeps it (a job may still hold it) and the nodes table says why it is out."""

from __future__ import annotations

import json

import msgspec
import pytest

from events import catalogue as c
from projections.standing import NODE_COLUMNS, node_rows
from services.domain.cluster import Cluster, request_of
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.fit.framework import explain
from services.domain.fit.node import fit_node
from services.domain.preemption.state import PreemptionState
from services.domain.queue.state import SchedulingState
from services.placement.index import NodeIndex
from services.placement.place import place_job
from tests.helpers import node

XID79 = "XID 79: fell off the bus"


def sick(reg: c.NodeRegistered, **health: str) -> c.NodeRegistered:
    """``reg`` with the named devices unhealthy."""
    return msgspec.structs.replace(reg, gpus=[msgspec.structs.replace(d, health=health.get(d.id, d.health))
                                              for d in reg.gpus])


def cluster_of(*registrations: c.NodeRegistered) -> Cluster:
    cluster = Cluster()
    for i, reg in enumerate(registrations, 1):
        cluster.apply(reg, i)
        cluster.apply(c.NodeReady(node=reg.node), 100 + i)
    return cluster


def fit(cluster: Cluster, name: str, **spec: object):
    spec.setdefault("cpus_milli", 1000)
    return fit_node(cluster.nodes[name], request_of(c.JobSpec(tenant="t", **spec)), Overlay(), Context())


def test_an_unhealthy_gpu_is_no_capacity_and_never_chosen():
    cluster = cluster_of(sick(node("a", gpus=8), gpu3=XID79))
    whole = fit(cluster, "a", gpus=8)
    assert not whole.ok and whole.filter == "GpuCapacity"
    assert explain(whole.filter, whole.detail, whole.req) == "has 7 GPUs, needs 8"
    seven = fit(cluster, "a", gpus=7)
    assert seven.ok and "gpu3" not in seven.devices
    # gpu0-2 and gpu4-7 taken: the one device not in use is the broken one, so nothing is free
    a = cluster.nodes["a"]
    taken = ["gpu0", "gpu1", "gpu2", "gpu4", "gpu5", "gpu6", "gpu7"]
    a.used_devices.update(dict.fromkeys(taken, "other"))
    a.jobs["other"] = c.NodeAllocation(node="a", device_ids=taken, cpus_milli=1000)
    one = fit(cluster, "a", gpus=1)
    assert not one.ok and one.filter == "GpuFree"
    assert a.free_devices() == [] and a.status == "allocated"
    assert a.unhealthy == {"gpu3": XID79} and a.unhealthy_gpus == 1


def test_scores_count_only_the_healthy_gpus():
    # 8 GPUs, 2 unhealthy: G = 6 healthy. A 2-GPU job on the idle node: binpack = (G - g_after)/G
    # = (6 - 4)/6 = 1/3 (with all 8 healthy it would be (8 - 6)/8 = 1/4); it breaks an idle node it
    # does not fill: fragmentation 1 - 1/2.
    cluster = cluster_of(sick(node("a", gpus=8), gpu0="lost: NVML cannot reach the device (GPU is lost)",
                              gpu7=XID79))
    two = fit(cluster, "a", gpus=2)
    assert two.parts["binpack"] == pytest.approx(2 / 6)
    assert two.parts["fragmentation"] == pytest.approx(0.5)
    six = fit(cluster, "a", gpus=6)  # fills every healthy GPU: nothing broken
    assert six.parts["binpack"] == pytest.approx(1.0) and six.parts["fragmentation"] == pytest.approx(1.0)
    assert six.devices == [f"gpu{i}" for i in range(1, 7)]


def test_the_node_index_tells_a_node_with_a_broken_gpu_from_its_twins():
    # n0 and n1 are the same hardware; n1's gpu0 is broken and in use by a job, n0's gpu0 is healthy
    # and in use: the same free ids, but n1 has one GPU less of capacity.
    cluster = cluster_of(node("n0", gpus=2, numa_split=False), sick(node("n1", gpus=2, numa_split=False),
                                                                      gpu0=XID79))
    for name in ("n0", "n1"):
        cluster.nodes[name].used_devices["gpu0"] = "other"
    index = NodeIndex(cluster, Overlay())
    assert len(index.groups) == 2
    req = request_of(c.JobSpec(tenant="t", gpus=2, cpus_milli=1000))
    for use_index in (True, False):
        placed = place_job(cluster, req, Overlay(), NodeIndex(cluster, Overlay()) if use_index else None)
        assert placed.allocations is None
        assert {r.reason for r in placed.reasons} == {"has 1 GPUs, needs 2", "too few free GPUs (needs 2)"}
    one = request_of(c.JobSpec(tenant="t", gpus=1, cpus_milli=1000))
    placed = place_job(cluster, one, Overlay(), NodeIndex(cluster, Overlay()))
    assert placed.allocations is not None and placed.allocations[0].device_ids == ["gpu1"]


def test_a_reregistration_marking_a_held_gpu_unhealthy_keeps_the_ledger():
    cluster = cluster_of(node("a", gpus=4))
    a = cluster.nodes["a"]
    a.used_devices["gpu1"] = "j1"
    a.jobs["j1"] = c.NodeAllocation(node="a", device_ids=["gpu1"], cpus_milli=1000)
    a.used_cpus_milli = 1000
    cluster.apply(sick(node("a", gpus=4), gpu1=XID79), 50)  # the agent re-registers with the reason
    a = cluster.nodes["a"]
    assert a.used_devices == {"gpu1": "j1"} and a.ready
    assert [d.id for d in a.free_devices()] == ["gpu0", "gpu2", "gpu3"]
    assert fit(cluster, "a", gpus=4).filter == "GpuCapacity"


def test_nodes_table_rows_say_simulated_isolation_and_why_a_gpu_is_out():
    pstate = PreemptionState(SchedulingState())
    real = msgspec.structs.replace(sick(node("g1", gpus=2), gpu1=XID79), isolation="cgroup v1 (memory cpu)")
    dev = msgspec.structs.replace(node("node-00", gpus=2), simulated=True, isolation="none: no writable cgroup")
    for i, reg in enumerate((real, dev), 1):
        pstate.cluster.apply(reg, i)
    rows, _ = node_rows(pstate)
    by_name = {r[0]: dict(zip(NODE_COLUMNS, r, strict=True)) for r in rows}
    assert by_name["g1"]["simulated"] == 0 and by_name["g1"]["isolation"] == "cgroup v1 (memory cpu)"
    assert json.loads(by_name["g1"]["unhealthy"]) == {"gpu1": XID79}
    assert by_name["node-00"]["simulated"] == 1 and json.loads(by_name["node-00"]["unhealthy"]) == {}
