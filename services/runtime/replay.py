"""Replay a recorded log through a service's pure core and check every decision it recorded.

A decision is an event published by the service (``source`` = its name) with
a ``basis_seq`` > 0. Replay folds the log through the same ``fold_record`` the
live runner uses; just before folding the first record past a basis ``b`` it
asks ``decide`` on the state at ``b`` and compares, byte for byte, with what
was recorded at that basis:

* every recorded decision must be among the replayed ones (else a mismatch:
  the code, the config or the log differs from what decided);
* a replayed decision that was not recorded at that basis must already be
  in the log (a duplicate the stream dropped after a restart), else the
  service failed to publish something it decided.

This is the core of ``horizon audit``; the tests run it for every service.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from events.base import Event
from events.codec import DecodeError, decode, encode
from services.runtime.log import Record, subject_matches
from services.runtime.service import Core, fold_record

__all__ = ["ReplayReport", "replay_decisions"]


@dataclass
class ReplayReport:
    service: str
    decisions: int = 0
    reproduced: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)


def replay_decisions(core: Core[Any], records: Iterable[Record]) -> ReplayReport:
    records = list(records)
    report = ReplayReport(core.name)
    all_ids: set[str] = set()
    recorded: dict[int, list[tuple[int, Event]]] = {}
    for r in records:
        try:
            event = decode(r.data)
        except DecodeError:
            continue
        all_ids.add(event.id)
        basis = getattr(event, "basis_seq", 0)
        if event.source == core.name and basis:
            recorded.setdefault(basis, []).append((r.seq, event))
    report.decisions = sum(len(v) for v in recorded.values())
    bases = sorted(recorded)
    state = core.initial()
    next_basis = 0

    def check(basis: int) -> None:
        state.seq = basis
        replayed = {e.id: encode(e) for e in core.decide(state)}
        got = recorded[basis]
        for seq, event in got:
            if replayed.get(event.id) == encode(event):
                report.reproduced += 1
            else:
                report.mismatches.append({
                    "seq": seq, "basis_seq": basis, "id": event.id, "type": event.event_type,
                    "recorded": encode(event).decode(),
                    "replayed": replayed[event.id].decode() if event.id in replayed else None,
                })
        recorded_ids = {e.id for _, e in got}
        for event_id, data in replayed.items():
            if event_id not in recorded_ids and event_id not in all_ids:
                report.mismatches.append({
                    "seq": None, "basis_seq": basis, "id": event_id, "type": decode(data).event_type,
                    "recorded": None, "replayed": data.decode(),
                })

    for r in records:
        while next_basis < len(bases) and bases[next_basis] < r.seq:
            check(bases[next_basis])
            next_basis += 1
        if any(subject_matches(p, r.subject) for p in core.subjects):
            state, _, _ = fold_record(core, state, r)
    while next_basis < len(bases):
        check(bases[next_basis])
        next_basis += 1
    return report
