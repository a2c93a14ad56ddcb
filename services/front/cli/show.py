"""``horizon show JOB``: everything about one job, or about an array and its tasks.

One job (``horizon.query.job`` and the scheduler's ``horizon.query.priority``): its state, what it
asked and, for an elastic gang, what it holds now within its range; its priority factor by factor and
why it waits; its reason in full (tables show one line of it: ``services/front/client/reasons.py``); each
attempt, with the run time placement predicted for it when its profile predicts run times
(``JobScheduled.predicted_runtime_s``), its output files, a drain's plan and its job steps; and its
last events.

An array's id (``horizon submit --array``, not a job itself) shows the array: its tasks counted by
state and listed one per line (``horizon.query.jobs`` with ``array``); ``horizon show ID_N`` shows
one task.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import click

from events.resources import format_cpus, format_memory
from services.front.client.client import query, query_all, session
from services.front.client.job_queries import array_tasks
from services.front.client.job_numbers import resolve_id
from services.front.client.drain import drain_lines
from services.front.cli.options import nats_option
from services.front.client.reasons import summary
from services.domain.hostlist import compress
from services.domain.runtime_prediction import expected_run
from services.runtime.log import LogError

__all__ = ["show", "register"]

HOLDING = ("SCHEDULED", "RUNNING")


@click.command()
@nats_option
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
def show(nats_url: str, job_id: str, as_json: bool) -> None:
    """Everything about one job: state, resources, priority factor by factor, why it waits, its events.
    An array's id: the array and each task's state."""

    async def go() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        nonlocal job_id
        async with session(nats_url) as nc:
            job_id = await resolve_id(nc, job_id)  # 4213, 4213_7: the id it names
            job = await query_all(nc, "job", {"job_id": job_id}, "events")
            if not job.get("job"):
                return job, {}, await array_tasks(nc, job_id)
            try:
                prio = await query(nc, "priority", {"job_id": job_id})
            except LogError as exc:
                prio = {"error": str(exc)}
            return job, prio, []

    job, prio, tasks = asyncio.run(go())
    if tasks:
        if as_json:
            click.echo(json.dumps({"array": job_id, "tasks": tasks}))
        else:
            for line in _array_lines(job_id, tasks):
                click.echo(line)
        return
    if as_json:
        click.echo(json.dumps({"job": job, "priority": prio}))
        return
    row = job.get("job") or {}
    if not row:
        raise click.ClickException(f"no job or array {job_id!r}")
    for line in _job_lines(row, job, prio):
        click.echo(line)


def _array_lines(array_id: str, tasks: list[dict[str, Any]]) -> list[str]:
    """The array in a line, its tasks counted by state, then a line per task."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task["state"]] = counts.get(task["state"], 0) + 1
    first = tasks[0]
    out = [f"Array {array_id} ({first.get('name') or ''})  {len(tasks)} task(s): "
           + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())),
           f"  tenant {first.get('tenant')}  account {first.get('account')}  user {first.get('user') or '-'}  "
           f"class {first.get('priority_class')}",
           f"  each task: {_resources(first)}",
           "  tasks (horizon show ID_N for one, horizon logs " + array_id + " for their output):"]
    width = max(len(task["job_id"]) for task in tasks)
    for task in tasks:
        code = task.get("exit_code")
        out.append(f"    {task['job_id']:<{width}}  {task['state']:<10} {task.get('node') or '-'}"
                   f"{'  number ' + task['slurm_id'] if task.get('slurm_id') else ''}"
                   f"{'  exit ' + str(code) if code not in (None, 0) else ''}"
                   f"{'  ' + summary(task['reason']) if task.get('reason') else ''}")
    return out


