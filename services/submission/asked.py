"""What a submission asks for: its resources, counts and durations, parsed and checked alone. Pure.

The steps of ``services.submission.normalise`` that read the numbers: ``parse_asked`` turns the
submission's forms (``"16Gi"``, ``"2h"``, ``"250m"``) into an ``Asked``, and each check after it
raises the first ``Rejection`` it finds. The partition's defaults come later
(``services.submission.partition_choice``), then ``check_final_limits``.
"""

from __future__ import annotations

import msgspec
from msgspec.structs import replace

from events import catalogue as c
from events.resources import (GpuModel, ResourceError, format_cpus, format_memory, parse_count, parse_cpus,
                              parse_duration, parse_gpu_model, parse_memory)
from events.vocabulary import MAX_RETRIES, MAX_TASKS_PER_NODE, Limits
from services.submission.capacity import Need
from services.submission.directives import DirectiveRejection, gpus_per_node
from services.submission.rejection import Rejection

__all__ = ["Asked", "parse_asked", "elastic_least", "check_cpus_and_memory", "with_gpus_per_node",
           "check_durations_and_elasticity", "check_tasks", "check_gpus", "check_final_limits"]


class Asked(msgspec.Struct, frozen=True):
    """What a submission asks for, parsed: the numbers its checks and its spec read. (A frozen Struct
    rather than a frozen dataclass: made and replaced several times per submission, 0.3 us against
    1.8 us to make one and 0.1 against 3.4 to replace a field.)"""

    cpus_milli: int
    memory_bytes: int  # 0 until a default is chosen when not given
    memory_given: bool  # False: the partition's default (or 1 GiB)
    time_given: bool
    no_time_limit: bool  # time_limit_s 0 (Slurm's --time=0, UNLIMITED): the partition's MaxTime, else the most
    gpus: int
    gpu_memory: int
    nodes: int
    tasks_per_node: int
    least: int  # the fewest nodes it runs on (elastic_least)
    assembly: float | None
    model: GpuModel | None
    time_limit: float
    timeout: float | None
    dep_timeout: float | None
    min_runtime: float
    max_retries: int
    cpu_limit: int
    memory_limit: int
    node_gpus: int = 0  # GPUs a node's tasks share (Slurm's --gres with tasks)
    ntasks: int = 0  # the tasks in all when fewer than nodes x tasks_per_node, or to spread (0: every slot)

    def need(self, memory: int) -> Need:
        """What a node must hold for it with ``memory`` per task (an elastic job needs its least)."""
        model = self.model
        return Need(self.cpus_milli, memory, self.gpus, model.type if model else None,
                    model.variant if model else None, self.gpu_memory, self.least, self.tasks_per_node,
                    gpus_per_node=self.node_gpus)


# What parse_cpus and parse_memory made of a value (str, int or float) before: most submissions ask
# for the same few amounts, and parsing one (decimal arithmetic) takes ~1 us. Only answers are kept
# (a value that does not parse raises each time, with its field's name); the type is part of the key
# (1 and 1.0 and True are equal keys otherwise). -0.0 and 0.0 are one key, and parse to the same 0.
_PARSED_CPUS: dict[tuple[type, object], int] = {}
_PARSED_MEMORY: dict[tuple[type, object], int] = {}
_PARSED_MAX = 1024  # distinct amounts remembered; past it, the rest are parsed each time


def _cpus(value: object, field: str) -> int:
    if value.__class__ not in _AMOUNT_TYPES:
        return parse_cpus(value, field)
    key = (value.__class__, value)
    known = _PARSED_CPUS.get(key)
    if known is None:
        known = parse_cpus(value, field)
        if len(_PARSED_CPUS) < _PARSED_MAX:
            _PARSED_CPUS[key] = known
    return known


def _memory(value: object, field: str) -> int:
    if value.__class__ not in _AMOUNT_TYPES:
        return parse_memory(value, field)
    key = (value.__class__, value)
    known = _PARSED_MEMORY.get(key)
    if known is None:
        known = parse_memory(value, field)
        if len(_PARSED_MEMORY) < _PARSED_MAX:
            _PARSED_MEMORY[key] = known
    return known


_AMOUNT_TYPES = frozenset({str, int, float})


def _count(value: object, field: str, minimum: int, maximum: int) -> int:
    """``parse_count``, without its call for an integer within bounds (which it returns as it is)."""
    if value.__class__ is int and minimum <= value <= maximum:  # type: ignore[operator]
        return value  # type: ignore[return-value]
    return parse_count(value, field, minimum=minimum, maximum=maximum)


