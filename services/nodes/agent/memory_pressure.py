"""The agent's memory-pressure watch: when the jobs on a node use more memory than the node gives
them, say so in the log (``NodeMemoryPressure``), and inventory evicts (``services/inventory/qos.py``).

Every ``interval_s`` the agent asks each running attempt's cgroup for its working set
(``JobCgroup.memory_used``: usage less the inactive file cache, the kubelet's measure) and sums them
per node. The line is the node's declared ``memory_bytes`` less ``reserve_bytes``, what is kept free
for the agent, the supervisors and the kernel (the kubelet's ``memory.available`` hard eviction
threshold, 100 MiB by default there; here the smaller of 100 MiB and a tenth of the node, or
``HORIZON_MEMORY_RESERVE``). Declared memory, not the machine's: a node that declares less than the
machine has is watched against what it declared, the promise placement packed against.

The agent measures and reports; it decides nothing. The eviction is inventory's decision on the
measure the log holds, so ``horizon audit`` replays it. A measure is published when a node is over
the line and either the attempts on it changed since its last report or ``republish_s`` passed, so a
node under lasting pressure that nothing can relieve (only guaranteed jobs) writes one record per
``republish_s``, not one per interval.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from events import catalogue as c
from events.resources import parse_memory
from services.domain.envelope import decision_id

__all__ = ["MemoryWatch", "default_reserve", "RESERVE_ENV", "DEFAULT_RESERVE_BYTES"]

RESERVE_ENV = "HORIZON_MEMORY_RESERVE"  # e.g. 256Mi: memory each node keeps free from its jobs
DEFAULT_RESERVE_BYTES = 100 * 2**20  # the kubelet's default memory.available<100Mi


def default_reserve(memory_bytes: int) -> int:
    """``HORIZON_MEMORY_RESERVE`` if set, else the smaller of 100 MiB and a tenth of the node's memory."""
    given = os.environ.get(RESERVE_ENV, "").strip()
    if given:
        return parse_memory(given, RESERVE_ENV)
    return min(DEFAULT_RESERVE_BYTES, memory_bytes // 10)


class MemoryWatch:
    """What to report for one node's measure (see the module doc); wall time comes in as ``now``."""

    def __init__(self, node: str, memory_bytes: int, reserve_bytes: int, republish_s: float = 30.0) -> None:
        self.node = node
        self.memory_bytes = memory_bytes
        self.reserve_bytes = reserve_bytes
        self.republish_s = republish_s
        self._last: tuple[frozenset[tuple[str, int]], float] | None = None

    @property
    def line(self) -> int:
        return self.memory_bytes - self.reserve_bytes

    def observe(self, uses: Sequence[c.JobMemoryUse], now: float) -> c.NodeMemoryPressure | None:
        """The report this measure calls for, or None (under the line, or reported already)."""
        used = sum(u.used_bytes for u in uses)
        if used <= self.line:
            self._last = None
            return None
        attempts = frozenset((u.job_id, u.attempt) for u in uses)
        if self._last is not None and self._last[0] == attempts and now - self._last[1] < self.republish_s:
            return None
        self._last = (attempts, now)
        # One measure per node and ms. The node is the report's aggregate (its subject's last token), as
        # for every node event; reports before this said none and were published under ``_``.
        return c.NodeMemoryPressure(
            id=decision_id("agent", c.NodeMemoryPressure, self.node, round(now * 1000)), ts=now,
            source=f"agent/{self.node}", correlation_id=self.node, node=self.node, memory_bytes=self.memory_bytes,
            reserve_bytes=self.reserve_bytes, used_bytes=used,
            jobs=sorted(uses, key=lambda u: (u.job_id, u.attempt)),
        )
