"""Placement's state as bytes and back: its snapshots (services/runtime/service.py reads them). Pure.

``dump`` writes every field of ``PlacementState`` but the derived ones, which a restored state builds
again (the node index; it refuses a state with a field it does not know, so a field added to the
state without a line here fails the tests rather than a restart); maps keep
the order they were folded in (a placement walks some of them in order) and sets are written
sorted, so equal states give equal bytes. ``load`` returns None for another format or another
configuration (the fingerprint), and the runner then folds the whole log.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import msgspec

from services.domain.cluster import Node
from services.domain.fit.cycle import AdvanceReservation
from services.domain.fit.profile import Profile
from services.domain.job_rows import JobColumns, columns, node_data, read_snapshot, restore_columns, restore_nodes
from services.domain.partitions import Partitions, PartitionsData

__all__ = ["SNAPSHOT_FORMAT", "dump", "load"]

SNAPSHOT_FORMAT = 4  # 2: jobs ended for good settled; 3: their retries counted (restart.ends_for_good);
# 4: jobs as columns, each distinct spec written and shaped once (a row per job: 68 MB and 5.4 s to restart at 1M queued)

_FIELDS = frozenset({"seq", "now", "layout", "layout_seq", "relayed_seq", "jobs", "cluster", "cycle", "candidates",
                     "borrowing", "done_cycle", "profiles", "advance", "config_rejections", "anti_affinity_running",
                     "held", "partitions", "history", "predicted", "elastic", "retries"})
_DERIVED = frozenset({"index"})  # built again from the rest (the node index: services/placement/index.py)


class _Snapshot(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    counters: tuple[int, float, int, int, int, int, int, int]  # seq, now, layout, layout_seq, relayed_seq,
    # cycle, done_cycle, anti_affinity_running
    jobs: JobColumns
    settled: dict[str, int]
    arrays: dict[str, list[str]]
    checkpointed: list[str]
    nodes: list[Node]
    candidates: list[str]
    borrowing: list[str]
    profiles: dict[str, Profile]
    advance: dict[str, AdvanceReservation]
    config_rejections: dict[int, tuple[str, str]]
    held: dict[str, list[str]]
    partitions: PartitionsData
    history: dict[str, tuple[float, ...]]
    predicted: dict[str, float]
    elastic: list[str]
    retries: dict[str, int]


def dump(state: Any, fingerprint: str) -> bytes:  # a PlacementState (core.py imports this module)
    """The whole state, as bytes."""
    unknown = set(vars(state)) - _FIELDS - _DERIVED
    assert not unknown, f"placement snapshot: PlacementState has fields it does not write: {sorted(unknown)}"
    advance = {name: _advance_data(r) for name, r in state.advance.items()}
    snap = [
        SNAPSHOT_FORMAT, fingerprint,
        (state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq, state.cycle, state.done_cycle,
         state.anti_affinity_running),
        columns(state.jobs.jobs), state.jobs.settled, state.jobs.arrays, sorted(state.jobs.checkpointed),
        node_data(state.cluster), state.candidates, sorted(state.borrowing),
        {name: _profile_data(p) for name, p in state.profiles.items()}, advance, state.config_rejections,
        {node: sorted(jobs) for node, jobs in state.held.items()}, state.partitions.data(), state.history.last,
        state.predicted, sorted(state.elastic), state.retries,
    ]
    return msgspec.msgpack.encode(snap)


def _profile_data(p: Profile) -> dict[str, object]:
    return {f.name: dict(p.weights) if f.name == "weights" else getattr(p, f.name) for f in dataclasses.fields(p)}


def _advance_data(r: AdvanceReservation) -> dict[str, object]:
    return {"name": r.name, "account": r.account, "nodes": sorted(r.nodes), "start_ts": r.start_ts, "end_ts": r.end_ts}


def load(data: bytes, fingerprint: str, state: Any) -> Any:
    """Fill ``state`` (the core's ``initial()``) with what ``dump`` wrote; None when it is from another
    format or configuration."""
    snap = read_snapshot(data, _Snapshot, SNAPSHOT_FORMAT, fingerprint)
    if snap is None:
        return None
    (state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq, state.cycle, state.done_cycle,
     state.anti_affinity_running) = snap.counters
    restore_columns(state.jobs, snap.jobs)  # each distinct spec shaped once, shared as the fold shares them
    state.jobs.settled, state.jobs.arrays, state.jobs.checkpointed = snap.settled, snap.arrays, set(snap.checkpointed)
    restore_nodes(state.cluster, snap.nodes)
    state.candidates, state.borrowing = snap.candidates, frozenset(snap.borrowing)
    state.profiles = {name: dataclasses.replace(p, weights=MappingProxyType(p.weights)) for name, p in snap.profiles.items()}
    state.advance, state.config_rejections = snap.advance, snap.config_rejections
    state.held = {node: frozenset(jobs) for node, jobs in snap.held.items()}
    restore_partitions(state.partitions, snap.partitions)
    state.history.last = snap.history
    state.predicted, state.elastic, state.retries = snap.predicted, set(snap.elastic), snap.retries
    return state


def restore_partitions(into: Partitions, data: PartitionsData) -> None:
    """Fill ``into`` (a ``Partitions`` or a subclass of it, such as a partitioned leader's ``OwnNodes``)
    with ``data``: what the subclass adds (its own configuration) stays."""
    vars(into).update(vars(Partitions.from_data(data)))

