"""Connecting to NATS: one server or a cluster's members, TLS from the environment, answers a person can act on.

Every Horizon process connects here (``JetStreamLog.open``, the client, the
dashboard): the connection reconnects forever once made, gets the lean
receive path (``services/runtime/receive.py``), and a failure to connect
says why (unreachable, TLS refused) with the URL's secret redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import ssl
from collections.abc import Sequence
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS

from services.runtime import receive
from services.runtime.log import LogUnavailable
from services.runtime.tls import TlsSettingsError, client_tls, quiet_ssl_eof

__all__ = ["connect", "redact_url"]

log = logging.getLogger("horizon.log")


async def connect(
    url: str, *, name: str = "horizon", connect_timeout_s: float = 5.0, max_attempts: int = -1,
    tls: ssl.SSLContext | None = None,
) -> NATS:
    """Connect, reconnecting forever once connected.

    ``url``: one server, or several separated by commas (the members of a NATS cluster; the
    client picks one and moves to another when it fails).
    ``max_attempts``: connection attempts before giving up with ``LogUnavailable``
    (-1, the default for services, waits for the server as long as it takes; the
    CLI passes a small number so a person gets an answer).
    ``tls``: the TLS context; by default the one ``HORIZON_TLS_CA``/``_CERT``/``_KEY`` describe
    (services/runtime/tls.py), if any.
    """

    errors: list[Exception] = []  # what the client met on its way, for the answer if it gives up
    refused_tls = asyncio.Event()

    async def _quiet(exc: Exception) -> None:
        errors.append(exc)
        if isinstance(exc, ssl.SSLError):
            refused_tls.set()
        log.debug("nats: %s", exc)

    quiet_ssl_eof()
    if tls is None:
        try:
            tls = client_tls()
        except TlsSettingsError as exc:
            raise LogUnavailable(f"cannot connect to NATS: {exc}") from None
    options: dict[str, Any] = {"tls": tls} if tls is not None else {}
    servers = [u.strip() for u in url.split(",") if u.strip()]
    connecting = nats.connect(
        servers=servers,
        name=name,
        connect_timeout=connect_timeout_s,
        allow_reconnect=True,
        max_reconnect_attempts=max_attempts,
        reconnect_time_wait=0.25,
        error_cb=_quiet,
        **options,
    )
    try:
        if max_attempts < 0:
            nc = await connecting
        else:
            nc = await _give_up_in_time(connecting, refused_tls,
                                        (connect_timeout_s + 0.25) * (max_attempts + 1) * len(servers) + 2.0)
    except (nats.errors.NoServersError, OSError, asyncio.TimeoutError) as exc:
        tls_error = _tls_refusal(errors, tls)
        if tls_error is not None:
            raise LogUnavailable(
                f"cannot connect to NATS at {redact_url(url)}: TLS handshake failed ({tls_error}). A server "
                f"under --tls needs HORIZON_TLS_CA, HORIZON_TLS_CERT and HORIZON_TLS_KEY (docs/tenants.md)"
            ) from None
        met = f" (last: {type(errors[-1]).__name__}: {errors[-1]})" if errors else ""
        raise LogUnavailable(
            f"cannot reach NATS at {redact_url(url)}: {exc or type(exc).__name__}{met}. Start it with `horizon nats` "
            f"or `horizon up`, or pass --nats URL"
        ) from None
    return receive.install(nc)


def _tls_refusal(errors: Sequence[Exception], tls: ssl.SSLContext | None) -> str | None:
    """Why the server refused this client's TLS, from what the client met, or None if it did not."""
    refused = next((e for e in reversed(errors) if isinstance(e, ssl.SSLError)), None)
    if refused is not None:
        return str(refused)
    if tls is not None and not os.environ.get("HORIZON_TLS_CERT") and any(
            isinstance(e, (ConnectionResetError, BrokenPipeError, nats.errors.UnexpectedEOF)) for e in errors):
        # TLS 1.3: a server that wants a client certificate refuses the missing one after the client's side
        # of the handshake is done; the alert may be lost to the closed connection, leaving an EOF
        return "the server closed the connection after the handshake: it wants a client certificate"
    return None


async def _give_up_in_time(connecting: Any, refused_tls: asyncio.Event, budget_s: float) -> NATS:
    """``connecting``'s client, or ``asyncio.TimeoutError`` once a TLS handshake has been refused or
    ``budget_s`` is over. nats-py can hang for good closing a connection whose TLS handshake failed
    (a server under --tls, a client without the certificates: nats-io/nats.py#718), and a refused
    certificate is refused again on every attempt; a caller that gives up after some attempts (the
    CLI) gets its answer then."""
    task = asyncio.ensure_future(connecting)
    refused = asyncio.ensure_future(refused_tls.wait())
    try:
        done, _ = await asyncio.wait({task, refused}, timeout=budget_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        refused.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise asyncio.TimeoutError


def redact_url(url: str) -> str:
    """``url`` (one or several, comma-separated) with its secret (the password of ``user:password@``,
    a ``token@``) replaced by ``***``, for messages and logs."""
    return ",".join(_SECRET.sub(lambda m: f"{m[1]}{m[2] + ':' if m[3] is not None else ''}***@", u.strip())
                    for u in url.split(","))


_SECRET = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^:@/]*)(?::([^@/]*))?@")
