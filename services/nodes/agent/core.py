"""The node agent's pure core: what the log asks of this agent's nodes. Pure.

``AgentCore`` folds the log (every ``horizon.evt.>`` record, decoded by the
adapter) and keeps what the agent needs to know: the jobs (a ``JobTable``),
the stop and preemption requests for jobs on its nodes, the latest checkpoint
of every job, and which attempts' endings the agent itself has reported. A
job is this agent's when the first node of its allocation is one of the
agent's nodes (``mine``): a multi-node job is launched by the agent of its
first node; the other nodes' agents hold the allocation and run nothing.

Folding a batch returns the ``Action`` s it calls for, in log order; the
adapter (``services/nodes/agent/app.py``) carries them out against the processes it
runs:

* ``start``: a job was scheduled here;
* ``stop``: a ``JobStopRequested`` for a job holding resources here, or a
  ``JobCancelled`` the job table left unapplied because it was decided before
  the attempt running here was scheduled (the core turns it into a stop
  request with the cancel's reason);
* ``preempt``: the first ``PreemptionRequested`` for the current attempt of a
  job here (one per attempt; a later one, or one for another attempt, is
  ignored);
* ``ended``: a job here left SCHEDULED/RUNNING, by anyone's decision or by
  the agent's own report folded back; its requests are forgotten;
* ``resized``: an elastic job launched here has new nodes (``JobResized``): the
  adapter tells it (``services/nodes/backends/process/resize.py``).

It also keeps each job's highest step number (``JobStepStarted``/``JobStepEnded``,
``next_step``), so that a restarted agent numbers the next ``srun`` of an attempt on.

Each record is folded once: one at or below ``seq`` (a reader's repeated
tail) is skipped, an undecodable one only moves ``seq``. A transition happens
once in the job table, so a duplicate ``JobScheduled`` starts nothing twice.

After catching up at start-up, ``resume`` says what to do for every job the
log holds on this agent's nodes, in job id order: ``cancelled`` (report the
cancel that came while it was away), ``preempted`` (report the preemption),
``start`` (scheduled, never started) or ``lost`` (the log says it runs, but a
fresh agent has no such process).

The adapter tells the core before it reports an attempt's ending
(``reporting``), so that a stop or preemption request folded before the log
shows that ending does not make it report a second one (``reported_end``).

No asyncio, no I/O, no clock: "now" is the stored time of each record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from events import catalogue as c
from events.base import Event
from services.domain.jobs import HOLDS_RESOURCES, JobState, JobTable
from services.domain.protocol import Record

__all__ = ["Action", "ActionKind", "AgentCore", "ENDINGS"]

ENDINGS = (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted)  # the reports that end an attempt

# ``start``, ``stop``, ``preempt``, ``resized``, ``ended`` from ``AgentCore.fold``; ``cancelled``, ``preempted``,
# ``start``, ``lost`` from ``AgentCore.resume`` (the module doc says what each asks of the adapter)
ActionKind = Literal["start", "stop", "preempt", "resized", "ended", "cancelled", "preempted", "lost"]


class Action(NamedTuple):
    """What the adapter must do about one job (``kind``: see ``ActionKind``)."""

    kind: ActionKind
    job_id: str


class AgentCore:
    """The agent's view of the log, and the actions it calls for (see the module doc)."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = frozenset(nodes)
        self.seq = 0  # the last record folded
        self.jobs = JobTable()
        self.stop_requests: dict[str, c.JobStopRequested] = {}
        self.preemptions: dict[str, c.PreemptionRequested] = {}  # job -> the request for its current attempt
        self.checkpoints: dict[str, tuple[int, str]] = {}  # job -> (attempt, latest checkpoint reference)
        # job -> the attempt whose ending this agent has reported, until the log shows it ended: a
        # stop or preemption request folded meanwhile finds nothing running and must not report a
        # second ending (two outcomes for one attempt, which `horizon check` rejects).
        self.reported_end: dict[str, int] = {}
        self.steps: dict[str, tuple[int, int]] = {}  # job -> (attempt, its highest step in the log)
        self.resize_grace: dict[str, float] = {}  # elastic job -> the grace of its tasks on nodes a shrink gave back
        # jobs whose attempt inventory ended by evicting it under memory pressure (JobFailed.evicted):
        # the adapter kills them at once, as the kubelet's hard eviction does, instead of after a grace
        self.evicted: set[str] = set()

    def mine(self, allocations: Sequence[c.NodeAllocation]) -> c.NodeAllocation | None:
        """The allocation this agent launches the job on (its first), or None if the job is not its own."""
        if allocations and allocations[0].node in self.nodes:
            return allocations[0]
        return None

    # ------------------------------------------------------------------ folding the log

    def fold(self, batch: Iterable[tuple[Record, Event | None]]) -> list[Action]:
        """Fold decoded records (``None``: undecodable, skipped); return the actions they call for, in order."""
        actions: list[Action] = []
        for record, event in batch:
            if record.seq <= self.seq:
                continue  # already folded
            self.seq = record.seq
            if event is None:
                continue  # services dead-letter what they cannot read; an agent only skips it
            action = self._apply(record, event)
            if action is not None:
                actions.append(action)
        return actions

    def _apply(self, record: Record, event: Event) -> Action | None:
        if isinstance(event, c.JobStopRequested):
            job = self.jobs.get(event.job_id)
            if job is not None and job.state in HOLDS_RESOURCES and self.mine(job.allocations):
                self.stop_requests[event.job_id] = event
                return Action("stop", event.job_id)
            return None
        if isinstance(event, c.PreemptionRequested):
            job = self.jobs.get(event.job_id)
            if (job is not None and job.state in HOLDS_RESOURCES and job.attempt == event.attempt
                    and self.mine(job.allocations) and event.job_id not in self.preemptions):
                self.preemptions[event.job_id] = event  # dropped when the attempt ends: one per attempt
                return Action("preempt", event.job_id)
            return None
        if isinstance(event, c.JobResized):  # an elastic job's new nodes: its launching agent tells it
            self.jobs.apply(event, record.seq, record.time)
            if event.grace_period_s:
                self.resize_grace[event.job_id] = event.grace_period_s
            job = self.jobs.get(event.job_id)
            if (job is not None and job.state in HOLDS_RESOURCES and job.attempt == event.attempt
                    and job.allocations == tuple(event.allocations) and self.mine(job.allocations)):
                return Action("resized", event.job_id)
            return None
        if isinstance(event, (c.JobStepStarted, c.JobStepEnded)):
            known = self.steps.get(event.job_id)
            if known is None or (event.attempt, event.step) > known:
                self.steps[event.job_id] = (event.attempt, event.step)
            return None
        if isinstance(event, (c.JobCheckpointed, c.JobPreempted, c.JobRequeued)):
            ref = event.checkpoint_ref
            if ref is not None:
                self.checkpoints[event.job_id] = (event.attempt, ref)
        tr = self.jobs.apply(event, record.seq, record.time)
        if tr is not None and isinstance(event, c.JobFailed) and event.evicted and self.mine(tr.job.allocations):
            self.evicted.add(event.job_id)
        if tr is None and isinstance(event, c.JobCancelled):
            # A cancel decided before this attempt was scheduled: stop the attempt and
            # report its cancellation (the job table left the attempt running for that).
            job = self.jobs.get(event.job_id)
            if job is not None and job.state in HOLDS_RESOURCES and self.mine(job.allocations):
                self.stop_requests[job.job_id] = c.JobStopRequested(
                    job_id=job.job_id, attempt=job.attempt, reason=event.reason or "cancelled",
                    causation_id=event.causation_id,
                )
                return Action("stop", job.job_id)
            return None
        if tr is None or not self.mine(tr.job.allocations):
            return None
        if tr.after is JobState.SCHEDULED:
            return Action("start", tr.job.job_id)
        if tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
            self.stop_requests.pop(tr.job.job_id, None)
            self.reported_end.pop(tr.job.job_id, None)
            self.preemptions.pop(tr.job.job_id, None)
            self.resize_grace.pop(tr.job.job_id, None)
            return Action("ended", tr.job.job_id)
        return None

    # ------------------------------------------------------------------ start-up

    def resume(self) -> list[Action]:
        """After catching up: what to do for every job holding resources on this agent's nodes, by job id."""
        actions: list[Action] = []
        for job_id in sorted(self.jobs.jobs):
            job = self.jobs.jobs[job_id]
            if job.state not in HOLDS_RESOURCES or not self.mine(job.allocations):
                continue
            if job_id in self.stop_requests:
                actions.append(Action("cancelled", job_id))
            elif job_id in self.preemptions:
                actions.append(Action("preempted", job_id))
            elif job.state is JobState.SCHEDULED:
                actions.append(Action("start", job_id))
            else:
                actions.append(Action("lost", job_id))
        return actions

    # ------------------------------------------------------------------ the agent's own reports

    def reporting(self, kind: type[Event], job_id: str, attempt: int) -> None:
        """The agent is about to report ``kind`` for this attempt: remember it if it is an ending."""
        if kind in ENDINGS:
            self.reported_end[job_id] = attempt

    def ending_reported(self, job_id: str, attempt: int) -> bool:
        """Has the agent reported this attempt's ending, which the log does not show yet?"""
        return self.reported_end.get(job_id) == attempt

    def next_step(self, job_id: str, attempt: int) -> int:
        """The first step number of this attempt the log has not seen (steps are 0, 1, ... per attempt)."""
        known = self.steps.get(job_id)
        return known[1] + 1 if known is not None and known[0] == attempt else 0

    def latest_checkpoint(self, job_id: str) -> str | None:
        """The job's latest checkpoint, of whatever attempt (a new attempt restarts from it)."""
        known = self.checkpoints.get(job_id)
        return known[1] if known is not None else None

    def checkpoint_of(self, job_id: str, attempt: int) -> str | None:
        """The latest checkpoint reported for this very attempt."""
        known = self.checkpoints.get(job_id)
        return known[1] if known is not None and known[0] == attempt else None
