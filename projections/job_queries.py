"""The queries the jobs read model answers (``horizon jobs``, ``horizon job``, the audit table), from SQLite.

Every answer fits in one message: listings come in pages (``projections/paging.py``); in
submission order ``jobs`` pages by a keyset cursor, ``after``: the log sequence that placed the
row (its ``accepted_seq``, or for a job rejected before acceptance its ``updated_seq``), which
never changes and is unique per row. ``projections/job_server.py`` serves them over NATS.
"""

from __future__ import annotations

import json
from typing import Any

import aiosqlite
import msgspec

from projections.job_rows import ATTEMPT_COLUMNS, COLUMNS, STEP_COLUMNS, attempt_answer, qos_fields
from projections.paging import Listing, page_fields
from projections.tenants import tenant_keys
from services.domain.job_numbers import scoped_slurm_id
from services.domain.qos import qos_class

__all__ = ["JobQueries", "EVENTS", "JOBS", "JOBS_BY_QUEUE", "DECISIONS", "submit_key"]

EVENTS = Listing("events", total="events_total", offset="events_offset", next_offset="events_next_offset")


def _events_page(start: int, shown: int, total: int) -> dict[str, Any]:
    following, ask = page_fields(start, shown, total)
    return {"events_total": total, "events_offset": start, "events_next_offset": following, "next": ask}


_SUBMIT_KEY = "COALESCE(accepted_seq, updated_seq)"  # the submission order (index jobs_by_submit)


def submit_key(row: dict[str, Any]) -> int:
    """A ``jobs`` row's place in the submission order: the log sequence that placed it."""
    return int(row["accepted_seq"] or row["updated_seq"])


JOBS = Listing("jobs", cursor=submit_key)  # in submission order: keyset pages
JOBS_BY_QUEUE = Listing("jobs")
DECISIONS = Listing("decisions")


