"""Queue policies: the order in which pending jobs become candidates. Pure.

Every policy first orders by priority class (critical, high, normal, low,
scavenger); within a class:

``fcfs``
    submit time, then acceptance sequence (the log's total order breaks ties).
``sjf``
    shortest estimate (``time_limit_s``) first, then submit time.
``f1``
    the F1 heuristic of Carastan-Santos and de Camargo, as used by RLScheduler:
    ``log10(estimate) * size + 870 * log10(submit)``, smallest first, where
    size is the job's processors (GPUs if it asks for GPUs, else cores).
``multifactor`` (the default)
    Slurm-style weighted sum, largest first (see ``Multifactor``), with the
    Fair Tree fair-share factor (``services.domain.fairshare``).

The parameters (weights, maximum age, QOS boosts, restart backoff) are a
``PolicyConfig``, set by ``PolicyConfigured`` events, so their history is in
the log; a key is computed against a ``Context``: "now", the fair-share
factors of the cycle, the account boosts and the configuration.

A key is a tuple; ties can only be broken by the acceptance sequence, so no
two jobs ever compare equal and the order never depends on hashing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

from events import catalogue as c
from events.vocabulary import POLICY_WEIGHTS, QUEUE_POLICIES
from services.domain.config import check_weights
from services.domain.hetjob import component_specs
from services.domain.jobs import Job

__all__ = ["Policy", "POLICIES", "make_policy", "job_size", "Multifactor", "CLASS_RANK", "PolicyConfig", "Context",
           "WEIGHT_NAMES"]

CLASS_RANK = {name: rank for rank, name in enumerate(c.PRIORITY_CLASSES)}


def job_size(spec: c.JobSpec) -> float:
    """Processors a job occupies: GPUs when it asks for GPUs, else cores (a heterogeneous job: all its
    components', GPUs when any asks for them)."""
    if spec.components:
        shapes = component_specs(spec)
        if any(s.gpus or s.gpus_per_node for s in shapes):
            return float(sum(s.total_gpus for s in shapes))
        return sum(s.cpus_milli * s.nodes * s.tasks_per_node for s in shapes) / 1000.0
    tasks = spec.nodes * spec.tasks_per_node
    if spec.gpus or spec.gpus_per_node:
        return float(spec.total_gpus)
    return spec.cpus_milli * tasks / 1000.0


def size_shape(spec: c.JobSpec) -> object:
    """What ``job_size`` reads, as a value to group by (equal shapes, equal sizes), without its arithmetic."""
    if spec.components:
        return job_size(spec)
    return (spec.nodes, spec.tasks_per_node, spec.gpus, spec.gpus_per_node, spec.cpus_milli)


WEIGHT_NAMES = POLICY_WEIGHTS


@dataclass(frozen=True)
class PolicyConfig:
    """The queue policy and its parameters (defaults, then each ``PolicyConfigured`` on top)."""

    policy: str = "multifactor"
    weights: dict[str, float] = field(default_factory=lambda: {
        "class": 100_000.0, "fairshare": 10_000.0, "age": 1_000.0, "estimate": 4_000.0, "size": 500.0, "qos": 2_000.0})
    max_age_s: float = 7 * 86_400.0
    estimate_ref_s: float = 3_600.0
    qos_boost: dict[str, float] = field(default_factory=dict)
    backoff_base_s: float = 10.0
    backoff_max_s: float = 600.0

    def check(self, ev: c.PolicyConfigured) -> str | None:
        """Why ``ev`` cannot be applied, or None."""
        if ev.policy is not None and ev.policy not in POLICIES:
            return f"policy: {ev.policy!r} is not one of {', '.join(POLICIES)}"
        bad = check_weights(ev.weights, WEIGHT_NAMES)
        if bad:
            return bad
        for name in ("max_age_s", "estimate_ref_s", "backoff_base_s", "backoff_max_s"):
            value = getattr(ev, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                return f"{name}: {value!r} must be a positive number of seconds"
        for qos, value in ev.qos_boost.items():
            if not (0 <= value <= 1):
                return f"qos_boost.{qos}: {value!r} must be between 0 and 1"
        return None

    def updated(self, ev: c.PolicyConfigured) -> PolicyConfig:
        changes: dict[str, object] = {name: getattr(ev, name) for name in
                                      ("policy", "max_age_s", "estimate_ref_s", "backoff_base_s", "backoff_max_s")
                                      if getattr(ev, name) is not None}
        if ev.weights:
            changes["weights"] = {**self.weights, **ev.weights}
        if ev.qos_boost:
            changes["qos_boost"] = {**self.qos_boost, **ev.qos_boost}
        return replace(self, **changes)

    def backoff_s(self, failures: int) -> float:
        """The wait before retry number ``failures`` (1 for the first): base, doubling, capped."""
        return min(self.backoff_max_s, self.backoff_base_s * 2.0 ** max(0, failures - 1))


@dataclass(frozen=True)
class Context:
    """What a key may depend on besides the job: the cycle's "now" and standings."""

    now: float
    config: PolicyConfig = PolicyConfig()
    fairshare: dict[str, float] = field(default_factory=dict)  # association -> factor
    boosts: dict[str, float] = field(default_factory=dict)  # account -> priority boost


class Policy(Protocol):
    name: str
    dynamic: bool  # True when the key depends on the context (recomputed every cycle)

    def key(self, job: Job, ctx: Context) -> tuple[float | int, ...]: ...

    def group(self, spec: c.JobSpec) -> tuple[object, ...]:
        """Everything of the spec the key reads: jobs of one group differ in their keys only by
        ``accepted_ts`` and ``accepted_seq`` (``services/domain/queue/index.py``)."""
        ...

    def in_order(self, before: Job, after: Job) -> bool:
        """Whether ``before`` keys ahead of ``after`` in every context, for two jobs of one group
        with ``before`` first in ``(accepted_ts, accepted_seq)`` order."""
        ...


@dataclass(frozen=True)
class Fcfs:
    name: str = "fcfs"
    dynamic: bool = False

    def key(self, job: Job, ctx: Context) -> tuple[float | int, ...]:
        assert job.spec is not None
        return (CLASS_RANK[job.spec.priority_class], job.accepted_ts, job.accepted_seq)

    def group(self, spec: c.JobSpec) -> tuple[object, ...]:
        return (spec.priority_class,)

    def in_order(self, before: Job, after: Job) -> bool:
        return True  # the key's end is (accepted_ts, accepted_seq) itself


@dataclass(frozen=True)
class Sjf:
    name: str = "sjf"
    dynamic: bool = False

    def key(self, job: Job, ctx: Context) -> tuple[float | int, ...]:
        assert job.spec is not None
        return (CLASS_RANK[job.spec.priority_class], job.spec.time_limit_s, job.accepted_ts, job.accepted_seq)

    def group(self, spec: c.JobSpec) -> tuple[object, ...]:
        return (spec.priority_class, spec.time_limit_s)

    def in_order(self, before: Job, after: Job) -> bool:
        return True  # the key's end is (accepted_ts, accepted_seq) itself


@dataclass(frozen=True)
class F1:
    name: str = "f1"
    dynamic: bool = False

    def key(self, job: Job, ctx: Context) -> tuple[float | int, ...]:
        spec = job.spec
        assert spec is not None
        score = math.log10(max(spec.time_limit_s, 1.0)) * job_size(spec) + 870.0 * math.log10(max(job.accepted_ts, 1.0))
        return (CLASS_RANK[spec.priority_class], score, job.accepted_seq)

    def group(self, spec: c.JobSpec) -> tuple[object, ...]:
        return (spec.priority_class, spec.time_limit_s, size_shape(spec))

    def in_order(self, before: Job, after: Job) -> bool:
        # The key is static: compare it (the score grows with the submit time, but ties and
        # log10's rounding are settled by the key itself).
        return self.key(before, _STATIC) < self.key(after, _STATIC)


@dataclass(frozen=True)
class Multifactor:
    """``P = sum(w_f * f) + account boost - nice``, largest first; weights from ``PolicyConfig``.

    Factors, each in [0, 1]:

    * ``class = (4 - rank) / 4``: critical 1, high 0.75, normal 0.5, low 0.25, scavenger 0;
    * ``fairshare``: the Fair Tree factor of the job's association (1 = most under-served);
    * ``age = min(1, wait / max_age_s)``: grows while the job waits, capped, so nothing starves;
    * ``estimate = ref / (ref + time_limit)``: short estimates first (1 for 0 s, 1/2 at ``ref``);
    * ``size = 1 / (1 + log2(processors))``: small jobs slightly first (1 for one processor);
    * ``qos``: the boost of the job's QOS (0 unless configured).

    Worked example (default weights class 100,000, fairshare 10,000, age 1,000,
    estimate 4,000, size 500, qos 2,000; max age 7 days, ref 1 h): a normal job
    of a user with factor 0.5, waiting 12 h, estimate 1 h, 4 GPUs, no QOS, nice 0:
    ``100000*0.5 + 10000*0.5 + 1000*(43200/604800) + 4000*(3600/7200) + 500/(1+2)``
    = 50000 + 5000 + 71.4 + 2000 + 166.7 = 57238.1. The class dominates (the
    weights are far apart), then fair share; age lifts any job past newcomers
    in time.
    """

    name: str = "multifactor"
    dynamic: bool = True

    @staticmethod
    def factors(job: Job, ctx: Context) -> dict[str, float]:
        """Each factor's value, by ``WEIGHT_NAMES`` (what ``horizon show`` prints beside its weight)."""
        return dict(zip(WEIGHT_NAMES, _factor_values(job, ctx), strict=True))

    def priority(self, job: Job, ctx: Context) -> float:
        """``sum(w_f * f)`` over ``WEIGHT_NAMES`` in that order, plus the account boost, minus nice.

        The factors come from ``_factor_values``, the one formula ``factors`` also returns, and
        each term is ``weight * value``, added in the order ``horizon show`` lists them: the
        weighted rows it prints, plus the boost, minus nice, give this float exactly.
        """
        spec = job.spec
        assert spec is not None
        w = ctx.config.weights
        f_class, f_fairshare, f_age, f_estimate, f_size, f_qos = _factor_values(job, ctx)
        p = (w["class"] * f_class + w["fairshare"] * f_fairshare + w["age"] * f_age
             + w["estimate"] * f_estimate + w["size"] * f_size + w["qos"] * f_qos)
        if ctx.boosts:
            p += ctx.boosts.get(spec.account, 0.0)
        return p - spec.nice

    def key(self, job: Job, ctx: Context) -> tuple[float | int, ...]:
        return (-self.priority(job, ctx), job.accepted_seq)

    def group(self, spec: c.JobSpec) -> tuple[object, ...]:
        # every factor but age (fair share by account and user, the boost by account), and nice
        return (spec.priority_class, spec.account, spec.user, spec.nice, spec.time_limit_s, size_shape(spec), spec.qos)

    def in_order(self, before: Job, after: Job) -> bool:
        # Within a group only the age term differs, and it does not grow with accepted_ts: the
        # weights are >= 0 and a float sum or product by w >= 0 never decreases when a term grows.
        # So an earlier submit time never keys behind; equal priorities fall to accepted_seq,
        # which must then grow too.
        return before.accepted_seq < after.accepted_seq


def _factor_values(job: Job, ctx: Context) -> tuple[float, float, float, float, float, float]:
    """The multifactor factors of ``job`` in ``WEIGHT_NAMES`` order (class, fairshare, age,
    estimate, size, qos), each in [0, 1]; see ``Multifactor``. The sort key and the explanation
    both read them from here, so they cannot disagree."""
    spec = job.spec
    assert spec is not None
    cfg = ctx.config
    if spec.components:
        size = job_size(spec)
    else:
        tasks = spec.nodes * spec.tasks_per_node
        size = spec.total_gpus if spec.gpus or spec.gpus_per_node else spec.cpus_milli * tasks / 1000.0  # job_size, inline
    return (
        (4 - CLASS_RANK[spec.priority_class]) / 4,
        ctx.fairshare.get(f"{spec.account}/{spec.user or '-'}", 1.0) if ctx.fairshare else 1.0,
        min(1.0, max(0.0, ctx.now - job.accepted_ts) / cfg.max_age_s),
        cfg.estimate_ref_s / (cfg.estimate_ref_s + spec.time_limit_s),
        1.0 / (1.0 + math.log2(size if size > 1.0 else 1.0)),
        cfg.qos_boost.get(spec.qos, 0.0) if spec.qos and cfg.qos_boost else 0.0,  # no QOS named: no boost
    )


_STATIC = Context(0.0)  # what the static policies' keys are computed against (they read none of it)

POLICIES: dict[str, type] = {"fcfs": Fcfs, "sjf": Sjf, "f1": F1, "multifactor": Multifactor}
assert tuple(POLICIES) == QUEUE_POLICIES, "the policies a PolicyConfigured may name (events/vocabulary.py)"


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()  # type: ignore[no-any-return]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)}") from None
