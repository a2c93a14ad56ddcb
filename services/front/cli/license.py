"""Licenses on the command line: ``horizon license set|remove|list`` (operators).

A license is a count the whole cluster shares, as Slurm's local licenses (``Licenses=matlab:3`` in
slurm.conf): ``horizon license set matlab 3`` publishes ``LicenseConfigured`` on
``horizon.in._admin.license`` and waits until the scheduler has applied it or says why not
(``services/front/client/configure.py``). Jobs ask for them with ``sbatch -L matlab:2`` (or ``horizon
submit --licenses``); ``horizon license list`` and ``scontrol show lic`` show what is held and free
(``horizon.query.licenses``). The rules: ``services/domain/licenses.py``.
"""

from __future__ import annotations

import json
import re
import time

import click

from events import catalogue as c
from events.vocabulary import LICENSE_PATTERN, MAX_LICENSE_COUNT
from services.front.cli.options import nats_option
from services.front.cli.policy import report_config
from services.front.client.client import default_user
from services.front.client.configure import configure
from services.front.slurm.scontrol_show import licenses_from_log

__all__ = ["license_group", "register"]

_NAME = re.compile(LICENSE_PATTERN)


@click.group(name="license")
def license_group() -> None:
    """Licenses: counts the whole cluster shares, as Slurm's (sbatch -L NAME:COUNT; operators)."""


def _name(name: str) -> str:
    if not _NAME.match(name):
        raise click.BadParameter(f"{name!r} is not a license name: 1-64 letters, digits, '_', '.', '+' or '-' "
                                 "(and @SERVER, Slurm's remote form)", param_hint="NAME")
    return name


@license_group.command(name="set")
@nats_option
@click.argument("name")
@click.argument("count", type=click.IntRange(0, MAX_LICENSE_COUNT))
@click.option("--json", "as_json", is_flag=True)
def license_set(nats_url: str, name: str, count: int, as_json: bool) -> None:
    """Define license NAME with COUNT of them, or set its count. Below what running jobs hold, they keep
    theirs and nothing more starts until enough are back; a job asking for more than COUNT is refused."""
    event = c.LicenseConfigured(ts=time.time(), source="horizon-cli", correlation_id=_name(name), name=name,
                                count=count, user=default_user())
    report_config(configure(nats_url, "license", event), f"license {name} ({count})", as_json)


@license_group.command(name="remove")
@nats_option
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def license_remove(nats_url: str, name: str, as_json: bool) -> None:
    """Withdraw license NAME: its pending jobs wait until it is defined again, running ones keep theirs,
    and new jobs naming it are refused."""
    event = c.LicenseConfigured(ts=time.time(), source="horizon-cli", correlation_id=_name(name), name=name,
                                removed=True, user=default_user())
    report_config(configure(nats_url, "license", event), f"license {name} removal", as_json)


@license_group.command(name="list")
@nats_option
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="The licenses as the scheduler's view answers.")
def license_list_command(nats_url: str, names: tuple[str, ...], as_json: bool) -> None:
    """Every license (or NAMES): its total, what jobs hold, what is free."""
    rows = [row for row in licenses_from_log(nats_url) if not names or row["name"] in names]
    if as_json:
        click.echo(json.dumps({"licenses": rows}))
        return
    missing = sorted(set(names) - {row["name"] for row in rows})
    if missing:
        raise click.ClickException(f"no license {', '.join(map(repr, missing))} is defined (horizon license list)")
    if not rows:
        click.echo("no licenses defined (horizon license set NAME COUNT)")
        return
    table = [("LICENSE", "TOTAL", "USED", "FREE")]
    table += [(row["name"] + ("" if row.get("defined", True) else " (removed)"), str(row["total"]),
               str(row["used"]), str(row["free"])) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(4)]
    for line in table:
        click.echo("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                             for i, (cell, w) in enumerate(zip(line, widths))).rstrip())


def register(group: click.Group) -> None:
    group.add_command(license_group)
