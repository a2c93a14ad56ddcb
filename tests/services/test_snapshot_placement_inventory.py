"""Placement's and inventory's snapshots: restart from a snapshot + the tail is exactly a full replay.

The same property as the scheduling core's (tests/services/test_snapshot_scheduling.py, whose logs
and check this reuses): for a log and any cut k, ``load(dump(state after k))`` folded on with records
k+1..N ends in the state a fold of 1..N reaches (equal ``dump`` bytes), and decides alike after every
record of the tail. Against the real runner and nats-server: tests/runtime/test_snapshots_services.py.
"""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.domain.protocol import Record
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.placement.partitioned import OwnNodes, PartitionedPlacementCore
from tests.helpers import node
from tests.services.test_snapshot_scheduling import (
    PROPERTY, HandLog, action, check_restart_equals_full_replay, fold, pause, sim_job, simulated_log, trace,
)

CORES = {
    "placement-easy": lambda: PlacementCore(backfill="easy", virtual_time=True),
    "placement-none": lambda: PlacementCore(backfill="none", virtual_time=True),
    "placement-shadow": lambda: PlacementCore(backfill="shadow", virtual_time=True),
    "placement-default-leader": lambda: PartitionedPlacementCore(backfill="easy", virtual_time=True,
                                                                 partitions=("default",)),
    "inventory": lambda: InventoryCore(virtual_time=True),
}


@PROPERTY
@given(jobs=st.lists(sim_job, min_size=1, max_size=12),
       deps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                               st.sampled_from(["after-ok", "after-any", "after-not-ok"])), max_size=4),
       cuts=st.lists(st.integers(0, 10**6), min_size=1, max_size=3),
       policy=st.sampled_from(["fcfs", "multifactor"]), quotas=st.booleans(), which=st.sampled_from(sorted(CORES)))
def test_restart_from_a_snapshot_of_a_simulated_log_equals_a_full_replay(jobs, deps, cuts, policy, quotas, which):
    records = simulated_log(trace(jobs, deps), policy, quotas)
    core = CORES[which]()
    for cut in cuts:
        check_restart_equals_full_replay(core, records, cut % (len(records) + 1))  # type: ignore[arg-type]


@PROPERTY
@given(actions=st.lists(st.tuples(action, pause), min_size=40, max_size=200), cut=st.integers(0, 10**6),
       which=st.sampled_from(sorted(CORES)))
def test_restart_from_a_snapshot_of_a_random_log_equals_a_full_replay(actions, cut, which):
    log = HandLog()
    for a, dt in actions:
        log.act(a, dt)
    core = CORES[which]()
    check_restart_equals_full_replay(core, log.records, cut % (len(log.records) + 1))  # type: ignore[arg-type]


def configured_log() -> list[Record]:
    """Nodes with labels, taints, datasets and overcommit, a profile, a reservation, a partition, a
    node command and memory pressure: the fields a simulated log leaves at their defaults."""
    n0 = msgspec.structs.replace(node("n0"), labels={"rack": "r1"}, taints=[c.Taint(key="gpu", value="a100")])
    events = [
        (admin_subject("partition"), c.PartitionConfigured(name="gpu", nodes=["n*"])),
        (admin_subject("profile"), c.ProfileConfigured(name="fast", backfill="shadow",
                                                       runtime_estimate="predicted")),
        (admin_subject("reservation"), c.ReservationConfigured(name="r1", account="a", nodes=["n1", "n0"],
                                                               start_ts=100.0, end_ts=200.0)),
        n0, node("n1"), c.NodeReady(node="n0", source="inventory"),
        c.NodeDatasetsChanged(node="n0", datasets=["b", "a", "c"], source="inventory"),
        c.NodeOvercommitChanged(node="n1", cpu_overcommit=2.0, source="inventory"),
        c.NodeMemoryPressure(node="n0", memory_bytes=2**30, source="agent/n0"),
        (admin_subject("node"), c.NodeCommandIssued(node="n1", action="cordon", user="ops")),
    ]
    pairs = [e if isinstance(e, tuple) else (event_subject(e.source.split("/")[0], e), e) for e in events]
    return [Record(i + 1, subject, encode(e), float(i)) for i, (subject, e) in enumerate(pairs)]


def test_configuration_survives_a_snapshot():
    records = configured_log()
    for core in (PlacementCore(virtual_time=True), PartitionedPlacementCore(virtual_time=True, partitions=("gpu",)),
                 InventoryCore(virtual_time=True)):
        state = fold(core, core.initial(), records)  # type: ignore[arg-type]
        data = core.dump(state)  # type: ignore[attr-defined]
        loaded = core.load(data)  # type: ignore[attr-defined]
        assert loaded is not None and core.dump(loaded) == data  # type: ignore[attr-defined]
        if isinstance(core, PlacementCore):
            assert loaded.advance == state.advance and loaded.profiles == state.profiles
            assert type(loaded.partitions) is type(state.partitions)
            assert loaded.cluster.nodes["n0"].datasets == frozenset("abc") and loaded.cluster.nodes["n0"].taints
        else:
            assert loaded.commands and loaded.pressure == state.pressure
    leader = PartitionedPlacementCore(virtual_time=True, partitions=("gpu",))
    loaded = leader.load(leader.dump(fold(leader, leader.initial(), records)))  # type: ignore[arg-type]
    assert isinstance(loaded.partitions, OwnNodes) and loaded.partitions.covered == frozenset({"gpu"})


def test_another_configuration_or_format_is_refused():
    log = HandLog()
    log.act(("accept", "j1", 1, "normal", "never", 0, None, None, "a", "u1", 0), 1.0)
    placement = PlacementCore(backfill="easy")
    data = placement.dump(fold(placement, placement.initial(), log.records))  # type: ignore[arg-type]
    assert placement.load(data) is not None
    assert PlacementCore(backfill="none").load(data) is None
    assert PartitionedPlacementCore(backfill="easy", partitions=("default",)).load(data) is None
    assert placement.load(b"\x93not a snapshot") is None
    inventory = InventoryCore()
    data = inventory.dump(fold(inventory, inventory.initial(), log.records))  # type: ignore[arg-type]
    assert inventory.load(data) is not None
    assert InventoryCore(eviction_grace_s=5.0).load(data) is None
    assert InventoryCore().load(placement.dump(placement.initial())) is None

