"""The jobs read model: one row per job, its history, and the queries the CLI asks.

Kept current from the log by ``JobsProjection.start`` (a follower from the stored position):

* the position (last applied stream sequence) is stored in the table
  ``tracking`` **in the same transaction** as the rows it produced, so a
  projection killed at any point resumes exactly where its rows end, and a
  restarted one is identical to one rebuilt from scratch;
* job state follows the same fold as the services (``services.domain.jobs``),
  so the read model cannot disagree with what the scheduler believes;
* writes are batched (one transaction per batch of events, ``executemany``),
  WAL journal, ``synchronous=NORMAL``: SQLite is then far from the bottleneck.

Served over NATS request/reply on ``horizon.query.jobs`` (a list with filters
and paging; ``steps: true`` adds each job's current attempt's steps) and
``horizon.query.job`` (one job with its history, paged, its attempts and its
job steps: ``JobStepStarted``/``JobStepEnded``, table ``steps``), in the
queue group ``projections`` so several replicas can share the load. Every answer
fits in one message: listings come in pages (``projections/paging.py``); in
submission order ``jobs`` pages by a keyset cursor, ``after``: the log sequence
that placed the row (its ``accepted_seq``, or for a job rejected before
acceptance its ``updated_seq``), which never changes and is unique per row.

**The tenant feed.** A tenant may read only its own jobs' events, but event
subjects (``horizon.evt.<service>.<Type>.<job>``) do not name the tenant, so
no subject permission can select them. The projection, which knows every
job's tenant, copies each event about a job it applies live (not the history
it catches up on) to ``horizon.tenant.<tenant>.evt.<service>.<Type>.<job>``
(core NATS, at most once; the log and the queries stay the truth). Under
``deploy/nats/auth.conf`` each tenant's account imports its own prefix as
``horizon.evt.>``, so a tenant's ``horizon submit``, ``cancel`` or ``watch``
sees its jobs' events on the usual subjects and nothing else. Which tenant:
the job's; for ``RequestRejected``, ``JobRejected`` and ``InputRejected``, the
tenant that sent the input (never an operator's request; a body naming another
tenant is answered to its sender alone). One copy per projection replica running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from events import catalogue as c
from events.base import Event
from events.codec import decode_json
from projections.db import open_database, stored_position
from projections.paging import Listing, Pager, page_fields
from events.subjects import ADMIN_TENANT, job_key, tenant_view, valid_token
from services.runtime.consume import readable
from services.runtime.log import READ_MODEL_LINGER_S, EventLog
from services.domain.protocol import Record
from services.domain.policy import CLASS_RANK
from services.domain.jobs import Job, JobState, JobTable
from services.domain.steps import step_state
from services.domain.qos import qos_class

__all__ = ["JobsProjection", "QueryServer", "job_row", "TENANT_FEED", "feed_tenant"]

TENANT_FEED = "horizon.tenant"  # horizon.tenant.<tenant>.evt.<service>.<Type>.<job>

log = logging.getLogger("horizon.projections")

NAME = "jobs"
SCHEMA = """
CREATE TABLE IF NOT EXISTS tracking (projection TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    tenant TEXT, account TEXT, user TEXT, name TEXT,
    state TEXT NOT NULL,
    priority_class TEXT, class_rank INTEGER,
    cpus_milli INTEGER, memory_bytes INTEGER, gpus INTEGER, gpu_type TEXT,
    nodes INTEGER, tasks_per_node INTEGER, time_limit_s REAL,
    attempt INTEGER NOT NULL DEFAULT 0,
    node TEXT, allocation TEXT,
    submitted_ts REAL, accepted_seq INTEGER, scheduled_ts REAL, started_ts REAL, ended_ts REAL,
    exit_code INTEGER, reason TEXT,
    spec BLOB,
    updated_seq INTEGER NOT NULL,
    partition TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, class_rank, accepted_seq);
CREATE INDEX IF NOT EXISTS jobs_by_submit ON jobs (COALESCE(accepted_seq, updated_seq), job_id);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    nodes TEXT, allocation TEXT, scheduled_ts REAL, started_ts REAL, ended_ts REAL,
    outcome TEXT NOT NULL, exit_code INTEGER, reason TEXT, backfilled INTEGER, borrowed INTEGER,
    updated_seq INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
