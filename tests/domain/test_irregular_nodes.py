"""``Cluster.irregular``: the nodes inventory's decisions look at, kept in step by the fold and by a
snapshot's restore, so a round costs what is irregular and not the cluster's size."""

from __future__ import annotations

import random

from events import catalogue as c
from services.domain.cluster import Cluster, Node
from services.inventory.core import InventoryCore

NO_EXECUTE = c.Taint(key="broken", effect="NoExecute")
NO_SCHEDULE = c.Taint(key="gpu", effect="NoSchedule")


def irregular_by_scan(cluster: Cluster) -> set[str]:
    return {n.name for n in cluster.nodes.values()
            if not n.ready or n.lost or n.removed or n.draining or any(t.effect == "NoExecute" for t in n.taints)}


def events(rng: random.Random, names: list[str]) -> list[c.Event]:
    out: list[c.Event] = []
    for _ in range(600):
        node = rng.choice(names)
        out.append(rng.choice([
            c.NodeRegistered(node=node, cpus_milli=1000, memory_bytes=1 << 30,
                             taints=rng.choice([[], [NO_SCHEDULE], [NO_EXECUTE]])),
            c.NodeReady(node=node), c.NodeReady(node=node), c.NodeLost(node=node, reason="silent"),
            c.NodeCordoned(node=node), c.NodeUncordoned(node=node),
            c.NodeDraining(node=node, migrate=rng.random() < 0.5),
            c.NodeTaintsChanged(node=node, taints=rng.choice([[], [NO_SCHEDULE], [NO_EXECUTE, NO_SCHEDULE]])),
            c.NodeRemoved(node=node),
        ]))
    return out


def test_the_fold_keeps_irregular_equal_to_a_scan_of_every_node():
    names = [f"n{i}" for i in range(12)]
    for seed in range(20):
        cluster = Cluster()
        for seq, event in enumerate(events(random.Random(seed), names), start=1):
            cluster.apply(event, seq)
            assert cluster.irregular == irregular_by_scan(cluster), (seed, seq, event)


def test_a_healthy_cluster_has_none_and_a_restored_snapshot_has_the_same():
    core = InventoryCore()
    state = core.initial()
    seq = 0
    for i in range(50):
        for event in (c.NodeRegistered(node=f"n{i:02d}", cpus_milli=1000, memory_bytes=1 << 30, taints=[NO_SCHEDULE]),
                      c.NodeReady(node=f"n{i:02d}")):
            seq += 1
            state.cluster.apply(event, seq)
    assert state.cluster.irregular == set()
    for seq, event in enumerate([c.NodeLost(node="n03", reason="silent"), c.NodeDraining(node="n07"),
                                 c.NodeTaintsChanged(node="n09", taints=[NO_EXECUTE])], start=seq + 1):
        state.cluster.apply(event, seq)
    assert state.cluster.irregular == {"n03", "n07", "n09"}
    restored = core.load(core.dump(state))
    assert restored is not None and restored.cluster.irregular == {"n03", "n07", "n09"}
    assert [n.name for n in restored.cluster.sorted_irregular()] == ["n03", "n07", "n09"]
    assert isinstance(restored.cluster.nodes["n03"], Node)
