"""Replay a recorded log through the services' pure cores and check every decision it recorded.

This is the engine of ``horizon audit`` (``services/front/cli/audit.py``, described in
docs/audit.md); ``replay_decisions`` runs it for one core (the tests use it
for every service).

**What is a decision.** Every record under a decision service's subjects,
``horizon.evt.<service>.<Type>.<id>`` with ``<service>`` one of
``DECISION_SERVICES``, *claims* to be that service's decision, whoever
published it. The subject, not the ``source`` field a publisher writes, says
whose it is: nothing stops a client from writing ``"source": "placement"``,
and NATS permissions are granted per subject. A claim must carry a
``basis_seq`` before its own sequence and be reproduced exactly, else it is a
mismatch. Claims elsewhere are caught too, since every service folds a
``JobScheduled`` wherever it was published under ``horizon.evt.``: an event of
a type only decision services publish (``events.subjects.PUBLISHERS``) on
another party's subject (``horizon.evt.agent.JobScheduled.x``), or any event
naming a decision service as its ``source`` on another's subject.

Not decisions, and not checked: inputs (``horizon.in.>``), the agents' reports
and the clock (their subjects, their types), a leased runner's ``LeadershipClaimed`` (its
fence, ``services/runtime/claim.py``: counted in ``claims``), and the *observations* of
inventory's heartbeat watch, ``NodeLost`` and ``NodeReady`` with
``basis_seq`` 0 (each core names its own: ``observations``): they record wall-clock silence, which no
replay of the log can reproduce; the log takes them as inputs.

**How a decision is checked.** The records are folded through the same
``fold_event`` and ``decode_record`` the live runner uses, every core in one
pass. Just before folding the first record past a basis ``b``, each core with
decisions recorded at ``b`` is asked ``decide`` on its state at ``b``, and:

* each decision recorded at ``b`` must be among the replayed ones with the
  same id and *the same bytes* (the runner publishes ``encode(event)``
  unchanged): otherwise it is a mismatch, "not decided by replay" when no
  replayed decision has its id (a forged one), "decided differently" when one
  has (a tampered payload), and "recorded bytes differ" when only the bytes
  differ (extra fields, another key order); a decision recorded before fields were added to its
  type (it lacks them, and decodes to exactly the replayed one) is reproduced;
* a replayed decision that is not recorded at ``b`` must be in the log
  elsewhere (a duplicate the stream dropped after a restart, decided again at
  a later basis under the same deterministic id); if it is nowhere, it is a
  mismatch, "decided by replay but missing from the log": the log does not
  hold what the same code decides on it, which is what a deleted decision
  looks like (see docs/audit.md for the one benign cause). A decision type a core names in
  ``absent_from_old_logs`` (submission's ``LogLayoutChanged``: a log written before the layout
  marker existed has none, and its decisions were made without it) is not reported missing.

Also mismatches: an exact second copy of a decision (the runner reads the log
to its end before deciding and publishes under ``Nats-Msg-Id`` = id, so a
second copy is someone else's; a second copy that differs is checked like
any claim and is "decided differently"), a claim whose ``basis_seq`` is 0 (and is not an
observation) or not before its own sequence, an undecodable record on a
service subject, and a gap in the stream's sequences (a deleted record).

Once a forged decision is in the log, the live services folded it like any
other record, and so does the replay: the later decisions are reproduced
against the log as it is, and only the forgery itself is reported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from events import catalogue as c
from events.base import Event
from events.codec import DecodeError, decode, encode
from events.subjects import DECISION_SERVICES, PUBLISHERS, parse_subject, service_of
from services.runtime.consume import decode_record
from services.runtime.log import subject_matches
from services.domain.protocol import Record
from services.domain.protocol import Core, fold_event, fold_undecodable

__all__ = [
    "observations",
    "AuditReport",
    "ReplayReport",
    "audit",
    "replay_decisions",
    "concerns",
]


def observations(cores: Sequence[Core[Any]]) -> frozenset[tuple[str, str]]:
    """(service, event type) pairs that the cores record with basis_seq 0 as observations of the world
    (a core's ``observations``, e.g. inventory's heartbeat watch), not as decisions."""
    return frozenset((core.name, t) for core in cores for t in getattr(core, "observations", ()))


REPRODUCED = "reproduced"
OBSERVATION = "observation"
CLAIM = "leader-claim"  # a runner's LeadershipClaimed (services/runtime/claim.py): the fence, not a decision

# mismatch kinds
NOT_DECIDED = "not-decided"  # no replayed decision has its id: forged
DIFFERENT = "different"  # replay decided the same id with other content: tampered
BYTES = "bytes"  # the same event, but not the bytes the service publishes
UNPUBLISHED = "unpublished"  # replay decided it; the log does not hold it
DUPLICATE = "duplicate"
NO_BASIS = "no-basis"
BAD_BASIS = "basis-not-before"
IMPOSTOR = "wrong-publisher"
UNDECODABLE = "undecodable"
GAP = "gap"


@dataclass
class ServiceTally:
    decisions: int = 0
    reproduced: int = 0
    mismatches: int = 0
    unpublished: int = 0


@dataclass
class AuditReport:
    """What an audit found. ``decisions`` counts the recorded claims checked; ``mismatches``
    holds every claim not reproduced, plus decisions missing from the log and gaps."""

    decisions: int = 0
    reproduced: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    observations: int = 0
    claims: int = 0  # leaders' claims (LeadershipClaimed), counted apart from the decisions
    records: int = 0
    first_seq: int = 0
    last_seq: int = 0
    services: dict[str, ServiceTally] = field(default_factory=dict)
    verdicts: dict[int, str] = field(default_factory=dict)  # seq of each checked claim -> REPRODUCED | kind

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass
class ReplayReport:
    service: str
    decisions: int = 0
    reproduced: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)


def concerns(event: Event, job_id: str) -> bool:
    """Whether ``event`` is part of ``job_id``'s story: about the job, naming it a candidate, or
    preempting another job for it."""
    if getattr(event, "job_id", None) == job_id:
        return True
    if job_id in (getattr(event, "candidates", None) or ()):
        return True
    return getattr(event, "for_job", None) == job_id


def _about(event: Event | None) -> tuple[str | None, str | None]:
    if event is None:
        return None, None
    return getattr(event, "job_id", None), getattr(event, "node", None)


@dataclass
class _Claim:
    seq: int
    service: str
    record: Record
    event: Event
    first: int  # the seq at which its id first appears in the log (its own, unless it is a second copy)


class _Audit:
    def __init__(self, cores: Sequence[Core[Any]], first: int, last: int | None,
                 select: Callable[[Event], bool] | None) -> None:
        self.cores = list(cores)
        self.names = {core.name for core in self.cores}
        self.observations = observations(self.cores)
        self.first = first
        self.last = last
        self.select = select
        self.report = AuditReport(services={core.name: ServiceTally() for core in self.cores})
        self.ids: dict[str, int] = {}  # every event id in the log -> its first seq
        self.recorded: dict[str, dict[int, list[_Claim]]] = {core.name: {} for core in self.cores}

    # ------------------------------------------------------------------ classification

    def in_window(self, seq: int) -> bool:
        return seq >= self.first and (self.last is None or seq <= self.last)

    def wanted(self, event: Event | None) -> bool:
        return self.select is None or (event is not None and self.select(event))

    def mismatch(self, kind: str, reason: str, *, service: str, seq: int | None, record: Record | None,
                 event: Event | None, basis: int | None = None, replayed: bytes | None = None) -> None:
        job, node = _about(event)
        self.report.mismatches.append({
            "seq": seq, "basis_seq": basis, "service": service,
            "type": event.event_type if event is not None else (record.subject.split(".")[3]
                                                                 if record is not None and record.subject.count(".") >= 3
                                                                 else None),
            "id": event.id if event is not None else None, "job": job, "node": node,
            "subject": record.subject if record is not None else None,
            "kind": kind, "reason": reason,
            "recorded": record.data.decode("utf-8", "replace") if record is not None else None,
            "replayed": replayed.decode() if replayed is not None else None,
        })
        tally = self.report.services.get(service)
        if tally is not None:
            if seq is not None and kind != GAP:
                tally.mismatches += 1
            if kind == UNPUBLISHED:
                tally.unpublished += 1
        if seq is not None and kind not in (GAP, UNPUBLISHED):
            self.report.verdicts[seq] = kind

    def claim_failed(self, kind: str, reason: str, service: str, record: Record, event: Event | None,
                     basis: int | None = None) -> None:
        self.report.decisions += 1
        self.report.services[service].decisions += 1
        self.mismatch(kind, reason, service=service, seq=record.seq, record=record, event=event, basis=basis)

    def classify(self, records: Sequence[Record]) -> None:
        previous = 0
        for r in records:
            self.report.records += 1
            if not self.report.first_seq:
                self.report.first_seq = r.seq
            if previous and r.seq > previous + 1 and (self.last is None or previous < self.last):
                missing = f"{previous + 1}" if r.seq == previous + 2 else f"{previous + 1}-{r.seq - 1}"
                self.mismatch(GAP, f"the stream has no record at seq {missing}: deleted or purged, so the "
                                   f"log no longer shows everything the services decided on",
                              service="", seq=None, record=None, event=None, basis=None)
            previous = self.report.last_seq = r.seq
            try:
                event: Event | None = decode(r.data)
            except DecodeError:
                event = None
            if event is not None and event.id:
                first = self.ids.setdefault(event.id, r.seq)
            else:
                first = r.seq
            subject = parse_subject(r.subject)
            if subject is None or subject.kind != "event":
                continue  # an input: not a decision (a decision on an input subject is never folded)
            owner = subject.owner
            if owner in self.names:
                if not self.in_window(r.seq) or not self.wanted(event):
                    continue
                self.claim(owner, r, event, subject.name, first)
            elif event is not None:
                self.foreign(owner, r, event, subject.name)

    def claim(self, owner: str, r: Record, event: Event | None, subject_type: str, first: int) -> None:
        """A record on ``owner``'s subjects: it must be a decision ``owner`` makes."""
        if event is None:
            self.claim_failed(UNDECODABLE, f"not an event {owner} could have published", owner, r, None)
            return
        if event.event_type != subject_type:
            self.claim_failed(UNDECODABLE, f"{event.event_type} published on a {subject_type} subject: no service "
                                           f"publishes that (each service folds it as undecodable)", owner, r, event)
            return
        if isinstance(event, c.LeadershipClaimed):
            self.report.claims += 1
            self.report.verdicts[r.seq] = CLAIM
            return
        basis = getattr(event, "basis_seq", 0) or 0
        if basis == 0:
            if (owner, event.event_type) in self.observations:
                self.report.observations += 1
                self.report.verdicts[r.seq] = OBSERVATION
                return
            self.claim_failed(NO_BASIS, f"{owner} records every {event.event_type} with a basis_seq; this one has "
                                        f"none: not decided by {owner}", owner, r, event, basis)
            return
        if basis >= r.seq:
            self.claim_failed(BAD_BASIS, f"basis_seq {basis} is not before the decision's own seq {r.seq}: no "
                                         f"service decides on records it has not read", owner, r, event, basis)
            return
        self.report.decisions += 1
        self.report.services[owner].decisions += 1
        self.recorded[owner].setdefault(basis, []).append(_Claim(r.seq, owner, r, event, first))

    def foreign(self, owner: str, r: Record, event: Event, subject_type: str) -> None:
        """A record on a subject of a party whose decisions are not replayed here (an agent, the clock, a
        client): flagged if it is a decision in disguise."""
        if event.event_type != subject_type:
            return  # folded by nobody (undecodable for the services)
        claimed: str | None = None
        publishers = PUBLISHERS.get(event.event_type)
        if publishers is not None and owner not in publishers:
            if service_of(owner) in publishers:
                return  # a partition leader of a service that publishes it (docs/scaling.md), not replayed here
            claimed = next((p for p in publishers if p in self.names), None)
            if claimed is None and any(p in DECISION_SERVICES for p in publishers):
                return  # a decision of a service this audit does not replay
            why = (f"{event.event_type} is published only by {' or '.join(publishers)}; this one came on a "
                   f"subject of {owner!r}, and every service folds it as if it were real")
        elif event.source in self.names and event.source != owner:
            claimed = event.source
            why = f"claims to come from {claimed} but was published on a subject of {owner!r}"
        if claimed is None or not self.in_window(r.seq) or not self.wanted(event):
            return
        self.claim_failed(IMPOSTOR, why, claimed, r, event, getattr(event, "basis_seq", None))

    # ------------------------------------------------------------------ replay

    def replay(self, records: Sequence[Record], progress: Callable[[int], None] | None) -> None:
        plan = []
        for core in self.cores:
            bases = sorted(self.recorded[core.name])
            if bases:
                whole = all(p in ("horizon.>", ">") for p in core.subjects)
                plan.append([core, core.initial(), bases, 0, whole])
        if not plan:
            return
        for done, r in enumerate(records, 1):
            if progress is not None and not done % 2000:
                progress(done)
            active = False
            for entry in plan:
                core, state, bases, i, whole = entry
                while i < len(bases) and bases[i] < r.seq:
                    self.check(core, state, bases[i])
                    i += 1
                entry[3] = i
                active = active or i < len(bases)
            if not active:
                break
            error = ""
            try:
                event: Event | None = decode_record(r)
            except DecodeError as exc:
                event, error = None, str(exc)
            for entry in plan:
                core, state, bases, i, whole = entry
                if i >= len(bases) or not (whole or any(subject_matches(p, r.subject) for p in core.subjects)):
                    continue
                if event is None:
                    entry[1] = fold_undecodable(core, state, r, error)
                else:
                    entry[1] = fold_event(core, state, r, event)
        for core, state, bases, i, _ in plan:
            for basis in bases[i:]:
                self.check(core, state, basis)
        if progress is not None:
            progress(len(records))

    def check(self, core: Core[Any], state: Any, basis: int) -> None:
        state.seq = basis
        replayed = {e.id: (e, encode(e)) for e in core.decide(state)}
        claims = self.recorded[core.name][basis]
        tally = self.report.services[core.name]
        for claim in claims:
            event, data = claim.event, claim.record.data
            mine = replayed.get(event.id)
            again = f" (a second version of the decision at seq {claim.first})" if claim.first != claim.seq else ""
            if mine is not None and mine[1] == data and again:
                self.mismatch(DUPLICATE, f"an exact copy of the decision at seq {claim.first}: a service never "
                                         f"publishes a decision twice", service=core.name, seq=claim.seq,
                              record=claim.record, event=event, basis=basis)
                continue
            if mine is not None and (mine[1] == data or (mine[1] == encode(event) and _older_schema(data, mine[1]))):
                self.report.reproduced += 1
                tally.reproduced += 1
                self.report.verdicts[claim.seq] = REPRODUCED
                continue
            if mine is None:
                kind, why = NOT_DECIDED, f"not decided by replay: {core.name} decides no such event at basis {basis}"
            elif mine[1] == encode(event):
                kind, why = BYTES, "the decision replay makes, but not the bytes the service publishes"
            else:
                kind = DIFFERENT
                fields = differing_fields(mine[1], data)
                why = f"decided differently by replay at basis {basis}" + (f" ({', '.join(fields)})" if fields else "")
            self.mismatch(kind, why + again, service=core.name, seq=claim.seq, record=claim.record, event=event, basis=basis,
                          replayed=mine[1] if mine is not None else None)
        recorded_ids = {claim.event.id for claim in claims}
        # decisions a log written before they existed lacks (submission's layout marker): not missing
        newer = getattr(core, "absent_from_old_logs", ())
        for event_id, (event, data) in replayed.items():
            if event_id in recorded_ids or event_id in self.ids or not self.wanted(event) or event.event_type in newer:
                continue
            self.mismatch(UNPUBLISHED, f"decided by replay at basis {basis} but missing from the log",
                          service=core.name, seq=None, record=None, event=event, basis=basis, replayed=data)