def parse_asked(sub: c.JobSubmitted, limits: Limits) -> Asked:
    """The resources, counts and durations parsed (``ResourceError`` already names the field and the
    accepted forms)."""
    r = sub.resources
    try:
        cpus_milli = _cpus(r.cpus, "resources.cpus")
        memory_bytes = _memory(r.memory, "resources.memory") if r.memory is not None else 0
        gpus = _count(r.gpus, "resources.gpus", 0, limits.max_gpus_per_job)
        gpu_memory = 0 if r.gpu_memory is None else _memory(r.gpu_memory, "resources.gpu_memory")
        nodes = _count(sub.nodes, "nodes", 1, limits.max_nodes_per_job)
        tasks_per_node = _count(sub.tasks_per_node, "tasks_per_node", 1, MAX_TASKS_PER_NODE)
        least = (nodes if sub.min_nodes is None and sub.min_available is None
                 else elastic_least(sub, nodes, tasks_per_node, limits))
        ntasks = 0 if sub.ntasks is None else parse_count(sub.ntasks, "ntasks", minimum=1,
                                                          maximum=limits.max_nodes_per_job * MAX_TASKS_PER_NODE)
        if sub.memory_per_node is not None and parse_memory(sub.memory_per_node, "memory_per_node") <= 0:
            raise ResourceError("memory_per_node", sub.memory_per_node, "is not more than 0",
                                "bytes, more than 0 (all of each node's memory: whole_node_memory)")
        assembly = (None if sub.assembly_timeout_s is None
                    else parse_duration(sub.assembly_timeout_s, "assembly_timeout_s"))
        model = parse_gpu_model(r.gpu_type, "resources.gpu_type") if r.gpu_type else None
        time_limit = (
            limits.default_time_limit_s if sub.time_limit_s is None else parse_duration(sub.time_limit_s, "time_limit_s")
        )
        no_time_limit = sub.time_limit_s is not None and time_limit == 0
        if no_time_limit:  # no limit: the cluster's longest, unless its partition's MaxTime is shorter
            time_limit = limits.max_time_limit_s
        timeout = None if sub.scheduling_timeout_s is None else parse_duration(sub.scheduling_timeout_s, "scheduling_timeout_s")
        dep_timeout = (None if sub.dependency_timeout_s is None
                       else parse_duration(sub.dependency_timeout_s, "dependency_timeout_s"))
        min_runtime = parse_duration(sub.min_runtime_s, "min_runtime_s")
        max_retries = _count(sub.max_retries, "max_retries", 0, MAX_RETRIES)
        cpu_limit = 0 if r.cpu_limit is None else _cpus(r.cpu_limit, "resources.cpu_limit")
        memory_limit = 0 if r.memory_limit is None else _memory(r.memory_limit, "resources.memory_limit")
    except ResourceError as exc:
        raise Rejection(exc.field, f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}") from None
    return Asked(cpus_milli=cpus_milli, memory_bytes=memory_bytes, memory_given=r.memory is not None,
                 time_given=sub.time_limit_s is not None, no_time_limit=no_time_limit, gpus=gpus,
                 gpu_memory=gpu_memory, nodes=nodes, tasks_per_node=tasks_per_node, least=least, assembly=assembly,
                 model=model, time_limit=time_limit, timeout=timeout, dep_timeout=dep_timeout, min_runtime=min_runtime,
                 max_retries=max_retries, cpu_limit=cpu_limit, memory_limit=memory_limit, ntasks=ntasks)


