"""The common shape of a submission, and its spec built in one step. Pure.

Most submissions set a handful of fields (who, what to run, the resources, a time limit) and leave
Slurm's directives, arrays, dependencies, files, images, datasets, licenses, tolerations and
components at their defaults. ``normalise`` asks ``is_common`` (one comparison of the rarely set
fields against their defaults, in C) and, for such a submission, skips the steps that could only
pass and builds the spec with ``common_spec``: the fields the common shape can change, the others
left at ``JobSpec``'s defaults, which are what ``normalise``'s general ``_spec`` makes of the
submission's defaults (``tests/services/test_submission_common_shape.py`` checks that, and this
path against the general one over many generated submissions, byte for byte). Measured: ~3 us for the general spec, ~1 us for this one.

The comparison is exact for what the log holds: a decoded submission's fields have their declared
types (msgspec refuses a boolean for an integer, and makes a float of an integer for a float
field), so a rare field equal to its default is its default. The one float among them that a
client could send as ``-0.0`` is ``min_runtime_s``, which is not among them (``parse_asked`` reads
it, and the spec takes what it parsed).
"""

from __future__ import annotations

from operator import attrgetter

from events import catalogue as c
from services.domain.partitions import Partitions
from services.submission.asked import Asked, spec_fields

__all__ = ["is_common", "common_spec", "FREE_FIELDS", "RARE_FIELDS"]

# What the common shape may set: what the steps it still runs read (identity, sizes, parse_asked and
# the checks of what it asked, the partition, the policy fields, the simulated run, cwd), and what
# the spec copies of it here. The envelope is not read by normalise.
FREE_FIELDS = frozenset({
    "id", "v", "ts", "causation_id", "correlation_id", "source",
    "job_id", "tenant", "account", "user", "name", "command", "env", "resources",
    "nodes", "tasks_per_node", "ntasks", "spread_tasks", "memory_per_node", "min_nodes", "min_available",
    "assembly_timeout_s", "gpus_per_node", "time_limit_s", "scheduling_timeout_s", "dependency_timeout_s",
    "min_runtime_s", "max_retries", "priority_class", "nice", "qos", "profile", "partitions", "preemptible",
    "labels", "sim_runtime_s", "sim_exit_code", "cwd",
})
RARE_FIELDS: tuple[str, ...] = tuple(f for f in c.JobSubmitted.__struct_fields__ if f not in FREE_FIELDS)
_rare = attrgetter(*RARE_FIELDS)
_RARE_DEFAULTS = _rare(c.JobSubmitted(job_id="x", tenant="x"))


def is_common(sub: c.JobSubmitted) -> bool:
    """True if every field outside ``FREE_FIELDS`` is at its default."""
    return _rare(sub) == _RARE_DEFAULTS  # type: ignore[no-any-return]


def common_spec(sub: c.JobSubmitted, asked: Asked, partition: str, parts: Partitions, priority_class: str) -> c.JobSpec:
    """``normalise._spec`` for a submission ``is_common`` says is common (no array, no directives,
    restart policy "never"): the same spec, in one constructor call of the fields it can change."""
    asked_profile = sub.profile
    if asked_profile and asked_profile != "default":
        profile = asked_profile
    else:
        profile = (parts.configs[partition].profile if partition else "") or "default"
    return c.JobSpec(
        tenant=sub.tenant,
        account=sub.account or "default",
        user=sub.user,
        name=sub.name or sub.job_id,
        command=tuple(sub.command),
        env=dict(sub.env),
        **spec_fields(asked),
        priority_class=priority_class,  # type: ignore[arg-type]
        nice=sub.nice,
        qos=sub.qos,
        profile=profile,
        partition=partition,
        max_retries=asked.max_retries,
        preemptible=sub.preemptible,
        min_runtime_s=asked.min_runtime,
        labels=dict(sub.labels),
        sim_runtime_s=sub.sim_runtime_s,
        sim_exit_code=sub.sim_exit_code,
        cwd=sub.cwd,
        gpus_per_node=asked.node_gpus,
    )
