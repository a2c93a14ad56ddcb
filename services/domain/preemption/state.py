"""The preemption service's state and configuration, as every part that plans preemptions folds it. Pure."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from events import catalogue as c
from events.vocabulary import GRACE_PERIOD_MAX_S, VICTIM_ORDERS
from services.domain.cluster import Cluster
from services.domain.jobs import JobTable
from services.domain.policy import CLASS_RANK
from services.domain.protocol import CoreState
from services.domain.queue.state import SchedulingState

__all__ = ["PreemptionState", "PreemptionConfig", "Plan", "DEFAULT_RULES", "VICTIM_ORDERS"]

DEFAULT_RULES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "critical": ("high", "normal", "low", "scavenger"),
    "high": ("normal", "low", "scavenger"),
    "normal": ("low", "scavenger"),
    "low": (),
    "scavenger": (),
})


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
        if ev.grace_period_s is not None and not (0 <= ev.grace_period_s <= GRACE_PERIOD_MAX_S):
            return f"grace_period_s: {ev.grace_period_s!r} must be between 0 and {GRACE_PERIOD_MAX_S:g}"
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
    # elastic victims shrunk instead of preempted: victim -> the nodes it gives back (then ``victims`` is empty)
    shrinks: dict[str, list[str]] = field(default_factory=dict)


class PreemptionState(CoreState):
    def __init__(self, sched: SchedulingState) -> None:
        super().__init__()
        self.sched = sched  # the scheduler's view (jobs, accounts, quotas), folded alike
        self.jobs: JobTable = sched.jobs  # the view's table: the ledger follows its jobs (fold.py)
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
