"""A jobs read-model row as Slurm's commands show it: its state, its nodes, its time used.

States are shown with Slurm's names where Slurm has the same state, and with
Horizon's where it has none (docs/slurm.md has the table):

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

Shared by ``squeue_format.py`` and ``sacct_format.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from services.domain.hostlist import compress
from services.domain.partitions import duration
from services.front.client.problems import BadValue

__all__ = ["slurm_state", "short_state", "select_states", "state_matches", "RAN_STATES", "hostlist",
           "squeue_duration", "stamp", "nodes_of", "used_s"]

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
                raise BadValue(f"{item.strip()!r} is not a job state; states: {', '.join(known)}, all", "--state")
    return sorted(ask), match


def state_matches(row: dict[str, Any], match: set[str]) -> bool:
    return not match or row["state"] in match or slurm_state(row) in match


def short_state(row: dict[str, Any]) -> str:
    """squeue's ``%t``: the two-letter code of the row's Slurm state."""
    return _SHORT.get(slurm_state(row), slurm_state(row)[:2])


# The states sacct shows by default: what has run or ended, not what still waits (that is horizon queue).
RAN_STATES = sorted(set(_LONG) - {"PENDING", "HELD"})


def hostlist(names: Iterable[str]) -> str:
    """Slurm's compressed host list: node-01,node-02,node-03,gpu-7 -> ``gpu-7,node-[01-03]``
    (``services/domain/hostlist.py``'s ``compress``, the one used everywhere)."""
    return compress(names)


def squeue_duration(seconds: float | None) -> str:
    """squeue's times: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    return "UNLIMITED" if seconds is None else duration(int(seconds))  # whole seconds, cut as squeue does


def stamp(ts: float | None, none: str = "Unknown") -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) if ts else none


def nodes_of(row: dict[str, Any]) -> list[str]:
    return [a["node"] for a in row.get("allocation") or []]


def used_s(row: dict[str, Any], now: float) -> float:
    if not row.get("started_ts"):
        return 0.0
    end = row.get("ended_ts") if row["state"] not in ("RUNNING", "SCHEDULED") else None
    return (end or now) - row["started_ts"]

