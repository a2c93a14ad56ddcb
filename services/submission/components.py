"""A heterogeneous job's components, validated and normalised (``JobSubmitted.components`` ->
``JobSpec.components``). Pure.

Each component after the first is judged as the submission would be with that component's shape in
place of its own (``normalise`` run again on it: its resources parsed, its GPUs of a model the cluster
has, its tasks laid out or spread, what the partition's nodes could ever hold, its constraint), in the
partition the job got: a job's components run in one partition, so a component that names another is
refused. A problem is named by the component: ``components[0].resources.memory: ...`` is the second
component's (the first is the submission's own shape).

The job as a whole: at most ``Limits.max_components`` components, all of them rigid (an elastic gang
has no fixed number of nodes to cut its allocation by), no array of them (Slurm has none either), and
its GPUs and nodes over all components within the job limits.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from events import catalogue as c
from events.vocabulary import Limits
from services.submission.rejection import Rejection

__all__ = ["normalise_components"]

Normalise = Callable[[c.JobSubmitted], c.JobSpec]


def normalise_components(sub: c.JobSubmitted, spec: c.JobSpec, limits: Limits,
                         normalise_one: Normalise, registered: int = 0) -> tuple[c.Component, ...]:
    """The components of ``sub`` after the first, normalised (``spec``: the job as normalised with its
    own shape; ``normalise_one``: ``normalise`` with the same cluster), or ``Rejection``. ``registered``:
    the nodes registered in the job's partition (0: none yet, not judged), which must be at least the
    nodes of all components together, each component having nodes of its own."""
    if not sub.components:
        return ()
    count = 1 + len(sub.components)
    if count > limits.max_components:
        raise Rejection("components", f"{count} components; a heterogeneous job has at most {limits.max_components}")
    if spec.array is not None:
        raise Rejection("components", "a job array cannot be heterogeneous (nor can Slurm's): submit the components "
                        "as one job, or the array's tasks as jobs of one shape")
    if spec.elastic:
        raise Rejection("min_nodes", "a heterogeneous job's components are rigid: give each a number of nodes, not a "
                        "range")
    out: list[c.Component] = []
    for i, part in enumerate(sub.components):
        where = f"components[{i}]"
        if part.partitions and part.partitions != [spec.partition]:
            raise Rejection(f"{where}.partitions", f"{','.join(part.partitions)!r}: a heterogeneous job's components "
                            f"run in one partition, the job's ({spec.partition or 'the default'})")
        one = msgspec.structs.replace(
            sub, resources=part.resources, nodes=part.nodes, tasks_per_node=part.tasks_per_node, ntasks=part.ntasks,
            spread_tasks=part.spread_tasks, memory_per_node=part.memory_per_node, gpus_per_node=part.gpus_per_node,
            exclusive=part.exclusive, whole_node_memory=part.whole_node_memory, constraint=part.constraint,
            partitions=[spec.partition] if spec.partition else [], components=[], array=None, nodelist=[],
            min_nodes=None, min_available=None)
        try:
            shaped = normalise_one(one)
        except Rejection as exc:
            raise Rejection(f"{where}.{exc.field}", exc.reason) from None
        out.append(c.Component(**{name: getattr(shaped, name) for name in c.COMPONENT_FIELDS}))
    gpus = spec.total_gpus + sum((p.gpus_per_node or p.gpus * p.tasks_per_node) * p.nodes for p in out)
    if gpus > limits.max_gpus_per_job:
        raise Rejection("components", f"{gpus} GPUs over all components is above the limit of "
                        f"{limits.max_gpus_per_job} per job")
    nodes = spec.nodes + sum(p.nodes for p in out)
    if nodes > limits.max_nodes_per_job:
        raise Rejection("components", f"{nodes} nodes over all components (each component has nodes of its own) is "
                        f"above the limit of {limits.max_nodes_per_job} per job")
    if 0 < registered < nodes:
        where = f"partition {spec.partition}" if spec.partition else "the cluster"
        raise Rejection("components", f"{nodes} nodes over all components (each component has nodes of its own), and "
                        f"{where} has {registered} registered")
    return tuple(out)
