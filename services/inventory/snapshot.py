"""Inventory's state as bytes and back: its snapshots (services/runtime/service.py reads them). Pure.

As placement's (services/placement/snapshot.py): every field of ``InventoryState`` (a field it does
not know fails ``dump``), maps in the order they were folded in; ``load`` returns None for another
format or configuration, and the runner then folds the whole log.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import catalogue as c
from services.domain.cluster import Node
from services.domain.job_rows import JobColumns, columns, node_data, read_snapshot, restore_columns, restore_nodes

__all__ = ["SNAPSHOT_FORMAT", "dump", "load"]

SNAPSHOT_FORMAT = 4  # 2: ended jobs settled (retries counted), specs as inventory reads them; 3: jobs as columns;
# 4: columns with each job's own number and array task

_FIELDS = frozenset({"seq", "now", "layout", "layout_seq", "relayed_seq", "jobs", "cluster", "commands",
                     "preemptions", "pressure", "retries"})


class _Snapshot(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    counters: tuple[int, float, int, int, int]  # seq, now, layout, layout_seq, relayed_seq
    jobs: JobColumns  # (inventory's table keeps no arrays nor checkpoints: services/inventory/jobs.py)
    settled: dict[str, int]
    nodes: list[Node]
    commands: dict[int, c.NodeCommandIssued]
    preemptions: dict[str, int]
    pressure: dict[str, c.NodeMemoryPressure]
    retries: dict[str, int]


def dump(state: Any, fingerprint: str) -> bytes:  # an InventoryState (core.py imports this module)
    """The whole state, as bytes."""
    unknown = set(vars(state)) - _FIELDS
    assert not unknown, f"inventory snapshot: InventoryState has fields it does not write: {sorted(unknown)}"
    return msgspec.msgpack.encode([
        SNAPSHOT_FORMAT, fingerprint, (state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq),
        columns(state.jobs.jobs), state.jobs.settled, node_data(state.cluster), state.commands, state.preemptions,
        state.pressure, state.retries,
    ])


def load(data: bytes, fingerprint: str, state: Any) -> Any:
    """Fill ``state`` (the core's ``initial()``) with what ``dump`` wrote; None when it is from another
    format or configuration."""
    snap = read_snapshot(data, _Snapshot, SNAPSHOT_FORMAT, fingerprint)
    if snap is None:
        return None
    state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq = snap.counters
    restore_columns(state.jobs, snap.jobs)
    state.jobs.settled = snap.settled
    restore_nodes(state.cluster, snap.nodes)
    state.commands, state.preemptions, state.pressure = snap.commands, snap.preemptions, snap.pressure
    state.retries = snap.retries
    return state
