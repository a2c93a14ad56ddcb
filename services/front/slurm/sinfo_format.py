"""sinfo's view of the partitions and their nodes: Slurm's node state names, the groups of nodes a line
stands for, and ``-o/--format`` fields (``%P %a %l %D %t %N`` ...) laid out as Slurm lays them out.

Pure: the rows come from the scheduler's view (``horizon.query`` partitions and nodes); the command
(``services/front/cli/partition.py``, ``horizon sinfo``) asks for them and prints these lines.
"""

from __future__ import annotations

import re
from typing import Any

from events.resources import format_memory
from services.domain.hostlist import compress
from services.domain.partitions import duration

__all__ = ["FormatError", "SINFO_FIELDS", "DEFAULT_FORMAT", "NODE_FORMAT", "LONG_FORMAT", "NODE_LONG_FORMAT",
           "SUMMARY_FORMAT", "limit_text", "memory_text", "node_state", "availability", "parse_format",
           "sinfo_rows", "partition_members", "sinfo_lines"]


class FormatError(ValueError):
    """A ``--format`` that names a field sinfo does not have."""


def limit_text(seconds: float | None, none: str = "infinite") -> str:
    return none if seconds is None else duration(seconds)


def memory_text(size: int | None, per: str) -> str:
    return "" if size is None else f"{format_memory(size)}/{per}"


# --------------------------------------------------------------------------
# horizon sinfo
# --------------------------------------------------------------------------

_SHORT = {"idle": "idle", "mixed": "mix", "allocated": "alloc", "draining": "drng", "drained": "drain",
          "cordoned": "drain", "lost": "down*", "registered": "unk", "removed": "down"}
_LONG = {"idle": "idle", "mixed": "mixed", "allocated": "allocated", "draining": "draining", "drained": "drained",
         "cordoned": "drained", "lost": "down*", "registered": "unknown", "removed": "down"}


def node_state(row: dict[str, Any], long: bool = False) -> str:
    """Slurm's name of a node's state (``horizon.query.nodes``'s ``state``)."""
    table = _LONG if long else _SHORT
    return table.get(row.get("state") or "", row.get("state") or "unk")


def availability(part: dict[str, Any] | None) -> str:
    return "up" if part is None else {"up": "up", "down": "down", "drain": "drain"}.get(part["state"], part["state"])


def _gres(nodes: list[dict[str, Any]]) -> str:
    """Slurm's %G: the GPUs of the nodes, ``gpu:TYPE:COUNT`` (several kinds comma-separated)."""
    kinds = set()
    for node in nodes:
        if node.get("gpus"):
            types = node.get("gpu_types") or []
            kinds.add(f"gpu:{types[0]}:{node['gpus']}" if len(types) == 1 else f"gpu:{node['gpus']}")
    return ",".join(sorted(kinds)) or "(null)"


def _cpus(nodes: list[dict[str, Any]]) -> str:
    """Slurm's %C: CPUs allocated/idle/other/total."""
    total = sum((n.get("cpus_milli") or 0) for n in nodes) // 1000
    alloc = sum((n.get("cpus_used_milli") or 0) for n in nodes) // 1000
    other = sum((n.get("cpus_milli") or 0) // 1000 for n in nodes if n.get("state") not in
                ("idle", "mixed", "allocated"))
    return f"{alloc}/{max(0, total - alloc - other)}/{other}/{total}"


def _nodes_aiot(nodes: list[dict[str, Any]]) -> str:
    """Slurm's %F: nodes allocated/idle/other/total."""
    alloc = sum(1 for n in nodes if n.get("state") in ("mixed", "allocated"))
    idle = sum(1 for n in nodes if n.get("state") == "idle")
    return f"{alloc}/{idle}/{len(nodes) - alloc - idle}/{len(nodes)}"


def _one(nodes: list[dict[str, Any]], field: str, fmt: Any) -> str:
    values = sorted({fmt(n.get(field) or 0) for n in nodes})
    return values[0] if len(values) == 1 else f"{values[0]}+"


