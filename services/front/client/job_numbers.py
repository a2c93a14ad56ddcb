"""Jobs named by number (Slurm's job ids: ``4213``, ``4213_7``, ``4213.0``) resolved to Horizon's ids:
the one place every command, Slurm's and Horizon's own, turns what it was given into the ids the log
and the read models know.

A job's number is given when it is accepted (``services/domain/job_numbers.py``); the jobs read model
finds a job by it (``horizon.query.jobs`` with ``numbers``; a tenant's numbers are its own). What
does not read as a number (``eval-7``, ``acme:eval-7``) is an id and is passed on as it is; so is a
number that names no job, so that the command says it names no job in the words it was given.

* ``4213``: the job of that number; if it is an array's number (its first task's), the array, as in
  Slurm (``scancel 4213`` cancels every task, ``afterok:4213`` waits for all of them);
* ``4213_7``: task 7 of the array numbered 4213;
* ``4213.0``, ``4213.batch``, ``4213_7.0``: a step of the job named before the dot, as the same step
  of its id;
* an operator names a tenant's number under accounts as the tenant's jobs are named:
  ``acme:12``, ``acme:12_3``.

The read model may be a moment behind the log (a job ``sbatch`` saw accepted a few milliseconds
ago): a number that names no job yet is asked again for up to ``wait_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from events.subjects import KEY_SEPARATOR
from services.domain.job_numbers import Reference, number_scope, parse_reference
from services.front.client.client import query_all, run, session

__all__ = ["resolve_ids", "resolve_id", "resolve_at", "shown_id", "numbered"]


def numbered(ref: str) -> tuple[str, Reference] | None:
    """(scope, reference) if ``ref`` names a job by number (``12``, ``12_3.0``, ``acme:12``), else None."""
    scope, sep, rest = ref.rpartition(KEY_SEPARATOR)
    parsed = parse_reference(rest)
    return (scope if sep else "", parsed) if parsed is not None else None


def shown_id(row: dict[str, Any]) -> str:
    """The id a read-model row is shown by in Slurm's commands: its number (``4213``, ``4213_7``), or
    its id for a job without one (accepted before numbers existed)."""
    return str(row.get("slurm_id") or row["job_id"])


def _key(scope: str, number: int) -> str:
    return f"{scope}{KEY_SEPARATOR}{number}" if scope else str(number)


def _named(ref: Reference, scope: str, rows: dict[str, dict[str, Any]]) -> str | None:
    """The id ``ref`` names among ``rows`` (number key -> row), or None."""
    row = rows.get(_key(scope, ref.number))
    if row is None:
        return None
    job_id = str(row["job_id"])
    shown = str(row.get("slurm_id") or "").rpartition(KEY_SEPARATOR)[2]
    base, task, _ = shown.partition("_")
    first_task = bool(task) and base == str(ref.number)  # the array's number is its first task's
    if ref.index is None:
        named = job_id.rpartition("_")[0] if first_task else job_id
    elif first_task:
        named = f"{job_id.rpartition('_')[0]}_{ref.index}"
    else:
        return None  # NUMBER_INDEX of a job that is no array
    return f"{named}.{ref.step}" if ref.step is not None else named


async def resolve_ids(nc: Any, refs: Sequence[str], *, wait_s: float = 1.0) -> dict[str, str]:
    """Each of ``refs`` -> the id it names (module docstring); a ref that is not a number, or names no
    job, maps to itself."""
    out = {ref: ref for ref in refs}
    asked = {ref: parsed for ref in refs if (parsed := numbered(ref)) is not None}
    if not asked:
        return out
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        keys = sorted({_key(scope, ref.number) for scope, ref in asked.values()})
        body = await query_all(nc, "jobs", {"numbers": keys}, "jobs")
        # Each row under its number as named in its scope: a tenant's answer names its jobs as its own
        # (x, not acme:x), which is how it asked (12, not acme:12).
        rows = {_key(number_scope(str(row["job_id"])), row["number"]): row for row in body["jobs"] if row.get("number")}
        for ref, (scope, parsed) in list(asked.items()):
            named = _named(parsed, scope, rows)
            if named is not None:
                out[ref] = named
                del asked[ref]
        if not asked or loop.time() >= deadline:
            return out
        await asyncio.sleep(0.2)


async def resolve_id(nc: Any, ref: str, *, wait_s: float = 1.0) -> str:
    """``resolve_ids`` of one ref."""
    return (await resolve_ids(nc, [ref], wait_s=wait_s))[ref]


def resolve_at(url: str, refs: Sequence[str]) -> dict[str, str]:
    """``resolve_ids`` over a connection of its own to ``url``; no connection when no ref is a number."""
    if not any(numbered(ref) is not None for ref in refs):
        return {ref: ref for ref in refs}

    async def go() -> dict[str, str]:
        async with session(url) as nc:
            return await resolve_ids(nc, refs)

    return run(go())  # type: ignore[no-any-return]
