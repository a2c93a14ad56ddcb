"""What a partition leader skips of the log (docs/scaling.md, "What a leader folds"). Pure.

A scheduling or placement leader of some partitions folds its partitions' jobs and skips the
others': a job of another partition is skipped at its ``JobAccepted`` (so it never enters the
leader's table), and every later event about a job not in its table (``JOB_EVENTS``) is skipped
too. The runner asks the core's ``skips`` before decoding a record, so a skipped record costs a
split of its subject and a ``peek`` at its body (the job id; an acceptance's partition, account and
licenses), a fraction of a whole decode (measured: 0.2-1 us against 1.5-4 us). A scheduling leader
reads a little more (``peek_outcome``: the attempt and the few fields ``services/domain/foreign.py``
keeps) and keeps what a skipped record says of its job's outcome: its own jobs may depend on that job,
or be singletons of its name. The cores run the
same test on decoded events in ``evolve`` (audit and the simulator decode every record once for all
the cores they fold), so a live leader and its replay fold the same records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from events import catalogue as c
from services.domain.protocol import Record

__all__ = ["JOB_EVENTS", "ACCEPTED", "OutcomePeek", "Peek", "peek", "peek_outcome"]

ACCEPTED = "JobAccepted"
# The events about a job once accepted (a JobRejected is folded whatever its job: a dependency on it ends).
JOB_EVENTS: frozenset[str] = frozenset(
    tag for tag, cls in c.EVENT_TYPES.items()
    if "job_id" in cls.__struct_fields__ and tag not in (ACCEPTED, "JobRejected"))


class _SpecPeek(msgspec.Struct):
    partition: str = ""
    account: str = ""
    licenses: dict[str, int] = {}


class Peek(msgspec.Struct):
    """What ``peek`` reads of a record: the job it is about, and an acceptance's spec in part."""

    type: str = ""
    job_id: str = ""
    spec: _SpecPeek | None = None


class _OutcomeSpecPeek(_SpecPeek):
    # what a scheduling leader keeps of a job it skips (services/domain/foreign.py): its restart rules,
    # array and singleton key (JobSpec's defaults)
    tenant: str = ""
    user: str = ""
    name: str = ""
    hold: bool = False
    array: str | None = None
    restart_policy: str = "never"
    max_retries: int = 0
    requeue: bool = True


class OutcomePeek(msgspec.Struct):
    """What ``peek_outcome`` reads: ``Peek``'s, and the fields that move a skipped job's outcome
    (``services/domain/foreign.py``). Placement does not keep them, so it reads the lighter ``Peek``."""

    type: str = ""
    job_id: str = ""
    spec: _OutcomeSpecPeek | None = None
    attempt: int = 0
    node_lost: bool = False
    out_of_memory: bool = False
    checkpoint_ref: str | None = None


def _peeker(decoder: msgspec.json.Decoder[Any]) -> Any:
    def peek(record: Record) -> Any:
        """The job event ``record`` holds, read in part; None for any other record or a body that does not
        read (it is then decoded whole, and dead-lettered if it must be)."""
        parts = record.subject.split(".", 4)
        if len(parts) < 4 or parts[1] != "evt" or (parts[3] not in JOB_EVENTS and parts[3] != ACCEPTED):
            return None
        try:
            found = decoder.decode(record.data)
        except msgspec.DecodeError:
            return None
        if found.type != parts[3] or not found.job_id or (found.type == ACCEPTED and found.spec is None):
            return None  # what the whole decode would refuse, or does not say: decoded whole
        return found

    return peek


peek: Callable[[Record], Peek | None] = _peeker(msgspec.json.Decoder(Peek))
peek_outcome: Callable[[Record], OutcomePeek | None] = _peeker(msgspec.json.Decoder(OutcomePeek))
peek_outcome.__doc__ = "``peek``, reading an ``OutcomePeek``."
