"""A job table in a snapshot, its queued jobs as columns of their own values around shared specs, and
those whose spec is the very object another table holds for them written as that: preemption's
snapshot (services/domain/preemption/snapshot.py). Pure.

The jobs of a backlog are mostly alike (a tenant's workload, an array's tasks) but for what
submission gives each job: its name (by default its id), its number (Slurm's job id), an array task's
index and its array's number. A job whose fields besides its spec are their defaults (accepted and
not started yet: nearly all of a backlog) is its own values in columns (a list per value, which
decode as plain lists: ``ids``, ``spec_of``, ``names``, ``numbers``, ``array_indexes``,
``array_numbers``, ``states``, ``seqs``, ``times``), where ``spec_of`` indexes a shared spec (its
fields but those four, as ``job_rows.spec_fields`` writes them) that loading decodes and compacts once
and copies for each job with its own four values; a name that is the job's id is None. Any other job
(one that ran, was requeued, holds anything) is a ``job_rows`` row. The table's order is kept
(``others_at``: where those jobs are in it), so ``load(dump(table))`` is the same table and equal
tables give equal bytes.

``job_rows.JobColumns`` (scheduling's, inventory's and submission's snapshots) writes the same
columns; what is here besides is ``like``: preemption's fold and its scheduler's view fold the same
events, so each queued job of its own table holds the very spec object the view holds, and is written
as that (``_LIKE``) and shares it again once loaded: at a million queued jobs nothing of its spec is
decoded or copied twice, and the restored state holds one spec per job instead of two. (Were
``JobColumns`` to take such a ``like``, this module could go.)
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter, itemgetter

import msgspec

from events import catalogue as c
from services.domain.job_rows import JobRow, restore_rows, rows, spec_fields
from services.domain.jobs import STATES, Job, JobTable

__all__ = ["TableData", "table_data", "restore_table"]

_OWN = ("name", "number", "array_index", "array_number")  # a job's own values, the rest of its spec shared
_POSITIONS = sorted(c.JobSpec.__struct_fields__.index(name) for name in _OWN)
# The spans of a spec's values between its own ones (what jobs alike share)
_SHARED = tuple(zip([0, *(p + 1 for p in _POSITIONS)], [*_POSITIONS, len(c.JobSpec.__struct_fields__)]))
_shared_of = itemgetter(*(slice(lo, hi) for lo, hi in _SHARED))  # a spec's values -> those spans
_BLANK = {name: getattr(c.JobSpec(tenant=""), name) for name in _OWN}
_REST = tuple((f.name, f.default) for f in dataclasses.fields(Job)[5:])
_rest_of = attrgetter(*(name for name, _ in _REST))
_REST_DEFAULTS = tuple(default for _, default in _REST)
_INDEX = {state: i for i, state in enumerate(STATES)}
_astuple = msgspec.structs.astuple
_replace = msgspec.structs.replace


class TableData(msgspec.Struct, array_like=True):
    """The queued jobs as columns (one list per value, decoded as plain lists), then the others."""

    specs: list[c.JobSpec]  # the shared specs, their own four values blank
    ids: list[str]
    spec_of: list[int]  # index into ``specs`` (``_LIKE``: the twin's spec)
    names: list[str | None]  # None: the job's id (what submission names a job by default)
    numbers: list[int]
    array_indexes: list[int | None]
    array_numbers: list[int]
    states: list[int]
    seqs: list[int]
    times: list[float]
    others: list[JobRow]  # as job_rows writes them
    others_at: list[int]  # each one's place in the table's order
    settled: dict[str, int]
    arrays: dict[str, list[str]]
    checkpointed: list[str]


_LIKE = -1  # a job's spec: the very spec the same job holds in the other table (``like``)


def table_data(table: JobTable, like: JobTable | None = None) -> list[object]:
    """The table as ``TableData``'s layout. ``like``: another table of the same state whose jobs may hold
    the very same spec objects (preemption's fold and its scheduler's view fold the same events): a
    job whose spec is its job's there is written as that (``_LIKE``), and shares it again once loaded."""
    other = like.jobs if like is not None else {}
    specs: list[dict[str, object]] = []
    known: dict[bytes, int] = {}
    ids: list[str] = []
    spec_of: list[int] = []
    names: list[str | None] = []
    numbers: list[int] = []
    indexes: list[int | None] = []
    array_numbers: list[int] = []
    states: list[int] = []
    seqs: list[int] = []
    times: list[float] = []
    others: dict[str, Job] = {}
    others_at: list[int] = []
    encode = msgspec.msgpack.Encoder().encode
    for at, job in enumerate(table.jobs.values()):
        spec = job.spec
        job_id = job.job_id
        if spec is None or _rest_of(job) != _REST_DEFAULTS:
            others[job_id] = job
            others_at.append(at)
            continue
        twin = other.get(job_id)
        if twin is not None and twin.spec is spec:
            index = _LIKE
        else:
            key = encode(_shared_of(_astuple(spec)))
            index = known.get(key)  # type: ignore[assignment]
            if index is None:
                index = known[key] = len(specs)
                specs.append(spec_fields(_replace(spec, **_BLANK)))
        ids.append(job_id)
        spec_of.append(index)
        names.append(None if spec.name == job_id else spec.name)
        numbers.append(spec.number)
        indexes.append(spec.array_index)
        array_numbers.append(spec.array_number)
        states.append(_INDEX[job.state])
        seqs.append(job.accepted_seq)
        times.append(job.accepted_ts)
    return [specs, ids, spec_of, names, numbers, indexes, array_numbers, states, seqs, times, rows(others),
            others_at, table.settled, table.arrays, sorted(table.checkpointed)]


def restore_table(table: JobTable, data: TableData, like: JobTable | None = None) -> None:
    """Fill an empty table from ``TableData`` (``like``: the other table ``table_data`` was given, restored)."""
    other = like.jobs if like is not None else {}
    specs = [table.shape(spec) for spec in data.specs]
    apart = JobTable()
    restore_rows(apart, data.others, {}, {})
    other_jobs = iter(apart.jobs.values())
    others_at = data.others_at
    next_other = others_at[0] if others_at else -1
    taken = 0
    jobs = table.jobs
    states = STATES
    replace = _replace
    at = 0
    for job_id, index, name, number, array_index, array_number, state, seq, ts in zip(
            data.ids, data.spec_of, data.names, data.numbers, data.array_indexes, data.array_numbers, data.states,
            data.seqs, data.times):
        while at == next_other:
            job = next(other_jobs)
            jobs[job.job_id] = job
            at += 1
            taken += 1
            next_other = others_at[taken] if taken < len(others_at) else -1
        if index == _LIKE:
            spec = other[job_id].spec
        else:
            spec = replace(specs[index], name=job_id if name is None else name, number=number,
                           array_index=array_index, array_number=array_number)
        jobs[job_id] = Job(job_id, spec, states[state], seq, ts)
        at += 1
    for job in other_jobs:
        jobs[job.job_id] = job
    table.settled, table.arrays = data.settled, data.arrays
    table.checkpointed = set(data.checkpointed)
