"""Inventory's pure core: readiness, node commands, failing jobs on lost nodes, the derived ledger."""

from __future__ import annotations

from events import catalogue as c
from services.inventory.core import InventoryCore
from tests.helpers import Feed, accepted, node


def test_registration_readiness_commands_and_loss():
    f = Feed(InventoryCore())
    f.evt("agent", node("n1"))
    [ready] = f.settle()
    assert isinstance(ready, c.NodeReady) and ready.node == "n1"
    f.evt("submission", accepted("j1", gpus=2))
    f.evt("placement", c.JobScheduled(job_id="j1", attempt=1,
                                      allocations=[c.NodeAllocation(node="n1", device_ids=["gpu0", "gpu1"])]))
    assert f.state.cluster.nodes["n1"].used_devices == {"gpu0": "j1", "gpu1": "j1"}
    f.admin("node", c.NodeCommandIssued(node="n1", action="cordon", user="ops"))
    f.admin("node", c.NodeCommandIssued(node="nope", action="cordon"))
    f.admin("node", c.NodeCommandIssued(node="n1", action="explode"))
    cordoned, unknown, bad = f.settle()
    assert isinstance(cordoned, c.NodeCordoned) and cordoned.reason == "cordon by ops"
    assert isinstance(unknown, c.RequestRejected) and "no node 'nope'" in unknown.reason
    assert isinstance(bad, c.RequestRejected) and "action 'explode'" in bad.reason
    assert f.decide() == []
    f.evt("inventory", c.NodeLost(node="n1", reason="no heartbeat"))
    [failed] = f.settle()
    assert isinstance(failed, c.JobFailed) and failed.job_id == "j1" and failed.reason == "node n1 lost"
    assert f.state.cluster.nodes["n1"].used_devices == {}
    assert f.state.cluster.check(f.state.jobs) == []
    assert f.decide() == []
    f.evt("agent", node("n1"))  # the agent came back and registered again
    [back] = f.settle()
    assert isinstance(back, c.NodeReady)


# ---------------------------------------------------------------- taints and NoExecute eviction

BROKEN = c.Taint(key="gpu", value="broken", effect="NoExecute")


def taint_cmd(node_: str, action: str, key: str, value: str = "", effect: str = "NoSchedule", **kw) -> c.NodeCommandIssued:
    return c.NodeCommandIssued(node=node_, action=action, taint=c.Taint(key=key, value=value, effect=effect), **kw)


def cluster_with_jobs(*jobs: tuple[str, str, tuple[c.Toleration, ...]]) -> Feed:
    """Nodes n1 and n2, and each (job, node, tolerations) scheduled there with one GPU."""
    f = Feed(InventoryCore())
    f.evt("agent", node("n1"))
    f.evt("agent", node("n2"))
    f.settle()
    used: dict[str, int] = {}
    for job_id, where, tolerations in jobs:
        gpu = used.get(where, 0)
        used[where] = gpu + 1
        f.evt("submission", accepted(job_id, gpus=1, tolerations=tolerations))
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1,
                                          allocations=[c.NodeAllocation(node=where, device_ids=[f"gpu{gpu}"])]))
    return f


def test_taint_and_untaint_answer_with_the_whole_new_list():
    f = cluster_with_jobs()
    f.admin("node", taint_cmd("n1", "taint", "gpu", "reserved", user="ops"))
    f.admin("node", taint_cmd("n1", "taint", "spot", effect="PreferNoSchedule"))
    f.admin("node", taint_cmd("n1", "taint", "gpu", "research"))  # same key and effect: replaces, in place
    first, second, third = f.settle()
    assert isinstance(first, c.NodeTaintsChanged) and first.causation_id.startswith("seq:")
    assert first.taints == [c.Taint(key="gpu", value="reserved")]
    assert first.reason == "taint gpu=reserved:NoSchedule by ops"
    assert second.taints == [c.Taint(key="gpu", value="reserved"), c.Taint(key="spot", effect="PreferNoSchedule")]
    assert third.taints == [c.Taint(key="gpu", value="research"), c.Taint(key="spot", effect="PreferNoSchedule")]
    assert f.state.cluster.nodes["n1"].taints == third.taints  # folded
    assert f.decide() == []
    f.admin("node", taint_cmd("n1", "taint", "gpu", "x", effect="NoExecute"))  # same key, another effect: added
    f.admin("node", taint_cmd("n1", "untaint", "gpu", effect=""))  # every effect of the key
    added, removed = f.settle()
    assert [t.effect for t in added.taints] == ["NoSchedule", "PreferNoSchedule", "NoExecute"]
    assert removed.taints == [c.Taint(key="spot", effect="PreferNoSchedule")]
    f.admin("node", taint_cmd("n1", "untaint", "spot", effect="PreferNoSchedule"))
    [empty] = f.settle()
    assert empty.taints == [] and f.state.cluster.nodes["n1"].taints == []
    assert f.state.commands == {} and f.decide() == []


