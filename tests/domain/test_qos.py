"""QoS classes and overcommit (issue 19), the pure cores: classes from requests and limits, the
submission fields, the fit against capacity x ratio with the arithmetic worked, placement over an
overcommitted node, inventory's answer to ``horizon node set``, the evictions a memory-pressure measure
calls for, the cgroup limits an agent writes, and the agent's memory watch. Every decision replays."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from services.nodes.backends.process.cgroups import Hierarchy, Limits, cpu_shares, cpu_weight
from services.nodes.backends.process.cpu_pinning import Machine
from services.nodes.backends.process.executors import ProcessExecutor
from services.nodes.agent.memory_pressure import MemoryWatch, default_reserve
from services.domain.cluster import Cluster, request_of
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.fit.framework import explain
from services.domain.fit.node import fit_node
from services.domain.qos import memory_victims, overcommitted, qos_class
from services.front.host.check import check_log
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.runtime.replay import replay_decisions
from services.submission.core import SubmissionCore
from tests.helpers import Feed, accepted, node

GiB = 2**30
MiB = 2**20


def _spec(**kw) -> c.JobSpec:
    kw.setdefault("gpus", 0)
    return c.JobSpec(tenant="t", **kw)


# ----------------------------------------------------------------------------------- classes


@pytest.mark.parametrize(("kw", "cls"), [
    ({}, "guaranteed"),  # every job before limits existed: its requests are its limits
    ({"cpus_milli": 2000, "cpu_limit_milli": 2000}, "guaranteed"),  # a limit equal to the request
    ({"cpus_milli": 2000, "cpu_limit_milli": 4000}, "burstable"),
    ({"memory_bytes": GiB, "memory_limit_bytes": 2 * GiB}, "burstable"),
    ({"cpus_milli": 0, "memory_bytes": 0}, "best-effort"),
    ({"cpus_milli": 0, "memory_bytes": 0, "cpu_limit_milli": 500, "memory_limit_bytes": GiB}, "best-effort"),
    ({"cpus_milli": 0, "memory_bytes": 0, "gpus": 1}, "burstable"),  # GPUs are a request
    ({"exclusive": True, "cpu_limit_milli": 9000}, "guaranteed"),  # the node's CPUs: nothing to burst into
    ({"whole_node_memory": True, "memory_bytes": 0}, "guaranteed"),  # --mem=0: all of the node's memory
])
def test_the_class_follows_from_requests_and_limits(kw, cls):
    assert qos_class(_spec(**kw)) == cls


# ----------------------------------------------------------------------------------- submission


def _submit(job_id: str, **resources) -> c.JobSubmitted:
    return c.JobSubmitted(job_id=job_id, tenant="acme", command=["true"], resources=c.ResourceRequest(**resources))


def test_submission_takes_limits_and_best_effort_jobs_and_refuses_what_makes_no_sense():
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1", gpus=0, cpus=8, memory=16 * GiB))
    f.input("acme", "submit", _submit("burst", cpus="1", memory="1Gi", cpu_limit="2.5", memory_limit="3Gi"))
    f.input("acme", "submit", _submit("same", cpus="1", memory="1Gi", cpu_limit=1, memory_limit="1Gi"))
    f.input("acme", "submit", _submit("be", cpus=0, memory=0))
    burst, same, be = f.settle()
    assert (burst.spec.cpu_limit_milli, burst.spec.memory_limit_bytes) == (2500, 3 * GiB)
    assert qos_class(burst.spec) == "burstable"
    assert (same.spec.cpu_limit_milli, same.spec.memory_limit_bytes) == (0, 0)  # equal: stored as "the request"
    assert qos_class(same.spec) == "guaranteed"
    assert (be.spec.cpus_milli, be.spec.memory_bytes) == (0, 0) and qos_class(be.spec) == "best-effort"
    for job_id, resources, words in (
        ("low", {"cpus": "2", "cpu_limit": "1"}, "resources.cpu_limit: 1 is below the request of 2 CPUs"),
        ("lowm", {"memory": "2Gi", "memory_limit": "1Gi"}, "resources.memory_limit: 1Gi is below the request of 2Gi"),
        ("zero", {"cpus": 0}, "or 0 together with memory 0 for a best-effort job"),
        ("zerom", {"memory": 0}, "or 0 together with cpus 0 for a best-effort job"),
        ("begpu", {"cpus": 0, "memory": 0, "gpus": 1}, "is best-effort and may not request GPUs"),
        ("nolim", {"cpu_limit": 0}, "resources.cpu_limit: must be more than 0"),
    ):
        f.input("acme", "submit", _submit(job_id, **resources))
        [verdict] = f.settle()
        assert isinstance(verdict, c.JobRejected) and words in verdict.reason, (job_id, verdict.reason)


# ----------------------------------------------------------------------------------- the fit


def _cluster(cpus: int = 8, memory: int = 16 * GiB, cpu_ratio: float = 1.0, memory_ratio: float = 1.0) -> Cluster:
    cluster = Cluster()
    cluster.apply(node("n", gpus=0, cpus=cpus, memory=memory), 1)
    cluster.apply(c.NodeReady(node="n"), 2)
    cluster.apply(c.NodeOvercommitChanged(node="n", cpu_overcommit=cpu_ratio, memory_overcommit=memory_ratio), 3)
    return cluster


def _hold(cluster: Cluster, job: str, cpus_milli: int, memory_bytes: int) -> None:
    n = cluster.nodes["n"]
    n.jobs[job] = c.NodeAllocation(node="n", cpus_milli=cpus_milli, memory_bytes=memory_bytes)
    n.used_cpus_milli += cpus_milli
    n.used_memory_bytes += memory_bytes


def _fit(cluster: Cluster, spec: c.JobSpec):
    return fit_node(cluster.nodes["n"], request_of(spec), Overlay(), Context())


def test_overcommit_packs_burstable_requests_against_capacity_times_ratio_and_guaranteed_against_capacity():
    """8 CPUs x 2 = 16 for burstable requests; 12 held: a burstable 4 fits (12 + 4 = 16 <= 16), a
    burstable 5 does not (17 > 16), a guaranteed 1 does not (12 + 1 = 13 > 8). Memory 16 GiB x 1.5 =
    24 GiB: a burstable 8 GiB on 16 GiB held fits (24 <= 24), 9 GiB does not. binpack of the burstable 4:
    (16 - (16 - 12 - 4)) / 16 = 1.0; of a burstable 2: (16 - 2) / 16 = 0.875."""
    cluster = _cluster(cpu_ratio=2.0, memory_ratio=1.5)
    _hold(cluster, "busy", 12_000, 16 * GiB)
    burst = {"cpu_limit_milli": 16_000, "memory_bytes": 0, "memory_limit_bytes": GiB}
    assert _fit(cluster, _spec(cpus_milli=4000, **burst)).ok
    assert _fit(cluster, _spec(cpus_milli=2000, **burst)).parts["binpack"] == pytest.approx(0.875)
    assert _fit(cluster, _spec(cpus_milli=4000, **burst)).parts["binpack"] == pytest.approx(1.0)
    too_many = _fit(cluster, _spec(cpus_milli=5000, **burst))
    assert too_many.filter == "CpuFree"
    assert explain(too_many.filter, too_many.detail, too_many.req) == (
        "too few free CPUs (needs 5; not guaranteed: packed against capacity x overcommit)")
    guaranteed = _fit(cluster, _spec(cpus_milli=1000, memory_bytes=GiB))
    assert guaranteed.filter == "CpuFree"
    assert explain(guaranteed.filter, guaranteed.detail, guaranteed.req) == "too few free CPUs (needs 1)"
    memory = {"cpus_milli": 0, "cpu_limit_milli": 1000, "memory_limit_bytes": 32 * GiB}
    assert _fit(cluster, _spec(memory_bytes=8 * GiB, **memory)).ok
    assert _fit(cluster, _spec(memory_bytes=9 * GiB, **memory)).filter == "MemoryFree"
    # a best-effort job requests nothing: it fits however full the node is
    assert _fit(cluster, _spec(cpus_milli=0, memory_bytes=0)).ok


def test_without_a_ratio_every_class_packs_against_the_capacity():
    cluster = _cluster()
    _hold(cluster, "busy", 6000, 0)
    burst = _spec(cpus_milli=3000, cpu_limit_milli=8000)
    assert _fit(cluster, burst).filter == "CpuFree"  # 6 + 3 > 8 x 1
    assert _fit(cluster, _spec(cpus_milli=2000)).ok
    assert overcommitted(8000, 1.0) == 8000 and overcommitted(8000, 1.5) == 12_000
    assert overcommitted(3, 1.5) == 4  # floored: 4.5 -> 4


def _ready(f: Feed, *regs: c.NodeRegistered) -> None:
    for reg in regs:
        f.evt("agent", reg)
        f.evt("inventory", c.NodeReady(node=reg.node, basis_seq=1))


def test_placement_overcommits_a_node_for_burstable_jobs_only_and_replays():
    """One node of 4 CPUs at CPU ratio 2 (8 for burstable requests): four burstable jobs of 2 CPUs start
    (8 <= 8), a guaranteed job of 1 CPU waits with the reason (8 + 1 > 4), and a best-effort one starts."""
    f = Feed(PlacementCore())
    _ready(f, node("n", gpus=0, cpus=4, memory=64 * GiB))
    f.evt("inventory", c.NodeOvercommitChanged(node="n", cpu_overcommit=2.0, memory_overcommit=1.0))
    for i in range(4):
        f.evt("submission", accepted(f"b{i}", gpus=0, cpus_milli=2000, cpu_limit_milli=4000))
    f.evt("submission", accepted("g", gpus=0, cpus_milli=1000))
    f.evt("submission", accepted("be", gpus=0, cpus_milli=0, memory_bytes=0))
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=1, candidates=["b0", "b1", "b2", "b3", "g", "be"],
                                                   basis_seq=f.seq))
    out = f.settle()
    started = sorted(e.job_id for e in out if isinstance(e, c.JobScheduled))
    assert started == ["b0", "b1", "b2", "b3", "be"]
    [blocked] = [e for e in out if isinstance(e, c.PlacementBlocked)]
    assert blocked.job_id == "g" and blocked.reasons[0].reason == "too few free CPUs (needs 1)"
    report = replay_decisions(PlacementCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


# ----------------------------------------------------------------------------------- inventory


def _inventory() -> Feed:
    f = Feed(InventoryCore())
    f.evt("agent", node("n1", gpus=0, cpus=8, memory=4 * GiB))
    f.settle()
    return f


def _run(f: Feed, job_id: str, node_name: str = "n1", **spec) -> None:
    f.evt("submission", accepted(job_id, gpus=0, **spec))
    alloc = c.NodeAllocation(node=node_name, cpus_milli=spec.get("cpus_milli", 1000),
                             memory_bytes=spec.get("memory_bytes", GiB))
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[alloc], basis_seq=f.seq))
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=node_name))


def test_operators_set_a_nodes_ratios_and_cannot_lower_them_below_what_its_jobs_hold():
    f = _inventory()
    f.admin("node", c.NodeCommandIssued(node="n1", action="set", cpu_overcommit=2.0, user="op"))
    [ev] = f.settle()
    assert isinstance(ev, c.NodeOvercommitChanged) and (ev.cpu_overcommit, ev.memory_overcommit) == (2.0, 1.0)
    assert ev.reason == "overcommit cpu x2 memory x1 by op"
    f.admin("node", c.NodeCommandIssued(node="n1", action="set", cpu_overcommit=3.0))
    f.admin("node", c.NodeCommandIssued(node="n1", action="set", memory_overcommit=1.5))
    first, ev = f.settle()  # two commands in one round compose: the second keeps the first's CPU ratio
    assert (first.cpu_overcommit, first.memory_overcommit) == (3.0, 1.0)
    assert (ev.cpu_overcommit, ev.memory_overcommit) == (3.0, 1.5)
    for i in range(3):  # 12 CPUs of burstable requests on 8
        _run(f, f"b{i}", cpus_milli=4000, cpu_limit_milli=8000, memory_bytes=GiB)
    for cmd in (c.NodeCommandIssued(node="n1", action="set", cpu_overcommit=1.0),
                c.NodeCommandIssued(node="n1", action="set", cpu_overcommit=0.5),
                c.NodeCommandIssued(node="n1", action="set"),
                c.NodeCommandIssued(node="n9", action="set", cpu_overcommit=2.0)):
        f.admin("node", cmd)
    why = [e.reason for e in f.settle()]
    assert why[0] == ("node n1's jobs hold 12 CPUs of requests on 8: a CPU ratio of 1 leaves room for 8; cordon it "
                      "and lower it once they fit")
    assert why[1] == "--cpu-overcommit 0.5 must be from 1 (no overcommit) to 100"
    assert why[2] == "node set needs --cpu-overcommit or --mem-overcommit (or both)" and why[3] == "no node 'n9'"
    f.admin("node", c.NodeCommandIssued(node="n1", action="set", cpu_overcommit=1.5))
    [ev] = f.settle()
    assert ev.cpu_overcommit == 1.5  # 12 <= 8 x 1.5
    f.evt("agent", node("n1", gpus=0, cpus=8, memory=4 * GiB))  # an agent restart keeps them
    n = f.state.cluster.nodes["n1"]
    assert (n.cpu_overcommit, n.memory_overcommit) == (1.5, 1.5)
    assert f.state.cluster.check(f.state.jobs) == []
    report = replay_decisions(InventoryCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


def _pressure(used: dict[str, int], memory: int = 4 * GiB, reserve: int = 512 * MiB) -> c.NodeMemoryPressure:
    return c.NodeMemoryPressure(node="n1", memory_bytes=memory, reserve_bytes=reserve, used_bytes=sum(used.values()),
                                jobs=[c.JobMemoryUse(job_id=j, attempt=1, used_bytes=u) for j, u in sorted(used.items())])


def test_memory_pressure_evicts_best_effort_first_then_burstable_over_their_request():
    """Node of 4 GiB keeping 512 MiB: the line is 3.5 GiB. Measured: g (guaranteed, requested 1 GiB)
    uses 1.5 GiB, b1 (burstable, requested 512 MiB) 1 GiB (512 MiB over), b2 (burstable, 1 GiB) 768 MiB
    (under its request), e1 and e2 (best-effort) 256 MiB and 512 MiB: 4 GiB in all, 512 MiB over.
    Evicted: e2 (the larger best-effort, 4 GiB - 512 MiB = 3.5 GiB), and that is enough. Then a new
    measure of 4 GiB (g 1.75 GiB, b1 1.25 GiB, b2 768 MiB, e1 256 MiB): e1 goes (3.75 GiB), still over,
    then b1 (2.5 GiB); b2, within its request, and g never go."""
    f = _inventory()
    _run(f, "g", cpus_milli=1000, memory_bytes=GiB)
    _run(f, "b1", cpus_milli=1000, memory_bytes=512 * MiB, memory_limit_bytes=2 * GiB)
    _run(f, "b2", cpus_milli=1000, memory_bytes=GiB, memory_limit_bytes=2 * GiB)
    _run(f, "e1", cpus_milli=0, memory_bytes=0)
    _run(f, "e2", cpus_milli=0, memory_bytes=0)
    f.evt("agent", _pressure({"g": 1536 * MiB, "b1": GiB, "b2": 768 * MiB, "e1": 256 * MiB, "e2": 512 * MiB}))
    [ev] = f.settle()
    assert isinstance(ev, c.JobFailed) and ev.evicted and (ev.job_id, ev.attempt, ev.node) == ("e2", 1, "n1")
    assert ev.id == "inventory/JobFailed/e2/1" and not ev.node_lost
    assert ev.reason == ("evicted: node n1 ran short of memory (its jobs used 4Gi, more than the 3.5Gi it gives "
                         "them); best-effort, using 512Mi")
    assert f.decide() == []  # the same measure, decided again: e2 counts as freed, nobody else goes
    f.evt("agent", _pressure({"g": 1792 * MiB, "b1": 1280 * MiB, "b2": 768 * MiB, "e1": 256 * MiB}))
    first, second = f.settle()
    assert (first.job_id, second.job_id) == ("e1", "b1")
    assert second.reason.endswith("burstable, using 1.2Gi, 768Mi over its request of 512Mi")
    assert f.decide() == []
    assert {j: f.state.jobs.get(j).state.name for j in ("g", "b1", "b2", "e1", "e2")} == {
        "g": "RUNNING", "b1": "FAILED", "b2": "RUNNING", "e1": "FAILED", "e2": "FAILED"}
    report = replay_decisions(InventoryCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


def test_a_measure_never_evicts_a_later_attempt_or_a_guaranteed_job():
    spec = _spec(cpus_milli=0, memory_bytes=0)
    later = {"e": (2, spec, 0)}  # the measure saw attempt 1; attempt 2 runs now
    assert memory_victims(_pressure({"e": 4 * GiB}), later) == []
    only_guaranteed = {"g": (1, _spec(), GiB)}
    assert memory_victims(_pressure({"g": 4 * GiB}), only_guaranteed) == []


# ----------------------------------------------------------------------------------- the agent


def _executor(tmp_path) -> ProcessExecutor:
    reg = node("n1", gpus=0, cpus=8, memory=16 * GiB)
    from services.nodes.spec import NodeSpec

    spec = NodeSpec("n1", reg.cpus_milli, reg.memory_bytes, [], simulated=True)
    return ProcessExecutor(tmp_path, {"n1": spec}, hierarchy=Hierarchy("none"), machine=Machine(tuple(range(8))))


@pytest.mark.parametrize(("spec", "alloc", "memory", "cpus", "cores", "shares"), [
    # guaranteed: the allocation, as always (the kernel's default weight)
    (_spec(cpus_milli=2000, memory_bytes=GiB), (2000, GiB), GiB, 2000, 2, 0),
    # burstable: the limits, cores for the CPU limit, shares from the request (1024 per CPU)
    (_spec(cpus_milli=1000, memory_bytes=GiB, cpu_limit_milli=3500, memory_limit_bytes=4 * GiB), (1000, GiB),
     4 * GiB, 3500, 4, 1024),
    # two tasks a node: the limit per task, twice
    (_spec(cpus_milli=500, memory_bytes=GiB, tasks_per_node=2, memory_limit_bytes=2 * GiB), (1000, 2 * GiB),
     4 * GiB, 1000, 1, 1024),
    # best-effort without limits: none (0: "max"), every core of the node, the least weight
    (_spec(cpus_milli=0, memory_bytes=0), (0, 0), 0, 0, 8, 2),
])
def test_the_agent_sets_cgroup_limits_from_the_limits_not_the_requests(tmp_path, spec, alloc, memory, cpus, cores,
                                                                          shares):
    ex = _executor(tmp_path)
    pinned, limits = ex.limits("j", 1, spec, c.NodeAllocation(node="n1", cpus_milli=alloc[0], memory_bytes=alloc[1]))
    assert (limits.memory_bytes, limits.cpus_milli, len(pinned), limits.cpu_shares) == (memory, cpus, cores, shares)
    assert Limits.from_json(limits.to_json()) == limits


def test_cgroup_values_for_no_limit_and_the_shares_conversion():
    none = Limits(memory_bytes=0, cpus_milli=0)
    assert (none.memory_v1, none.quota_us) == ("-1", -1)
    some = Limits(memory_bytes=GiB, cpus_milli=1500)
    assert (some.memory_v1, some.quota_us) == (str(GiB), 150_000)
    assert cpu_shares(0) == 2 and cpu_shares(250) == 256 and cpu_shares(2000) == 2048
    assert cpu_weight(2) == 1 and cpu_weight(1024) == 39 and cpu_weight(262144) == 10000  # the kubelet's figures
    old = {"memory_bytes": 1, "cpus_milli": 1000}  # a plan written before cpu_shares
    assert Limits.from_json(old).cpu_shares == 0


def test_the_memory_watch_reports_once_per_change_and_again_after_a_while(monkeypatch):
    watch = MemoryWatch("n1", 4 * GiB, 512 * MiB, republish_s=30.0)
    uses = [c.JobMemoryUse(job_id="a", attempt=1, used_bytes=3 * GiB), c.JobMemoryUse(job_id="b", attempt=1,
                                                                                         used_bytes=GiB)]
    ev = watch.observe(uses, 100.0)
    assert ev is not None and (ev.used_bytes, ev.memory_bytes, ev.reserve_bytes) == (4 * GiB, 4 * GiB, 512 * MiB)
    assert ev.id == "agent/NodeMemoryPressure/n1/100000"  # from the measure, so a second send is a duplicate
    assert watch.observe(uses, 102.0) is None  # the same jobs, soon after: already said
    assert watch.observe(uses[:1], 104.0) is None  # under the line (3 GiB <= 3.5 GiB)
    assert watch.observe(uses, 106.0) is not None  # over again
    assert watch.observe(uses, 140.0) is not None  # still over, 30 s on
    monkeypatch.delenv("HORIZON_MEMORY_RESERVE", raising=False)
    assert default_reserve(512 * GiB) == 100 * MiB and default_reserve(512 * MiB) == 512 * MiB // 10
    monkeypatch.setenv("HORIZON_MEMORY_RESERVE", "256Mi")
    assert default_reserve(512 * GiB) == 256 * MiB


def test_old_events_mean_what_they_meant():
    old_spec = msgspec.json.decode(b'{"tenant": "t", "cpus_milli": 2000, "memory_bytes": 1024}', type=c.JobSpec)
    assert (old_spec.cpu_limit_milli, old_spec.memory_limit_bytes) == (0, 0) and qos_class(old_spec) == "guaranteed"
    old_failed = msgspec.json.decode(b'{"job_id": "j", "attempt": 1}', type=c.JobFailed)
    assert old_failed.evicted is False


def test_the_audit_story_names_a_jobs_class_and_limits_when_it_is_not_guaranteed():
    from services.front.audit.story import story_line

    burst = c.JobAccepted(job_id="j", spec=_spec(cpus_milli=1000, memory_bytes=GiB, cpu_limit_milli=4000,
                                                  memory_limit_bytes=8 * GiB))
    assert story_line(burst, "j", 0.0, False).endswith("QoS burstable (limits 4 CPUs, 8Gi memory per task)")
    plain = c.JobAccepted(job_id="j", spec=_spec())
    assert "QoS" not in story_line(plain, "j", 0.0, False)  # as before limits existed
    be = c.JobAccepted(job_id="j", spec=_spec(cpus_milli=0, memory_bytes=0))
    assert story_line(be, "j", 0.0, False).endswith("QoS best-effort")


# ----------------------------------------------------------------------------------- property


@st.composite
def _overcommitted(draw):
    nodes = [(f"n{i}", draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([1.0, 1.5, 2.0, 3.0])),
              draw(st.sampled_from([1.0, 1.25, 2.0]))) for i in range(draw(st.integers(1, 4)))]
    jobs = []
    for j in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["guaranteed", "burstable", "best-effort"]))
        cpus = draw(st.sampled_from([500, 1000, 2000, 4000]))
        memory = draw(st.sampled_from([1, 2, 4])) * GiB
        if kind == "best-effort":
            kw = {"cpus_milli": 0, "memory_bytes": 0}
        elif kind == "burstable":
            kw = {"cpus_milli": cpus, "memory_bytes": memory, "cpu_limit_milli": 2 * cpus}
        else:
            kw = {"cpus_milli": cpus, "memory_bytes": memory}
        jobs.append((f"j{j:02d}", {**kw, "nodes": draw(st.sampled_from([1, 1, 2])), "gpus": 0}))
    ends = draw(st.lists(st.integers(0, 24), max_size=8))
    return nodes, jobs, ends


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_overcommitted())
def test_no_node_holds_more_than_capacity_times_ratio_and_guaranteed_requests_are_always_backed(scenario):
    """Over random nodes and ratios and a mix of classes: the whole-log checker finds no node holding
    more requests than capacity x ratio, and every guaranteed job was placed where all the requests,
    its own included, fit in the node's real capacity; with every ratio 1, nobody overcommits."""
    nodes, jobs, ends = scenario
    f = Feed(PlacementCore())
    for name, cpus, cpu_ratio, memory_ratio in nodes:
        f.evt("agent", node(name, gpus=0, cpus=cpus, memory=8 * GiB))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
        f.evt("inventory", c.NodeOvercommitChanged(node=name, cpu_overcommit=cpu_ratio, memory_overcommit=memory_ratio))
    for job_id, kw in jobs:
        f.evt("submission", accepted(job_id, **kw))
    for cycle in range(1, 4):
        pending = [j for j, _ in jobs if f.state.jobs.get(j).state.value == "PENDING"]
        f.evt("scheduling", c.SchedulingCycleCompleted(cycle=cycle, candidates=pending, basis_seq=f.seq))
        for event in f.decide():
            if isinstance(event, c.JobScheduled) and qos_class(f.state.jobs.get(event.job_id).spec) == "guaranteed":
                for alloc in event.allocations:  # judged on the ledger before this cycle folds in
                    n = f.state.cluster.nodes[alloc.node]
                    assert n.used_cpus_milli + alloc.cpus_milli <= n.cpus_milli
                    assert n.used_memory_bytes + alloc.memory_bytes <= n.memory_bytes
            f.evt("placement", event, dt=0.001)
        for k in ends[(cycle - 1) * 3: cycle * 3]:
            job = f.state.jobs.get(jobs[k % len(jobs)][0])
            if job.state.value == "SCHEDULED":
                f.evt("agent", c.JobSucceeded(job_id=job.job_id, attempt=job.attempt))
    report = check_log(f.records)
    assert report.ok, report.problems[:5]
