"""What every ``horizon`` command shares: the ``--nats``/``--tenant``/``--admin`` options and the console.

Click and rich only: no NATS, no service. A command module imports these instead of declaring its own.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from typing import Any
from urllib.parse import unquote, urlsplit

import click
from rich.console import Console

from events.subjects import valid_token
from services.cli.client import default_tenant

__all__ = ["NATS_DEFAULT", "nats_option", "tenant_option", "tenant_of_url", "tenant_for", "admin_option", "console", "run"]

NATS_DEFAULT = "nats://127.0.0.1:4222"

def tenant_of_url(url: str | None) -> str | None:
    """The user of a NATS URL when it can be a tenant: ``horizon up --auth`` names each tenant's user
    like the tenant (services/host/auth.py), so its URL alone says which tenant it is."""
    from services.host.auth import HORIZON_USERS

    if not url:
        return None
    try:
        user = urlsplit(url.split(",")[0].strip()).username
    except ValueError:
        return None
    if not user or not valid_token(unquote(user)) or user.startswith("_") or unquote(user) in HORIZON_USERS:
        return None
    return unquote(user)


def tenant_for(url: str | None) -> str:
    """$HORIZON_TENANT; else the tenant whose user is in ``url`` (or $HORIZON_NATS_URL); else ``default``."""
    if os.environ.get("HORIZON_TENANT"):
        return default_tenant()
    return tenant_of_url(url or os.environ.get("HORIZON_NATS_URL")) or default_tenant()


def _tenant_default() -> str:
    ctx = click.get_current_context(silent=True)
    return tenant_for(ctx.params.get("nats_url") if ctx is not None else None)


# Eager: read before --tenant, whose default may come from it.
nats_option = click.option(
    "--nats", "nats_url", envvar="HORIZON_NATS_URL", default=NATS_DEFAULT, show_default=True, is_eager=True,
    help="URL of the NATS server (or $HORIZON_NATS_URL).",
)
tenant_option = click.option(
    "--tenant", default=_tenant_default, show_default="$HORIZON_TENANT, else the user of a tenant's --nats URL, "
                                                      "else default", help="Your tenant."
)
admin_option = click.option(
    "--admin", is_flag=True,
    help="Ask as an operator (horizon.in._admin.<verb>): any tenant's job, and priority either way.",
)


def console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    # markup off: job names, reasons and "node[gpu0,gpu1]" are data, not rich markup
    return Console(markup=False, highlight=False) if sys.stdout.isatty() else Console(width=400, markup=False,
                                                                                      highlight=False)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run one command's coroutine to its end."""
    return asyncio.run(coro)