def elastic_least(sub: c.JobSubmitted, nodes: int, tasks_per_node: int, limits: Limits) -> int:
    """The fewest nodes the job runs on: ``min_nodes`` (Slurm's ``--nodes MIN-MAX``) and ``min_available``
    tasks (Volcano's minAvailable) in whole nodes, the larger of the two; ``nodes`` for a rigid job."""
    least = nodes
    if sub.min_nodes is not None:
        least = parse_count(sub.min_nodes, "min_nodes", minimum=1, maximum=limits.max_nodes_per_job)
        if least > nodes:
            raise Rejection("min_nodes", f"{least} is above nodes {nodes}: the least nodes cannot exceed the most")
    if sub.min_available is not None:
        tasks = parse_count(sub.min_available, "min_available", minimum=1,
                            maximum=limits.max_nodes_per_job * MAX_TASKS_PER_NODE)
        if tasks > nodes * tasks_per_node:
            raise Rejection("min_available", f"{tasks} tasks is more than the gang's {nodes} x {tasks_per_node}")
        whole = -(-tasks // tasks_per_node)
        least = max(whole, sub.min_nodes or 0) if sub.min_nodes is not None else whole
    return least


def check_cpus_and_memory(sub: c.JobSubmitted, asked: Asked) -> Asked:
    """CPUs and memory requested (or neither: best-effort), and limits no lower than the requests;
    a job of ``--mem=0`` (Slurm: all of each node's memory) then counts none per task."""
    r = sub.resources
    cpus_milli, memory_bytes, cpu_limit = asked.cpus_milli, asked.memory_bytes, asked.cpu_limit
    # No requests at all (cpus 0, memory 0, no GPUs) is a best-effort job (services/domain/qos.py);
    # one of them 0 alone is a mistake far more often than a plan.
    best_effort = cpus_milli == 0 and asked.memory_given and memory_bytes == 0 and not sub.whole_node_memory
    if best_effort and (asked.gpus or sub.gpus_per_node):
        raise Rejection("resources.gpus", "a job that requests no CPUs and no memory is best-effort and may not "
                        "request GPUs; request CPUs and memory with them")
    if cpus_milli == 0 and not best_effort:
        raise Rejection("resources.cpus", "must be more than 0 (e.g. 1, 0.5, \"250m\"), or 0 together with "
                        "memory 0 for a best-effort job")
    if asked.memory_given and memory_bytes == 0 and not sub.whole_node_memory and not best_effort:
        raise Rejection("resources.memory", "must be more than 0 (e.g. \"512m\", \"8g\", \"16Gi\"), or 0 "
                        "together with cpus 0 for a best-effort job")
    if r.cpu_limit is not None and cpu_limit == 0:
        raise Rejection("resources.cpu_limit", "must be more than 0 (or left out: the request is the limit)")
    if r.memory_limit is not None and asked.memory_limit == 0:
        raise Rejection("resources.memory_limit", "must be more than 0 (or left out: the request is the limit)")
    if cpu_limit and sub.exclusive:
        raise Rejection("resources.cpu_limit", "an --exclusive job holds its nodes' CPUs: it has no CPU limit apart")
    if asked.memory_limit and sub.whole_node_memory:
        raise Rejection("resources.memory_limit", "a job of --mem=0 holds its nodes' memory: it has no memory limit "
                        "apart")
    if cpu_limit and cpu_limit < cpus_milli:
        raise Rejection("resources.cpu_limit", f"{format_cpus(cpu_limit)} is below the request of "
                        f"{format_cpus(cpus_milli)} CPUs; a limit is at least the request")
    if sub.whole_node_memory:  # all of each node's memory (Slurm's --mem=0): none counted per task
        return replace(asked, memory_bytes=0, memory_given=True)
    return asked


def with_gpus_per_node(sub: c.JobSubmitted, asked: Asked, limits: Limits) -> Asked:
    """The GPUs a node's tasks share (Slurm's ``--gres`` with tasks), and the job's total within the limit."""
    try:
        node_gpus = gpus_per_node(sub, asked.gpus, limits)
    except DirectiveRejection as exc:
        raise Rejection(exc.field, exc.reason) from None
    total_gpus = (node_gpus or asked.gpus * asked.tasks_per_node) * asked.nodes
    if total_gpus > limits.max_gpus_per_job:
        raise Rejection("resources.gpus", f"{total_gpus} GPUs in total is above the limit of {limits.max_gpus_per_job} per job")
    return asked if node_gpus == asked.node_gpus else replace(asked, node_gpus=node_gpus)


def check_durations_and_elasticity(sub: c.JobSubmitted, asked: Asked) -> None:
    """The time limit and the timeouts given are more than 0; an elastic job names no nodes."""
    if asked.time_limit <= 0:
        raise Rejection("time_limit_s", f"{sub.time_limit_s!r} must be more than 0 seconds")
    if asked.timeout is not None and asked.timeout <= 0:
        raise Rejection("scheduling_timeout_s", "must be more than 0 seconds, or omitted to wait forever")
    if asked.assembly is not None and asked.assembly <= 0:
        raise Rejection("assembly_timeout_s", "must be more than 0 seconds, or omitted to wait forever")
    if asked.least < asked.nodes and sub.nodelist:
        raise Rejection("min_nodes", "a job that names its nodes (--nodelist) runs on all of them: it cannot be "
                        "elastic")
    if asked.dep_timeout is not None and asked.dep_timeout <= 0:
        raise Rejection("dependency_timeout_s", "must be more than 0 seconds, or omitted to wait forever")


def check_tasks(sub: c.JobSubmitted, asked: Asked) -> None:
    """Slurm's ``--ntasks`` as the gang runs it: fewer tasks than its slots, at least one a node (a rigid
    gang), or tasks to spread over nodes submission chooses (``spread_tasks``, with ``memory_per_node``)."""
    if sub.memory_per_node is not None and not sub.spread_tasks:
        raise Rejection("memory_per_node", "goes with spread_tasks (the nodes' tasks are chosen later); with a "
                        "fixed shape give resources.memory per task")
    if sub.memory_per_node is not None and sub.resources.memory is not None:
        raise Rejection("memory_per_node", "and resources.memory exclude each other: give each node's memory or "
                        "each task's")
    if sub.spread_tasks:
        if not asked.ntasks:
            raise Rejection("ntasks", "spread_tasks needs the tasks to spread (ntasks)")
        if sub.min_nodes is not None or sub.min_available is not None or sub.nodelist:
            raise Rejection("spread_tasks", "the nodes of an elastic job, or of one that names its nodes, are its "
                            "own: give nodes and tasks_per_node")
        return
    if not asked.ntasks:
        return
    slots = asked.nodes * asked.tasks_per_node
    if asked.least < asked.nodes:
        raise Rejection("ntasks", "an elastic job runs tasks_per_node on each of its nodes, however many they are: "
                        "leave ntasks out")
    if asked.ntasks > slots:
        raise Rejection("ntasks", f"{asked.ntasks} tasks is more than the gang's {asked.nodes} x "
                        f"{asked.tasks_per_node}")
    if asked.ntasks < asked.nodes:
        raise Rejection("ntasks", f"{asked.ntasks} tasks cannot use {asked.nodes} nodes: every node runs at least "
                        "one (Slurm's sbatch sets the nodes to the tasks)")


def check_gpus(sub: c.JobSubmitted, asked: Asked, gpu_models: set[tuple[str, str | None]]) -> None:
    """A GPU model and GPU memory only with GPUs, and GPUs of a model the cluster has."""
    r = sub.resources
    if asked.model is None and (r.gpu_memory is not None) and asked.gpus == 0 and asked.node_gpus == 0:
        raise Rejection("resources.gpu_memory", "is set but no GPUs are requested")
    if asked.gpus > 0 or asked.node_gpus > 0:
        _check_gpu_model(asked.model, gpu_models)
    elif asked.model is not None:
        raise Rejection("resources.gpu_type", f"{r.gpu_type!r} is set but resources.gpus is 0")


def _check_gpu_model(model: GpuModel | None, gpu_models: set[tuple[str, str | None]]) -> None:
    if not gpu_models:
        raise Rejection("resources.gpus", "no node with GPUs is registered in this cluster")
    if model is None:
        return
    known = sorted({f"{t}-{v}" if v else t for t, v in gpu_models} | {t for t, _ in gpu_models})
    gpu_type, variant = model
    if not any(t == gpu_type and (variant is None or v == variant) for t, v in gpu_models):
        raise Rejection("resources.gpu_type", f"{str(model)!r} is not a GPU model of this cluster; known: {', '.join(known)}")


def check_final_limits(asked: Asked, limits: Limits) -> None:
    """With the partition's defaults: the memory limit at least the request, the time limit within the most."""
    memory_limit, memory_bytes, time_limit = asked.memory_limit, asked.memory_bytes, asked.time_limit
    if memory_limit and memory_limit < memory_bytes:
        raise Rejection("resources.memory_limit", f"{format_memory(memory_limit)} is below the request of "
                        f"{format_memory(memory_bytes)}; a limit is at least the request")
    if time_limit > limits.max_time_limit_s:
        raise Rejection("time_limit_s", f"{time_limit:g} s is above the maximum of {limits.max_time_limit_s:g} s")


def spec_fields(asked: Asked) -> dict[str, object]:
    """The spec's fields that come from what was asked and parsed (resources, shape, limits): one
    writer for the general spec (normalise._spec) and the common shape's (common_shape.common_spec)."""
    model = asked.model
    return dict(
        cpus_milli=asked.cpus_milli,
        memory_bytes=asked.memory_bytes,
        cpu_limit_milli=asked.cpu_limit if asked.cpu_limit > asked.cpus_milli else 0,
        memory_limit_bytes=asked.memory_limit if asked.memory_limit > asked.memory_bytes else 0,
        gpus=asked.gpus,
        gpu_type=model.type if model else None,
        gpu_variant=model.variant if model else None,
        gpu_memory_bytes=asked.gpu_memory,
        nodes=asked.nodes,
        min_nodes=asked.least if asked.least < asked.nodes else 0,
        assembly_timeout_s=asked.assembly,
        tasks_per_node=asked.tasks_per_node,
        ntasks=asked.ntasks if 0 < asked.ntasks < asked.nodes * asked.tasks_per_node else 0,
        time_limit_s=asked.time_limit,
        scheduling_timeout_s=asked.timeout,
        dependency_timeout_s=asked.dep_timeout,
    )
