"""The runner of a scheduling partition leader: a cycle that charges a quota is fenced on every
leader's cycles (docs/scaling.md, ``services/scheduling/partitioned.py``). I/O; the core stays pure."""

from __future__ import annotations

from collections.abc import Sequence

from events import catalogue as c
from events.base import Event
from events.subjects import CYCLES_FILTER
from services.domain.queue.state import SchedulingState
from services.runtime.log import Fence, LogConflict, Outgoing, PublishAck
from services.runtime.service import ServiceRunner
from services.scheduling.partitioned import PartitionedSchedulingCore

__all__ = ["PartitionedSchedulingRunner"]


class PartitionedSchedulingRunner(ServiceRunner[SchedulingState]):
    """The runner of a partition leader: a round whose cycle admits a quota-limited job is published
    in two fenced parts: everything but the cycle on its own subjects (the lease's fence), then the
    cycle on ``CYCLES_FILTER`` at the last cycle of any leader this runner has applied."""

    async def _publish_fenced(self, items: list[Outgoing], decisions: Sequence[Event]) -> list[PublishAck] | None:
        core: PartitionedSchedulingCore = self.core  # type: ignore[assignment]
        cycle = decisions[-1]
        if not isinstance(cycle, c.SchedulingCycleCompleted) or not core.charges_quota(self.state, cycle.candidates):
            return await super()._publish_fenced(items, decisions)
        acks: list[PublishAck] = []
        if len(items) > 1:
            head = await super()._publish_fenced(items[:-1], decisions[:-1])
            if head is None:
                return None
            acks = head
        try:
            seen = await self.log.last_seq(CYCLES_FILTER)
            if seen > self.state.seq:
                raise LogConflict(f"{CYCLES_FILTER}: a cycle at seq {seen} is not applied yet")
            tail = await self.log.publish_fenced([items[-1]], Fence(CYCLES_FILTER, seen))
        except LogConflict as exc:
            return self._fenced_out(len(items), exc, await self._log_end(), acks)
        return acks + tail
