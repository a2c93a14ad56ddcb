"""The pending jobs, indexed so that a cycle reads the head of the queue, not the whole backlog. Pure.

Every policy's key is a static part (what the job's spec says: class,
account, time limit...) followed by a term that only grows with
``accepted_ts``, then ``accepted_seq`` (``services.domain.policy``: a
policy's ``group`` names the static part, its ``in_order`` says when two jobs
of one group keep their order whatever the cycle's context). So the pending
jobs are kept by **group** (their partition, whose tier leads the key, and
the policy's ``group``), each group as **runs**: sequences in
``(accepted_ts, accepted_seq)`` order in which every job is ``in_order``
after the one before it. A run is then sorted by the full key in every
cycle's context, and the queue's order is exactly the merge of the runs by
that key (``merged``): a cycle computes the key of each run's head and of
the jobs it takes, never of the whole backlog.

A job that would break a run's order (a submit time older than the jobs
accepted before it: a skewed clock, a time given by the client) starts or
joins another run of its group, so the merge stays exact; the runs of a
group are as many as the times the order was broken, one in the usual case.

A run is a list of chunks of at most ``2 * _LOAD`` jobs (a sorted list in
pieces), so a job leaves it in O(log n + chunk) wherever it stands. The index
is derived: the queue fold keeps it as jobs enter and leave ``pending`` (and
move on ``JobPriorityChanged``), ``codec.load`` and a change of policy
rebuild it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator
from itertools import islice
from operator import attrgetter

from events import catalogue as c
from services.domain.jobs import Job
from services.domain.policy import Context, Policy, make_policy

__all__ = ["QueueIndex", "merged", "count_before"]

_LOAD = 512  # a chunk splits past 2 * _LOAD jobs


def _at(job: Job) -> tuple[float, int]:
    return (job.accepted_ts, job.accepted_seq)


_AT = attrgetter("accepted_ts", "accepted_seq")  # ``_at`` in one C call (a rebuild sorts a million jobs by it)


class _Run:
    """Jobs in ``(accepted_ts, accepted_seq)`` order, in chunks; ``lasts[i]`` is the order of the last
    job of ``chunks[i]``."""

    __slots__ = ("chunks", "lasts")

    def __init__(self) -> None:
        self.chunks: list[list[Job]] = []
        self.lasts: list[tuple[float, int]] = []

    def place(self, at: tuple[float, int]) -> tuple[int, int]:
        """(chunk, position) where a job of order ``at`` stands or would stand."""
        ci = bisect_left(self.lasts, at)
        if ci == len(self.lasts):
            return (ci - 1, len(self.chunks[ci - 1])) if ci else (0, 0)
        return ci, bisect_left(self.chunks[ci], at, key=_at)

    def get(self, ci: int, pos: int) -> Job | None:
        if ci < len(self.chunks) and pos < len(self.chunks[ci]):
            return self.chunks[ci][pos]
        return None

    def neighbours(self, ci: int, pos: int) -> tuple[Job | None, Job | None]:
        """The jobs just before and just after position ``(ci, pos)``."""
        if not self.chunks:
            return None, None
        chunk = self.chunks[ci]
        before = chunk[pos - 1] if pos else (self.chunks[ci - 1][-1] if ci else None)
        after = chunk[pos] if pos < len(chunk) else (self.chunks[ci + 1][0] if ci + 1 < len(self.chunks) else None)
        return before, after

    def insert(self, ci: int, pos: int, job: Job) -> None:
        if not self.chunks:
            self.chunks.append([job])
            self.lasts.append(_at(job))
            return
        chunk = self.chunks[ci]
        chunk.insert(pos, job)
        if pos == len(chunk) - 1:
            self.lasts[ci] = _at(job)
        if len(chunk) > 2 * _LOAD:
            half = chunk[_LOAD:]
            del chunk[_LOAD:]
            self.chunks.insert(ci + 1, half)
            self.lasts[ci] = _at(chunk[-1])
            self.lasts.insert(ci + 1, _at(half[-1]))

    def remove(self, job: Job) -> bool:
        """Take ``job`` out; False when it is not in this run."""
        if self.chunks and self.chunks[0][0] is job:  # the usual case: the head starts
            ci, pos = 0, 0
        else:
            ci, pos = self.place(_at(job))
        if self.get(ci, pos) is not job:
            return False
        chunk = self.chunks[ci]
        del chunk[pos]
        if not chunk:
            del self.chunks[ci], self.lasts[ci]
            return True
        if pos == len(chunk):
            self.lasts[ci] = _at(chunk[-1])
        if ci + 1 < len(self.chunks) and len(chunk) + len(self.chunks[ci + 1]) <= _LOAD:
            chunk.extend(self.chunks.pop(ci + 1))  # two small neighbours become one chunk
            self.lasts[ci] = self.lasts.pop(ci + 1)
        return True

    def __iter__(self) -> Iterator[Job]:
        for chunk in self.chunks:
            yield from chunk

    def __len__(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)


class QueueIndex:
    """The pending jobs by group and run (see the module docstring), for the policy it was built for."""

    __slots__ = ("policy", "_policy", "groups")

    def __init__(self, policy: str = "multifactor") -> None:
        self.policy = policy
        self._policy: Policy = make_policy(policy)
        self.groups: dict[tuple[object, ...], list[_Run]] = {}

    def group(self, job: Job) -> tuple[object, ...]:
        spec = job.spec
        assert spec is not None
        return (spec.partition, *self._policy.group(spec))

    def spec_group(self, spec: c.JobSpec) -> tuple[object, ...]:
        """The group of every job of ``spec`` (a policy's group reads neither the job nor its name)."""
        return (spec.partition, *self._policy.group(spec))

    def add(self, job: Job) -> None:
        """``job`` has become pending (a job already in the index stays where it is)."""
        runs = self.groups.get(group := self.group(job))
        at = _at(job)
        if runs is None:
            run = _Run()
            run.insert(0, 0, job)
            self.groups[group] = [run]
            return
        first = runs[0]
        if len(runs) == 1 and at > first.lasts[-1]:  # the usual case: a newcomer after the group's last job
            chunk = first.chunks[-1]
            if self._policy.in_order(chunk[-1], job):
                first.insert(len(first.chunks) - 1, len(chunk), job)
                return
        places = [run.place(at) for run in runs]
        if any(run.get(*where) is job for run, where in zip(runs, places, strict=True)):
            return
        in_order = self._policy.in_order
        for run, where in zip(runs, places, strict=True):
            before, after = run.neighbours(*where)
            if (before is None or in_order(before, job)) and (after is None or in_order(job, after)):
                run.insert(*where, job)
                return
        run = _Run()
        run.insert(0, 0, job)
        runs.append(run)

    def remove(self, job: Job) -> None:
        """``job`` is no longer pending (or is about to change group)."""
        group = self.group(job)
        runs = self.groups.get(group, [])
        for i, run in enumerate(runs):
            if run.remove(job):
                if not run.chunks:
                    del runs[i]
                    if not runs:
                        del self.groups[group]
                return

    def rebuild(self, jobs: Iterable[Job], policy: str | None = None,
                groups: Iterable[tuple[object, ...]] | None = None) -> None:
        """Index ``jobs`` afresh (after a snapshot is loaded, or for another policy). ``groups``: each
        job's group, in the order of ``jobs``, when the caller has them (``codec.load``: once per spec)."""
        if policy is not None and policy != self.policy:
            self.policy, self._policy = policy, make_policy(policy)
        self.groups = {}
        by_group: dict[tuple[object, ...], list[Job]] = {}
        if groups is None:
            for job in jobs:
                by_group.setdefault(self.group(job), []).append(job)
        else:
            last: tuple[object, ...] | None = None
            members: list[Job] = []
            for group, job in zip(groups, jobs, strict=True):
                if group is not last:  # (consecutive jobs of one spec kind share the very tuple)
                    members = by_group.setdefault(group, [])
                    last = group
                members.append(job)
        in_order = self._policy.in_order
        for group, members in by_group.items():
            members.sort(key=_AT)
            if all(map(in_order, members, islice(members, 1, None))):
                lines = [members]  # the usual case: one run (checked pair by pair in C's loop)
            else:
                lines = self._lines(members)
            runs = self.groups[group] = []
            for line in lines:
                run = _Run()
                run.chunks = [line[i:i + _LOAD] for i in range(0, len(line), _LOAD)]
                run.lasts = [_at(chunk[-1]) for chunk in run.chunks]
                runs.append(run)

    def _lines(self, members: list[Job]) -> list[list[Job]]:
        """Jobs of one group in ``(accepted_ts, accepted_seq)`` order as runs: each job to the first it
        extends in order."""
        in_order = self._policy.in_order
        lines: list[list[Job]] = []
        for job in members:
            if len(lines) == 1 and in_order(lines[0][-1], job):
                lines[0].append(job)  # (the common case, without a generator per job)
                continue
            line = next((line for line in lines if in_order(line[-1], job)), None)
            if line is None:
                lines.append([job])
            else:
                line.append(job)
        return lines

    def runs(self, partitions: Collection[str | None] | None = None) -> Iterator[_Run]:
        """Every run (of the groups of ``partitions`` only, when given)."""
        for group, runs in self.groups.items():
            if partitions is None or group[0] in partitions:
                yield from runs

    def __len__(self) -> int:
        return sum(len(run) for run in self.runs())


def merged(index: QueueIndex, key: Callable[[Job, Context], tuple[float | int, ...]], ctx: Context,
           pending: dict[str, Job], partitions: Collection[str | None] | None = None) -> Iterator[Job]:
    """The jobs of ``index`` that are in ``pending``, in ``key`` order: a merge of the runs' heads.

    ``pending`` may be a part of the index's jobs (a partition leader's): the others are passed
    over, and the groups of partitions not in ``partitions`` (when given) are not read at all.
    Keys end with the acceptance sequence, so no two compare equal and the heap never compares
    further."""
    heap: list[tuple[tuple[float | int, ...], int, Job, Iterator[Job]]] = []
    for i, run in enumerate(index.runs(partitions)):
        jobs = (job for job in run if pending.get(job.job_id) is job)
        first = next(jobs, None)
        if first is not None:
            heap.append((key(first, ctx), i, first, jobs))
    heapq.heapify(heap)
    while heap:
        _key, i, job, jobs = heap[0]
        yield job
        following = next(jobs, None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (key(following, ctx), i, following, jobs))


def count_before(index: QueueIndex, key: Callable[[Job, Context], tuple[float | int, ...]], ctx: Context,
                 mine: tuple[float | int, ...]) -> int:
    """How many of the index's jobs key before ``mine``: a binary search of each run (each is in key
    order in every context), not a key per job."""
    count = 0
    for run in index.runs():
        ci = bisect_left(run.chunks, mine, key=lambda chunk: key(chunk[-1], ctx))
        count += sum(len(chunk) for chunk in run.chunks[:ci])
        if ci < len(run.chunks):
            count += bisect_left(run.chunks[ci], mine, key=lambda job: key(job, ctx))
    return count
