"""The jobs read model's tables, and how a job, an attempt, a step and an event become their rows.

Tables (``SCHEMA``): ``jobs`` (one row per job, ``COLUMNS``), ``attempts``
(``ATTEMPT_COLUMNS``), ``steps`` (``JobStepStarted``/``JobStepEnded``,
``STEP_COLUMNS``), ``decisions`` (every decision with its basis), ``job_events``
(each job's history) and ``tracking`` (the position, written in the same
transaction as the rows: ``projections/jobs.py``). Everything here is pure:
a row is a function of the fold and the event.
"""

from __future__ import annotations

import json
from typing import Any

import aiosqlite
import msgspec

from events import catalogue as c
from events.base import Event
from services.domain.job_numbers import number_key
from services.domain.jobs import Job, JobState
from services.domain.policy import CLASS_RANK
from services.domain.steps import step_state

__all__ = [
    "NAME", "SCHEMA", "COLUMNS", "ATTEMPT_COLUMNS", "STEP_COLUMNS", "UPSERT", "UPSERT_ATTEMPT", "UPSERT_STEP",
    "HOLDS", "Asked", "QosFields", "job_row", "attempt_row", "attempt_answer", "step_row", "summary", "add_columns",
    "spec_decoder", "qos_fields", "alloc_list", "asked_decoder",
]

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
    partition TEXT,
    number_key TEXT
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

COLUMNS = (
    "job_id tenant account user name state priority_class class_rank cpus_milli memory_bytes gpus gpu_type "
    "nodes tasks_per_node time_limit_s attempt node allocation submitted_ts accepted_seq scheduled_ts "
    "started_ts ended_ts exit_code reason spec updated_seq partition number_key"
).split()
UPSERT = (
    f"INSERT INTO jobs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)}) "
    f"ON CONFLICT(job_id) DO UPDATE SET {', '.join(f'{col}=excluded.{col}' for col in COLUMNS[1:])}"
)
spec_encoder = msgspec.json.Encoder()
spec_decoder = msgspec.json.Decoder(c.JobSpec)


class QosFields(msgspec.Struct):
    """The fields of a stored spec its QoS class is derived from, an elastic gang's least number of
    nodes (``min_nodes``, which a row shows beside ``nodes``), the signals it is sent before a stop
    (checkpoint, time limit) and its number; the rest is not decoded."""

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
    # its number, Slurm's job id, and as Slurm's commands show it (``4213_7`` for a task)
    number: int = 0
    array_number: int = 0
    array_index: int | None = None

    @property
    def gpus_on_node(self) -> int:
        return self.gpus_per_node or self.gpus * self.tasks_per_node


qos_fields = msgspec.json.Decoder(QosFields)
alloc_list = msgspec.json.Decoder(list[c.NodeAllocation])


class Asked(msgspec.Struct):
    """What a ``JobSubmitted`` named that its rejected job's row keeps (a rejected job has no spec): the
    fields ``horizon jobs`` shows. Read from the submission the ``JobRejected`` answers."""

    account: str = c.DEFAULT_ACCOUNT  # JobSubmitted's defaults: what a submission without them asked
    user: str = ""
    name: str = ""
    priority_class: str = "normal"


asked_decoder = msgspec.json.Decoder(Asked)


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
        # the submitting environment (sbatch --export) stays in the log: the read model answers no one with it
        spec_encoder.encode(msgspec.structs.replace(spec, submit_env=None) if spec.submit_env else spec) if spec else None,
        seq,
        spec.partition if spec else None,  # "" for a job of no partition
        # its number as named in its scope (``12``, ``acme:12``: services/domain/job_numbers.py), found by
        # the ``numbers`` filter; None for a job without one
        number_key(job.job_id, spec.number) if spec and spec.number else None,
    )


HOLDS = frozenset({JobState.SCHEDULED, JobState.RUNNING})
ATTEMPT_COLUMNS = ("job_id attempt nodes allocation scheduled_ts started_ts ended_ts outcome exit_code reason "
                    "backfilled borrowed updated_seq").split()
UPSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(ATTEMPT_COLUMNS)}) VALUES ({', '.join('?' for _ in ATTEMPT_COLUMNS)}) "
    f"ON CONFLICT(job_id, attempt) DO UPDATE SET "
    f"{', '.join(f'{col}=COALESCE(excluded.{col}, attempts.{col})' for col in ATTEMPT_COLUMNS[2:])}"
)


def attempt_row(job: Job, outcome: str, event: Event, seq: int, before: tuple[Any, ...] | None) -> tuple[Any, ...]:
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


def attempt_answer(row: dict[str, Any]) -> dict[str, Any]:
    """An ``attempts`` row as ``horizon.query.job`` answers it, in the job row's words: ``node`` the
    attempt's nodes comma-separated (the column ``nodes``), ``nodes`` how many (its allocation's)."""
    allocation = json.loads(row["allocation"]) if row["allocation"] else []
    names = row.pop("nodes")
    out = {"job_id": row.pop("job_id"), "attempt": row.pop("attempt"), "node": names,
           "nodes": len(allocation) or (len(names.split(",")) if names else 0), **row}
    out["allocation"] = allocation
    out["backfilled"], out["borrowed"] = bool(row["backfilled"]), bool(row["borrowed"])
    return out


STEP_COLUMNS = ("job_id attempt step name nodes tasks tasks_per_node gpus started_ts ended_ts state exit_code "
                 "signal reason updated_seq").split()
# A step's row: what JobStepStarted said, completed by JobStepEnded (an end is never undone by a late start).
UPSERT_STEP = (
    f"INSERT INTO steps ({', '.join(STEP_COLUMNS)}) VALUES ({', '.join('?' for _ in STEP_COLUMNS)}) "
    f"ON CONFLICT(job_id, attempt, step) DO UPDATE SET "
    + ", ".join(f"{col}=COALESCE(excluded.{col}, steps.{col})" for col in STEP_COLUMNS[3:]
                if col not in ("state", "updated_seq"))
    + ", state=CASE WHEN steps.ended_ts IS NOT NULL AND excluded.ended_ts IS NULL THEN steps.state "
      "ELSE excluded.state END, updated_seq=excluded.updated_seq"
)


def step_row(event: c.JobStepStarted | c.JobStepEnded, seq: int, time: float,
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


def summary(event: Event) -> str:
    body = msgspec.to_builtins(event)
    for key in ("id", "type", "v", "ts", "causation_id", "correlation_id", "source", "spec", "job_id"):
        body.pop(key, None)
    return json.dumps(body, sort_keys=True)



async def add_columns(db: aiosqlite.Connection) -> None:
    """Columns added since a database was made (the rows of older jobs keep NULL there): ``partition``,
    ``number_key`` (and its index)."""
    async with db.execute("PRAGMA table_info(jobs)") as cur:
        have = {row[1] for row in await cur.fetchall()}
    for column in ("partition", "number_key"):
        if column not in have:
            await db.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")
    await db.execute("CREATE INDEX IF NOT EXISTS jobs_by_number ON jobs (number_key)")
    await db.commit()
