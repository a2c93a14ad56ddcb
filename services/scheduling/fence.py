"""The runner of a scheduling partition leader: a cycle that charges a quota is fenced on every
leader's cycles (docs/scaling.md, ``services/scheduling/partitioned.py``). I/O; the core stays pure."""

from __future__ import annotations

import logging

from events import catalogue as c
from events.codec import decode
from events.subjects import CYCLES_FILTER
from services.domain.queue.state import SchedulingState
from services.runtime.log import Fence, LogConflict, Outgoing, PublishAck
from services.runtime.service import ServiceRunner
from services.scheduling.partitioned import PartitionedSchedulingCore

__all__ = ["PartitionedSchedulingRunner"]

log = logging.getLogger("horizon.service")


class PartitionedSchedulingRunner(ServiceRunner[SchedulingState]):
    """The runner of a partition leader: a round whose cycle admits a quota-limited job is published
    in two fenced parts: everything but the cycle on its own subjects (the lease's fence), then the
    cycle on ``CYCLES_FILTER`` at the last cycle of any leader this runner has applied."""

    async def _publish_fenced(self, items: list[Outgoing]) -> list[PublishAck] | None:
        core: PartitionedSchedulingCore = self.core  # type: ignore[assignment]
        last = items[-1]
        if ".SchedulingCycleCompleted." not in last.subject:
            return await super()._publish_fenced(items)
        cycle = decode(last.data)
        assert isinstance(cycle, c.SchedulingCycleCompleted)
        if not core.charges_quota(self.state, cycle.candidates):
            return await super()._publish_fenced(items)
        acks: list[PublishAck] = []
        if len(items) > 1:
            head = await super()._publish_fenced(items[:-1])
            if head is None:
                return None
            acks = head
        try:
            seen = await self.log.last_seq(CYCLES_FILTER)
            if seen > self.state.seq:
                raise LogConflict(f"{CYCLES_FILTER}: a cycle at seq {seen} is not applied yet")
            tail = await self.log.publish_fenced([last], Fence(CYCLES_FILTER, seen))
        except LogConflict as exc:
            self.stats.fenced += 1
            end = max(await self.log.last_seq(), self.state.seq + 1)
            self.awaiting = max(self.awaiting, end, *(a.seq for a in acks))
            log.info(
                "%s: a quota cycle at basis %d refused (%s); deciding again once applied to %d",
                self.name, self.state.seq, exc, end)
            return None
        return acks + tail
