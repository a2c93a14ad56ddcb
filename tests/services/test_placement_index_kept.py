"""The node index placement keeps across decisions files every node as a fresh build would.

Placement builds its ``NodeIndex`` once and then files again only the nodes the fold says changed
(services/placement/index.py). After any log, and after every record of it with a decision taken in
between (so that each decision's overlay moves nodes and ``end`` puts them back), the kept index
must hold exactly the groups of one built from scratch: same keys, same nodes in each, in order.
"""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.placement.core import PlacementCore
from services.placement.index import NodeIndex
from services.placement.partitioned import PartitionedPlacementCore
from services.runtime.service import fold_record
from tests.helpers import node
from tests.services.test_placement_index import clusters, requests
from tests.services.test_snapshot_scheduling import JOBS, NODES, PROPERTY, HandLog, action, pause


def _context(state) -> Context:  # as placement's cycle builds it (core._Cycle.start)
    now = state.now
    advance = tuple(sorted((r for r in state.advance.values() if r.end_ts > now), key=lambda r: r.name))
    memberships = state.partitions.memberships() if state.partitions else {}
    return Context(reservations=advance, held=dict(state.held), memberships=memberships)


def check_kept_index(state) -> None:
    kept = state.index
    if kept is None:
        return
    ctx = _context(state)
    kept.begin(Overlay(), ctx)
    try:
        fresh = NodeIndex(state.cluster, Overlay(), ctx)
        assert kept.groups == fresh.groups
        assert kept._key_of == fresh._key_of
        assert all(members == sorted(members) and members for members in kept.groups.values())
    finally:
        kept.end()


extra = st.one_of(
    st.tuples(st.just("taints"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("datasets"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("overcommit"), st.sampled_from(NODES), st.sampled_from([1.0, 2.0])),
    st.tuples(st.just("reservation"), st.sampled_from(NODES), st.sampled_from([60.0, 7200.0])),
    st.tuples(st.just("partition"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("preempt-for"), st.sampled_from(JOBS), st.sampled_from(JOBS)),
    st.tuples(st.just("gpu-health"), st.sampled_from(NODES), st.booleans()),
)


def act_extra(log: HandLog, a: tuple, dt: float) -> None:
    kind, n = a[0], a[1]
    if kind == "taints":
        event = c.NodeTaintsChanged(node=n, taints=[c.Taint(key="gpu", value="bad")] if a[2] else [],
                                    source="inventory", correlation_id=n)
    elif kind == "datasets":
        event = c.NodeDatasetsChanged(node=n, datasets=["d1"] if a[2] else [], source="inventory", correlation_id=n)
    elif kind == "overcommit":
        event = c.NodeOvercommitChanged(node=n, cpu_overcommit=a[2], source="inventory", correlation_id=n)
    elif kind == "reservation":
        event = c.ReservationConfigured(name=f"r-{n}", account="a", nodes=[n], start_ts=log.time,
                                        end_ts=log.time + a[2])
        log.add(admin_subject("reservation"), event, dt)
        return
    elif kind == "partition":
        event = c.PartitionConfigured(name="p1", nodes=[n] if a[2] else ["n*"])
        log.add(admin_subject("partition"), event, dt)
        return
    elif kind == "preempt-for":
        event = c.PreemptionRequested(job_id=n, for_job=a[2], attempt=1, reason="room", source="preemption",
                                      correlation_id=n)
        log.add(event_subject("preemption", event), event, dt)
        return
    else:  # a device's health changes with a registration
        reg = node(n, gpus=2)
        if a[2]:
            reg = msgspec.structs.replace(reg, gpus=[msgspec.structs.replace(reg.gpus[0], health="xid 79"),
                                                     *reg.gpus[1:]])
        event = reg
        log.add(event_subject("agent", event), event, dt)
        return
    log.add(event_subject("inventory", event), event, dt)


CORES = [lambda: PlacementCore(virtual_time=True), lambda: PlacementCore(backfill="conservative", virtual_time=True),
         lambda: PartitionedPlacementCore(virtual_time=True, partitions=("p1",))]


@PROPERTY
@given(actions=st.lists(st.tuples(st.one_of(action, action, extra), pause), min_size=20, max_size=160),
       which=st.integers(0, len(CORES) - 1))
def test_the_kept_index_files_every_node_as_a_fresh_build_does(actions, which):
    log = HandLog()
    for a, dt in actions:
        if a[0] in ("taints", "datasets", "overcommit", "reservation", "partition", "preempt-for", "gpu-health"):
            act_extra(log, a, dt)
        else:
            log.act(a, dt)
    core = CORES[which]()
    state = core.initial()
    for record in log.records:
        state, _, _ = fold_record(core, state, record)
        # builds the index at the first decision, moves nodes in its overlay, puts them back
        kept = [encode(e) for e in core.decide(state)]
        check_kept_index(state)
        index, state.index = state.index, None  # the same decision on an index built from scratch
        assert [encode(e) for e in core.decide(state)] == kept, f"after seq {record.seq}"
        state.index = index


def test_a_cycle_on_a_kept_index_places_as_on_a_fresh_one():
    """Two cycles on a loaded cluster: the second decides on the kept index exactly as a state restored
    from a snapshot (whose index is built fresh) does."""
    core = PlacementCore()
    log = HandLog()
    for n in NODES:
        log.act(("registered", n), 1.0)
        log.act(("ready", n), 1.0)
    log.act(("cycle", [], 0), 1.0)
    state = core.initial()
    for record in log.records:
        state, _, _ = fold_record(core, state, record)
    core.decide(state)
    assert state.index is not None
    restored = core.load(core.dump(state))
    assert restored is not None and restored.index is None  # derived: never in a snapshot
    for j in JOBS:
        log.act(("accept", j, 1, "normal", "never", 0, None, None, "a", "u1", 0), 1.0)
    log.act(("cycle", JOBS, 0), 1.0)
    for record in log.records[len(log.records) - len(JOBS) - 1:]:  # the jobs and the next cycle
        state, _, _ = fold_record(core, state, record)
        restored, _, _ = fold_record(core, restored, record)
    assert core.decide(state) == core.decide(restored)
    check_kept_index(state)


@PROPERTY
@given(cluster=clusters(), reqs=st.lists(requests, min_size=1, max_size=12))
def test_fits_remembered_per_kind_of_node_place_as_fits_computed_anew(cluster, reqs):
    """A decision remembers each request's fit per group key (``NodeIndex.evaluate``'s ``memo``): jobs placed
    one after another, taking their nodes, land where they land when every fit is computed again."""
    from services.placement.place import place_job

    ctx = Context()
    runs = []
    for memo in (None, {}):
        overlay = Overlay()
        index = NodeIndex(cluster, overlay, ctx)
        out = []
        for req in reqs + reqs:
            placed = place_job(cluster, req, overlay, index, ctx, memo)
            out.append((None if placed.allocations is None else [(a.node, a.device_ids) for a in placed.allocations],
                        placed.reasons, placed.fits_nowhere))
            for alloc in placed.allocations or ():
                overlay.take(alloc)
                index.moved(alloc.node)
        runs.append(out)
    assert runs[0] == runs[1]
