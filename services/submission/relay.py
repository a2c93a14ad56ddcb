"""Submission's relay of operator inputs (layout 2: docs/architecture.md, "One filter per service"). Pure.

Every service but submission reads one filter subject, ``horizon.evt.>``, once the log says so
(``LogLayoutChanged``, layout 2). What they used to read from ``horizon.in._admin.<verb>``, an
operator's configuration and node commands, submission relays to them as ``InputRelayed``:

1. **The marker.** The first time submission decides on a log that has no marker (and holds at
   least one record, so that the marker has a basis), it publishes ``LogLayoutChanged`` (id
   ``submission/LogLayoutChanged/2``). The inputs before it are applied raw, where they are, as the
   version that wrote them did: that is what an old log's decisions were made on. Only a core with
   ``mark_layout`` does (the service as ``horizon up``, ``horizon service`` and ``horizon audit`` make
   it, ``part.py``); a core without it (the simulator's, the core's own tests) writes layout 1, the
   log of the version before, and still relays once a marker is in the log.
2. **The relays.** Each operator input of a ``RELAYED_VERBS`` verb stored after the marker, on its
   own admin subject (the decoder admits on ``horizon.in._admin.<verb>`` only the event type the verb
   takes, so a tenant's input is never relayed and nothing can be forged through a relay), is relayed
   once, in log order, with its body as stored: id ``submission/InputRelayed/<input seq>``,
   ``causation_id`` ``seq:<input seq>``. A relay is a decision like any other (a pure function of the
   log), published fenced, replayed by ``horizon audit``; folding it back clears it. An input within
   8 KiB of the server's 1 MiB message limit would not fit in its relay: it is relayed without its body
   (``omitted_bytes``) and no service applies it (no operator command writes one that large).

Who answers an input does not change: each service that refuses a configuration answers it with
``ConfigRejected`` naming the input's sequence, inventory answers node commands under the command's
sequence, and submission still answers the requests about jobs itself (they are not relayed).
"""

from __future__ import annotations

import msgspec

from events import catalogue as c
from events.subjects import RELAY_LAYOUT, RELAYED_VERBS, Subject
from services.domain.envelope import Decider
from services.domain.protocol import Record
from services.submission.state import SubmissionState

__all__ = ["note_input", "note_relay", "relay_decisions", "layout_marker", "MARKER_ID", "MAX_RELAYED_BYTES"]

MARKER_ID = f"submission/LogLayoutChanged/{RELAY_LAYOUT}"
MAX_RELAYED_BYTES = (1 << 20) - 8192  # an input larger is relayed without its body (``omitted_bytes``)


def layout_marker(basis_seq: int, ts: float = 0.0, name: str = "submission") -> c.LogLayoutChanged:
    """The marker as submission decides it (a benchmark writing a log of this layout by hand uses it too)."""
    return c.LogLayoutChanged(id=MARKER_ID, ts=ts, correlation_id="log", source=name, layout=RELAY_LAYOUT,
                              basis_seq=basis_seq)


def note_input(state: SubmissionState, record: Record, subject: Subject) -> None:
    """An operator input on its own admin subject: to relay if the log's layout is 2 (it is after the marker)."""
    if state.layout >= RELAY_LAYOUT and subject.kind == "admin" and subject.name in RELAYED_VERBS:
        state.to_relay[record.seq] = (subject.name, record.data)


def note_relay(state: SubmissionState, event: c.InputRelayed) -> None:
    """A relay folded back: that input is relayed."""
    state.to_relay.pop(event.request_seq, None)


def relay_decisions(state: SubmissionState, name: str, mark: bool) -> list[c.Event]:
    """With ``mark``, the marker if the log has none yet; after it, a relay of every input not yet relayed,
    in log order."""
    if state.layout < RELAY_LAYOUT:
        if not mark or state.seq <= 0:
            return []  # an empty log: the marker waits for a first record to be its basis
        return [layout_marker(state.seq, state.now, name)]
    decide = Decider(name, ts=state.now, source=name, basis_seq=state.seq)
    return [decide(c.InputRelayed, seq, causation_id=f"seq:{seq}", correlation_id=f"seq-{seq}", request_seq=seq,
                   verb=verb, **_body(data))
            for seq, (verb, data) in sorted(state.to_relay.items())]


def _body(data: bytes) -> dict[str, object]:
    """The input as the relay carries it: itself, or nothing and its size if the relay would not fit in a
    message (the server's default max_payload, 1 MiB, less room for the envelope and headers)."""
    if len(data) > MAX_RELAYED_BYTES:
        return {"input": msgspec.Raw(b"null"), "omitted_bytes": len(data)}
    return {"input": msgspec.Raw(data)}
