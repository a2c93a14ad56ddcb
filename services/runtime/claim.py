"""A leader's claim in the log, and the fence of its decisions (``LeadershipClaimed``).

A lease (``services/runtime/lease.py``) says who should decide; it cannot stop a holder paused
between checking it and publishing, nor a decision still on the wire at a takeover. The log itself
must refuse those. A runner that takes its service's lease therefore first publishes a
``LeadershipClaimed`` on the service's one claim subject, ``horizon.evt.<service>.LeadershipClaimed.lease``,
stored only if the last claim there is the one it read; it decides once it has applied the log up
to its own claim, and publishes every decision fenced on it (``Fence(subject, seq)``: JetStream's
``Nats-Expected-Last-Subject-Sequence`` on that literal subject). A successor's claim moves the
fence, so from the moment it is stored every decision of the deposed leader is refused, and the
successor's state holds every decision stored before its claim: the service's decisions stay one
sequence, each decided on a state holding all the earlier ones.

**Why a claim and not the service's own subjects.** The fence used to be the last record matching
``horizon.evt.<service>.>``. nats-server finds a wildcard's last record by visiting every subject it
matches (its per-subject index, one subject per job): at 12,500 nodes and a million jobs, 60% of
nats-server's CPU while the cluster sat idle, most of a submit-to-scheduled of 500 ms
(docs/benchmarks.md §2, "Issue 35, fourth session"). The claim's subject is literal: one lookup,
whatever the size of the log.

A core folds a claim as ``seq`` alone (``fold_event``: not "now", no news), so a claim landing among a
run's records changes no decision, and a replay without it decides alike.

A claim is superseded when the runner applies a later claim on its subject (``saw``); it then
claims again before its next decision, if it still leads by its lease. Refused rounds wait, as
before, until the runner has applied the log to its end, which holds the claim that refused them.
"""

from __future__ import annotations

import time

from events.catalogue.leases import CLAIM_TOKEN, LeadershipClaimed
from events.codec import encode
from events.subjects import event_subject
from services.domain.protocol import Record
from services.runtime.log import EventLog, Fence, LogConflict, Outgoing

__all__ = ["LeaderClaim", "claim_subject"]


def claim_subject(service: str) -> str:
    """``horizon.evt.<service>.LeadershipClaimed.lease``: one literal subject per service (or partition leader)."""
    return event_subject(service, LeadershipClaimed(correlation_id=CLAIM_TOKEN, holder=""))


class LeaderClaim:
    """One runner's claim to lead ``service`` as ``holder``: ``seq`` is its claim's sequence, 0 while it
    has none (not claimed yet, or superseded)."""

    def __init__(self, service: str, holder: str) -> None:
        self.service = service
        self.holder = holder
        self.subject = claim_subject(service)
        self.seq = 0
        self.claims = 0  # claims this runner has stored

    def fence(self) -> Fence:
        """Store only while this claim is the last one."""
        return Fence(self.subject, self.seq)

    def saw(self, record: Record) -> None:
        """An applied record: a later claim on the subject supersedes this one."""
        if record.seq > self.seq and record.subject == self.subject:
            self.seq = 0

    async def take(self, log_: EventLog) -> int:
        """Publish a claim fenced on the last one in the log; its sequence, or 0 if another claim came first."""
        last = await log_.last_seq(self.subject)
        claim = LeadershipClaimed(id=f"{self.service}/LeadershipClaimed/{last}/{self.holder}", ts=time.time(),
                                  source=self.service, correlation_id=CLAIM_TOKEN, holder=self.holder,
                                  previous_seq=last)
        try:
            [ack] = await log_.publish_fenced([Outgoing(self.subject, encode(claim), claim.id)], Fence(self.subject, last))
        except LogConflict:
            return 0
        self.seq = ack.seq
        self.claims += 1
        return ack.seq