def _resources(row: dict[str, Any]) -> str:
    """What it asks: nodes x tasks of CPUs, memory, GPUs; an elastic gang (``min_nodes``) that holds
    nodes says how many it holds now, within its range."""
    nodes, least = row.get("nodes") or 1, row.get("min_nodes") or 0
    gpus = row.get("gpus") or 0
    allocation = row.get("allocation") or []
    elastic = 0 < least < nodes
    nodes_text, gpus_text = f"{nodes} node(s)", f"{gpus} GPU(s)"
    if elastic:
        per_node = gpus // nodes if nodes else 0
        span = f"elastic {least}-{nodes} node(s)"
        gpu_span = f"{per_node * least}-{gpus}"
        if allocation and row.get("state") in HOLDING:
            held = sum(len(a.get("device_ids") or []) for a in allocation)
            nodes_text = f"{len(allocation)} node(s) now ({span})"
            gpus_text = f"{held} GPU(s) now ({gpu_span})" if gpus else gpus_text
        else:
            nodes_text = span
            gpus_text = f"{gpu_span} GPU(s)" if gpus else gpus_text
    return (f"{nodes_text} x {row.get('tasks_per_node', 1)} task(s) of {format_cpus(row.get('cpus_milli') or 0)} "
            f"CPUs, {format_memory(row.get('memory_bytes') or 0)}, {gpus_text}"
            f"{' ' + row['gpu_type'] if row.get('gpu_type') else ''}"
            f"{'  qos ' + row['qos'] if row.get('qos') else ''}{_limits(row)}")


def _signals(row: dict[str, Any]) -> str:
    """The signals it gets before a stop: its checkpoint signal (before a preemption or a drain's
    migration) and one before its time limit (--checkpoint-signal SIG@S, Slurm's --signal)."""
    parts = []
    if row.get("checkpoint_signal"):
        parts.append(f"checkpoint {row['checkpoint_signal']} (before a preemption or a migration)")
    limit = row.get("limit_signal")
    if limit:
        to = "its main process" if limit.get("batch_only") else "its steps"
        parts.append(f"{limit['signal']} to {to} {format(limit.get('before_s', 60), 'g')} s before its time limit")
    return "; ".join(parts)


def _job_lines(row: dict[str, Any], job: dict[str, Any], prio: dict[str, Any]) -> list[str]:
    number = f"  number {row['slurm_id']}" if row.get("slurm_id") else ""  # Slurm's job id (4213, 4213_7)
    out = [f"Job {row['job_id']} ({row.get('name') or ''})  state {row['state']}{number}",
           f"  tenant {row.get('tenant')}  account {row.get('account')}  user {row.get('user') or '-'}  "
           f"class {row.get('priority_class')}",
           f"  resources: {_resources(row)}"]
    signals = _signals(row)
    if signals:
        out.append(f"  signals: {signals}")
    if "error" not in prio:
        if prio.get("position"):
            out.append(f"  queue position {prio['position']} of {prio['queued']} ({prio['policy']})")
        if prio.get("priority") is not None:
            out.append(f"  priority {prio['priority']:.1f} = sum of weight x factor"
                       f"{' + boost ' + format(prio['account_boost'], 'g') if prio.get('account_boost') else ''}"
                       f"{' - nice ' + str(prio['nice']) if prio.get('nice') else ''}:")
            for f in prio.get("factors", []):
                out.append(f"    {f['factor']:<10} {f['value']:.4f} x {f['weight']:>9g} = {f['weighted']:10.1f}")
        if prio.get("why"):
            out.append(f"  waiting: {prio['why']}")
        for reason in prio.get("reasons", []):
            out.append(f"    {reason['nodes']:>5} nodes  {reason['filter']:<16} {reason['reason']}")
        if prio.get("reserved_at") is not None:
            out.append(f"  reserved on nodes {','.join(prio['reserved_nodes'])} at "
                       f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(prio['reserved_at']))}")
        if prio.get("deadline_ts"):
            out.append(f"  gives up (UNSCHEDULABLE) at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(prio['deadline_ts']))}")
        if prio.get("borrowed"):
            out.append("  runs on borrowed quota (may be reclaimed)")
    if row.get("reason") and row["state"] not in ("PENDING", "HELD"):
        out.extend(_whole("  reason: ", row["reason"]))
    events = job.get("events") or []
    for a in job.get("attempts") or []:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["started_ts"] or a["scheduled_ts"] or 0))
        extra = " backfilled" if a["backfilled"] else ""
        extra += " borrowed" if a["borrowed"] else ""
        head = (f"  attempt {a['attempt']}: {a['outcome']} on {a['node'] or '-'} from {when}{extra}"
                f"{' exit ' + str(a['exit_code']) if a['exit_code'] not in (None, 0) else ''}")
        out.extend(_whole(head + ": ", a["reason"]) if a["reason"] else [head])
        out.extend(_prediction_lines(events, a))
        out.extend(_attempt_files(events, a["attempt"], row["job_id"]))
        out.extend(drain_lines(events, a["attempt"]))
        out.extend(_step_lines(job.get("steps") or [], a["attempt"], row.get("slurm_id") or row["job_id"]))
    if events:
        out.append("  events:")
        for ev in events[-20:]:
            out.append(f"    {ev['seq']:>8}  {time.strftime('%H:%M:%S', time.localtime(ev['ts']))}  {ev['type']}")
    return out


