"""The door of an attempt: the Unix socket its job's ``srun`` and ``scontrol`` ask their agent on.

The agent opens one per attempt before the attempt starts (``$HORIZON_STEP_SOCKET`` names it), in a
folder beside the jobs' own (``socket_dir``), its job's user's alone. Whoever connects must be one of
the attempt's processes (the kernel's word on its pid and uid; in the attempt's cgroup, or without
cgroups its session): another job that found the path is refused. A connection sends one JSON line:
``run`` (a step, carried out by ``StepService``, ``services/nodes/agent/steps.py``) or ``job``
(``scontrol show job`` inside a job, answered here from the agent's view of the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from events.subjects import tenant_view
from services.domain.job_numbers import number_scope, parse_reference
from services.nodes.agent.core import AgentCore
from services.nodes.backends.process import attempt_supervisor as shim
from services.nodes.backends.process.identity import Identity, identity_for
from services.nodes.backends.protocol import ProcessHost

__all__ = ["StepDoors", "socket_dir", "not_for_others", "answer", "SOCKET_ENV", "MAX_LINE"]

log = logging.getLogger("horizon.agent.steps")

SOCKET_ENV = "HORIZON_STEP_SOCKET"
MAX_LINE = 64 * 1024 * 1024  # srun's request (its environment included)

# srun's "run": the attempt, its request, and the connection the step's output and end go back on
RunStep = Callable[[str, int, dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def socket_dir(spool_dir: Path) -> Path:
    """Where the attempts' sockets are: beside the jobs' own folders (never in the data dir, which no job
    may enter) if the path is short enough for a socket (108 bytes on Linux, with a 24-character name),
    else a directory of the agent's in /tmp."""
    own = spool_dir / ".steps"
    if len(str(own.resolve())) <= 80:
        return own
    digest = hashlib.sha1(str(spool_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"horizon-steps-{os.getuid()}-{digest}"


def not_for_others(*paths: Path) -> Path | None:
    """The first of ``paths`` (or of their folders) that a user other than its owner cannot reach."""
    for path in paths:
        for part in [*reversed(path.parents), path]:
            try:
                mode = part.stat().st_mode
            except OSError:
                return part
            if not mode & 0o001 or (part == path and not mode & 0o004):
                return part
    return None


def _peer(writer: asyncio.StreamWriter) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED: the kernel's word)."""
    sock = writer.get_extra_info("socket")
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid




class StepDoors:
    """The sockets of the attempts this agent launched (see the module doc). ``run_step`` carries out
    a ``run`` request."""

    def __init__(self, directory: Path, core: AgentCore, executor: ProcessHost, run_step: RunStep) -> None:
        self.directory = directory
        self.core = core
        self.executor = executor
        self.run_step = run_step
        self.servers: dict[tuple[str, int], Any] = {}  # asyncio servers, by attempt

    def socket_path(self, job_id: str, attempt: int) -> str:
        digest = hashlib.sha1(f"{job_id}\0{attempt}".encode()).hexdigest()[:20]
        return str(self.directory / f"{digest}.sock")

    async def open(self, job_id: str, attempt: int) -> None:
        """Open the attempt's socket (before the attempt starts, or again for an adopted one)."""
        key = (job_id, attempt)
        if key in self.servers:
            return
        path = self.socket_path(job_id, attempt)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(job_id, attempt, reader, writer)

        server = await asyncio.start_unix_server(serve, path=path, limit=MAX_LINE)
        owner = self._owner(job_id, attempt)
        if owner is not None and os.geteuid() == 0:
            os.chown(path, owner.uid, owner.gid)  # the job's user alone may connect
        os.chmod(path, 0o600)
        self.servers[key] = server

    async def close(self, job_id: str, attempt: int) -> None:
        """Close the attempt's socket."""
        server = self.servers.pop((job_id, attempt), None)
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path(job_id, attempt))

    def _owner(self, job_id: str, attempt: int) -> Identity | None:
        """Who the attempt runs as (None: as the agent): its plan's ``run_as`` once planned, else what its
        spec resolves to here (the door opens before the attempt starts)."""
        try:
            plan = json.loads((self.executor.attempt_dir(job_id, attempt) / shim.PLAN).read_text())
            return Identity.from_json(plan.get("run_as"))
        except (OSError, ValueError):
            pass
        job = self.core.jobs.get(job_id)
        if job is None or job.spec is None:
            return None
        return identity_for(job.spec.uid, job.spec.gid, job.spec.groups, job.spec.user)

    def _of_attempt(self, job_id: str, attempt: int, pid: int, uid: int) -> str | None:
        """Why the process ``pid`` (``uid``) may not speak for the attempt; None when it may: it runs as the
        attempt's user and is in the attempt's cgroup (without cgroups: in the job's session). Another
        job's process that found this socket (a path in an environment variable is no secret) is refused."""
        owner = self._owner(job_id, attempt)
        if uid not in {owner.uid if owner is not None else os.geteuid(), 0}:
            return f"uid {uid} is not the job's user"
        hierarchy = self.executor.hierarchy
        if hierarchy.usable:
            job = self.core.jobs.get(job_id)
            node = job.allocations[0].node if job is not None and job.allocations else ""
            if node and pid in hierarchy.cgroup(node, job_id, attempt).pids():
                return None
            return f"process {pid} is not in the job's cgroup"
        known = shim.read_pid_file(self.executor.attempt_dir(job_id, attempt) / shim.JOB_PID)
        with contextlib.suppress(OSError):
            if known is not None and os.getsid(pid) == known[0]:
                return None
        return f"process {pid} is not in the job's session"

    async def _serve(self, job_id: str, attempt: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            pid, uid = _peer(writer)
            line = await reader.readline()  # read first: the refusal is then an answer, not a broken pipe
            refused = self._of_attempt(job_id, attempt, pid, uid)
            if refused is not None:
                log.warning("step socket of %s attempt %d: refused a connection (%s)", job_id, attempt, refused)
                await answer(writer, {"error": f"this socket is another job's: {refused}"})
                return
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                await answer(writer, {"error": f"bad request: {exc}"})
                return
            op = request.get("op")
            if op == "run":
                await self.run_step(job_id, attempt, request, reader, writer)
            elif op == "job":
                await answer(writer, self.job_info(job_id, attempt, request.get("job_id")))
            else:
                await answer(writer, {"error": f"unknown op {op!r}; ops: run, job"})
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # noqa: BLE001 - one srun's trouble must not take the agent down
            log.exception("step request of %s attempt %d failed", job_id, attempt)
            with contextlib.suppress(Exception):
                await answer(writer, {"error": "the node's agent failed to run the step (see its log)"})
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    # ------------------------------------------------------------------ scontrol show job, inside a job

    def job_info(self, job_id: str, attempt: int, asked: Any = None) -> dict[str, Any]:
        """The job as ``scontrol show job`` inside it shows it: the agent's view of the log. Another job
        of the same tenant may be asked for by the id the tenant knows it by."""
        own = self.core.jobs.get(job_id)
        tenant = own.spec.tenant if own is not None and own.spec is not None else ""
        key = job_id
        if asked not in (None, ""):
            asked = str(asked)
            key = next((k for k in (f"{tenant}:{asked}", asked) if self.core.jobs.get(k) is not None), "")
            key = key or self._numbered(job_id, asked)
        job = self.core.jobs.get(key) if key else None
        if job is None or job.spec is None or job.spec.tenant != tenant:
            return {"error": f"Invalid job id specified: {asked}"}
        spec = job.spec
        row: dict[str, Any] = {
            "job_id": tenant_view(spec.tenant, job.job_id), "state": job.state.value, "attempt": job.attempt,
            "name": spec.name, "user": spec.user, "account": spec.account, "tenant": spec.tenant,
            "nodes": spec.nodes, "tasks_per_node": spec.tasks_per_node, "cpus_milli": spec.cpus_milli,
            "memory_bytes": spec.memory_bytes, "gpus": spec.total_gpus, "time_limit_s": spec.time_limit_s,
            "allocation": [msgspec.to_builtins(a) for a in job.allocations], "submitted_ts": job.accepted_ts or None,
            "started_ts": job.started_ts or None, "ended_ts": job.ended_ts or None, "reason": job.reason,
            "exit_code": job.exit_code, "spec": msgspec.to_builtins(spec),
        }
        if key == job_id:
            with contextlib.suppress(OSError, ValueError):
                plan = json.loads((self.executor.attempt_dir(job_id, attempt) / shim.PLAN).read_text())
                row["stdout"], row["stderr"] = plan["stdout"], plan["stderr"]
        return {"job": row}


    def _numbered(self, own: str, asked: str) -> str:
        """The job ``asked`` names by number (``4213``, ``4213_7``: services/domain/job_numbers.py) in the
        numbering scope of the job ``own``, among the jobs this agent knows; "" for none."""
        ref = parse_reference(asked)
        if ref is None:
            return ""
        scope = number_scope(own)
        for job in self.core.jobs.jobs.values():
            spec = job.spec
            if spec is None or number_scope(job.job_id) != scope:
                continue
            if (spec.number == ref.number if ref.index is None
                    else spec.array_number == ref.number and spec.array_index == ref.index):
                return job.job_id
        return ""


async def answer(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(json.dumps(message).encode() + b"\n")
    await writer.drain()
