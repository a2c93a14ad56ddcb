"""How an answer repeats what a client wrote: bounded, and fit for a subject and a header. Pure.

A rejection names what it refuses so that a person can act on it, but what a client wrote can be
a 1 MB string, and the answer carries it several times (the id it is about, the correlation id,
the ``Nats-Msg-Id`` header, the reason's ``repr``). Unbounded, such an answer is larger than the
server accepts in one message (``max_payload``, 1 MiB by default); its publication fails, the
service stops, restarts, decides the same answer again and stops again. And a header cannot
carry a line break at all. So every answer goes through these:

* ``bounded_id`` for an id the answer is about (``JobRejected.job_id``, ``correlation_id``):
  the id itself up to ``ID_CHARS`` characters, else its start and a digest of the whole, so two
  long ids still give two answers. The core folds its answer back by this same value.
* ``id_token`` inside an event ``id`` (the msg id header): the id if it is a job's key in the
  log (a subject token, or ``<tenant>:<id>`` for a tenant's job that came through the intake),
  else ``_invalid-<digest>``, as ``event_subject`` does for the subject: so the answer to
  acme's cancel of ``g-2`` is ``submission/JobCancelled/acme:g-2/<seq>``, like its
  ``submission/JobAccepted/acme:g-2``.
* ``clipped`` for a reason: its first ``REASON_CHARS`` characters and how long it was.

All three are deterministic, so replay reproduces the answers byte for byte.
"""

from __future__ import annotations

import hashlib

from events.subjects import valid_job_key

__all__ = ["ID_CHARS", "REASON_CHARS", "bounded_id", "id_token", "clipped"]

ID_CHARS = 256
REASON_CHARS = 2_000


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


def bounded_id(text: str) -> str:
    """``text`` if at most ``ID_CHARS`` characters, else its start, an ellipsis and a digest of it all."""
    if len(text) <= ID_CHARS:
        return text
    return f"{text[:ID_CHARS - 20]}…{_digest(text)}"


def id_token(text: str) -> str:
    """``text`` if it is a job's key (a subject token, ``[A-Za-z0-9_-]``, 1-128, or ``<tenant>:<id>``
    of two: ``events.subjects.valid_job_key``, the rule of the event's subject), else
    ``_invalid-<digest>``."""
    return text if valid_job_key(text) else f"_invalid-{_digest(text)}"


def clipped(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` if at most ``limit`` characters, else its start and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters in all)"
