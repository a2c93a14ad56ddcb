"""The intake: the one door through which a tenant's input reaches the log under accounts.

Every submission instance, leader or standby, answers ``horizon.intake.<tenant>.<verb>`` in the
queue group ``intake``. A tenant's account imports that subject under the name it publishes on,
``horizon.in.<tenant>.<verb>`` (deploy/nats/auth.conf, ``horizon up --auth``), so a client's
JetStream publish works unchanged: the intake stores the input on ``horizon.in.<tenant>.<verb>``
and answers with the stream's own PubAck (``{"stream", "seq", "duplicate"}``), or its error.

What it stores is the body as sent, with the headers ``intake_rules.screen`` keeps: the client's
``Nats-Msg-Id`` in the tenant's own namespace, the trace context, and the marks the core reads
(``Horizon-Intake``, ``Horizon-Refused-Headers``). It judges nothing else: the verdict, in log
order, is the core's (``JobAccepted``, ``JobRejected``, ``RequestRejected``, ``InputRejected``),
so that every input, well formed or not, is answered on the sender's feed and replayed by audit.

It acknowledges a client only after the log has stored the input. If the log does not answer,
the client gets a 503 error and sends again under the same Nats-Msg-Id (stored once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable
from typing import Any

import nats.errors

from events.subjects import INPUT_PREFIX, INTAKE_PREFIX, valid_token
from services.submission.intake_rules import screen

__all__ = ["IntakeServer", "QUEUE_GROUP"]

log = logging.getLogger("horizon.intake")

QUEUE_GROUP = "intake"


def _error(code: int, description: str) -> bytes:
    """An answer shaped like a JetStream API error, so a client's publish raises it as one."""
    return json.dumps({"error": {"code": code, "err_code": 0, "description": description}}).encode()


class IntakeServer:
    """Stores tenants' inputs (``horizon.intake.<tenant>.<verb>`` -> ``horizon.in.<tenant>.<verb>``)."""

    def __init__(self, nc: Any, *, attempts: int = 6, timeout_s: float = 5.0) -> None:
        self.nc = nc
        self.attempts = attempts
        self.timeout_s = timeout_s
        self.stored = 0
        self.refused = 0
        self._sub: Any = None

    async def serve(self, work: Awaitable[None]) -> None:
        """Answer while ``work`` (the instance's runner) runs."""
        self._sub = await self.nc.subscribe(f"{INTAKE_PREFIX}.*.*", queue=QUEUE_GROUP, cb=self._take)
        try:
            await work
        finally:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _take(self, msg: Any) -> None:
        try:
            answer = await self.store(msg.subject, msg.data, msg.headers)
        except Exception as exc:  # noqa: BLE001 - one input must never take the instance down
            log.exception("intake: storing an input on %s failed", msg.subject)
            answer = _error(500, f"the intake failed: {type(exc).__name__}; send again (same Nats-Msg-Id)")
        if msg.reply:
            with contextlib.suppress(Exception):
                await self.nc.publish(msg.reply, answer)

    async def store(self, subject: str, data: bytes, headers: dict[str, str] | None) -> bytes:
        """Store one input; returns the answer for its sender (the log's PubAck, or an error)."""
        _, _, tenant, verb = (subject.split(".") + ["", ""])[:4]
        if not valid_token(tenant) or tenant.startswith("_") or not verb:
            self.refused += 1
            return _error(400, f"{subject}: not a tenant's input subject (horizon.intake.<tenant>.<verb>)")
        stored_headers, refused = screen(tenant, headers)
        if refused:
            log.info("intake: %s sent headers it may not (%s); stored for its InputRejected", tenant, ", ".join(refused))
        target = f"{INPUT_PREFIX}.{tenant}.{verb}"
        pause = 0.1
        for attempt in range(self.attempts):
            try:
                reply = await self.nc.request(target, data, headers=stored_headers, timeout=self.timeout_s)
            except nats.errors.MaxPayloadError:
                return _error(413, f"the input and the headers Horizon adds exceed the server's max_payload "
                                   f"({self.nc.max_payload:,} bytes); nothing was stored")
            except (nats.errors.TimeoutError, asyncio.TimeoutError, nats.errors.NoRespondersError):
                if attempt + 1 < self.attempts:
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, 2.0)
                continue
            if b'"error"' in reply.data[:64] and b'"code":503' in reply.data.replace(b" ", b""):
                await asyncio.sleep(pause)  # no stream leader yet: as a publisher would, wait and send again
                pause = min(2 * pause, 2.0)
                continue
            self.stored += 1
            return bytes(reply.data)
        return _error(503, "the log did not store the input in time; send it again (the same Nats-Msg-Id is "
                           "stored once)")
