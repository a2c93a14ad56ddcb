"""Inventory's job table: the jobs as inventory reads them, lean. Pure.

Inventory reads a job only while it holds resources: its attempt, allocations, start and limit, and a
few fields of its spec (what evicts it, stops it or shrinks it: ``READ``). A million queued jobs held
with their whole specs cost inventory what they cost scheduling (a ~600-byte spec each); held as
``READ`` alone they are nearly all equal, so one spec serves every job that agrees on them. What
placement says of a waiting job (``PlacementBlocked``), a priority change and what only dependencies
read (arrays, checkpoints of ended jobs) are none of inventory's and are not kept.

A test (tests/services/test_inventory_settle.py) checks that inventory's modules read no spec field
outside ``READ``.
"""

from __future__ import annotations

import msgspec

from events import catalogue as c
from services.domain.jobs import JobTable, Transition, compact

__all__ = ["READ", "InventoryJobs", "inventory_spec"]

# The spec fields inventory reads: QoS class and requests (memory pressure, services/domain/qos.py),
# tolerations (NoExecute evictions), elastic size, checkpoint signal, requeue and time limit (drains),
# and the restart policy (when a job ends for good: services/domain/restart.py).
READ: tuple[str, ...] = (
    "cpus_milli", "memory_bytes", "gpus", "gpus_per_node", "tasks_per_node", "nodes", "min_nodes",
    "cpu_limit_milli", "memory_limit_bytes", "exclusive", "whole_node_memory", "tolerations",
    "checkpoint_signal", "requeue", "time_limit_s", "restart_policy", "max_retries",
)
_BLANK = c.JobSpec(tenant="")
_read = msgspec.structs.astuple  # (all fields; READ picked by index below)
_AT = tuple(c.JobSpec.__struct_fields__.index(name) for name in READ)
# READ's values -> the one spec holding them (bounded: cleared when full, as jobs.py's command lines)
_SHARED: dict[tuple[object, ...], c.JobSpec] = {}
_SHARED_MAX = 4_096
_IGNORED = (c.PlacementBlocked, c.JobPriorityChanged)  # placement's explanations; classes inventory does not read


def inventory_spec(spec: c.JobSpec) -> c.JobSpec:
    """A spec holding ``spec``'s ``READ`` fields and defaults elsewhere, the same object for equal ones."""
    values = _read(spec)
    key = tuple(values[i] for i in _AT)
    try:
        known = _SHARED.get(key)
    except TypeError:  # an unhashable value: a spec of its own
        return compact(msgspec.structs.replace(_BLANK, **dict(zip(READ, key))))
    if known is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        known = _SHARED[key] = compact(msgspec.structs.replace(_BLANK, **dict(zip(READ, key))))
    return known


class InventoryJobs(JobTable):
    """A ``JobTable`` holding ``inventory_spec``s, without what only dependencies or placement read."""

    for_dependencies = False

    def shape(self, spec: c.JobSpec) -> c.JobSpec:
        return inventory_spec(spec)

    def apply(self, event: c.Event, seq: int, time: float) -> Transition | None:
        if isinstance(event, _IGNORED):
            return None
        return super().apply(event, seq, time)
