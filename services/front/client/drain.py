"""What ``horizon node drain NODE --migrate --deadline D`` prints: inventory's plan, job by job.

Inventory answers the drain command with ``NodeDraining`` (its ``jobs``: the jobs on the node then)
and one ``JobDrainPlanned`` per job, all naming the command (``causation_id`` ``seq:<n>``); the
command collects them (``collect_plan``) and prints them (``plan_lines``), or ``--json`` the answer
with its ``plan``. Afterwards each job's plan is in its history: ``horizon show JOB`` prints it
under the attempt it is about (``drain_lines``), and ``horizon nodes`` says under its table how a
node drains (``drain_note``: its ``drain_migrate`` and ``drain_deadline_ts``, kept in the ledger).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from services.front.client.client import await_answer

__all__ = ["PLAN_SUBJECT", "collect_plan", "plan_lines", "drain_lines", "drain_note", "when"]

PLAN_SUBJECT = "horizon.evt.inventory.JobDrainPlanned.>"


async def collect_plan(sub: Any, answer: dict[str, Any], seen: list[dict[str, Any]], timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """The ``JobDrainPlanned`` of every job the answer names, in its order: those already ``seen``
    and those still to come on ``sub`` (inventory publishes them with the answer)."""
    causation = answer.get("causation_id")
    plan = {p["job_id"]: p for p in seen if p.get("causation_id") == causation}
    wanted = list(answer.get("jobs") or [])
    deadline = asyncio.get_running_loop().time() + timeout_s
    while any(j not in plan for j in wanted):
        left = deadline - asyncio.get_running_loop().time()
        body = await await_answer(sub, {"JobDrainPlanned"}, timeout_s=left, causation=causation) if left > 0 else None
        if body is None:
            break
        plan[body["job_id"]] = body
    return [plan[j] for j in wanted if j in plan]


def when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def plan_lines(node: str, answer: dict[str, Any], plan: list[dict[str, Any]]) -> list[str]:
    """The drain's first line (migrate? deadline?) and one line per job: what will happen, and why."""
    how = []
    if answer.get("migrate"):
        how.append("checkpointable jobs migrate")
    if answer.get("deadline_ts"):
        how.append(f"deadline {when(answer['deadline_ts'])}")
    lines = [f"{node}: draining" + (f" ({', '.join(how)})" if how else "")]
    if not answer.get("jobs"):
        lines.append("  no jobs on it: it is drained")
    width = max((len(p["job_id"]) for p in plan), default=0)
    for p in plan:
        lines.append(f"  {p['job_id']:<{width}}  attempt {p['attempt']}  {p['action']:<19}  {p['reason']}")
    missing = [j for j in answer.get("jobs") or [] if j not in {p["job_id"] for p in plan}]
    if missing:
        lines.append(f"  (no plan received for {', '.join(missing)}: horizon show JOB has it)")
    return lines


def drain_note(row: dict[str, Any]) -> str:
    """``horizon nodes``: the line under the table for a node drained with migration or a deadline."""
    if row.get("state") not in ("draining", "drained") or not (row.get("drain_migrate") or row.get("drain_deadline_ts")):
        return ""
    how = (["checkpointable jobs migrate"] if row.get("drain_migrate") else []) + (
        [f"what still runs at {when(row['drain_deadline_ts'])} is stopped"] if row.get("drain_deadline_ts") else [])
    jobs = row.get("jobs") or []
    tail = f"; each job's plan: horizon show JOB ({', '.join(jobs)})" if jobs else ""
    return f"{row['node']} {row['state']}: {', '.join(how)}{tail}"


def drain_lines(events: list[dict[str, Any]], attempt: int) -> list[str]:
    """``horizon show``: the drains planned for this attempt (from its history's ``JobDrainPlanned``)."""
    lines = []
    for ev in events:
        detail = ev.get("detail") or {}
        if ev.get("type") != "JobDrainPlanned" or detail.get("attempt") != attempt:
            continue
        deadline = f" (deadline {when(detail['deadline_ts'])})" if detail.get("deadline_ts") else ""
        lines.append(f"    drain of {detail.get('node')}: {detail.get('action')}{deadline}: {detail.get('reason')}")
    return lines
