"""sacct over jobs read-model rows: its time window, its fields and columns, and its answer's lines.

``sacct_lines`` are what ``horizon sacct`` and ``horizon jobs --history`` print; each job's steps are
lines of their own (``services/front/slurm/sacct_steps.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from events.resources import format_cpus, format_memory
from services.front.client.client import query_all, session
from services.front.client.job_numbers import resolve_ids, shown_id
from services.front.client.problems import BadValue
from services.front.client.reasons import summary
from services.front.slurm.job_rows import (RAN_STATES, hostlist, nodes_of, select_states, slurm_state, squeue_duration,
                                           stamp, state_matches, used_s)
from services.front.slurm.sacct_steps import with_steps

__all__ = ["SACCT_FIELDS", "SACCT_DEFAULT", "slurm_datetime", "sacct_duration", "sacct_rows", "job_matches",
           "sacct_lines"]


def sacct_duration(seconds: float) -> str:
    """sacct's Elapsed: ``HH:MM:SS``, ``D-HH:MM:SS``."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


_UNITS = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400, "w": 604800,
          "week": 604800, "weeks": 604800}
_DATE_FORMS = ("YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM[:SS] (today), today, midnight, noon, "
               "now[-N[seconds|minutes|hours|days|weeks]]")


def slurm_datetime(text: str, now: float | None = None) -> float:
    """sacct's ``--starttime``/``--endtime`` in local time -> epoch seconds."""
    now = time.time() if now is None else now
    value = text.strip()
    low = value.lower()
    today = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    named = {"today": 0, "midnight": 0, "noon": 12, "teatime": 16}
    if low in named:
        return (today + dt.timedelta(hours=named[low])).timestamp()
    if low == "tomorrow":
        return (today + dt.timedelta(days=1)).timestamp()
    m = re.match(r"^now(?:([+-])(\d+)([a-z]*))?$", low)
    if m:
        if m[1] is None:
            return now
        if m[3] not in _UNITS:
            raise BadValue(f"{text!r}: unknown unit {m[3]!r}; accepted: {_DATE_FORMS}")
        delta = int(m[2]) * _UNITS[m[3]]
        return now + delta if m[1] == "+" else now - delta
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%m/%d/%y", "%m/%d/%Y"):
        try:
            return dt.datetime.strptime(value, fmt).timestamp()
        except ValueError:
            pass
    try:
        return dt.datetime.strptime(value, "%m/%d").replace(year=today.year).timestamp()
    except ValueError:
        pass
    for fmt in ("%H:%M:%S", "%H:%M"):
        try:
            clock = dt.datetime.strptime(value, fmt)
        except ValueError:
            continue
        return today.replace(hour=clock.hour, minute=clock.minute, second=clock.second).timestamp()
    raise BadValue(f"{text!r} is not a time; accepted: {_DATE_FORMS}")


def _exit(row: dict[str, Any]) -> str:
    """sacct's ExitCode ``code:signal`` (a step's line carries both: the highest of its tasks)."""
    if "signal" in row:
        return f"{row.get('exit_code') or 0}:{row.get('signal') or 0}"
    code = row.get("exit_code")
    if code is None:
        return "0:0"
    return f"0:{-code}" if code < 0 else f"{code}:0"


def _alloc_gpus(row: dict[str, Any]) -> int:
    return sum(len(a.get("device_ids") or []) for a in row.get("allocation") or [])


def _alloc_cpus(row: dict[str, Any]) -> str:
    return format_cpus(sum(a.get("cpus_milli") or 0 for a in row.get("allocation") or []))


