"""The scheduler's state, as every part that needs it folds it. Pure.

``SchedulingState`` is what ``QueueFold`` (``fold.py``) folds from the log:
the job table, the policy configuration, fair share and quotas, the cycle
counters and the bookkeeping that says which pending jobs may start. The
fields below the line are derived (rebuilt after a snapshot is loaded).
"""

from __future__ import annotations

from dataclasses import dataclass

from events import catalogue as c

from services.domain.fairshare import FairShare
from services.domain.foreign import ForeignJobs
from services.domain.job_specs import SharedSpecJobs
from services.domain.jobs import Job, JobTable
from services.domain.licenses import Licenses
from services.domain.partitions import Partitions
from services.domain.policy import PolicyConfig
from services.domain.protocol import CoreState
from services.domain.queue.index import QueueIndex
from services.domain.queue.singleton import Singletons
from services.domain.quotas import Amount, Quotas

__all__ = ["Charge", "SchedulingState"]


@dataclass(slots=True)
class Charge:
    """What one running attempt is charged: to which association, at which rate, how much."""

    leaf: str
    rate: float
    amount: Amount


class SchedulingState(CoreState):
    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.jobs: JobTable = SharedSpecJobs()  # jobs submitted alike hold one spec (services/domain/job_specs.py)
        self.config = config or PolicyConfig()
        self.fairshare = FairShare()
        self.quotas = Quotas()
        self.cycle = 0  # last cycle decided (folded from our own events)
        self.cycle_basis = 0
        self.cycle_truncated = False
        self.cycle_candidates: list[str] = []
        self.placed_cycle = 0  # last cycle placement reported done
        self.dirty_seq = 0  # last sequence that could change a cycle's outcome
        self.capacity_seq = 0  # last sequence at which capacity was added (a job ended, a node changed)
        self.nodes_seq = 0  # last node event
        self.tick_seq = 0  # last ClockTicked
        self.blocked_basis: dict[str, int] = {}  # pending job -> basis of its last "blocked" outcome
        self.fits_nowhere: dict[str, int] = {}  # pending job -> basis at which no node could ever hold it
        self.charges: dict[str, Charge] = {}  # job holding resources -> its charge
        self.retries: dict[str, int] = {}  # job -> retries used (failures, or restarts of "always")
        self.requeue_now: set[str] = set()  # ended jobs to requeue without counting a retry (node lost, preempted)
        self.to_requeue: dict[str, Job] = {}
        self.deadlines: dict[str, float] = {}  # pending job -> when its scheduling timeout expires
        self.config_rejections: dict[int, tuple[str, str]] = {}  # request seq -> (verb, reason)
        self.datasets: set[str] = set()  # datasets announced available (DatasetAvailable)
        # advance reservation (ReservationConfigured) -> its end, until the log's time passes it
        self.reservation_ends: dict[str, float] = {}
        self.partitions = Partitions()  # their priority tiers order the queue (services/domain/partitions.py)
        self.licenses = Licenses()  # defined, and held by jobs holding resources (services/domain/licenses.py)
        # A partition leader's outcomes of the jobs it skips (services/domain/foreign.py; its own snapshot
        # part): its jobs' dependencies and singletons look there for jobs not in ``jobs``. None: one scheduler.
        self.foreign: ForeignJobs | None = None
        # Derived from the above (rebuilt after a snapshot is loaded):
        self.pending: dict[str, Job] = {}
        self.queue_index = QueueIndex(self.config.policy)  # the pending jobs by group, for the order (index.py)
        self.gated: set[str] = set()  # pending jobs that have dependencies (or are singleton jobs)
        # gated jobs a dependency can never satisfy -> (the first such dependency, why) (never.py)
        self.never: dict[str, tuple[c.Dependency, str]] = {}
        self.singletons = Singletons()  # live jobs of the (tenant, user, name) of live singleton jobs
        self.dependents: dict[str, set[str]] = {}  # job -> jobs that depend on it
        self.array_running: dict[str, int] = {}  # array -> tasks holding resources
        self.throttled: set[str] = set()  # pending tasks of arrays with a running limit
        self.expiring: set[str] = set()  # pending jobs with a dependency timeout or a deadline (Slurm's --deadline)
        self.deadline_heap: list[tuple[float, str]] = []
        self.expiry_heap: list[tuple[float, str]] = []  # (when it may expire, job) of expiring jobs (never.py)
        self.wakeups: list[tuple[float, str]] = []  # (not before, job) of requeued jobs in backoff
        self.growable: set[str] = set()  # elastic jobs holding resources below their most nodes
        self.licensed: set[str] = set()  # pending jobs that ask for licenses
