"""Tenants' limits, pure: what each tenant may have waiting in the queue, and the verdict on a
submission that would pass a limit (docs/tenants.md, Limits and fairness).

Under accounts every tenant has limits, on by default (``events.vocabulary.TenantLimits``), which an
operator sets per tenant with ``horizon tenant set`` (``TenantConfigured`` on
``horizon.in._admin.tenant``: a field left out takes the default, 0 is no limit, setting a tenant
again replaces all its limits). Two kinds, decided in two places:

* **time**: ``max_inputs_per_s`` and ``burst``, a token bucket the intake applies before it stores
  an input (``services/submission/intake_fairness.py``). It reads the clock, so it is decided at
  the edge and an input it refuses never reaches the log: nothing to replay.
* **the log**: ``max_pending_jobs``, ``max_array_tasks`` and ``max_pending_array_tasks``, which
  the submission core applies to a submission the intake stored marked ``Horizon-Limits`` (a log
  written before the limits has no such mark and replays as it was decided), from counts folded
  from the log (``TenantBook``): a pure function of the log like every other verdict, so
  ``horizon audit`` reproduces it. A submission over one is a ``JobRejected`` whose ``limit``
  names it and whose reason says the numbers and the command that raises it.

"Waiting" is PENDING or HELD (a job accepted and not started, or requeued): what the queue holds
and every service keeps in memory. Each task of an array is one job. Operators' inputs, and a
server without accounts (no intake), are not limited; their jobs still count against the
tenant's limits for the tenant's own later submissions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from events import catalogue as c
from events.vocabulary import TenantLimits
from services.domain.jobs import JobState, Transition
from services.submission.normalise import Rejection

__all__ = ["DEFAULT_LIMITS", "LimitExceeded", "TenantBook", "limits_from", "LIMIT_NAMES"]

DEFAULT_LIMITS = TenantLimits()
LIMIT_NAMES = tuple(f.name for f in dataclasses.fields(TenantLimits))
_WAITING = frozenset({JobState.PENDING, JobState.HELD})


class LimitExceeded(Rejection):
    """A submission that would pass one of its tenant's limits (``limit``: the limit's name)."""

    def __init__(self, limit: str, field_: str, reason: str) -> None:
        super().__init__(field_, reason)
        self.limit = limit

    def __str__(self) -> str:
        return f"{self.limit}: {self.reason}"


def limits_from(event: c.TenantConfigured, defaults: TenantLimits = DEFAULT_LIMITS) -> TenantLimits:
    """The limits ``event`` sets: each field it gives (a negative one is taken as not given), the
    default for the others."""
    given = {}
    for name in LIMIT_NAMES:
        value = getattr(event, name)
        if value is not None and value >= 0:
            given[name] = type(getattr(defaults, name))(value)
    return dataclasses.replace(defaults, **given)


@dataclass(slots=True)
class TenantBook:
    """Each tenant's limits (from ``TenantConfigured``) and what it has waiting (from the job table's
    transitions), folded from the log."""

    defaults: TenantLimits = DEFAULT_LIMITS
    limits: dict[str, TenantLimits] = field(default_factory=dict)
    waiting_jobs: dict[str, int] = field(default_factory=dict)  # tenant -> jobs PENDING or HELD
    waiting_tasks: dict[str, int] = field(default_factory=dict)  # tenant -> those that are array tasks

    def of(self, tenant: str) -> TenantLimits:
        return self.limits.get(tenant, self.defaults)

    def configure(self, event: c.TenantConfigured) -> None:
        self.limits[event.tenant] = limits_from(event, self.defaults)

    def count(self, moved: Transition | None) -> None:
        """Follow one transition of the job table: a job starting or ending to wait."""
        if moved is None or moved.job.spec is None:
            return
        was, now = moved.before in _WAITING, moved.after in _WAITING
        if was == now:
            return
        step = 1 if now else -1
        spec = moved.job.spec
        self.waiting_jobs[spec.tenant] = self.waiting_jobs.get(spec.tenant, 0) + step
        if spec.array is not None:
            self.waiting_tasks[spec.tenant] = self.waiting_tasks.get(spec.tenant, 0) + step

    def check(self, tenant: str, jobs: int, tasks: int, round_load: dict[str, tuple[int, int]]) -> None:
        """Raise ``LimitExceeded`` if ``tenant`` may not add ``jobs`` waiting jobs, ``tasks`` of them
        (one array's) array tasks, on top of what it has waiting and what this round accepted for it
        already (``round_load``: tenant -> (jobs, tasks))."""
        limits = self.of(tenant)
        in_round = round_load.get(tenant, (0, 0))
        if tasks and limits.max_array_tasks and tasks > limits.max_array_tasks:
            raise LimitExceeded("max_array_tasks", "array", (
                f"an array of {tasks:,} tasks; tenant {tenant!r} may submit at most {limits.max_array_tasks:,} per "
                f"array (an operator raises it: horizon tenant set {tenant} --max-array-tasks N); split it into "
                f"arrays of {limits.max_array_tasks:,}"))
        waiting = self.waiting_tasks.get(tenant, 0) + in_round[1]
        if tasks and limits.max_pending_array_tasks and waiting + tasks > limits.max_pending_array_tasks:
            raise LimitExceeded("max_pending_array_tasks", "array", (
                f"tenant {tenant!r} has {waiting:,} array tasks waiting in the queue and this array adds "
                f"{tasks:,}, over its limit of {limits.max_pending_array_tasks:,} (an operator raises it: "
                f"horizon tenant set {tenant} --max-pending-array-tasks N); submit it when some have started"))
        waiting = self.waiting_jobs.get(tenant, 0) + in_round[0]
        if limits.max_pending_jobs and waiting + jobs > limits.max_pending_jobs:
            raise LimitExceeded("max_pending_jobs", "", (
                f"tenant {tenant!r} has {waiting:,} jobs waiting in the queue and this submission adds {jobs:,}, "
                f"over its limit of {limits.max_pending_jobs:,} (an operator raises it: horizon tenant set {tenant} "
                f"--max-pending-jobs N); submit it when some have started"))

    @staticmethod
    def add(round_load: dict[str, tuple[int, int]], tenant: str, jobs: int, tasks: int) -> None:
        """Count a submission this round accepted (it waits once its verdict is folded)."""
        held = round_load.get(tenant, (0, 0))
        round_load[tenant] = (held[0] + jobs, held[1] + tasks)
