"""The read models rebuilt from the log (``horizon projections rebuild``): each folded from sequence 1 into
a new file beside the old one, which then replaces it in one rename (a reader never sees half a database)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from events.subjects import WHOLE_LOG
from services.domain.protocol import Record
from services.front.client.progress import Bar
from services.runtime.follow import read_through

__all__ = ["rebuild_jobs", "rebuild_standing"]


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
                async def step(batch: list[Record]) -> None:
                    await apply(batch)
                    if bar is not None:
                        bar.update(batch[-1].seq)

                await read_through(log_, step, subjects=subjects, until_seq=end)
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
