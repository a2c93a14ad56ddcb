"""Jobs and steps as ``scontrol show`` prints them (Slurm's ``Key=Value`` output), and where it reads them:
the node's agent over the attempt's socket inside a job, the read model outside.

The command (its words, usage errors and exit codes) is ``services/front/cli/scontrol.py``.
"""

from __future__ import annotations

import asyncio
import json
import pwd
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from events.resources import format_memory
from services.domain.hostlist import compress
from services.domain.licenses import licenses_text
from services.domain.steps import counts_text
from services.domain.queue.waiting import slurm_reason
from services.front.client.reasons import summary

__all__ = ["SOCKET_ENV", "show_job_text", "show_step_text", "ask_agent", "job_from_log", "duration_text", "stamp_text",
           "user_with_uid", "slurm_job_reason", "show_array_text", "array_from_log", "show_licenses_text",
           "licenses_from_log"]

SOCKET_ENV = "HORIZON_STEP_SOCKET"
_STATE = {"PENDING": "PENDING", "HELD": "PENDING", "SCHEDULED": "CONFIGURING", "RUNNING": "RUNNING",
          "SUCCEEDED": "COMPLETED", "FAILED": "FAILED", "PREEMPTED": "PREEMPTED", "CANCELLED": "CANCELLED",
          "REJECTED": "FAILED", "UNSCHEDULABLE": "FAILED", "DEPENDENCY_NEVER_SATISFIED": "CANCELLED",
          "OUT_OF_MEMORY": "OUT_OF_MEMORY"}



def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "UNLIMITED"
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def stamp_text(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) if ts else "Unknown"


def user_with_uid(user: str) -> str:
    try:
        return f"{user}({pwd.getpwnam(user).pw_uid})"
    except (KeyError, TypeError):
        return user or "N/A"


