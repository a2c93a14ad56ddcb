"""Helpers for end-to-end tests against a real nats-server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode
from services.runtime.jetstream import JetStreamLog
from services.domain.protocol import Record


async def read_log(url: str) -> list[Record]:
    log = await JetStreamLog.open(url, name="test-reader", create=False)
    out: list[Record] = []
    try:
        async for batch in log.read(1):
            out.extend(batch)
    finally:
        await log.close()
    return out


def events_of(records: list[Record]) -> list[c.Event]:
    out = []
    for r in records:
        try:
            out.append(decode(r.data))
        except DecodeError:
            pass
    return out


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


class Tally:
    """Counts events by type (and by job) from a core subscription to horizon.evt.>."""

    def __init__(self) -> None:
        self.by_type: dict[str, int] = {}
        self.by_job: dict[tuple[str, str], int] = {}
        self.last: dict[tuple[str, str], dict[str, Any]] = {}

    async def on_msg(self, msg: Any) -> None:
        body = json.loads(msg.data)
        kind = body.get("type", "?")
        self.by_type[kind] = self.by_type.get(kind, 0) + 1
        key = (kind, body.get("job_id") or body.get("node") or "")
        self.by_job[key] = self.by_job.get(key, 0) + 1
        self.last[key] = body

    def count(self, kind: str) -> int:
        return self.by_type.get(kind, 0)

    def has(self, kind: str, job_id: str) -> bool:
        return (kind, job_id) in self.by_job
