"""The queue's order and which pending jobs may start now. Pure.

Order: the partitions' priority tiers first, when they differ (Slurm's
PriorityTier: a higher tier's jobs are considered first; all equal, as without
partitions, the order is the policy's alone), then the configured ``Policy``
(``services.domain.policy``): priority class first (critical, high, normal,
low, scavenger), then first come first served, SJF, F1 or the multifactor
priority; the acceptance sequence breaks every tie, so replays cannot disagree.

``candidates`` walks the queue in that order and leaves out the jobs that
certainly cannot start (the rules are in ``services/scheduling/core.py``'s
docstring, which decides the cycles): dependencies not met, restart backoff,
an array's running limit, a quota (unless the cohort lends), licenses not free
(``services.domain.licenses``), and jobs placement found blocked since nothing
changed (all but the head, whose reservation backfilling must respect).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from itertools import islice

from services.domain.dependencies import MET, dependency_status
from services.domain.fairshare import association
from services.domain.jobs import Job
from services.domain.policy import Context, make_policy
from services.domain.queue.index import QueueIndex, merged
from services.domain.queue.state import SchedulingState
from services.domain.quotas import BLOCKED, BORROW, Amount, amount_of

__all__ = ["context", "queue_key", "in_order", "ordered_queue", "ready", "candidates"]


def context(state: SchedulingState) -> Context:
    """The cycle's context: "now", the configuration, fair-share factors and account boosts."""
    policy = make_policy(state.config.policy)
    if not policy.dynamic:
        return Context(state.now, state.config)
    ledger = getattr(state, "ledger", None)  # fair share as of the ledger (services/domain/ledger.py), else exact
    fs = state.fairshare if ledger is None else ledger.tree
    boosts = {a.name: a.priority_boost for a in fs.accounts.values() if a.priority_boost}
    return Context(state.now, state.config, fs.factors(state.now), boosts)

def queue_key(state: SchedulingState) -> Callable[[Job, Context], tuple[float | int, ...]]:
    """The sort key of the queue: the policy's, after the partition's priority tier when tiers differ."""
    key = make_policy(state.config.policy).key
    parts = state.partitions
    if not parts.tiered():
        return key
    tiers = {name: cfg.priority_tier for name, cfg in parts.configs.items()}

    def tiered(job: Job, ctx: Context) -> tuple[float | int, ...]:
        assert job.spec is not None
        return (-tiers.get(job.spec.partition, 0), *key(job, ctx))

    return tiered


def in_order(state: SchedulingState, ctx: Context | None = None,
             partitions: Collection[str | None] | None = None) -> Iterator[Job]:
    """Pending jobs in scheduling order, lazily: the merge of the queue index's runs
    (``services/domain/queue/index.py``), which reads the head of each run and the jobs taken, not
    the whole backlog. ``partitions``: only the jobs of these partitions (a partition leader's)."""
    ctx = ctx or context(state)
    index = state.queue_index
    if index.policy != state.config.policy:  # (the fold rebuilds it when the policy changes)
        index = QueueIndex(state.config.policy)
        index.rebuild(state.pending.values())
    return merged(index, queue_key(state), ctx, state.pending, partitions)

def ordered_queue(state: SchedulingState, limit: int | None = None,
                  ctx: Context | None = None) -> list[Job]:
    """Pending jobs in scheduling order (all of them, or the first ``limit``)."""
    return list(islice(in_order(state, ctx), limit))

def ready(state: SchedulingState, job: Job) -> bool:
    """All of the job's dependencies are met (a singleton job's too: no other job of its name runs,
    nor waits ahead of it; ``services.domain.queue.singleton``)."""
    deps = job.spec.dependencies if job.spec else ()
    if not all(dependency_status(d, state.jobs, state.to_requeue, state.foreign)[0] == MET for d in deps):
        return False
    if job.spec is not None and not all(name in state.datasets for name in job.spec.after_datasets):
        return False  # a dataset it waits for has not been announced (afterdata)
    return state.singletons.blocker(job) is None

def candidates(state: SchedulingState, max_candidates: int,
               partitions: Collection[str | None] | None = None) -> tuple[list[Job], list[str]]:
    """The first ``max_candidates`` pending jobs in order that may start now, and which of them
    only by borrowing. Left out: jobs certainly blocked (but the head), jobs whose
    dependencies are not met, in restart backoff, over their array's running limit, over
    a quota, or whose licenses are not free (counting those the candidates ahead take).
    The walk stops at ``max_candidates``: it reads the jobs it passes, not the backlog.
    ``partitions``: only the jobs of these partitions (a partition leader's)."""
    ctx = context(state)
    blocked, nowhere, gated = state.blocked_basis, state.fits_nowhere, state.gated
    fs, quotas = state.fairshare, state.quotas
    limited = quotas.limited(fs)
    backoff = bool(state.wakeups)
    licensed, licenses = state.licensed, state.licenses
    if not blocked and not gated and not limited and not backoff and not state.throttled and not licensed:
        return list(islice(in_order(state, ctx, partitions), max_candidates)), []
    out: list[Job] = []
    borrowing: list[str] = []
    cycle_use: dict[str, Amount] = {}
    array_use: dict[str, int] = {}
    license_use: dict[str, int] = {}
    head_kept = False
    for job in in_order(state, ctx, partitions):
        job_id, spec = job.job_id, job.spec
        assert spec is not None
        if backoff and job.not_before_ts > state.now:
            continue
        if job_id in gated and not ready(state, job):
            continue
        if nowhere.get(job_id, -1) >= state.nodes_seq:
            continue
        if job_id in state.throttled:
            array = spec.array or ""
            if state.array_running.get(array, 0) + array_use.get(array, 0) >= spec.array_max_running:
                continue
        verdict = ""
        if limited:
            x = amount_of(spec)
            verdict, _why = quotas.admit(fs, association(spec), x, cycle_use)
            if verdict == BLOCKED:
                continue
        if job_id in licensed and licenses.judge(spec.licenses, license_use):
            continue
        if blocked.get(job_id, -1) >= state.capacity_seq:
            if head_kept:
                continue
            head_kept = True
        out.append(job)
        if verdict == BORROW:
            borrowing.append(job_id)
        if limited:
            quotas.add_cycle(fs, association(spec), x, cycle_use)
        if job_id in state.throttled:
            array_use[spec.array or ""] = array_use.get(spec.array or "", 0) + 1
        if job_id in licensed:
            licenses.add_cycle(spec.licenses, license_use)
        if len(out) >= max_candidates:
            break
    return out, borrowing
