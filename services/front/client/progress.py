"""Progress bars for long commands (audit, check, projections rebuild, simulate).

A bar is drawn on stderr, and only when stderr is a terminal: piped output, ``--json`` consumers
and tests see nothing of it. It disappears when the work is done (``transient``)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar", "Bar"]


def progress_bar() -> Any:
    """A rich ``Progress`` on stderr when it is a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


class Bar:
    """One task on a progress bar, or nothing at all off a terminal: ``with Bar("reading") as bar:
    bar.update(done, total)``."""

    def __init__(self, description: str, total: int | None = None) -> None:
        self.description = description
        self.total = total
        self.progress = progress_bar()
        self.task: Any = None

    def __enter__(self) -> Bar:
        if self.progress is not None:
            self.progress.__enter__()
            self.task = self.progress.add_task(self.description, total=self.total)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def update(self, completed: int, total: int | None = None) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=completed, total=total if total is not None else self.total)

    def add(self, description: str, total: int | None = None) -> Bar:
        """Another task on the same bar (e.g. reading, then replaying)."""
        other = Bar.__new__(Bar)
        other.description, other.total, other.progress = description, total, self.progress
        other.task = self.progress.add_task(description, total=total) if self.progress is not None else None
        return other
