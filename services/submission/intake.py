"""The intake: the one door through which a tenant's input reaches the log under accounts.

Every submission instance, leader or standby, answers ``horizon.intake.<tenant>.<verb>`` in the
queue group ``intake``. A tenant's account imports that subject under the name it publishes on,
``horizon.in.<tenant>.<verb>`` (deploy/nats/auth.conf, ``horizon up --auth``), so a client's
JetStream publish works unchanged: the intake stores the input on ``horizon.in.<tenant>.<verb>``
and answers with the stream's own PubAck (``{"stream", "seq", "duplicate"}``), or its error.

What it stores is the body as sent, with the headers ``intake_rules.screen`` keeps: the client's
``Nats-Msg-Id`` in the tenant's own namespace, the trace context, and the marks the core reads
(``Horizon-Intake``, ``Horizon-Refused-Headers``, ``Horizon-Limits``). It judges nothing of what it
stores: the verdict, in log order, is the core's (``JobAccepted``, ``JobRejected``, ``RequestRejected``, ``InputRejected``),
so that every input, well formed or not, is answered on the sender's feed and replayed by audit.

Fair across tenants (``intake_fairness.py``): each tenant's inputs wait in a queue of their own,
served round robin, behind a token bucket of the tenant's limits (``TenantLimits``, folded from the
log by the submission core: ``limits``). An input over its tenant's rate, or past what the intake
keeps queued for one tenant (``max_queued``), is answered at once with a 429 error naming the limit
and is not stored.

It acknowledges a client only after the log has stored the input. If the log does not answer,
the client gets a 503 error and sends again under the same Nats-Msg-Id (stored once). An input
sent without a Nats-Msg-Id is stored under one made of its verb and body, so that an identical
input sent again within the stream's duplicate window is stored once (and acknowledged as a
duplicate).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats.errors

from events.subjects import INPUT_PREFIX, INTAKE_PREFIX, LIMITS_HEADER, valid_token
from events.vocabulary import TenantLimits
from services.domain.protocol import MSG_ID
from services.submission.intake_fairness import FairQueue, TokenBuckets, backlog_refusal, input_cost, rate_refusal
from services.submission.intake_rules import intake_msg_id, screen

__all__ = ["IntakeServer", "QUEUE_GROUP"]

log = logging.getLogger("horizon.intake")

QUEUE_GROUP = "intake"
TOO_MANY = 429  # the status of an input refused by a limit (HTTP's Too Many Requests)
_DEFAULTS = TenantLimits()


def _error(code: int, description: str) -> bytes:
    """An answer shaped like a JetStream API error, so a client's publish raises it as one."""
    return json.dumps({"error": {"code": code, "err_code": 0, "description": description}}).encode()