def _older_schema(recorded: bytes, replayed: bytes) -> bool:
    """The recorded decision is the replayed one as an older version of the code wrote it: every field it
    has is the replayed one's, and what it lacks are fields added since (the decoder gave them their
    defaults, and the replayed bytes are the recorded event's own re-encoding). Anything extra or
    different is still a mismatch."""
    try:
        return _within(json.loads(recorded), json.loads(replayed))
    except ValueError:
        return False


def _within(old: Any, new: Any) -> bool:
    if isinstance(old, dict) and isinstance(new, dict):
        # the same keys in the same order, but for those added since
        return (list(old) == [key for key in new if key in old]
                and all(_within(value, new[key]) for key, value in old.items()))
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_within(a, b) for a, b in zip(old, new))
    return bool(old == new and type(old) is type(new))


def differing_fields(a: bytes, b: bytes) -> list[str]:
    """The top-level fields in which two encoded events differ."""
    try:
        x, y = json.loads(a), json.loads(b)
    except ValueError:
        return []
    if not isinstance(x, dict) or not isinstance(y, dict):
        return []
    return sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))


def audit(records: Sequence[Record], cores: Sequence[Core[Any]], *, first: int = 1, last: int | None = None,
          select: Callable[[Event], bool] | None = None,
          progress: Callable[[int], None] | None = None) -> AuditReport:
    """Check every decision recorded at a seq in ``first..last`` (and, with ``select``, about what it
    selects) against what ``cores`` decide on the log; ``records`` is the log from seq 1, in order.

    The cores must be configured as the live services were (policy, backfill mode, virtual time).
    """
    run = _Audit(cores, first, last, select)
    run.classify(records)
    run.replay(records, progress)
    run.report.mismatches.sort(key=lambda m: (m["seq"] is None, m["seq"] or 0, m["basis_seq"] or 0))
    return run.report


def replay_decisions(core: Core[Any], records: Sequence[Record] | Any) -> ReplayReport:
    """One core's decisions in ``records`` (the log from seq 1), checked as ``audit`` checks them."""
    report = audit(list(records), [core])
    return ReplayReport(core.name, report.decisions, report.reproduced,
                        [m for m in report.mismatches if m["kind"] != GAP])
