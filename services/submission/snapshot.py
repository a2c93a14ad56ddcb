"""Submission's state as bytes and back: its snapshots (services/runtime/service.py reads them). Pure.

Without a snapshot a restart folds the whole log: at 1,000,000 queued jobs about two million records
(each job's submission and its verdict), 30-40 s. With one it folds only the records after it.

``dump`` writes every field of ``SubmissionState`` but the derived ones (the per-partition capacity
cache; ``Capacity``'s node counts per shape, rebuilt from its nodes), and refuses a state, a
``Pending`` or a ``TenantBook`` with a field it does not know, so a field added without a line here
fails the tests rather than a restart. What makes it compact:

* the jobs are columns with each distinct spec written once, a job's own values (name, number,
  array index and number) apart (``job_rows.JobColumns``, as scheduling's and inventory's
  snapshots write them);
* ``verdicts`` (every job and array id with its verdict in the log: a million ids at a million jobs)
  is written as its difference from the job table's ids: the ids with a verdict and no job (rejected
  jobs, arrays), and the jobs without a verdict (none in a log submission wrote; kept so that the
  restored set is exact whatever the log holds);
* the inputs not answered yet (submissions, requests, repeats, malformed inputs) and the users'
  identities are events, written as the log has them (``events.codec``), a few at any time.

Maps keep the order they were folded in and sets are written sorted, so equal states give equal bytes.
``load`` returns None for another format or another configuration (the fingerprint), and the runner
then folds the whole log.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from events import catalogue as c
from events.codec import decode, encode
from events.vocabulary import TenantLimits
from services.domain.fairshare import Account
from services.domain.job_rows import JobColumns, columns, read_snapshot, restore_columns
from services.domain.licenses import Licenses
from services.domain.partitions import Partitions, PartitionsData
from services.submission.capacity import Shape
from services.submission.state import Pending

__all__ = ["SNAPSHOT_FORMAT", "dump", "load"]

SNAPSHOT_FORMAT = 4  # 2, 3: queued jobs as rows, then columns, of shared specs; 4: job_rows.JobColumns

_FIELDS = frozenset({"seq", "now", "layout", "layout_seq", "relayed_seq", "jobs", "gpu_models", "capacity", "features",
                     "submissions", "requests", "verdicts", "referenced", "accounts", "class_limits",
                     "account_tenants", "users", "tenants", "malformed", "repeats", "partitions", "numbering",
                     "licenses", "to_relay"})
# Derived, built again after a load: the capacity of each partition, kept until the nodes or the partitions change
_DERIVED = frozenset({"_capacity_epoch", "_partition_capacity"})
_PENDING = ("seq", "time", "tenant", "event", "admin", "targets", "unanswered", "tasks", "scope", "raw", "user",
            "limited")
_BOOK = ("defaults", "limits", "waiting_jobs", "waiting_tasks")
_FAIRSHARE = ("half_life_s", "gpu_weight", "cpu_weight", "memory_weight", "dominant_share")


class _Pending(msgspec.Struct, array_like=True):
    """A ``Pending`` as written: its events as the log has them."""

    seq: int
    time: float
    tenant: str
    event: bytes
    admin: bool
    targets: tuple[str, ...]
    unanswered: list[str]
    tasks: int
    scope: str
    raw: bytes | None
    user: str | None
    limited: bool


class _Book(msgspec.Struct, array_like=True):
    defaults: TenantLimits
    limits: dict[str, TenantLimits]
    waiting_jobs: dict[str, int]
    waiting_tasks: dict[str, int]


class _Snapshot(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    counters: tuple[int, float, int, int, int]  # seq, now, layout, layout_seq, relayed_seq
    jobs: JobColumns
    settled: dict[str, int]
    arrays: dict[str, list[str]]
    checkpointed: list[str]
    verdicts_without_job: list[str]  # verdicts - the table's ids
    jobs_without_verdict: list[str]  # the table's ids - verdicts
    gpu_models: list[tuple[str, str | None]]
    capacity: dict[str, Shape]  # node -> its shape
    features: dict[str, list[str]]
    submissions: dict[str, _Pending]
    requests: dict[int, _Pending]
    repeats: dict[int, _Pending]
    malformed: dict[int, bytes]
    referenced: list[str]
    accounts: list[Account]
    fairshare: dict[str, Any]
    class_limits: dict[str, str]
    account_tenants: dict[str, tuple[str, ...]]
    users: list[bytes]  # UserConfigured, in the order they were folded
    tenants: _Book
    partitions: PartitionsData
    numbering: dict[str, int]
    licenses: tuple[dict[str, int], dict[str, int]]  # totals, used
    to_relay: dict[int, tuple[str, bytes]]


def _check_fields(state: Any) -> None:
    unknown = set(vars(state)) - _FIELDS - _DERIVED
    assert not unknown, f"submission snapshot: SubmissionState has fields it does not write: {sorted(unknown)}"
    pending = tuple(f.name for f in dataclasses.fields(Pending))
    assert pending == _PENDING, f"submission snapshot: Pending's fields are {pending}, it writes {_PENDING}"
    book = tuple(f.name for f in dataclasses.fields(state.tenants))
    assert book == _BOOK, f"submission snapshot: TenantBook's fields are {book}, it writes {_BOOK}"


def _pending_data(p: Pending) -> list[object]:
    return [p.seq, p.time, p.tenant, encode(p.event), p.admin, p.targets, sorted(p.unanswered), p.tasks, p.scope,
            None if p.raw is None else encode(p.raw), p.user, p.limited]


def _pending(p: _Pending) -> Pending:
    return Pending(p.seq, p.time, p.tenant, decode(p.event), p.admin, p.targets, set(p.unanswered), p.tasks, p.scope,
                   None if p.raw is None else decode(p.raw), p.user, p.limited)


def dump(state: Any, fingerprint: str) -> bytes:  # a SubmissionState (core.py imports this module)
    """The whole state, as bytes."""
    _check_fields(state)
    table = state.jobs
    verdicts = state.verdicts
    fs = state.accounts
    book = state.tenants
    return msgspec.msgpack.encode([
        SNAPSHOT_FORMAT, fingerprint, (state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq),
        columns(table.jobs), table.settled, table.arrays, sorted(table.checkpointed),
        sorted(verdicts.difference(table.jobs, table.settled)),
        sorted((table.jobs.keys() | table.settled.keys()) - verdicts),
        sorted(state.gpu_models, key=lambda m: (m[0], m[1] or "")), state.capacity.nodes,
        {node: sorted(features) for node, features in state.features.items()},
        {key: _pending_data(p) for key, p in state.submissions.items()},
        {seq: _pending_data(p) for seq, p in state.requests.items()},
        {seq: _pending_data(p) for seq, p in state.repeats.items()},
        {seq: encode(e) for seq, e in state.malformed.items()},
        sorted(state.referenced), list(fs.accounts.values()), {name: getattr(fs, name) for name in _FAIRSHARE},
        state.class_limits, state.account_tenants, [encode(e) for e in state.users.values()],
        [book.defaults, book.limits, book.waiting_jobs, book.waiting_tasks],
        state.partitions.data(), state.numbering.highest, (state.licenses.totals, state.licenses.used),
        state.to_relay,
    ])


def load(data: bytes, fingerprint: str, state: Any) -> Any:
    """Fill ``state`` (the core's ``initial()``) with what ``dump`` wrote; None when it is from another
    format or configuration."""
    snap = read_snapshot(data, _Snapshot, SNAPSHOT_FORMAT, fingerprint)
    if snap is None:
        return None
    state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq = snap.counters
    table = state.jobs
    restore_columns(table, snap.jobs)
    table.settled, table.arrays, table.checkpointed = snap.settled, snap.arrays, set(snap.checkpointed)
    verdicts = set(table.jobs)
    verdicts.update(table.settled, snap.verdicts_without_job)
    verdicts.difference_update(snap.jobs_without_verdict)
    state.verdicts = verdicts
    state.gpu_models = {(t, v) for t, v in snap.gpu_models}
    capacity = state.capacity
    for node, shape in snap.capacity.items():
        capacity.nodes[node] = shape
        capacity.shapes[shape] = capacity.shapes.get(shape, 0) + 1
    state.features = {node: frozenset(features) for node, features in snap.features.items()}
    state.submissions = {key: _pending(p) for key, p in snap.submissions.items()}
    state.requests = {seq: _pending(p) for seq, p in snap.requests.items()}
    state.repeats = {seq: _pending(p) for seq, p in snap.repeats.items()}
    state.malformed = {seq: decode(e) for seq, e in snap.malformed.items()}
    state.referenced = set(snap.referenced)
    fs = state.accounts
    fs.accounts = {a.name: a for a in snap.accounts}
    for name, value in snap.fairshare.items():
        setattr(fs, name, value)
    state.class_limits, state.account_tenants = snap.class_limits, snap.account_tenants
    users = [decode(e) for e in snap.users]
    state.users = {(e.tenant, e.name): e for e in users if isinstance(e, c.UserConfigured)}
    book = state.tenants
    book.defaults, book.limits = snap.tenants.defaults, snap.tenants.limits
    book.waiting_jobs, book.waiting_tasks = snap.tenants.waiting_jobs, snap.tenants.waiting_tasks
    state.partitions = Partitions.from_data(snap.partitions)
    state.numbering.highest = snap.numbering
    state.licenses = Licenses(snap.licenses[0])
    state.licenses.used = snap.licenses[1]
    state.to_relay = snap.to_relay
    return state
