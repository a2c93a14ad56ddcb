"""The fields of a submission that carry Slurm's option forms and directives, validated and normalised
into ``JobSpec``'s. Pure; ``services/submission/normalise.py`` calls it for every submission.

==================  ==================================================================
field               checked
==================  ==================================================================
gpus_per_node       0 or a count; excludes ``resources.gpus`` (GPUs per node *or* per task)
whole_node_memory   the spec's ``memory_bytes`` is 0: each node's memory is what it gets
constraint          Slurm's syntax (``services/domain/features.py``); some registered node
                    must have the features, else it could never run
nodelist            host lists (``node[01-04]``) of registered nodes, as many as the job has nodes
exclude_nodes       host lists; not overlapping ``nodelist``
time_min_s          more than 0 and at most the time limit
begin_ts            a time (seconds since the epoch); one already past starts the job at once
deadline_ts         a time (seconds since the epoch) after ``begin_ts``; one the job cannot
                    meet ends it at once (``UNSCHEDULABLE``, by the scheduler)
limit_signal        a signal name or number, ``before_s`` in 0..65535
==================  ==================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from events import catalogue as c
from events.resources import ResourceError, parse_count, parse_duration
from events.vocabulary import Limits
from services.domain.features import ConstraintError, describe, holds, parse_constraint
from services.domain.hostlist import HostlistError, expand
from services.domain.signals import MAX_SIGNAL_LEAD_S, signal_name

__all__ = ["DirectiveRejection", "gpus_per_node", "slurm_fields"]


class DirectiveRejection(Exception):
    """(field, reason): ``validate`` raises it as its ``Rejection``."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def gpus_per_node(sub: c.JobSubmitted, gpus_per_task: int, limits: Limits) -> int:
    """The GPUs a node holds for all its tasks (0: per task, ``resources.gpus``)."""
    count = sub.gpus_per_node
    try:
        if count.__class__ is not int or not 0 <= count <= limits.max_gpus_per_job:  # else parse_count returns it
            count = parse_count(count, "gpus_per_node", minimum=0, maximum=limits.max_gpus_per_job)
    except ResourceError as exc:
        raise DirectiveRejection(exc.field, f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}") from None
    if count and gpus_per_task:
        raise DirectiveRejection("gpus_per_node", "and resources.gpus exclude each other: give the GPUs each node "
                                 "holds for its tasks to share, or the GPUs of each task")
    return count


def _names(expressions: list[str], field: str) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for expression in expressions:
        try:
            names.update(dict.fromkeys(expand(expression)))
        except HostlistError as exc:
            raise DirectiveRejection(field, str(exc)) from None
    return tuple(names)


def slurm_fields(sub: c.JobSubmitted, *, nodes: int, time_limit_s: float,
                 features: Mapping[str, frozenset[str]] | None = None) -> dict[str, Any]:
    """``JobSpec``'s fields for the directives (see the module doc), or ``DirectiveRejection``.

    ``features``: every registered node and its features (``node_features``), to refuse a constraint
    that no node could ever satisfy and a node list naming a node not registered, as Slurm refuses
    them at submission (None, or no node yet: not judged)."""
    out: dict[str, Any] = {}
    if sub.exclusive:
        out["exclusive"] = True
    if sub.whole_node_memory:
        out["whole_node_memory"] = True
    if sub.constraint:
        try:
            constraint = parse_constraint(sub.constraint)
        except ConstraintError as exc:
            raise DirectiveRejection("constraint", f"{sub.constraint[:200]!r}: {exc}") from None
        if features:
            if not any(holds(constraint.any_of, node) for node in features.values()):
                known = sorted(set().union(*features.values()))
                raise DirectiveRejection("constraint", f"no registered node has the features {describe(constraint.any_of)}"
                                         f"; the nodes have: {', '.join(known) if known else 'no features'} "
                                         "(a node's features: its GPU models, the names in its 'features' label, "
                                         "its labels set to true)")
        out["constraint"] = constraint.text
    if sub.nodelist:
        listed = _names(sub.nodelist, "nodelist")
        if len(listed) != nodes:
            raise DirectiveRejection("nodelist", f"names {len(listed)} node(s) and the job has {nodes}: it runs on "
                                     "exactly the listed nodes")
        unknown = [name for name in listed if features and name not in features]
        if unknown:
            raise DirectiveRejection("nodelist", f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}: "
                                     f"no such node is registered (the cluster has {len(features or ())})")
        out["nodelist"] = tuple(sorted(listed))
    if sub.exclude_nodes:
        excluded = _names(sub.exclude_nodes, "exclude_nodes")
        both = sorted(set(excluded) & set(out.get("nodelist", ())))
        if both:
            raise DirectiveRejection("exclude_nodes", f"{', '.join(both)} both listed and excluded")
        out["exclude_nodes"] = tuple(sorted(excluded))
    if not sub.requeue:
        out["requeue"] = False
    if sub.time_min_s is not None:
        try:
            time_min = parse_duration(sub.time_min_s, "time_min_s")
        except ResourceError as exc:
            raise DirectiveRejection(exc.field, f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}") from None
        if not 0 < time_min <= time_limit_s:
            raise DirectiveRejection("time_min_s", f"{time_min:g} s must be more than 0 and at most the time limit "
                                     f"({time_limit_s:g} s)")
        if time_min < time_limit_s:
            out["time_min_s"] = time_min
    if sub.limit_signal is not None:
        sig = sub.limit_signal
        name = signal_name(sig.signal)
        if name is None:
            raise DirectiveRejection("limit_signal.signal", f"{sig.signal[:40]!r} is not a signal (e.g. USR1, "
                                     "SIGTERM, 10)")
        if not (math.isfinite(sig.before_s) and 0 <= sig.before_s <= MAX_SIGNAL_LEAD_S):
            raise DirectiveRejection("limit_signal.before_s", f"{sig.before_s!r} must be 0 to {MAX_SIGNAL_LEAD_S} "
                                     "seconds")
        out["limit_signal"] = c.LimitSignal(signal=name, before_s=float(sig.before_s), batch_only=sig.batch_only)
    if sub.singleton:
        out["singleton"] = True
    if sub.hold:
        out["hold"] = True
    if sub.begin_ts is not None:
        if not (math.isfinite(sub.begin_ts) and sub.begin_ts >= 0):
            raise DirectiveRejection("begin_ts", f"{sub.begin_ts!r} must be a time in seconds since the epoch")
        if sub.begin_ts > 0:
            out["begin_ts"] = float(sub.begin_ts)
    if sub.deadline_ts is not None:
        if not (math.isfinite(sub.deadline_ts) and sub.deadline_ts >= 0):
            raise DirectiveRejection("deadline_ts", f"{sub.deadline_ts!r} must be a time in seconds since the epoch")
        if sub.deadline_ts > 0:
            if sub.deadline_ts <= out.get("begin_ts", 0.0):
                raise DirectiveRejection("deadline_ts", "is not after begin_ts: the job could never start before it")
            out["deadline_ts"] = float(sub.deadline_ts)
    return out
