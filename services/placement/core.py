"""Placement: where each candidate of a scheduling cycle runs, and what waits. Pure.

For the latest cycle it has not handled, placement walks the candidates in
the scheduler's order. For each job still pending:

1. it runs the filter plugins of the job's **profile** on every kind of node
   (``services.domain.fit.framework``, ``fit_node``) against the ledger plus what
   this decision has already placed (the ``Overlay``), and scores the nodes
   that pass;
2. if enough nodes fit (all of a multi-node gang, or none), it takes the
   best-scoring ones — a gang inside one interconnect domain (a node label
   of ``TOPOLOGY_LABELS``: NVLink domain, then rack) when one has room — and
   emits ``JobScheduled`` with the exact allocation;
3. otherwise it emits ``PlacementBlocked`` with the reasons grouped per filter
   ("4 nodes: has 8 GPUs, needs 16; 2 nodes: taint gpu=broken:NoSchedule not
   tolerated"), when they differ from the job's last explanation;

and closes with ``PlacementCycleCompleted``. A job that fits now but would
delay a reservation may still start when it has a ``time_min_s`` (Slurm's
``--time-min``): with the longest shorter limit that delays none, which its
``JobScheduled.time_limit_s`` records (``backfill.shortened_limit``).

What a job that does not fit means for the jobs behind it is its profile's
``backfill`` mode (``none``, ``easy`` by default, ``conservative``, ``shadow``,
``greedy``, ``short``, ``lane``): ``services/placement/backfill.py`` holds the modes side by side,
the reservations and the rule that a later job must not delay them. Placing one
job is ``services/placement/place.py``; the filter and score plugins are
``services/domain/fit/``.

Where backfilling's run times come from is the profile's ``runtime_estimate``: the jobs' time limits
(``limit``, the default) or EASY++ predictions from each user's last two run times (``predicted``,
``services/domain/runtime_prediction.py``): a job that would start now is expected to end at now plus
its prediction (``JobScheduled.predicted_runtime_s``), a running one at its start plus its prediction,
corrected upward once it outlives it; the time limit stays the one enforced.

Configuration (operator inputs on ``horizon.in._admin.*``, answered with
``ConfigRejected`` when they cannot be applied): ``ProfileConfigured`` (score
weights, backfill mode, reservation depth; the ``default`` profile exists
from the start with this core's ``backfill``) and ``ReservationConfigured``
(advance reservations: nodes held for one account over a window). Partitions
(``services/domain/partitions.py``, answered by scheduling) keep each job on its
partition's nodes: the ``Partition`` filter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import EVENTS_ONLY, WHOLE_LOG, parse_subject, valid_token
from services.domain.cluster import Cluster, Request, fold_cluster, least, request_of
from services.domain.config import config_rejected
from services.domain.envelope import Decider, decision_id
from services.domain.fit.context import Context, hold_room, release_room
from services.domain.fit.cycle import AdvanceReservation, Overlay
from services.domain.fit.node import Fit
from services.domain.fit.profile import Profile, check_profile, profile_from
from services.domain.fit.topology import Topology
from services.domain.job_specs import SharedSpecJobs
from services.domain.jobs import HOLDS_RESOURCES, Job, JobState, Transition
from services.domain.partitions import Partitions
from services.domain.protocol import CoreState, Record
from services.domain.restart import ends_for_good
from services.domain.runtime_prediction import RuntimeHistory, expected_run, history_key
from services.domain.timestamps import at, when
from services.placement import snapshot
from services.placement.backfill import MODES, Reservation, reserve, shortened_limit
from services.placement.index import NodeIndex
from services.placement.lane import LaneLedger
from services.placement.growth import Room, grow, track_elastic
from services.placement.hetjob import place_hetjob
from services.placement.place import Placed, gang_names, place_job

__all__ = ["PlacementCore", "PlacementState", "check_reservation"]

_CONFIG_VERBS = {c.ProfileConfigured: "profile", c.ReservationConfigured: "reservation"}
_PARTITION_EVENTS = (c.PartitionConfigured, c.PartitionPolicyConfigured, c.NodeRegistered, c.NodeRemoved,
                     c.ProfileConfigured)


class PlacementState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = SharedSpecJobs()  # jobs submitted alike hold one spec (services/domain/job_specs.py)
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
        self.partitions = Partitions()  # a job runs on its partition's nodes (services/domain/partitions.py)
        self.history = RuntimeHistory()  # each user's last two run times (services/domain/runtime_prediction.py)
        self.predicted: dict[str, float] = {}  # job holding resources -> its JobScheduled.predicted_runtime_s
        self.elastic: set[str] = set()  # elastic jobs holding resources on fewer nodes than their most (growth.py)
        self.retries: dict[str, int] = {}  # job -> retries its restart policy was granted, as scheduling counts them
        # Derived (never in a snapshot): the node index kept across decisions, built at the first one and
        # then told by the fold which nodes changed (services/placement/index.py)
        self.index: NodeIndex | None = None


@dataclass
class PlacementCore:
    name: ClassVar[str] = "placement"
    backfill: str = "easy"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    layout_subjects: tuple[str, ...] = EVENTS_ONLY  # layout 2: operator inputs come relayed
    snapshot_every: int = 50_000  # records between snapshots (0: never; services/placement/snapshot.py)

    def __post_init__(self) -> None:
        if self.backfill not in MODES:
            raise ValueError(f"unknown backfill mode {self.backfill!r}; modes: {', '.join(MODES)}")

    def fingerprint(self) -> str:
        """What a snapshot must have been folded with to be loaded by this core (a partitioned leader's
        name holds its partitions)."""
        return f"placement/{snapshot.SNAPSHOT_FORMAT}/{self.name}/{self.backfill}/{int(self.virtual_time)}"

    def dump(self, state: PlacementState) -> bytes:
        """The whole state as bytes (``snapshot.dump``)."""
        return snapshot.dump(state, self.fingerprint())

    def load(self, data: bytes) -> PlacementState | None:
        """The state a ``dump`` wrote, or None when it is from another format or configuration."""
        return snapshot.load(data, self.fingerprint(), self.initial())

    def initial(self) -> PlacementState:
        state = PlacementState()
        state.profiles["default"] = Profile(backfill=self.backfill)
        return state

    def evolve(self, state: PlacementState, event: Event, record: Record) -> PlacementState:
        if isinstance(event, _PARTITION_EVENTS):
            state.partitions.apply(event, record.subject)  # scheduling answers what it cannot apply
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
        if isinstance(event, c.JobResized) and event.for_job:
            pre = state.jobs.get(event.for_job)
            job = state.jobs.get(event.job_id)
            if job is not None and pre is not None and pre.state is JobState.PENDING \
                    and state.jobs.resize_applies(event):
                kept = {a.node for a in event.allocations}  # the nodes a shrink gives back are held for the preemptor
                hold_room(state.held, [a for a in job.allocations if a.node not in kept], event.for_job)
        index = state.index
        before = ()
        if index is not None and isinstance(event, (c.JobResized, c.JobStarted)):
            job = state.jobs.jobs.get(event.job_id)
            before = job.allocations if job is not None else ()
        tr = fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        if index is not None:
            _touch(index, state, event, tr, before)
        if tr is not None or isinstance(event, c.JobResized):
            track_elastic(state.elastic, state.jobs, tr.job.job_id if tr is not None else event.job_id)  # type: ignore[attr-defined]
        if tr is not None and tr.before is JobState.PENDING and state.held:
            release_room(state.held, tr.job.job_id)  # a preemptor that starts (or ends) releases its room
        if tr is not None:
            _remember_run(state, event, tr)
        if tr is not None and tr.job.spec is not None and tr.job.spec.affinity is not None \
                and tr.job.spec.affinity.job_anti_affinity:
            was, now = tr.before in HOLDS_RESOURCES, tr.after in HOLDS_RESOURCES
            state.anti_affinity_running += int(now) - int(was)
        if tr is not None and ends_for_good(tr, event, state.retries):
            _settle(state, tr.job.job_id)
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
            state.config_rejections[record.input_seq] = (verb, why)

    # ------------------------------------------------------------------ decide

    def _context(self, state: PlacementState, job_id: str, spec: c.JobSpec, profile: Profile,
                 topology: Topology | None, advance: tuple[AdvanceReservation, ...]) -> Context:
        now = state.now
        parts = state.partitions
        return Context(profile, now, now + spec.time_limit_s, spec.account, advance, topology, job_id=job_id,
                       held=state.held, partition=parts.view(spec.partition),
                       memberships=parts.memberships() if parts else {})

    @staticmethod
    def _topology(state: PlacementState, placed_now: list[tuple[float, str, list[c.NodeAllocation]]]) -> Topology:
        """Where jobs run (for inter-job affinity), with what this decision placed so far."""
        specs = {j: state.jobs.jobs[j].spec for n in state.cluster.nodes.values() for j in n.jobs
                 if j in state.jobs.jobs and state.jobs.jobs[j].spec is not None}
        topology = Topology(state.cluster, specs)  # type: ignore[arg-type]
        for _end, placed_id, allocations in placed_now:  # placed earlier in this decision
            for alloc in allocations:
                topology.add(alloc.node, state.jobs.jobs[placed_id].spec)  # type: ignore[arg-type]
        return topology

    def decide(self, state: PlacementState) -> list[Event]:
        """The latest cycle's decisions, in four steps: (1) the cycle's view of the cluster, (2) each
        pending candidate in the scheduler's order placed, reserved for or explained, (3) elastic
        jobs grown into room no candidate wanted, (4) ``PlacementCycleCompleted``."""
        out: list[Event] = config_rejected(self.name, state.config_rejections, state.now, state.seq)
        if state.cycle <= state.done_cycle:
            return out
        cycle = _Cycle.start(state, self.name, out)  # 1.
        try:
            for job_id in state.candidates:  # 2.
                job = state.jobs.get(job_id)
                if job is None or job.state is not JobState.PENDING or job.spec is None:
                    continue
                if cycle.stopped_by is not None:
                    continue  # strict order: nothing passes the blocked head
                self._consider(cycle, job)
            if not cycle.blocked and state.elastic:  # 3. room no candidate wanted: elastic jobs grow toward their most
                self._grow(cycle)
        finally:
            cycle.index.end()  # the index kept across decisions: this one's overlay dropped
        out.append(Decider(self.name, ts=state.now, source=self.name)(  # 4.
            c.PlacementCycleCompleted, cycle.number, correlation_id=str(cycle.number), cycle=cycle.number,
            basis_seq=state.seq, scheduled=cycle.scheduled, blocked=cycle.blocked,
        ))
        return out

    def _consider(self, cycle: _Cycle, job: Job) -> None:
        """One pending candidate: ``JobScheduled`` if it fits and delays no reservation, else the
        reservation a blocked head gets (its mode permitting) and ``PlacementBlocked`` if the job's
        explanation changed."""
        state = cycle.state
        spec = job.spec
        assert spec is not None
        known = cycle.requests.get(id(spec))  # jobs submitted alike share one spec (domain/job_specs.py): one Request
        req = known[1] if known is not None and known[0] is spec else cycle.request(spec)
        profile = state.profiles.get(spec.profile)
        placed, ctx = self._place(cycle, job.job_id, spec, req, profile)
        earliest: float | None = None
        reserved: list[str] = []
        reasons = placed.reasons
        if placed.allocations is not None:
            held_back = self._start(cycle, job, spec, profile, ctx, placed.allocations)
            if held_back is None:
                return
            reasons = held_back
        elif not placed.fits_nowhere and profile is not None:
            earliest, reserved = self._reserve(cycle, job.job_id, spec, req, profile, ctx)
        cycle.blocked += 1
        explanation = tuple(reasons)
        if explanation != job.last_block or earliest is not None or job.reserved_at is not None:
            cycle.out.append(cycle.decide(
                c.PlacementBlocked, job.job_id, cycle.number, correlation_id=job.job_id, job_id=job.job_id,
                cycle=cycle.number, basis_seq=state.seq, reasons=reasons, earliest_start_ts=earliest,
                reserved_nodes=reserved, fits_nowhere=placed.fits_nowhere,
            ))

    def _place(self, cycle: _Cycle, job_id: str, spec: c.JobSpec, req: Request,
               profile: Profile | None) -> tuple[Placed, Context | None]:
        """Where the job would run now (``place_job``) under its profile, and the context it was judged in."""
        state = cycle.state
        if profile is None:
            return Placed(None, [c.BlockReason(
                reason=f"profile {spec.profile!r} is not configured (profiles: {', '.join(sorted(state.profiles))})",
                nodes=0, filter="Profile")], fits_nowhere=True), None
        if cycle.topology is None and (req.topological or state.anti_affinity_running):
            cycle.topology = self._topology(state, cycle.placed_now)
        ctx = self._context(state, job_id, spec, profile, cycle.topology, cycle.advance)
        if spec.components:  # a heterogeneous job: all its components or none (its request is component 0's alone)
            return place_hetjob(state.cluster, spec, cycle.overlay, ctx), ctx
        cacheable = not req.topological and not cycle.advance and cycle.topology is None and not state.held
        placed = (cycle.unfit.get(req) if cacheable else None) or place_job(state.cluster, req, cycle.overlay,
                                                                          cycle.index, ctx,
                                                                          cycle.fits if cacheable else None)
        if placed.allocations is None and cacheable:
            cycle.unfit[req] = placed
        return placed, ctx

    def _start(self, cycle: _Cycle, job: Job, spec: c.JobSpec, profile: Profile | None, ctx: Context | None,
               allocations: list[c.NodeAllocation]) -> list[c.BlockReason] | None:
        """Start a job that fits (``JobScheduled``, its nodes taken in this cycle's overlay), or the reason
        it may not: it would delay a reservation (``Backfill``) or eat the short-job lane (``Lane``)."""
        state, now = cycle.state, cycle.now
        limit, predicted, delayed = _time_limit(cycle, spec, profile, allocations)
        run = limit if predicted is None else min(predicted, limit)  # what the reservations count on
        end = now + run
        lane = MODES[profile.backfill].lane if profile is not None else None
        kept = None
        if delayed is None and lane is not None and lane.applies(limit, now - job.accepted_ts):
            cycle.lanes = cycle.lanes or LaneLedger(state.cluster, (allocs for _, _, allocs in cycle.placed_now))
            kept = cycle.lanes.defers(lane, allocations, ctx.partition.members if ctx and ctx.partition else None)
        if delayed is not None:
            return [c.BlockReason(
                reason=f"starting now would delay the reservation of {delayed.job_id} "
                       f"{at(delayed.start_ts)}" if end <= delayed.hole_end else
                       f"it would run past {when(delayed.hole_end)}: backfilling ahead of {delayed.job_id} "
                       f"(reserved {at(delayed.start_ts)}) takes only jobs short beside its wait",
                nodes=len(allocations), filter="Backfill")]
        if kept is not None:
            return [c.BlockReason(
                reason=f"it would leave fewer than {kept} idle nodes for jobs of at most "
                       f"{lane.long_s:.0f} s (the short-job lane); a job waits for it at most "
                       f"{lane.patience_s:.0f} s",  # type: ignore[union-attr]
                nodes=len(allocations), filter="Lane")]
        cycle.take(job.job_id, spec, allocations, end)
        attempt = job.attempt + 1
        cycle.out.append(cycle.decide(
            c.JobScheduled, job.job_id, attempt, correlation_id=job.job_id, job_id=job.job_id,
            attempt=attempt, allocations=allocations, basis_seq=state.seq, cycle=cycle.number,
            time_limit_s=limit, backfilled=bool(cycle.reservations),
            borrowed=job.job_id in state.borrowing,
            predicted_runtime_s=None if predicted is None else run,
        ))
        cycle.scheduled += 1
        return None

    @staticmethod
    def _reserve(cycle: _Cycle, job_id: str, spec: c.JobSpec, req: Request, profile: Profile,
                 ctx: Context | None) -> tuple[float | None, list[str]]:
        """What a job that fits later gets under its profile's backfill mode: it stops the cycle (strict
        order), or a reservation (its earliest start and nodes) while the mode allows more."""
        state, now = cycle.state, cycle.now
        mode = MODES[profile.backfill]
        if mode.stops:
            cycle.stopped_by = job_id
            return None, []
        if spec.components:  # a reservation is of one shape: a heterogeneous job gets none (hetjob.py)
            return None, []
        if len(cycle.reservations) >= mode.reservations(profile):
            return None, []
        run_of = None
        if profile.predicts:  # running jobs end by their predictions, corrected when outlived
            run_of = lambda j: expected_run(state.predicted.get(j.job_id, j.limit_s),  # noqa: E731
                                            j.limit_s, now - j.scheduled_ts)
        head_run = spec.time_limit_s if not profile.predicts else \
            state.history.predict(history_key(spec.user, spec.account), spec.time_limit_s)
        # No earliest start for a shape stays none while nothing is placed or reserved in between
        # (the same conditions as ``unfit``'s): 10,000 blocked candidates of one shape on nodes not
        # ready yet asked it 10,000 times, each walking every node and running job (93 s a cycle).
        unreservable = None
        if not req.topological and not cycle.advance and cycle.topology is None and not state.held:
            unreservable = (least(req), head_run, profile.name, len(cycle.placed_now), len(cycle.reservations))
            if unreservable in cycle.unreservable:
                return None, []
        held = reserve(state.cluster, state.jobs, now, job_id, least(req), cycle.overlay, cycle.placed_now, ctx,
                       head_run, cycle.reservations if mode.stacked else [],
                       concrete=mode.stacked or bool(cycle.advance), run_of=run_of, index=cycle.index)
        if held is None:
            if unreservable is not None:
                cycle.unreservable.add(unreservable)
            return None, []
        held.shadow_only = mode.shadow_only
        if mode.hole_fraction is not None:
            held.hole_end = now + mode.hole_fraction * (held.start_ts - now)
        cycle.reservations.append(held)
        return held.start_ts, sorted(a.node for a in held.allocations) or gang_names(state.cluster, held.fitting,
                                                                                     least(req).nodes)

    def _grow(self, cycle: _Cycle) -> None:
        """Elastic jobs below their most grow into room no candidate wanted (``growth.grow``)."""
        state = cycle.state
        if cycle.topology is None and state.anti_affinity_running:
            cycle.topology = self._topology(state, cycle.placed_now)
        room = Room(state.cluster, state.jobs, state.profiles, state.held, state.partitions, cycle.advance, cycle.now,
                    state.seq)
        cycle.out.extend(grow(room, state.elastic, cycle.overlay, cycle.index, cycle.topology, cycle.number,
                              self.name))


@dataclass
class _Cycle:
    """One decision over a scheduling cycle: the view of the cluster it places on, and what it has
    placed, reserved and decided so far (for the candidates after)."""

    state: PlacementState
    number: int
    now: float
    advance: tuple[AdvanceReservation, ...]  # advance reservations not over yet, by name
    overlay: Overlay  # what this decision has placed, on top of the ledger
    index: NodeIndex
    decide: Decider  # placement's decisions of this cycle (JobScheduled, PlacementBlocked)
    out: list[Event]
    reservations: list[Reservation] = field(default_factory=list)
    placed_now: list[tuple[float, str, list[c.NodeAllocation]]] = field(default_factory=list)  # (end, job, allocations)
    topology: Topology | None = None  # where jobs run, built once a job's affinity needs it
    # Within one decision free capacity only shrinks, so a request shape that did
    # not fit stays unfit for the rest of the cycle: remember it, skip the scan (not for
    # inter-job affinity, which placements can satisfy, nor under advance reservations,
    # whose answer depends on the job's account and time).
    unfit: dict[Request, Placed] = field(default_factory=dict)
    unreservable: set[tuple[object, ...]] = field(default_factory=set)  # shapes without an earliest start (_reserve)
    # Under the same conditions a request's fit on a kind of node is the same for every job: computed once a
    # cycle per (request, group key) (``NodeIndex.evaluate``); a one-GPU backlog asks ~3 kinds a job
    fits: dict[Request, dict[tuple[object, ...], Fit]] = field(default_factory=dict)
    requests: dict[int, tuple[c.JobSpec, Request]] = field(default_factory=dict)  # id(spec) -> (spec, its request)
    stopped_by: str | None = None
    lanes: LaneLedger | None = None  # idle nodes, when a profile's mode keeps a short-job lane
    scheduled: int = 0
    blocked: int = 0

    @classmethod
    def start(cls, state: PlacementState, by: str, out: list[Event]) -> _Cycle:
        now = state.now
        overlay = Overlay()
        advance = tuple(sorted((r for r in state.advance.values() if r.end_ts > now), key=lambda r: r.name))
        memberships = state.partitions.memberships() if state.partitions else {}
        ctx = Context(reservations=advance, held=dict(state.held), memberships=memberships)
        if state.index is None or state.index.cluster is not state.cluster:
            state.index = NodeIndex(state.cluster, overlay, ctx)
        index = state.index.begin(overlay, ctx)
        decide = Decider(by, ts=now, source=by,
                         causation_id=decision_id("scheduling", c.SchedulingCycleCompleted, state.cycle))
        return cls(state, state.cycle, now, advance, overlay, index, decide, out)

    def request(self, spec: c.JobSpec) -> Request:
        """``request_of(spec)``, remembered for this decision (the spec held with it, so its id stays its own)."""
        req = request_of(spec)
        self.requests[id(spec)] = (spec, req)
        return req

    def take(self, job_id: str, spec: c.JobSpec, allocations: list[c.NodeAllocation], end: float) -> None:
        """A job placed in this cycle: its nodes are taken for the candidates after it."""
        if self.lanes is not None:
            self.lanes.take(allocations)
        for alloc in allocations:
            self.overlay.take(alloc)
            self.index.moved(alloc.node)
            if self.topology is not None:
                self.topology.add(alloc.node, spec)
        self.placed_now.append((end, job_id, allocations))


def _time_limit(cycle: _Cycle, spec: c.JobSpec, profile: Profile | None,
                allocations: list[c.NodeAllocation]) -> tuple[float, float | None, Reservation | None]:
    """A job that fits now: its time limit (Slurm's ``--time-min`` may shorten it so that it delays
    no reservation), its predicted run time (EASY++, the profile's ``runtime_estimate``) and the
    first reservation it would still delay (None: none)."""
    state, now, reservations = cycle.state, cycle.now, cycle.reservations
    limit = spec.time_limit_s
    predicted = (state.history.predict(history_key(spec.user, spec.account), limit)
                 if profile is not None and profile.predicts else None)
    if spec.time_min_s and reservations:  # Slurm's --time-min: a shorter limit may let it through
        shorter = shortened_limit(reservations, state.cluster, allocations, now, limit, spec.time_min_s)
        delayed = None if shorter is not None else next(
            r for r in reservations if not r.admits(state.cluster, allocations, now + limit, commit=False))
        return (shorter if shorter is not None else limit), predicted, delayed
    expected = limit if predicted is None else predicted
    delayed = next((r for r in reservations if not r.admits(state.cluster, allocations, now + expected)), None)
    return limit, predicted, delayed


def _touch(index: NodeIndex, state: PlacementState, event: Event, tr: Transition | None,
           before: tuple[c.NodeAllocation, ...]) -> None:
    """Tell the node index which nodes ``fold_cluster`` may have changed: the node the event names (a node
    event; a job's event naming its node changes nothing more, and costs one filing), the nodes of an
    allocation taken or given back, and an allocation changed in place (``JobResized``, ``JobStarted``'s
    devices) before and after."""
    name = getattr(event, "node", None)
    if isinstance(name, str):
        index.touch(name)
    if tr is not None and (tr.before in HOLDS_RESOURCES) != (tr.after in HOLDS_RESOURCES):
        for alloc in tr.job.allocations:
            index.touch(alloc.node)
    if isinstance(event, (c.JobResized, c.JobStarted)):
        job = state.jobs.jobs.get(event.job_id)
        if job is not None and job.allocations is not before:
            for alloc in (*before, *job.allocations):
                index.touch(alloc.node)


def _settle(state: PlacementState, job_id: str) -> None:
    """The job has ended and no ``JobRequeued`` can follow (``restart.ends_for_good``, scheduling's own rule
    and retry count, so placement settles exactly the jobs scheduling settles): only its outcome is kept
    (``JobTable.settle``), so the state does not grow with every job ever run.

    What else may name it later changes nothing for a forgotten job: a stale attempt's report, a
    ``PlacementBlocked`` or a ``JobResized`` apply to no ended attempt, and scheduling offers it in no
    cycle. One did: a ``PreemptionRequested`` that lands after its victim ended held the victim's old
    nodes for the preemptor; now it holds none (the room is free already)."""
    state.retries.pop(job_id, None)
    state.jobs.settle(job_id)


_RAN = (JobState.SUCCEEDED, JobState.FAILED, JobState.OUT_OF_MEMORY)  # a run that ended by itself


def _remember_run(state: PlacementState, event: Event, tr: Transition) -> None:
    """Fold what predictions need: the prediction of each attempt placement started (its own
    ``JobScheduled``), and each user's run times as runs end (services/domain/runtime_prediction.py)."""
    job_id = tr.job.job_id
    if tr.after is JobState.SCHEDULED:
        if isinstance(event, c.JobScheduled) and event.predicted_runtime_s is not None:
            state.predicted[job_id] = event.predicted_runtime_s
        return
    if tr.after in HOLDS_RESOURCES:
        return
    state.predicted.pop(job_id, None)
    spec = tr.job.spec
    if tr.before is JobState.RUNNING and tr.after in _RAN and spec is not None:
        state.history.record(history_key(spec.user, spec.account), tr.job.ended_ts - tr.job.started_ts)


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
