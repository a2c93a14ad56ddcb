"""``horizon logs JOB``: a job's output, from whichever node ran it.

The read model says where the attempt ran (``horizon.query.job``); the agent of
that node serves the files (``services/nodes/agent/logs.py``, ``horizon.logs.<node>``),
so this works from any machine that reaches NATS. ``-f`` follows the output
until the attempt ends, as ``tail -f`` would. An array's id prints each task's
output in turn, headed ``==> ID_N <==`` as ``tail`` heads several files.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from typing import Any

import click

from services.front.client.client import LogError, query, session
from services.front.client.job_queries import array_tasks
from services.front.client.job_numbers import resolve_id
from services.front.client.output import output_chunk
from services.front.cli.options import nats_option
from services.front.client.terminal import printable

__all__ = ["logs", "register"]

LIVE = ("SCHEDULED", "RUNNING")
FOLLOW_POLL_S = 0.5


def _where(body: dict[str, Any], job_id: str, attempt: int | None) -> tuple[int, str, str]:
    """(attempt, node, state of that attempt) for the attempt asked (default: the latest)."""
    row = body.get("job")
    if not row:
        raise click.ClickException(f"no job {job_id!r}")
    attempts = {a["attempt"]: a for a in body.get("attempts") or []}
    number = attempt if attempt is not None else row.get("attempt") or 0
    if number == 0 or number not in attempts:
        if attempt is not None:
            known = ", ".join(str(n) for n in sorted(attempts)) or "none yet"
            raise click.ClickException(f"job {job_id} has no attempt {attempt} (attempts: {known})")
        raise click.ClickException(f"job {job_id} has not run yet: it is {row['state']}"
                                   f"{' (' + row['reason'] + ')' if row.get('reason') else ''}")
    found = attempts[number]
    node = (found.get("node") or "").split(",")[0]
    if not node:
        raise click.ClickException(f"job {job_id} attempt {number} has no node")
    return number, node, found["outcome"]


async def _copy(nc: Any, out: Any, job_id: str, number: int, node: str, which: str, offset: int) -> int:
    """Write what the agent has of an attempt's stream from ``offset`` (negative: that many bytes
    before the end); the offset reached."""
    while True:
        answer = await output_chunk(nc, node, {"job_id": job_id, "attempt": number, "stream": which, "offset": offset})
        data = base64.b64decode(answer["data"])
        # The job's output is the job's data, written as it is, as `cat` would (a job that colours its
        # output shows coloured): bytes to the binary stream, which is not escaped. Only what this
        # command says itself goes through ``printable`` (services/front/client/terminal.py).
        out.write(data)
        out.flush()
        offset = answer["offset"] + len(data)
        if offset >= answer["size"]:
            return offset  # else more than one chunk is there already


@click.command()
@nats_option
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(min=1), default=None, help="Which attempt (default: the latest).")
@click.option("--err", "stderr", is_flag=True, help="Standard error instead of standard output.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new output until the attempt ends.")
@click.option("--tail", "tail_bytes", type=click.IntRange(min=1), default=None,
              help="Only the last N bytes (of each task's, for an array).")
def logs(nats_url: str, job_id: str, attempt: int | None, stderr: bool, follow: bool,
         tail_bytes: int | None) -> None:
    """Print a job's standard output (or --err) from the node that ran it; -f follows it. An array's id:
    each task's output in turn, headed by the task (==> ID_N <==)."""
    which = "stderr" if stderr else "stdout"
    out = sys.stdout.buffer

    async def go() -> None:
        nonlocal job_id
        async with session(nats_url) as nc:
            job_id = await resolve_id(nc, job_id)  # 4213, 4213_7: the id it names
            body = await query(nc, "job", {"job_id": job_id})
            if not body.get("job"):
                await _array(nc, out, job_id, attempt, which, follow, tail_bytes)
                return
            number, node, state = _where(body, job_id, attempt)
            offset = await _copy(nc, out, job_id, number, node, which, -tail_bytes if tail_bytes else 0)
            while follow and state in LIVE:
                await asyncio.sleep(FOLLOW_POLL_S)
                body = await query(nc, "job", {"job_id": job_id})
                state = next((a["outcome"] for a in body.get("attempts") or [] if a["attempt"] == number), state)
                offset = await _copy(nc, out, job_id, number, node, which, offset)

    try:
        asyncio.run(go())
    except LogError as exc:
        raise click.ClickException(str(exc)) from None


async def _array(nc: Any, out: Any, array_id: str, attempt: int | None, which: str, follow: bool,
                 tail_bytes: int | None) -> None:
    """Each task's output in index order, as ``tail`` heads files: ``==> ID_N <==``; a task that has
    not run (or whose node does not answer) says so under its head instead."""
    tasks = await array_tasks(nc, array_id)
    if not tasks:
        raise click.ClickException(f"no job or array {array_id!r}")
    if follow:
        raise click.UsageError(f"-f follows one job: give a task of {array_id} ({tasks[0]['job_id']}, ...)")
    for n, task in enumerate(tasks):
        task_id = task["job_id"]
        out.write(f"{chr(10) if n else ''}==> {printable(task_id)} <==\n".encode())
        out.flush()
        try:
            number, node, _ = _where(await query(nc, "job", {"job_id": task_id}), task_id, attempt)
            await _copy(nc, out, task_id, number, node, which, -tail_bytes if tail_bytes else 0)
        except (click.ClickException, LogError) as exc:
            said = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
            out.write(f"({printable(said)})\n".encode())
            out.flush()


def register(group: click.Group) -> None:
    group.add_command(logs)
