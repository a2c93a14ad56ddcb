"""Slurm's ``--signal=[B:]SIG[@TIME]`` on a node: the job's signal, ``TIME`` seconds before its time limit.

The job's ``limit_signal`` (``c.LimitSignal``) names the signal, how long before the limit
(``before_s``) and to whom, as Slurm does:

* ``batch_only`` (Slurm's ``B:``): the job's main process alone (the batch shell a script runs in,
  or whatever it ``exec``-ed), which must trap the signal and pass it on if its children need it;
* otherwise every other process of the job, and not the main process: Slurm signals the job's
  steps and not the batch shell, whose default action for most signals would end the job. Here
  "the job's processes" are those of its process group and, where the agent confines jobs in a
  cgroup, those of its cgroup (which also holds what left the group).

The limit counts from the process's start, as the agent's own enforcement does
(``services/nodes/agent/app.py``); the signal is sent once per attempt. A job whose limit is shorter
than ``before_s`` gets it as soon as it starts. A simulated job has no process: nothing is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal as signal_module
from collections.abc import Iterable
from pathlib import Path

from events import catalogue as c
from services.nodes.backends.protocol import Signallable

__all__ = ["before_limit", "deliver", "group_members"]

log = logging.getLogger("horizon.agent")



def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose process group is ``pgid`` (read from ``/proc/<pid>/stat``)."""
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid):
            out.append(int(entry.name))
    return sorted(out)


def deliver(main_pid: int, number: int, batch_only: bool, cgroup_pids: Iterable[int] = ()) -> int:
    """Signal the job whose main process is ``main_pid`` (its process group's leader): that process
    alone, or every process of its group and cgroup but it. Returns how many were signalled."""
    if batch_only:
        targets = [main_pid]
    else:
        targets = sorted((set(group_members(main_pid)) | set(cgroup_pids)) - {main_pid})
    sent = 0
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, number)
            sent += 1
    return sent


def _number(name: str) -> int | None:
    """This kernel's number for a name submission normalised (``USR1``; a real-time signal stays a number)."""
    if name.isdigit():
        return int(name)
    try:
        return int(signal_module.Signals[f"SIG{name}"])
    except KeyError:
        return None


async def before_limit(execution: object, signal: c.LimitSignal, limit_s: float, elapsed_s: float) -> None:
    """Wait until ``signal.before_s`` seconds before ``limit_s`` (``elapsed_s`` of it are gone), then
    send it. Cancelled when the attempt ends first."""
    number = _number(signal.signal)
    if number is None or not isinstance(execution, Signallable):
        return
    await asyncio.sleep(max(0.0, limit_s - signal.before_s - elapsed_s))
    sent = execution.signal_job(number, signal.batch_only)
    log.info("sent SIG%s to %d process(es) of the job, %g s before its time limit (--signal)",
             signal.signal, sent, signal.before_s)
