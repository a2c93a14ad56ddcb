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