CREATE TABLE IF NOT EXISTS steps (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, step INTEGER NOT NULL,
    name TEXT, nodes TEXT, tasks INTEGER, tasks_per_node TEXT, gpus INTEGER,
    started_ts REAL, ended_ts REAL, state TEXT NOT NULL, exit_code INTEGER, signal INTEGER, reason TEXT,
    updated_seq INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt, step)
);
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY, service TEXT NOT NULL, type TEXT NOT NULL, aggregate TEXT,
    basis_seq INTEGER, ts REAL, event_id TEXT
);
CREATE INDEX IF NOT EXISTS decisions_by_aggregate ON decisions (aggregate, seq);
CREATE TABLE IF NOT EXISTS job_events (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, ts REAL, source TEXT, body TEXT,
    PRIMARY KEY (job_id, seq)
);
"""

_COLUMNS = (
    "job_id tenant account user name state priority_class class_rank cpus_milli memory_bytes gpus gpu_type "
    "nodes tasks_per_node time_limit_s attempt node allocation submitted_ts accepted_seq scheduled_ts "
    "started_ts ended_ts exit_code reason spec updated_seq partition"
).split()
_UPSERT = (
    f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
    f"ON CONFLICT(job_id) DO UPDATE SET {', '.join(f'{col}=excluded.{col}' for col in _COLUMNS[1:])}"
)
_spec_encoder = msgspec.json.Encoder()
_spec_decoder = msgspec.json.Decoder(c.JobSpec)


class _QosFields(msgspec.Struct):
    """The fields of a stored spec its QoS class is derived from, an elastic gang's least number of
    nodes (``min_nodes``, which a row shows beside ``nodes``) and the signals it is sent before a stop
    (checkpoint, time limit); the rest is not decoded."""

    cpus_milli: int = 1000
    memory_bytes: int = 1 << 30
    gpus: int = 0
    gpus_per_node: int = 0
    tasks_per_node: int = 1
    cpu_limit_milli: int = 0
    memory_limit_bytes: int = 0
    exclusive: bool = False
    whole_node_memory: bool = False
    min_nodes: int = 0
    checkpoint_signal: str | None = None  # shown beside the resources: what a drain or preemption sends first
    limit_signal: c.LimitSignal | None = None

    @property
    def gpus_on_node(self) -> int:
        return self.gpus_per_node or self.gpus * self.tasks_per_node


_qos_fields = msgspec.json.Decoder(_QosFields)
_alloc_list = msgspec.json.Decoder(list[c.NodeAllocation])


class Asked(msgspec.Struct):
    """What a ``JobSubmitted`` named that its rejected job's row keeps (a rejected job has no spec): the
    fields ``horizon jobs`` shows. Read from the submission the ``JobRejected`` answers."""

    account: str = c.DEFAULT_ACCOUNT  # JobSubmitted's defaults: what a submission without them asked
    user: str = ""
    name: str = ""
    priority_class: str = "normal"


_asked = msgspec.json.Decoder(Asked)


def job_row(job: Job, seq: int, tenant: str = "", asked: Asked | None = None) -> tuple[Any, ...]:
    """A job's row; ``asked``: for a job rejected at submission, what its submission named."""
    spec = job.spec
    allocation = [msgspec.to_builtins(a) for a in job.allocations]
    return (
        job.job_id,
        spec.tenant if spec else tenant,
        spec.account if spec else (asked.account or None if asked else None),
        spec.user if spec else (asked.user or None if asked else None),
        spec.name if spec else (asked.name or None if asked else None),
        job.state.value,
        spec.priority_class if spec else (asked.priority_class or None if asked else None),
        CLASS_RANK.get(spec.priority_class, 9) if spec else 9,
        spec.cpus_milli if spec else None,
        spec.memory_bytes if spec else None,
        spec.total_gpus if spec else None,
        (spec.gpu_type + (f"-{spec.gpu_variant}" if spec.gpu_variant else "")) if spec and spec.gpu_type else None,
        spec.nodes if spec else None,
        spec.tasks_per_node if spec else None,
        job.limit_s if spec else None,  # the attempt's own (shorter under --time-min), else the spec's
        job.attempt,
        ",".join(a.node for a in job.allocations) or None,
        json.dumps(allocation) if allocation else None,
        job.accepted_ts or None,
        job.accepted_seq or None,
        job.scheduled_ts or None,
        job.started_ts or None,
        job.ended_ts or None,
        job.exit_code,
        job.reason or None,
        _spec_encoder.encode(spec) if spec else None,
        seq,
        spec.partition if spec else None,  # "" for a job of no partition
    )


