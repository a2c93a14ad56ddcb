"""What ``squeue`` shows beyond a row's fields: its format (``-o``, ``-O``, ``-l``, ``$SQUEUE_FORMAT``), an
array's pending tasks on one line, its sort (``-S``), and one read of its rows.

The fields are ``services/front/slurm/squeue_format.py``'s; the command is ``services/front/cli/slurm_commands.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from events import catalogue as c
from services.domain.hostlist import number_ranges
from services.front.client.client import session
from services.front.client.job_numbers import shown_id
from services.front.client.job_queries import read_queue
from services.front.client.problems import BadValue, UsageProblem
from services.front.slurm.squeue_format import SQUEUE_FIELDS, accepted_specs

__all__ = ["SQUEUE_DEFAULT", "SQUEUE_LONG", "LIVE", "LONG_NAMES", "long_format", "squeue_format", "array_ranges",
           "group_arrays", "sort_rows", "spec_value", "squeue_rows"]

SQUEUE_DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
SQUEUE_LONG = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
LIVE = ["PENDING", "HELD", "SCHEDULED", "RUNNING"]  # squeue's default: pending, running (and configuring)

# squeue -O names -> the letters of -o (SQUEUE_FIELDS)
LONG_NAMES = {
    "jobid": "A", "jobarrayid": "i", "arrayjobid": "F", "arraytaskid": "K", "name": "j", "username": "u",
    "account": "a", "state": "T", "statecompact": "t", "timeused": "M", "timelimit": "l", "timeleft": "L",
    "numnodes": "D", "numcpus": "C", "mincpus": "c", "cpus-per-task": "c", "minmemory": "m",
    "tres-per-node": "b", "reasonlist": "R", "reason": "r", "nodelist": "N", "submittime": "V",
    "starttime": "S", "endtime": "e", "partition": "P", "qos": "q", "nice": "y", "licenses": "W",
}
_LONG_TOKEN = re.compile(r"^([A-Za-z-]+)(?::(\.?)(\d*)(.*))?$")


def long_format(spec: str) -> str:
    """squeue's ``-O name[:[.][size][suffix]],...`` as an ``-o`` format: each field ``size`` wide (20
    unless given, as squeue), ``.`` right-justifies, the suffix follows the field."""
    parts = []
    for token in spec.split(","):
        token = token.strip()
        if not token:
            continue
        m = _LONG_TOKEN.match(token)
        letter = LONG_NAMES.get(m[1].lower()) if m else None
        if m is None or letter is None:
            name = m[1] if m else token
            raise BadValue(f"{name!r} is not a field Horizon knows; fields: {', '.join(LONG_NAMES)}", "--Format")
        right, size, suffix = m[2] or "", m[3] or "20", (m[4] or "").replace("%", "%%")
        parts.append(f"%{right}{size}{letter}{suffix}")
    if not parts:
        raise BadValue("names no field", "--Format")
    return "".join(parts)


def squeue_format(fmt: str | None, fmt_long: str | None, long_: bool, environ: dict[str, str]) -> str:
    """The ``-o`` format squeue prints with: ``-o``, ``-O``, ``-l``, else $SQUEUE_FORMAT, $SQUEUE_FORMAT2,
    else squeue's default."""
    if fmt is not None and fmt_long is not None:
        raise UsageProblem("-o (--format) and -O (--Format) exclude each other, as in squeue")
    if long_ and fmt is not None:
        raise UsageProblem("-o (--format) and -l (--long) exclude each other, as in squeue")
    if fmt is not None:
        return fmt
    if fmt_long is not None:
        return long_format(fmt_long)
    if long_:
        return SQUEUE_LONG
    if environ.get("SQUEUE_FORMAT"):
        return environ["SQUEUE_FORMAT"]
    if environ.get("SQUEUE_FORMAT2"):
        return long_format(environ["SQUEUE_FORMAT2"])
    return SQUEUE_DEFAULT


