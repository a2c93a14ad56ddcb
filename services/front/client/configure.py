"""An operator's configuration (``horizon account|fairshare|policy|profile|reservation|dataset|preemption|
partition set``, ``horizon tenant``, ``horizon user``): published on ``horizon.in._admin.<verb>``, then asked
of the scheduler's read model until it says whether it was applied or rejected, and why."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from events import catalogue as c
from events.subjects import admin_subject
from services.front.client.client import publish_input, query, session
from services.runtime.log import LogError

__all__ = ["configure"]


def configure(nats_url: str, verb: str, event: c.Event, wait_s: float = 10.0) -> dict[str, Any]:
    """Publish an operator input and wait until the scheduler's view has seen it: applied or rejected."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            seq = await publish_input(nc, admin_subject(verb), event, msg_id=f"{verb}/{uuid.uuid4().hex}")
            deadline = asyncio.get_running_loop().time() + wait_s
            while True:
                try:
                    status = await query(nc, "config", {"seq": seq}, timeout_s=2.0)
                except LogError:
                    status = {"seen": False}
                if status.get("seen"):
                    return {"seq": seq, "applied": not status.get("rejected"), "reason": status.get("rejected")}
                if asyncio.get_running_loop().time() > deadline:
                    return {"seq": seq, "applied": None, "reason": "the scheduler has not seen it yet"}
                await asyncio.sleep(0.1)

    return asyncio.run(go())
