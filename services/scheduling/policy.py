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
``multifactor``
    Slurm-style weighted sum, largest first (see ``Multifactor``).

A key is a tuple; ties can only be broken by the acceptance sequence, so no
two jobs ever compare equal and the order never depends on hashing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from events import catalogue as c
from services.state.jobs import Job

__all__ = ["Policy", "POLICIES", "make_policy", "job_size", "Multifactor", "CLASS_RANK"]

CLASS_RANK = {name: rank for rank, name in enumerate(c.PRIORITY_CLASSES)}


def job_size(spec: c.JobSpec) -> float:
    """Processors a job occupies: GPUs when it asks for GPUs, else cores."""
    tasks = spec.nodes * spec.tasks_per_node
    if spec.gpus:
        return float(spec.gpus * tasks)
    return spec.cpus_milli * tasks / 1000.0


class Policy(Protocol):
    name: str
    dynamic: bool  # True when the key depends on "now" (recomputed every cycle)

    def key(self, job: Job, now: float) -> tuple[float | int, ...]: ...


@dataclass(frozen=True)
class Fcfs:
    name: str = "fcfs"
    dynamic: bool = False

    def key(self, job: Job, now: float) -> tuple[float | int, ...]:
        assert job.spec is not None
        return (CLASS_RANK[job.spec.priority_class], job.accepted_ts, job.accepted_seq)


@dataclass(frozen=True)
class Sjf:
    name: str = "sjf"
    dynamic: bool = False

    def key(self, job: Job, now: float) -> tuple[float | int, ...]:
        assert job.spec is not None
        return (CLASS_RANK[job.spec.priority_class], job.spec.time_limit_s, job.accepted_ts, job.accepted_seq)


@dataclass(frozen=True)
class F1:
    name: str = "f1"
    dynamic: bool = False

    def key(self, job: Job, now: float) -> tuple[float | int, ...]:
        spec = job.spec
        assert spec is not None
        score = math.log10(max(spec.time_limit_s, 1.0)) * job_size(spec) + 870.0 * math.log10(max(job.accepted_ts, 1.0))
        return (CLASS_RANK[spec.priority_class], score, job.accepted_seq)


@dataclass(frozen=True)
class Multifactor:
    """``P = w_class*f_class + w_age*f_age + w_est*f_est + w_size*f_size - nice``, largest first.

    Factors, each in [0, 1]:

    * ``f_class = (4 - rank) / 4``: critical 1, high 0.75, normal 0.5, low 0.25, scavenger 0;
    * ``f_age = min(1, wait / max_age_s)``: grows linearly while the job waits, capped;
    * ``f_est = ref / (ref + estimate)``: short estimates first (1 for 0 s, 0.5 at ``ref``);
    * ``f_size = 1 / (1 + log2(size))``: small jobs slightly first (1 for one processor).

    Worked example (defaults): a normal job waiting 2 h with a 1 h estimate on 4
    processors has ``100000*0.5 + 1000*(7200/86400) + 1000*(3600/7200) + 200/(1+2)``
    = 50000 + 83.3 + 500 + 66.7 = 50650.0. Class dominates (weights far apart);
    age eventually lifts any job past shorter newcomers, so nothing starves.
    """

    name: str = "multifactor"
    dynamic: bool = True
    w_class: float = 100_000.0
    w_age: float = 1_000.0
    w_est: float = 1_000.0
    w_size: float = 200.0
    max_age_s: float = 86_400.0
    est_ref_s: float = 3_600.0

    def factors(self, job: Job, now: float) -> dict[str, float]:
        spec = job.spec
        assert spec is not None
        size = max(job_size(spec), 1.0)
        return {
            "class": (4 - CLASS_RANK[spec.priority_class]) / 4,
            "age": min(1.0, max(0.0, now - job.accepted_ts) / self.max_age_s),
            "estimate": self.est_ref_s / (self.est_ref_s + spec.time_limit_s),
            "size": 1.0 / (1.0 + math.log2(size)),
        }

    def priority(self, job: Job, now: float) -> float:
        f = self.factors(job, now)
        nice = job.spec.nice if job.spec else 0
        return (self.w_class * f["class"] + self.w_age * f["age"] + self.w_est * f["estimate"]
                + self.w_size * f["size"] - nice)

    def key(self, job: Job, now: float) -> tuple[float | int, ...]:
        return (-self.priority(job, now), job.accepted_seq)


POLICIES: dict[str, type] = {"fcfs": Fcfs, "sjf": Sjf, "f1": F1, "multifactor": Multifactor}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()  # type: ignore[no-any-return]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)}") from None
