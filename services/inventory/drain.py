"""Drain with migration: what a drain does to each job on the node, and when it stops them. Pure.

``horizon node drain NODE [--migrate] [--deadline D]`` is a ``NodeCommandIssued`` (action ``drain``);
inventory answers ``NodeDraining`` (the node takes no new jobs: placement's ``NodeReady`` filter) and,
for each job holding resources on the node then, a ``JobDrainPlanned`` that says what will happen to it
(``plan_job``). The plan is a promise the rules below keep:

===========================  ==================================================================
action                       when, and what happens
===========================  ==================================================================
``migrate``                  ``--migrate``, the job has a ``checkpoint_signal`` and may be requeued
                             (``requeue``, Slurm's default): stopped at once with its checkpoint
                             signal first, requeued without counting a retry, and started again on
                             another node with ``$HORIZON_CHECKPOINT_REF`` (the draining node takes
                             no new job, so not there)
``finish``                   no deadline, or its time limit ends by the deadline: it runs to its end
``requeue-at-deadline``      it may still run at the deadline: then it is stopped (checkpoint signal
                             first, if it has one) and requeued, as Slurm requeues the jobs of a node
                             set down and Kubernetes recreates a drained node's pods elsewhere
``end-at-deadline``          the same, but its spec says ``requeue`` false (``--no-requeue``): it ends
                             ``PREEMPTED`` with the reason "node N drain deadline ..."
===========================  ==================================================================

The stops are rules over the state, not a one-off at the command (``drain_stops``): a job placed on
the node in the instant before placement saw the drain is migrated or stopped like the others, and a
replay of the log (``horizon audit``) makes the same decisions. "Now" is the latest event's time; the
log's clock (``ClockTicked``, every few seconds) brings the deadline when nothing else happens.

Every stop is a ``PreemptionRequested`` with ``for_job`` empty (an eviction, as for a ``NoExecute``
taint), once per attempt, with the drain's ``--grace`` (kubectl drain's ``--grace-period``) or else
inventory's eviction grace (30 s, Kubernetes' default ``terminationGracePeriodSeconds``): the agent sends the checkpoint signal, waits for the reference
within the grace, then SIGTERM and SIGKILL, and reports ``JobPreempted`` with the reference, which
scheduling requeues at once. Whether a job may be stopped for another (``preemptible``) does not
protect it from the operator's drain, as it does not from a ``NoExecute`` taint.

Worked deadline arithmetic: a drain at t=100 with ``--deadline 900`` has its deadline at t=1000. A
job started at t=10 with a 600 s limit must end by t=610 <= 1000: ``finish``. One started at t=10 with
a 3600 s limit may run to t=3610 > 1000: ``requeue-at-deadline``; at the first event at or after
t=1000 (a clock tick) it is asked to stop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from events import catalogue as c
from services.domain.cluster import Node
from services.domain.envelope import Decider
from services.domain.jobs import HOLDS_RESOURCES, Job, JobState, JobTable

__all__ = ["Drain", "DRAIN_ACTIONS", "MIGRATE", "FINISH", "REQUEUE_AT_DEADLINE", "END_AT_DEADLINE", "plan_job",
           "drain_plan", "drain_stops", "limit_end"]

MIGRATE = "migrate"
FINISH = "finish"
REQUEUE_AT_DEADLINE = "requeue-at-deadline"
END_AT_DEADLINE = "end-at-deadline"
DRAIN_ACTIONS: tuple[str, ...] = (MIGRATE, FINISH, REQUEUE_AT_DEADLINE, END_AT_DEADLINE)


@dataclass(frozen=True, slots=True)
class Drain:
    """A node's drain as inventory answered it (``NodeDraining``): migrate or not, its deadline (0: none),
    and the grace of each stop (None: inventory's eviction grace)."""

    migrate: bool = False
    deadline_ts: float = 0.0
    grace_s: float | None = None

    def grace(self, default_s: float) -> float:
        return default_s if self.grace_s is None else self.grace_s


def _checkpointable(job: Job) -> bool:
    return job.spec is not None and bool(job.spec.checkpoint_signal)


def _requeues(job: Job) -> bool:
    """Requeued when it is stopped (Slurm's --requeue, the default); False: it ends then."""
    return job.spec is None or job.spec.requeue


def limit_end(job: Job, now: float) -> float:
    """When the job's time limit ends it: its start (or ``now``, placed but not started yet) plus the
    limit placement gave this attempt (or its spec's)."""
    limit = job.time_limit_s or (job.spec.time_limit_s if job.spec is not None else 0.0)
    start = job.started_ts if job.state is JobState.RUNNING and job.started_ts else now
    return start + limit


def plan_job(job: Job, node: str, drain: Drain, now: float, grace_s: float) -> tuple[str, str]:
    """What the drain of ``node`` will do to ``job``: one of ``DRAIN_ACTIONS``, and why in words.
    ``grace_s``: inventory's eviction grace, unless the drain gives its own."""
    grace_s = drain.grace(grace_s)
    if drain.migrate and _checkpointable(job) and _requeues(job):
        assert job.spec is not None
        return MIGRATE, (f"node {node} drains with migration: checkpoint signal {job.spec.checkpoint_signal} now "
                         f"(up to {grace_s:g} s for the checkpoint), then requeued to resume on another node "
                         "from its checkpoint")
    why_not = ""
    if drain.migrate:
        why_not = ("not migrated: it has no checkpoint signal; " if not _checkpointable(job)
                   else "not migrated: it may not be requeued; ")
    if not drain.deadline_ts:
        return FINISH, f"{why_not}node {node} drains: it runs to its end (no deadline)"
    end = limit_end(job, now)
    if end <= drain.deadline_ts:
        return FINISH, (f"{why_not}its time limit ends it by {end - now:.0f} s from now, before the drain "
                        f"deadline in {drain.deadline_ts - now:.0f} s")
    head = (f"{why_not}it may run past the drain deadline in {drain.deadline_ts - now:.0f} s (its time limit "
            f"ends in {end - now:.0f} s): if it still runs then, it is stopped")
    if _requeues(job):
        resume = " (its checkpoint signal first, to resume from the checkpoint)" if _checkpointable(job) else ""
        return REQUEUE_AT_DEADLINE, f"{head}{resume} and requeued on another node"
    return END_AT_DEADLINE, f"{head} and ends (it may not be requeued)"


def drain_plan(node: Node, drain: Drain, jobs: JobTable, now: float, grace_s: float,
               decide: Decider, seq: int) -> list[c.JobDrainPlanned]:
    """One ``JobDrainPlanned`` per job holding resources on ``node``, in job order (the answer's plan).

    ``decide``: builds them with the answer's common fields (ts, source, basis_seq, causation_id);
    ``seq``: the command's sequence, which makes each id unique per drain command and deterministic.
    """
    out: list[c.JobDrainPlanned] = []
    for job_id in sorted(node.jobs):
        job = jobs.get(job_id)
        if job is None or job.state not in HOLDS_RESOURCES:
            continue
        action, why = plan_job(job, node.name, drain, now, grace_s)
        out.append(decide(
            c.JobDrainPlanned, job_id, job.attempt, seq, correlation_id=job_id, job_id=job_id, attempt=job.attempt,
            node=node.name, action=action, deadline_ts=drain.deadline_ts, reason=why))
    return out


def drain_stops(nodes: Iterable[Node], jobs: JobTable, stopped: Mapping[str, int], asked: set[str], now: float,
                seq: int, grace_s: float) -> list[c.PreemptionRequested]:
    """``PreemptionRequested`` for each job a drain stops now: the ones to migrate at once, and once
    the deadline has come, every other job still on the node.

    ``stopped``: job -> the last attempt whose stop was requested (by anyone): an attempt is asked once.
    ``asked``: jobs this round already ends or stops (lost nodes, taints); they are left to that.
    A gang on several draining nodes is named by the first in node order. A node's drain is its
    ``drain_migrate`` and ``drain_deadline_ts``, folded from ``NodeDraining`` (services/domain/cluster.py).
    """
    out: list[c.PreemptionRequested] = []
    decide = Decider("inventory", ts=now, source="inventory", basis_seq=seq)
    asked = set(asked)
    for node in nodes:
        drain, name = Drain(node.drain_migrate, node.drain_deadline_ts, node.drain_grace_s), node.name
        if not node.draining or node.lost or node.removed or not node.jobs or not (drain.migrate or drain.deadline_ts):
            continue
        due = bool(drain.deadline_ts) and now >= drain.deadline_ts
        for job_id in sorted(node.jobs):
            job = jobs.get(job_id)
            if job is None or job.state not in HOLDS_RESOURCES or job_id in asked:
                continue
            if stopped.get(job_id, 0) >= job.attempt:
                continue
            if drain.migrate and _checkpointable(job) and _requeues(job):
                reason = f"node {name} drains with migration: checkpointed to resume on another node"
            elif due:
                then = "requeued" if _requeues(job) else "it may not be requeued, so it ends"
                reason = f"node {name} drain deadline passed: stopped, {then}"
            else:
                continue
            asked.add(job_id)
            out.append(decide(
                c.PreemptionRequested, job_id, job.attempt, correlation_id=job_id, job_id=job_id, attempt=job.attempt,
                for_job="", grace_period_s=drain.grace(grace_s), reason=reason))
    return out
