"""Telling an elastic job its new size (``JobResized``): a file of variables, then a signal.

An elastic job (``--nodes MIN-MAX``) starts with its world size in its environment
(``HORIZON_WORLD_SIZE``, ``SLURM_NNODES``, ``SLURM_JOB_NUM_NODES``, ``SLURM_JOB_NODELIST``, ...) and
the path ``$HORIZON_RESIZE_FILE`` (in the attempt's directory on its first node). When it grows or
shrinks, the agent of its first node

1. writes that file anew (a temporary file renamed over it, so a reader never sees half of it):
   one ``export NAME='value'`` line per variable of ``RESIZE_VARIABLES``, with the new values and
   ``HORIZON_RESIZE_COUNT`` (1 for the first resize of the attempt, then 2, ...), so that a shell
   script runs ``. "$HORIZON_RESIZE_FILE"`` and a program reads the ``NAME=value`` pairs (Slurm
   writes a script to source after a resize too, ``slurm_job_<id>_resize.sh``);
2. sends ``SIGWINCH`` to the job's main process (its batch script or command), as the checkpoint
   signal goes: SIGWINCH because its default action is to do nothing, so a job that does not listen
   for resizes keeps running (SIGUSR1/SIGUSR2 would end it).

New ``srun`` steps are laid out over the new allocation at once; a step's tasks on nodes given back
are stopped (SIGTERM, SIGKILL after the grace period). A simulated job has no file and no process.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["RESIZE_SIGNAL", "RESIZE_VARIABLES", "world_of", "write_resize_file", "read_resize_file", "told"]

RESIZE_SIGNAL = signal.SIGWINCH
RESIZE_VARIABLES = ("HORIZON_WORLD_SIZE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NODELIST",
                    "SLURM_NODELIST", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE",
                    "SLURM_JOB_CPUS_PER_NODE")


def world_of(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``RESIZE_VARIABLES`` from a job's environment (``job_environment`` on its new
    allocation)."""
    return {name: env[name] for name in RESIZE_VARIABLES if name in env}


def write_resize_file(path: Path, env: Mapping[str, str], count: int) -> None:
    """Write the sourceable file (atomically: a temporary file renamed over ``path``)."""
    lines = [f"export {name}={shlex.quote(value)}\n" for name, value in env.items()]
    lines.append(f"export HORIZON_RESIZE_COUNT={count}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".resize-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_resize_file(path: Path) -> tuple[dict[str, str], int]:
    """What a resize file says (its variables, its ``HORIZON_RESIZE_COUNT``); ({}, 0) when there is none."""
    try:
        text = path.read_text()
    except OSError:
        return {}, 0
    env: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            env[name] = value
    count = env.pop("HORIZON_RESIZE_COUNT", "0")
    return env, int(count) if count.isdigit() else 0


def told(start_env: Mapping[str, str], path: Path | None) -> tuple[dict[str, str], int]:
    """The world the job was last told (its resize file, else its start environment) and how many resizes
    it was told: an agent that restarts tells it again only when the log's allocation differs, and
    counts on from there."""
    env, count = read_resize_file(path) if path is not None else ({}, 0)
    return (env, count) if env else (world_of(start_env), 0)
