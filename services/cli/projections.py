"""``horizon projections rebuild``: a read model rebuilt from the log, from sequence 1.

The jobs read model keeps its position in the same transaction as its rows,
so a restarted one resumes exactly; a rebuild is for a database that was
lost, damaged, or made by an older version. It builds a new file beside the
old one, reading the whole log (with a progress bar), and then replaces the
old file in one rename: a reader never sees half a database. A projections
service that is running keeps writing to the file it opened: restart it
(``horizon service projections``, or ``horizon up``) to serve the new one.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click

from services.cli.jobs import nats_option
from services.runtime.log import LogError

__all__ = ["register", "rebuild_jobs"]


async def rebuild_jobs(url: str, path: Path, progress: bool = False) -> int:
    """Rebuild the jobs read model at ``path`` from the log at ``url``; returns the last sequence applied."""
    from projections.jobs import JobsProjection
    from services.runtime.jetstream import JetStreamLog

    log_ = await JetStreamLog.open(url, name="horizon-projections-rebuild", create=False)
    fresh = path.with_name(path.name + ".rebuild")
    for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        leftover.unlink(missing_ok=True)
    projection = JobsProjection(log_, fresh)
    try:
        await projection.open()
        end = await log_.last_seq()
        bar = None
        if progress and sys.stderr.isatty():
            from rich.progress import Progress

            bar = Progress(transient=True)
            bar.start()
            task = bar.add_task("rebuilding jobs", total=end or 1)
        async for batch in log_.read(1, subjects=("horizon.evt.>",), until_seq=end):
            await projection.apply(batch)
            if bar is not None:
                bar.update(task, completed=batch[-1].seq)
        if bar is not None:
            bar.stop()
        last = projection.last_seq
    finally:
        await projection.stop()
        await log_.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(fresh, path)
    for stale in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)  # they belonged to the replaced database
    return last


@click.group()
def projections() -> None:
    """Read models: rebuild them from the log."""


@projections.command()
@nats_option
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".horizon"), show_default=True)
def rebuild(nats_url: str, data_dir: Path) -> None:
    """Rebuild the jobs read model from sequence 1 and replace the old database in one rename."""
    path = data_dir / "projections" / "jobs.sqlite"
    try:
        last = asyncio.run(rebuild_jobs(nats_url, path, progress=True))
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"jobs read model rebuilt to log seq {last}: {path}")
    click.echo("a running projections service still serves the old file: restart it", err=True)


def register(group: click.Group) -> None:
    group.add_command(projections)
