"""The short-job lane: idle nodes a fresh long job may not take. Pure.

Under load, what a job's bounded slowdown pays for is waiting, and the jobs that
pay most are the short ones: a 5 s job that arrives when every node is held by
multi-hour jobs waits hours (slowdown in the thousands), while the same hour of
waiting costs a 10-hour job a tenth. A cluster that gives its last idle nodes
to a job that has just arrived and will hold them for hours leaves the next
short job nothing. Slurm sites answer this with a small "debug" or "short"
partition of dedicated nodes; the lane is that, without partitioning the
cluster for good:

* a job is **long** when its time limit is over ``long_s`` (1 h);
* a long job starts now only if, after it, at least ``keep(n)`` of its
  partition's ``n`` schedulable nodes are still idle (no job, nothing placed in
  this decision): one node in ``per`` (64), rounded down, so no lane at all on
  clusters too small to spare a whole node (under 64 nodes);
* a long job that has waited ``patience_s`` (30 min) since it was accepted no
  longer defers to the lane, so the lane delays any job by at most that.

Worked through, 256 nodes: ``keep = 256 // 64 = 4``. With 9 idle nodes, a
fresh 5-node job of 2 h starts (4 idle after it), a fresh 6-node job of 2 h
waits (3 after it) and so does any long job with 4 or fewer idle, while a
6-node job of 30 min, or the same 2 h job accepted 30 min ago, starts. Only
``now`` (the decision's event time) and the job's ``accepted_ts`` enter, so the
decision replays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from events import catalogue as c
from services.domain.cluster import Cluster

__all__ = ["Lane", "LaneLedger"]


@dataclass(frozen=True)
class Lane:
    long_s: float = 3_600.0  # a job whose time limit is over this is long
    per: int = 64  # one node in this many of the partition's schedulable ones is kept idle for short jobs
    patience_s: float = 1_800.0  # a long job accepted this long ago no longer defers

    def keep(self, nodes: int) -> int:
        """Idle nodes kept out of ``nodes`` schedulable ones."""
        return nodes // self.per

    def applies(self, limit_s: float, waited_s: float) -> bool:
        """Does a job of this time limit, waiting this long, defer to the lane?"""
        return limit_s > self.long_s and waited_s < self.patience_s


class LaneLedger:
    """The idle nodes of one decision: schedulable nodes with no job, less what the decision places."""

    def __init__(self, cluster: Cluster, placed: Iterable[list[c.NodeAllocation]] = ()) -> None:
        """``placed``: the allocations the decision has made so far."""
        self.schedulable = frozenset(n.name for n in cluster.nodes.values() if n.schedulable)
        self.idle = {n for n in self.schedulable if not cluster.nodes[n].jobs}
        self._pools: dict[frozenset[str] | None, int] = {}  # partition -> its schedulable nodes (one decision)
        for allocations in placed:
            self.take(allocations)

    def take(self, allocations: Iterable[c.NodeAllocation]) -> None:
        for alloc in allocations:
            self.idle.discard(alloc.node)

    def defers(self, lane: Lane, allocations: list[c.NodeAllocation], members: frozenset[str] | None) -> int | None:
        """The idle nodes kept (``keep``) when starting ``allocations`` would leave fewer, else None.
        ``members``: the job's partition's nodes (None: the whole cluster)."""
        pool = self._pools.get(members)
        if pool is None:
            pool = self._pools[members] = len(self.schedulable if members is None else self.schedulable & members)
        keep = lane.keep(pool)
        if keep < 1:
            return None
        idle = self.idle if members is None else self.idle & members
        after = len(idle) - sum(1 for alloc in allocations if alloc.node in idle)
        return keep if after < keep else None
