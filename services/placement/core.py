"""Placement: where each candidate of a scheduling cycle runs, and what waits. Pure.

For the latest cycle it has not handled, placement walks the candidates in
the scheduler's order. For each job still pending:

1. it runs the filter plugins of the job's **profile** on every kind of node
   (``services.domain.fit.plugins``, ``fit_node``) against the ledger plus what
   this decision has already placed (the ``Overlay``), and scores the nodes
   that pass;
2. if enough nodes fit (all of a multi-node gang, or none), it takes the
   best-scoring ones — a gang inside one interconnect domain (a node label
   of ``TOPOLOGY_LABELS``: NVLink domain, then rack) when one has room — and
   emits ``JobScheduled`` with the exact allocation;
3. otherwise it emits ``PlacementBlocked`` with the reasons grouped per filter
   ("4 nodes: has 8 GPUs, needs 16; 2 nodes: taint gpu=broken:NoSchedule not
   tolerated"), when they differ from the job's last explanation;

and closes with ``PlacementCycleCompleted``.

What a job that does not fit means for the jobs behind it is its profile's
``backfill`` mode:

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
``greedy``
    every job that fits starts, in order, with no reservation (fast, but a big
    job can starve behind a stream of small ones).

In every mode a job that fits on no node even when the cluster is empty
(``fits_nowhere``: 16 GPUs on 8-GPU nodes, or a selector no node matches)
blocks nobody and gets no reservation: it waits for the nodes to change.

Configuration (operator inputs on ``horizon.in._admin.*``, answered with
``ConfigRejected`` when they cannot be applied): ``ProfileConfigured`` (score
weights, backfill mode, reservation depth; the ``default`` profile exists
from the start with this core's ``backfill``) and ``ReservationConfigured``
(advance reservations: nodes held for one account over a window).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG, parse_subject, valid_token
from services.domain.fit.node import (AdvanceReservation, Context, Fit, Overlay, Topology, explain, fit_node, hold_room,
                                    release_room)
from services.placement.index import NodeIndex
from services.domain.fit.plugins import (BACKFILL_MODES, NEVER_FILTERS, TOPOLOGY_LABELS, Profile, check_profile,
                                        profile_from)
from services.domain.protocol import Record
from services.domain.protocol import CoreState
from services.domain.cluster import Cluster, Request, fold_cluster, request_of
from services.domain.config import config_rejected
from services.domain.jobs import HOLDS_RESOURCES, JobState, JobTable

__all__ = ["PlacementCore", "PlacementState", "place_job", "Reservation", "BACKFILL_MODES", "check_reservation"]

_CONFIG_VERBS = {c.ProfileConfigured: "profile", c.ReservationConfigured: "reservation"}


class PlacementState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.cluster = Cluster()
        self.cycle = 0
        self.candidates: list[str] = []
        self.borrowing: frozenset[str] = frozenset()  # candidates the scheduler admitted by borrowing quota
        self.done_cycle = 0
        self.profiles: dict[str, Profile] = {}
        self.advance: dict[str, AdvanceReservation] = {}  # advance reservations by name
        self.config_rejections: dict[int, tuple[str, str]] = {}  # request seq -> (verb, reason)
        self.anti_affinity_running = 0  # jobs holding resources that have anti-affinity terms
        self.held: dict[str, frozenset[str]] = {}  # node -> pending preemptors its victims' room is held for


@dataclass
class Placed:
    allocations: list[c.NodeAllocation] | None
    reasons: list[c.BlockReason] = field(default_factory=list)
    fits_nowhere: bool = False


def place_job(cluster: Cluster, req: Request, overlay: Overlay, index: NodeIndex | None = None,
              ctx: Context | None = None) -> Placed:
    """Allocations for one job on the best nodes, or the reasons per node group.

    With an ``index`` (built on the same overlay), nodes are evaluated once per
    kind; without one, one by one. Both give the same answer.
    """
    ctx = ctx or Context()
    if index is None:
        index = NodeIndex(cluster, overlay, ctx)
    fitting: list[tuple[Fit, list[str]]] = []
    failures: dict[tuple[str, tuple[object, ...]], int] = {}
    usable = total = 0
    for fit, members in index.evaluate(req, ctx):
        total += len(members)
        if fit.devices is not None:
            fitting.append((fit, members))
        else:
            key = (fit.filter, fit.detail)
            failures[key] = failures.get(key, 0) + len(members)
        if fit.filter not in NEVER_FILTERS:
            usable += len(members)  # these nodes could hold the job if they were empty (and ready)
    fit_count = sum(len(m) for _, m in fitting)
    if fit_count >= req.nodes:
        chosen = _gang_nodes(cluster, fitting, req.nodes) if req.nodes > 1 else NodeIndex.best(fitting, 1)
        return Placed([fit.allocation_on(name) for name, fit in chosen])
    grouped: dict[tuple[str, str], int] = {}
    for (flt, detail), count in failures.items():
        key = (flt, explain(flt, detail, req))
        grouped[key] = grouped.get(key, 0) + count
    reasons = [c.BlockReason(reason=reason, nodes=count, filter=flt) for (flt, reason), count in sorted(grouped.items())]
    if req.nodes > 1 and fit_count:
        reasons.append(c.BlockReason(reason=f"only {fit_count} of the {req.nodes} nodes the gang needs fit",
                                     nodes=fit_count, filter="Gang"))
    if not reasons:
        reasons.append(c.BlockReason(reason="no nodes registered", nodes=0, filter="NodeReady"))
    return Placed(None, reasons, fits_nowhere=usable < req.nodes)


def _gang_nodes(cluster: Cluster, fitting: list[tuple[Fit, list[str]]], count: int) -> list[tuple[str, Fit]]:
    """A gang's nodes: the best ``count`` inside one interconnect domain when one has room (the
    finest label of ``TOPOLOGY_LABELS`` first; among domains, the best summed score, then the
    name), else the best ``count`` anywhere."""
    every = [(fit.score[:-1], name, fit) for fit, members in fitting for name in members]
    every.sort(key=lambda e: (e[0], e[1]))
    for label in TOPOLOGY_LABELS:
        domains: dict[str, list[tuple[tuple[object, ...], str, Fit]]] = {}
        for entry in every:
            value = cluster.nodes[entry[1]].labels.get(label)
            if value is not None:
                domains.setdefault(value, []).append(entry)
        options = []
        for value, entries in domains.items():
            if len(entries) >= count:
                best = entries[:count]
                options.append((sum(e[0][0] for e in best), value, best))  # type: ignore[misc]
        if options:
            _, _, best = min(options, key=lambda o: (o[0], o[1]))
            return [(name, fit) for _, name, fit in best]
    return [(name, fit) for _, name, fit in every[:count]]


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
    allocations: list[c.NodeAllocation] = field(default_factory=list)  # where it would run
    ctx: Context = field(default_factory=Context)

    def admits(self, cluster: Cluster, allocs: list[c.NodeAllocation], end_ts: float) -> bool:
        """Can a job holding ``allocs`` until ``end_ts`` start now without delaying the head?"""
        if self.shadow_only:
            return end_ts < self.start_ts
        if end_ts <= self.start_ts:
            return True
        trial = self.at_start.copy()
        for alloc in allocs:
            trial.take(alloc)
        still = set(self.fitting)
        for alloc in allocs:
            if alloc.node in still and not fit_node(cluster.nodes[alloc.node], self.req, trial, self.ctx).ok:
                still.discard(alloc.node)
        if len(still) < self.need:
            return False
        self.at_start, self.fitting = trial, still
        return True


@dataclass
class PlacementCore:
    name: ClassVar[str] = "placement"
    backfill: str = "easy"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG

    def __post_init__(self) -> None:
        if self.backfill not in BACKFILL_MODES:
            raise ValueError(f"unknown backfill mode {self.backfill!r}; modes: {', '.join(BACKFILL_MODES)}")

    def initial(self) -> PlacementState:
        state = PlacementState()
        state.profiles["default"] = Profile(backfill=self.backfill)
        return state

    def evolve(self, state: PlacementState, event: Event, record: Record) -> PlacementState:
        match event:
            case c.SchedulingCycleCompleted(cycle=cycle, candidates=candidates):
                if cycle > state.cycle:
                    state.cycle, state.candidates = cycle, list(candidates)
                    state.borrowing = frozenset(event.borrowing)
                return state
            case c.PlacementCycleCompleted(cycle=cycle):
                state.done_cycle = max(state.done_cycle, cycle)
                return state
            case c.ProfileConfigured() | c.ReservationConfigured():
                self._configure(state, event, record)
                return state
            case c.ConfigRejected(request_seq=request_seq) if event.source == self.name:
                state.config_rejections.pop(request_seq, None)
                return state
            case c.PreemptionRequested(job_id=victim, for_job=for_job) if for_job:
                job, pre = state.jobs.get(victim), state.jobs.get(for_job)
                if job is not None and pre is not None and pre.state is JobState.PENDING:
                    hold_room(state.held, job.allocations, for_job)
                return state
        tr = fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        if tr is not None and tr.before is JobState.PENDING and state.held:
            release_room(state.held, tr.job.job_id)  # a preemptor that starts (or ends) releases its room
        if tr is not None and tr.job.spec is not None and tr.job.spec.affinity is not None \
                and tr.job.spec.affinity.job_anti_affinity:
            was, now = tr.before in HOLDS_RESOURCES, tr.after in HOLDS_RESOURCES
            state.anti_affinity_running += int(now) - int(was)
        return state

    def _configure(self, state: PlacementState, event: Event, record: Record) -> None:
        verb = _CONFIG_VERBS[type(event)]
        subject = parse_subject(record.subject)
        if subject is None or subject.kind != "admin":
            why: str | None = f"{type(event).__name__} is accepted only on horizon.in._admin.{verb}"
        elif isinstance(event, c.ProfileConfigured):
            why = check_profile(event)
            if why is None:
                state.profiles[event.name] = profile_from(event)
        else:
            assert isinstance(event, c.ReservationConfigured)
            why = check_reservation(event)
            if why is None:
                if event.cancelled:
                    state.advance.pop(event.name, None)
                else:
                    state.advance[event.name] = AdvanceReservation(
                        event.name, event.account, frozenset(event.nodes), event.start_ts, event.end_ts)
        if why is not None:
            state.config_rejections[record.seq] = (verb, why)

    # ------------------------------------------------------------------ reservations

    def reserve(
        self, state: PlacementState, job_id: str, req: Request, overlay: Overlay,
        placed_now: list[tuple[float, str, list[c.NodeAllocation]]], ctx: Context,
        time_limit_s: float, earlier: list[Reservation] = (),  # type: ignore[assignment]
        concrete: bool = False,
    ) -> Reservation | None:
        """The earliest time the job fits, walking running jobs' expected ends in order, with the
        ``earlier`` reservations holding their nodes over their runs. ``concrete``: also choose the
        allocation it would take (what later reservations must leave alone)."""
        now = state.now
        ending: list[tuple[float, str, list[c.NodeAllocation]]] = list(placed_now)
        seen: set[str] = set()
        for node in state.cluster.sorted_nodes():
            for holder in node.jobs:
                if holder in seen:
                    continue
                seen.add(holder)
                job = state.jobs.get(holder)
                if job is None or job.spec is None:
                    continue
                ending.append((max(now, job.scheduled_ts + job.spec.time_limit_s), holder, job.allocations))
        ending.sort(key=lambda e: (e[0], e[1]))
        hyp = overlay.copy()
        nodes = [n for n in state.cluster.sorted_nodes() if not n.removed]
        if not earlier and not ctx.reservations:
            # Only the time moves the answer here through what ends: re-check just those nodes
            # (the first answer per kind of node, through the index).
            fitting = {name for fit, members in NodeIndex(state.cluster, hyp, ctx).evaluate(req, ctx) if fit.ok
                       for name in members}
            for end, _holder, allocations in ending:
                for alloc in allocations:
                    hyp.give(alloc)
                for alloc in allocations:
                    node = state.cluster.nodes.get(alloc.node)
                    if node is not None and not node.removed and fit_node(node, req, hyp, ctx).ok:
                        fitting.add(alloc.node)
                if len(fitting) >= req.nodes:
                    at = dataclasses.replace(ctx, start_ts=end, end_ts=end + time_limit_s)
                    return Reservation(job_id, req, end, hyp, fitting, req.nodes, end_ts=end + time_limit_s,
                                       allocations=self._where(state, req, hyp, at, fitting) if concrete else [],
                                       ctx=at)
            return None
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
            fitting = {n.name for n in nodes if fit_node(n, req, trial, at).ok}
            if len(fitting) >= req.nodes:
                return Reservation(job_id, req, t, trial.copy() if trial is hyp else trial, fitting, req.nodes,
                                   end_ts=t + time_limit_s, allocations=self._where(state, req, trial, at, fitting),
                                   ctx=at)
        return None

    @staticmethod
    def _where(state: PlacementState, req: Request, overlay: Overlay, ctx: Context,
               fitting: set[str]) -> list[c.NodeAllocation]:
        """The allocation a reservation would take on its fitting nodes (best scores, gangs whole)."""
        fits = [(fit_node(state.cluster.nodes[name], req, overlay, ctx), [name]) for name in sorted(fitting)]
        fits = [(fit, members) for fit, members in fits if fit.ok]
        if len(fits) < req.nodes:
            return []
        chosen = _gang_nodes(state.cluster, fits, req.nodes) if req.nodes > 1 else NodeIndex.best(fits, 1)
        return [fit.allocation_on(name) for name, fit in chosen]

    # ------------------------------------------------------------------ decide

    def _context(self, state: PlacementState, job_id: str, spec: c.JobSpec, profile: Profile,
                 topology: Topology | None, advance: tuple[AdvanceReservation, ...]) -> Context:
        now = state.now
        return Context(profile, now, now + spec.time_limit_s, spec.account, advance, topology, job_id=job_id,
                       held=state.held)

    def decide(self, state: PlacementState) -> list[Event]:
        out: list[Event] = config_rejected(self.name, state.config_rejections, state.now, state.seq)
        if state.cycle <= state.done_cycle:
            return out
        overlay = Overlay()
        now = state.now
        advance = tuple(sorted((r for r in state.advance.values() if r.end_ts > now), key=lambda r: r.name))
        held = dict(state.held)
        index = NodeIndex(state.cluster, overlay, Context(reservations=advance, held=held))
        cycle = state.cycle
        scheduled = blocked = 0
        reservations: list[Reservation] = []
        placed_now: list[tuple[float, str, list[c.NodeAllocation]]] = []
        topology: Topology | None = None
        # Within one decision free capacity only shrinks, so a request shape that did
        # not fit stays unfit for the rest of the cycle: remember it, skip the scan (not for
        # inter-job affinity, which placements can satisfy, nor under advance reservations,
        # whose answer depends on the job's account and time).
        unfit: dict[Request, Placed] = {}
        stopped_by: str | None = None
        common = {"ts": now, "source": self.name, "causation_id": f"scheduling/SchedulingCycleCompleted/{cycle}"}
        for job_id in state.candidates:
            job = state.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.spec is None:
                continue
            if stopped_by is not None:
                continue  # strict order: nothing passes the blocked head
            spec = job.spec
            req = request_of(spec)
            profile = state.profiles.get(spec.profile)
            earliest, reserved = None, []
            if profile is None:
                placed = Placed(None, [c.BlockReason(
                    reason=f"profile {spec.profile!r} is not configured (profiles: {', '.join(sorted(state.profiles))})",
                    nodes=0, filter="Profile")], fits_nowhere=True)
            else:
                if topology is None and (req.topological or state.anti_affinity_running):
                    specs = {j: state.jobs.jobs[j].spec for n in state.cluster.nodes.values() for j in n.jobs
                             if j in state.jobs.jobs and state.jobs.jobs[j].spec is not None}
                    topology = Topology(state.cluster, specs)  # type: ignore[arg-type]
                    for _end, placed_id, allocations in placed_now:  # placed earlier in this decision
                        for alloc in allocations:
                            topology.add(alloc.node, state.jobs.jobs[placed_id].spec)  # type: ignore[arg-type]
                ctx = self._context(state, job_id, spec, profile, topology, advance)
                cacheable = not req.topological and not advance and topology is None and not state.held
                placed = (unfit.get(req) if cacheable else None) or place_job(state.cluster, req, overlay, index, ctx)
                if placed.allocations is None and cacheable:
                    unfit[req] = placed
            reasons = placed.reasons
            if placed.allocations is not None:
                end = now + spec.time_limit_s
                delayed = next((r for r in reservations if not r.admits(state.cluster, placed.allocations, end)), None)
                if delayed is None:
                    for alloc in placed.allocations:
                        overlay.take(alloc)
                        index.moved(alloc.node)
                        if topology is not None:
                            topology.add(alloc.node, spec)
                    placed_now.append((end, job_id, placed.allocations))
                    attempt = job.attempt + 1
                    out.append(c.JobScheduled(
                        id=f"placement/JobScheduled/{job_id}/{attempt}", correlation_id=job_id, job_id=job_id,
                        attempt=attempt, allocations=placed.allocations, basis_seq=state.seq, cycle=cycle,
                        time_limit_s=spec.time_limit_s, backfilled=bool(reservations),
                        borrowed=job_id in state.borrowing, **common,
                    ))
                    scheduled += 1
                    continue
                reasons = [c.BlockReason(
                    reason=f"starting now would delay the reservation of {delayed.job_id} "
                           f"at {delayed.start_ts:.0f}", nodes=len(placed.allocations), filter="Backfill")]
            elif not placed.fits_nowhere and profile is not None:
                mode = profile.backfill
                if mode == "none":
                    stopped_by = job_id
                elif (mode in ("easy", "shadow") and not reservations) or (
                        mode == "conservative" and len(reservations) < profile.reservation_depth):
                    held = self.reserve(state, job_id, req, overlay, placed_now, ctx, spec.time_limit_s,
                                        reservations if mode == "conservative" else [],
                                        concrete=mode == "conservative" or bool(advance))
                    if held is not None:
                        held.shadow_only = mode == "shadow"
                        reservations.append(held)
                        earliest = held.start_ts
                        reserved = sorted(a.node for a in held.allocations) or sorted(held.fitting)[: req.nodes]
            blocked += 1
            explanation = tuple(reasons)
            if explanation != job.last_block or earliest is not None or job.reserved_at is not None:
                out.append(c.PlacementBlocked(
                    id=f"placement/PlacementBlocked/{job_id}/{cycle}", correlation_id=job_id, job_id=job_id,
                    cycle=cycle, basis_seq=state.seq, reasons=reasons, earliest_start_ts=earliest,
                    reserved_nodes=reserved, fits_nowhere=placed.fits_nowhere, **common,
                ))
        out.append(c.PlacementCycleCompleted(
            id=f"placement/PlacementCycleCompleted/{cycle}", correlation_id=str(cycle), cycle=cycle,
            basis_seq=state.seq, scheduled=scheduled, blocked=blocked, ts=now, source=self.name,
        ))
        return out


def check_reservation(ev: c.ReservationConfigured) -> str | None:
    if not valid_token(ev.name):
        return f"name: {ev.name!r} must be 1-128 letters, digits, '_' or '-'"
    if ev.cancelled:
        return None
    if not valid_token(ev.account):
        return f"account: {ev.account!r} must be 1-128 letters, digits, '_' or '-'"
    if not ev.nodes:
        return "nodes: name at least one node"
    if not (math.isfinite(ev.start_ts) and math.isfinite(ev.end_ts) and ev.end_ts > ev.start_ts):
        return (f"end_ts: the window must end after it starts (from {_utc(ev.start_ts)} to {_utc(ev.end_ts)})"
                if math.isfinite(ev.start_ts) and math.isfinite(ev.end_ts) else "start_ts/end_ts: must be finite")
    return None


def _utc(ts: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
