"""What the CLI's client commands share: a connection, publishing an input, asking a query."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import nats
import nats.errors
import nats.js.errors

from events.base import Event
from events.codec import decode_json, encode
from events.subjects import login_user, valid_token
from services.runtime.jetstream import connect
from services.runtime.log import LogError
from services.domain.protocol import MSG_ID
from services.front.client.accounts import HORIZON_USERS, TENANT_VIEWS

__all__ = ["run", "tenant_of_url", "tenant_for", "session", "publish_input", "query", "query_all", "default_tenant", "default_user", "await_answer",
           "no_jetstream_text", "JETSTREAM_NOT_ENABLED"]

# Rows asked for in one request when the caller wants them all: the projection answers with about a
# message's worth and says where to go on (projections/paging.py), so this only bounds one read.
PAGE_ASK = 100_000


def default_tenant() -> str:
    return os.environ.get("HORIZON_TENANT", "default")


def user_of_url(url: str | None) -> str | None:
    """The tenant's user a NATS URL logs in as under accounts (``<tenant>.<name>`` is ``name``, the
    tenant's own login the user named like the tenant: ``events.subjects.user_login``); None for a URL
    without a user or with one of Horizon's own (the operator's, a service's)."""
    try:
        login = unquote(urlsplit((url or "").split(",")[0].strip()).username or "")
    except ValueError:
        return None
    tenant = login.split(".", 1)[0]
    if not login or not valid_token(tenant) or tenant.startswith("_") or tenant in HORIZON_USERS:
        return None
    return login_user(tenant, login)


def tenant_of_url(url: str | None) -> str | None:
    """The user of a NATS URL when it can be a tenant: ``horizon up --auth`` names each tenant's user
    like the tenant (services/front/host/auth.py), so its URL alone says which tenant it is."""
    if not url:
        return None
    try:
        user = urlsplit(url.split(",")[0].strip()).username
    except ValueError:
        return None
    if not user:
        return None
    tenant = unquote(user).split(".", 1)[0]  # a user's login is <tenant>.<name> (events.subjects.user_login)
    if not valid_token(tenant) or tenant.startswith("_") or tenant in HORIZON_USERS:
        return None
    return tenant


def tenant_for(url: str | None) -> str:
    """$HORIZON_TENANT; else the tenant whose user is in ``url`` (or $HORIZON_NATS_URL); else ``default``."""
    if os.environ.get("HORIZON_TENANT"):
        return default_tenant()
    return tenant_of_url(url or os.environ.get("HORIZON_NATS_URL")) or default_tenant()


