"""What the CLI's client commands share: a connection, publishing an input, asking a query."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nats
import nats.errors
import nats.js.errors

from events.base import Event
from events.codec import encode
from services.runtime.jetstream import connect
from services.runtime.log import LogError
from services.domain.protocol import MSG_ID

__all__ = ["session", "publish_input", "query", "default_tenant", "default_user", "await_answer"]


def default_tenant() -> str:
    return os.environ.get("HORIZON_TENANT", "default")


def default_user() -> str:
    return os.environ.get("USER") or os.environ.get("LOGNAME") or "anonymous"


@asynccontextmanager
async def session(url: str) -> AsyncIterator[Any]:
    nc = await connect(url, name="horizon-cli", connect_timeout_s=3.0, max_attempts=2)
    try:
        yield nc
    finally:
        await nc.close()


async def publish_input(nc: Any, subject: str, event: Event, msg_id: str) -> int:
    """Publish a client input into the log; returns its sequence (a retried publish is a duplicate)."""
    js = nc.jetstream(timeout=5)
    # A new trace for what this request starts (W3C traceparent): the services continue it.
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    try:
        ack = await js.publish(subject, encode(event), headers={MSG_ID: msg_id,
                                                               "traceparent": f"00-{trace_id}-{span_id}-01"})
    except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
        # nats-py raises the second for a JetStream publish nothing answered
        raise LogError(f"no stream stores {subject} on this server: start Horizon with `horizon up`; on a server "
                       f"with accounts (deploy/nats/auth.conf) your user may publish only under its own tenant "
                       f"(--tenant or $HORIZON_TENANT)") from None
    except nats.errors.TimeoutError:
        raise LogError("the log did not acknowledge the publish in time; retry (it is safe: same Nats-Msg-Id)") from None
    except nats.errors.MaxPayloadError:
        # nats-py refuses before sending, as the server would: nothing is stored.
        raise LogError(f"the {event.event_type} is too large: {len(encode(event)):,} bytes, and this server takes at "
                       f"most {nc.max_payload:,} bytes in one message; nothing was submitted (put large inputs in "
                       f"files the job reads)") from None
    return int(ack.seq)


async def await_answer(sub: Any, types: set[str], timeout_s: float) -> dict[str, Any] | None:
    """The first event of one of ``types`` arriving on ``sub`` within the timeout, as JSON."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return None
        try:
            msg = await sub.next_msg(timeout=remaining)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return None
        body = json.loads(msg.data)
        if body.get("type") in types:
            return body


async def query(nc: Any, view: str, request: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
    try:
        msg = await nc.request(f"horizon.query.{view}", json.dumps(request).encode(), timeout=timeout_s)
    except nats.errors.NoRespondersError:
        raise LogError(f"nothing serves horizon.query.{view}: is `horizon up` (or the projections service) running?") from None
    except nats.errors.TimeoutError:
        raise LogError(f"horizon.query.{view} did not answer within {timeout_s:g} s") from None
    body = json.loads(msg.data)
    if "error" in body:
        raise LogError(f"query {view}: {body['error']}")
    return body  # type: ignore[no-any-return]
