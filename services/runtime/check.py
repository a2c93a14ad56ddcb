"""Whole-log invariants, checked record by record (used by tests and, later, ``horizon check``).

* no device is allocated to two jobs that hold resources at the same time,
  and no node's CPUs or memory are allocated beyond its capacity;
* every allocation is on a registered node and names devices that exist;
* every ``JobScheduled`` that takes effect is for an accepted job, and no
  attempt of a job is scheduled twice;
* at the end, the ledger recomputed from the jobs equals the incremental one;
* no account's quota is exceeded at any sequence: what its jobs hold without
  borrowing stays within every limit, and its running jobs within
  ``running_jobs`` (borrowing never applies to that one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from events import catalogue as c
from events.codec import DecodeError, decode
from events.subjects import parse_subject
from services.scheduling.fairshare import FairShare
from services.scheduling.quotas import Amount, amount_of
from services.state.cluster import Cluster
from services.state.jobs import HOLDS_RESOURCES, Job, JobTable

__all__ = ["LogCheck", "check_log"]


@dataclass
class LogCheck:
    records: int = 0
    scheduled: int = 0
    problems: list[str] = field(default_factory=list)
    jobs: JobTable = field(default_factory=JobTable)
    cluster: Cluster = field(default_factory=Cluster)
    accounts: FairShare = field(default_factory=FairShare)
    own_use: dict[str, Amount] = field(default_factory=dict)  # account -> held without borrowing
    running: dict[str, int] = field(default_factory=dict)  # account -> jobs holding resources
    borrowed: int = 0  # attempts scheduled on borrowed quota

    @property
    def ok(self) -> bool:
        return not self.problems


def check_log(records: Iterable) -> LogCheck:
    out = LogCheck()
    scheduled_attempts: set[tuple[str, int]] = set()
    for record in records:
        out.records += 1
        try:
            event = decode(record.data)
        except DecodeError:
            continue
        if out.cluster.apply(event, record.seq):
            continue
        if isinstance(event, c.AccountConfigured):
            subject = parse_subject(record.subject)
            if subject is not None and subject.kind == "admin" and out.accounts.check_account(event) is None:
                out.accounts.configure_account(event, record.time)
            continue
        if isinstance(event, c.JobScheduled):
            key = (event.job_id, event.attempt)
            if key in scheduled_attempts:
                out.problems.append(f"seq {record.seq}: attempt {event.attempt} of {event.job_id} scheduled twice")
            scheduled_attempts.add(key)
            job = out.jobs.get(event.job_id)
            if job is None or job.spec is None:
                out.problems.append(f"seq {record.seq}: {event.job_id} scheduled but never accepted")
        tr = out.jobs.apply(event, record.seq, record.time)
        if tr is None:
            continue
        if tr.after in HOLDS_RESOURCES and tr.before not in HOLDS_RESOURCES:
            out.scheduled += 1
            _check_take(out, record.seq, tr.job.job_id, tr.job.allocations)
            _check_quota(out, record.seq, tr.job, +1)
        elif tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
            _check_quota(out, record.seq, tr.job, -1)
        out.cluster.on_transition(tr)
    out.problems.extend(out.cluster.check(out.jobs))
    return out


def _check_take(out: LogCheck, seq: int, job_id: str, allocations: list[c.NodeAllocation]) -> None:
    for alloc in allocations:
        node = out.cluster.nodes.get(alloc.node)
        if node is None:
            out.problems.append(f"seq {seq}: {job_id} placed on unregistered node {alloc.node}")
            continue
        # A node may have been lost between a placement's basis and its landing in the
        # log; that is a race inventory settles (it fails the job), not a violation.
        for device in alloc.device_ids:
            if device not in node.gpus:
                out.problems.append(f"seq {seq}: {job_id} got {alloc.node}/{device}, which does not exist")
            holder = node.used_devices.get(device)
            if holder is not None:
                out.problems.append(f"seq {seq}: {alloc.node}/{device} given to {job_id} while {holder} holds it")
        if node.used_cpus_milli + alloc.cpus_milli > node.cpus_milli:
            out.problems.append(f"seq {seq}: {alloc.node} CPUs over-allocated by {job_id}")
        if node.used_memory_bytes + alloc.memory_bytes > node.memory_bytes:
            out.problems.append(f"seq {seq}: {alloc.node} memory over-allocated by {job_id}")




def _check_quota(out: LogCheck, seq: int, job: Job, sign: int) -> None:
    """Charge (or release) an attempt to its accounts and check their limits after a charge."""
    spec = job.spec
    if spec is None:
        return
    out.borrowed += sign > 0 and job.borrowed
    leaf = out.accounts.leaf_for(spec, 0.0).name
    x = amount_of(spec)
    for acc in out.accounts.path(leaf):
        if acc.leaf:
            continue
        out.running[acc.name] = out.running.get(acc.name, 0) + sign
        if not job.borrowed:
            out.own_use.setdefault(acc.name, Amount()).add(x, sign)
        if sign < 0:
            continue
        q, own = acc.quota, out.own_use.get(acc.name, Amount())
        if q.running_jobs is not None and out.running[acc.name] > q.running_jobs:
            out.problems.append(f"seq {seq}: account {acc.name} runs {out.running[acc.name]} jobs, "
                                f"quota {q.running_jobs} ({job.job_id})")
        for dim in ("gpus", "cpus_milli", "memory_bytes"):
            limit = getattr(q, dim)
            if limit is not None and own.get(dim) > limit:
                out.problems.append(f"seq {seq}: account {acc.name} holds {own.get(dim)} {dim} without "
                                    f"borrowing, quota {limit} ({job.job_id})")
        for gpu_type, limit in q.gpus_by_type.items():
            if own.gpus_by_type.get(gpu_type, 0) > limit:
                out.problems.append(f"seq {seq}: account {acc.name} holds {own.gpus_by_type[gpu_type]} {gpu_type} "
                                    f"GPUs, quota {limit} ({job.job_id})")
