"""Slurm's views of Horizon's jobs: ``horizon sacct`` (= ``horizon jobs --history``) and ``horizon queue --format``.

States are shown with Slurm's names where Slurm has the same state, and with
Horizon's where it has none (docs/slurm.md has the table):

==========================  =====================  ====
Horizon                     Slurm (``%T``)         ``%t``
==========================  =====================  ====
PENDING, HELD               PENDING                PD
SCHEDULED                   CONFIGURING            CF
RUNNING                     RUNNING                R
SUCCEEDED                   COMPLETED              CD
FAILED                      FAILED                 F
FAILED (time limit)         TIMEOUT                TO
FAILED (node lost)          NODE_FAIL              NF
PREEMPTED                   PREEMPTED              PR
CANCELLED                   CANCELLED              CA
REJECTED                    REJECTED               RJ
UNSCHEDULABLE               UNSCHEDULABLE          US
DEPENDENCY_NEVER_SATISFIED  DEPENDENCY_NEVER_...   DN
==========================  =====================  ====

The jobs read model has no column for a job's QOS, nice or array; ``%q``,
``%y``, ``%F`` and ``%K`` read them from the job's ``JobAccepted`` in the log,
one request per job shown. ``%P`` is the partition the job got (its row's
``partition``; ``N/A`` for a job of no partition).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from events import catalogue as c
from events.resources import format_cpus, format_memory
from services.front.slurm.sacct_steps import with_steps
from services.domain.hostlist import compress
from services.domain.partitions import duration
from services.front.client.client import default_user, query_all, session
from services.front.cli.options import nats_option
from services.front.client.reasons import summary

__all__ = ["slurm_state", "select_states", "hostlist", "squeue_lines", "needs_specs", "accepted_specs",
           "slurm_datetime", "sacct_rows", "sacct", "run_sacct", "register", "SQUEUE_FIELDS"]

# --------------------------------------------------------------------------
# States
# --------------------------------------------------------------------------

_LONG = {
    "PENDING": "PENDING", "HELD": "PENDING", "SCHEDULED": "CONFIGURING", "RUNNING": "RUNNING",
    "SUCCEEDED": "COMPLETED", "FAILED": "FAILED", "PREEMPTED": "PREEMPTED", "CANCELLED": "CANCELLED",
    "REJECTED": "REJECTED", "UNSCHEDULABLE": "UNSCHEDULABLE",
    "DEPENDENCY_NEVER_SATISFIED": "DEPENDENCY_NEVER_SATISFIED", "OUT_OF_MEMORY": "OUT_OF_MEMORY",
}
_SHORT = {
    "PENDING": "PD", "CONFIGURING": "CF", "RUNNING": "R", "COMPLETED": "CD", "FAILED": "F", "TIMEOUT": "TO",
    "NODE_FAIL": "NF", "PREEMPTED": "PR", "CANCELLED": "CA", "REJECTED": "RJ", "UNSCHEDULABLE": "US",
    "DEPENDENCY_NEVER_SATISFIED": "DN", "OUT_OF_MEMORY": "OOM",
}
# Which Horizon states hold jobs in each Slurm state (to ask the read model).
_HORIZON_OF = {
    "PENDING": ("PENDING", "HELD"), "CONFIGURING": ("SCHEDULED",), "RUNNING": ("RUNNING",),
    "COMPLETED": ("SUCCEEDED",), "FAILED": ("FAILED",), "TIMEOUT": ("FAILED",), "NODE_FAIL": ("FAILED",),
    "PREEMPTED": ("PREEMPTED",), "CANCELLED": ("CANCELLED",), "REJECTED": ("REJECTED",),
    "UNSCHEDULABLE": ("UNSCHEDULABLE",), "DEPENDENCY_NEVER_SATISFIED": ("DEPENDENCY_NEVER_SATISFIED",),
    "OUT_OF_MEMORY": ("OUT_OF_MEMORY",),
}
_NODE_LOST = re.compile(r"^node \S+ (lost|removed)$")


def slurm_state(row: dict[str, Any]) -> str:
    """The Slurm name of a read-model row's state (``TIMEOUT`` and ``NODE_FAIL`` from a failure's reason)."""
    state = row["state"]
    if state == "FAILED":
        reason = row.get("reason") or ""
        if reason.startswith("time limit"):
            return "TIMEOUT"
        if _NODE_LOST.match(reason):
            return "NODE_FAIL"
    return _LONG.get(state, state)


def select_states(values: Iterable[str]) -> tuple[list[str] | None, set[str]]:
    """``--state`` values (Slurm's names or short codes, Horizon's names, comma lists, ``all``) ->
    (the Horizon states to ask the read model for, or None for all; the names a row must match)."""
    ask: set[str] = set()
    match: set[str] = set()
    short = {v: k for k, v in _SHORT.items()}
    for value in values:
        for item in value.split(","):
            name = item.strip().upper()
            if not name:
                continue
            if name == "ALL":
                return None, set()
            name = short.get(name, name)
            if name in _HORIZON_OF:
                ask.update(_HORIZON_OF[name])
                match.add(name)
            elif name in _LONG:
                ask.add(name)
                match.add(name)
            else:
                known = sorted(set(_HORIZON_OF) | set(_LONG) | set(_SHORT.values()))
                raise click.BadParameter(f"{item.strip()!r} is not a job state; states: {', '.join(known)}, all",
                                         param_hint="--state")
    return sorted(ask), match


def state_matches(row: dict[str, Any], match: set[str]) -> bool:
    return not match or row["state"] in match or slurm_state(row) in match


# --------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------


def hostlist(names: Iterable[str]) -> str:
    """Slurm's compressed host list: node-01,node-02,node-03,gpu-7 -> ``gpu-7,node-[01-03]``
    (``services/domain/hostlist.py``'s ``compress``, the one used everywhere)."""
    return compress(names)


def squeue_duration(seconds: float | None) -> str:
    """squeue's times: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    return "UNLIMITED" if seconds is None else duration(int(seconds))  # whole seconds, cut as squeue does


def sacct_duration(seconds: float) -> str:
    """sacct's Elapsed: ``HH:MM:SS``, ``D-HH:MM:SS``."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _stamp(ts: float | None, none: str = "Unknown") -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) if ts else none


def _nodes_of(row: dict[str, Any]) -> list[str]:
    return [a["node"] for a in row.get("allocation") or []]


def _used_s(row: dict[str, Any], now: float) -> float:
    if not row.get("started_ts"):
        return 0.0
    end = row.get("ended_ts") if row["state"] not in ("RUNNING", "SCHEDULED") else None
    return (end or now) - row["started_ts"]


def _gres(row: dict[str, Any]) -> str:
    gpus, nodes = row.get("gpus") or 0, row.get("nodes") or 1
    if not gpus:
        return "N/A"
    per_node = gpus // nodes
    return f"gres/gpu:{row['gpu_type']}:{per_node}" if row.get("gpu_type") else f"gres/gpu:{per_node}"


def _waiting_reason(row: dict[str, Any]) -> str:
    """Why a waiting job waits, as `horizon queue` says it: the scheduler's word from the queue's row
    (``why``: a quota, a dependency, a partition, placement's verdict), else the read model's reason."""
    return summary(row.get("why") or row.get("reason"))


def _reason_or_nodes(row: dict[str, Any]) -> str:
    if row["state"] in ("PENDING", "HELD"):
        if row["state"] == "HELD":
            return "(JobHeldUser)"
        return f"({_waiting_reason(row)})" if _waiting_reason(row) else "(None)"
    return hostlist(_nodes_of(row))


def _partition(row: dict[str, Any]) -> str:
    """The partition the job got ("" for a job of no partition, None for a row from before partitions)."""
    value = row.get("partition")
    return value if value else "N/A"


def _spec_field(name: str, default: str = "") -> Any:
    def get(row: dict[str, Any], now: float, spec: c.JobSpec | None) -> str:
        if spec is None:
            return "N/A"
        value = getattr(spec, name)
        return default if value in (None, "") else str(value)

    return get


# letter -> (header, value(row, now, spec), needs the spec)
SQUEUE_FIELDS: dict[str, tuple[str, Any, bool]] = {
    "i": ("JOBID", lambda r, now, s: r["job_id"], False),
    "j": ("NAME", lambda r, now, s: r.get("name") or "", False),
    "u": ("USER", lambda r, now, s: r.get("user") or "", False),
    "a": ("ACCOUNT", lambda r, now, s: r.get("account") or "", False),
    "T": ("STATE", lambda r, now, s: slurm_state(r), False),
    "t": ("ST", lambda r, now, s: _SHORT.get(slurm_state(r), slurm_state(r)[:2]), False),
    "M": ("TIME", lambda r, now, s: squeue_duration(_used_s(r, now)), False),
    "l": ("TIME_LIMIT", lambda r, now, s: squeue_duration(r.get("time_limit_s")), False),
    "L": ("TIME_LEFT", lambda r, now, s: squeue_duration(
        None if r.get("time_limit_s") is None else r["time_limit_s"] - _used_s(r, now)), False),
    "D": ("NODES", lambda r, now, s: str(len(_nodes_of(r)) or r.get("nodes") or 1), False),  # held, else asked
    "C": ("CPUS", lambda r, now, s: format_cpus(  # on the nodes it holds, else asks
        (r.get("cpus_milli") or 0) * (r.get("tasks_per_node") or 1) * (len(_nodes_of(r)) or r.get("nodes") or 1)),
          False),
    "c": ("CPUS_PER_TASK", lambda r, now, s: format_cpus(r.get("cpus_milli") or 0), False),
    "m": ("MIN_MEMORY", lambda r, now, s: format_memory((r.get("memory_bytes") or 0) * (r.get("tasks_per_node") or 1)),
          False),
    "b": ("TRES_PER_NODE", lambda r, now, s: _gres(r), False),
    "R": ("NODELIST(REASON)", lambda r, now, s: _reason_or_nodes(r), False),
    "r": ("REASON", lambda r, now, s: ("JobHeldUser" if r["state"] == "HELD" else _waiting_reason(r) or "None"),
          False),
    "N": ("NODELIST", lambda r, now, s: hostlist(_nodes_of(r)), False),
    "V": ("SUBMIT_TIME", lambda r, now, s: _stamp(r.get("submitted_ts"), "N/A"), False),
    "S": ("START_TIME", lambda r, now, s: _stamp(r.get("started_ts"), "N/A"), False),
    "e": ("END_TIME", lambda r, now, s: _stamp(r.get("ended_ts"), "N/A")
          if r["state"] not in ("PENDING", "HELD", "SCHEDULED", "RUNNING") else "N/A", False),
    "Q": ("CLASS", lambda r, now, s: r.get("priority_class") or "", False),
    "P": ("PARTITION", lambda r, now, s: _partition(r), False),
    "q": ("QOS", _spec_field("qos", "normal"), True),
    "y": ("NICE", _spec_field("nice"), True),
    "F": ("ARRAY_JOB_ID", lambda r, now, s: "N/A" if s is None else (s.array or r["job_id"]), True),
    # a row squeue shows for several pending tasks of an array carries their indices (``array_tasks``)
    "K": ("ARRAY_TASK_ID", lambda r, now, s: r.get("array_tasks") or (
        "N/A" if s is None or s.array_index is None else str(s.array_index)), True),
}

SPEC_CHUNK = 500  # job ids per query for their specs (a request stays small, SQLite's IN list short)

_SPEC_RE = re.compile(r"%(\.?)(\d*)(.)")


def _parse_format(fmt: str) -> list[str | tuple[bool, int | None, str]]:
    parts: list[str | tuple[bool, int | None, str]] = []
    last = 0
    for m in _SPEC_RE.finditer(fmt):
        if m.start() > last:
            parts.append(fmt[last:m.start()])
        last = m.end()
        right, width, letter = m[1] == ".", m[2], m[3]
        if letter == "%":
            parts.append("%")
            continue
        if letter not in SQUEUE_FIELDS:
            raise click.BadParameter(f"%{letter} is not a field Horizon knows; fields: "
                                     + " ".join(f"%{k}" for k in SQUEUE_FIELDS), param_hint="--format")
        parts.append((right, int(width) if width else None, letter))
    if last < len(fmt):
        parts.append(fmt[last:])
    return parts


def needs_specs(fmt: str) -> bool:
    return any(isinstance(p, tuple) and SQUEUE_FIELDS[p[2]][2] for p in _parse_format(fmt))


# Fields never cut to their width: Horizon's job ids are longer than Slurm's numbers, and a cut id
# names no job (squeue's default %.18i would cut user-20240310-153000-ab12cd to 18 characters).
_WHOLE = frozenset("iF")


def _cell(value: str, right: bool, width: int | None, letter: str = "") -> str:
    if width is None:
        return value
    if letter not in _WHOLE:
        value = value[:width]  # squeue truncates to the width
    return value.rjust(width) if right else value.ljust(width)


def squeue_lines(rows: list[dict[str, Any]], fmt: str, *, header: bool = True, now: float | None = None,
                 specs: dict[str, c.JobSpec] | None = None) -> list[str]:
    """Rows in squeue's ``--format`` (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``)."""
    parts = _parse_format(fmt)
    now = time.time() if now is None else now
    specs = specs or {}
    out = []
    if header:
        out.append("".join(p if isinstance(p, str) else _cell(SQUEUE_FIELDS[p[2]][0], p[0], p[1])
                           for p in parts).rstrip())
    for row in rows:
        spec = specs.get(row["job_id"])
        cells = []
        for i, p in enumerate(parts):
            if isinstance(p, str):
                cells.append(p)
                continue
            value = SQUEUE_FIELDS[p[2]][1](row, now, spec)
            cell = _cell(value, p[0], p[1], p[2])
            if (p[2] in _WHOLE and p[1] is not None and len(value) >= p[1] and i + 1 < len(parts)
                    and not isinstance(parts[i + 1], str)):
                cell += " "  # a whole id wider than its field, right before another field (-O): keep them apart
            cells.append(cell)
        out.append("".join(cells).rstrip())
    return out


async def accepted_specs(nc: Any, job_ids: list[str]) -> dict[str, c.JobSpec]:
    """Each job's spec, from the jobs read model (``horizon.query.jobs`` with ``specs``), by the ids
    given: what a tenant may ask too. It was read from each job's ``JobAccepted`` in the stream,
    which a tenant's account cannot read (no JetStream): ``horizon squeue`` as a tenant ended in a
    traceback as soon as it had an array's pending tasks to group (issue 31)."""
    import msgspec

    out: dict[str, c.JobSpec] = {}
    wanted = list(dict.fromkeys(job_ids))
    for i in range(0, len(wanted), SPEC_CHUNK):
        chunk = wanted[i:i + SPEC_CHUNK]
        body = await query_all(nc, "jobs", {"job_ids": chunk, "specs": True}, "jobs")
        for row in body["jobs"]:
            if isinstance(row.get("spec"), dict):
                try:
                    out[row["job_id"]] = msgspec.convert(row["spec"], c.JobSpec)
                except msgspec.ValidationError:
                    continue  # a spec this CLI cannot read: its fields show N/A
    return out


# --------------------------------------------------------------------------
# sacct
# --------------------------------------------------------------------------

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
            raise click.BadParameter(f"{text!r}: unknown unit {m[3]!r}; accepted: {_DATE_FORMS}")
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
    raise click.BadParameter(f"{text!r} is not a time; accepted: {_DATE_FORMS}")


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
    "JobID": lambda r, now: r["job_id"],
    "JobIDRaw": lambda r, now: r["job_id"],
    "JobName": lambda r, now: r.get("name") or "",
    "Partition": lambda r, now: r.get("partition") or "",
    "User": lambda r, now: r.get("user") or "",
    "Account": lambda r, now: r.get("account") or "",
    "Tenant": lambda r, now: r.get("tenant") or "",
    "State": lambda r, now: slurm_state(r),
    "ExitCode": lambda r, now: _exit(r),
    "Elapsed": lambda r, now: sacct_duration(_used_s(r, now)),
    "ElapsedRaw": lambda r, now: str(int(_used_s(r, now))),
    "Submit": lambda r, now: _stamp(r.get("submitted_ts")),
    "Start": lambda r, now: _stamp(r.get("started_ts")),
    "End": lambda r, now: _stamp(r.get("ended_ts")) if r["state"] not in ("RUNNING", "SCHEDULED") else "Unknown",
    "NodeList": lambda r, now: hostlist(_nodes_of(r)) or "None assigned",
    "NNodes": lambda r, now: str(len(_nodes_of(r)) or r.get("nodes") or 1),
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
            raise click.BadParameter(f"{name!r} is not a field Horizon knows; fields: {', '.join(SACCT_FIELDS)}",
                                     param_hint="--format")
        if width and not re.fullmatch(r"-?\d+", width):
            raise click.BadParameter(f"{item!r}: the width after % must be a number", param_hint="--format")
        cols.append((key, int(width) if width else None))
    if not cols:
        raise click.BadParameter("names no field", param_hint="--format")
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


def run_sacct(nats_url: str, *, states: tuple[str, ...], user: str | None, account: str | None,
              tenant: str | None, starttime: str | None, endtime: str | None, limit: int | None, fmt: str,
              as_json: bool, parsable: bool = False, noheader: bool = False, offset: int = 0,
              job_ids: Sequence[str] = (), select: Callable[[dict[str, Any]], bool] | None = None,
              delimiter: str = "|", trailing: bool = True, allocations: bool = False) -> None:
    """Print sacct's answer. ``parsable``: cells joined by ``delimiter``, with one more at the end of each
    line when ``trailing`` (sacct ``-p``) and none without (``-P``). ``job_ids``: only these jobs (an array's
    id: its tasks; ``ID.step`` names the job ``ID``), in every state unless ``states`` says. ``select``:
    a further filter on the read model's rows. ``allocations`` (sacct ``-X``): the jobs alone, no steps."""
    now = time.time()
    start = slurm_datetime(starttime, now) if starttime else None
    end = slurm_datetime(endtime, now) if endtime else None
    if states:
        ask, match = select_states(states)
    elif job_ids:  # jobs asked for by id are shown whatever their state, as sacct -j
        ask, match = None, set()
    else:  # what has run or ended: not what still waits (that is horizon queue)
        ask = sorted(set(_LONG) - {"PENDING", "HELD"})
        match = set()
    columns = _sacct_columns(fmt)
    filters = {"states": ask, "tenant": tenant, "account": account, "user": user}
    page = None if limit is None or job_ids or select is not None else limit + offset

    if not allocations:
        filters["steps"] = True  # each job's steps, for the JOBID.batch and JOBID.N lines

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            if job_ids:
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
        click.echo(json.dumps(rows))
        return
    lines = rows if allocations else with_steps(rows, job_ids)
    table = [[SACCT_FIELDS[name](row, now) for name, _ in columns] for row in lines]
    if parsable:
        tail = delimiter if trailing else ""
        if not noheader:
            click.echo(delimiter.join(name for name, _ in columns) + tail)
        for cells in table:
            click.echo(delimiter.join(cells) + tail)
        return
    widths = []
    for i, (name, width) in enumerate(columns):
        widths.append(width if width is not None else max([len(name), *(len(cells[i]) for cells in table)]))

    def fit(value: str, width: int) -> str:
        size = abs(width)
        if len(value) > size:
            return value[:size - 1] + "+"  # sacct's truncation mark
        return value.ljust(size) if width < 0 else value.rjust(size)

    if not noheader:
        click.echo(" ".join(fit(name, w) for (name, _), w in zip(columns, widths)).rstrip())
        click.echo(" ".join("-" * abs(w) for w in widths))
    for cells in table:
        click.echo(" ".join(fit(v, w) for v, w in zip(cells, widths)).rstrip())


def _listed(values: Iterable[str]) -> list[str]:
    """Slurm's list options: repeated, comma-separated, or both."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _sacct_window(starttime: str | None, states: tuple[str, ...], job_ids: list[str]) -> str | None:
    """sacct's default ``--starttime``: with ``-j`` none (Unix epoch 0), with ``-s`` now (the jobs in
    those states now), else midnight."""
    if starttime is not None:
        return starttime
    if job_ids:
        return None
    return "now" if states else "midnight"


@click.command()
@nats_option
@click.option("-j", "--jobs", "jobs", multiple=True,
              help="Only these jobs (comma-separated or repeated; an array's id: all its tasks), in any state; "
                   "without -S, since the beginning.")
@click.option("-s", "--state", "states", multiple=True,
              help="Only jobs in these states: Slurm's names or codes (COMPLETED, CD, FAILED, TIMEOUT, RUNNING, "
                   "PENDING, ...), Horizon's (SUCCEEDED, ...), comma-separated or repeated; 'all'. "
                   "Default: every job that has run or ended. Without -S: the jobs in these states now.")
@click.option("-u", "--user", "users", multiple=True, help="Only these users' jobs (default: yours; comma-separated).")
@click.option("-a", "--allusers", is_flag=True, help="Every user's jobs.")
@click.option("-A", "--account", "--accounts", "accounts", multiple=True, help="Only these accounts' jobs.")
@click.option("--name", "names", multiple=True, help="Only jobs with these names (comma-separated).")
@click.option("-r", "--partition", "partitions", multiple=True, help="Only jobs in these partitions (comma-separated).")
@click.option("-N", "--nodelist", "nodelist", multiple=True,
              help="Only jobs that ran on one of these nodes (comma-separated).")
@click.option("--tenant", default=None, help="Only this tenant's jobs.")
@click.option("-S", "--starttime", default=None,
              help="Jobs running or ended at or after this time: YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM, "
                   "now-2days, today, midnight. Default: midnight; with -j the beginning; with -s now.")
@click.option("-E", "--endtime", default=None, help="Jobs begun (or submitted) at or before this time; same forms.")
@click.option("-o", "--format", "fmt", default=None,
              help="Comma-separated fields, NAME%WIDTH right-justified, NAME%-WIDTH left-justified ($SACCT_FORMAT "
                   "if set, else " + SACCT_DEFAULT + "): " + ",".join(SACCT_FIELDS) + ".")
@click.option("-b", "--brief", is_flag=True, help="JobID, State and ExitCode.")
@click.option("-l", "--long", "long_", is_flag=True, help="Every field Horizon has.")
@click.option("-e", "--helpformat", is_flag=True, help="List the fields --format takes.")
@click.option("-X", "--allocations", is_flag=True, help="The jobs alone, not their steps.")
@click.option("-p", "--parsable", "parsable1", is_flag=True, help="Fields separated by |, one at the end too.")
@click.option("-P", "--parsable2", "parsable", is_flag=True, help="Fields separated by |, no padding.")
@click.option("--delimiter", default="|", show_default=True, help="The separator of -p and -P.")
@click.option("-n", "--noheader", is_flag=True)
@click.option("--limit", type=int, default=100_000, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True,
              help="Skip this many of the matching jobs first (paging, with --limit).")
@click.option("--json", "as_json", is_flag=True, help="The read model's rows, with the sacct fields under 'slurm'.")
def sacct(nats_url: str, jobs: tuple[str, ...], states: tuple[str, ...], users: tuple[str, ...], allusers: bool,
          accounts: tuple[str, ...], names: tuple[str, ...], partitions: tuple[str, ...], nodelist: tuple[str, ...],
          tenant: str | None, starttime: str | None, endtime: str | None, fmt: str | None, brief: bool, long_: bool,
          helpformat: bool, allocations: bool, parsable1: bool, parsable: bool, delimiter: str, noheader: bool,
          limit: int, offset: int, as_json: bool) -> None:
    """Jobs that ran or ended, with sacct's columns (your own since midnight, unless told otherwise)."""
    if helpformat:
        for i in range(0, len(SACCT_FIELDS), 4):
            click.echo("".join(f"{name:<20}" for name in list(SACCT_FIELDS)[i:i + 4]).rstrip())
        return
    if limit < 0 or offset < 0:
        raise click.UsageError("--limit and --offset must not be negative")
    job_ids = _listed(jobs)
    user_list, account_list, name_list = _listed(users), _listed(accounts), _listed(names)
    nodes, partition_list = set(_listed(nodelist)), set(_listed(partitions))
    if not user_list and not allusers and not job_ids:  # as sacct: your own jobs, unless you name them
        user_list = [default_user()]
    if fmt is None:
        fmt = ("JobID,State,ExitCode" if brief else ",".join(SACCT_FIELDS) if long_ else
               os.environ.get("SACCT_FORMAT") or SACCT_DEFAULT)
    wanted_names = {n.lower() for n in name_list}
    wanted_accounts = {a.lower() for a in account_list}

    def select(row: dict[str, Any]) -> bool:
        return ((not user_list or row.get("user") in user_list)
                and (not wanted_accounts or (row.get("account") or "").lower() in wanted_accounts)
                and (not wanted_names or (row.get("name") or "").lower() in wanted_names)
                and (not partition_list or row.get("partition") in partition_list)
                and (not nodes or bool(nodes & set(_nodes_of(row)))))

    run_sacct(nats_url, states=states, user=user_list[0] if len(user_list) == 1 else None,
              account=account_list[0] if len(account_list) == 1 else None, tenant=tenant,
              starttime=_sacct_window(starttime, states, job_ids), endtime=endtime, limit=limit, fmt=fmt,
              as_json=as_json, parsable=parsable or parsable1, trailing=parsable1 and not parsable,
              delimiter=delimiter, noheader=noheader, offset=offset, job_ids=job_ids,
              select=select if (len(user_list) > 1 or account_list or name_list or nodes or partition_list) else None,
              allocations=allocations)


def register(group: click.Group) -> None:
    group.add_command(sacct)
