"""A job table's jobs as compact columns, and a cluster's nodes, for snapshots (the scheduling, placement,
inventory and preemption states). Pure.

A ``Job`` written as a dataclass is a map of 19 named fields around a spec that is a map of
71; a queued job is nearly all defaults. ``JobColumns`` holds each field as a column: a job's state,
sequence and time, and, only when one of the job's other fields is not its default, a map of those
fields (``_Rest``); each distinct spec is written once, as a map of its fields that are not their
defaults (a queued job of the memory benchmark: 6 of 71, 82 bytes against 940), and each job points
at it with only its own values beside (``OWN``). Decoding fills the defaults back, so
``restore_columns(columns(jobs))`` is the same jobs, and equal jobs give equal bytes (fields in
declaration order). (Placement wrote a row per job, each with its spec, until its snapshot format 4:
68 MB and a 5.4 s restart at a million queued jobs.)
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TypeVar

from operator import attrgetter, itemgetter

import msgspec

from events import catalogue as c
from services.domain.cluster import Cluster, Node
from services.domain.jobs import STATES, Job, JobTable

T = TypeVar("T")

__all__ = ["OWN", "JobColumns", "columns", "node_data", "read_snapshot", "restore_columns", "restore_nodes",
           "spec_fields"]

_NEVER = object()  # the "default" of a required field: unequal to every value


def _spec_defaults() -> tuple[object, ...]:
    out: list[object] = []
    for f in msgspec.inspect.type_info(c.JobSpec).fields:
        if f.required:
            out.append(_NEVER)
        elif f.default_factory is not msgspec.NODEFAULT:
            out.append(f.default_factory())
        else:
            out.append(f.default)
    return tuple(out)


_NAMES: tuple[str, ...] = c.JobSpec.__struct_fields__
_DEFAULTS = _spec_defaults()
# Compared a slice at a time (one C-level tuple comparison each): only a slice that differs is walked
_SLICES = tuple((_NAMES[i:i + 8], _DEFAULTS[i:i + 8], i, min(i + 8, len(_NAMES))) for i in range(0, len(_NAMES), 8))
_astuple = msgspec.structs.astuple


def spec_fields(spec: c.JobSpec) -> dict[str, object]:
    """The spec's fields that are not their defaults, in declaration order."""
    values = _astuple(spec)
    out: dict[str, object] = {}
    for names, defaults, lo, hi in _SLICES:
        part = values[lo:hi]
        if part != defaults:
            for name, value, default in zip(names, part, defaults):
                if value != default:
                    out[name] = value
    return out


def _rest_struct() -> type[msgspec.Struct]:
    """``_Rest``: a struct of ``Job``'s fields after the first five, each with ``Job``'s type and default
    (derived from ``Job`` itself, so the two cannot drift apart)."""
    fields = dataclasses.fields(Job)
    assert [f.name for f in fields[:5]] == ["job_id", "spec", "state", "accepted_seq", "accepted_ts"], \
        "job_rows: the columns' first five are no longer Job's first five fields"
    hints = typing.get_type_hints(Job)
    rest = []
    for f in fields[5:]:
        assert f.default is not dataclasses.MISSING, f"job_rows: Job.{f.name} has no plain default"
        rest.append((f.name, hints[f.name], f.default))
    return msgspec.defstruct("_Rest", rest, omit_defaults=True, module=__name__)


# A job's fields after the first five, each its default unless written.
_Rest = _rest_struct()


_REST_NAMES: tuple[str, ...] = _Rest.__struct_fields__
_REST_DEFAULTS = msgspec.structs.astuple(_Rest())
_rest_of = attrgetter(*_REST_NAMES)
_INDEX = {state: i for i, state in enumerate(STATES)}


class JobColumns(msgspec.Struct, array_like=True):
    """A table's jobs as columns, their specs held once (``columns`` writes it as a plain array).

    A backlog's jobs are mostly alike (a tenant's workload, an array's tasks) but for the values
    submission gives each job: its name (by default its id), its number, an array task's index and its
    array's number (``OWN``). ``specs`` are the distinct specs of the jobs without those (each a map of
    its fields that are not their defaults, as a row's); per job, in the table's order: its id, the
    index of its spec in ``specs`` (-1: none), its own values (a name of None: its id), its ``STATES``
    index, accepted seq and time. ``rest``: by job index, the other fields of a job that has any not
    at its default. A million queued jobs of a few kinds decode as a few specs and lists of plain
    values, instead of a million maps (``restore_columns``).
    """

    ids: list[str]
    specs: list[c.JobSpec]
    spec_of: list[int]
    names: list[str | None]
    numbers: list[int]
    array_indexes: list[int | None]
    array_numbers: list[int]
    states: list[int]
    seqs: list[int]
    times: list[float]
    rest: dict[int, _Rest]  # type: ignore[valid-type]


OWN = ("name", "number", "array_index", "array_number")  # a job's own values; the rest of its spec is shared
_encode = msgspec.msgpack.Encoder().encode
_AT_OWN = sorted(_NAMES.index(name) for name in OWN)
# a spec's values -> the spans between its own ones (what jobs alike share), in one C call
_shared_of = itemgetter(*(slice(lo, hi) for lo, hi in zip([0, *(p + 1 for p in _AT_OWN)], [*_AT_OWN, len(_NAMES)])))
_own_of = attrgetter(*OWN)


