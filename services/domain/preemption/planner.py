"""Choosing victims: which running jobs to stop so that a blocked job can start, wasting least. Pure.

**Who may preempt.** A job that a placement cycle left blocked (it was a
candidate and is still pending when placement completes the cycle; not
``fits_nowhere``) may preempt

* jobs of the classes its own class may preempt (``rules``; by default
  critical preempts every lower class, high preempts normal, low and
  scavenger, normal preempts low and scavenger, low and scavenger nobody);
* and, whatever their class, jobs running on **borrowed** quota in its
  account's cohort (its sibling accounts), when it fits in its own account's
  quota: the lender takes its quota back.

A job that waits for licenses (``services/domain/licenses.py``) does not
preempt: room on nodes cannot give it them. A job that was itself preempted
for another cannot preempt until it runs again (no cascades); one whose
earlier victims are still stopping waits for
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

**Elastic victims shrink first.** Before any victim is chosen, the planner
tries to make the room by shrinking eligible elastic jobs (``--nodes
MIN-MAX``) only: each gives back nodes above its ``min_nodes`` (never its
first node, where its batch script runs), node by node until the preemptor
fits on its least nodes (``_shrink``). That loses no work, so it always wins
over preempting; when shrinking alone cannot make the room, victims are
chosen as below (an elastic job may then be preempted whole).

The same add-then-put-back pass also runs cluster-wide over all eligible
victims in cost order (it finds a gang victim that frees several of a gang
preemptor's nodes at once); the cheaper of the two sets is chosen.

``victims = "lowest-priority-youngest"`` is the order Kueue uses by default,
kept to compare: only the cluster-wide pass, with all eligible victims in
order lowest class first, then the most recently started.

The preemption service (``services/preemption/core.py``) decides from these
plans within its rate limits; ``horizon preempt --dry-run`` shows a plan.
"""

from __future__ import annotations

import dataclasses
import math

from services.domain.cluster import BACKEND_LABEL, Request, least, request_of
from services.domain.fairshare import association
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.fit.node import Fitter
from services.domain.jobs import HOLDS_RESOURCES, Job, JobState
from services.domain.policy import CLASS_RANK
from services.domain.preemption.fold import PreemptionFold
from services.domain.preemption.state import Plan, PreemptionState
from services.domain.queue.fold import held_shape
from services.domain.quotas import OK, amount_of

__all__ = ["PreemptionPlanner"]


