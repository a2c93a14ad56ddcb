"""``sbatch -W/--wait``: wait for a job's end (an array's, all its tasks') and exit as sbatch does."""

from __future__ import annotations

import asyncio
from typing import Any

from services.front.client.client import query, session

__all__ = ["wait_for_end", "exit_code"]

# What a job that has ended for good is in the read model (a requeue may still follow a failure or a
# preemption: --wait sees the same ending twice, a poll apart, before it believes it).
_ENDED = frozenset({"SUCCEEDED", "FAILED", "OUT_OF_MEMORY", "PREEMPTED", "CANCELLED", "REJECTED", "UNSCHEDULABLE",
                    "DEPENDENCY_NEVER_SATISFIED"})


def wait_for_end(nats_url: str, job_ids: list[str], poll_s: float = 1.0) -> list[dict[str, Any]]:
    """Slurm's ``-W/--wait``: the rows of ``job_ids`` (an array's tasks) once all have ended."""
    async def go() -> list[dict[str, Any]]:
        async with session(nats_url) as nc:
            last: object = None
            while True:
                body = await query(nc, "jobs", {"job_ids": job_ids, "limit": len(job_ids)})
                rows = {row["job_id"]: row for row in body.get("jobs", [])}
                if all(rows.get(j, {}).get("state") in _ENDED for j in job_ids):
                    seen = [(j, rows[j]["state"], rows[j].get("attempt")) for j in job_ids]
                    if seen == last:
                        return [rows[j] for j in job_ids]
                    last = seen
                await asyncio.sleep(poll_s)

    return asyncio.run(go())


def exit_code(rows: list[dict[str, Any]]) -> int:
    """As sbatch --wait exits: 0 when every job succeeded, else the highest exit code (1 for a job that
    ended without one: cancelled, never started, killed by a signal)."""
    worst = 0
    for row in rows:
        if row["state"] != "SUCCEEDED":
            code = row.get("exit_code")
            worst = max(worst, code if isinstance(code, int) and 0 < code < 256 else 1)
    return worst
