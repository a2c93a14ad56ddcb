"""What every ``horizon`` command shares: the ``--nats``/``--data-dir``/``--tenant``/``--admin`` options and
the console.

Click and rich only: no NATS, no service. A command module imports these instead of declaring its own.

**Which server a command talks to** (``nats_option``, ``resolve_nats``), the same for every command that
connects, client or operator:

1. ``--nats`` or ``$HORIZON_NATS_URL``, when given, as it is;
2. else the ``horizon up`` running on ``--data-dir`` (default ``.horizon``): its URL, whatever port it
   took (``--port 0``), from ``<data dir>/server.json`` (services/front/host/running.py); under ``--auth``
   with the operator's credentials and under ``--tls`` with this machine's client certificate, both
   kept in the data dir (put in this process's ``HORIZON_TLS_*`` unless those are set already);
3. else ``nats://127.0.0.1:4222`` (a ``--data-dir`` given where nothing runs is an error, not a
   silent fallback).

So ``horizon up --port 0`` in a folder, then ``horizon jobs`` in the same folder, just works.
"""

from __future__ import annotations

import errno
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.segment import Segment

from services.front.client.client import run, tenant_for
from services.front.client.terminal import printable

__all__ = ["NATS_DEFAULT", "DEFAULT_DATA_DIR", "nats_option", "resolve_nats", "tenant_option", "tenant_for",
           "admin_option", "console", "run"]

NATS_DEFAULT = "nats://127.0.0.1:4222"
DEFAULT_DATA_DIR = Path(".horizon")


def _tenant_default() -> str:
    ctx = click.get_current_context(silent=True)
    return tenant_for(ctx.params.get("nats_url") if ctx is not None else None)


def resolve_nats(nats_url: str | None, data_dir: Path | str | None) -> str:
    """The URL a command connects to: ``nats_url``; else the ``horizon up`` running on ``data_dir``
    (default ``.horizon``); else ``NATS_DEFAULT`` (see the module's docstring)."""
    if nats_url:
        return nats_url
    from services.front.host.running import operator_endpoint
    from services.runtime.tls import TLS_VARIABLES

    found = operator_endpoint(Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR)
    if found is None:
        if data_dir is not None:
            raise click.ClickException(f"no `horizon up` is running on {data_dir} (nothing live in "
                                       f"{Path(data_dir) / 'server.json'}): start it, or pass --nats URL")
        return NATS_DEFAULT
    url, tls = found
    if tls is not None and not any(os.environ.get(name) for name in TLS_VARIABLES):
        os.environ.update(tls.env())
    return url


def nats_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--nats`` and ``--data-dir`` for a command that connects; it receives the resolved ``nats_url``
    (``resolve_nats``), and ``data_dir`` as given (None: not given) if it takes one too."""
    takes_data_dir = "data_dir" in inspect.signature(command).parameters

    @functools.wraps(command)
    def resolved(*args: Any, nats_url: str | None = None, data_dir: Path | None = None, **kwargs: Any) -> Any:
        if takes_data_dir:
            kwargs["data_dir"] = data_dir
        return command(*args, nats_url=resolve_nats(nats_url, data_dir), **kwargs)

    resolved = click.option(
        "--data-dir", type=click.Path(path_type=Path), default=None,
        help="Without --nats: the `horizon up` running on this data dir, whatever port it took (and, under "
             "--auth/--tls, the operator's credentials and certificate it keeps there) [default: .horizon, if "
             "one runs there].")(resolved)
    # Eager: read before --tenant, whose default may come from it.
    return click.option(
        "--nats", "nats_url", envvar="HORIZON_NATS_URL", default=None, is_eager=True,
        help=f"URL of the NATS server (or $HORIZON_NATS_URL) [default: the `horizon up` running on --data-dir, "
             f"else {NATS_DEFAULT}].")(resolved)


tenant_option = click.option(
    "--tenant", default=_tenant_default, show_default="$HORIZON_TENANT, else the user of a tenant's --nats URL, "
                                                      "else default", help="Your tenant."
)
admin_option = click.option(
    "--admin", is_flag=True,
    help="Ask as an operator (horizon.in._admin.<verb>): any tenant's job, and priority either way.",
)


class _Console(Console):
    """Data, never markup, and never a control character of it (``services/front/client/terminal.py``): a
    cell's text is escaped before the table is laid out (its width is what will show), and whatever
    else is drawn (a ``Text`` built by a command) as it is written; rich's own styles stay."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(printable(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(printable(segment.text), segment.style, segment.control)
            for segment in buffer)

    def on_broken_pipe(self) -> None:
        """The reader has gone (``horizon jobs | head``): end as every command does then, quietly
        (``services/front/cli/main.py``), not with rich's own exit code."""
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    # markup off: job names, reasons and "node[gpu0,gpu1]" are data, not rich markup
    return _Console(markup=False, highlight=False) if sys.stdout.isatty() else _Console(width=400, markup=False,
                                                                                        highlight=False)
