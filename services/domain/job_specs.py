"""One spec object for the jobs whose specs are equal, in a job table that shares them. Pure.

A queued job's spec is most of what a service holds for it (584 bytes, and 237 more in the numbers
and strings it alone refers to: a queued one-GPU job of ``horizon bench`` cost placement 1,156 bytes,
measured with tracemalloc at 100,000). Jobs submitted alike (a sweep of one command, the benchmark's
backlog, a workflow tool's workers) have equal specs: a ``SharedSpecJobs`` table keeps the first and
lets the others refer to it (its ``shape``, which the table calls for every spec it takes in: a
``JobAccepted``, a restore). Placement, scheduling, submission and preemption hold their jobs so.

**Never changed in place.** A spec is frozen, and the table never changes one (``JobPriorityChanged``
replaces it: ``jobs._with``); ``compact`` only swaps values for equal ones (an interned string, a
shared empty map), which no reader can tell. So sharing is invisible to every reader, a snapshot
included (the same values are written). A spec whose ``payload`` (the one field typed ``Any``) is set
is not shared: ``1`` and ``1.0`` are equal there and would be written as the first job's.

The spec shared last is compared first (``==``, in C: jobs submitted alike come one after another,
in the log and in a snapshot's rows); else the lookup is by a few fields that tell most specs apart
(hashed in C), then the whole spec compared: 0.3-0.7 us a job, where encoding the spec as a key
cost 3-4 us. A bucket holds the last spec seen with its key, so specs that differ in another field
only share less, never wrongly. Bounded as ``jobs._COMMANDS`` is: cleared when full.
"""

from __future__ import annotations

from operator import attrgetter

from events import catalogue as c
from services.domain.jobs import JobTable, compact

__all__ = ["SharedSpecJobs", "share_spec"]

_KEY = attrgetter("tenant", "account", "user", "name", "command", "cpus_milli", "memory_bytes", "gpus", "gpu_type",
                  "nodes", "time_limit_s", "priority_class", "partition", "array", "array_index")
_SPECS: dict[tuple[object, ...], c.JobSpec] = {}
_SPECS_MAX = 4_096
_LAST: list[c.JobSpec | None] = [None]  # the spec shared last (compared first: ~0.25 us against ~0.65)


def share_spec(spec: c.JobSpec) -> c.JobSpec:
    """The spec an earlier call was given that equals ``spec``, else ``spec`` (then kept for later ones)."""
    last = _LAST[0]
    if last is not None and last == spec:  # the usual case: the job before was submitted alike
        return last
    if spec.payload is not None:
        return spec
    try:
        key = _KEY(spec)
        known = _SPECS.get(key)
    except TypeError:  # a field of the key that does not hash (a command held as a list): not shared
        return spec
    if known is None or known != spec:
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.clear()
        _SPECS[key] = _LAST[0] = spec
        return spec
    _LAST[0] = known
    return known


class SharedSpecJobs(JobTable):
    """A ``JobTable`` whose jobs with equal specs hold one spec object (``compact``, then shared)."""

    def shape(self, spec: c.JobSpec) -> c.JobSpec:
        return share_spec(compact(spec))
