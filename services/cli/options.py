"""What every ``horizon`` command shares: the ``--nats``/``--tenant``/``--admin`` options and the console.

Click and rich only: no NATS, no service. A command module imports these instead of declaring its own.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

import click
from rich.console import Console

from services.cli.client import default_tenant

__all__ = ["NATS_DEFAULT", "nats_option", "tenant_option", "admin_option", "console", "run"]

NATS_DEFAULT = "nats://127.0.0.1:4222"

nats_option = click.option(
    "--nats", "nats_url", envvar="HORIZON_NATS_URL", default=NATS_DEFAULT, show_default=True,
    help="URL of the NATS server (or $HORIZON_NATS_URL).",
)
tenant_option = click.option(
    "--tenant", default=default_tenant, show_default="$HORIZON_TENANT or default", help="Your tenant."
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
