"""Scheduling: when to run a cycle, and what else the queue calls for. Pure.

The fold (the queue, its order, fair share, quotas, restarts, why a job
waits, snapshots) is ``QueueFold`` in ``services/domain/queue/``, shared with
preemption and the projections; this core adds the decisions.

A **cycle** is the scheduler's decision "these are the candidates, in this
order" (``SchedulingCycleCompleted``). Placement then places every candidate
that fits and skips those that do not, so a job that does not fit never
blocks the jobs behind it (seed 003's lesson). Cycles are triggered by
events, and batched:

1. a new cycle is decided only once placement has finished the previous one
   (``PlacementCycleCompleted``), so a burst of 10,000 submissions that
   arrives while a cycle is being placed becomes the next single cycle;
2. and only if something that could change the outcome has happened since
   the last cycle's basis: a job became pending (accepted, released,
   requeued, re-prioritised), resources were freed, a node changed, or the
   last cycle was cut at ``max_candidates`` and placed something.

Jobs that certainly cannot start are left out of the candidates, so a head
of unplaceable jobs never pushes placeable ones past ``max_candidates``:

* a job that fits on no node at all (``PlacementBlocked.fits_nowhere``) until
  the set of nodes changes;
* a job that was a candidate and stayed pending at basis ``b`` (placement's
  basis for that cycle), while nothing that could let it start has happened
  since ``b`` (no job ended or left the queue, no node changed, no job joined
  the queue and so possibly changed the head), except the first such job in
  order: it is the head whose reservation backfilling must respect.

At virtual time (simulation) a cycle is decided only on a ``ClockTicked``
(when the tick is the last event applied): the simulator publishes
everything that happens at an instant, then the tick, so one cycle sees the
whole instant, however the events were batched.

Besides cycles, in this order:

1. **Restarts**: a failed job whose restart policy allows another attempt is
   requeued (``JobRequeued``) until ``max_retries`` retries are used, not
   before ``backoff_base_s * 2**(retry-1)`` (capped at ``backoff_max_s``)
   after the failure; a job whose node was lost or that was preempted is
   requeued at once and that does not count as a retry (unless its spec says
   ``requeue`` false: Slurm's ``--no-requeue``).
2. **Dependencies** (``services.domain.dependencies``): a job is a candidate
   only once all its dependencies are met; one that can never be met ends
   with ``JobDependencyNeverSatisfied`` and the reason. A ``singleton`` job
   waits while another job of its tenant, user and name runs or waits ahead
   of it (``services.domain.queue.singleton``).
   A job with ``dependency_timeout_s`` whose dependencies are not all met
   that long after acceptance ends with ``JobDependencyNeverSatisfied``, the
   reason starting "timeout:" and naming the first dependency not met.
   A pending job with a ``deadline_ts`` (Slurm's ``--deadline``) ends
   ``UNSCHEDULABLE`` (``JobUnschedulable``, reason "deadline: ...") as soon as
   now + its time limit is past the deadline: started before that, it ends
   by the deadline (its limit is enforced), so a running job is never killed
   for it.
3. **Scheduling timeout**: a job still pending ``scheduling_timeout_s`` after
   it was accepted (or requeued) ends ``UNSCHEDULABLE`` with the reason it
   was waiting. A gang (more than one node at its least) with an
   ``assembly_timeout_s`` ends the same way when that comes first, the reason
   starting "assembly timeout:" and saying how many nodes it could not assemble. Time moves with the log; a live cluster's ticker
   (``ClockTicked``, published by inventory) makes sure it moves when nothing
   else happens.
4. **Configuration** that cannot be applied is answered with ``ConfigRejected``.

Fair share and quotas decide the order (multifactor) and admit a candidate
only within its accounts' quotas, or by borrowing (the cycle's ``borrowing``
list). Arrays: at most ``array_max_running`` tasks of an array hold resources
or are candidates at once.

Snapshots: ``dump``/``load`` (``services/domain/queue/codec.py``) write and read
the whole state, so a restart replays only the tail of the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from services.domain.config import config_rejected
from services.domain.envelope import Decider
from services.domain.dependencies import dependency_expired
from services.domain.jobs import FAILURES
from services.domain.queue.codec import SNAPSHOT_FORMAT
from services.domain.queue.fold import SCHEDULER, QueueFold, assembly_limit
from services.domain.queue.state import SchedulingState
from services.domain.queue.waiting import WAITING_KINDS, Waiting

__all__ = ["SchedulingCore", "SchedulingState", "SNAPSHOT_FORMAT", "Waiting", "WAITING_KINDS"]


@dataclass
class SchedulingCore(QueueFold):
    """The scheduling service's core: ``QueueFold``'s state, and the decisions it calls for."""

    name: ClassVar[str] = SCHEDULER
    snapshot_every: int = 50_000  # events between snapshots (0: never)

    def decide(self, state: SchedulingState) -> list[Event]:
        out: list[Event] = []
        decide = Decider(self.name, ts=state.now, source=self.name, basis_seq=state.seq)
        # 1. requeue what the restart policy allows (in job order, deterministic)
        for job_id in sorted(state.to_requeue):
            job = state.to_requeue[job_id]
            delay = 0.0
            if job.state in FAILURES and job_id not in state.requeue_now:
                delay = state.config.backoff_s(state.retries.get(job_id, 1))
            out.append(decide(
                c.JobRequeued, job_id, job.attempt, correlation_id=job_id, job_id=job_id, attempt=job.attempt,
                reason=f"attempt {job.attempt} {job.state.value.lower()}: {job.reason}".rstrip(": "),
                not_before_ts=state.now + delay, checkpoint_ref=job.checkpoint_ref,
            ))
        # 2. pending jobs a dependency can never satisfy end now, with the reason
        # (the fold keeps them as the jobs they wait for change: services/domain/queue/never.py)
        ended: set[str] = set()
        for job_id in sorted(state.never):
            dep, why = state.never[job_id]
            out.append(decide(c.JobDependencyNeverSatisfied, job_id, correlation_id=job_id, job_id=job_id,
                              dependency=dep, reason=why))
            ended.add(job_id)
        # 2b. dependency timeouts, and deadlines (Slurm's --deadline) a pending job can no longer meet
        # (only the jobs whose time has come: services/domain/queue/never.py's expiry)
        come = {job_id for _at, job_id in _due(state.expiry_heap, state.now) if job_id in state.expiring}
        for job_id in sorted(come - ended):
            job = state.pending[job_id]
            spec = job.spec
            assert spec is not None
            expired = dependency_expired(job, state.jobs, state.to_requeue, state.now, state.datasets, state.foreign)
            if expired is not None:
                out.append(decide(c.JobDependencyNeverSatisfied, job_id, correlation_id=job_id, job_id=job_id,
                                  dependency=expired[0], reason=expired[1]))
                ended.add(job_id)
            elif spec.deadline_ts and state.now + spec.time_limit_s > spec.deadline_ts:
                out.append(decide(
                    c.JobUnschedulable, job_id, job.attempt, "deadline", correlation_id=job_id, job_id=job_id,
                    reason=f"deadline: it could not end by {_utc(spec.deadline_ts)} (now + its time limit "
                           f"{spec.time_limit_s:g} s is {state.now + spec.time_limit_s - spec.deadline_ts:g} s past "
                           f"it): {self.why_waiting(state, job)}",
                ))
                ended.add(job_id)
        # 3. scheduling timeouts
        if state.deadline_heap and state.deadline_heap[0][0] <= state.now:
            # (a job held and released has two entries for its one deadline: answer it once)
            for deadline, job_id in sorted(set(_due(state.deadline_heap, state.now))):
                job = state.pending.get(job_id)
                if job is None or state.deadlines.get(job_id) != deadline or job.spec is None or job_id in ended:
                    continue
                spec = job.spec
                assembly = assembly_limit(spec)
                if assembly is not None and (spec.scheduling_timeout_s is None or assembly < spec.scheduling_timeout_s):
                    why = (f"assembly timeout: the gang did not assemble {'at least ' if spec.elastic else ''}"
                           f"{spec.least_nodes} nodes within {assembly:g} s: {self.why_waiting(state, job)}")
                else:
                    why = f"not started within {spec.scheduling_timeout_s:g} s: {self.why_waiting(state, job)}"
                out.append(decide(c.JobUnschedulable, job_id, job.attempt, correlation_id=job_id, job_id=job_id,
                                  reason=why))
        # 4. configuration that could not be applied
        out.extend(config_rejected(self.name, state.config_rejections, state.now, state.seq))
        # 5. a cycle, if placement is done with the last one and something changed since
        # At virtual time a cycle is decided on the tick itself: the simulator has
        # published everything of the instant before it, and nothing follows it.
        ticked = not self.virtual_time or state.tick_seq == state.seq
        # An elastic job below its most nodes calls for a cycle too, with no candidates if need be:
        # placement grows it into room no candidate wanted (services/placement/growth.py).
        if state.placed_cycle >= state.cycle and state.dirty_seq > state.cycle_basis and (
                state.pending or state.growable) and ticked:
            candidates, borrowing = self.candidates(state)
            cycle = state.cycle + 1
            if not candidates and not state.growable:
                return out
            out.append(decide(
                c.SchedulingCycleCompleted, cycle, correlation_id=str(cycle), cycle=cycle,
                candidates=[j.job_id for j in candidates], queued=len(state.pending), borrowing=borrowing,
                max_candidates=self.max_candidates,
            ))
        return out

    # ------------------------------------------------------------------ snapshots


def _due(heap: list[tuple[float, str]], now: float) -> list[tuple[float, str]]:
    """The entries of a heap that are due by ``now``, read down from its root: an entry's parent is
    never later than it, so the walk reads the due entries and their children, not the whole heap
    (a scheduling timeout due in a backlog of a million jobs)."""
    due, stack = [], [0]
    while stack:
        i = stack.pop()
        if i < len(heap) and heap[i][0] <= now:
            due.append(heap[i])
            stack += (2 * i + 1, 2 * i + 2)
    return due


def _utc(ts: float) -> str:
    """A time as the reasons write it: ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
