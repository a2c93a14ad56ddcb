"""Answers that fit in one NATS message: the listing queries answer in pages under ``max_payload``.

A reply larger than the server's ``max_payload`` (1 MiB by default) never leaves the projection:
nats-py refuses it before sending, in a subscription callback nobody awaits, and the asker sees
only a timeout. So every answer of ``horizon.query.*`` is encoded by a ``Pager``:

* a listing answer (its rows under ``Listing.key``) keeps the longest run of its rows that fits in
  ``Pager.budget`` bytes (``max_payload`` less ``HEADROOM_BYTES`` for headers the server or an
  account import may add), and says where the next page starts;
* an answer that does not fit even with one row (one giant row, or an answer that is no listing)
  is answered with ``{"error": ...}`` naming the limit, and logged: never a silent drop.

**The paging fields** every listing answer carries (``page_fields``; the names of the first three
can be another, e.g. ``events_offset`` in ``horizon.query.job``, ``history_offset`` in ``usage``):

``offset``       the position of the page's first row in the listing (as it stands at this answer)
``total``        how many rows the listing holds
``next_offset``  where the next page starts, ``null`` when this page ends the listing
``next``         the request fields to merge into the same request for the next page, or ``null``

A page holds at most the ``limit`` asked for and may hold fewer (cut to fit, or because the
projection fetched about one message's worth: ``Pager.rows``); ``next`` always says where to go on.

**Consistency.** Each page is read at its own moment. A listing ordered by a key that never
changes and only grows at its end pages exactly: ``jobs`` in submission order (by its sequence in
the log, ``next`` carries ``after``: a keyset cursor, not an offset), a job's ``events`` and
``decisions`` (by sequence). There, every row that matches the filters for the whole paging comes
exactly once, whatever else changes; a row that starts or stops matching meanwhile (a job leaving
PENDING) may or may not come, and never twice. The scheduler's standing (``queue``, ``nodes``,
``allocations``, ``usage``) and ``jobs`` in queue order are ranked by what changes (priority, the
fold's last flush): they page by offset, and a row that moves across a page boundary between two
requests can be missed or come twice (the CLI keeps the first). ``last_seq`` tells each page's
position in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ["HEADROOM_BYTES", "Listing", "Pager", "page_fields"]

log = logging.getLogger("horizon.projections")

HEADROOM_BYTES = 4096  # under max_payload: room for headers (a service import's, tracing) on the reply
_FIRST_GUESS_BYTES = 256.0  # a row's encoded size before a view has answered once
_BIG = 2**53  # stands in for a paging number while the rest of the answer is measured

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class Listing:
    """Where a listing answer keeps its rows and paging fields.

    ``cursor``: for a view ordered by a key that never changes (keyset paging), the key of a row;
    ``next`` then carries ``{"after": <key of the last row>, "offset": 0}``."""

    key: str
    total: str = "total"
    offset: str = "offset"
    next_offset: str = "next_offset"
    cursor: Callable[[dict[str, Any]], Any] | None = None


def page_fields(start: int, shown: int, total: int, *, keyset: bool = False,
                cursor: Any = None) -> tuple[int | None, dict[str, Any] | None]:
    """(next_offset, next) of a page holding rows ``start`` .. ``start + shown - 1`` of ``total``.

    A keyset page's ``next`` always carries ``after``: the cursor of its last row, or None (then
    ``offset`` counts from the listing's start). Worked through: rows 0..999 of 2,500 shown ->
    (1000, {"offset": 1000}); the last 500 -> (None, None)."""
    if start + shown >= total:
        return None, None
    following = start + shown
    if keyset:
        return following, {"after": cursor, "offset": 0 if cursor is not None else following}
    return following, {"offset": following}


class Pager:
    """Encodes answers for one NATS connection (its server's ``max_payload``), cutting listings."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.row_bytes: dict[str, float] = {}  # view -> mean encoded row of its last answer

    @property
    def budget(self) -> int:
        return max(1024, int(self.nc.max_payload) - HEADROOM_BYTES)

    def rows(self, view: str, limit: Any) -> int:
        """How many rows to fetch for one answer of ``view``: ``limit``, at most about a message's
        worth (the last answer's row size), so a big ``limit`` is not read only to be cut."""
        fits = int(self.budget / self.row_bytes.get(view, _FIRST_GUESS_BYTES)) + 1
        return max(0, min(int(limit), fits))

    def encode(self, view: str, body: dict[str, Any], listing: Listing | None = None) -> bytes:
        """``body`` as the JSON of one reply: whole, cut to a page, or an error naming the limit."""
        rows = body.get(listing.key) if listing is not None else None
        if listing is None or not isinstance(rows, list) or "error" in body:
            data = _encoder.encode(body)
            return data if len(data) <= self.budget else self._refuse(view, "the answer", len(data))
        used = len(_encoder.encode(self._envelope(body, listing)))
        parts: list[bytes] = []
        for row in rows:
            part = _encoder.encode(row)
            if used + len(part) + 1 > self.budget:
                break
            parts.append(part)
            used += len(part) + 1
        if parts:
            self.row_bytes[view] = sum(map(len, parts)) / len(parts)
        if len(parts) < len(rows):
            if not parts:
                return self._refuse(view, "one row", len(_encoder.encode(rows[0])))
            if listing.total not in body or listing.offset not in body:
                return self._refuse(view, "the answer", used + len(_encoder.encode(rows[len(parts)])))
            body = {**body, **self._cut(body, listing, rows, len(parts))}
        data = _encoder.encode({**body, listing.key: [msgspec.Raw(p) for p in parts]})
        return data if len(data) <= self.budget else self._refuse(view, "the answer", len(data))

    @staticmethod
    def _envelope(body: dict[str, Any], listing: Listing) -> dict[str, Any]:
        """The answer without its rows, its paging fields as large as they can become."""
        big = {"after": _BIG, "offset": _BIG} if listing.cursor is not None else {"offset": _BIG}
        return {**body, listing.key: [], listing.next_offset: _BIG, "next": big}

    @staticmethod
    def _cut(body: dict[str, Any], listing: Listing, rows: list[Any], shown: int) -> dict[str, Any]:
        """The paging fields of the first ``shown`` of ``rows``: rows were left, so there is a next page
        (even if ``total``, counted a moment before the rows were read, says otherwise)."""
        start = int(body[listing.offset])
        total = max(int(body[listing.total]), start + len(rows))
        cursor = listing.cursor(rows[shown - 1]) if listing.cursor is not None else None
        following, ask = page_fields(start, shown, total, keyset=listing.cursor is not None, cursor=cursor)
        return {listing.next_offset: following, "next": ask}

    def _refuse(self, view: str, what: str, size: int) -> bytes:
        limit = int(self.nc.max_payload)
        log.warning("horizon.query.%s: %s is %d bytes, more than fits in one message (max_payload %d less %d "
                    "for headers); answered with an error", view, what, size, limit, HEADROOM_BYTES)
        return _encoder.encode({"error": (
            f"the answer to horizon.query.{view} does not fit in one message: {what} is {size:,} bytes, and this "
            f"server's max_payload is {limit:,} bytes ({HEADROOM_BYTES:,} of them kept for headers)")})