# letter -> (header, value(group)); a group: {"partition": row | None, "nodes": [node rows], "long": bool}
SINFO_FIELDS: dict[str, tuple[str, Any]] = {
    "P": ("PARTITION", lambda g: _part_name(g["partition"]) + ("*" if g["partition"] and g["partition"]["default"]
                                                               else "")),
    "R": ("PARTITION", lambda g: _part_name(g["partition"])),
    "a": ("AVAIL", lambda g: availability(g["partition"])),
    "l": ("TIMELIMIT", lambda g: limit_text(g["partition"]["max_time_s"]) if g["partition"] else "infinite"),
    "L": ("DEFAULTTIME", lambda g: limit_text(g["partition"]["default_time_s"], "n/a") if g["partition"] else "n/a"),
    "D": ("NODES", lambda g: str(len(g["nodes"]))),
    "F": ("NODES(A/I/O/T)", lambda g: _nodes_aiot(g["nodes"])),
    "t": ("STATE", lambda g: _group_state(g, False)),
    "T": ("STATE", lambda g: _group_state(g, True)),
    "N": ("NODELIST", lambda g: compress(n["node"] for n in g["nodes"]) or ""),
    "n": ("HOSTNAMES", lambda g: compress(n["node"] for n in g["nodes"]) or ""),
    "c": ("CPUS", lambda g: _one(g["nodes"], "cpus_milli", lambda v: str(v // 1000)) if g["nodes"] else "0"),
    "C": ("CPUS(A/I/O/T)", lambda g: _cpus(g["nodes"])),
    "m": ("MEMORY", lambda g: _one(g["nodes"], "memory_bytes", lambda v: str(v >> 20)) if g["nodes"] else "0"),
    "G": ("GRES", lambda g: _gres(g["nodes"])),
    "g": ("GROUPS", lambda g: "all"),
    "s": ("JOB_SIZE", lambda g: f"1-{g['partition']['max_nodes']}" if g["partition"] and g["partition"]["max_nodes"]
          else "1-infinite"),
    "p": ("PRIO_TIER", lambda g: str(g["partition"]["priority_tier"]) if g["partition"] else "0"),
}
DEFAULT_FORMAT = "%9P %5a %.10l %.6D %.6t %N"
NODE_FORMAT = "%N %.6D %9P %6t"
LONG_FORMAT = "%9P %5a %.10l %.10s %.6D %.10T %N"
NODE_LONG_FORMAT = "%N %.6D %9P %11T %.4c %.8m %G"
SUMMARY_FORMAT = "%9P %5a %.10l %.16F %N"


def _part_name(part: dict[str, Any] | None) -> str:
    return part["name"] if part is not None else "N/A"


def _group_state(group: dict[str, Any], long: bool) -> str:
    states = sorted({node_state(n, long) for n in group["nodes"]})
    if not states:
        return "n/a"
    return states[0] if len(states) == 1 else ("mixed" if long else "mix")


_SPEC = re.compile(r"%(\.?)(\d*)(.)")


def parse_format(fmt: str) -> list[str | tuple[bool, int | None, str]]:
    parts: list[str | tuple[bool, int | None, str]] = []
    last = 0
    for m in _SPEC.finditer(fmt):
        if m.start() > last:
            parts.append(fmt[last:m.start()])
        last = m.end()
        if m[3] == "%":
            parts.append("%")
            continue
        if m[3] not in SINFO_FIELDS:
            raise FormatError(f"%{m[3]} is not a field Horizon knows; fields: "
                              + " ".join(f"%{k}" for k in SINFO_FIELDS))
        parts.append((m[1] == ".", int(m[2]) if m[2] else None, m[3]))
    if last < len(fmt):
        parts.append(fmt[last:])
    return parts


def _cell(value: str, right: bool, width: int | None) -> str:
    if width is None:
        return value
    value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def sinfo_rows(partitions: list[dict[str, Any]], nodes: list[dict[str, Any]], *, node_oriented: bool = False,
               summarize: bool = False, long: bool = False) -> list[dict[str, Any]]:
    """The groups sinfo prints: per partition and node state (Slurm's default), per node and partition
    (``node_oriented``), or per partition (``summarize``). No partition defined: the nodes under
    ``N/A``."""
    by_name = {n["node"]: n for n in nodes}
    parts = partition_members(partitions, nodes)
    out: list[dict[str, Any]] = []
    if node_oriented:
        for name in sorted(by_name):
            for part, members in parts:
                if any(m["node"] == name for m in members):
                    out.append({"partition": part, "nodes": [by_name[name]], "long": long})
        return out
    for part, members in parts:
        if summarize or not members:
            out.append({"partition": part, "nodes": members, "long": long})
            continue
        groups: dict[str, list[dict[str, Any]]] = {}
        for node in members:
            groups.setdefault(node_state(node, long), []).append(node)
        for state in sorted(groups, key=lambda s: min(n["node"] for n in groups[s])):
            out.append({"partition": part, "nodes": groups[state], "long": long})
    return out


def partition_members(partitions: list[dict[str, Any]], nodes: list[dict[str, Any]]
             ) -> list[tuple[dict[str, Any] | None, list[dict[str, Any]]]]:
    """Each partition (the default one first, then by name) with its nodes' rows; none defined: every
    node under no partition."""
    by_name = {n["node"]: n for n in nodes}
    ordered = sorted(partitions, key=lambda p: (not p["default"], p["name"]))
    return [(p, [by_name[m] for m in p["members"] if m in by_name]) for p in ordered] or [(None, list(nodes))]


def sinfo_lines(groups: list[dict[str, Any]], fmt: str, header: bool = True) -> list[str]:
    parts = parse_format(fmt)
    out = []
    if header:
        out.append("".join(p if isinstance(p, str) else _cell(SINFO_FIELDS[p[2]][0], p[0], p[1])
                           for p in parts).rstrip())
    for group in groups:
        out.append("".join(p if isinstance(p, str) else _cell(SINFO_FIELDS[p[2]][1](group), p[0], p[1])
                           for p in parts).rstrip())
    return out
