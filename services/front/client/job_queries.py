"""Reading jobs from the read models: the queue as squeue lists it (``read_queue``: ``horizon queue``,
``squeue``) and an array's tasks (``array_tasks``: ``horizon show``, ``horizon logs``)."""

from __future__ import annotations

from typing import Any

from services.front.client.client import query_all

__all__ = ["read_queue", "array_tasks"]


def _job_id(row: dict[str, Any]) -> Any:
    return row["job_id"]


async def read_queue(nc: Any, ask: list[str] | None, filters: dict[str, Any], *, limit: int | None = None,
                     offset: int = 0) -> dict[str, Any]:
    """The jobs in the Horizon states ``ask`` (None: every state), as squeue lists them: the waiting
    ones from the scheduler's queue (scheduling order, priority, why), the others (running, ended)
    from the jobs read model, after them. ``filters``: tenant, account, user (the read models')."""
    waiting = [s for s in (ask or ["PENDING", "HELD"]) if s in ("PENDING", "HELD")]
    others = None if ask is None else [s for s in ask if s not in ("PENDING", "HELD")]
    body: dict[str, Any] = {"jobs": [], "total": 0, "last_seq": 0}
    if waiting:
        body = await query_all(nc, "queue", {**filters, "states": waiting, "offset": offset}, "jobs",
                               limit=limit, unique=_job_id)
    if others is None or others:
        # One list, the waiting jobs first: a page that starts past them starts inside the rest.
        rest_ask = {**filters, "states": others, "offset": max(0, offset - body["total"]), "order": "queue"}
        rest = await query_all(nc, "jobs", rest_ask, "jobs", unique=_job_id,
                               limit=None if limit is None else max(0, limit - len(body["jobs"])))
        body["jobs"] += [row for row in rest["jobs"] if row["state"] not in ("PENDING", "HELD")]
        body["total"] += sum(1 for row in rest["jobs"] if row["state"] not in ("PENDING", "HELD"))
        body["last_seq"] = min(body["last_seq"], rest["last_seq"]) if waiting else rest["last_seq"]
    return body


async def array_tasks(nc: Any, array_id: str) -> list[dict[str, Any]]:
    """The rows of an array's tasks, in index order (none: ``array_id`` names no array)."""
    body = await query_all(nc, "jobs", {"array": array_id}, "jobs")
    return sorted(body["jobs"], key=lambda row: _index(row["job_id"]))


def _index(task_id: str) -> int:
    tail = task_id.rpartition("_")[2]
    return int(tail) if tail.isdigit() else -1
