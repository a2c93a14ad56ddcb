"""squeue's ``--format`` (``-o``) over jobs read-model rows: the fields Horizon knows, their headers and cells.

The jobs read model has no column for a job's QOS, nice, array or licenses; ``%q``,
``%y``, ``%F``, ``%K`` and ``%W`` read them from the job's spec (``accepted_specs``),
asked for by id. ``%P`` is the partition the job got (its row's
``partition``; ``N/A`` for a job of no partition).
"""

from __future__ import annotations

import re
import time
from typing import Any

from events import catalogue as c
from events.resources import format_cpus, format_memory
from services.front.client.client import query_all
from services.front.client.job_numbers import shown_id
from services.front.client.problems import BadValue
from services.domain.licenses import licenses_text
from services.domain.queue.waiting import slurm_reason
from services.front.slurm.job_rows import (hostlist, nodes_of, select_states, short_state, slurm_state, squeue_duration,
                                           stamp, state_matches, used_s)

# squeue's --state selects with job_rows' select_states and state_matches (named here too, for squeue's callers)
__all__ = ["SQUEUE_FIELDS", "SPEC_CHUNK", "squeue_lines", "needs_specs", "accepted_specs", "select_states",
           "state_matches"]


def _gres(row: dict[str, Any]) -> str:
    gpus, nodes = row.get("gpus") or 0, row.get("nodes") or 1
    if not gpus:
        return "N/A"
    per_node = gpus // nodes
    return f"gres/gpu:{row['gpu_type']}:{per_node}" if row.get("gpu_type") else f"gres/gpu:{per_node}"


def _waiting_reason(row: dict[str, Any]) -> str:
    """Why a waiting job waits, as Slurm's squeue says it: its reason code (``Resources``, ``Priority``,
    ``Dependency``, ``JobHeldUser``, ``BeginTime``, ``AssocGrpGRES``, ...: the queue's ``why_code``,
    services/domain/queue/waiting.py), which tools that drive Slurm read; the sentence is
    ``horizon queue --why``'s and ``horizon show``'s."""
    kind = row.get("why_kind") or ("held" if row["state"] == "HELD" else "")
    return row.get("why_code") or slurm_reason(kind)


def _reason_or_nodes(row: dict[str, Any]) -> str:
    if row["state"] in ("PENDING", "HELD"):
        return f"({_waiting_reason(row)})"
    return hostlist(nodes_of(row))


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
    "i": ("JOBID", lambda r, now, s: shown_id(r), False),  # its number (4213, 4213_7), else its id
    "A": ("JOBID", lambda r, now, s: str(r.get("number") or (s.number if s is not None and s.number else "")
                                         or r["job_id"]), False),  # an array task's own number
    "j": ("NAME", lambda r, now, s: r.get("name") or "", False),
    "u": ("USER", lambda r, now, s: r.get("user") or "", False),
    "a": ("ACCOUNT", lambda r, now, s: r.get("account") or "", False),
    "T": ("STATE", lambda r, now, s: slurm_state(r), False),
    "t": ("ST", lambda r, now, s: short_state(r), False),
    "M": ("TIME", lambda r, now, s: squeue_duration(used_s(r, now)), False),
    "l": ("TIME_LIMIT", lambda r, now, s: squeue_duration(r.get("time_limit_s")), False),
    "L": ("TIME_LEFT", lambda r, now, s: squeue_duration(
        None if r.get("time_limit_s") is None else r["time_limit_s"] - used_s(r, now)), False),
    "D": ("NODES", lambda r, now, s: str(len(nodes_of(r)) or r.get("nodes") or 1), False),  # held, else asked
    "C": ("CPUS", lambda r, now, s: format_cpus(  # on the nodes it holds, else asks
        (r.get("cpus_milli") or 0) * (r.get("tasks_per_node") or 1) * (len(nodes_of(r)) or r.get("nodes") or 1)),
          False),
    "c": ("CPUS_PER_TASK", lambda r, now, s: format_cpus(r.get("cpus_milli") or 0), False),
    "m": ("MIN_MEMORY", lambda r, now, s: format_memory((r.get("memory_bytes") or 0) * (r.get("tasks_per_node") or 1)),
          False),
    "b": ("TRES_PER_NODE", lambda r, now, s: _gres(r), False),
    "R": ("NODELIST(REASON)", lambda r, now, s: _reason_or_nodes(r), False),
    "r": ("REASON", lambda r, now, s: _waiting_reason(r) if r["state"] in ("PENDING", "HELD") else "None", False),
    "N": ("NODELIST", lambda r, now, s: hostlist(nodes_of(r)), False),
    "V": ("SUBMIT_TIME", lambda r, now, s: stamp(r.get("submitted_ts"), "N/A"), False),
    "S": ("START_TIME", lambda r, now, s: stamp(r.get("started_ts"), "N/A"), False),
    "e": ("END_TIME", lambda r, now, s: stamp(r.get("ended_ts"), "N/A")
          if r["state"] not in ("PENDING", "HELD", "SCHEDULED", "RUNNING") else "N/A", False),
    "Q": ("CLASS", lambda r, now, s: r.get("priority_class") or "", False),
    "P": ("PARTITION", lambda r, now, s: _partition(r), False),
    "q": ("QOS", _spec_field("qos", "normal"), True),
    "y": ("NICE", _spec_field("nice"), True),
    "W": ("LICENSES", lambda r, now, s: "N/A" if s is None else (licenses_text(s.licenses) or "(null)"), True),
    "F": ("ARRAY_JOB_ID", lambda r, now, s: "N/A" if s is None else (
        str(s.array_number or s.number) if s.number else (s.array or r["job_id"])), True),
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
            raise BadValue(f"%{letter} is not a field Horizon knows; fields: "
                           + " ".join(f"%{k}" for k in SQUEUE_FIELDS), "--format")
        parts.append((right, int(width) if width else None, letter))
    if last < len(fmt):
        parts.append(fmt[last:])
    return parts


def needs_specs(fmt: str) -> bool:
    return any(isinstance(p, tuple) and SQUEUE_FIELDS[p[2]][2] for p in _parse_format(fmt))


# Fields never cut to their width: a job without a number shows its id, longer than Slurm's numbers,
# and a cut id names no job (squeue's default %.18i would cut user-20240310-153000-ab12cd to 18 characters).
_WHOLE = frozenset("iAF")


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