_HOLDS = frozenset({JobState.SCHEDULED, JobState.RUNNING})
_ATTEMPT_COLUMNS = ("job_id attempt nodes allocation scheduled_ts started_ts ended_ts outcome exit_code reason "
                    "backfilled borrowed updated_seq").split()
_UPSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(_ATTEMPT_COLUMNS)}) VALUES ({', '.join('?' for _ in _ATTEMPT_COLUMNS)}) "
    f"ON CONFLICT(job_id, attempt) DO UPDATE SET "
    f"{', '.join(f'{col}=COALESCE(excluded.{col}, attempts.{col})' for col in _ATTEMPT_COLUMNS[2:])}"
)


def _attempt_row(job: Job, outcome: str, event: Event, seq: int, before: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """One attempt as it stands after ``event`` (columns left None keep what the table has)."""
    scheduled = isinstance(event, c.JobScheduled)
    ended = outcome not in ("SCHEDULED", "RUNNING")
    return (
        job.job_id, job.attempt,
        ",".join(a.node for a in job.allocations) or (before[2] if before else None),
        json.dumps([msgspec.to_builtins(a) for a in job.allocations]) if job.allocations else (before[3] if before else None),
        job.scheduled_ts or None,
        job.started_ts if job.state is JobState.RUNNING or (ended and job.started_ts) else (before[5] if before else None),
        job.ended_ts if ended else None,
        outcome,
        job.exit_code if ended else None,
        (job.reason or None) if ended else None,
        int(event.backfilled) if scheduled else (before[10] if before else None),  # type: ignore[attr-defined]
        int(event.borrowed) if scheduled else (before[11] if before else None),  # type: ignore[attr-defined]
        seq,
    )


def _attempt_answer(row: dict[str, Any]) -> dict[str, Any]:
    """An ``attempts`` row as ``horizon.query.job`` answers it, in the job row's words: ``node`` the
    attempt's nodes comma-separated (the column ``nodes``), ``nodes`` how many (its allocation's)."""
    allocation = json.loads(row["allocation"]) if row["allocation"] else []
    names = row.pop("nodes")
    out = {"job_id": row.pop("job_id"), "attempt": row.pop("attempt"), "node": names,
           "nodes": len(allocation) or (len(names.split(",")) if names else 0), **row}
    out["allocation"] = allocation
    out["backfilled"], out["borrowed"] = bool(row["backfilled"]), bool(row["borrowed"])
    return out


_STEP_COLUMNS = ("job_id attempt step name nodes tasks tasks_per_node gpus started_ts ended_ts state exit_code "
                 "signal reason updated_seq").split()
# A step's row: what JobStepStarted said, completed by JobStepEnded (an end is never undone by a late start).
_UPSERT_STEP = (
    f"INSERT INTO steps ({', '.join(_STEP_COLUMNS)}) VALUES ({', '.join('?' for _ in _STEP_COLUMNS)}) "
    f"ON CONFLICT(job_id, attempt, step) DO UPDATE SET "
    + ", ".join(f"{col}=COALESCE(excluded.{col}, steps.{col})" for col in _STEP_COLUMNS[3:]
                if col not in ("state", "updated_seq"))
    + ", state=CASE WHEN steps.ended_ts IS NOT NULL AND excluded.ended_ts IS NULL THEN steps.state "
      "ELSE excluded.state END, updated_seq=excluded.updated_seq"
)


def _step_row(event: c.JobStepStarted | c.JobStepEnded, seq: int, time: float,
              before: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """One step as it stands after ``event`` (None: keep what the table, or ``before`` in this batch, has)."""
    started = isinstance(event, c.JobStepStarted)
    row = (
        event.job_id, event.attempt, event.step, event.name or None, ",".join(event.nodes) or None,
        event.tasks or None, ",".join(map(str, event.tasks_per_node)) if started and event.tasks_per_node else None,
        event.gpus if started else None,
        (event.ts or time) if started else (event.started_ts or None), None if started else (event.ts or time),
        step_state(event), None if started else event.exit_code, None if started else event.signal,
        None if started else (event.reason or None), seq,
    )
    if before is None:
        return row
    merged = tuple(new if new is not None else old for new, old in zip(row, before))
    if before[9] is not None and row[9] is None:  # an end already known stays
        merged = merged[:10] + (before[10],) + merged[11:]
    return merged


def _summary(event: Event) -> str:
    body = msgspec.to_builtins(event)
    for key in ("id", "type", "v", "ts", "causation_id", "correlation_id", "source", "spec", "job_id"):
        body.pop(key, None)
    return json.dumps(body, sort_keys=True)


class JobsProjection:
    def __init__(self, log_: EventLog, path: Path | str) -> None:
        self.log = log_
        self.path = str(path)
        self.db: aiosqlite.Connection | None = None
        self.jobs = JobTable()
        self.last_seq = 0
        self.ready = asyncio.Event()
        self._follower: Any = None
        self._tenants: dict[str, str] = {}
        # The tenant feed: records from ``feed_from`` on (live), handed to each listener after the
        # batch is committed as (tenant, record).
        self.feed_from = 0
        self.listeners: list[Callable[[list[tuple[str, Record]]], Awaitable[None]]] = []

    async def open(self) -> None:
        self.db = await open_database(self.path, SCHEMA)
        await _add_columns(self.db)
        self.last_seq = await stored_position(self.db, NAME)
        # The in-memory fold is rebuilt from the rows, not from the log: rows and position agree.
        async with self.db.execute(
            "SELECT job_id, state, attempt, allocation, spec, accepted_seq, submitted_ts, scheduled_ts, started_ts, "
            "ended_ts, reason, exit_code, tenant FROM jobs"
        ) as cur:
            async for r in cur:
                job = Job(
                    r[0],
                    _spec_decoder.decode(r[4]) if r[4] else None,
                    JobState(r[1]),
                    accepted_seq=r[5] or 0,
                    accepted_ts=r[6] or 0.0,
                    attempt=r[2],
                    allocations=tuple(_alloc_list.decode(r[3])) if r[3] else (),
                    scheduled_ts=r[7] or 0.0,
                    started_ts=r[8] or 0.0,
                    ended_ts=r[9] or 0.0,
                    reason=r[10] or "",
                    exit_code=r[11],
                )
                self.jobs.jobs[job.job_id] = job
                if r[12]:
                    self._tenants[job.job_id] = r[12]

    async def apply(self, batch: Iterable[Record]) -> None:
        """Fold a batch and commit rows, history and position in one transaction."""
        assert self.db is not None
        changed: dict[str, tuple[Job, int]] = {}  # job -> (job, seq of the event that last changed it)
        history: list[tuple[Any, ...]] = []
        attempts: dict[tuple[str, int], tuple[Any, ...]] = {}
        decisions: list[tuple[Any, ...]] = []
        steps: dict[tuple[str, int, int], tuple[Any, ...]] = {}
        feed: list[tuple[str, Record]] = []
        rejected: dict[str, int] = {}  # a job rejected at submission -> the seq of that submission
        last = self.last_seq
        for record, event in readable(batch, last):
            last = record.seq
            if event is None:
                continue
            basis = getattr(event, "basis_seq", None)
            if basis is not None and event.source and not event.source.startswith(("agent", "clock")):
                parts = record.subject.split(".")
                decisions.append((record.seq, parts[2] if len(parts) > 2 else event.source, event.event_type,
                                  parts[4] if len(parts) > 4 else None, basis, record.time, event.id))
            if isinstance(event, c.InputRejected):  # a verdict about an input, not about a job
                if self.listeners and record.seq >= self.feed_from:
                    tenant = feed_tenant(event, None, None)
                    if tenant is not None:
                        feed.append((tenant, record))
                continue
            job_id = getattr(event, "job_id", None)
            if not isinstance(job_id, str) or not job_id:
                continue
            if isinstance(event, c.JobRejected):
                self._tenants[job_id] = event.tenant
                if event.submitted_seq and not self.jobs.known(job_id):
                    rejected[job_id] = event.submitted_seq
            if isinstance(event, (c.JobStepStarted, c.JobStepEnded)):
                key = (job_id, event.attempt, event.step)
                steps[key] = _step_row(event, record.seq, record.time, steps.get(key))
            before = self.jobs.get(job_id)
            snapshot = (before.state, before.attempt, before.reason, before.spec) if before else None
            tr = self.jobs.apply(event, record.seq, record.time)
            if tr is not None and (tr.after in _HOLDS or tr.before in _HOLDS) and tr.job.attempt:
                attempts[(job_id, tr.job.attempt)] = _attempt_row(tr.job, tr.after.value, event, record.seq,
                                                                  attempts.get((job_id, tr.job.attempt)))
            job = self.jobs.get(job_id)
            if isinstance(event, c.JobResized) and job is not None and job.state in _HOLDS \
                    and job.attempt == event.attempt:  # an elastic job's nodes changed: its rows show them
                changed[job_id] = (job, record.seq)
                attempts[(job_id, job.attempt)] = _attempt_row(job, job.state.value, event, record.seq,
                                                               attempts.get((job_id, job.attempt)))
            if job is not None and (snapshot != (job.state, job.attempt, job.reason, job.spec)):
                # The row's version is the event's sequence, not the batch's: how the log was cut
                # into batches (a restart, a slow reader) must not show in the rows.
                changed[job_id] = (job, record.seq)
            if job is not None and not isinstance(event, c.SchedulingCycleCompleted):
                history.append((job_id, record.seq, event.event_type, record.time, event.source, _summary(event)))
            if self.listeners and record.seq >= self.feed_from:
                tenant = feed_tenant(event, job, self._tenants.get(job_id))
                if tenant is not None:
                    feed.append((tenant, record))
        if last == self.last_seq:
            return
        asked = await self._asked(rejected) if rejected else {}
        rows = [job_row(job, seq, self._tenants.get(job_id, ""), asked.get(job_id))
                for job_id, (job, seq) in changed.items()]
        try:
            # BEGIN inside the try: a task cancelled while BEGIN is on its way (a view stopping while
            # its flusher writes) must still roll it back, or the next transaction cannot begin.
            await self.db.execute("BEGIN")
            if rows:
                await self.db.executemany(_UPSERT, rows)
            if history:
                await self.db.executemany("INSERT OR IGNORE INTO job_events VALUES (?, ?, ?, ?, ?, ?)", history)
            if attempts:
                await self.db.executemany(_UPSERT_ATTEMPT, list(attempts.values()))
            if steps:
                await self.db.executemany(_UPSERT_STEP, list(steps.values()))
            if decisions:
                await self.db.executemany("INSERT OR IGNORE INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?)", decisions)
            await self.db.execute(
                "INSERT INTO tracking (projection, last_seq) VALUES (?, ?) "
                "ON CONFLICT(projection) DO UPDATE SET last_seq = excluded.last_seq",
                (NAME, last),
            )
            await self.db.commit()
        except BaseException:
            await self.db.rollback()
            raise
        self.last_seq = last
        if feed:
            for listener in self.listeners:
                await listener(feed)

    async def _asked(self, rejected: dict[str, int]) -> dict[str, Asked]:
        """What the submissions of jobs rejected in a batch named (``Asked``), read from the log in one
        pass over their sequences (inputs are on ``horizon.in.>``, which the follower does not read).
        A record that cannot be read leaves its row as the rejection alone makes it."""
        wanted = {seq: job_id for job_id, seq in rejected.items()}
        found: dict[str, Asked] = {}
        async for records in self.log.read(min(wanted), subjects=("horizon.in.>",), until_seq=max(wanted)):
            for record in records:
                if record.seq in wanted:
                    try:
                        found[wanted[record.seq]] = _asked.decode(record.data)
                    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # a body as sent
                        pass
        return found

    async def start(self) -> None:
        if self.db is None:
            await self.open()
        self.feed_from = await self.log.last_seq() + 1  # what is in the log already is history, not news
        self._follower = await self.log.follow(self.apply, from_seq=self.last_seq + 1, subjects=("horizon.evt.>",),
                                              linger_s=READ_MODEL_LINGER_S)
        self.ready.set()

    async def wait(self) -> None:
        await self._follower.wait()

    async def stop(self) -> None:
        try:
            if self._follower is not None:
                await self._follower.stop()
        finally:  # whatever cut the stop short: an open database's thread keeps the process alive
            db, self.db = self.db, None
            if db is not None:
                await db.close()

    # ------------------------------------------------------------------ queries

    async def query_jobs(
        self,
        *,
        states: list[str] | None = None,
        tenant: str | None = None,
        account: str | None = None,
        user: str | None = None,
        partition: str | None = None,
        job_ids: list[str] | None = None,
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
        for a tenant under either of the keys its id may stand for (``tenant_keys``)."""
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
        cols = [col for col in _COLUMNS if col != "spec"]
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
            fields = _qos_fields.decode(spec) if spec else None
            row["qos"] = qos_class(fields) if fields else None  # services/domain/qos.py
            # per task, beyond the request (0: the request is the limit)
            row["cpu_limit_milli"] = fields.cpu_limit_milli if fields else None
            row["memory_limit_bytes"] = fields.memory_limit_bytes if fields else None
            row["min_nodes"] = fields.min_nodes if fields else None  # an elastic gang's least (0: rigid)
            row["checkpoint_signal"] = fields.checkpoint_signal if fields else None
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
        cols = [col for col in _STEP_COLUMNS if col != "updated_seq"]
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
        cols = [col for col in _ATTEMPT_COLUMNS if col != "updated_seq"]
        async with self.db.execute(
            f"SELECT {', '.join(cols)} FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,)
        ) as cur:
            attempts = [dict(zip(cols, r, strict=True)) for r in await cur.fetchall()]
        attempts = [_attempt_answer(row) for row in attempts]
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


async def _add_columns(db: aiosqlite.Connection) -> None:
    """Columns added since a database was made (the rows of older jobs keep NULL there): ``partition``."""
    async with db.execute("PRAGMA table_info(jobs)") as cur:
        have = {row[1] for row in await cur.fetchall()}
    if "partition" not in have:
        await db.execute("ALTER TABLE jobs ADD COLUMN partition TEXT")
        await db.commit()


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


def feed_tenant(event: Event, job: Job | None, known: str | None) -> str | None:
    """The tenant whose feed gets ``event`` (about a job), or None (see the module docstring)."""
    if isinstance(event, (c.RequestRejected, c.JobRejected, c.InputRejected)):
        tenant: str | None = event.tenant  # the sender's (submission names it from the subject)
    else:
        tenant = job.spec.tenant if job is not None and job.spec is not None else known
    if tenant is None or tenant == ADMIN_TENANT or not valid_token(tenant):
        return None
    return tenant


class QueryServer:
    """``horizon.query.jobs``, ``horizon.query.job`` and ``horizon.query.decisions`` over NATS request/reply.

    ``horizon.query.jobs.<tenant>`` and ``horizon.query.job.<tenant>`` answer about that tenant's
    jobs only. Under ``deploy/nats/auth.conf`` a tenant's account imports them as
    ``horizon.query.jobs`` and ``horizon.query.job``, so the tenant is set by the server's
    configuration, not by the asker, and the unscoped subjects are the operators' and services'.

    Every answer fits in one message (``projections/paging.py``): a listing is cut to a page that
    does, and says where the next page starts.

    It also publishes the projection's tenant feed (module docstring).
    """

    def __init__(self, nc: Any, projection: JobsProjection) -> None:
        self.nc = nc
        self.projection = projection
        self.pager = Pager(nc)
        self._subs: list[Any] = []

    async def start(self) -> None:
        self.projection.listeners.append(self._feed)
        for view, cb in (("jobs", self._jobs), ("job", self._job)):
            self._subs.append(await self.nc.subscribe(f"horizon.query.{view}", queue="projections", cb=cb))
            self._subs.append(await self.nc.subscribe(f"horizon.query.{view}.*", queue="projections", cb=cb))
        self._subs.append(await self.nc.subscribe("horizon.query.decisions", queue="projections", cb=self._decisions))

    async def _decisions(self, msg: Any) -> None:
        try:
            req = decode_json(msg.data or b"{}")
            allowed = {"job_id", "service", "tenant", "account", "user", "limit", "offset"}
            unknown = set(req) - allowed
            if unknown:
                raise ValueError(f"unknown query fields {sorted(unknown)}; allowed: {sorted(allowed)}")
            req["limit"] = self.pager.rows("decisions", req.get("limit", 1000))
            body = await self.projection.query_decisions(**req)
        except (ValueError, TypeError) as exc:
            body = {"error": str(exc)}
        await self._reply(msg, body, "decisions", DECISIONS)

    async def _feed(self, feed: list[tuple[str, Record]]) -> None:
        cut = len("horizon.")
        for tenant, record in feed:
            await self.nc.publish(f"{TENANT_FEED}.{tenant}.{record.subject[cut:]}", record.data)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.projection.listeners.remove(self._feed)
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _reply(self, msg: Any, body: dict[str, Any], view: str, listing: Listing | None = None) -> None:
        if msg.reply:
            await self.nc.publish(msg.reply, self.pager.encode(view, body, listing))

    async def _jobs(self, msg: Any) -> None:
        req: Any = {}
        try:
            req = decode_json(msg.data or b"{}")
            allowed = {"states", "tenant", "account", "user", "partition", "job_ids", "array", "limit", "offset",
                       "order", "after", "steps", "specs"}
            unknown = set(req) - allowed
            if unknown:
                raise ValueError(f"unknown query fields {sorted(unknown)}; allowed: {sorted(allowed)}")
            tenant = _scope(msg.subject)
            if tenant is not None:
                if req.get("tenant") not in (None, "", tenant):
                    raise ValueError(f"tenant {tenant!r} may list only its own jobs, not {req['tenant']!r}'s")
                req["tenant"] = tenant
                if req.get("job_ids"):
                    req["job_ids"] = tenant_keys(tenant, req["job_ids"])
            req["limit"] = self.pager.rows("jobs", req.get("limit", 1000))
            body = await self.projection.query_jobs(**req)
            if tenant is not None:
                as_tenant_sees(tenant, body.get("jobs", ()))
        except (ValueError, TypeError) as exc:
            body = {"error": str(exc)}
        await self._reply(msg, body, "jobs", JOBS_BY_QUEUE if isinstance(req, dict) and req.get("order") == "queue"
                          else JOBS)

    async def _job(self, msg: Any) -> None:
        try:
            req = decode_json(msg.data or b"{}")
            page = {"limit": self.pager.rows("job", req.get("limit", 100_000)), "offset": req.get("offset", 0)}
            tenant = _scope(msg.subject)
            body = {"job": None}
            for job_id in tenant_keys(tenant, [str(req["job_id"])]) if tenant else [str(req["job_id"])]:
                body = await self.projection.query_job(job_id, tenant=tenant, **page)
                if body["job"] is not None:
                    break
            if tenant is not None and body["job"] is not None:
                as_tenant_sees(tenant, [body["job"], *body["attempts"]])
        except (ValueError, TypeError, KeyError) as exc:
            body = {"error": f"bad request: {exc}"}
        await self._reply(msg, body, "job", EVENTS)


def tenant_keys(tenant: str, job_ids: list[str]) -> list[str]:
    """The log keys a tenant's ids may stand for: its job through the intake (``<tenant>:<id>``)
    first, then the id as it is (a job submitted without accounts); the tenant filter keeps
    either to that tenant's own jobs."""
    return [key for job_id in job_ids for key in (job_key(tenant, str(job_id)), str(job_id))]


def as_tenant_sees(tenant: str, rows: Iterable[dict[str, Any]]) -> None:
    """A tenant's answer names its jobs by the ids it gave them (``tenant_view``), in the explanations
    too ("waiting for g-1: not submitted yet", not "acme:g-1")."""
    own = tenant + ":"
    for row in rows:
        if isinstance(row.get("job_id"), str):
            row["job_id"] = tenant_view(tenant, row["job_id"])
        spec = row.get("spec")
        if isinstance(spec, dict):  # its array and the jobs it waits for, by the tenant's ids too
            if isinstance(spec.get("array"), str):
                spec["array"] = tenant_view(tenant, spec["array"])
            for dep in spec.get("dependencies") or ():
                if isinstance(dep, dict) and isinstance(dep.get("job_id"), str):
                    dep["job_id"] = tenant_view(tenant, dep["job_id"])
        for holder in (row, row.get("why")):
            if not isinstance(holder, dict):
                continue
            for field in ("why", "reason"):
                if isinstance(holder.get(field), str) and own in holder[field]:
                    holder[field] = holder[field].replace(own, "")


def _scope(subject: str) -> str | None:
    """The tenant of ``horizon.query.<view>.<tenant>``; None for ``horizon.query.<view>``."""
    parts = subject.split(".")
    return parts[3] if len(parts) == 4 else None