def array_ranges(indices: list[int]) -> str:
    """0,1,2,3,5 -> ``0-3,5`` (squeue's way of writing an array's pending tasks)."""
    return number_ranges(indices)


def group_arrays(rows: list[dict[str, Any]], specs: dict[str, c.JobSpec]) -> list[dict[str, Any]]:
    """squeue without ``-r``: the pending tasks of one array that wait for the same reason are one row,
    ``ID_[0-3,5]``, where the first of them stands; every other row as it is."""
    groups: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    order: list[Any] = []
    for row in rows:
        spec = specs.get(row["job_id"])
        if row["state"] == "PENDING" and spec is not None and spec.array and spec.array_index is not None:
            key = (spec.array, row.get("reason") or "")
            if key not in groups:
                groups[key] = []
                order.append(key)
            groups[key].append((spec.array_index, row))
        else:
            order.append(row)
    out = []
    for item in order:
        if isinstance(item, dict):
            out.append(item)
            continue
        members = groups[item]
        if len(members) == 1:
            out.append(members[0][1])
            continue
        indices = sorted(i for i, _ in members)
        first = members[0][1]
        ranges = array_ranges(indices)
        # shown by the array's number where it has one (4213_[0-3,5]: services/front/client/job_numbers.py)
        out.append({**first, "job_id": f"{item[0]}_[{ranges}]", "array_tasks": ranges,
                    "slurm_id": f"{shown_id(first).rpartition('_')[0]}_[{ranges}]",
                    "tasks": [r["job_id"] for _, r in members]})
        specs[out[-1]["job_id"]] = specs[first["job_id"]]
    return out


def _natural(text: str) -> list[Any]:
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text)]


def sort_rows(rows: list[dict[str, Any]], keys: str, now: float, specs: dict[str, c.JobSpec]) -> list[dict[str, Any]]:
    """squeue's ``-S``: comma-separated fields of ``-o`` (``i``, ``-t``, ``+M``), a ``-`` sorting that field
    descending; numbers inside values compare as numbers."""
    for key in reversed([k.strip() for k in keys.split(",") if k.strip()]):
        descending = key.startswith("-")
        letter = key.lstrip("+-")
        if letter not in SQUEUE_FIELDS:
            raise BadValue(f"{letter!r} is not a field Horizon sorts by; fields: {''.join(SQUEUE_FIELDS)}", "--sort")
        get = SQUEUE_FIELDS[letter][1]
        rows = sorted(rows, key=lambda r: _natural(get(r, now, specs.get(r["job_id"]))), reverse=descending)
    return rows


def spec_value(letter: str, row: dict[str, Any], specs: dict[str, c.JobSpec]) -> str:
    return str(SQUEUE_FIELDS[letter][1](row, time.time(), specs.get(row["job_id"])))


async def squeue_rows(nats_url: str, ask: list[str] | None, filters: dict[str, Any],
                      keep: Callable[[dict[str, Any]], bool], all_specs: bool,
                      group: bool) -> tuple[list[dict[str, Any]], dict[str, c.JobSpec]]:
    """One read of squeue's rows (``read_queue``'s, those ``keep`` keeps) and the specs it needs: every
    row's with ``all_specs`` (QOS, nice, array fields, --json), else with ``group`` those of the pending
    tasks of arrays (to group them), else none."""
    async with session(nats_url) as nc:
        body = await read_queue(nc, ask, filters)
        rows = [row for row in body["jobs"] if keep(row)]
        specs: dict[str, c.JobSpec] = {}
        if all_specs:
            specs = await accepted_specs(nc, [row["job_id"] for row in rows])
        elif group:  # only the pending tasks of arrays are grouped
            specs = await accepted_specs(nc, [row["job_id"] for row in rows if row["state"] == "PENDING"
                                              and re.search(r"_\d+$", row["job_id"])])
        return rows, specs
