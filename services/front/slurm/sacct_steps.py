"""sacct's step lines: after a job's line, ``JOBID.batch`` (its batch script) and ``JOBID.0``, ``JOBID.1``, ...
(its job steps: each ``srun`` inside it, from ``JobStepStarted``/``JobStepEnded`` in the jobs read model).

Each line is a row like the job's own (``services/front/slurm/sacct_format.py`` ``SACCT_FIELDS`` reads it):

* ``.batch``: the batch script, one task on the job's first node; its state, exit code and times
  are the job's (the script's end is the job's end);
* ``.N``: step N of the job's current attempt: its command's name, its nodes (the job's allocation
  on them: CPUs and GPUs), its tasks (``NTasks``), its state in Slurm's names (RUNNING, COMPLETED,
  FAILED, CANCELLED, TIMEOUT) and ``ExitCode`` as ``code:signal`` (the highest of its tasks). A
  step still RUNNING in a job that has ended lost its agent before reporting its end: it is shown
  CANCELLED at the job's end, as Slurm ends a job's steps with it.

``sacct -j ID.N`` (or ``ID.batch``) shows that line alone. A job with a number is shown by it
(``4213.batch``, ``4213_7.0``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.front.client.job_numbers import shown_id

__all__ = ["with_steps", "step_lines"]

_LIVE = ("PENDING", "HELD", "SCHEDULED", "RUNNING")


def step_lines(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``.batch`` and ``.N`` lines of one job row (none before it started)."""
    if not row.get("started_ts"):
        return []
    allocation = row.get("allocation") or []
    base = {k: row.get(k) for k in ("user", "account", "tenant", "partition", "priority_class", "memory_bytes")}
    # shown by the job's number (4213.batch, 4213_7.0; JobIDRaw 4220.0), else by its id
    shown, raw = shown_id(row), str(row.get("number") or row["job_id"])
    out = [{
        **base, "job_id": f"{row['job_id']}.batch", "slurm_id": f"{shown}.batch", "slurm_raw": f"{raw}.batch",
        "name": "batch", "state": row["state"],
        "reason": row.get("reason"), "exit_code": row.get("exit_code"), "started_ts": row.get("started_ts"),
        "ended_ts": row.get("ended_ts"), "allocation": allocation[:1], "nodes": 1, "ntasks": 1,
        "tasks_per_node": 1, "submitted_ts": row.get("started_ts"),
    }]
    live = row["state"] in _LIVE
    for step in row.get("steps") or []:
        state = step.get("state") or "RUNNING"
        ended = step.get("ended_ts")
        reason = step.get("reason")
        if state == "RUNNING" and not live:  # its end was never reported: it ended with the job
            state, ended, reason = "CANCELLED", row.get("ended_ts"), reason or "the job ended"
        nodes = step.get("nodes") or []
        out.append({
            **base, "job_id": f"{row['job_id']}.{step['step']}", "slurm_id": f"{shown}.{step['step']}",
            "slurm_raw": f"{raw}.{step['step']}", "name": step.get("name") or "",
            "state": state, "reason": reason, "exit_code": step.get("exit_code") or 0,
            "signal": step.get("signal") or 0, "started_ts": step.get("started_ts"), "ended_ts": ended,
            "submitted_ts": step.get("started_ts"), "allocation": [a for a in allocation if a.get("node") in nodes],
            "nodes": len(nodes) or 1, "ntasks": step.get("tasks") or 0,
            "tasks_per_node": max(step.get("tasks_per_node") or [1]),
        })
    return out


def with_steps(rows: Sequence[dict[str, Any]], job_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each job's line followed by its step lines; with ``-j ID.N``/``ID.batch`` only the lines asked for
    (the job's own line too when its plain id is also asked)."""
    steps_asked = {j for j in job_ids if "." in j}
    plain = {j for j in job_ids if "." not in j}
    out: list[dict[str, Any]] = []
    for row in rows:
        lines = [row, *step_lines(row)]
        if any(j.split(".", 1)[0] == row["job_id"] for j in steps_asked) and row["job_id"] not in plain:
            lines = [line for line in lines if line["job_id"] in steps_asked]
        out.extend(lines)
    return out
