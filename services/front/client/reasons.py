"""A reason in a table cell: one line.

A reason is free text, and some are long and several lines: a job's supervisor that died leaves the
end of its log, a Python traceback, in the job's ``JobFailed.reason``; a person may type a
multi-line ``--reason``. A table (``horizon jobs``, ``queue``, ``squeue``'s ``%R``, ``sacct``'s
``Reason``) shows ``summary``: the first line (what happened), an ellipsis, and the last meaningful
line (why: for a traceback, the exception), at most ``WIDTH`` characters. ``horizon show JOB`` and
every ``--json`` keep the whole text.
"""

from __future__ import annotations

__all__ = ["summary", "WIDTH"]

WIDTH = 100  # characters of a reason in a table cell
ELLIPSIS = "…"
_TRACEBACK = "Traceback (most recent call last):"


def _meaningful(line: str) -> bool:
    """Not a traceback's decoration: carets under the failing code, a bare bracket or quote."""
    return any(ch.isalnum() for ch in line) and not set(line.strip()) <= set("^~ ")


def summary(text: str | None, width: int = WIDTH) -> str:
    """``text`` as one line of at most ``width`` characters.

    One line: itself, cut at ``width`` with an ellipsis. Several: the first one, `` … `` and the last
    meaningful one (a traceback's header is dropped from the first: the last line names the
    exception), e.g. ``the job's supervisor exited (… RuntimeError: boom)``.
    """
    lines = [line.strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line and _meaningful(line)]
    if not lines:
        return ""
    first, last = lines[0], lines[-1]
    if len(lines) == 1:
        return _cut(first, width)
    head = first.replace(_TRACEBACK, "").rstrip()
    # the head gives way to the last line, down to a third of the width
    head = head[:max(width // 3, width - len(last) - 3)].rstrip()  # the ellipsis after it says it goes on
    return _cut(f"{head} {ELLIPSIS} {last}" if head else f"{ELLIPSIS} {last}", width)


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[:width - 1].rstrip() + ELLIPSIS
