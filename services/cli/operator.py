"""Where an operator command connects: ``--nats``, or the ``horizon up`` running on ``--data-dir``.

An operator on the machine of ``horizon up --auth`` has no URL to type: the
operator's credentials (``admin``) are in the data dir, and so, under
``--tls``, is this machine's client certificate. ``operator_options`` gives a
command ``--nats`` and ``--data-dir`` and hands it one resolved ``nats_url``:

1. ``--nats`` or ``$HORIZON_NATS_URL``, when given, as it is;
2. else the ``horizon up`` running on ``--data-dir`` (default ``.horizon``),
   as its operator (services/host/running.py ``operator_endpoint``); under
   ``--tls`` its client certificate is put in this process's ``HORIZON_TLS_*``
   unless those are set already;
3. else ``nats://127.0.0.1:4222`` (``--data-dir`` given but nothing runs
   there is an error, not a silent fallback).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from services.cli.options import NATS_DEFAULT
from services.host.running import operator_endpoint
from services.runtime.tls import TLS_VARIABLES

__all__ = ["operator_options", "resolve_operator", "DEFAULT_DATA_DIR"]

DEFAULT_DATA_DIR = Path(".horizon")


def resolve_operator(nats_url: str | None, data_dir: Path | None) -> str:
    if nats_url:
        return nats_url
    found = operator_endpoint(data_dir or DEFAULT_DATA_DIR)
    if found is None:
        if data_dir is not None:
            raise click.ClickException(f"no `horizon up` is running on {data_dir} (nothing live in "
                                       f"{data_dir}/server.json): start it, or pass --nats URL")
        return NATS_DEFAULT
    url, tls = found
    if tls is not None and not any(os.environ.get(name) for name in TLS_VARIABLES):
        os.environ.update(tls.env())
    return url


def operator_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--nats`` and ``--data-dir`` for an operator command, which receives ``nats_url`` only."""

    @functools.wraps(command)
    def resolved(*args: Any, nats_url: str | None, data_dir: Path | None, **kwargs: Any) -> Any:
        return command(*args, nats_url=resolve_operator(nats_url, data_dir), **kwargs)

    resolved = click.option(
        "--data-dir", type=click.Path(path_type=Path), default=None,
        help="Without --nats: act as the operator of the `horizon up` running on this data dir, with the "
             "credentials and certificate it keeps there [default: .horizon, if one runs there].")(resolved)
    return click.option(
        "--nats", "nats_url", envvar="HORIZON_NATS_URL", default=None,
        help=f"URL of the NATS server (or $HORIZON_NATS_URL) [default: the operator's URL of the `horizon up` "
             f"on --data-dir, else {NATS_DEFAULT}].")(resolved)
