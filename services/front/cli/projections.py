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
new ones.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click

from events.subjects import WHOLE_LOG
from services.front.cli.options import DEFAULT_DATA_DIR, nats_option
from services.front.client.progress import Bar
from services.runtime.log import LogError
from services.domain.protocol import Record

__all__ = ["register", "rebuild_jobs", "rebuild_standing"]


async def _rebuild(url: str, path: Path, what: str, subjects: Sequence[str], progress: bool,
                   make: Callable[[Any, Path], Awaitable[tuple[Callable[[list[Record]], Awaitable[None]],
                                                                Callable[[], Awaitable[int]]]]]) -> int:
    """Fold the log into a fresh database beside ``path`` and rename it over ``path``.

    ``make(log, fresh_path)`` opens the read model and returns (apply a batch, finish: close and
    return the last sequence applied)."""
    from services.runtime.jetstream import JetStreamLog

    log_ = await JetStreamLog.open(url, name=f"horizon-rebuild-{what}", create=False)
    fresh = path.with_name(path.name + ".rebuild")
    for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        leftover.unlink(missing_ok=True)
    try:
        apply, finish = await make(log_, fresh)
        try:
            end = await log_.last_seq()
            with Bar(f"rebuilding {what}", total=end or 1) if progress else nullcontext() as bar:
                async for batch in log_.read(1, subjects=subjects, until_seq=end):
                    await apply(batch)
                    if bar is not None:
                        bar.update(batch[-1].seq)
        finally:
            last = await finish()
    finally:
        await log_.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(fresh, path)
    for stale in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)  # they belonged to the replaced database
    return last


async def rebuild_jobs(url: str, path: Path, progress: bool = False) -> int:
    """Rebuild the jobs read model at ``path`` from the log at ``url``; returns the last sequence applied."""
    from projections.jobs import JobsProjection

    async def make(log_: Any, fresh: Path) -> Any:
        projection = JobsProjection(log_, fresh)
        await projection.open()

        async def finish() -> int:
            await projection.stop()
            return projection.last_seq

        return projection.apply, finish

    return await _rebuild(url, path, "jobs", ("horizon.evt.>",), progress, make)


async def rebuild_standing(url: str, path: Path, policy: str = "multifactor", progress: bool = False) -> int:
    """Rebuild the scheduler's standing (queue, nodes, usage) at ``path``; returns the last sequence shown."""
    from projections.scheduling import SchedulerView
    from projections.standing import StandingStore
    from services.scheduling.core import SchedulingCore

    async def make(log_: Any, fresh: Path) -> Any:
        store = StandingStore(fresh)
        await store.open()
        view = SchedulerView(log_, None, SchedulingCore(policy=policy), store=store)

        async def finish() -> int:
            try:
                await view.flush()
            finally:
                await store.close()
            return store.last_seq

        return view.apply, finish

    return await _rebuild(url, path, "standing", WHOLE_LOG, progress, make)


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
