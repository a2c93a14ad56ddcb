"""Which partition a submission runs in, and the defaults it takes from it. Pure.

A step of ``services.submission.normalise``: the first of the partitions the job names (or the
default one, ``services.domain.partitions``) whose limits admit it and whose registered nodes could
ever hold it; a cluster without partitions runs it on any node that could.
"""

from __future__ import annotations

from collections.abc import Callable
from msgspec.structs import replace

from events import catalogue as c
from events.subjects import valid_partition
from events.vocabulary import Limits
from services.domain.partitions import Candidates, Partitions, default_memory, default_time, limit_problem
from services.submission.asked import Asked
from services.submission.capacity import Capacity
from services.submission.rejection import Rejection
from services.submission.task_spread import spread_tasks

__all__ = ["choose_partition"]

_NONE_DEFINED = Candidates(none_defined=True)


def choose_partition(
    sub: c.JobSubmitted,
    asked: Asked,
    parts: Partitions,
    *,
    limits: Limits,
    capacity: Capacity | None,
    capacity_of: Callable[[str], Capacity] | None,
    warnings: list[str] | None,
    scope: str,
) -> tuple[str, Asked]:
    """The partition the job runs in ("" when the cluster defines none), and what it asks with that
    partition's defaults (time limit, memory) and its MaxNodes applied. A job of no time limit
    (``time_limit_s`` 0, Slurm's ``--time=0``) gets the partition's MaxTime, else the cluster's most
    (``Limits.max_time_limit_s``): Horizon's nearest to none, since backfill plans with every limit."""
    for i, name in enumerate(sub.partitions):
        if name.strip() and not valid_partition(name.strip()):
            raise Rejection(f"partitions[{i}]", f"{name[:200]!r} is not a partition name (1-128 letters, digits, '_', "
                            "'-' or '.')")
    # A cluster without partitions and a job naming none (the most common case): what candidates() says
    candidates = _NONE_DEFINED if not sub.partitions and not parts.configs else parts.candidates(sub.partitions)
    if candidates.problem is not None:
        raise Rejection(*candidates.problem)
    if candidates.none_defined:
        return "", _fit_without_partitions(sub, asked, candidates, limits=limits, capacity=capacity,
                                           warnings=warnings)
    account = sub.account or c.DEFAULT_ACCOUNT
    if scope and account == c.DEFAULT_ACCOUNT:
        account = scope  # the account its job will charge (intake_rules.scoped_spec)
    partition, asked = _first_partition_that_runs_it(sub, asked, parts, candidates, account=account, limits=limits,
                                                     capacity=capacity, capacity_of=capacity_of, warnings=warnings)
    if warnings is not None:
        if candidates.unknown:
            warnings.append(f"partition {', '.join(repr(n) for n in candidates.unknown)} is not defined here; "
                            f"the job runs in {partition!r}")
        if parts.configs[partition].state == "down":
            warnings.append(f"partition {partition!r} is down: the job waits until an operator brings it up")
    return partition, asked


def _fit_without_partitions(sub: c.JobSubmitted, asked: Asked, candidates: Candidates, *, limits: Limits,
                            capacity: Capacity | None, warnings: list[str] | None) -> Asked:
    """A cluster without partitions: the defaults, tasks spread over any nodes, and a job some registered
    nodes could hold."""
    if not asked.time_given and not asked.memory_given:  # both defaults at once (one copy, not two)
        asked = replace(asked, time_limit=limits.default_time_limit_s,
                        memory_bytes=default_memory(None, asked.cpus_milli, asked.gpus))
    elif not asked.time_given:
        asked = replace(asked, time_limit=limits.default_time_limit_s)
    elif not asked.memory_given:
        asked = replace(asked, memory_bytes=default_memory(None, asked.cpus_milli, asked.gpus))
    if sub.spread_tasks:
        asked = spread_tasks(sub, asked, asked.memory_bytes, capacity, max_nodes=limits.max_nodes_per_job,
                             max_gpus=limits.max_gpus_per_job)
    problem = capacity.problem(asked.need(asked.memory_bytes)) if capacity is not None else None
    if problem is not None:  # what no registered node could ever hold would wait for ever
        raise Rejection(*problem)
    if candidates.unknown and warnings is not None:
        warnings.append(f"partition {', '.join(repr(n) for n in candidates.unknown)} is not defined here (this "
                        "cluster defines no partitions); the job runs on any node")
    return asked


def _first_partition_that_runs_it(
    sub: c.JobSubmitted,
    asked: Asked,
    parts: Partitions,
    candidates: Candidates,
    *,
    account: str,
    limits: Limits,
    capacity: Capacity | None,
    capacity_of: Callable[[str], Capacity] | None,
    warnings: list[str] | None,
) -> tuple[str, Asked]:
    """The first candidate whose limits and nodes admit the job, with its defaults; none: the one
    partition's problem, or every candidate's."""
    refused: list[tuple[str, str, str]] = []  # (partition, field, reason)
    for name in candidates.names:
        cfg = parts.configs[name]
        if asked.no_time_limit:  # Slurm's --time=0: as long as the partition allows, within the cluster's most
            t = min(cfg.max_time_s, asked.time_limit) if cfg.max_time_s is not None else asked.time_limit
        else:
            t = asked.time_limit if asked.time_given else default_time(cfg, limits.default_time_limit_s)
        m = asked.memory_bytes if asked.memory_given else default_memory(cfg, asked.cpus_milli, asked.gpus)
        nodes_of = None if capacity is None else capacity_of(name) if capacity_of is not None else capacity
        here = asked
        if sub.spread_tasks:  # Slurm's -n without -N: over the nodes of this partition that could hold them
            most = min(limits.max_nodes_per_job, cfg.max_nodes or limits.max_nodes_per_job)
            here = spread_tasks(sub, asked, m, nodes_of, max_nodes=most, max_gpus=limits.max_gpus_per_job)
            m = here.memory_bytes
        problem = limit_problem(cfg, time_limit_s=t, time_given=here.time_given, nodes=here.least,
                                account=account, qos=sub.qos)
        if problem is None and capacity is not None and nodes_of is not None:
            problem = nodes_of.problem(here.need(m))
            if problem is not None and len(nodes_of.nodes) < len(capacity.nodes):
                count = len(nodes_of.nodes)
                problem = (problem[0], f"partition {name!r} ({count} {'node' if count == 1 else 'nodes'}): "
                                       f"{problem[1]}")
        if problem is None:
            nodes = here.nodes
            if cfg.max_nodes is not None and nodes > cfg.max_nodes:  # an elastic job's most, cut to MaxNodes
                nodes = cfg.max_nodes
                if warnings is not None:
                    warnings.append(f"at most {nodes} nodes in partition {name!r} (MaxNodes): the job grows "
                                    f"to {nodes}, not to {sub.nodes}")
            return name, replace(here, time_limit=t, memory_bytes=m, nodes=nodes)
        refused.append((name, *problem))
    if len(refused) == 1:
        raise Rejection(refused[0][1], refused[0][2])
    raise Rejection("partitions", "no partition of " + ",".join(n for n, _, _ in refused) + " can run it: "
                    + "; ".join(f"{field}: {reason}" for _, field, reason in refused))