def test_bad_taint_commands_are_rejected_with_a_reason():
    f = cluster_with_jobs()
    f.admin("node", taint_cmd("n1", "taint", "gpu", "broken", effect="NoRun"))
    f.admin("node", taint_cmd("n1", "taint", "", "broken"))
    f.admin("node", c.NodeCommandIssued(node="n1", action="taint"))
    f.admin("node", taint_cmd("n1", "untaint", "gpu", effect="NoExecute"))
    f.admin("node", taint_cmd("n9", "taint", "gpu"))
    f.admin("node", taint_cmd("n1", "taint", "gpu", "a", effect="NoExecute"))
    f.admin("node", taint_cmd("n1", "untaint", "gpu", "b", effect="NoExecute"))  # another value
    answers = f.settle()
    assert [type(a).__name__ for a in answers] == ["RequestRejected"] * 5 + ["NodeTaintsChanged", "RequestRejected"]
    reasons = [a.reason for a in answers if isinstance(a, c.RequestRejected)]
    assert reasons == [
        "taint effect 'NoRun' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        "a taint needs a key",
        "taint needs a taint (key, value, effect)",
        "node n1 has no taint gpu:NoExecute (its taints: none)",
        "no node 'n9'",
        "node n1 has no taint gpu=b:NoExecute (its taints: gpu=a:NoExecute)",
    ]
    assert {a.verb for a in answers if isinstance(a, c.RequestRejected)} == {"node taint", "node untaint"}
    assert f.decide() == []


def test_no_execute_evicts_only_the_jobs_that_do_not_tolerate_it_once_per_attempt():
    f = cluster_with_jobs(
        ("plain", "n1", ()),
        ("tolerant", "n1", (c.Toleration(key="gpu", operator="Exists", effect="NoExecute"),)),
        ("wrong-value", "n1", (c.Toleration(key="gpu", value="flaky"),)),
        ("elsewhere", "n2", ()),
    )
    f.admin("node", taint_cmd("n1", "taint", "maintenance", effect="NoSchedule"))
    f.admin("node", taint_cmd("n2", "taint", "spot", effect="PreferNoSchedule"))
    assert all(isinstance(e, c.NodeTaintsChanged) for e in f.settle())
    assert f.decide() == []  # NoSchedule and PreferNoSchedule leave running jobs alone
    f.admin("node", taint_cmd("n1", "taint", "gpu", "broken", effect="NoExecute", user="ops"))
    [changed] = f.settle()
    assert isinstance(changed, c.NodeTaintsChanged)
    evictions = f.settle()  # the next round, on the folded taint
    assert [(e.job_id, e.attempt) for e in evictions] == [("plain", 1), ("wrong-value", 1)]
    plain = evictions[0]
    assert isinstance(plain, c.PreemptionRequested) and plain.id == "inventory/PreemptionRequested/plain/1"
    assert plain.for_job == "" and plain.grace_period_s == 30.0 and plain.basis_seq > changed.basis_seq
    assert plain.reason == "node n1 taint gpu=broken:NoExecute is not tolerated"
    assert f.decide() == []  # asked once, even while the jobs still run
    # the agent stops one; it is requeued and placed on the tainted node again: a new attempt, a new request
    f.evt("agent", c.JobPreempted(job_id="plain", attempt=1))
    f.evt("scheduling", c.JobRequeued(job_id="plain", attempt=1))
    assert f.state.cluster.nodes["n1"].used_devices.get("gpu0") is None
    f.evt("placement", c.JobScheduled(job_id="plain", attempt=2,
                                      allocations=[c.NodeAllocation(node="n1", device_ids=["gpu5"])]))
    [again] = f.settle()
    assert again.id == "inventory/PreemptionRequested/plain/2"
    # untainted, nothing more; replays of the whole log reproduce every decision
    f.admin("node", taint_cmd("n1", "untaint", "gpu", effect="NoExecute"))
    f.settle()
    assert f.decide() == []
    from services.runtime.replay import replay_decisions
    report = replay_decisions(InventoryCore(), f.records)
    assert report.mismatches == [] and report.reproduced == report.decisions > 0


def test_a_job_already_asked_to_stop_or_on_a_lost_node_is_not_evicted_again():
    f = cluster_with_jobs(("victim", "n1", ()), ("other", "n1", ()), ("doomed", "n2", ()))
    f.evt("preemption", c.PreemptionRequested(job_id="victim", attempt=1, for_job="vip", basis_seq=1))
    f.admin("node", taint_cmd("n1", "taint", "gpu", effect="NoExecute"))
    f.admin("node", taint_cmd("n2", "taint", "gpu", effect="NoExecute"))
    f.settle()
    f.evt("inventory", c.NodeLost(node="n2"))
    out = f.settle()
    assert sorted((type(e).__name__, e.job_id) for e in out) == [("JobFailed", "doomed"), ("PreemptionRequested", "other")]


def test_a_gang_on_two_tainted_nodes_is_asked_once():
    f = cluster_with_jobs()
    f.evt("submission", accepted("gang", gpus=1, nodes=2))
    f.evt("placement", c.JobScheduled(job_id="gang", attempt=1, allocations=[
        c.NodeAllocation(node="n2", device_ids=["gpu0"]), c.NodeAllocation(node="n1", device_ids=["gpu0"])]))
    f.admin("node", taint_cmd("n1", "taint", "a", effect="NoExecute"))
    f.admin("node", taint_cmd("n2", "taint", "b", effect="NoExecute"))
    f.settle()
    [request] = f.settle()
    assert request.job_id == "gang" and request.reason == "node n1 taint a:NoExecute is not tolerated"