def columns(jobs: dict[str, Job]) -> list[object]:
    """The jobs as ``JobColumns``' layout, in the table's order; equal jobs give equal bytes."""
    ids: list[str] = []
    specs: list[msgspec.Raw] = []
    known: dict[bytes, int] = {}  # a spec's bytes (without its own values) -> its index in specs
    by_object: dict[int, int] = {}  # id(spec) -> its index (specs held by several jobs are written once)
    spec_of: list[int] = []
    names: list[str | None] = []
    numbers: list[int] = []
    array_indexes: list[int | None] = []
    array_numbers: list[int] = []
    states: list[int] = []
    seqs: list[int] = []
    times: list[float] = []
    rest: dict[int, dict[str, object]] = {}
    index = _INDEX
    last: tuple[object, ...] = ()  # the shared spans of the last spec written, and its index
    last_at = -1
    for i, job in enumerate(jobs.values()):
        job_id, spec = job.job_id, job.spec
        ids.append(job_id)
        if spec is None:
            spec_of.append(-1)
            name, number, array_index, array_number = None, 0, None, 0
        else:
            at = by_object.get(id(spec))
            if at is None:
                shared = _shared_of(_astuple(spec))
                if shared == last:
                    at = last_at  # equal to the job before but for its own values (an array, a burst)
                else:
                    fields = spec_fields(spec)
                    for own in OWN:
                        fields.pop(own, None)
                    data = _encode(fields)
                    at = known.get(data)
                    if at is None:
                        at = known[data] = len(specs)
                        specs.append(msgspec.Raw(data))
                    by_object[id(spec)] = at
                    last, last_at = shared, at
            spec_of.append(at)
            name, number, array_index, array_number = _own_of(spec)
            if name == job_id:
                name = None
        names.append(name)
        numbers.append(number)
        array_indexes.append(array_index)
        array_numbers.append(array_number)
        states.append(index[job.state])
        seqs.append(job.accepted_seq)
        times.append(job.accepted_ts)
        values = _rest_of(job)
        if values != _REST_DEFAULTS:
            rest[i] = {n: v for n, v, d in zip(_REST_NAMES, values, _REST_DEFAULTS) if v != d}
    return [ids, specs, spec_of, names, numbers, array_indexes, array_numbers, states, seqs, times, rest]


def restore_columns(table: JobTable, cols: JobColumns) -> list[c.JobSpec]:
    """Fill an empty table's jobs from ``JobColumns``: each distinct spec shaped once (the table's
    ``shape``), a job's own values put back on a copy of it (none needed when they are the shared
    spec's).
    Returns the distinct specs as shaped, which ``cols.spec_of`` indexes (what a caller may
    compute once per spec instead of once per job)."""
    shape = table.shape
    specs = [shape(spec) for spec in cols.specs]
    replace = msgspec.structs.replace
    held = [*specs, None]  # spec_of -1: no spec
    own = [spec if (spec := held[at]) is None or _own_of(spec) == (
               named := job_id if name is None else name, number, array_index, array_number)
           else replace(spec, name=named, number=number, array_index=array_index, array_number=array_number)
           for job_id, at, name, number, array_index, array_number in zip(
               cols.ids, cols.spec_of, cols.names, cols.numbers, cols.array_indexes, cols.array_numbers)]
    made = list(map(Job, cols.ids, own, map(STATES.__getitem__, cols.states), cols.seqs, cols.times))
    for i, rest in cols.rest.items():
        job = made[i]
        for field, value in zip(_REST_NAMES, _astuple(rest)):
            setattr(job, field, value)
    table.jobs.update(zip(cols.ids, made))
    return specs


_NODE_FIELDS = tuple(f.name for f in dataclasses.fields(Node) if f.name not in ("kind", "unhealthy_gpus"))


def node_data(cluster: Cluster) -> list[dict[str, object]]:
    """The cluster's nodes, in its order, each as a map of its fields (``kind``, a cache of the node
    index, and ``unhealthy_gpus``, derived from ``gpus``, are left out; sets are written sorted)."""
    out = []
    for node in cluster.nodes.values():
        fields = {name: getattr(node, name) for name in _NODE_FIELDS}
        fields["datasets"] = sorted(node.datasets)
        out.append(fields)
    return out


def restore_nodes(cluster: Cluster, nodes: list[Node]) -> None:
    """Fill an empty cluster from decoded ``node_data``."""
    for node in nodes:
        node.kind = None
        node.unhealthy_gpus = sum(1 for d in node.gpus.values() if d.health)
        cluster.nodes[node.name] = node
        cluster.track(node)


def read_snapshot(data: bytes, kind: type[T], fmt: int, fingerprint: str) -> T | None:
    """A snapshot of ``kind`` (an array-like struct whose first fields are ``format`` and ``fingerprint``),
    or None when it does not decode or another format or configuration wrote it."""
    try:
        snap = msgspec.msgpack.decode(data, type=kind)
    except msgspec.DecodeError:
        return None
    if snap.format != fmt or snap.fingerprint != fingerprint:  # type: ignore[attr-defined]
        return None
    return snap
