"""Adding a tenant to a running ``horizon up --auth``: its account, then its doors, checked open.

nats-server reloads its configuration on SIGHUP, new accounts included, without
dropping a connection. But measured on nats-server 2.15: the reload that adds a
tenant's account and, in the same file, HORIZON's exports to it creates the
account and its users, yet leaves the account's imports unwired (its requests
find no responders and its feed stays silent); a second reload of the same file
wires them (our reading: the new account's imports are checked against HORIZON's
exports as they stood before the reload). So ``open_doors`` does not trust a reload: it probes
the doors as the tenant, and reloads again until they open (two reloads in
practice; four at most).

The probes touch nothing of the stack's: the operator answers, for the length
of the check, a request on the tenant's logs door (``horizon.logs.<node>``,
imported from ``horizon.logs.<node>.<tenant>``) for a node name no agent can
have (it starts with '_'), and publishes one message on the tenant's feed
(``horizon.tenant.<tenant>.evt._probe…``), which only this check listens to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from typing import Any

import nats.errors

from services.front.host.running import Running
from services.runtime.jetstream import connect

__all__ = ["DoorsClosed", "open_doors", "reload_server"]

MAX_RELOADS = 4


class DoorsClosed(RuntimeError):
    """The tenant's account did not come to serve it in time; the message says what was seen."""


def reload_server(running: Running) -> None:
    """SIGHUP to the nats-server ``horizon up`` started (checked to be that process, not a reused PID)."""
    if not running.server_alive():
        raise DoorsClosed(f"the nats-server of that `horizon up` (pid {running.nats_pid}) is not running")
    os.kill(running.nats_pid, signal.SIGHUP)


async def _tenant_connection(url: str, tls: ssl.SSLContext | None) -> Any:
    """The tenant's connection, or None while the server does not know the tenant's user yet."""
    try:
        return await connect(url, name="horizon-tenant-probe", connect_timeout_s=2.0, max_attempts=1, tls=tls)
    except Exception:  # noqa: BLE001 - "authorization violation" until the reload has run
        return None


async def _doors_open(tenant_nc: Any, admin_nc: Any, tenant: str, probe: str) -> bool:
    """Both kinds of import work: a service (request and reply) and a stream (the feed)."""
    try:
        reply = await tenant_nc.request(f"horizon.logs.{probe}", b"", timeout=2.0)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return False
    if reply.data != b"open":
        return False
    sub = await tenant_nc.subscribe(f"horizon.evt.{probe}.>")
    try:
        await tenant_nc.flush()
        await admin_nc.publish(f"horizon.tenant.{tenant}.evt.{probe}.feed", b"open")
        await admin_nc.flush()
        try:
            await sub.next_msg(timeout=2.0)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return False
        return True
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def open_doors(running: Running, admin_url: str, tenant: str, tenant_url: str,
                     tenant_tls: ssl.SSLContext | None = None, *, changed: bool = True,
                     timeout_s: float = 20.0) -> int:
    """Make the running server serve ``tenant`` as its config file now says; returns the reloads
    it took (0: it already did). ``changed``: the file has just changed, so reload before the first
    look (else look first: adding a tenant again reloads nothing). Raises ``DoorsClosed`` after
    ``timeout_s``."""
    probe = f"_probe-{os.urandom(6).hex()}"
    admin_nc = await connect(admin_url, name="horizon-tenant-add", connect_timeout_s=3.0, max_attempts=2)
    reloads = 0
    tenant_nc = None
    try:
        async def answer(msg: Any) -> None:
            await msg.respond(b"open")

        await admin_nc.subscribe(f"horizon.logs.{probe}.{tenant}", cb=answer)
        await admin_nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if changed:
            reload_server(running)
            reloads += 1
            await asyncio.sleep(0.1)
        looks = 0
        while True:
            # a fresh connection each round: the one made before a reload is of the account as it was
            looks += 1
            tenant_nc = await _tenant_connection(tenant_url, tenant_tls)
            known = tenant_nc is not None
            if known and await _doors_open(tenant_nc, admin_nc, tenant, probe):
                return reloads
            if tenant_nc is not None:
                with contextlib.suppress(Exception):
                    await tenant_nc.close()
                tenant_nc = None
            if loop.time() > deadline:
                raise DoorsClosed(f"tenant {tenant}'s account does not serve it after {reloads} reload(s) of "
                                  f"the server's configuration ({running.config})")
            if (reloads == 0 and looks >= 2) or (reloads > 0 and known and reloads < MAX_RELOADS):
                # nothing changed and a second look failed too (one slow answer on a loaded machine is
                # no reason to reload); later rounds: the account is there, its imports are not
                reload_server(running)
                reloads += 1
            await asyncio.sleep(0.2)
    finally:
        if tenant_nc is not None:
            with contextlib.suppress(Exception):
                await tenant_nc.close()
        with contextlib.suppress(Exception):
            await admin_nc.close()
