"""QoS classes, a job's limits, overcommitted capacity, and who goes first under memory pressure. Pure.

**Classes** (Kubernetes' pod QoS, from a job's requests and limits per task):

* ``guaranteed``: it requests CPUs and memory, and its limits equal its requests (no limit given
  means the request is the limit, which is what every job was before limits existed);
* ``best-effort``: it requests nothing (``cpus`` 0, ``memory`` 0, no GPUs); its limits, if any,
  only cap it;
* ``burstable``: anything else (a limit above its request).

A job of ``--exclusive`` holds its nodes' CPUs and one of ``--mem=0`` their memory: its limits are
its requests, so such a job is guaranteed.

**Overcommit** (``Node.cpu_overcommit``, ``Node.memory_overcommit``, set by ``horizon node set``):
placement packs the requests of burstable and best-effort jobs against ``capacity x ratio``
(floored to a whole millicore or byte), those of guaranteed jobs against the capacity itself, the
requests of every job on the node counted in both. So a guaranteed job starts only where all the
requests, its own included, fit in what the node really has, and its request is never a promise the
node cannot keep; burstable jobs may be promised more than exists, on the bet that they do not all
use their requests at once, which the memory-pressure eviction below settles when they do.
Worked: a node of 8 CPUs with ratio 2 holds 12 CPUs of burstable requests (``12 <= 16``); a
burstable job of 4 more fits (``16 <= 16``), a guaranteed job of 1 does not (``13 > 8``).

**Memory pressure** (``NodeMemoryPressure``, an agent's measure): the jobs on a node use more than
``memory_bytes - reserve_bytes``. ``memory_victims`` chooses whom to stop: best-effort jobs first,
then burstable jobs that use more than they requested, each group the largest user (over its
request, for burstable) first and then by job id, until the use measured, less what the chosen
ones used, is at most the line. Guaranteed jobs, and burstable ones within their requests, are
never chosen: the node promised them that memory. Jobs that have ended since the measure count as
freed, so deciding again on the same measure chooses nobody new.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from events import catalogue as c

__all__ = ["Requests", "QosClass", "QOS_CLASSES", "qos_class", "cpu_limit", "memory_limit", "overcommitted", "check_ratio",
           "memory_victims", "MAX_OVERCOMMIT"]

QosClass = Literal["guaranteed", "burstable", "best-effort"]
QOS_CLASSES: tuple[QosClass, ...] = ("guaranteed", "burstable", "best-effort")
MAX_OVERCOMMIT = 100.0  # a ratio above this is a typing mistake, not a plan


class Requests(Protocol):
    """What the class is derived from: a ``JobSpec``, or any record of the same fields (a read model's)."""

    cpus_milli: int
    memory_bytes: int
    cpu_limit_milli: int
    memory_limit_bytes: int
    exclusive: bool
    whole_node_memory: bool

    @property
    def gpus_on_node(self) -> int: ...


def qos_class(spec: Requests) -> QosClass:
    """The job's class from its requests and limits (see the module doc)."""
    cpus = spec.cpus_milli
    memory = spec.memory_bytes
    if cpus == 0 and memory == 0 and not spec.whole_node_memory and spec.gpus_on_node == 0:
        return "best-effort"
    cpu_bursts = spec.cpu_limit_milli > cpus and not spec.exclusive
    memory_bursts = spec.memory_limit_bytes > memory and not spec.whole_node_memory
    if cpu_bursts or memory_bursts or cpus == 0 or (memory == 0 and not spec.whole_node_memory):
        return "burstable"
    return "guaranteed"


def cpu_limit(spec: c.JobSpec, request_milli: int) -> int:
    """The CPUs (millicores) the job's cgroup may use on a node where it holds ``request_milli``:
    its limit for its tasks there, or the request when it gave none; 0: no limit."""
    if spec.cpu_limit_milli > spec.cpus_milli and not spec.exclusive:
        return spec.cpu_limit_milli * spec.tasks_per_node
    return request_milli


def memory_limit(spec: c.JobSpec, request_bytes: int) -> int:
    """The memory the job's cgroup may use on a node where it holds ``request_bytes`` (as ``cpu_limit``)."""
    if spec.memory_limit_bytes > spec.memory_bytes and not spec.whole_node_memory:
        return spec.memory_limit_bytes * spec.tasks_per_node
    return request_bytes


def overcommitted(capacity: int, ratio: float) -> int:
    """``capacity x ratio``, floored: what requests of burstable and best-effort jobs are packed against."""
    return capacity if ratio == 1.0 else int(capacity * ratio)


def check_ratio(value: float | None, what: str) -> str:
    """Why an overcommit ratio is refused ("" if it is fine; None means "unchanged")."""
    if value is None:
        return ""
    if not (1.0 <= value <= MAX_OVERCOMMIT):
        return f"{what} {value!r} must be from 1 (no overcommit) to {MAX_OVERCOMMIT:g}"
    return ""


def memory_victims(pressure: c.NodeMemoryPressure, running: Mapping[str, tuple[int, c.JobSpec, int]],
                   ) -> list[tuple[str, int, QosClass, int]]:
    """Whom to evict for ``pressure``: ``(job_id, attempt, class, used_bytes)`` in eviction order.

    ``running``: job id -> (its current attempt, its spec, the memory it requested on this node) for
    the jobs that hold resources on the node now. A job the measure names for an attempt that is
    no longer running counts as freed (it ended, or was evicted already).
    """
    line = pressure.memory_bytes - pressure.reserve_bytes
    used = pressure.used_bytes
    best_effort: list[tuple[int, str, int, int]] = []
    burstable: list[tuple[int, str, int, int]] = []
    for use in pressure.jobs:
        now = running.get(use.job_id)
        if now is None or now[0] != use.attempt:
            used -= use.used_bytes  # gone since the measure
            continue
        _, spec, requested = now
        cls = qos_class(spec)
        if cls == "best-effort":
            best_effort.append((-use.used_bytes, use.job_id, use.attempt, use.used_bytes))
        elif cls == "burstable" and use.used_bytes > requested:
            burstable.append((-(use.used_bytes - requested), use.job_id, use.attempt, use.used_bytes))
    chosen: list[tuple[str, int, QosClass, int]] = []
    for cls, group in (("best-effort", best_effort), ("burstable", burstable)):
        for _, job_id, attempt, job_used in sorted(group):
            if used <= line:
                return chosen
            chosen.append((job_id, attempt, cls, job_used))  # type: ignore[arg-type]
            used -= job_used
    return chosen

