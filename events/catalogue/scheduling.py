"""Scheduling and placement's decisions: a cycle's candidates, then where each job runs
(``horizon.evt.scheduling...``, ``horizon.evt.placement...``)."""

from __future__ import annotations

import msgspec

from events.base import Event, JobId, NodeId
from events.catalogue.values import BlockReason, Dependency, NodeAllocation


class SchedulingCycleCompleted(Event, tag="SchedulingCycleCompleted", kw_only=True):
    """The scheduler's ordered candidates for one cycle (``horizon.evt.scheduling...<cycle>``)."""

    cycle: int
    basis_seq: int
    candidates: list[JobId] = []
    queued: int = 0
    borrowing: list[JobId] = []  # the candidates admitted only by borrowing idle quota of sibling accounts
    # The most candidates the scheduler offers a cycle, as it was configured: a cycle of exactly that many
    # was cut there. 0 in logs written before the field, whose cap was 10,000 (100,000 simulated).
    max_candidates: int = 0


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One association's fair-share usage in a ``UsageCharged`` entry, as of the entry's ``as_of_ts``."""

    association: str  # the leaf <account>/<user> (<account>/- without a user)
    usage: float = 0.0  # decayed billing-rate-seconds of the owner's jobs under it, at as_of_ts
    rate: float = 0.0  # the summed billing rate of the owner's jobs running under it then


class UsageCharged(Event, tag="UsageCharged", kw_only=True):
    """A scheduling leader's fair-share ledger entry (docs/scaling.md, services/domain/ledger.py): the usage
    of its partitions' jobs, per association whose figures changed since its previous entry. Every leader
    folds every leader's entries into the fair-share factors it orders by. The aggregate is ``entry``."""

    entry: int
    basis_seq: int
    as_of_ts: float
    rows: list[UsageRow] = []


class JobScheduled(Event, tag="JobScheduled", kw_only=True):
    """A placement decision: the exact allocation. ``horizon.evt.placement.JobScheduled.<job_id>``."""

    job_id: JobId
    attempt: int = 1
    allocations: list[NodeAllocation] = []
    basis_seq: int = 0
    cycle: int = 0
    backfilled: bool = False
    time_limit_s: float = 0.0
    borrowed: bool = False  # admitted beyond its account's quota, on an idle sibling's (reclaimable)
    # how long placement expects the attempt to run (its profile's runtime_estimate "predicted": the
    # user's history, at most time_limit_s, which stays the enforced limit); None: its time limit
    predicted_runtime_s: float | None = None


class JobResized(Event, tag="JobResized", kw_only=True):
    """An elastic job's allocation changed while it holds resources: ``allocations`` is the whole new one
    (the first node, where its batch script runs, never leaves). Placement grows a job toward its
    ``nodes`` when a cycle leaves room no candidate wanted (``horizon.evt.placement.JobResized.<job_id>``);
    preemption shrinks one toward its ``min_nodes`` instead of preempting it, for ``for_job``
    (``horizon.evt.preemption.JobResized.<job_id>``). The released nodes are free at once; the job's
    tasks there get SIGTERM, SIGKILL after ``grace_period_s``. The agent of the first node tells the job
    (``$HORIZON_RESIZE_FILE``, then SIGWINCH: docs/jobs.md)."""

    job_id: JobId
    attempt: int
    allocations: list[NodeAllocation] = []
    nodes: int = 0  # the world size now (len(allocations))
    previous_nodes: int = 0
    for_job: JobId = ""  # shrunk to make room for this job
    reason: str = ""
    grace_period_s: float = 0.0
    basis_seq: int = 0
    cycle: int = 0


class PlacementCycleCompleted(Event, tag="PlacementCycleCompleted", kw_only=True):
    """Placement has handled scheduling cycle ``cycle``: how many it placed and how many stay blocked."""

    cycle: int
    basis_seq: int = 0
    scheduled: int = 0
    blocked: int = 0


class PlacementBlocked(Event, tag="PlacementBlocked", kw_only=True):
    """Why a candidate could not be placed, per filter, and when it could start."""

    job_id: JobId
    cycle: int = 0
    basis_seq: int = 0
    reasons: list[BlockReason] = []
    earliest_start_ts: float | None = None
    reserved_nodes: list[NodeId] = []
    # no node could hold it even empty (a selector no node matches, nodes removed since it was accepted):
    # waits for the set of nodes to change
    fits_nowhere: bool = False


class JobUnschedulable(Event, tag="JobUnschedulable", kw_only=True):
    """Terminal: the job could not start within its scheduling timeout."""

    job_id: JobId
    reason: str
    basis_seq: int = 0


class JobDependencyNeverSatisfied(Event, tag="JobDependencyNeverSatisfied", kw_only=True):
    """Terminal: a dependency ended in a way that can never satisfy this job."""

    job_id: JobId
    dependency: Dependency
    reason: str
    basis_seq: int = 0


class ConfigRejected(Event, tag="ConfigRejected", kw_only=True):
    """An operator's configuration input (account, fair share, policy) that was not applied, and why."""

    verb: str
    reason: str
    request_seq: int = 0
    basis_seq: int = 0


class JobRequeued(Event, tag="JobRequeued", kw_only=True):
    job_id: JobId
    attempt: int
    reason: str = ""
    not_before_ts: float = 0.0
    basis_seq: int = 0
    checkpoint_ref: str | None = None
