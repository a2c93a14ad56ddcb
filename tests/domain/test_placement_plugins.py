"""Placement plugins: each score with worked arithmetic, each filter with its explanation, profiles,
gangs inside one NVLink domain, advance reservations."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.placement.core import PlacementCore
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.fit.node import fit_node
from services.domain.fit.framework import DEFAULT_WEIGHTS
from services.domain.fit.profile import Profile
from services.domain.cluster import Cluster, request_of
from tests.helpers import Feed, accepted, node, placement_cycle, ready


def _cluster(*registrations: c.NodeRegistered) -> Cluster:
    cluster = Cluster()
    for i, reg in enumerate(registrations, 1):
        cluster.apply(reg, i)
        cluster.apply(c.NodeReady(node=reg.node), 100 + i)
    return cluster


def _take(cluster: Cluster, name: str, devices: list[str], cpus: int = 0) -> None:
    """Mark devices (and CPUs) of a node as used by some running job."""
    n = cluster.nodes[name]
    for d in devices:
        n.used_devices[d] = "other"
    n.used_cpus_milli += cpus
    n.jobs["other"] = c.NodeAllocation(node=name, device_ids=devices, cpus_milli=cpus)


def _spec(**kw) -> c.JobSpec:
    kw.setdefault("cpus_milli", 1000)
    return c.JobSpec(tenant="t", **kw)


def _fit(cluster: Cluster, name: str, spec: c.JobSpec, profile: Profile | None = None):
    ctx = Context(profile or Profile())
    return fit_node(cluster.nodes[name], request_of(spec), Overlay(), ctx)


# ----------------------------------------------------------------------------------- scores


@pytest.mark.parametrize(("used", "gpus", "binpack", "fragmentation"), [
    # 8-GPU node. binpack = (G - g_after)/G; fragmentation loses 1/2 when an idle node is broken into
    (0, 2, 2 / 8, 0.5),  # idle node, 2 of 8: (8-6)/8 = 0.25, breaks a whole node
    (0, 8, 8 / 8, 1.0),  # idle node filled: 1.0, nothing broken
    (4, 2, 6 / 8, 1.0),  # half-used node: (8-2)/8 = 0.75
    (6, 2, 8 / 8, 1.0),  # fills the node: 1.0
])
def test_binpack_and_fragmentation_by_hand(used, gpus, binpack, fragmentation):
    cluster = _cluster(node("a", gpus=8))
    _take(cluster, "a", [f"gpu{i}" for i in range(used)], cpus=1000 * used)
    fit = _fit(cluster, "a", _spec(gpus=gpus))
    assert fit.parts["binpack"] == pytest.approx(binpack)
    assert fit.parts["spread"] == pytest.approx(1 - binpack)
    assert fit.parts["fragmentation"] == pytest.approx(fragmentation)


def test_the_weighted_sum_by_hand():
    """Default weights binpack 10, spread 0, numa 2, interconnect 2, fragmentation 5, taints 20, affinity 5.
    These devices name no NVLink group, so a 2-GPU job scores interconnect 0. On an idle 8-GPU node:
    10*0.25 + 0 + 2*1 + 2*0 + 5*0.5 + 20*1 + 5*1 = 32.0; on a node with 4 used:
    10*0.75 + 2 + 0 + 5*1 + 20 + 5 = 39.5: the fuller node wins."""
    cluster = _cluster(node("idle", gpus=8), node("half", gpus=8))
    _take(cluster, "half", ["gpu0", "gpu1", "gpu2", "gpu3"], cpus=4000)
    assert dict(DEFAULT_WEIGHTS) == {"binpack": 10, "spread": 0, "numa": 2, "interconnect": 2, "fragmentation": 5,
                                     "taints": 20, "node_affinity": 5, "locality": 10, "cost": 0}
    # locality scores 0 everywhere for a job that names no dataset, and cost weighs 0: neither adds anything
    idle, half = _fit(cluster, "idle", _spec(gpus=2)), _fit(cluster, "half", _spec(gpus=2))
    assert idle.score == (-32.0, "idle") and half.score == (-39.5, "half")
    # a spread profile (spread 10, binpack 0) turns it round
    spread = Profile("spread", {**DEFAULT_WEIGHTS, "binpack": 0.0, "spread": 10.0})
    s_idle, s_half = _fit(cluster, "idle", _spec(gpus=2), spread), _fit(cluster, "half", _spec(gpus=2), spread)
    assert s_idle.score[0] == pytest.approx(-(10 * 0.75 + 2 + 0 + 5 * 0.5 + 20 + 5))  # -37.0
    assert s_half.score[0] == pytest.approx(-(10 * 0.25 + 2 + 0 + 5 * 1.0 + 20 + 5))  # -34.5
    assert s_idle.score < s_half.score


def test_numa_and_interconnect_scores():
    """gpu0-3 on NUMA 0 / NVLink group nv0, gpu4-7 on NUMA 1 / nv1. With gpu0 and gpu4 used, a 4-GPU
    job cannot stay on one NUMA node or one group: numa 0, interconnect 0; a 3-GPU job can: 1, 1."""
    devices = [c.GpuDevice(id=f"gpu{i}", type="a100", memory_bytes=80 << 30, numa_node=i // 4,
                           interconnect=f"nv{i // 4}") for i in range(8)]
    reg = c.NodeRegistered(node="a", cpus_milli=64000, memory_bytes=512 << 30, gpus=devices)
    cluster = _cluster(reg)
    _take(cluster, "a", ["gpu0", "gpu4"])
    four, three = _fit(cluster, "a", _spec(gpus=4)), _fit(cluster, "a", _spec(gpus=3))
    assert (four.parts["numa"], four.parts["interconnect"]) == (0.0, 0.0)
    assert (three.parts["numa"], three.parts["interconnect"]) == (1.0, 1.0)
    assert three.devices == ["gpu1", "gpu2", "gpu3"]  # the smallest group that holds it
    # devices without an interconnect id share no fabric: interconnect 0 for a multi-GPU job
    plain = _cluster(node("b", gpus=8))
    assert _fit(plain, "b", _spec(gpus=2)).parts["interconnect"] == 0.0
    assert _fit(plain, "b", _spec(gpus=1)).parts["interconnect"] == 1.0


def test_a_cpu_job_keeps_off_free_gpus_and_prefer_no_schedule_taints_and_preferred_affinity_score():
    cluster = _cluster(node("gpu", gpus=8), node("cpu", gpus=0), node("tainted", gpus=0),
                       c.NodeRegistered(node="zoned", cpus_milli=64000, memory_bytes=512 << 30,
                                        labels={"zone": "eu"}))
    cluster.nodes["tainted"].taints = [c.Taint(key="old", effect="PreferNoSchedule")]
    job = _spec()
    assert _fit(cluster, "gpu", job).parts["fragmentation"] == 0.0  # idle and not filled (1/2), GPUs left (1/2)
    assert _fit(cluster, "cpu", job).parts["fragmentation"] == 0.5
    assert _fit(cluster, "tainted", job).parts["taints"] == 0.0
    tolerant = _spec(tolerations=(c.Toleration(key="old", operator="Exists"),))
    assert _fit(cluster, "tainted", tolerant).parts["taints"] == 1.0
    prefers = _spec(affinity=c.Affinity(node_preferred=[
        c.NodeSelectorRequirement(key="zone", values=["eu"]), c.NodeSelectorRequirement(key="ssd", operator="Exists")]))
    assert _fit(cluster, "zoned", prefers).parts["node_affinity"] == 0.5
    assert _fit(cluster, "cpu", prefers).parts["node_affinity"] == 0.0


# ----------------------------------------------------------------------------------- filters


def _feed(backfill: str = "easy") -> Feed:
    return Feed(PlacementCore(backfill=backfill))




def _labelled(name: str, gpus: int = 8, **labels: str) -> c.NodeRegistered:
    reg = node(name, gpus=gpus)
    import msgspec

    return msgspec.structs.replace(reg, labels=labels)


def test_each_filter_explains_how_many_nodes_it_rejected_and_why():
    f = _feed()
    ready(f, *[_labelled(f"eu{i}", zone="eu") for i in range(3)], *[_labelled(f"us{i}", zone="us") for i in range(2)])
    f.evt("inventory", c.NodeTaintsChanged(node="us1", taints=[c.Taint(key="gpu", value="reserved")]))
    f.evt("submission", accepted("picky", gpus=4, node_selector={"zone": "us"},
                                 affinity=c.Affinity(node_required=[c.NodeSelectorRequirement(key="zone", operator="NotIn",
                                                                                              values=["ap"])])))
    f.evt("submission", accepted("filler", gpus=8, node_selector={"zone": "us"}))
    f.evt("submission", accepted("wide", gpus=16))
    out = placement_cycle(f, 1, ["filler", "picky", "wide"])
    sched = {e.job_id: e for e in out if isinstance(e, c.JobScheduled)}
    blocked = {e.job_id: e for e in out if isinstance(e, c.PlacementBlocked)}
    assert sched["filler"].allocations[0].node == "us0"
    reasons = {(r.filter, r.reason, r.nodes) for r in blocked["picky"].reasons}
    assert reasons == {("NodeSelector", "labels do not match the node selector zone=us", 3),
                       ("Taints", "taint gpu=reserved:NoSchedule not tolerated", 1),
                       ("GpuFree", "too few free GPUs (needs 4)", 1)}
    assert not blocked["picky"].fits_nowhere  # us0 frees up when filler ends
    assert blocked["wide"].fits_nowhere and blocked["wide"].reasons[0].reason == "has 8 GPUs, needs 16"


def test_taints_tolerations_and_required_node_affinity():
    f = _feed()
    ready(f, _labelled("old", gen="a100"), _labelled("new", gen="h100"))
    f.evt("inventory", c.NodeTaintsChanged(node="new", taints=[c.Taint(key="team", value="ml", effect="NoSchedule")]))
    f.evt("submission", accepted("any", gpus=1))
    f.evt("submission", accepted("tolerant", gpus=1, tolerations=(c.Toleration(key="team", value="ml"),),
                                 affinity=c.Affinity(node_required=[c.NodeSelectorRequirement(key="gen", values=["h100"])])))
    out = placement_cycle(f, 1, ["any", "tolerant"])
    nodes = {e.job_id: e.allocations[0].node for e in out if isinstance(e, c.JobScheduled)}
    assert nodes == {"any": "old", "tolerant": "new"}


def test_job_affinity_and_anti_affinity_by_topology_key():
    f = _feed()
    ready(f, _labelled("r1a", rack="r1"), _labelled("r1b", rack="r1"), _labelled("r2a", rack="r2"))
    f.evt("submission", accepted("db", gpus=1, labels={"app": "db"}))
    f.evt("submission", accepted("web", gpus=1, labels={"app": "web"},
                                 affinity=c.Affinity(job_affinity=[c.AffinityTerm(match_labels={"app": "db"},
                                                                                  topology_key="rack")])))
    f.evt("submission", accepted("replica", gpus=1, labels={"app": "db"},
                                 affinity=c.Affinity(job_anti_affinity=[c.AffinityTerm(match_labels={"app": "db"},
                                                                                       topology_key="rack")])))
    out = placement_cycle(f, 1, ["db", "web", "replica"])
    nodes = {e.job_id: e.allocations[0].node for e in out if isinstance(e, c.JobScheduled)}
    rack = {"r1a": "r1", "r1b": "r1", "r2a": "r2"}
    assert rack[nodes["web"]] == rack[nodes["db"]]  # near the database, placed earlier in the same cycle
    assert rack[nodes["replica"]] != rack[nodes["db"]]  # never in the database's rack
    # a second replica has no rack left: both racks hold a db job
    f.evt("placement", c.PlacementCycleCompleted(cycle=1))
    f.evt("submission", accepted("replica2", gpus=1, labels={"app": "db"},
                                 affinity=c.Affinity(job_anti_affinity=[c.AffinityTerm(match_labels={"app": "db"},
                                                                                       topology_key="rack")])))
    [blocked, _] = placement_cycle(f, 2, ["replica2"])
    assert isinstance(blocked, c.PlacementBlocked)
    assert {(r.filter, r.reason) for r in blocked.reasons} == {("JobAntiAffinity", "a job with app=db runs in its rack")}


def test_a_four_node_gang_lands_inside_one_nvlink_domain():
    f = _feed()
    # domain A: a0..a3 (a0 busy); domain B: b0..b4, all free. Best fit alone would mix a1-a3 (fuller? no:
    # all free nodes tie) — the gang needs 4 whole nodes: only B has 4 free, so it stays inside B.
    ready(f, *[_labelled(f"a{i}", **{"nvlink-domain": "A"}) for i in range(4)],
           *[_labelled(f"b{i}", **{"nvlink-domain": "B"}) for i in range(5)])
    f.evt("submission", accepted("busy", gpus=8))
    out = placement_cycle(f, 1, ["busy"])
    assert out[0].allocations[0].node == "a0"
    f.evt("placement", c.PlacementCycleCompleted(cycle=1))
    f.evt("submission", accepted("gang", gpus=8, nodes=4))
    [gang, _] = placement_cycle(f, 2, ["gang"])
    assert sorted(a.node for a in gang.allocations) == ["b0", "b1", "b2", "b3"]
    assert all(len(a.device_ids) == 8 for a in gang.allocations)


def test_a_gang_prefers_one_domain_even_when_a_mix_scores_as_well():
    f = _feed()
    ready(f, *[_labelled(f"a{i}", **{"nvlink-domain": "A"}) for i in range(3)],
           *[_labelled(f"b{i}", **{"nvlink-domain": "B"}) for i in range(4)])
    f.evt("submission", accepted("gang", gpus=8, nodes=4))
    [gang, _] = placement_cycle(f, 1, ["gang"])
    assert sorted(a.node for a in gang.allocations) == ["b0", "b1", "b2", "b3"]  # not a0, a1, a2, b0


def test_profiles_are_configured_by_operators_and_jobs_name_them():
    f = _feed()
    ready(f, node("x", gpus=8), node("y", gpus=8))
    f.evt("submission", accepted("seed", gpus=4))
    placement_cycle(f, 1, ["seed"])
    f.evt("placement", c.PlacementCycleCompleted(cycle=1))
    f.admin("profile", c.ProfileConfigured(name="spread", weights={"binpack": 0, "spread": 10, "fragmentation": 0}))
    f.admin("profile", c.ProfileConfigured(name="bad", weights={"speed": 1}))
    f.evt("submission", accepted("packed", gpus=2))
    f.evt("submission", accepted("spread", gpus=2, profile="spread"))
    f.evt("submission", accepted("lost", gpus=2, profile="nope"))
    out = placement_cycle(f, 2, ["packed", "spread", "lost"])
    [rejected] = [e for e in out if isinstance(e, c.ConfigRejected)]
    assert rejected.verb == "profile" and "speed" in rejected.reason
    nodes = {e.job_id: e.allocations[0].node for e in out if isinstance(e, c.JobScheduled)}
    assert nodes["packed"] == "x"  # next to seed
    assert nodes["spread"] == "y"  # the emptier node
    [lost] = [e for e in out if isinstance(e, c.PlacementBlocked)]
    assert lost.fits_nowhere and "profile 'nope' is not configured" in lost.reasons[0].reason


def test_advance_reservations_hold_nodes_for_one_account_in_their_window():
    f = _feed()
    ready(f, node("r", gpus=8), node("s", gpus=8))
    t = f.time
    f.admin("reservation", c.ReservationConfigured(name="demo", account="vip", nodes=["r"], start_ts=t + 3600,
                                                   end_ts=t + 7200))
    f.admin("reservation", c.ReservationConfigured(name="broken", account="vip", nodes=["r"], start_ts=t + 10,
                                                   end_ts=t))
    f.evt("submission", accepted("short", gpus=8, account="other", time_limit_s=600))  # ends before the window
    f.evt("submission", accepted("long", gpus=8, account="other", time_limit_s=7200))  # would overlap it
    f.evt("submission", accepted("long2", gpus=8, account="other", time_limit_s=7200))
    f.evt("submission", accepted("vip", gpus=8, account="vip", time_limit_s=7200))
    out = placement_cycle(f, 1, ["long", "short", "long2", "vip"])
    [rejected] = [e for e in out if isinstance(e, c.ConfigRejected)]
    assert "window must end after it starts" in rejected.reason
    nodes = {e.job_id: e.allocations[0].node for e in out if isinstance(e, c.JobScheduled)}
    assert nodes == {"long": "s", "short": "r"}  # long kept off r; short fits before the window
    blocked = {e.job_id: e for e in out if isinstance(e, c.PlacementBlocked)}
    assert any(r.filter == "Reservation" and "reserved for account vip (demo)" in r.reason
               for r in blocked["long2"].reasons)


# ----------------------------------------------------------------------------------- the framework


def test_the_registry_is_the_one_list_of_plugins():
    from services.domain.fit.framework import FILTERS, NEVER_FILTERS, SCORE_PLUGINS, SCORES
    from services.domain.fit.profile import BACKFILL_MODES
    from services.placement.backfill import MODES

    assert SCORE_PLUGINS == tuple(s.name for s in SCORES)
    assert dict(DEFAULT_WEIGHTS) == {s.name: s.default_weight for s in SCORES}
    assert NEVER_FILTERS == {"Partition", "GpuCapacity", "CpuCapacity", "MemoryCapacity", "NodeSelector",
                             "NodeAffinity", "Taints", "Constraint", "NodeName"}
    assert [f.name for f in FILTERS][:3] == ["Partition", "NodeReady", "Preemption"]
    assert [f.name for f in FILTERS][-3:] == ["GpuFree", "CpuFree", "MemoryFree"]
    assert tuple(MODES) == BACKFILL_MODES


def test_a_new_score_plugin_needs_no_second_list(monkeypatch):
    """A plugin added to SCORES is weighed by the profile under its own name."""
    from services.domain.fit import framework, node as fit_module

    class Even:
        name, default_weight = "even", 0.0

        def score(self, cyc) -> float:
            return 1.0 if int(cyc.node.name[-1]) % 2 == 0 else 0.0

    monkeypatch.setattr(fit_module, "SCORES", framework.SCORES + (Even(),))
    cluster = _cluster(node("n1", gpus=8), node("n2", gpus=8))
    weights = {**DEFAULT_WEIGHTS, "even": 100.0}
    one, two = (_fit(cluster, n, _spec(gpus=1), Profile("p", weights)) for n in ("n1", "n2"))
    assert (one.parts["even"], two.parts["even"]) == (0.0, 1.0)
    assert two.score[0] - one.score[0] == pytest.approx(-100.0)


def test_skipping_filters_that_do_not_apply_changes_no_answer():
    """Fitter runs only the filters whose relevant() is true; running them all gives the same fits."""
    from services.domain.fit.framework import FILTERS
    from services.domain.fit.node import Fitter

    import msgspec

    cluster = _cluster(node("n1", gpus=8), msgspec.structs.replace(node("n2", gpus=4), labels={"zone": "eu"}),
                       node("n3", gpus=0))
    _take(cluster, "n1", ["gpu0", "gpu1", "gpu2"], cpus=2000)
    specs = [_spec(gpus=g, node_selector=sel) for g in (0, 1, 5, 8) for sel in ({}, {"zone": "eu"})]
    for spec in specs:
        req = request_of(spec)
        skipping = Fitter(req, Context())
        every = Fitter(req, Context())
        every.checks = tuple((f.name, f.check) for f in FILTERS)
        assert len(skipping.checks) < len(every.checks)
        for name in ("n1", "n2", "n3"):
            a, b = skipping(cluster.nodes[name], Overlay()), every(cluster.nodes[name], Overlay())
            assert (a.devices, a.score, a.filter, a.detail, a.parts) == (b.devices, b.score, b.filter, b.detail, b.parts)
