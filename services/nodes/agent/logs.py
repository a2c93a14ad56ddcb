"""The agent serves its jobs' output files over the bus: what ``horizon logs`` reads, from any machine.

Request/reply on core NATS (not the log), one subject per node:

* ``horizon.logs.<node>``: an operator's request, about any job on the node;
* ``horizon.logs.<node>.<tenant>``: a tenant's, answered only about that
  tenant's jobs (a server with accounts exports this subject to the tenant
  alone, as it does the tenant's queries: ``deploy/nats/auth.conf``).

A request is JSON ``{"job_id", "attempt", "stream", "offset", "limit"}``:
``attempt`` 0 or absent is the latest one this node ran, ``stream`` is
``stdout`` or ``stderr``, ``offset`` counts bytes from the start (negative:
from the end, for a tail), ``limit`` caps the bytes (at most ``MAX_CHUNK``,
so a reply fits a NATS message). The reply is JSON ``{"job_id", "attempt",
"path", "size", "offset", "data"}`` with ``data`` base64-encoded (output is
bytes, not always text), or ``{"error": ...}``. ``size`` is the file's size
when read: ``horizon logs -f`` asks again from ``offset + len(data)``.

The agent finds an attempt by its directory (``services/nodes/backends/process/attempt_supervisor.py``'s
``plan.json`` names the files, wherever ``--output`` put them). An executor whose jobs' output is not
in files here (``ServesOutput``: the Kubernetes backend's pods, whose output is their container's log)
answers the same requests itself.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from events.codec import decode_json
from events.subjects import KEY_SEPARATOR, job_key
from services.nodes.backends.process.identity import owned_by

__all__ = ["LogServer", "logs_subject", "read_chunk", "MAX_CHUNK"]

log = logging.getLogger("horizon.agent.logs")

MAX_CHUNK = 512 * 1024
STREAMS = ("stdout", "stderr")


def logs_subject(node: str, tenant: str | None = None) -> str:
    return f"horizon.logs.{node}" if tenant is None else f"horizon.logs.{node}.{tenant}"


def _latest_attempt(job_dir: Path) -> int:
    attempts = [int(p.name) for p in job_dir.iterdir() if p.name.isdigit()] if job_dir.is_dir() else []
    return max(attempts, default=0)


def read_chunk(state_dir: Path, node: str, request: dict[str, Any], tenant: str | None = None) -> dict[str, Any]:
    """The answer to one request (see the module doc), for attempts kept under ``state_dir``.

    A tenant asking about a job that is not its own gets, word for word, the answer for a job that
    does not exist: ``node N has no output of job J`` (with `` attempt A`` when it asked for
    attempt A), built from its request alone, before anything kept on the node is looked at. It
    used to name the attempt found on disk for a missing plan and not for another tenant's job, so
    the answers told which ids another tenant had used (issue 31).
    """
    job_id = str(request.get("job_id", ""))
    stream = request.get("stream", "stdout")
    if stream not in STREAMS:
        return {"error": f"stream must be one of {', '.join(STREAMS)}"}
    if not job_id or "/" in job_id or job_id.startswith("."):
        return {"error": f"{job_id!r} is not a job id"}
    asked = int(request.get("attempt") or 0)
    nothing = {"error": f"node {node} has no output of job {job_id}" + (f" attempt {asked}" if asked else "")}
    # A tenant names its job by the id it gave; the attempts are kept under the log's key for it,
    # <tenant>:<id>, when the job came through the intake (events/subjects.py job_key), else (a job
    # from before the intake) under the id itself. An id with ":" is no tenant's own.
    if tenant is not None and KEY_SEPARATOR in job_id:
        return nothing
    kept = job_key(tenant, job_id) if tenant is not None and (state_dir / job_key(tenant, job_id)).is_dir() else job_id
    attempt = asked or _latest_attempt(state_dir / kept)
    directory = state_dir / kept / str(attempt)
    try:
        plan = decode_json((directory / "plan.json").read_text())
    except (OSError, ValueError):
        return nothing
    if not isinstance(plan, dict) or plan.get("node") != node or (tenant is not None and plan.get("tenant") != tenant):
        return nothing
    path = plan[stream]
    limit = max(0, min(int(request.get("limit") or MAX_CHUNK), MAX_CHUNK))
    offset = int(request.get("offset") or 0)
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            fh.seek(start)
            data = fh.read(limit)
    except OSError as exc:
        return {"error": f"cannot read {path} on node {node}: {exc.strerror}"}
    return {"job_id": job_id, "attempt": attempt, "path": path, "size": size, "offset": start,
            "data": base64.b64encode(data).decode()}


Reader = Callable[[str, dict[str, Any], "str | None"], Awaitable[dict[str, Any]]]


class LogServer:
    """Answers ``horizon.logs.<node>[.<tenant>]`` for the agent's nodes from ``state_dir``, or with
    ``read(node, request, tenant)`` (an executor that serves its jobs' output itself)."""

    def __init__(self, nc: Any, state_dir: Path | None, nodes: list[str], read: Reader | None = None) -> None:
        self.nc = nc
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.nodes = nodes
        self.read = read
        self._subs: list[Any] = []

    async def start(self) -> None:
        for node in self.nodes:
            self._subs.append(await self.nc.subscribe(logs_subject(node), cb=self._handler(node, False)))
            self._subs.append(await self.nc.subscribe(logs_subject(node, "*"), cb=self._handler(node, True)))

    def _handler(self, node: str, scoped: bool) -> Any:
        async def on_request(msg: Any) -> None:
            tenant = msg.subject.rsplit(".", 1)[1] if scoped else None
            try:
                request = decode_json(msg.data)  # a tenant's, as sent: too deep is a ValueError too
                if not isinstance(request, dict):
                    raise ValueError("not a JSON object")
                if self.read is not None:
                    answer = await self.read(node, request, tenant)
                else:
                    assert self.state_dir is not None
                    answer = read_chunk(self.state_dir, node, request, tenant)
            except (ValueError, TypeError, KeyError) as exc:
                answer = {"error": f"bad request: {exc}"}
            try:
                await msg.respond(json.dumps(answer).encode())
            except Exception as exc:  # noqa: BLE001 - the asker left; nothing to do
                log.debug("could not answer a logs request: %s", exc)

        return on_request

    async def stop(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection is closing anyway
                pass
        self._subs.clear()