class JobQueries:
    """The queries of ``JobsProjection`` (``projections/jobs.py``), over its database and position."""

    db: aiosqlite.Connection | None
    last_seq: int

    async def query_jobs(
        self,
        *,
        states: list[str] | None = None,
        tenant: str | None = None,
        account: str | None = None,
        user: str | None = None,
        partition: str | None = None,
        job_ids: list[str] | None = None,
        numbers: list[str] | None = None,
        array: str | None = None,
        limit: int = 1000,
        offset: int = 0,
        order: str = "submit",
        after: int | None = None,
        steps: bool = False,
        specs: bool = False,
    ) -> dict[str, Any]:
        """Jobs matching the filters, ``limit`` of them from ``offset``; in submission order (``order``
        ``submit``) ``after`` starts past the row of that key (``submit_key``, the keyset cursor
        ``next`` carries; ``offset`` then counts from there). Paging fields: ``projections/paging.py``.
        ``specs``: each row with its job's ``spec`` (what squeue's and scontrol's QOS, nice, array and
        dependency fields read; a tenant reads no stream, so this is its way to them).

        ``array``: the tasks of the array of that job id (``<array>_<index>``, their spec's ``array``),
        for a tenant under either of the keys its id may stand for (``tenant_keys``).

        ``numbers``: the jobs of these numbers, each as named in its scope (``12``, ``acme:12``:
        ``services/domain/job_numbers.py``); a tenant's are read as its own (``job_server.py``).
        Every row says its ``number`` and ``slurm_id``, the id Slurm's commands show (``12``,
        ``12_3`` for a task; None for a job from before numbers)."""
        assert self.db is not None
        if after is not None and order == "queue":
            raise ValueError("after pages the submission order; the queue order pages by offset")
        where, args = [], []
        for column, value in (("tenant", tenant), ("account", account), ("user", user), ("partition", partition)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            args.extend(s.upper() for s in states)
        if job_ids:
            where.append(f"job_id IN ({', '.join('?' for _ in job_ids)})")
            args.extend(job_ids)
        if numbers:
            where.append(f"number_key IN ({', '.join('?' for _ in numbers)})")
            args.extend(str(n) for n in numbers)
        if array:
            # a task's id starts with its array's and "_": a range of the primary key, then its spec says
            # whether it is a task of that array (not a job that merely starts so)
            keys = tenant_keys(tenant, [array]) if tenant else [array]
            where.append("(" + " OR ".join("(job_id >= ? AND job_id < ? AND json_extract(CAST(spec AS TEXT), "
                                           "'$.array') = ?)" for _ in keys) + ")")
            for key in keys:
                args.extend((f"{key}_", f"{key}`", key))  # "`" is the character after "_"
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        order_by = "class_rank, accepted_seq" if order == "queue" else f"{_SUBMIT_KEY}, job_id"
        total = await self._count(clause, args)
        start, offset = max(0, int(offset)), max(0, int(offset))
        if after is not None:  # the page starts past the cursor: count what lies before it
            joiner = " AND" if where else " WHERE"
            start += await self._count(f"{clause}{joiner} {_SUBMIT_KEY} <= ?", [*args, int(after)])
            clause, args = f"{clause}{joiner} {_SUBMIT_KEY} > ?", [*args, int(after)]
        cols = [col for col in COLUMNS if col not in ("spec", "number_key")]
        async with self.db.execute(
            f"SELECT {', '.join(cols)}, spec FROM jobs{clause} ORDER BY {order_by} LIMIT ? OFFSET ?",
            [*args, max(0, min(limit, 100_000)), offset],
        ) as cur:
            rows = [dict(zip([*cols, "spec"], row, strict=True)) for row in await cur.fetchall()]
        for row in rows:
            spec = row.pop("spec")
            if specs:
                try:
                    row["spec"] = msgspec.json.decode(spec) if spec else None
                except (msgspec.DecodeError, RecursionError):  # a payload nested too deeply to read here
                    row["spec"] = None
            fields = qos_fields.decode(spec) if spec else None
            row["qos"] = qos_class(fields) if fields else None  # services/domain/qos.py
            # per task, beyond the request (0: the request is the limit)
            row["cpu_limit_milli"] = fields.cpu_limit_milli if fields else None
            row["memory_limit_bytes"] = fields.memory_limit_bytes if fields else None
            row["min_nodes"] = fields.min_nodes if fields else None  # an elastic gang's least (0: rigid)
            row["checkpoint_signal"] = fields.checkpoint_signal if fields else None
            row["number"] = (fields.number or None) if fields else None  # Slurm's job id (services/domain/job_numbers.py)
            row["slurm_id"] = (scoped_slurm_id(row["job_id"], fields.number, fields.array_number, fields.array_index)
                               or None) if fields else None
            row["limit_signal"] = msgspec.to_builtins(fields.limit_signal) if fields and fields.limit_signal else None
            row["allocation"] = json.loads(row["allocation"]) if row["allocation"] else []
            row.pop("class_rank", None)
        if steps and rows:  # each row's current attempt's steps (sacct's JOBID.0, JOBID.1, ...)
            current = {(row["job_id"], row["attempt"]): row for row in rows}
            for row in rows:
                row["steps"] = []
            for step in await self._steps([row["job_id"] for row in rows]):
                owner = current.get((step.pop("job_id"), step["attempt"]))
                if owner is not None:
                    owner["steps"].append(step)
        keyset = order != "queue"
        following, ask = page_fields(start, len(rows), total, keyset=keyset,
                                     cursor=submit_key(rows[-1]) if keyset and rows else None)
        return {"jobs": rows, "total": total, "offset": start, "next_offset": following, "next": ask,
                "last_seq": self.last_seq}

    async def _steps(self, job_ids: list[str]) -> list[dict[str, Any]]:
        """The steps of these jobs, every attempt's, in job, attempt and step order."""
        assert self.db is not None
        cols = [col for col in STEP_COLUMNS if col != "updated_seq"]
        out: list[dict[str, Any]] = []
        for i in range(0, len(job_ids), 500):  # SQLite's limit on parameters
            chunk = job_ids[i:i + 500]
            async with self.db.execute(
                f"SELECT {', '.join(cols)} FROM steps WHERE job_id IN ({', '.join('?' for _ in chunk)}) "
                "ORDER BY job_id, attempt, step", chunk,
            ) as cur:
                out.extend(dict(zip(cols, r, strict=True)) for r in await cur.fetchall())
        for step in out:
            step["nodes"] = step["nodes"].split(",") if step["nodes"] else []
            step["tasks_per_node"] = [int(n) for n in step["tasks_per_node"].split(",")] if step["tasks_per_node"] else []
        return out

    async def _count(self, clause: str, args: list[Any]) -> int:
        assert self.db is not None
        async with self.db.execute(f"SELECT COUNT(*) FROM jobs{clause}", args) as cur:
            return int((await cur.fetchone())[0])  # type: ignore[index]

    async def query_job(self, job_id: str, *, tenant: str | None = None, limit: int | None = None,
                        offset: int = 0) -> dict[str, Any]:
        """One job with its history; with ``tenant``, only if the job is that tenant's (else as unknown).

        The history pages: ``limit`` events (None: all) from ``offset``, in log order (``events_total``,
        ``events_offset``, ``events_next_offset``, ``next``: ``projections/paging.py``)."""
        assert self.db is not None
        found = await self.query_jobs(job_ids=[job_id], limit=1)
        if tenant is not None and (not found["jobs"] or found["jobs"][0]["tenant"] != tenant):
            return {"job": None, "events": [], "attempts": [], "steps": [], **_events_page(offset, 0, 0),
                    "last_seq": self.last_seq}
        async with self.db.execute("SELECT COUNT(*) FROM job_events WHERE job_id = ?", (job_id,)) as cur:
            total = int((await cur.fetchone())[0])  # type: ignore[index]
        async with self.db.execute(
            "SELECT seq, type, ts, source, body FROM job_events WHERE job_id = ? ORDER BY seq LIMIT ? OFFSET ?",
            (job_id, -1 if limit is None else max(0, int(limit)), max(0, int(offset))),
        ) as cur:
            events = [
                {"seq": r[0], "type": r[1], "ts": r[2], "source": r[3], "detail": json.loads(r[4])}
                for r in await cur.fetchall()
            ]
        cols = [col for col in ATTEMPT_COLUMNS if col != "updated_seq"]
        async with self.db.execute(
            f"SELECT {', '.join(cols)} FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,)
        ) as cur:
            attempts = [dict(zip(cols, r, strict=True)) for r in await cur.fetchall()]
        attempts = [attempt_answer(row) for row in attempts]
        steps = await self._steps([job_id])
        for step in steps:
            del step["job_id"]  # under its job (a tenant's answer names the job by the tenant's id)
        return {"job": found["jobs"][0] if found["jobs"] else None, "events": events, "attempts": attempts,
                "steps": steps, **_events_page(max(0, int(offset)), len(events), total), "last_seq": self.last_seq}


    async def query_decisions(self, *, job_id: str | None = None, service: str | None = None,
                              tenant: str | None = None, account: str | None = None, user: str | None = None,
                              limit: int = 1000, offset: int = 0) -> dict[str, Any]:
        """The audit table: every decision recorded in the log, with its service and basis.

        ``tenant``, ``account``, ``user``: only decisions about jobs of theirs (a decision's
        aggregate is the job it is about; cycle and node decisions belong to nobody, so they go)."""
        assert self.db is not None
        where, args = [], []
        if job_id:
            where.append("aggregate = ?")
            args.append(job_id)
        if service:
            where.append("service = ?")
            args.append(service)
        owners = [(column, value) for column, value in (("tenant", tenant), ("account", account), ("user", user))
                  if value]
        if owners:
            where.append("aggregate IN (SELECT job_id FROM jobs WHERE "
                         + " AND ".join(f"{column} = ?" for column, _ in owners) + ")")
            args.extend(value for _, value in owners)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        async with self.db.execute(f"SELECT COUNT(*) FROM decisions{clause}", args) as cur:
            total = (await cur.fetchone())[0]  # type: ignore[index]
        cols = ["seq", "service", "type", "aggregate", "basis_seq", "ts", "event_id"]
        async with self.db.execute(f"SELECT {', '.join(cols)} FROM decisions{clause} ORDER BY seq LIMIT ? OFFSET ?",
                                   [*args, max(0, min(limit, 100_000)), max(0, offset)]) as cur:
            rows = [dict(zip(cols, r, strict=True)) for r in await cur.fetchall()]
        following, ask = page_fields(max(0, offset), len(rows), total)
        return {"decisions": rows, "total": total, "offset": max(0, offset), "next_offset": following, "next": ask,
                "last_seq": self.last_seq}
