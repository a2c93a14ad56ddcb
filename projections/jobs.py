"""The jobs read model: one row per job, its history, attempts, steps and the decisions, in SQLite.

Kept current from the log by ``JobsProjection.start`` (the reading loop of
``services/runtime/follow.py``, from the stored position):

* the position (last applied stream sequence) is stored in the table
  ``tracking`` **in the same transaction** as the rows it produced, so a
  projection killed at any point resumes exactly where its rows end, and a
  restarted one is identical to one rebuilt from scratch;
* job state follows the same fold as the services (``services.domain.jobs``),
  so the read model cannot disagree with what the scheduler believes;
* writes are batched (one transaction per batch of events, ``executemany``),
  WAL journal, ``synchronous=NORMAL``: SQLite is then far from the bottleneck.

The parts, one file each: the tables and how a job, an attempt or a step
becomes a row (``projections/job_rows.py``); the queries the CLI asks
(``projections/job_queries.py``); their NATS request/reply server
(``projections/job_server.py``); what a tenant may see, and its feed of its
jobs' events (``projections/tenants.py``). This projection hands each listener
the records of a committed batch it applied live (not the history it catches
up on) with the tenant whose feed gets each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from events import catalogue as c
from events.base import Event
from projections.db import open_database, stored_position
from projections.job_queries import JobQueries
from projections.job_rows import (
    HOLDS, NAME, SCHEMA, UPSERT, UPSERT_ATTEMPT, UPSERT_STEP, Asked, add_columns, alloc_list, asked_decoder,
    attempt_row, job_row, spec_decoder, step_row, summary,
)
from projections.tenants import feed_tenant
from services.domain.jobs import Job, JobState, JobTable
from services.domain.protocol import Record
from services.runtime.consume import readable
from services.runtime.follow import LogFollow, read_through
from services.runtime.log import READ_MODEL_LINGER_S, EventLog

__all__ = ["JobsProjection"]

Listener = Callable[[list[tuple[str, Record]]], Awaitable[None]]


@dataclass(slots=True)
class _Batch:
    """What one batch changes, gathered before its one transaction."""

    last: int  # the last sequence folded
    changed: dict[str, tuple[Job, int]] = field(default_factory=dict)  # job -> (job, seq that last changed it)
    history: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: dict[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)
    decisions: list[tuple[Any, ...]] = field(default_factory=list)
    steps: dict[tuple[str, int, int], tuple[Any, ...]] = field(default_factory=dict)
    feed: list[tuple[str, Record]] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)  # a job rejected at submission -> its submission's seq


class JobsProjection(JobQueries):
    """The jobs read model kept current from the log (module docstring); its queries: ``JobQueries``."""

    def __init__(self, log_: EventLog, path: Path | str) -> None:
        self.log = log_
        self.path = str(path)
        self.db: aiosqlite.Connection | None = None
        self.jobs = JobTable()
        self.last_seq = 0
        self.ready = asyncio.Event()
        self._follower: LogFollow | None = None
        self.make_follower: Any = LogFollow  # or a reader shared with the other parts of the process (fanout.py)
        self._tenants: dict[str, str] = {}
        # The tenant feed: records from ``feed_from`` on (live), handed to each listener after the
        # batch is committed as (tenant, record).
        self.feed_from = 0
        self.listeners: list[Listener] = []

    async def open(self) -> None:
        self.db = await open_database(self.path, SCHEMA)
        await add_columns(self.db)
        self.last_seq = await stored_position(self.db, NAME)
        # The in-memory fold is rebuilt from the rows, not from the log: rows and position agree.
        async with self.db.execute(
            "SELECT job_id, state, attempt, allocation, spec, accepted_seq, submitted_ts, scheduled_ts, started_ts, "
            "ended_ts, reason, exit_code, tenant FROM jobs"
        ) as cur:
            async for r in cur:
                job = Job(
                    r[0],
                    spec_decoder.decode(r[4]) if r[4] else None,
                    JobState(r[1]),
                    accepted_seq=r[5] or 0,
                    accepted_ts=r[6] or 0.0,
                    attempt=r[2],
                    allocations=tuple(alloc_list.decode(r[3])) if r[3] else (),
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
        changes = _Batch(self.last_seq)
        for record, event in readable(batch, self.last_seq):
            changes.last = record.seq
            if event is not None:
                self._fold(changes, record, event)
        if changes.last == self.last_seq:
            return
        await self._commit(changes)
        self.last_seq = changes.last
        if changes.feed:
            for listener in self.listeners:
                await listener(changes.feed)

    def _fold(self, changes: _Batch, record: Record, event: Event) -> None:
        """One event into the fold and into what the batch will write."""
        basis = getattr(event, "basis_seq", None)
        if basis is not None and event.source and not event.source.startswith(("agent", "clock")):
            parts = record.subject.split(".")
            changes.decisions.append((record.seq, parts[2] if len(parts) > 2 else event.source, event.event_type,
                                      parts[4] if len(parts) > 4 else None, basis, record.time, event.id))
        if isinstance(event, c.InputRejected):  # a verdict about an input, not about a job
            self._feed(changes, record, feed_tenant(event, None, None))
            return
        job_id = getattr(event, "job_id", None)
        if not isinstance(job_id, str) or not job_id:
            return
        if isinstance(event, c.JobRejected):
            self._tenants[job_id] = event.tenant
            if event.submitted_seq and not self.jobs.known(job_id):
                changes.rejected[job_id] = event.submitted_seq
        if isinstance(event, (c.JobStepStarted, c.JobStepEnded)):
            key = (job_id, event.attempt, event.step)
            changes.steps[key] = step_row(event, record.seq, record.time, changes.steps.get(key))
        before = self.jobs.get(job_id)
        snapshot = (before.state, before.attempt, before.reason, before.spec) if before else None
        tr = self.jobs.apply(event, record.seq, record.time)
        attempts = changes.attempts
        if tr is not None and (tr.after in HOLDS or tr.before in HOLDS) and tr.job.attempt:
            attempts[(job_id, tr.job.attempt)] = attempt_row(tr.job, tr.after.value, event, record.seq,
                                                             attempts.get((job_id, tr.job.attempt)))
        job = self.jobs.get(job_id)
        if isinstance(event, c.JobResized) and job is not None and job.state in HOLDS \
                and job.attempt == event.attempt:  # an elastic job's nodes changed: its rows show them
            changes.changed[job_id] = (job, record.seq)
            attempts[(job_id, job.attempt)] = attempt_row(job, job.state.value, event, record.seq,
                                                          attempts.get((job_id, job.attempt)))
        if job is not None and (snapshot != (job.state, job.attempt, job.reason, job.spec)):
            # The row's version is the event's sequence, not the batch's: how the log was cut
            # into batches (a restart, a slow reader) must not show in the rows.
            changes.changed[job_id] = (job, record.seq)
        if job is not None and not isinstance(event, c.SchedulingCycleCompleted):
            changes.history.append((job_id, record.seq, event.event_type, record.time, event.source, summary(event)))
        self._feed(changes, record, feed_tenant(event, job, self._tenants.get(job_id)))

    def _feed(self, changes: _Batch, record: Record, tenant: str | None) -> None:
        """Into the tenant feed: a record applied live (``feed_from`` on), if a tenant gets it and someone listens."""
        if tenant is not None and self.listeners and record.seq >= self.feed_from:
            changes.feed.append((tenant, record))

    async def _commit(self, changes: _Batch) -> None:
        """The batch's rows, history, attempts, steps, decisions and position: one transaction."""
        assert self.db is not None
        asked = await self._asked(changes.rejected) if changes.rejected else {}
        rows = [job_row(job, seq, self._tenants.get(job_id, ""), asked.get(job_id))
                for job_id, (job, seq) in changes.changed.items()]
        try:
            # BEGIN inside the try: a task cancelled while BEGIN is on its way (a view stopping while
            # its flusher writes) must still roll it back, or the next transaction cannot begin.
            await self.db.execute("BEGIN")
            if rows:
                await self.db.executemany(UPSERT, rows)
            if changes.history:
                await self.db.executemany("INSERT OR IGNORE INTO job_events VALUES (?, ?, ?, ?, ?, ?)",
                                          changes.history)
            if changes.attempts:
                await self.db.executemany(UPSERT_ATTEMPT, list(changes.attempts.values()))
            if changes.steps:
                await self.db.executemany(UPSERT_STEP, list(changes.steps.values()))
            if changes.decisions:
                await self.db.executemany("INSERT OR IGNORE INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?)",
                                          changes.decisions)
            await self.db.execute(
                "INSERT INTO tracking (projection, last_seq) VALUES (?, ?) "
                "ON CONFLICT(projection) DO UPDATE SET last_seq = excluded.last_seq",
                (NAME, changes.last),
            )
            await self.db.commit()
        except BaseException:
            await self.db.rollback()
            raise

    async def _asked(self, rejected: dict[str, int]) -> dict[str, Asked]:
        """What the submissions of jobs rejected in a batch named (``Asked``), read from the log in one
        pass over their sequences (inputs are on ``horizon.in.>``, which the follower does not read).
        A record that cannot be read leaves its row as the rejection alone makes it."""
        wanted = {seq: job_id for job_id, seq in rejected.items()}
        found: dict[str, Asked] = {}

        def note(records: list[Record]) -> None:
            for record in records:
                if record.seq in wanted:
                    try:
                        found[wanted[record.seq]] = asked_decoder.decode(record.data)
                    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # a body as sent
                        pass

        await read_through(self.log, note, from_seq=min(wanted), until_seq=max(wanted), subjects=("horizon.in.>",))
        return found

    async def start(self) -> None:
        """Follow the log from the stored position; what it holds already is history, not news."""
        if self.db is None:
            await self.open()
        self._follower = self.make_follower(self.log, self.apply, from_seq=self.last_seq + 1,
                                            subjects=("horizon.evt.>",), linger_s=READ_MODEL_LINGER_S,
                                            name="horizon-jobs-view")
        await self._follower.start()  # reads the log's end; the catch-up runs from the next await on
        self.feed_from = self._follower.end + 1
        self.ready.set()

    async def wait(self) -> None:
        assert self._follower is not None, "start() first"
        await self._follower.wait()

    async def stop(self) -> None:
        try:
            if self._follower is not None:
                await self._follower.stop()
        finally:  # whatever cut the stop short: an open database's thread keeps the process alive
            db, self.db = self.db, None
            if db is not None:
                await db.close()