def _whole(head: str, text: str) -> list[str]:
    """A reason in full: its first line after ``head``, the others under it, indented."""
    lines = text.splitlines() or [""]
    return [head + lines[0], *(" " * 6 + "| " + line for line in lines[1:])]


def _prediction_lines(events: list[dict[str, Any]], attempt: dict[str, Any]) -> list[str]:
    """The run time placement predicted for an attempt (a profile with ``--runtime-estimate predicted``:
    its user's last run times, at most its limit) and when that makes it end."""
    for ev in events:
        detail = ev.get("detail") or {}
        if ev["type"] != "JobScheduled" or detail.get("attempt") != attempt["attempt"]:
            continue
        predicted = detail.get("predicted_runtime_s")
        if predicted is None:
            return []
        limit = detail.get("time_limit_s") or predicted
        line = f"    predicted run time {_duration(predicted)} of its {_duration(limit)} limit (its user's last runs)"
        start = attempt.get("scheduled_ts")
        if start and attempt["outcome"] in HOLDING:
            # placement's own correction of a prediction the job has outlived (runtime_prediction.py)
            expected = expected_run(predicted, limit, time.time() - start)
            line += (f"; {'outlived: now ' if expected > predicted else ''}expected to end about "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start + expected))}")
        return [line]
    return []


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _step_lines(steps: list[dict[str, Any]], attempt: int, job_id: str) -> list[str]:
    """An attempt's job steps (each srun inside it), as sacct names them: ``JOB.N`` (the job's number)."""
    lines = []
    for step in steps:
        if step.get("attempt") != attempt:
            continue
        ran = ""
        if step.get("started_ts"):
            ran = f", ran {(step.get('ended_ts') or time.time()) - step['started_ts']:.1f} s"
        code = "" if step.get("state") == "RUNNING" else f", exit {step.get('exit_code') or 0}:{step.get('signal') or 0}"
        lines.append(f"    step {job_id}.{step['step']} {step.get('name') or ''}: {step.get('state')}, "
                     f"{step.get('tasks') or 0} task(s) on {compress(step.get('nodes') or []) or '-'}{code}{ran}"
                     + (f": {step['reason']}" if step.get("reason") else ""))
    return lines


def _attempt_files(events: list[dict[str, Any]], attempt: int, job_id: str) -> list[str]:
    """Where an attempt wrote (its JobStarted) and, if it failed, the end of its standard error."""
    lines = []
    for ev in events:
        detail = ev.get("detail") or {}
        if detail.get("attempt") != attempt:
            continue
        if ev["type"] == "JobStarted" and detail.get("stdout"):
            lines.append(f"    output {detail['stdout']}" + (f"  errors {detail['stderr']}"
                                                               if detail.get("stderr") != detail["stdout"] else "")
                         + f"  (horizon logs --attempt {attempt} {job_id})")
        if ev["type"] == "JobFailed" and detail.get("stderr_tail"):
            lines.append("    stderr, last lines:")
            lines.extend(f"      | {line}" for line in detail["stderr_tail"].splitlines())
    return lines


def _limits(row: dict[str, Any]) -> str:
    """``, limits 4 CPUs, 8Gi per task`` for a job whose limits are above its requests (burstable)."""
    parts = [f"{format_cpus(row['cpu_limit_milli'])} CPUs" if row.get("cpu_limit_milli") else "",
             format_memory(row["memory_limit_bytes"]) if row.get("memory_limit_bytes") else ""]
    shown = ", ".join(p for p in parts if p)
    return f", limits {shown} per task" if shown else ""


def register(group: click.Group) -> None:
    group.add_command(show)
