"""Backfilling: what a job that does not fit now means for the jobs behind it. Pure.

What a job that does not fit means for the jobs behind it is its profile's ``backfill`` mode, one
row of ``MODES``:

``none``
    strict order: the first job that does not fit now stops the cycle (what
    "FCFS without backfilling" means in the literature).
``easy`` (default)
    EASY backfilling. The first job that does not fit now (the head) gets a
    reservation: the earliest time, by the running jobs' time limits, at which
    enough nodes would fit it, and the nodes they would be. A later job starts
    now only if it does not delay that reservation: it ends (by its own time
    limit) by the reservation's time, or after it starts enough nodes still
    fit the head at that time. Jobs after the head that do not fit simply
    wait.
``conservative``
    every blocked job, up to the profile's ``reservation_depth``, gets a
    reservation (each computed with the earlier ones holding their nodes
    over their run), and a later job starts now only if it delays none.
``shadow``
    EASY without the "extra nodes" rule: a later job starts now only if it
    ends strictly before the head's reservation time (what RLScheduler's
    simulator calls backfilling; kept to compare with their published table).
``short``
    EASY for short jobs only: the head gets its reservation as in ``easy``, and
    a later job starts now only if, besides delaying it by nothing, it ends
    within a tenth (``hole_fraction``) of the time from now to the head's
    reservation. Long jobs wait their turn in order instead of filling the
    idle nodes that the jobs ranked above them (often arriving later: short
    ones, under the multifactor order) would take. On Lublin-1 this is what
    backfilling must respect to help the default order rather than hurt it
    (docs/benchmarks.md).
``lane``
    ``short``, plus a lane for short jobs (``services/placement/lane.py``): a
    job of over an hour that was accepted less than 30 minutes ago may not
    take the last idle nodes (one in 64 of its partition's schedulable nodes).
    ``horizon simulate --backfill`` with no mode named selects it
    (``FLAG_MODE``): on Lublin-1 it is the mode that beats strict order most.
``greedy``
    every job that fits starts, in order, with no reservation (fast, but a big
    job can starve behind a stream of small ones).

In every mode a job that fits on no node even when the cluster is empty
(``fits_nowhere``: 16 GPUs on 8-GPU nodes, or a selector no node matches)
blocks nobody and gets no reservation: it waits for the nodes to change.

A mode is data (``BackfillMode``): whether the first blocked job stops the cycle, how many blocked
jobs get a reservation, whether each reservation is computed with the earlier ones holding their
nodes, whether a later job must end before a reservation's time, and by when (a share of the wait
for the reservation) it must end at the latest. ``reserve`` finds a blocked
job's reservation (the earliest time it fits, by the running jobs' time limits) and
``Reservation.admits`` says whether a job that fits now may start without delaying it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from events import catalogue as c
from services.domain.cluster import Cluster, Request
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.fit.node import Fitter
from services.domain.fit.profile import BACKFILL_MODES, Profile
from services.domain.jobs import Job, JobTable
from services.placement.index import NodeIndex
from services.placement.lane import Lane
from services.placement.place import best_nodes, holds_gang

__all__ = ["BackfillMode", "FLAG_MODE", "MODES", "Reservation", "reserve", "shortened_limit"]


@dataclass(frozen=True)
class BackfillMode:
    name: str
    stops: bool = False  # the first job that does not fit stops the cycle (strict order)
    depth: int | None = 0  # blocked jobs that get a reservation in a cycle (None: the profile's reservation_depth)
    stacked: bool = False  # each reservation holds its nodes over its run for the later ones (and is concrete)
    shadow_only: bool = False  # a later job starts now only if it ends before the reservation's time
    hole_fraction: float | None = None  # a later job starts now only if it ends within this share of the wait
    lane: Lane | None = None  # idle nodes kept for short jobs (services/placement/lane.py)

    def reservations(self, profile: Profile) -> int:
        """How many blocked jobs of a cycle get a reservation under this mode."""
        return profile.reservation_depth if self.depth is None else self.depth


MODES: dict[str, BackfillMode] = {m.name: m for m in (
    BackfillMode("none", stops=True),
    BackfillMode("easy", depth=1),
    BackfillMode("shadow", depth=1, shadow_only=True),
    BackfillMode("greedy"),
    BackfillMode("conservative", depth=None, stacked=True),
    BackfillMode("short", depth=1, hole_fraction=0.1),
    BackfillMode("lane", depth=1, hole_fraction=0.1, lane=Lane()),
)}
assert tuple(MODES) == BACKFILL_MODES, "every backfill mode a profile may name has its row here"

# What ``horizon simulate --backfill`` with no mode named selects (docs/benchmarks.md, "A lane for short
# jobs"). Placement's own default (a profile's ``backfill``, ``horizon up --backfill-mode``)
# stays ``easy``: logs written without a mode recorded must replay with the mode they ran with.
FLAG_MODE = "lane"


@dataclass
class Reservation:
    """The head job's reservation: at ``start_ts``, ``fitting`` nodes could hold it (it needs ``need``).

    ``at_start`` is the ledger as it is expected to be at ``start_ts`` (running
    jobs that will have ended given back, backfilled jobs still running taken).
    """

    job_id: str
    req: Request
    start_ts: float
    at_start: Overlay
    fitting: set[str]
    need: int
    shadow_only: bool = False
    end_ts: float = math.inf  # the start plus the job's time limit
    hole_end: float = math.inf  # a later job that would end after this may not start now (mode ``short``)
    allocations: list[c.NodeAllocation] = field(default_factory=list)  # where it would run
    ctx: Context = field(default_factory=Context)

    def admits(self, cluster: Cluster, allocs: list[c.NodeAllocation], end_ts: float, commit: bool = True) -> bool:
        """Can a job holding ``allocs`` until ``end_ts`` start now without delaying the head? When it can
        and ends after the reservation's time, the reservation's view of that time takes its room
        (unless ``commit`` is false: only asking)."""
        if end_ts > self.hole_end:
            return False
        if self.shadow_only:
            return end_ts < self.start_ts
        if end_ts <= self.start_ts:
            return True
        trial = self.at_start.copy()
        for alloc in allocs:
            trial.take(alloc)
        still = set(self.fitting)
        fit = Fitter(self.req, self.ctx)
        for alloc in allocs:
            if alloc.node in still and not fit(cluster.nodes[alloc.node], trial).ok:
                still.discard(alloc.node)
        if not holds_gang(cluster, still, self.need):
            return False
        if commit:
            self.at_start, self.fitting = trial, still
        return True


def shortened_limit(reservations: list[Reservation], cluster: Cluster, allocs: list[c.NodeAllocation], now: float,
                    limit_s: float, time_min_s: float) -> float | None:
    """Slurm's ``--time-min``: the longest time limit, from the job's own ``limit_s`` down to
    ``time_min_s``, with which a job holding ``allocs`` from ``now`` delays no reservation; or None.

    The limits tried, longest first: the job's own, then for each reservation the whole seconds
    left before it starts (ending by then delays it by nothing; one second less for a ``shadow``
    reservation, which wants the job gone strictly before), those of at least ``time_min_s``.
    The first that every reservation admits is the job's limit, and the reservations take its room
    as ``admits`` does. Worked through: a head reserved at now+3600, a job of 2 h with
    ``--time-min=30``: 7200 s delays it, 3600 s does not, so the job starts now with a limit of 1 h.
    """
    tried = {limit_s}
    for r in reservations:
        left = math.floor(r.start_ts - now)
        tried.update(t for t in (left, left - 1) if time_min_s <= t < limit_s)
    for limit in sorted(tried, reverse=True):
        end = now + limit
        if all(r.admits(cluster, allocs, end, commit=False) for r in reservations):
            for r in reservations:
                r.admits(cluster, allocs, end)
            return float(limit)
    return None


def reserve(
    cluster: Cluster, jobs: JobTable, now: float, job_id: str, req: Request, overlay: Overlay,
    placed_now: list[tuple[float, str, list[c.NodeAllocation]]], ctx: Context,
    time_limit_s: float, earlier: list[Reservation] = (),  # type: ignore[assignment]
    concrete: bool = False, run_of: Callable[[Job], float] | None = None, index: NodeIndex | None = None,
) -> Reservation | None:
    """The earliest time the job fits, walking running jobs' expected ends in order, with the
    ``earlier`` reservations holding their nodes over their runs. ``concrete``: also choose the
    allocation it would take (what later reservations must leave alone). A running job is expected
    to end at its start plus ``run_of(job)`` (a predicted run time, services/domain/runtime_prediction.py),
    else plus its time limit; ``time_limit_s`` is how long the reserved job itself is expected to run.
    ``index``: the decision's node index, on ``overlay`` and in ``ctx``'s reservations, held room and
    partitions (else one is built)."""
    ending: list[tuple[float, str, list[c.NodeAllocation]]] = list(placed_now)
    seen: set[str] = set()
    for node in cluster.nodes.values():  # in any order: sorted below by (end, job), each job once
        for holder in node.jobs:
            if holder in seen:
                continue
            seen.add(holder)
            job = jobs.get(holder)
            if job is None or job.spec is None:
                continue
            run = run_of(job) if run_of is not None else job.limit_s
            ending.append((max(now, job.scheduled_ts + run), holder, job.allocations))
    ending.sort(key=lambda e: (e[0], e[1]))
    hyp = overlay.copy()
    if not earlier and not ctx.reservations:
        # Only the time moves the answer here through what ends: re-check just those nodes
        # (the first answer per kind of node, through the index: the decision's own, whose overlay
        # holds what ``hyp`` holds now).
        now_index = index if index is not None else NodeIndex(cluster, hyp, ctx)
        fitting = {name for fit, members in now_index.evaluate(req, ctx) if fit.ok for name in members}
        fit_then = Fitter(req, ctx)
        for end, _holder, allocations in ending:
            for alloc in allocations:
                hyp.give(alloc)
            for alloc in allocations:
                node = cluster.nodes.get(alloc.node)
                if node is not None and not node.removed and fit_then(node, hyp).ok:
                    fitting.add(alloc.node)
            if holds_gang(cluster, fitting, req.nodes):  # a gang's nodes of one backend (place.py)
                at = dataclasses.replace(ctx, start_ts=end, end_ts=end + time_limit_s)
                return Reservation(job_id, req, end, hyp, fitting, req.nodes, end_ts=end + time_limit_s,
                                   allocations=_where(cluster, req, hyp, at, fitting) if concrete else [],
                                   ctx=at)
        return None
    nodes = [n for n in cluster.sorted_nodes() if not n.removed]
    times = [now] + [end for end, _, _ in ending]
    done = 0
    for t in times:
        while done < len(ending) and ending[done][0] <= t:
            for alloc in ending[done][2]:
                hyp.give(alloc)
            done += 1
        at = dataclasses.replace(ctx, start_ts=t, end_ts=t + time_limit_s)
        trial = hyp
        overlapping = [r for r in earlier if r.start_ts < t + time_limit_s and r.end_ts > t]
        if overlapping:
            trial = hyp.copy()
            for r in overlapping:
                for alloc in r.allocations:
                    trial.take(alloc)
        fit_at = Fitter(req, at)
        fitting = {n.name for n in nodes if fit_at(n, trial).ok}
        if holds_gang(cluster, fitting, req.nodes):
            return Reservation(job_id, req, t, trial.copy() if trial is hyp else trial, fitting, req.nodes,
                               end_ts=t + time_limit_s, allocations=_where(cluster, req, trial, at, fitting),
                               ctx=at)
    return None

def _where(cluster: Cluster, req: Request, overlay: Overlay, ctx: Context,
           fitting: set[str]) -> list[c.NodeAllocation]:
    """The allocation a reservation would take on its fitting nodes (best scores, gangs whole)."""
    fit = Fitter(req, ctx)
    fits = [(fit(cluster.nodes[name], overlay), [name]) for name in sorted(fitting)]
    fits = [(fit, members) for fit, members in fits if fit.ok]
    if len(fits) < req.nodes:
        return []
    chosen = best_nodes(cluster, fits, req.nodes)  # a gang's within one backend
    if len(chosen) < req.nodes:
        return []
    return [fit.allocation_on(name) for name, fit in chosen]
