"""Preemption: the requests that stop victims, within the rate limits. Pure.

Who may preempt, who may be a victim and the cheapest set are chosen by
``PreemptionPlanner`` (``services/domain/preemption/planner.py``, shared with
the projections' dry run); this core decides: for at most
``max_preemptors_per_round`` preemptors in order (highest class first, then
oldest), the plan's victims, unless the set would exceed the rate limits.

**Protocol.** ``PreemptionRequested`` per victim (``for_job``, grace period);
the agent signals the job (checkpoint signal, SIGTERM, SIGKILL after the grace)
and reports ``JobPreempted``; scheduling requeues the victim at once, keeping
its age and checkpoint. Placement holds the victims' nodes for the preemptor
until it starts, so nobody else takes them meanwhile.

**Elastic jobs shrink instead.** When the plan makes the room by shrinking
elastic jobs (``Plan.shrinks``), the core emits ``JobResized`` for each
(``for_job``, the grace period) instead of ``PreemptionRequested``: the nodes
they give back are free at once and held for the preemptor, and each shrunk
job counts as one preemption in the rate limits.

**Rate limits.** At most ``per_minute`` preemptions in any minute of log time,
cluster-wide, and ``per_account_per_minute`` of one victim account; a
preemptor whose set would exceed them waits (it never preempts a part).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from services.domain.config import config_rejected
from services.domain.envelope import Decider
from services.domain.preemption import snapshot
from services.domain.preemption.fold import PREEMPTION
from services.domain.jobs import Job
from services.domain.preemption.planner import PreemptionPlanner
from services.domain.preemption.state import DEFAULT_RULES, VICTIM_ORDERS, Plan, PreemptionConfig, PreemptionState

__all__ = ["PreemptionCore", "PreemptionState", "PreemptionConfig", "Plan", "DEFAULT_RULES", "VICTIM_ORDERS"]


@dataclass
class PreemptionCore(PreemptionPlanner):
    name: ClassVar[str] = PREEMPTION
    max_preemptors_per_round: int = 16
    # Records between snapshots (0: never; services/domain/preemption/snapshot.py): a restart folds the log
    # after the latest one instead of the whole log (20-37 s at a million queued jobs, in process).
    snapshot_every: int = 50_000

    def fingerprint(self) -> str:
        """What a snapshot must have been folded with to be loaded by this core: what its fold reads of the
        configuration (the subjects, virtual time) and the inner scheduling fold's own fingerprint."""
        return (f"preemption/{snapshot.SNAPSHOT_FORMAT}/{self.name}/{','.join(self.subjects)}/{int(self.virtual_time)}/"
                f"{self.queue.fingerprint()}")

    def dump(self, state: PreemptionState) -> bytes:
        """The whole state as bytes (``snapshot.dump``)."""
        return snapshot.dump(state, self.queue, self.fingerprint())

    def load(self, data: bytes) -> PreemptionState | None:
        """The state a ``dump`` wrote, or None when it is from another format or configuration."""
        return snapshot.load(data, self.queue, self.fingerprint())

    def decide(self, state: PreemptionState) -> list[Event]:
        out: list[Event] = config_rejected(
            self.name, {seq: ("preemption", why) for seq, why in state.config_rejections.items()}, state.now, state.seq)
        cfg = state.config
        window = [(t, a) for t, a in state.recent if t > state.now - 60.0]
        per_account: dict[str, int] = {}
        for _, account in window:
            per_account[account] = per_account.get(account, 0) + 1
        total = len(window)
        taken: set[str] = set()
        decide = Decider(self.name, ts=state.now, source=self.name, basis_seq=state.seq)
        for pre in self.preemptors(state)[: self.max_preemptors_per_round]:
            plan = self.plan(state, pre.job_id, taken)
            if not plan.victims and not plan.shrinks:
                continue
            victims = [state.jobs.jobs[v] for v in plan.victims or sorted(plan.shrinks)]
            accounts: dict[str, int] = {}
            for v in victims:
                accounts[v.spec.account] = accounts.get(v.spec.account, 0) + 1  # type: ignore[union-attr]
            if total + len(victims) > cfg.per_minute or any(
                    per_account.get(a, 0) + n > cfg.per_account_per_minute for a, n in accounts.items()):
                continue  # over the rate: wait (never a part of a set)
            total += len(victims)
            for a, n in accounts.items():
                per_account[a] = per_account.get(a, 0) + n
            taken.update(v.job_id for v in victims)
            if plan.shrinks:
                out.extend(shrink_events(state, pre, plan, cfg.grace_period_s, self.name))
                continue
            for v in victims:
                out.append(decide(
                    c.PreemptionRequested, v.job_id, v.attempt, correlation_id=v.job_id, job_id=v.job_id,
                    attempt=v.attempt, for_job=pre.job_id, grace_period_s=cfg.grace_period_s,
                    reason=f"for {pre.job_id} ({pre.spec.priority_class}): {plan.reasons[v.job_id]}",  # type: ignore[union-attr]
                ))
        return out


def shrink_events(state: PreemptionState, pre: Job, plan: Plan, grace_period_s: float, source: str) -> list[Event]:
    """``JobResized`` for each elastic job of ``plan.shrinks``: its allocation without the nodes it gives
    back to ``pre`` (the released nodes are free at once; its tasks there are stopped within the grace)."""
    out: list[Event] = []
    decide = Decider(PREEMPTION, ts=state.now, source=source, basis_seq=state.seq)
    for victim_id, released in sorted(plan.shrinks.items()):
        job = state.jobs.jobs[victim_id]
        gone = set(released)
        kept = [a for a in job.allocations if a.node not in gone]
        out.append(decide(
            c.JobResized, victim_id, job.attempt, state.seq, correlation_id=victim_id, job_id=victim_id,
            attempt=job.attempt, allocations=kept, nodes=len(kept), previous_nodes=len(job.allocations),
            for_job=pre.job_id, grace_period_s=grace_period_s,
            reason=f"shrunk from {len(job.allocations)} to {len(kept)} nodes for {pre.job_id} "
                   f"({pre.spec.priority_class if pre.spec else ''}), giving back {', '.join(released)}: "
                   f"{plan.reasons[victim_id]}",
        ))
    return out
