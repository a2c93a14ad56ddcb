"""Job arrays: Slurm's ``--array`` syntax, parsed the same way by submission and the simulator.

=================  ===========================================================
spec               tasks
=================  ===========================================================
``0-99``           indices 0, 1, ..., 99
``0-99%10``        the same, at most 10 of them holding resources at once
``1,3,5-7``        1, 3, 5, 6, 7
``0-15:4``         0, 4, 8, 12 (a range with a step)
``0-15:4%2``       the same, at most 2 at once
=================  ===========================================================

Indices are whole numbers from 0 to ``MAX_INDEX``; a list may repeat or
overlap itself (``1-5,3``), as Slurm's does, and the tasks are the sorted
distinct indices. Task ``i`` of the array submitted as ``<job_id>`` is the job
``<job_id>_<i>`` (Slurm's ``<jobid>_<index>``).

The count is worked out before any list is built, so ``0-999999999`` is
refused by its size in constant time rather than by running out of memory.
Every problem is a ``ResourceError`` naming the field, the value and the
accepted forms, as for the other strings a client writes.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from events.resources import ResourceError

__all__ = ["ArraySpec", "parse_array", "task_id", "ARRAY_FORMS", "ARRAY_PATTERN", "MAX_INDEX"]

# Slurm caps indices below MaxArraySize (default 1001). Ours is wider but keeps a task id
# short: a job id of up to 118 characters plus "_" and 9 digits is still a subject token.
MAX_INDEX = 999_999_999
ARRAY_FORMS = (
    "indices and ranges separated by commas, a range optionally with a step, then optionally %N "
    "for at most N running at once: 0-99, 0-99%10, 1,3,5-7, 0-15:4"
)

_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?$")
# The syntax alone, for the published JSON Schema (events/asyncapi.py): indices and ranges with blanks
# around the commas, then %N. What it cannot say (a range's end not below its start, a step and a %N of
# at least 1, no index above MAX_INDEX, at most so many tasks) parse_array says.
ARRAY_PATTERN = r"^\s*[0-9]+(?:-[0-9]+(?::[0-9]+)?)?\s*(?:,\s*[0-9]+(?:-[0-9]+(?::[0-9]+)?)?\s*)*(?:%[0-9]+)?\s*$"
_COUNT = re.compile(r"^[0-9]+$")


class ArraySpec(NamedTuple):
    indices: tuple[int, ...]  # sorted, distinct
    max_running: int  # the %N; 0 = no limit


def _too_long(digits: str) -> bool:
    """More digits than any index has (int() of thousands of digits is slow, and refused past 4,300)."""
    return len(digits.lstrip("0")) > len(str(MAX_INDEX))


def task_id(array_id: str, index: int) -> str:
    """The job id of one task: ``<array id>_<index>``."""
    return f"{array_id}_{index}"


def parse_array(text: object, field: str = "array", max_tasks: int | None = None) -> ArraySpec:
    """``"0-15:4%2"`` -> ``ArraySpec((0, 4, 8, 12), 2)``, or ``ResourceError``."""
    if not isinstance(text, str) or not text.strip():
        raise ResourceError(field, text, "is not an array specification", ARRAY_FORMS)
    body, sep, limit = text.strip().partition("%")
    max_running = 0
    if sep:
        if _COUNT.match(limit) and _too_long(limit):
            raise ResourceError(field, text, f"has a %N above {MAX_INDEX}", ARRAY_FORMS)
        if not _COUNT.match(limit) or int(limit) == 0:
            raise ResourceError(field, text, f"has %{limit}, which is not a whole number of at least 1", ARRAY_FORMS)
        max_running = int(limit)
    ranges: list[tuple[int, int, int]] = []
    count = 0
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise ResourceError(field, text, f"has {part.strip()!r}, which is not an index or a range", ARRAY_FORMS)
        if any(g is not None and _too_long(g) for g in m.groups()):
            raise ResourceError(field, text, f"has {part.strip()[:40]!r}, a number above the largest allowed index "
                                f"{MAX_INDEX}", ARRAY_FORMS)
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last > MAX_INDEX:
            raise ResourceError(field, text, f"has index {last}, above the largest allowed index {MAX_INDEX}",
                                ARRAY_FORMS)
        if last < first:
            raise ResourceError(field, text, f"has the range {part.strip()!r}, which ends before it starts",
                                ARRAY_FORMS)
        if step == 0:
            raise ResourceError(field, text, f"has the range {part.strip()!r} with a step of 0", ARRAY_FORMS)
        ranges.append((first, last, step))
        count += (last - first) // step + 1
    if max_tasks is not None and count > max_tasks:
        raise ResourceError(field, text, f"makes {count:,} tasks; at most {max_tasks:,} per array", ARRAY_FORMS)
    indices: set[int] = set()
    for first, last, step in ranges:
        indices.update(range(first, last + 1, step))
    return ArraySpec(tuple(sorted(indices)), max_running)
