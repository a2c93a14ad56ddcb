"""What submission folds: the jobs, the cluster's GPU vocabulary and capacity, the accounts, users
and tenants, and the inputs not answered yet (``Pending``). Pure.

``services.submission.core`` folds into it and decides from it; the requests' answers
(``services.submission.requests``) and the checks against the log
(``services.submission.against_log``) read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import catalogue as c
from events.base import Event
from services.domain.fairshare import FairShare
from services.domain.job_specs import SharedSpecJobs
from services.domain.jobs import JobTable
from services.domain.licenses import Licenses
from services.domain.partitions import Partitions
from services.domain.protocol import CoreState
from services.submission.capacity import Capacity
from services.submission.normalise import Rejection, class_limit_reason
from services.submission.numbering import Numbering
from services.submission.tenant_limits import TenantBook

__all__ = ["Pending", "SubmissionState", "RANK"]

RANK = {name: rank for rank, name in enumerate(c.PRIORITY_CLASSES)}  # 0 = critical: a lower rank runs first


@dataclass(slots=True)
class Pending:
    """An input not answered yet (a submission or a request about jobs), as folded."""

    seq: int
    time: float
    tenant: str  # from the subject; "_admin" for an operator
    event: Event
    admin: bool = False
    # A request: the jobs it names (the job, or the live tasks of an array when it was folded)
    # and those still unanswered. An array submission: how many tasks it makes.
    targets: tuple[str, ...] = ()
    unanswered: set[str] = field(default_factory=set)
    tasks: int = 0
    # Came through the intake: the tenant whose ids these are (``event`` names its jobs by their
    # keys ``<tenant>:<id>``), and the event as the tenant wrote it.
    scope: str = ""
    raw: Event | None = None
    # The user the server authenticated (the intake's Horizon-User; "-": it could not tell), None for
    # an input that came without it (an operator's, a log from before users, no accounts).
    user: str | None = None
    # Stored by an intake that applies tenants' limits (Horizon-Limits): its tenant's limits apply, and
    # an array of it may wait for the next round (tenant_limits.py). A log from before them has none.
    limited: bool = False


class SubmissionState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: JobTable = SharedSpecJobs()  # jobs submitted alike hold one spec (services/domain/job_specs.py)
        self.gpu_models: set[tuple[str, str | None]] = set()  # every model ever registered (a vocabulary)
        self.capacity = Capacity()  # what the registered nodes offer now
        self.features: dict[str, frozenset[str]] = {}  # node -> its features (a --constraint is judged on them)
        self.submissions: dict[str, Pending] = {}  # job id -> unanswered submission
        self.requests: dict[int, Pending] = {}  # request seq -> unanswered request
        self.verdicts: set[str] = set()  # job and array ids with their verdict in the log
        self.referenced: set[str] = set()  # ids that accepted jobs depend on (only those can close a cycle)
        # The account tree as the scheduler builds it (configured accounts, and those its jobs
        # created), only to judge AccountConfigured as it does; and each account's class limit.
        self.accounts = FairShare()
        self.class_limits: dict[str, str] = {}  # account -> max_priority_class
        self.account_tenants: dict[str, tuple[str, ...]] = {}  # account -> the tenants it is open to
        self.users: dict[tuple[str, str], c.UserConfigured] = {}  # (tenant, user) -> its Unix identity
        self.tenants = TenantBook()  # each tenant's limits and what it has waiting (tenant_limits.py)
        self.malformed: dict[int, c.InputRejected] = {}  # input seq -> its verdict, not yet in the log
        self.repeats: dict[int, Pending] = {}  # seq -> a submission of a job id already submitted
        self.partitions = Partitions()  # which partition a job gets (services/domain/partitions.py)
        self.numbering = Numbering()  # the highest job number given in each scope (numbering.py)
        self.licenses = Licenses()  # the licenses defined: a job naming another is refused (totals only)
        self.to_relay: dict[int, tuple[str, bytes]] = {}  # operator input seq -> (verb, body) to relay (relay.py)
        self._capacity_epoch = 0  # changes with what the registered nodes offer
        self._partition_capacity: dict[str, tuple[tuple[int, int], Capacity]] = {}

    def capacity_changed(self) -> None:
        self._capacity_epoch += 1

    def capacity_of(self, partition: str) -> Capacity:
        """What the registered nodes of ``partition`` could ever hold (``Capacity.subset``), kept until
        the nodes or the partitions change."""
        key = (self._capacity_epoch, self.partitions.version)
        found = self._partition_capacity.get(partition)
        if found is None or found[0] != key:
            if len(self._partition_capacity) > 256:
                self._partition_capacity.clear()
            found = (key, self.capacity.subset(self.partitions.members(partition)))
            self._partition_capacity[partition] = found
        return found[1]

    def class_limit(self, account: str) -> tuple[str, str] | None:
        """The strictest ``max_priority_class`` on the path from ``account`` up to the root, as
        (the account that sets it, the class); the nearest account wins a tie. None: no limit."""
        if not self.class_limits:
            return None
        found: tuple[str, str] | None = None
        acc = self.accounts.accounts.get(account)
        while acc is not None and acc.parent is not None:
            highest = self.class_limits.get(acc.name)
            if highest is not None and (found is None or RANK[highest] > RANK[found[1]]):
                found = (acc.name, highest)
            acc = self.accounts.accounts[acc.parent]
        return found

    def account_open_to(self, account: str) -> tuple[str, ...]:
        """The tenants that may charge ``account``: the nearest list configured on the path from it
        up to the root; empty: any tenant."""
        acc = self.accounts.accounts.get(account)
        if acc is None:
            return self.account_tenants.get(account, ())
        while acc is not None and acc.parent is not None:
            tenants = self.account_tenants.get(acc.name)
            if tenants:
                return tenants
            acc = self.accounts.accounts[acc.parent]
        return ()

    def check_account(self, spec: c.JobSpec) -> None:
        """Raise the ``Rejection`` a tenant gets for charging an account that is not open to it."""
        tenants = self.account_open_to(spec.account)
        if tenants and spec.tenant not in tenants:
            raise Rejection("account", f"account {spec.account!r} is not open to tenant {spec.tenant!r}; submit under "
                            f"an account of yours, or ask an operator: horizon account set {spec.account} "
                            f"--tenant {spec.tenant}")

    def check_class(self, spec: c.JobSpec) -> None:
        """Raise the ``Rejection`` a tenant gets for a class above its account's limit (the leader's
        verdict and every instance's ``horizon submit --check`` answer alike)."""
        why = class_limit_reason(spec.priority_class, self.class_limit(spec.account))
        if why is not None:
            raise Rejection("priority_class", why)

