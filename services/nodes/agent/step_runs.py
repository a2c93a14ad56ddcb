"""A job step as the agents hold it: ``StepRun``, a step the batch node's agent coordinates (its layout,
the tasks' exit codes, the line back to srun), and ``HeldShare``, a node's share of a step this agent
runs; and ``exported_env``, the tasks' environment from srun's (``--export``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.domain.steps import StepLayout
from services.nodes.agent.step_door import SOCKET_ENV
from services.nodes.backends.process.cgroups import JobCgroup
from services.nodes.backends.process.node_share import NodeShare, TaskSink

__all__ = ["StepRun", "HeldShare", "exported_env"]

# Set by srun for itself, or the batch node's own: never passed on to the tasks of a step.
_NOT_PASSED = (SOCKET_ENV, "HORIZON_CHECKPOINT_FILE")


@dataclass
class StepRun:
    """A step this agent coordinates (its job's batch node is here)."""

    job_id: str
    attempt: int
    step: int
    name: str
    layout: StepLayout
    writer: asyncio.StreamWriter
    kill_on_bad_exit: bool = False
    on_bad_exit: Callable[[int, int | None], Any] | None = None  # --kill-on-bad-exit: a task failed
    started: float = field(default_factory=time.time)
    codes: dict[int, int | None] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    local: list[NodeShare] = field(default_factory=list)
    remote: list[str] = field(default_factory=list)  # nodes whose agents run a share
    io: Any = None  # the subscription remote shares report on
    stopping: str = ""  # why it is being stopped
    timed_out: bool = False
    srun_gone: bool = False

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.job_id, self.attempt, self.step)

    async def send(self, message: dict[str, Any]) -> None:
        """A line to srun (dropped once srun is gone: the step then only finishes)."""
        if self.srun_gone:
            return
        async with self.lock:
            try:
                self.writer.write(json.dumps(message).encode() + b"\n")
                await self.writer.drain()
            except (ConnectionError, RuntimeError):
                self.srun_gone = True

    async def output(self, rank: int, fd: int, data: bytes) -> None:
        await self.send({"o": base64.b64encode(data).decode(), "r": rank, "f": fd})

    async def exited(self, rank: int, code: int | None, error: str = "") -> None:
        if rank in self.codes:
            return
        self.codes[rank] = code
        await self.send({"x": rank, "c": code, "e": error})
        if code != 0 and self.kill_on_bad_exit and self.on_bad_exit is not None and not self.stopping:
            self.on_bad_exit(rank, code)
        if len(self.codes) == self.layout.ntasks:
            self.done.set()


@dataclass
class HeldShare:
    """A node's share of a step, run by this agent (for itself or for another node's coordinator)."""

    job_id: str
    attempt: int
    step: int
    node: str
    share: NodeShare
    sink: TaskSink
    owned: JobCgroup | None = None  # a cgroup made for the steps on a node that is not the batch node


def exported_env(env: Mapping[str, Any], export: Any) -> dict[str, str]:
    """The tasks' environment from srun's, as ``--export`` says: ``ALL`` (the default) all of it,
    ``NONE`` only the ``SLURM_*`` variables, ``VAR,VAR=value,...`` those and the ``SLURM_*``."""
    own = {str(k): str(v) for k, v in env.items() if k not in _NOT_PASSED}
    if export in (None, "", "ALL"):
        return own
    out = {k: v for k, v in own.items() if k.startswith("SLURM_")}
    for item in str(export).split(","):
        name, eq, value = item.strip().partition("=")
        if not name or name.upper() in ("ALL", "NONE", "NIL"):
            if name.upper() == "ALL":
                out.update(own)
            continue
        if eq:
            out[name] = value
        elif name in own:
            out[name] = own[name]
    return out