# name -> (value(row, now))
SACCT_FIELDS: dict[str, Any] = {
    # its number (4213, 4213_7, 4213.0: services/front/client/job_numbers.py), else its id
    "JobID": lambda r, now: shown_id(r),
    "JobIDRaw": lambda r, now: str(r.get("slurm_raw") or r.get("number") or r["job_id"]),  # a task's own number
    "JobName": lambda r, now: r.get("name") or "",
    "Partition": lambda r, now: r.get("partition") or "",
    "User": lambda r, now: r.get("user") or "",
    "Account": lambda r, now: r.get("account") or "",
    "Tenant": lambda r, now: r.get("tenant") or "",
    "State": lambda r, now: slurm_state(r),
    "ExitCode": lambda r, now: _exit(r),
    "Elapsed": lambda r, now: sacct_duration(used_s(r, now)),
    "ElapsedRaw": lambda r, now: str(int(used_s(r, now))),
    "Submit": lambda r, now: stamp(r.get("submitted_ts")),
    "Start": lambda r, now: stamp(r.get("started_ts")),
    "End": lambda r, now: stamp(r.get("ended_ts")) if r["state"] not in ("RUNNING", "SCHEDULED") else "Unknown",
    "NodeList": lambda r, now: hostlist(nodes_of(r)) or "None assigned",
    "NNodes": lambda r, now: str(len(nodes_of(r)) or r.get("nodes") or 1),
    "NTasks": lambda r, now: str(r.get("ntasks") or (r.get("nodes") or 1) * (r.get("tasks_per_node") or 1)),
    "AllocGPUs": lambda r, now: str(_alloc_gpus(r)),
    "AllocCPUS": lambda r, now: _alloc_cpus(r),
    "NCPUS": lambda r, now: _alloc_cpus(r),
    "ReqMem": lambda r, now: format_memory((r.get("memory_bytes") or 0) * (r.get("tasks_per_node") or 1)
                                           * (r.get("nodes") or 1)),
    "Timelimit": lambda r, now: squeue_duration(r.get("time_limit_s")),
    "Class": lambda r, now: r.get("priority_class") or "",
    "Reason": lambda r, now: summary(r.get("reason")),
}
SACCT_DEFAULT = "JobID,JobName,Account,State,ExitCode,Elapsed,Start,End,NodeList,AllocGPUs"
_SACCT_NAMES = {k.lower(): k for k in SACCT_FIELDS}


def _sacct_columns(fmt: str) -> list[tuple[str, int | None]]:
    """``NAME[%WIDTH],...`` -> (field, width); as sacct, ``%30`` right-justifies, ``%-30`` left-justifies
    (a negative width)."""
    cols = []
    for item in fmt.split(","):
        if not item.strip():
            continue  # sacct reads "JobID,,State" and a trailing comma as no field
        name, _, width = item.strip().partition("%")
        key = _SACCT_NAMES.get(name.lower())
        if key is None:
            raise BadValue(f"{name!r} is not a field Horizon knows; fields: {', '.join(SACCT_FIELDS)}", "--format")
        if width and not re.fullmatch(r"-?\d+", width):
            raise BadValue(f"{item!r}: the width after % must be a number", "--format")
        cols.append((key, int(width) if width else None))
    if not cols:
        raise BadValue("names no field", "--format")
    return cols


def job_matches(job_id: str, wanted: Iterable[str]) -> bool:
    """sacct's and squeue's ``-j``: a job id, or an array's id for all its tasks (``ID_N``); a step suffix
    (``ID.batch``, ``ID.0``) names its job here."""
    for item in wanted:
        base = item.split(".", 1)[0]
        if job_id == base or job_id.startswith(base + "_") and job_id[len(base) + 1:].isdigit():
            return True
    return False


def sacct_rows(rows: list[dict[str, Any]], *, match: set[str], start: float | None, end: float | None,
               now: float) -> list[dict[str, Any]]:
    """The rows sacct shows: in the states asked for, running or ended at/after ``start``, begun by ``end``."""
    out = []
    for row in rows:
        if not state_matches(row, match):
            continue
        live = row["state"] in ("PENDING", "HELD", "SCHEDULED", "RUNNING")
        if start is not None and not live and (row.get("ended_ts") or 0) < start:
            continue
        if end is not None and (row.get("started_ts") or row.get("submitted_ts") or 0) > end:
            continue
        out.append(row)
    return out