def show_job_text(row: Mapping[str, Any], spec: Mapping[str, Any] | None, now: float, oneliner: bool = False,
                  array_tasks: str | None = None) -> str:
    """A job as ``scontrol show job`` prints it, from a jobs read-model row (and its spec, if known);
    ``array_tasks``: the indices of an array's pending tasks it stands for (``ArrayTaskId=2-5%1``)."""
    spec = spec or {}
    allocation = row.get("allocation") or []
    nodes = [a["node"] for a in allocation]
    # the nodes it holds (an elastic gang's change); waiting, its count, or an elastic gang's range MIN-MAX
    nnodes = len(nodes) if nodes else (row.get("nodes") or spec.get("nodes") or 1)
    num_nodes = f"{spec['min_nodes']}-{nnodes}" if spec.get("min_nodes") and not nodes else str(nnodes)
    per_node = row.get("tasks_per_node") or spec.get("tasks_per_node") or 1
    cpus_milli = row.get("cpus_milli") or spec.get("cpus_milli") or 1000
    ntasks = spec.get("ntasks") or nnodes * per_node  # -N 3 -n 7: 7 of the 9 slots
    state = _STATE.get(row["state"], row["state"])
    if row["state"] == "FAILED" and str(row.get("reason") or "").startswith("time limit"):
        state = "TIMEOUT"
    started, ended = row.get("started_ts"), row.get("ended_ts")
    live = row["state"] in ("SCHEDULED", "RUNNING")
    run_time = ((now if live or not ended else ended) - started) if started else 0
    code = row.get("exit_code")
    exit_code = "0:0" if code is None else (f"0:{-code}" if code < 0 else f"{code}:0")
    gpus = row.get("gpus") or 0
    memory = (row.get("memory_bytes") or spec.get("memory_bytes") or 0) * per_node
    reason = slurm_job_reason(row, state)
    cpus_per_node = [max(1, -(-(a.get("cpus_milli") or cpus_milli * per_node) // 1000)) for a in allocation]
    cwd = spec.get("cwd") or ""
    stdout = row.get("stdout") or ""
    fields = [
        [f"JobId={_number(row, spec)}", f"JobName={row.get('name') or spec.get('name') or ''}"],
        [f"UserId={user_with_uid(row.get('user') or spec.get('user') or '')}", f"Account={row.get('account') or ''}",
         f"QOS={spec.get('qos') or 'normal'}", f"Nice={spec.get('nice') or 0}"],
        [f"JobState={state}", f"Reason={reason}", f"Dependency={_deps(spec) or '(null)'}", *_why(row)],
        [f"Restarts={max(0, (row.get('attempt') or 1) - 1)}", "BatchFlag=1", f"ExitCode={exit_code}"],
        [f"RunTime={duration_text(run_time)}", f"TimeLimit={duration_text(row.get('time_limit_s'))}"],
        [f"SubmitTime={stamp_text(row.get('submitted_ts'))}"],
        [f"StartTime={stamp_text(started)}", f"EndTime={stamp_text(ended) if ended and not live else 'Unknown'}"],
        [f"Partition={spec.get('partition') or spec.get('profile') or 'default'}"],
        [f"NodeList={compress(nodes) if nodes else '(null)'}"],
        [f"BatchHost={nodes[0] if nodes else '(null)'}"],
        [f"NumNodes={num_nodes}", f"NumCPUs={-(-cpus_milli * ntasks // 1000)}", f"NumTasks={ntasks}",
         f"CPUs/Task={cpus_milli / 1000:g}"],
        [f"TRES=cpu={-(-cpus_milli * ntasks // 1000)},mem={format_memory(memory * nnodes).replace(' ', '')},"
         f"node={nnodes}" + (f",gres/gpu={gpus}" if gpus else "")],
        [f"TasksPerNode={counts_text([max(1, a.get('tasks') or per_node) for a in allocation]) if allocation else per_node}",
         f"CPUsPerNode={counts_text(cpus_per_node) if cpus_per_node else '(null)'}"],
        [f"MinMemoryNode={format_memory(memory).replace(' ', '')}"],
        [f"Licenses={licenses_text(spec.get('licenses') or {}) or '(null)'}"],
        [f"WorkDir={cwd or '(null)'}"],
        [f"StdErr={row.get('stderr') or stdout or '(null)'}", "StdIn=/dev/null", f"StdOut={stdout or '(null)'}"],
    ]
    if spec.get("array") is not None and spec.get("array_index") is not None:
        fields[0][1:1] = [f"ArrayJobId={spec.get('array_number') or spec['array']}",
                          f"ArrayTaskId={array_tasks or spec['array_index']}"]
    if oneliner:
        return " ".join(item for line in fields for item in line)
    return "\n".join(("   " if i else "") + " ".join(line) for i, line in enumerate(fields))


def _number(row: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """The job's own number, Slurm's job id (an array task's own, not ``4213_7``), else its id."""
    return str(row.get("number") or spec.get("number") or row["job_id"])


# Slurm's reason of a job that ended (job_state_reason's FAIL_* codes), by the state scontrol shows
_ENDED_REASONS = {"TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeDown", "OUT_OF_MEMORY": "OutOfMemory"}


def slurm_job_reason(row: Mapping[str, Any], state: str) -> str:
    """``Reason=`` as Slurm's scontrol prints it: a waiting job's reason code (``Resources``,
    ``Priority``, ``Dependency``, ``JobHeldUser``, ...: the queue's ``why_code``,
    ``services/domain/queue/waiting.py``), an ended job's failure (``NonZeroExitCode``, ``TimeLimit``,
    ...), else ``None``."""
    if row["state"] in ("PENDING", "HELD"):
        kind = row.get("why_kind") or ("held" if row["state"] == "HELD" else "")
        return row.get("why_code") or slurm_reason(kind)
    if row["state"] == "DEPENDENCY_NEVER_SATISFIED":
        return "DependencyNeverSatisfied"
    if state == "FAILED" and row.get("exit_code"):
        return "NonZeroExitCode"
    return _ENDED_REASONS.get(state, "None")


def _why(row: Mapping[str, Any]) -> list[str]:
    """A waiting job's sentence (``horizon queue --why``'s) after Slurm's fields, spaces as ``_`` as
    Slurm writes a reason's text, so that ``Key=Value`` readers split it as one."""
    why = summary(row.get("why")) if row["state"] in ("PENDING", "HELD") else ""
    return [f"Why={'_'.join(why.split())}"] if why else []


def show_array_text(tasks: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]], now: float,
                    oneliner: bool = False) -> str:
    """An array as ``scontrol show job ARRAY`` prints it: each task that has started or ended, and its
    pending tasks as one record (``ArrayTaskId=2-5%1``, the first of them its ``JobId``), records in
    index order with a blank line between (one per line with ``-o``)."""
    from services.front.slurm.squeue_view import array_ranges

    records: list[str] = []
    pending = [(row, spec) for row, spec in tasks if row["state"] == "PENDING" and spec is not None]
    for row, spec in tasks:
        if pending and row is pending[0][0]:
            indices = sorted(int(s["array_index"]) for _, s in pending if s.get("array_index") is not None)
            limit = spec.get("array_max_running") if spec else 0
            ranges = array_ranges(indices) + (f"%{limit}" if limit else "")  # squeue's form too
            records.append(show_job_text(row, spec, now, oneliner, array_tasks=ranges))
        elif not any(row is r for r, _ in pending):
            records.append(show_job_text(row, spec, now, oneliner))
    return ("\n" if oneliner else "\n\n").join(records)


def _deps(spec: Mapping[str, Any]) -> str:
    kinds = {"after-ok": "afterok", "after-any": "afterany", "after-not-ok": "afternotok", "after": "after"}
    return ",".join(f"{kinds.get(d.get('kind'), d.get('kind'))}:{d.get('job_id')}" for d in spec.get("dependencies") or ())


def show_step_text(row: Mapping[str, Any], s: Mapping[str, Any], now: float) -> str:
    """A step as ``scontrol show step`` prints it, from the read model's step row ``s`` of the job ``row``."""
    end = s.get("ended_ts")
    state = s.get("state") or "RUNNING"
    nodes = s.get("nodes") or []
    return (f"StepId={_number(row, row.get('spec') or {})}.{s['step']} UserId={user_with_uid(row.get('user') or '')} "
            f"StartTime={stamp_text(s.get('started_ts'))} TimeLimit=UNLIMITED\n"
            f"   State={state} Partition={row.get('partition') or '(null)'} "
            f"NodeList={compress(nodes) if nodes else '(null)'}\n"
            f"   Nodes={len(nodes)} Tasks={s.get('tasks')} Name={s.get('name') or ''}\n"
            f"   ExitCode={s.get('exit_code') or 0}:{s.get('signal') or 0} "
            f"RunTime={duration_text((end or now) - (s.get('started_ts') or now))}")


def ask_agent(path: str, job_id: str | None) -> dict[str, Any]:
    """The node's agent's answer about a job, over the attempt's socket (``$HORIZON_STEP_SOCKET``)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(json.dumps({"op": "job", "job_id": job_id}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data) if data else {"error": "the node's agent did not answer"}


def job_from_log(url: str, job_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """(row, spec, steps) of a job from the read model and its JobAccepted (outside a job), over ``url``."""
    import msgspec

    from services.front.client.client import query, session
    from services.front.client.job_numbers import resolve_id
    from services.front.slurm.squeue_format import accepted_specs


    async def go() -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
        async with session(url) as nc:
            named = await resolve_id(nc, job_id)  # 4213, 4213_7: the id it names
            body = await query(nc, "job", {"job_id": named})
            row = body.get("job")
            if row is None:
                return None, None, []
            for event in body.get("events") or []:
                detail = event.get("detail") or {}
                if event["type"] == "JobStarted" and detail.get("attempt") == row.get("attempt"):
                    row["stdout"], row["stderr"] = detail.get("stdout"), detail.get("stderr")
            specs = await accepted_specs(nc, [row["job_id"]])
            spec = specs.get(row["job_id"])
            await _waiting_of(nc, [row])
            return row, msgspec.to_builtins(spec) if spec is not None else None, body.get("steps") or []

    return asyncio.run(go())


async def _waiting_of(nc: Any, rows: Sequence[dict[str, Any]]) -> None:
    """A waiting job's reason from the scheduler's queue (its kind, sentence and Slurm's code) into
    its jobs read-model row, which has only the last reason an event gave."""
    from services.front.client.client import query_all

    waiting = [row for row in rows if row["state"] in ("PENDING", "HELD")]
    if not waiting:
        return
    body = await query_all(nc, "queue", {"job_id": [row["job_id"] for row in waiting]}, "jobs")
    found = {queued["job_id"]: queued for queued in body["jobs"]}
    for row in waiting:
        queued = found.get(row["job_id"]) or {}
        row.update({k: queued[k] for k in ("why", "why_kind", "why_code") if queued.get(k)})


def array_from_log(url: str, job_id: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """The tasks of the array ``job_id`` names (its id, or its number: its first task's), each (row, spec),
    in index order; none when it names no array."""
    import msgspec

    from services.front.client.client import session
    from services.front.client.job_numbers import resolve_id
    from services.front.client.job_queries import array_tasks
    from services.front.slurm.squeue_format import accepted_specs

    async def go() -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        async with session(url) as nc:
            named = await resolve_id(nc, job_id)  # 4213: the array numbered so
            rows = await array_tasks(nc, named)
            if not rows:
                return []
            specs = await accepted_specs(nc, [row["job_id"] for row in rows])
            await _waiting_of(nc, rows)
            return [(row, msgspec.to_builtins(specs[row["job_id"]]) if row["job_id"] in specs else None)
                    for row in rows]

    return asyncio.run(go())


def show_licenses_text(rows: Sequence[Mapping[str, Any]], name: str | None = None, oneliner: bool = False) -> str:
    """The licenses as ``scontrol show lic [NAME]`` prints them (``LicenseName=matlab`` then ``Total=3
    Used=2 Free=1 Reserved=0 Remote=no``, by name; one line each with ``-o``); Slurm's sentence when none
    is defined. A name not defined is the caller's error to tell."""
    if not rows:
        return "No licenses configured in Slurm."
    sep = " " if oneliner else "\n    "
    return "\n".join(f"LicenseName={row['name']}{sep}Total={row['total']} Used={row['used']} Free={row['free']} "
                     f"Reserved={row.get('reserved', 0)} Remote={'yes' if row.get('remote') else 'no'}"
                     for row in sorted(rows, key=lambda r: str(r["name"])) if name is None or row["name"] == name)


def licenses_from_log(url: str) -> list[dict[str, Any]]:
    """Every license the scheduler's read model knows (``horizon.query.licenses``), over ``url``."""
    from services.front.client.client import query_all, session

    async def go() -> list[dict[str, Any]]:
        async with session(url) as nc:
            body = await query_all(nc, "licenses", {}, "licenses")
            return list(body["licenses"])

    return asyncio.run(go())