def default_user(url: str | None = None) -> str:
    """Who you are, as Slurm's commands say it: under accounts the tenant's user your
    ``$HORIZON_NATS_URL`` logs in as (what the server authenticates; the submission service
    checks a submission's user against it, services/submission/against_log.py; ``url``: the one a command was given); else ``$USER`` or ``$LOGNAME`` as a login shell sets them,
    else the name of your uid (a shell without them: cron, a container, CI), else ``anonymous``."""
    login = user_of_url(url or os.environ.get("HORIZON_NATS_URL"))
    if login:
        return login
    name = os.environ.get("USER") or os.environ.get("LOGNAME")
    if name:
        return name
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no name (a container's arbitrary one)
        return "anonymous"


JETSTREAM_NOT_ENABLED = 10039  # the server's error code: "JetStream not enabled for account"


def no_jetstream_text(exc: Any, what: str) -> str:
    """What to say when the server gives this connection's user no JetStream: under accounts, a
    tenant's (its account holds no stream and reads its jobs through the queries; docs/tenants.md)."""
    if getattr(exc, "err_code", None) == JETSTREAM_NOT_ENABLED:
        return (f"{what} needs the log's stream, and this user's account has no JetStream: under accounts that "
                f"is a tenant's, which reads its jobs through the queries (horizon jobs, show, queue, squeue, "
                f"sacct, logs); {what} is the operator's (run it with the operator's URL, or with --data-dir "
                f"where `horizon up --auth` runs)")
    return f"{what}: JetStream is not available here ({getattr(exc, 'description', None) or exc})"


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run one command's coroutine to its end."""
    return asyncio.run(coro)


@asynccontextmanager
async def session(url: str) -> AsyncIterator[Any]:
    nc = await connect(url, name="horizon-cli", connect_timeout_s=3.0, max_attempts=2)
    try:
        yield nc
    finally:
        await nc.close()


async def publish_input(nc: Any, subject: str, event: Event, msg_id: str, with_duplicate: bool = False) -> Any:
    """Publish a client input into the log; returns its sequence (a retried publish is a duplicate),
    or (sequence, duplicate) with ``with_duplicate``."""
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
    except nats.js.errors.APIError as exc:
        # An answer instead of a PubAck: under accounts the intake's (a tenant's limit, 429; too large, 413;
        # the log unavailable, 503). Nothing was stored.
        raise LogError(f"not stored: {exc.description or exc}") from None
    except nats.errors.MaxPayloadError:
        # nats-py refuses before sending, as the server would: nothing is stored.
        raise LogError(f"the {event.event_type} is too large: {len(encode(event)):,} bytes, and this server takes at "
                       f"most {nc.max_payload:,} bytes in one message; nothing was submitted (put large inputs in "
                       f"files the job reads)") from None
    return (int(ack.seq), bool(ack.duplicate)) if with_duplicate else int(ack.seq)


async def await_answer(sub: Any, types: set[str], timeout_s: float,
                       causation: str | None = None) -> dict[str, Any] | None:
    """The first event of one of ``types`` (and, if given, with that ``causation_id``) arriving on
    ``sub`` within the timeout, as JSON."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return None
        try:
            msg = await sub.next_msg(timeout=remaining)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return None
        try:
            body = decode_json(msg.data)
        except ValueError:  # not an event of ours: not the answer
            continue
        if isinstance(body, dict) and body.get("type") in types and (causation is None or body.get("causation_id") == causation):
            return body


async def query(nc: Any, view: str, request: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
    try:
        msg = await nc.request(f"horizon.query.{view}", json.dumps(request).encode(), timeout=timeout_s)
    except nats.errors.NoRespondersError:
        hint = "" if view in TENANT_VIEWS else (
            f"; under accounts a tenant's URL asks only {', '.join(TENANT_VIEWS)}: {view} is the operator's "
            f"(docs/tenants.md)")
        raise LogError(f"nothing serves horizon.query.{view}: is `horizon up` (or the projections service) "
                       f"running?{hint}") from None
    except nats.errors.TimeoutError:
        raise LogError(f"horizon.query.{view} did not answer within {timeout_s:g} s") from None
    try:
        body = decode_json(msg.data)
    except ValueError as exc:
        raise LogError(f"horizon.query.{view} answered what cannot be read: {exc}") from None
    if not isinstance(body, dict):
        raise LogError(f"horizon.query.{view} answered no JSON object")
    if "error" in body:
        raise LogError(f"query {view}: {body['error']}")
    return body  # type: ignore[no-any-return]


async def query_all(nc: Any, view: str, request: dict[str, Any], key: str, *, limit: int | None = None,
                    unique: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """A listing followed page by page (each answer fits in one message, projections/paging.py):
    the first page's answer with the rows of every page under ``key``, at most ``limit`` of them
    (None: to the end of the listing), and the last page's ``total``, ``next_offset`` and ``next``.

    Each page is read at its own moment. ``unique``: a row's identity, for a listing ranked by
    what changes (the queue), where a row can move across pages: the first sighting is kept."""
    ask = dict(request)
    rows: list[dict[str, Any]] = []
    seen: set[Any] = set()
    first: dict[str, Any] | None = None
    while True:
        ask["limit"] = PAGE_ASK if limit is None else limit - len(rows)
        page = await query(nc, view, ask)
        first = first or page
        for row in page.get(key) or []:
            if unique is not None:
                if unique(row) in seen:
                    continue
                seen.add(unique(row))
            rows.append(row)
        following = page.get("next")
        if not following or not page.get(key) or (limit is not None and len(rows) >= limit):
            break
        ask.update(following)
    tail = {k: page[k] for k in ("total", "next_offset", "next") if k in page}
    return {**first, **tail, key: rows}