def sacct_lines(nats_url: str, *, states: tuple[str, ...], user: str | None, account: str | None,
                tenant: str | None, starttime: str | None, endtime: str | None, limit: int | None, fmt: str,
                as_json: bool, parsable: bool = False, noheader: bool = False, offset: int = 0,
                job_ids: Sequence[str] = (), select: Callable[[dict[str, Any]], bool] | None = None,
                delimiter: str = "|", trailing: bool = True, allocations: bool = False) -> list[str]:
    """sacct's answer, its lines (one JSON line with ``as_json``). ``parsable``: cells joined by
    ``delimiter``, with one more at the end of each line when ``trailing`` (sacct ``-p``) and none without
    (``-P``). ``job_ids``: only these jobs (an array's id: its tasks; ``ID.step`` names the job ``ID``), in
    every state unless ``states`` says. ``select``: a further filter on the read model's rows.
    ``allocations`` (sacct ``-X``): the jobs alone, no steps."""
    now = time.time()
    start = slurm_datetime(starttime, now) if starttime else None
    end = slurm_datetime(endtime, now) if endtime else None
    if states:
        ask, match = select_states(states)
    elif job_ids:  # jobs asked for by id are shown whatever their state, as sacct -j
        ask, match = None, set()
    else:  # what has run or ended: not what still waits (that is horizon queue)
        ask = RAN_STATES
        match = set()
    columns = _sacct_columns(fmt)
    filters = {"states": ask, "tenant": tenant, "account": account, "user": user}
    page = None if limit is None or job_ids or select is not None else limit + offset

    if not allocations:
        filters["steps"] = True  # each job's steps, for the JOBID.batch and JOBID.N lines

    async def go() -> dict[str, Any]:
        nonlocal job_ids
        async with session(nats_url) as nc:
            if job_ids:
                named = await resolve_ids(nc, job_ids)  # 4213, 4213_7, 4213.0: the ids they name
                job_ids = [named[j] for j in job_ids]
                bases = sorted({j.split(".", 1)[0] for j in job_ids})
                body = await query_all(nc, "jobs", {**filters, "job_ids": bases}, "jobs")
                found = {row["job_id"] for row in body["jobs"]}
                if all(b in found for b in bases):
                    return body
                # an id that names no job row is an array's: its tasks are <id>_<index>
            return await query_all(nc, "jobs", filters, "jobs", limit=page)

    body = asyncio.run(go())
    rows = [row for row in body["jobs"] if (not job_ids or job_matches(row["job_id"], job_ids))
            and (select is None or select(row))]
    # The time window is sacct's and applied here, so the page is taken after it.
    rows = sacct_rows(rows, match=match, start=start, end=end, now=now)[offset:]
    rows = rows if limit is None else rows[:limit]
    if as_json:
        for row in rows:
            row["slurm"] = {name: SACCT_FIELDS[name](row, now) for name in SACCT_FIELDS}
        return [json.dumps(rows)]
    lines = rows if allocations else with_steps(rows, job_ids)
    table = [[SACCT_FIELDS[name](row, now) for name, _ in columns] for row in lines]
    if parsable:
        tail = delimiter if trailing else ""
        head = [] if noheader else [delimiter.join(name for name, _ in columns) + tail]
        return head + [delimiter.join(cells) + tail for cells in table]
    widths = []
    for i, (name, width) in enumerate(columns):
        widths.append(width if width is not None else max([len(name), *(len(cells[i]) for cells in table)]))

    def fit(value: str, width: int) -> str:
        size = abs(width)
        if len(value) > size:
            return value[:size - 1] + "+"  # sacct's truncation mark
        return value.ljust(size) if width < 0 else value.rjust(size)

    head = [] if noheader else [" ".join(fit(name, w) for (name, _), w in zip(columns, widths)).rstrip(),
                                " ".join("-" * abs(w) for w in widths)]
    return head + [" ".join(fit(v, w) for v, w in zip(cells, widths)).rstrip() for cells in table]
