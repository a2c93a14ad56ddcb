"""What every SQLite read model does alike: open in WAL mode with its schema, and read its position."""

from __future__ import annotations

from pathlib import Path

import aiosqlite

__all__ = ["open_database", "stored_position"]


async def open_database(path: str, schema: str) -> aiosqlite.Connection:
    """A connection to ``path`` (its folder made if need be; ``:memory:`` works too), journal in WAL,
    ``synchronous=NORMAL`` (a crash of the process loses nothing committed; see NATS-NOTES on
    batching), with ``schema`` applied."""
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = await aiosqlite.connect(path)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.executescript(schema)
    await db.commit()
    return db


async def stored_position(db: aiosqlite.Connection, projection: str) -> int:
    """The last stream sequence ``projection``'s rows show (its ``tracking`` row; 0 if none)."""
    async with db.execute("SELECT last_seq FROM tracking WHERE projection = ?", (projection,)) as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0