class IntakeServer:
    """Stores tenants' inputs (``horizon.intake.<tenant>.<verb>`` -> ``horizon.in.<tenant>.<verb>``).

    Pipelined, and in order per tenant: the subscription's callback only queues (NATS delivers in
    arrival order) in the tenant's own queue, one writer takes the tenants' inputs in turn and
    publishes each with a reply inbox of its own and goes on, and each PubAck is passed to its
    client as it comes. An input the log does not answer within
    ``timeout_s`` (or answers 503: no stream leader yet) is sent again under the same Msg-Id,
    ``attempts`` times in all, then its client gets a 503 error.
    """

    def __init__(self, nc: Any, *, attempts: int = 6, timeout_s: float = 5.0, window: int = 1024,
                 limits: Callable[[str], TenantLimits] = lambda tenant: _DEFAULTS, max_queued: int = 10_000) -> None:
        self.nc = nc
        self.attempts = attempts
        self.timeout_s = timeout_s
        self.window = window
        self.limits = limits
        self.max_queued = max_queued
        self.stored = 0
        self.refused = 0
        self.throttled: dict[str, int] = {}  # tenant -> inputs refused by a limit
        self._buckets = TokenBuckets()
        self._said: dict[str, float] = {}  # tenant -> when the log last said it was throttled
        self._refusals: dict[str, tuple[TenantLimits, bytes]] = {}  # tenant -> its limits and their refusal
        self._queue: FairQueue[tuple[str, str, bytes, dict[str, str], str, int]] = FairQueue()
        self._waiting: dict[int, _Waiting] = {}
        self._next = 0
        self._space = asyncio.Event()
        self._space.set()
        self._prefix = ""
        self._subs: list[Any] = []

    async def serve(self, work: Awaitable[None]) -> None:
        """Answer while ``work`` (the instance's runner) runs."""
        self._prefix = self.nc.new_inbox()
        self._subs.append(await self.nc.subscribe(self._prefix + ".*", cb=self._on_ack))
        self._subs.append(await self.nc.subscribe(f"{INTAKE_PREFIX}.*.*", queue=QUEUE_GROUP, cb=self._take))
        tasks = [asyncio.create_task(self._write(), name="intake-writer"),
                 asyncio.create_task(self._sweep(), name="intake-sweeper")]
        try:
            await work
        finally:
            for sub in self._subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _take(self, msg: Any) -> None:
        subject = msg.subject
        _, _, tenant, verb = (subject.split(".") + ["", ""])[:4]
        if not valid_token(tenant) or tenant.startswith("_") or not verb:
            self.refused += 1
            await self._answer(msg.reply, _error(400, f"{subject}: not a tenant's input subject "
                                                      "(horizon.intake.<tenant>.<verb>)"))
            return
        if not await self._admit(tenant, verb, msg.data, msg.reply):
            return
        headers, refused = screen(tenant, msg.headers)
        if refused:
            log.info("intake: %s sent headers it may not (%s); stored for its InputRejected", tenant,
                     ", ".join(refused))
        headers[LIMITS_HEADER] = "1"  # the core applies the tenant's limits to it
        if MSG_ID not in headers:
            # No id of the client's: one from what it sent, so that the intake's own retries store it once.
            headers[MSG_ID] = intake_msg_id(tenant, "~" + hashlib.sha256(verb.encode() + b"\n" + msg.data).hexdigest())
        self._queue.put(tenant, (tenant, f"{INPUT_PREFIX}.{tenant}.{verb}", msg.data, headers, msg.reply or "", 0))

    async def _admit(self, tenant: str, verb: str, data: bytes, reply: str) -> bool:
        """Whether the tenant's limits let this input in now; if not, its sender is told which."""
        now = asyncio.get_running_loop().time()
        limits = self.limits(tenant)
        queued = self._queue.queued(tenant)
        if queued >= self.max_queued:  # refused before its bucket: it takes no token
            answer = _error(TOO_MANY, backlog_refusal(tenant, queued))
        elif self._buckets.take(tenant, limits, now, input_cost(verb, data, limits)):
            return True
        else:
            # The same words for every input of a flood: made once per tenant and limits (a flood is
            # refused as fast as the intake can answer, and everyone else's inputs wait behind it).
            made = self._refusals.get(tenant)
            if made is None or made[0] is not limits:
                made = self._refusals[tenant] = (limits, _error(TOO_MANY, rate_refusal(tenant, limits)))
            answer = made[1]
        self.throttled[tenant] = self.throttled.get(tenant, 0) + 1
        if now - self._said.get(tenant, -60.0) >= 10.0:  # once in a while, not once per input
            self._said[tenant] = now
            log.warning("intake: tenant %s over its limits (%d inputs refused so far): %s", tenant,
                        self.throttled[tenant], json.loads(answer)["error"]["description"])
        await self._answer(reply, answer)
        return False

    async def _write(self) -> None:
        while True:
            tenant, target, data, headers, reply, attempt = await self._queue.get()
            while len(self._waiting) >= self.window:
                self._space.clear()
                await self._space.wait()
            token = self._next
            self._next += 1
            loop = asyncio.get_running_loop()
            self._waiting[token] = _Waiting(tenant, target, data, headers, reply, attempt + 1,
                                            loop.time() + self.timeout_s)
            try:
                await self.nc.publish(target, data, reply=f"{self._prefix}.{token}", headers=headers)
            except nats.errors.MaxPayloadError:
                self._waiting.pop(token, None)
                await self._answer(reply, _error(413, f"the input and the headers Horizon adds exceed the server's "
                                                      f"max_payload ({self.nc.max_payload:,} bytes); nothing was stored"))
            except Exception as exc:  # noqa: BLE001 - the connection is going: the sweeper retries
                log.warning("intake: publishing to %s failed: %s", target, exc)

    async def _on_ack(self, msg: Any) -> None:
        token = int(msg.subject.rsplit(".", 1)[1])
        entry = self._waiting.pop(token, None)
        if len(self._waiting) < self.window:
            self._space.set()
        if entry is None:
            return  # a late answer to an attempt already sent again
        data = bytes(msg.data)
        unavailable = (not data and msg.headers and msg.headers.get("Status") == "503") or (
            b"503" in data[:80] and b'"error"' in data[:20])
        if unavailable:
            self._retry(entry)
            return
        self.stored += 1
        await self._answer(entry.reply, data)

    def _retry(self, entry: _Waiting) -> None:
        if entry.attempt >= self.attempts:
            asyncio.get_running_loop().create_task(self._answer(entry.reply, _error(
                503, "the log did not store the input in time; send it again (the same Nats-Msg-Id is stored once)")))
            return
        pause = min(0.1 * 2 ** entry.attempt, 2.0)
        asyncio.get_running_loop().call_later(pause, self._queue.put, entry.tenant, (
            entry.tenant, entry.target, entry.data, entry.headers, entry.reply, entry.attempt))

    async def _sweep(self) -> None:
        """Inputs unanswered past their time are sent again (the same Msg-Id: stored once)."""
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 2))
            now = asyncio.get_running_loop().time()
            late = [token for token, entry in self._waiting.items() if entry.deadline <= now]
            for token in late:
                self._retry(self._waiting.pop(token))
            if late:
                self._space.set()

    async def _answer(self, reply: str, data: bytes) -> None:
        if reply:
            with contextlib.suppress(Exception):
                await self.nc.publish(reply, data)


@dataclass(slots=True)
class _Waiting:
    tenant: str
    target: str
    data: bytes
    headers: dict[str, str]
    reply: str
    attempt: int
    deadline: float