class PreemptionPlanner(PreemptionFold):
    """``PreemptionFold`` and the choice of victims from its state (no decisions: the
    preemption service's core adds the rate limits and the requests)."""

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
            if job.spec.components:
                continue  # a heterogeneous job: room for all its components at once is not planned (plan)
            if job.spec.licenses and state.sched.licenses.judge(job.spec.licenses):
                continue  # it waits for licenses, which room on nodes cannot give it
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
        rate = state.sched.fairshare.rate_of(held_shape(victim))  # an elastic job's work is on the nodes it holds
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
        if spec.components:
            out.why_not = ("a heterogeneous job does not preempt: the victims would have to make room for all its "
                           "components at once, which is not planned")
            return out
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
        # Nor is room outside its partition (services/domain/partitions.py).
        ctx = Context(start_ts=state.now, end_ts=state.now + spec.time_limit_s, account=spec.account, job_id=job_id,
                      held=state.held, partition=state.sched.partitions.view(spec.partition))
        base = Overlay()  # victims chosen for others in this round are not eligible: their room is theirs
        chosen = None
        # A gang's nodes are of one backend (services/placement/place.py): on a cluster of several, its room
        # is planned within each backend apart (its nodes' label), a shrink first, else the cheapest victims;
        # each Fitter holds the filters that apply to this job, chosen once for every node tried.
        fits = [Fitter(within, ctx) for within in _one_backend_each(state, least(req))]
        for fit in fits:
            shrunk = self._shrink(state, fit, base, eligible)
            if shrunk is not None:  # elastic jobs give back nodes above their least: nobody is preempted
                out.shrinks, out.nodes = shrunk
                out.reasons = {v: eligible[v][1] for v in out.shrinks}
                return out
        for fit in fits:
            found = self._global(state, fit, base, eligible)
            if state.config.victims == "cheapest":
                # Node by node finds the cheap room on the right nodes; the cluster-wide pass finds
                # gang victims that free several nodes at once. The cheaper set wins.
                per_node = self._per_node(state, fit, base, eligible)
                if found is None or (per_node is not None and self._set_cost(state, per_node[0]) < self._set_cost(
                        state, found[0])):
                    found = per_node
            if found is not None and (chosen is None or self._set_cost(state, found[0]) < self._set_cost(
                    state, chosen[0])):
                chosen = found
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

    @staticmethod
    def _fits(state: PreemptionState, name: str, fit: Fitter, overlay: Overlay) -> bool:
        return fit(state.cluster.nodes[name], overlay).ok

    @staticmethod
    def _give(overlay: Overlay, job: Job) -> None:
        for alloc in job.allocations:  # a gang is given back whole
            overlay.give(alloc)

    def _per_node(self, state: PreemptionState, fit: Fitter, base: Overlay,
                  eligible: dict[str, tuple[Job, str]]) -> tuple[set[str], list[str]] | None:
        options: list[tuple[tuple[float, float, float], str, set[str]]] = []
        for node in state.cluster.sorted_nodes():
            if not node.schedulable:
                continue
            if self._fits(state, node.name, fit, base):
                options.append(((0.0, 0.0, 0.0), node.name, set()))
                continue
            here = sorted((eligible[j][0] for j in node.jobs if j in eligible), key=lambda v: self._order(state, v))
            picked = self._add_until_fits(state, [node.name], fit, base, here, need=1)
            if picked is None:
                continue
            costs = [self.cost(state, v) for v in picked]
            total = (math.fsum(x[0] for x in costs), math.fsum(x[1] for x in costs), math.fsum(x[2] for x in costs))
            options.append((total, node.name, {v.job_id for v in picked}))
        if len(options) < fit.req.nodes:
            return None
        options.sort(key=lambda o: ((o[0][1], o[0][0], o[0][2]), o[1]))  # work lost, GPUs, age; then the name
        best = options[: fit.req.nodes]
        victims: set[str] = set()
        for _, _, vs in best:
            victims |= vs
        if not victims:
            return None  # it fits already: nothing to preempt (placement will place it)
        return victims, [name for _, name, _ in best]

    def _shrink(self, state: PreemptionState, fit: Fitter, base: Overlay, eligible: dict[str, tuple[Job, str]]
                ) -> tuple[dict[str, list[str]], list[str]] | None:
        """Room made by shrinking eligible elastic jobs only (each down to its ``min_nodes`` at most, never
        off its first node): node by node in name order, the nodes it fits already, then those where
        giving back the elastic allocations there (by job id) makes it fit, until it has its least nodes.
        None when shrinking alone cannot make the room (then victims are preempted as before)."""
        spare = {}
        for job_id, (job, _why) in eligible.items():
            spec = job.spec
            assert spec is not None
            if spec.elastic and len(job.allocations) > spec.min_nodes:
                spare[job_id] = len(job.allocations) - spec.min_nodes
        if not spare:
            return None
        overlay = base.copy()
        need = fit.req.nodes
        nodes: list[str] = []
        shrinks: dict[str, list[str]] = {}
        for node in state.cluster.sorted_nodes():
            if len(nodes) >= need:
                break
            if not node.schedulable:
                continue
            if self._fits(state, node.name, fit, overlay):
                nodes.append(node.name)
                continue
            trial = overlay.copy()
            given: list[str] = []
            for job_id in sorted(node.jobs):
                job = state.jobs.jobs[job_id]
                if spare.get(job_id, 0) <= 0 or job.allocations[0].node == node.name:
                    continue
                trial.give(node.jobs[job_id])
                given.append(job_id)
                if self._fits(state, node.name, fit, trial):
                    break
            if given and self._fits(state, node.name, fit, trial):
                overlay = trial
                nodes.append(node.name)
                for job_id in given:
                    spare[job_id] -= 1
                    shrinks.setdefault(job_id, []).append(node.name)
        if len(nodes) < need or not shrinks:
            return None
        return shrinks, nodes

    def _global(self, state: PreemptionState, fit: Fitter, base: Overlay,
                eligible: dict[str, tuple[Job, str]]) -> tuple[set[str], list[str]] | None:
        order = sorted((v for v, _ in eligible.values()), key=lambda v: self._order(state, v))
        names = [n.name for n in state.cluster.sorted_nodes() if n.schedulable]
        picked = self._add_until_fits(state, names, fit, base, order, need=fit.req.nodes)
        if not picked:
            return None  # never fits, or fits already
        overlay = base.copy()
        for v in picked:
            self._give(overlay, v)
        nodes = [n for n in names if self._fits(state, n, fit, overlay)][: fit.req.nodes]
        return {v.job_id for v in picked}, nodes

    def _add_until_fits(self, state: PreemptionState, names: list[str], fit: Fitter, base: Overlay,
                        order: list[Job], need: int) -> list[Job] | None:
        """Victims from ``order`` added one by one until ``need`` of ``names`` fit the job, then those
        it fits without put back (the newest addition first); None if it never fits."""
        def enough(victims: list[Job]) -> bool:
            overlay = base.copy()
            for v in victims:
                self._give(overlay, v)
            return sum(1 for n in names if self._fits(state, n, fit, overlay)) >= need

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



def _started(state: PreemptionState, job: Job) -> float:
    """When the attempt started running ("now" if it is scheduled but not started yet)."""
    return job.started_ts if job.state is JobState.RUNNING else state.now


def _one_backend_each(state: PreemptionState, req: Request) -> list[Request]:
    """The request itself, or for a gang on a cluster of several backends, one request per backend,
    confined to its nodes (by their ``horizon.io/backend`` label), in the backends' name order."""
    if req.nodes <= 1:
        return [req]
    backends = sorted({n.labels.get(BACKEND_LABEL, "") for n in state.cluster.nodes.values() if not n.removed})
    if len(backends) <= 1:
        return [req]
    return [dataclasses.replace(req, selector=tuple(sorted({*req.selector, (BACKEND_LABEL, b)}))) for b in backends]
