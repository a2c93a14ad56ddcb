"""Preemption: which running jobs to stop so that a blocked job can start, wasting least. Pure.

**Who may preempt.** A job that a placement cycle left blocked (it was a
candidate and is still pending when placement completes the cycle; not
``fits_nowhere``) may preempt

* jobs of the classes its own class may preempt (``rules``; by default
  critical preempts every lower class, high preempts normal, low and
  scavenger, normal preempts low and scavenger, low and scavenger nobody);
* and, whatever their class, jobs running on **borrowed** quota in its
  account's cohort (its sibling accounts), when it fits in its own account's
  quota: the lender takes its quota back.

A job that was itself preempted for another cannot preempt until it runs
again (no cascades); one whose earlier victims are still stopping waits for
them, and after they stopped it waits for a placement cycle to leave it
blocked again before it preempts more (their room is held for it).

**Who may be a victim.** A running attempt of a ``preemptible`` job other
than the preemptor, that has run at least its ``min_runtime_s``, that has not
been preempted ``max_preemptions`` times, and that is not already being
stopped.

**The cheapest set** (``victims = "cheapest"``, the default). A victim's cost
is ``(work lost, GPUs, age)``: the work it loses, its billing rate
(GPU-equivalents, as fair share counts them) times the seconds since its last
checkpoint (or its start); its GPUs; and how long it has run (younger is
cheaper). Work lost comes first: a preempted GPU is not wasted (the preemptor
uses it), the work done on it since the last checkpoint is. (Ordering by GPUs
first, as first specified, lost more GPU-time than Kueue's order on the mixed
workload of ``docs/benchmarks.md``: it stops an old one-GPU job that ran for
hours rather than a wide job that has just started.) For
every node the preemptor could use, victims on that node are added cheapest
first until the preemptor fits there, then any victim it fits without is put
back (newest addition first); the node's cost is the sum of its victims'. The
preemptor's nodes are its ``nodes`` cheapest options (a node where it fits
already costs nothing); a gang victim is preempted whole (all of its nodes are
given back). Sets compare by total work lost, then total GPUs, then total age.

The same add-then-put-back pass also runs cluster-wide over all eligible
victims in cost order (it finds a gang victim that frees several of a gang
preemptor's nodes at once); the cheaper of the two sets is chosen.

``victims = "lowest-priority-youngest"`` is the order Kueue uses by default,
kept to compare: only the cluster-wide pass, with all eligible victims in
order lowest class first, then the most recently started.

**Protocol.** ``PreemptionRequested`` per victim (``for_job``, grace period);
the agent signals the job (checkpoint signal, SIGTERM, SIGKILL after the grace)
and reports ``JobPreempted``; scheduling requeues the victim at once, keeping
its age and checkpoint. Placement holds the victims' nodes for the preemptor
until it starts, so nobody else takes them meanwhile.

**Rate limits.** At most ``per_minute`` preemptions in any minute of log time,
cluster-wide, and ``per_account_per_minute`` of one victim account; a
preemptor whose set would exceed them waits (it never preempts a part).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import ClassVar, Mapping

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG, parse_subject
from services.placement.fit import Context, Overlay, fit_node, hold_room, release_room
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.scheduling.core import SchedulingCore, SchedulingState
from services.scheduling.fairshare import association
from services.scheduling.policy import CLASS_RANK
from services.scheduling.quotas import OK, amount_of
from services.state.cluster import Cluster, Request, fold_cluster, request_of
from services.state.config import config_rejected
from services.state.jobs import HOLDS_RESOURCES, Job, JobState, JobTable

__all__ = ["PreemptionCore", "PreemptionState", "PreemptionConfig", "Plan", "DEFAULT_RULES", "VICTIM_ORDERS"]

DEFAULT_RULES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "critical": ("high", "normal", "low", "scavenger"),
    "high": ("normal", "low", "scavenger"),
    "normal": ("low", "scavenger"),
    "low": (),
    "scavenger": (),
})
VICTIM_ORDERS = ("cheapest", "lowest-priority-youngest")


@dataclass(frozen=True)
class PreemptionConfig:
    rules: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_RULES)
    victims: str = "cheapest"
    grace_period_s: float = 30.0
    max_preemptions: int = 3
    per_minute: int = 60
    per_account_per_minute: int = 20

    def check(self, ev: c.PreemptionConfigured) -> str | None:
        for cls, lower in ev.rules.items():
            if cls not in c.PRIORITY_CLASSES:
                return f"rules: {cls!r} is not a priority class ({', '.join(c.PRIORITY_CLASSES)})"
            for other in lower:
                if other not in c.PRIORITY_CLASSES:
                    return f"rules.{cls}: {other!r} is not a priority class"
                if CLASS_RANK[other] <= CLASS_RANK[cls]:
                    return f"rules.{cls}: may only preempt lower classes, not {other!r}"
        if ev.victims is not None and ev.victims not in VICTIM_ORDERS:
            return f"victims: {ev.victims!r} is not one of {', '.join(VICTIM_ORDERS)}"
        if ev.grace_period_s is not None and not (0 <= ev.grace_period_s <= 86400):
            return f"grace_period_s: {ev.grace_period_s!r} must be between 0 and 86400"
        for name in ("max_preemptions", "per_minute", "per_account_per_minute"):
            value = getattr(ev, name)
            if value is not None and value < 0:
                return f"{name}: {value} must be 0 or more"
        return None

    def updated(self, ev: c.PreemptionConfigured) -> PreemptionConfig:
        changes: dict[str, object] = {n: getattr(ev, n) for n in ("victims", "grace_period_s", "max_preemptions",
                                                                  "per_minute", "per_account_per_minute")
                                      if getattr(ev, n) is not None}
        if ev.rules:
            changes["rules"] = MappingProxyType({**self.rules, **{k: tuple(v) for k, v in ev.rules.items()}})
        return replace(self, **changes)


@dataclass
class Plan:
    """Who would be preempted for ``job_id``, and why each of them."""

    job_id: str
    victims: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    cost: tuple[float, float, float] = (0.0, 0.0, 0.0)
    reasons: dict[str, str] = field(default_factory=dict)  # victim -> why it was chosen
    why_not: str = ""  # when there is no plan


class PreemptionState(CoreState):
    def __init__(self, sched: SchedulingState) -> None:
        super().__init__()
        self.sched = sched  # the scheduler's view (jobs, accounts, quotas), folded alike
        self.jobs = JobTable()  # the ledger's own table
        self.cluster = Cluster()
        self.config = PreemptionConfig()
        self.blocked: dict[str, c.PlacementBlocked] = {}  # pending job -> latest explanation
        self.preempted: dict[str, int] = {}  # job -> times preempted
        self.checkpoint_ts: dict[str, float] = {}  # job -> time of its current attempt's last checkpoint
        self.stopping: dict[str, str] = {}  # victim -> preemptor, while the victim still holds resources
        self.no_cascade: set[str] = set()  # pending jobs preempted for another: they may not preempt
        self.recent: deque[tuple[float, str]] = deque()  # (time, victim account) of recent requests
        self.candidates: dict[int, list[str]] = {}  # scheduling cycle -> its candidates, until placed
        self.blocked_seq: dict[str, int] = {}  # pending job -> seq of the last placement cycle that left it blocked
        self.round_ended: dict[str, int] = {}  # preemptor -> seq at which the last victim of its round stopped
        self.running_by_class: dict[str, int] = {}  # jobs holding resources, per priority class
        self.borrowed_running = 0  # of which admitted by borrowing
        self.config_rejections: dict[int, str] = {}
        self.held: dict[str, frozenset[str]] = {}  # node -> preemptors placement holds it for (as placement folds it)


@dataclass
class PreemptionCore:
    name: ClassVar[str] = "preemption"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    max_preemptors_per_round: int = 16
    _sched: SchedulingCore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._sched = SchedulingCore(policy="fcfs", virtual_time=self.virtual_time)

    def initial(self) -> PreemptionState:
        return PreemptionState(self._sched.initial())

    # ------------------------------------------------------------------ evolve

    def evolve(self, state: PreemptionState, event: Event, record: Record) -> PreemptionState:
        inner = state.sched
        inner.seq, inner.now = state.seq, state.now
        self._sched.evolve(inner, event, record)
        match event:
            case c.PlacementBlocked(job_id=job_id):
                job = state.jobs.get(job_id)
                if job is not None and job.state is JobState.PENDING:
                    state.blocked[job_id] = event
                return state
            case c.SchedulingCycleCompleted(cycle=cycle, candidates=candidates):
                state.candidates[cycle] = list(candidates)
                return state
            case c.PlacementCycleCompleted(cycle=cycle):
                for job_id in state.candidates.pop(cycle, ()):
                    job = state.jobs.get(job_id)
                    if job is not None and job.state is JobState.PENDING:
                        state.blocked_seq[job_id] = record.seq
                for old in [k for k in state.candidates if k < cycle]:
                    del state.candidates[old]
                return state
            case c.PreemptionConfigured():
                subject = parse_subject(record.subject)
                why = "PreemptionConfigured is accepted only on horizon.in._admin.preemption" \
                    if subject is None or subject.kind != "admin" else state.config.check(event)
                if why is None:
                    state.config = state.config.updated(event)
                else:
                    state.config_rejections[record.seq] = why
                return state
            case c.ConfigRejected(request_seq=request_seq) if event.source == self.name:
                state.config_rejections.pop(request_seq, None)
                return state
            case c.PreemptionRequested(job_id=victim, for_job=for_job):
                job = state.jobs.get(victim)
                pre = state.jobs.get(for_job) if for_job else None
                if job is not None and pre is not None and pre.state is JobState.PENDING:
                    hold_room(state.held, job.allocations, for_job)
                if job is not None and job.state in HOLDS_RESOURCES and job.attempt == event.attempt:
                    state.stopping[victim] = for_job
                    if event.source == self.name and job.spec is not None:
                        state.recent.append((state.now, job.spec.account))
                return state
            case c.JobCheckpointed(job_id=job_id):
                state.checkpoint_ts[job_id] = state.now
            case c.JobPreempted(job_id=job_id, for_job=for_job):
                job = state.jobs.get(job_id)
                if job is not None and job.attempt == event.attempt and job.state in HOLDS_RESOURCES:
                    state.preempted[job_id] = state.preempted.get(job_id, 0) + 1
                    if for_job:
                        state.no_cascade.add(job_id)
        tr = fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        if tr is not None:
            job_id = tr.job.job_id
            if tr.before is JobState.PENDING and state.held:
                release_room(state.held, job_id)
            if tr.after is not JobState.PENDING:
                state.blocked.pop(job_id, None)
                state.blocked_seq.pop(job_id, None)
                state.round_ended.pop(job_id, None)
            if tr.after in HOLDS_RESOURCES:
                state.no_cascade.discard(job_id)
            holds_before, holds_after = tr.before in HOLDS_RESOURCES, tr.after in HOLDS_RESOURCES
            if holds_before != holds_after and tr.job.spec is not None:
                sign = 1 if holds_after else -1
                cls = tr.job.spec.priority_class
                state.running_by_class[cls] = state.running_by_class.get(cls, 0) + sign
                state.borrowed_running += sign if tr.job.borrowed else 0
            if tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
                preemptor = state.stopping.pop(job_id, None)
                if preemptor:
                    state.round_ended[preemptor] = record.seq
                state.checkpoint_ts.pop(job_id, None)
        while state.recent and state.recent[0][0] <= state.now - 60.0:
            state.recent.popleft()
        return state

    # ------------------------------------------------------------------ choosing

    def preemptors(self, state: PreemptionState) -> list[Job]:
        """Blocked jobs that may preempt now, highest class first, then oldest."""
        busy = set(state.stopping.values())
        rules = state.config.rules
        may_reclaim = state.borrowed_running > 0
        out = []
        for job_id in state.blocked_seq:
            job = state.jobs.get(job_id)
            explained = state.blocked.get(job_id)
            if job is None or job.spec is None or job.state is not JobState.PENDING:
                continue
            if explained is not None and explained.fits_nowhere:
                continue  # no node could hold it even empty: preempting cannot help
            if not may_reclaim and not any(state.running_by_class.get(lower, 0)
                                           for lower in rules.get(job.spec.priority_class, ())):
                continue  # nobody it could preempt is running
            if job_id in busy or job_id in state.no_cascade:
                continue
            if state.blocked_seq.get(job_id, 0) <= state.round_ended.get(job_id, 0):
                continue  # its victims' room is being placed for it: only a new "blocked" calls for more
            out.append(job)
        out.sort(key=lambda j: (CLASS_RANK[j.spec.priority_class], j.accepted_seq))  # type: ignore[union-attr]
        return out

    def _reclaims(self, state: PreemptionState, job: Job) -> bool:
        """The job fits in its own account's quota: borrowed quota of its cohort may be taken back."""
        spec = job.spec
        assert spec is not None
        sched = state.sched
        fs = sched.fairshare
        leaf = association(spec)
        if leaf not in fs.accounts:
            return False
        accounts = [a for a in fs.path(leaf) if not a.leaf]
        if not any(a.configured and (a.quota.gpus is not None or a.quota.cpus_milli is not None) for a in accounts):
            return False
        borrowing = [(a, a.borrowing) for a in accounts]
        for a, _ in borrowing:
            a.borrowing = False  # judged without borrowing: within its own quota?
        try:
            verdict, _ = sched.quotas.admit(fs, leaf, amount_of(spec), {})
        finally:
            for a, was in borrowing:
                a.borrowing = was
        return verdict == OK

    def _eligible(self, state: PreemptionState, pre: Job, victim: Job, reclaim: bool) -> str | None:
        """Why ``victim`` may be preempted for ``pre`` (None: it may not)."""
        spec, vspec = pre.spec, victim.spec
        if vspec is None or spec is None or victim.job_id == pre.job_id or not vspec.preemptible:
            return None
        if victim.state not in HOLDS_RESOURCES or victim.job_id in state.stopping:
            return None
        ran = state.now - _started(state, victim)
        if ran < vspec.min_runtime_s:
            return None
        if state.preempted.get(victim.job_id, 0) >= state.config.max_preemptions:
            return None
        if vspec.priority_class in state.config.rules.get(spec.priority_class, ()):
            return f"class {vspec.priority_class} < {spec.priority_class}"
        if reclaim and victim.borrowed:
            pfs = state.sched.fairshare
            mine = pfs.accounts.get(spec.account)
            theirs = pfs.accounts.get(vspec.account)
            if mine is not None and theirs is not None and theirs.parent == mine.parent and theirs is not mine:
                return f"runs on quota borrowed in {spec.account}'s cohort"
        return None

    def cost(self, state: PreemptionState, victim: Job) -> tuple[float, float, float]:
        """(GPUs, work lost in GPU-equivalent seconds, seconds run)."""
        spec = victim.spec
        assert spec is not None
        started = _started(state, victim)
        since = max(started, state.checkpoint_ts.get(victim.job_id, started))
        rate = state.sched.fairshare.rate_of(spec)
        return (float(spec.total_gpus), rate * max(0.0, state.now - since), max(0.0, state.now - started))

    def _order(self, state: PreemptionState, victim: Job) -> tuple[object, ...]:
        if state.config.victims == "lowest-priority-youngest":
            spec = victim.spec
            assert spec is not None
            return (-CLASS_RANK[spec.priority_class], -_started(state, victim), victim.job_id)
        gpus, lost, age = self.cost(state, victim)
        return (lost, gpus, age, victim.job_id)  # work lost first, then GPUs, then age

    def plan(self, state: PreemptionState, job_id: str, taken: set[str] | None = None) -> Plan:
        """The victims preempting for ``job_id`` would take (pure; ``taken``: victims already chosen
        for others in this round)."""
        taken = taken or set()
        job = state.jobs.get(job_id)
        out = Plan(job_id)
        if job is None or job.spec is None or job.state is not JobState.PENDING:
            out.why_not = f"{job_id} is not pending"
            return out
        spec = job.spec
        req = request_of(spec)
        reclaim = self._reclaims(state, job)
        eligible: dict[str, tuple[Job, str]] = {}
        running = sorted({j for n in state.cluster.nodes.values() for j in n.jobs})
        for victim_id in running:
            victim = state.jobs.jobs[victim_id]
            if victim.job_id in taken or victim.state not in HOLDS_RESOURCES:
                continue
            why = self._eligible(state, job, victim, reclaim)
            if why is not None:
                eligible[victim.job_id] = (victim, why)
        if not eligible:
            out.why_not = "no running job may be preempted for it (class rules, borrowing, minimum runtime, limits)"
            return out
        # Room placement holds for another preemptor is not room for this one (nor is it to be made there).
        ctx = Context(start_ts=state.now, end_ts=state.now + spec.time_limit_s, account=spec.account, job_id=job_id,
                      held=state.held)
        base = Overlay()  # victims chosen for others in this round are not eligible: their room is theirs
        chosen = self._global(state, req, ctx, base, eligible)
        if state.config.victims == "cheapest":
            # Node by node finds the cheap room on the right nodes; the cluster-wide pass finds
            # gang victims that free several nodes at once. The cheaper set wins.
            per_node = self._per_node(state, req, ctx, base, eligible)
            if chosen is None or (per_node is not None and self._set_cost(state, per_node[0]) < self._set_cost(
                    state, chosen[0])):
                chosen = per_node
        if chosen is None:
            out.why_not = "even preempting every eligible job would not make room"
            return out
        victims, nodes = chosen
        out.victims = sorted(victims)
        out.nodes = sorted(nodes)
        costs = [self.cost(state, eligible[v][0]) for v in out.victims]
        out.cost = (math.fsum(x[0] for x in costs), math.fsum(x[1] for x in costs), math.fsum(x[2] for x in costs))
        out.reasons = {v: eligible[v][1] for v in out.victims}
        return out

    def _set_cost(self, state: PreemptionState, victims: set[str]) -> tuple[float, float, float, list[str]]:
        # In a fixed order and exactly (fsum): two sets may tie, and set order follows the hash seed.
        ids = sorted(victims)
        costs = [self.cost(state, state.jobs.jobs[v]) for v in ids]
        return (math.fsum(x[1] for x in costs), math.fsum(x[0] for x in costs), math.fsum(x[2] for x in costs), ids)

    def _fits(self, state: PreemptionState, name: str, req: Request, ctx: Context, overlay: Overlay) -> bool:
        return fit_node(state.cluster.nodes[name], req, overlay, ctx).ok

    @staticmethod
    def _give(overlay: Overlay, job: Job) -> None:
        for alloc in job.allocations:  # a gang is given back whole
            overlay.give(alloc)

    def _per_node(self, state: PreemptionState, req: Request, ctx: Context, base: Overlay,
                  eligible: dict[str, tuple[Job, str]]) -> tuple[set[str], list[str]] | None:
        options: list[tuple[tuple[float, float, float], str, set[str]]] = []
        for node in state.cluster.sorted_nodes():
            if not node.schedulable:
                continue
            if self._fits(state, node.name, req, ctx, base):
                options.append(((0.0, 0.0, 0.0), node.name, set()))
                continue
            here = sorted((eligible[j][0] for j in node.jobs if j in eligible), key=lambda v: self._order(state, v))
            picked = self._add_until_fits(state, [node.name], req, ctx, base, here, need=1)
            if picked is None:
                continue
            costs = [self.cost(state, v) for v in picked]
            total = (math.fsum(x[0] for x in costs), math.fsum(x[1] for x in costs), math.fsum(x[2] for x in costs))
            options.append((total, node.name, {v.job_id for v in picked}))
        if len(options) < req.nodes:
            return None
        options.sort(key=lambda o: ((o[0][1], o[0][0], o[0][2]), o[1]))  # work lost, GPUs, age; then the name
        best = options[: req.nodes]
        victims: set[str] = set()
        for _, _, vs in best:
            victims |= vs
        if not victims:
            return None  # it fits already: nothing to preempt (placement will place it)
        return victims, [name for _, name, _ in best]

    def _global(self, state: PreemptionState, req: Request, ctx: Context, base: Overlay,
                eligible: dict[str, tuple[Job, str]]) -> tuple[set[str], list[str]] | None:
        order = sorted((v for v, _ in eligible.values()), key=lambda v: self._order(state, v))
        names = [n.name for n in state.cluster.sorted_nodes() if n.schedulable]
        picked = self._add_until_fits(state, names, req, ctx, base, order, need=req.nodes)
        if not picked:
            return None  # never fits, or fits already
        overlay = base.copy()
        for v in picked:
            self._give(overlay, v)
        nodes = [n for n in names if self._fits(state, n, req, ctx, overlay)][: req.nodes]
        return {v.job_id for v in picked}, nodes

    def _add_until_fits(self, state: PreemptionState, names: list[str], req: Request, ctx: Context,
                        base: Overlay, order: list[Job], need: int) -> list[Job] | None:
        """Victims from ``order`` added one by one until ``need`` of ``names`` fit the job, then those
        it fits without put back (the newest addition first); None if it never fits."""
        def enough(victims: list[Job]) -> bool:
            overlay = base.copy()
            for v in victims:
                self._give(overlay, v)
            return sum(1 for n in names if self._fits(state, n, req, ctx, overlay)) >= need

        if enough([]):
            return []  # it fits already: nothing to preempt
        picked: list[Job] = []
        for victim in order:
            picked.append(victim)
            if enough(picked):
                break
        else:
            return None
        for victim in reversed(list(picked)):
            trial = [v for v in picked if v is not victim]
            if trial and enough(trial):
                picked = trial
        return picked

    # ------------------------------------------------------------------ decide

    def decide(self, state: PreemptionState) -> list[Event]:
        out: list[Event] = config_rejected(
            self.name, {seq: ("preemption", why) for seq, why in state.config_rejections.items()}, state.now, state.seq)
        cfg = state.config
        window = [(t, a) for t, a in state.recent if t > state.now - 60.0]
        per_account: dict[str, int] = {}
        for _, account in window:
            per_account[account] = per_account.get(account, 0) + 1
        total = len(window)
        taken: set[str] = set()
        for pre in self.preemptors(state)[: self.max_preemptors_per_round]:
            plan = self.plan(state, pre.job_id, taken)
            if not plan.victims:
                continue
            victims = [state.jobs.jobs[v] for v in plan.victims]
            accounts: dict[str, int] = {}
            for v in victims:
                accounts[v.spec.account] = accounts.get(v.spec.account, 0) + 1  # type: ignore[union-attr]
            if total + len(victims) > cfg.per_minute or any(
                    per_account.get(a, 0) + n > cfg.per_account_per_minute for a, n in accounts.items()):
                continue  # over the rate: wait (never a part of a set)
            total += len(victims)
            for a, n in accounts.items():
                per_account[a] = per_account.get(a, 0) + n
            taken.update(plan.victims)
            for v in victims:
                out.append(c.PreemptionRequested(
                    id=f"preemption/PreemptionRequested/{v.job_id}/{v.attempt}", ts=state.now,
                    correlation_id=v.job_id, source=self.name, job_id=v.job_id, attempt=v.attempt,
                    for_job=pre.job_id, grace_period_s=cfg.grace_period_s, basis_seq=state.seq,
                    reason=f"for {pre.job_id} ({pre.spec.priority_class}): {plan.reasons[v.job_id]}",  # type: ignore[union-attr]
                ))
        return out



def _started(state: PreemptionState, job: Job) -> float:
    """When the attempt started running ("now" if it is scheduled but not started yet)."""
    return job.started_ts if job.state is JobState.RUNNING else state.now
