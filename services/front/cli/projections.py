"""``horizon projections rebuild``: the read models rebuilt from the log, from sequence 1.

Both read models keep their position in the same transaction as their rows
(``jobs.sqlite``: jobs, their events, attempts and the decisions audit table;
``standing.sqlite``: the queue, nodes and allocations, usage and its history),
so a restarted one resumes exactly; a rebuild is for a database that was
lost, damaged, or made by an older version. Each is built in a new file
beside the old one, reading the whole log (with a progress bar), and then
replaces the old file in one rename: a reader never sees half a database. A
projections service that is running keeps writing to the files it opened:
restart it (``horizon service projections``, or ``horizon up``) to serve the
new ones. The rebuild itself is services/front/host/rebuild.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from services.front.cli.options import DEFAULT_DATA_DIR, nats_option
from services.front.host.rebuild import rebuild_jobs, rebuild_standing
from services.runtime.log import LogError

__all__ = ["register"]


@click.group()
def projections() -> None:
    """Read models: rebuild them from the log."""


@projections.command()
@nats_option
@click.option("--only", type=click.Choice(["jobs", "standing"]), default=None,
              help="Rebuild just this one (default: both).")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor",
              show_default=True, help="The queue policy the services start with (as `horizon up --policy`).")
def rebuild(nats_url: str, data_dir: Path | None, only: str | None, policy: str) -> None:
    """Rebuild the read models from sequence 1, each replacing its old database in one rename.

    The read models of --data-dir (default .horizon), from the log of the `horizon up` running there
    unless --nats names another server."""
    data_dir = (data_dir or DEFAULT_DATA_DIR).resolve()
    jobs_db, standing_db = data_dir / "projections" / "jobs.sqlite", data_dir / "projections" / "standing.sqlite"
    try:
        if only in (None, "jobs"):
            last = asyncio.run(rebuild_jobs(nats_url, jobs_db, progress=True))
            click.echo(f"jobs read model rebuilt to log seq {last}: {jobs_db}")
        if only in (None, "standing"):
            last = asyncio.run(rebuild_standing(nats_url, standing_db, policy, progress=True))
            click.echo(f"standing read model rebuilt to log seq {last}: {standing_db}")
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("a running projections service still serves the old files: restart it", err=True)


def register(group: click.Group) -> None:
    group.add_command(projections)
