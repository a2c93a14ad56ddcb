"""Where a job's output goes: Slurm's filename patterns, checked and expanded. Pure.

``--output`` and ``--error`` (``horizon submit`` and ``#SBATCH``) name files
with Slurm's replacement symbols, expanded on the node when the attempt starts:

====  ==========================================================
%%    a literal ``%``
%j    the job's number (Slurm's job id, ``4213``; an array task's own number)
%J    the job's number and step: the number alone for the batch script (as Slurm's, ``4213``)
%A    the array's number (the job's own for a job that is no array task)
%a    the array task's index (empty for a job that is no task)
%x    the job's name
%u    the user
%N    the node the job starts on
%n    the node's index within the job (0: output is the first node's)
%t    the task's index (0: the batch task)
%s    the step, ``batch``
====  ==========================================================

A job from a log written before numbers existed has none (``JobSpec.number`` 0): there ``%j`` and
``%A`` are its ids (an array task's ``<array>_<index>``, the array's), as before.

A number between ``%`` and the letter zero-pads ``%a``, ``%n``, ``%t``, ``%j`` and ``%A``
(``%3a`` -> ``007``). A backslash anywhere turns the replacements off (as in
Slurm), and ``none`` discards the stream (``/dev/null``). A relative path is
relative to the job's working directory.

The submission service checks a pattern (``pattern_problem``); the agent
expands it (``expand``). No I/O.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from events import catalogue as c
from events.subjects import tenant_view

__all__ = ["PATTERN_LETTERS", "Names", "names_of", "pattern_problem", "expand", "resolve"]

_PATTERN_RE = re.compile(r"%(\d*)(.)", re.DOTALL)
PATTERN_LETTERS = "jJAaxuNnts"
_PADDED = frozenset("antjA")
MAX_PATTERN = 4096


@dataclass(frozen=True, slots=True)
class Names:
    """What the symbols stand for, for one attempt on one node."""

    job_id: str
    name: str
    user: str
    node: str
    array: str | None = None
    index: int | None = None


def names_of(job_id: str, spec: c.JobSpec, node: str) -> Names:
    """What the symbols stand for for ``job_id`` (its key in the log) on ``node``: its number and its
    array's (``services/domain/job_numbers.py``), else (a job from before numbers) the ids its tenant
    gave it."""
    array = tenant_view(spec.tenant, spec.array) if spec.array is not None else None
    return Names(str(spec.number) if spec.number else tenant_view(spec.tenant, job_id), spec.name, spec.user, node,
                 str(spec.array_number) if spec.array_number and array is not None else array, spec.array_index)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a filename pattern Horizon can expand, or None."""
    if len(pattern) > MAX_PATTERN:
        return f"is {len(pattern)} characters long; at most {MAX_PATTERN}"
    if "\x00" in pattern:
        return "contains a NUL character"
    if pattern.lower() == "none" or "\\" in pattern:
        return None
    for m in _PATTERN_RE.finditer(pattern):
        width, letter = m[1], m[2]
        if letter == "%":
            continue
        if letter not in PATTERN_LETTERS:
            return (f"%{letter} is not a filename pattern Horizon knows; known: %%, "
                    + ", ".join(f"%{k}" for k in PATTERN_LETTERS))
        if width and letter not in _PADDED:
            return f"%{width}{letter}: zero padding only applies to %a, %n, %t, %j and %A (numbers)"
        if width and int(width) > 32:
            return f"%{width}{letter}: at most 32 digits"
    if pattern.endswith("%") and not pattern.endswith("%%"):
        return "ends with a lone %"
    return None


def expand(pattern: str, names: Names) -> str:
    """The file name ``pattern`` gives for ``names`` (a checked pattern; see the module doc)."""
    if pattern.lower() == "none":
        return "/dev/null"
    if "\\" in pattern:
        return pattern.replace("\\", "")
    index = "" if names.index is None else str(names.index)
    values = {
        "j": names.job_id,
        "J": names.job_id,  # Slurm: jobid.stepid, but the batch step adds nothing (srun's steps: 4213.0)
        "A": names.array or names.job_id,
        "a": index,
        "x": names.name,
        "u": names.user,
        "N": names.node,
        "n": "0",
        "t": "0",
        "s": "batch",
    }

    def one(m: re.Match[str]) -> str:
        width, letter = m[1], m[2]
        if letter == "%":
            return "%"
        value = values.get(letter, m[0])
        if width and letter in _PADDED and value.isdigit():
            value = value.zfill(int(width))
        return value

    return _PATTERN_RE.sub(one, pattern)


def resolve(path: str, cwd: str) -> str:
    """``path`` made absolute against the working directory ``cwd``."""
    return posixpath.normpath(posixpath.join(cwd, path)) if cwd else path
