"""The scheduler's standing as SQLite tables: the queue, nodes and allocations, usage and its history.

``SchedulerView`` (``projections/scheduling.py``) folds the log through the
scheduling and preemption cores; this store materialises what that fold
shows into an aiosqlite database (WAL), so queries are answered with SQL
paging and filters rather than by walking the fold:

================  =============================================================================
table             rows
================  =============================================================================
``queue``         every pending job in scheduling order (``rank`` 1..n), then the held ones:
                  effective priority and its factors, why it waits (``why_kind``: one of the
                  scheduling core's ``WAITING_KINDS``, ``why``: the sentence, and ``why_code``:
                  Slurm's reason code, squeue's ``REASON``), each filter's
                  verdict, its reservation, deadline and restart backoff
``nodes``         every node: state, capacity and use, GPU models, labels, taints, whether it is
                  simulated, how its agent isolates jobs, its unhealthy GPUs and why
``allocations``   every running attempt's share of each node: devices, CPUs, memory
``usage``         the fair-share tree depth first (like ``sshare``): shares, decayed usage, factor,
                  the tenants whose jobs were charged under each node
``usage_history`` every account's usage and factor at each hour boundary of log time
``settings``      the policy, the fair-share half-life and weights, the log time "now"
``tracking``      the last stream sequence the rows show
``fold_state``    the view's fold (``projections/fold_state.py``) at a sequence the rows showed
================  =============================================================================

**One transaction, one sequence.** A flush replaces the derived tables
(queue, nodes, allocations, usage) with what the fold shows at its last
applied sequence ``S``, appends the usage samples taken since the last
flush, and records ``S`` in ``tracking``, all in one transaction: a reader
sees the standing at exactly one sequence, never a mix. Every row is a pure
function of the log up to ``S`` (priorities and factors are computed at the
log's time, not the wall clock), so the database of a projection that was
killed and restarted equals one rebuilt from scratch at the same sequence.

**When.** A flush after an applied batch at most every ``flush_every_s``
(wall time: it is I/O pacing, not a decision; default 0.5 s), and at stop.

**Resuming.** The fold itself is stored too (``fold_state``), in the
transaction of the flush whose rows it produced: with every flush while
taking it is cheap, else at most every ``state_every`` records, and at stop
(``SchedulerView``). A restart loads it and follows the log from the next
sequence; when it is older than the rows (a flush without it), nothing is
written until the fold has passed the rows' sequence, so the tables never go
back in time. A state that cannot be trusted (another format or
configuration, ``projections/fold_state.py``) is ignored and the fold starts
from sequence 1, as a database without one does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiosqlite

from projections.db import open_database, stored_position
from projections.paging import page_fields
from services.domain.preemption.state import PreemptionState
from services.domain.queue.fold import QueueFold
from services.domain.queue.state import SchedulingState
from services.domain.queue.waiting import slurm_reason
from services.domain.fairshare import association
from services.domain.policy import WEIGHT_NAMES, Multifactor, make_policy
from services.domain.jobs import HOLDS_RESOURCES, Job, JobState
from services.domain.qos import qos_class
from services.domain.job_numbers import spec_slurm_id

__all__ = ["StandingStore", "QUEUE_COLUMNS"]

NAME = "standing"
QUEUE_COLUMNS = (
    "job_id rank state tenant account user association name priority_class priority factors gpus gpu_type "
    "cpus_milli memory_bytes nodes tasks_per_node time_limit_s submitted_ts accepted_seq attempt reason why "
    "why_kind reasons reserved_at reserved_nodes deadline_ts not_before_ts borrowed partition qos slurm_id why_code"
).split()
_JSON_QUEUE = {"factors", "reasons", "reserved_nodes"}
NODE_COLUMNS = ("node state cpus_milli cpus_used_milli memory_bytes memory_used_bytes gpus gpus_used gpu_types "
                "labels taints simulated isolation unhealthy cpu_overcommit memory_overcommit drain_migrate "
                "drain_deadline_ts backend").split()
_JSON_NODES = {"gpu_types", "labels", "taints", "unhealthy"}
USAGE_COLUMNS = ("rank account user depth parent raw_shares norm_shares raw_usage norm_usage level_fs fairshare "
                 "running quota borrowing tenants").split()
_JSON_USAGE = {"quota", "tenants"}
ALLOCATION_COLUMNS = ("job_id node attempt state tenant account user device_ids cpus_milli memory_bytes "
                      "borrowed").split()
# The layout of the tables below; a database of another layout is emptied and refilled from the
# log (every table is derived from it). 2: queue.why_kind, usage.tenants, fold_state.
# 3: nodes.simulated, nodes.isolation, nodes.unhealthy. 4: queue.partition. 5: queue.qos (the QoS class),
# nodes.cpu_overcommit, nodes.memory_overcommit. 6: nodes.drain_migrate, nodes.drain_deadline_ts (a drain's options).
# 7: nodes.backend (the execution backend that registered the node). 8: queue.slurm_id (the job's number as
# Slurm's commands show it, services/domain/job_numbers.py). 9: queue.why_code (Slurm's reason code, squeue's REASON).
SCHEMA_VERSION = 9

SCHEMA = """
CREATE TABLE IF NOT EXISTS tracking (projection TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS queue (
    job_id TEXT PRIMARY KEY, rank INTEGER, state TEXT NOT NULL,
    tenant TEXT, account TEXT, user TEXT, association TEXT, name TEXT, priority_class TEXT,
    priority REAL, factors TEXT, gpus INTEGER, gpu_type TEXT, cpus_milli INTEGER, memory_bytes INTEGER,
    nodes INTEGER, tasks_per_node INTEGER, time_limit_s REAL, submitted_ts REAL, accepted_seq INTEGER,
    attempt INTEGER, reason TEXT, why TEXT, why_kind TEXT, reasons TEXT, reserved_at REAL, reserved_nodes TEXT,
    deadline_ts REAL, not_before_ts REAL, borrowed INTEGER, partition TEXT, qos TEXT, slurm_id TEXT, why_code TEXT
);
CREATE INDEX IF NOT EXISTS queue_by_rank ON queue (rank);
CREATE INDEX IF NOT EXISTS queue_by_account ON queue (account, rank);
CREATE INDEX IF NOT EXISTS queue_by_tenant ON queue (tenant, rank);
CREATE TABLE IF NOT EXISTS nodes (
    node TEXT PRIMARY KEY, state TEXT, cpus_milli INTEGER, cpus_used_milli INTEGER, memory_bytes INTEGER,
    memory_used_bytes INTEGER, gpus INTEGER, gpus_used INTEGER, gpu_types TEXT, labels TEXT, taints TEXT,
    simulated INTEGER, isolation TEXT, unhealthy TEXT, cpu_overcommit REAL, memory_overcommit REAL,
    drain_migrate INTEGER, drain_deadline_ts REAL, backend TEXT
);
CREATE TABLE IF NOT EXISTS allocations (
    job_id TEXT NOT NULL, node TEXT NOT NULL, attempt INTEGER, state TEXT, tenant TEXT, account TEXT, user TEXT,
    device_ids TEXT, cpus_milli INTEGER, memory_bytes INTEGER, borrowed INTEGER,
    PRIMARY KEY (job_id, node)
);
CREATE INDEX IF NOT EXISTS allocations_by_node ON allocations (node, job_id);
CREATE TABLE IF NOT EXISTS usage (
    rank INTEGER PRIMARY KEY, account TEXT, user TEXT, depth INTEGER, parent TEXT, raw_shares REAL,
    norm_shares REAL, raw_usage REAL, norm_usage REAL, level_fs REAL, fairshare REAL, running INTEGER,
    quota TEXT, borrowing INTEGER, tenants TEXT
);
CREATE TABLE IF NOT EXISTS usage_history (
    ts REAL NOT NULL, account TEXT NOT NULL, usage REAL, running INTEGER, fairshare REAL,
    PRIMARY KEY (account, ts)
);
CREATE INDEX IF NOT EXISTS usage_history_by_ts ON usage_history (ts, account);
CREATE TABLE IF NOT EXISTS fold_state (projection TEXT PRIMARY KEY, seq INTEGER NOT NULL, data BLOB NOT NULL);
"""
TABLES = ("tracking", "settings", "queue", "nodes", "allocations", "usage", "usage_history", "fold_state")

MAX_LIMIT = 10_000
# The filters each list query takes (request key -> column; a value or a list of values), besides
# limit and offset (PAGING) and the usage history's keys (HISTORY_KEYS).
QUEUE_FILTERS = {"tenant": "tenant", "account": "account", "user": "user", "state": "state", "states": "state",
                 "priority_class": "priority_class", "job_id": "job_id", "partition": "partition"}
NODE_FILTERS = {"state": "state", "states": "state", "node": "node"}  # and gpu_type: one GPU model
ALLOCATION_FILTERS = {"node": "node", "job_id": "job_id", "tenant": "tenant", "account": "account", "user": "user",
                      "state": "state", "states": "state"}
USAGE_FILTERS = {"account": "account", "user": "user"}  # and tenant: one tenant
PAGING = ("limit", "offset")
HISTORY_KEYS = ("history", "from_ts", "to_ts")


def _insert(table: str, columns: list[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"


def _row_dict(columns: list[str], row: tuple[Any, ...], json_columns: set[str]) -> dict[str, Any]:
    out = dict(zip(columns, row, strict=True))
    for name in json_columns:
        if out.get(name) is not None:
            out[name] = json.loads(out[name])
    return out


def _page(request: dict[str, Any]) -> tuple[int, int]:
    limit, offset = int(request.get("limit", 1000)), int(request.get("offset", 0))
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must not be negative")
    return min(limit, MAX_LIMIT), offset


def _paged(offset: int, shown: int, total: int) -> dict[str, Any]:
    """The paging fields of an answer (``projections/paging.py``)."""
    following, ask = page_fields(offset, shown, total)
    return {"total": total, "offset": offset, "next_offset": following, "next": ask}


def _where(request: dict[str, Any], allowed: dict[str, str]) -> tuple[str, list[Any]]:
    """Filters of a request (``{"account": "a"}`` or a list of values) as a SQL WHERE clause."""
    unknown = set(request) - set(allowed) - {*PAGING, *HISTORY_KEYS}
    if unknown:
        raise ValueError(f"unknown filter {sorted(unknown)[0]!r}; filters: {', '.join(sorted(allowed))}")
    clauses, args = [], []
    for key, column in allowed.items():
        value = request.get(key)
        if value is None or value == []:
            continue
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str | int | float) for v in values):
            raise ValueError(f"{key}: give a value or a list of values")
        clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
        args.extend(values)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


class StandingStore:
    """The tables above, written from a ``SchedulerView``'s fold and queried with paging and filters."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self.db: aiosqlite.Connection | None = None
        self.last_seq = 0  # what the tables show

    async def open(self) -> None:
        db = await open_database(self.path, "")
        try:
            async with db.execute("PRAGMA user_version") as cur:
                row = await cur.fetchone()
            if not row or row[0] != SCHEMA_VERSION:
                # Another layout (an older Horizon), or a new file: every table is derived from the
                # log, so drop what is there and let the view refill them from sequence 1.
                for table in TABLES:
                    await db.execute(f"DROP TABLE IF EXISTS {table}")
                await db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            await db.executescript(SCHEMA)
            await db.commit()
            self.last_seq = await stored_position(db, NAME)
        except BaseException:
            await db.close()
            raise
        self.db = db

    async def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            await db.close()  # cancelled on the way, aiosqlite still tells its thread to end

    # ------------------------------------------------------------------ writing

    async def flush(self, core: QueueFold, state: SchedulingState, pstate: PreemptionState,
                    samples: list[tuple[float, str, float, int, float | None]],
                    tenants: dict[str, set[str]] | None = None, fold_state: bytes | None = None) -> bool:
        """Write the standing at ``state.seq`` in one transaction, with ``fold_state`` (the fold
        that made it, ``projections/fold_state.py``) when given; False if the tables already show
        that sequence or a later one (a restarted fold still catching up).

        ``tenants``: association -> the tenants whose jobs were charged to it (the view folds it)."""
        assert self.db is not None
        seq = state.seq
        if seq <= self.last_seq:
            return False
        # Everything is computed before the first await: the fold moves on between awaits.
        queue = queue_rows(core, state)
        nodes, allocations = node_rows(pstate)
        usage = usage_rows(state, tenants or {})
        fs = state.fairshare
        settings = {"policy": state.config.policy, "now": state.now, "half_life_s": fs.half_life_s,
                    "weights": {"gpu": fs.gpu_weight, "cpu": fs.cpu_weight, "memory_gib": fs.memory_weight,
                                "dominant_share": fs.dominant_share}}
        try:
            # BEGIN inside the try: a task cancelled while BEGIN is on its way (a view stopping while
            # its flusher writes) must still roll it back, or the next transaction cannot begin.
            await self.db.execute("BEGIN")
            for table in ("queue", "nodes", "allocations", "usage"):
                await self.db.execute(f"DELETE FROM {table}")
            await self.db.executemany(_insert("queue", QUEUE_COLUMNS), queue)
            await self.db.executemany(_insert("nodes", NODE_COLUMNS), nodes)
            await self.db.executemany(
                "INSERT INTO allocations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", allocations)
            await self.db.executemany(_insert("usage", USAGE_COLUMNS), usage)
            await self.db.executemany("INSERT OR IGNORE INTO usage_history VALUES (?, ?, ?, ?, ?)", samples)
            if fold_state is not None:
                await self._put_state(seq, fold_state)
            await self.db.executemany(
                "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(k, json.dumps(v, sort_keys=True)) for k, v in sorted(settings.items())])
            await self.db.execute(
                "INSERT INTO tracking (projection, last_seq) VALUES (?, ?) "
                "ON CONFLICT(projection) DO UPDATE SET last_seq = excluded.last_seq", (NAME, seq))
            await self.db.commit()
        except BaseException:
            await self.db.rollback()
            raise
        self.last_seq = seq
        return True

    async def _put_state(self, seq: int, data: bytes) -> None:
        assert self.db is not None
        await self.db.execute(
            "INSERT INTO fold_state (projection, seq, data) VALUES (?, ?, ?) "
            "ON CONFLICT(projection) DO UPDATE SET seq = excluded.seq, data = excluded.data", (NAME, seq, data))

    async def save_state(self, seq: int, data: bytes) -> bool:
        """Store the fold at ``seq`` on its own, when the rows already show exactly ``seq`` (a
        stop after a flush that did not carry it); False otherwise."""
        assert self.db is not None
        if seq != self.last_seq:
            return False
        try:
            # BEGIN inside the try: a task cancelled while BEGIN is on its way (a view stopping while
            # its flusher writes) must still roll it back, or the next transaction cannot begin.
            await self.db.execute("BEGIN")
            await self._put_state(seq, data)
            await self.db.commit()
        except BaseException:
            await self.db.rollback()
            raise
        return True

    async def stored_state(self) -> tuple[int, bytes] | None:
        """(sequence, bytes) of the fold stored with the rows, if any and not past them."""
        assert self.db is not None
        async with self.db.execute("SELECT seq, data FROM fold_state WHERE projection = ?", (NAME,)) as cur:
            row = await cur.fetchone()
        if row is None or not 0 < row[0] <= self.last_seq:
            return None
        return int(row[0]), bytes(row[1])

    # ------------------------------------------------------------------ queries

    async def _settings(self) -> dict[str, Any]:
        assert self.db is not None
        async with self.db.execute("SELECT key, value FROM settings") as cur:
            return {k: json.loads(v) async for k, v in cur}

    async def _count(self, table: str, where: str, args: list[Any]) -> int:
        assert self.db is not None
        async with self.db.execute(f"SELECT COUNT(*) FROM {table}{where}", args) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def query_queue(self, request: dict[str, Any]) -> dict[str, Any]:
        """Pending jobs in scheduling order, then held ones; filters tenant, account, user, state,
        priority_class, job_id (a value or a list); ``limit`` and ``offset`` page."""
        assert self.db is not None
        limit, offset = _page(request)
        where, args = _where(request, QUEUE_FILTERS)
        sql = (f"SELECT {', '.join(QUEUE_COLUMNS)} FROM queue{where} "
               "ORDER BY rank IS NULL, rank, accepted_seq, job_id LIMIT ? OFFSET ?")
        async with self.db.execute(sql, [*args, limit, offset]) as cur:
            rows = [_row_dict(QUEUE_COLUMNS, r, _JSON_QUEUE) async for r in cur]
        settings = await self._settings()
        return {"jobs": rows, **_paged(offset, len(rows), await self._count("queue", where, args)),
                "last_seq": self.last_seq, "now": settings.get("now"), "policy": settings.get("policy")}

    async def query_nodes(self, request: dict[str, Any]) -> dict[str, Any]:
        """Nodes by name with their running jobs; filters state, node, gpu_type; ``limit``/``offset``."""
        assert self.db is not None
        limit, offset = _page(request)
        gpu_type = request.get("gpu_type")
        rest = {k: v for k, v in request.items() if k != "gpu_type"}
        where, args = _where(rest, NODE_FILTERS)
        if gpu_type is not None:
            if not isinstance(gpu_type, str):
                raise ValueError("gpu_type: give one GPU model")
            where += (" AND " if where else " WHERE ") + \
                "EXISTS (SELECT 1 FROM json_each(nodes.gpu_types) WHERE value = ? OR value LIKE ? || '-%')"
            args += [gpu_type, gpu_type]
        async with self.db.execute(f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes{where} ORDER BY node LIMIT ? OFFSET ?",
                                   [*args, limit, offset]) as cur:
            rows = [_row_dict(NODE_COLUMNS, r, _JSON_NODES) async for r in cur]
        for row in rows:
            row["simulated"] = bool(row["simulated"])
            row["drain_migrate"] = bool(row["drain_migrate"])
            async with self.db.execute("SELECT job_id FROM allocations WHERE node = ? ORDER BY job_id",
                                       (row["node"],)) as cur:
                row["jobs"] = [r[0] async for r in cur]
        return {"nodes": rows, **_paged(offset, len(rows), await self._count("nodes", where, args)),
                "last_seq": self.last_seq}

    async def query_allocations(self, request: dict[str, Any]) -> dict[str, Any]:
        """Running attempts' shares of nodes; filters node, job_id, tenant, account, user, and state
        (``SCHEDULED``: placed, its agent has not reported the start yet; ``RUNNING``); paged."""
        assert self.db is not None
        limit, offset = _page(request)
        where, args = _where(request, ALLOCATION_FILTERS)
        async with self.db.execute(f"SELECT {', '.join(ALLOCATION_COLUMNS)} FROM allocations{where} "
                                   "ORDER BY node, job_id LIMIT ? OFFSET ?", [*args, limit, offset]) as cur:
            rows = [_row_dict(ALLOCATION_COLUMNS, r, {"device_ids"}) async for r in cur]
        return {"allocations": rows, **_paged(offset, len(rows), await self._count("allocations", where, args)),
                "last_seq": self.last_seq}

    async def query_usage(self, request: dict[str, Any]) -> dict[str, Any]:
        """The fair-share tree (like sshare), depth first; filters account, user, tenant (the nodes
        of the tree its jobs were charged under).

        Without ``history``, ``limit``/``offset`` page the rows (``total`` counts them). With
        ``history``, the rows come whole (``account`` then picks the history, not the rows) and
        ``limit``/``offset`` page the hourly standing of the accounts asked (``from_ts``, ``to_ts``
        bound it; ``history_total`` counts it, ``history_offset`` and ``history_next_offset`` place the
        page, and ``next`` is then the history's). Paging fields: ``projections/paging.py``."""
        assert self.db is not None
        settings = await self._settings()
        history = bool(request.get("history"))
        tenant = request.get("tenant")
        if tenant is not None and not isinstance(tenant, str):
            raise ValueError("tenant: give one tenant")
        rest = {k: v for k, v in request.items() if k != "tenant" and (not history or k != "account")}
        where, args = _where(rest, USAGE_FILTERS)
        if tenant is not None:
            where += (" AND " if where else " WHERE ") + _HAS_TENANT
            args.append(tenant)
        page = ""
        limit, offset = _page(request if not history else {})
        if not history:
            page = " LIMIT ? OFFSET ?"
        async with self.db.execute(f"SELECT {', '.join(USAGE_COLUMNS)} FROM usage{where} ORDER BY rank{page}",
                                   [*args, limit, offset] if page else args) as cur:
            rows = [_row_dict(USAGE_COLUMNS, r, _JSON_USAGE) async for r in cur]
        for row in rows:
            row["borrowing"] = bool(row["borrowing"])
            del row["rank"]
        total = await self._count("usage", where, args)
        body: dict[str, Any] = {"rows": rows, **_paged(0 if history else offset, len(rows), total),
                                "now": settings.get("now", 0.0),
                                "half_life_s": settings.get("half_life_s"), "weights": settings.get("weights", {}),
                                "last_seq": self.last_seq}
        if history:
            limit, offset = _page({"limit": request.get("limit", MAX_LIMIT), "offset": request.get("offset", 0)})
            clauses, hargs = [], []
            if request.get("account") is not None:
                clauses.append("account = ?")
                hargs.append(str(request["account"]))
            if tenant is not None:
                clauses.append("account IN (SELECT CASE WHEN user != '' THEN account || '/' || user ELSE account END "
                               f"FROM usage WHERE {_HAS_TENANT})")
                hargs.append(tenant)
            for key, op in (("from_ts", ">="), ("to_ts", "<=")):
                if request.get(key) is not None:
                    clauses.append(f"ts {op} ?")
                    hargs.append(float(request[key]))
            hwhere = (" WHERE " + " AND ".join(clauses)) if clauses else ""
            async with self.db.execute(f"SELECT ts, account, usage, running, fairshare FROM usage_history{hwhere} "
                                       "ORDER BY ts, account LIMIT ? OFFSET ?", [*hargs, limit, offset]) as cur:
                body["history"] = [{"ts": r[0], "account": r[1], "usage": r[2], "running": r[3], "fairshare": r[4]}
                                   async for r in cur]
            history_total = await self._count("usage_history", hwhere, hargs)
            following, body["next"] = page_fields(offset, len(body["history"]), history_total)
            body.update(history_total=history_total, history_offset=offset, history_next_offset=following)
        return body


_HAS_TENANT = "EXISTS (SELECT 1 FROM json_each(usage.tenants) WHERE value = ?)"


# ---------------------------------------------------------------------------- rows (pure)


def queue_rows(core: QueueFold, state: SchedulingState) -> list[tuple[Any, ...]]:
    """The queue at the fold's sequence: pending jobs ranked in scheduling order, then held jobs."""
    ctx = core.context(state)
    policy = make_policy(state.config.policy)
    multifactor = isinstance(policy, Multifactor)
    ordered = core.ordered_queue(state, ctx=ctx)
    held = sorted((j for j in state.jobs.jobs.values() if j.state is JobState.HELD),
                  key=lambda j: (j.accepted_seq, j.job_id))
    waiting = core.waiting_all(state, ordered, ctx)
    out = []
    for rank, job in [*enumerate(ordered, 1), *((None, j) for j in held)]:
        spec = job.spec
        if spec is None:
            continue
        priority = factors = None
        if multifactor:
            priority = policy.priority(job, ctx)
            values = policy.factors(job, ctx)
            weights = ctx.config.weights
            factors = json.dumps({name: {"value": values[name], "weight": weights[name],
                                         "weighted": values[name] * weights[name]} for name in WEIGHT_NAMES})
        reasons = json.dumps([{"filter": r.filter, "nodes": r.nodes, "reason": r.reason} for r in job.last_block])
        gpu_type = (spec.gpu_type + (f"-{spec.gpu_variant}" if spec.gpu_variant else "")) if spec.gpu_type else None
        out.append((
            job.job_id, rank, job.state.value, spec.tenant, spec.account, spec.user, association(spec), spec.name,
            spec.priority_class, priority, factors, spec.total_gpus, gpu_type,
            spec.cpus_milli, spec.memory_bytes, spec.nodes, spec.tasks_per_node, spec.time_limit_s,
            job.accepted_ts or None, job.accepted_seq or None, job.attempt, job.reason or None,
            waiting[job.job_id].why, waiting[job.job_id].kind, reasons, job.reserved_at,
            json.dumps(list(job.reserved_nodes)) if job.reserved_nodes else None,
            state.deadlines.get(job.job_id), job.not_before_ts if job.not_before_ts > state.now else None,
            int(job.borrowed), spec.partition, qos_class(spec), spec_slurm_id(job.job_id, spec) or None,
            slurm_reason(waiting[job.job_id].kind, waiting[job.job_id].code),
        ))
    return out


def usage_rows(state: SchedulingState, tenants: dict[str, set[str]]) -> list[tuple[Any, ...]]:
    """The fair-share tree (``FairShare.report``), each node with the tenants whose jobs were
    charged under it (those of its associations, gathered up the tree)."""
    fs = state.fairshare
    under: dict[str, set[str]] = {}
    for leaf, names in tenants.items():
        if leaf in fs.accounts:
            for acc in fs.path(leaf):
                under.setdefault(acc.name, set()).update(names)
    out = []
    for i, r in enumerate(fs.report(state.now), 1):
        name = f"{r['account']}/{r['user']}" if r["user"] else str(r["account"])
        out.append((i, r["account"], r["user"], r["depth"], r["parent"], r["raw_shares"], r["norm_shares"],
                    r["raw_usage"], r["norm_usage"], r["level_fs"], r["fairshare"], r["running"],
                    json.dumps(r["quota"], sort_keys=True), int(bool(r["borrowing"])),
                    json.dumps(sorted(under.get(name, ())))))
    return out


def node_rows(pstate: PreemptionState) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Nodes and allocations at the fold's sequence (the cluster ledger the services keep)."""
    nodes, allocations = [], []
    for node in pstate.cluster.sorted_nodes():
        models = sorted({f"{d.type}-{d.variant}" if d.variant else d.type for d in node.gpus.values()})
        # what its backend's own work holds (Node.foreign) is used too, as its backend shows it
        nodes.append((node.name, node.status, node.cpus_milli, node.used_cpus_milli + node.foreign_cpus_milli,
                      node.memory_bytes, node.used_memory_bytes + node.foreign_memory_bytes, len(node.gpus),
                      len(set(node.used_devices) | node.foreign_devices), json.dumps(models),
                      json.dumps(dict(sorted(node.labels.items()))),
                      json.dumps([{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]),
                      int(node.simulated), node.isolation, json.dumps(node.unhealthy), node.cpu_overcommit,
                      node.memory_overcommit, int(node.drain_migrate), node.drain_deadline_ts or None,
                      node.backend))
        for job_id in sorted(node.jobs):
            job: Job | None = pstate.jobs.get(job_id)
            if job is None or job.state not in HOLDS_RESOURCES:
                continue
            spec = job.spec
            for alloc in job.allocations:
                if alloc.node != node.name:
                    continue
                allocations.append((job_id, node.name, job.attempt, job.state.value,
                                    spec.tenant if spec else None, spec.account if spec else None,
                                    spec.user if spec else None, json.dumps(list(alloc.device_ids)),
                                    alloc.cpus_milli, alloc.memory_bytes, int(job.borrowed)))
    return nodes, allocations
