"""Validation and normalisation of a ``JobSubmitted`` into a ``JobSpec``. Pure.

Every problem is a ``Rejection`` naming the field, what was wrong and what is
allowed, so ``JobRejected.reason`` can be shown to the person who submitted.

What needs the rest of the log (whether a dependency was rejected, whether it
would close a cycle, whether an array task's id is taken) is the core's part
(``services.submission.core``); this module looks at one submission alone,
against the cluster the core folded: the GPU models known (``gpu_models``)
and what the registered nodes could ever hold (``capacity``,
``services.submission.capacity``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from events import catalogue as c
from events.arrays import parse_array, task_id
from events.resources import (ResourceError, format_cpus, format_memory, parse_count, parse_cpus, parse_duration,
                              parse_gpu_model, parse_memory)
from events.subjects import ADMIN_TENANT, valid_token
from events.vocabulary import (IMAGE_PATTERN, MAX_CWD_LENGTH, MAX_RETRIES, MAX_TASKS_PER_NODE, NICE_LIMIT, OPEN_MODES,
                               TOLERATION_OPS, Limits)
from services.domain.datasets import check_datasets
from services.domain.output import pattern_problem
from services.domain.partitions import Partitions, default_memory, default_time, limit_problem
from services.submission.capacity import Capacity, Need
from services.submission.directives import DirectiveRejection, gpus_per_node, slurm_fields

__all__ = ["Limits", "Rejection", "Admission", "normalise", "admit", "admission", "class_limit_reason"]


MAX_PAYLOAD_DEPTH = 64  # arrays and objects within one another in a job's payload


def _depth(value: object) -> int:
    """How deep arrays and objects nest in ``value`` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


class Rejection(Exception):
    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


_size_encoder = msgspec.json.Encoder()
_IMAGE_RE = re.compile(IMAGE_PATTERN)


def _choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise Rejection(field, f"{value!r} is not one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True, slots=True)
class Admission:
    """The jobs one submission makes, as (job id, spec), and what its submitter should be told."""

    jobs: list[tuple[str, c.JobSpec]]
    warnings: tuple[str, ...] = ()


def normalise(
    sub: c.JobSubmitted,
    *,
    subject_tenant: str,
    gpu_models: set[tuple[str, str | None]],
    limits: Limits = Limits(),
    capacity: Capacity | None = None,
    partitions: Partitions | None = None,
    capacity_of: Callable[[str], Capacity] | None = None,
    warnings: list[str] | None = None,
    scope: str = "",
    features: Mapping[str, frozenset[str]] | None = None,
) -> c.JobSpec:
    """Return the validated spec, or raise ``Rejection``.

    For an array (``sub.array`` set) this is the template of its tasks:
    ``array`` is the submitted job id, ``array_max_running`` the ``%N``, and
    ``array_index`` is left unset (``admit`` makes the tasks).

    ``gpu_models``: the (type, variant) pairs the cluster has; a request for a
    type (and variant, if given) that no node has is rejected, since it could
    never run. An empty set means "no GPU nodes known": any GPU request is
    then rejected with that explanation.

    ``capacity``: the registered nodes; a job that not enough of them could
    ever hold (too many GPUs, CPUs or memory per node, too few nodes) is
    rejected naming the resource and the largest node's. None, or no node
    registered yet: not judged.

    ``partitions``: the cluster's partitions (``services.domain.partitions``;
    None: none defined). The job gets the first of the partitions it names
    (or the default one) that can run it, and that partition's defaults for
    the time limit and memory it did not give; ``capacity_of(partition)`` is
    what the partition's registered nodes offer (None: ``capacity`` for
    every partition). Warnings for the submitter (a partition name replaced
    by the default one) are appended to ``warnings``. ``scope``: the tenant
    whose own account a job naming none charges (a tenant's input under
    accounts), for a partition's allowed accounts.

    ``features``: the registered nodes and their features (``services.domain.features``), against
    which a ``constraint`` no node could ever satisfy, or a ``nodelist`` naming a node not registered,
    is refused (None: not judged). Slurm's other option
    forms and directives are ``services/submission/directives.py``'s.

    ``command``: a job runs a command, unless it is simulated
    (``sim_runtime_s``: the simulated executor runs nothing) or carries an
    opaque ``payload`` for an external executor (SPEC, section 3).
    """
    # 1. identity and tenancy
    if not valid_token(sub.job_id):
        raise Rejection("job_id", f"{sub.job_id!r} must be 1-128 letters, digits, '_' or '-'")
    if not valid_token(sub.tenant) or sub.tenant.startswith("_"):
        raise Rejection("tenant", f"{sub.tenant!r} must be 1-128 letters, digits, '_' or '-', not starting with '_'")
    if sub.tenant != subject_tenant:
        raise Rejection(
            "tenant", f"{sub.tenant!r} does not match the subject's tenant {subject_tenant!r}; "
            f"publish to horizon.in.{sub.tenant}.submit or fix the tenant"
        )
    for name in ("account", "user"):
        value = getattr(sub, name)
        if value and not valid_token(value):
            raise Rejection(name, f"{value!r} must be 1-128 letters, digits, '_' or '-'")
    if len(sub.name) > limits.max_name_length:
        raise Rejection("name", f"is {len(sub.name)} characters long; at most {limits.max_name_length}")
    if (not sub.command or not sub.command[0]) and sub.sim_runtime_s is None and sub.payload is None:
        raise Rejection("command", "is empty: give the command to run")
    depth = _depth(sub.payload)
    if depth > MAX_PAYLOAD_DEPTH:
        # What decoded here may not decode in a service whose stack is deeper when it reads the job: a
        # fixed bound, not the interpreter's recursion limit, decides.
        raise Rejection("payload", f"is nested {depth} deep; at most {MAX_PAYLOAD_DEPTH}")
    if sum(len(part) for part in sub.command) > limits.max_command_bytes:
        raise Rejection("command", f"is longer than {limits.max_command_bytes} bytes")
    if len(sub.env) > limits.max_env_entries:
        raise Rejection("env", f"has {len(sub.env)} entries; at most {limits.max_env_entries}")

    # 2. resources (ResourceError already names the field and the accepted forms)
    r = sub.resources
    memory_given = r.memory is not None  # None: the partition's default (or 1 GiB)
    time_given = sub.time_limit_s is not None
    try:
        cpus_milli = parse_cpus(r.cpus, "resources.cpus")
        memory_bytes = parse_memory(r.memory, "resources.memory") if r.memory is not None else 0
        gpus = parse_count(r.gpus, "resources.gpus", minimum=0, maximum=limits.max_gpus_per_job)
        gpu_memory = 0 if r.gpu_memory is None else parse_memory(r.gpu_memory, "resources.gpu_memory")
        nodes = parse_count(sub.nodes, "nodes", minimum=1, maximum=limits.max_nodes_per_job)
        tasks_per_node = parse_count(sub.tasks_per_node, "tasks_per_node", minimum=1, maximum=MAX_TASKS_PER_NODE)
        least = elastic_least(sub, nodes, tasks_per_node, limits)
        assembly = (None if sub.assembly_timeout_s is None
                    else parse_duration(sub.assembly_timeout_s, "assembly_timeout_s"))
        model = parse_gpu_model(r.gpu_type, "resources.gpu_type") if r.gpu_type else None
        time_limit = (
            limits.default_time_limit_s if sub.time_limit_s is None else parse_duration(sub.time_limit_s, "time_limit_s")
        )
        timeout = None if sub.scheduling_timeout_s is None else parse_duration(sub.scheduling_timeout_s, "scheduling_timeout_s")
        dep_timeout = (None if sub.dependency_timeout_s is None
                       else parse_duration(sub.dependency_timeout_s, "dependency_timeout_s"))
        min_runtime = parse_duration(sub.min_runtime_s, "min_runtime_s")
        max_retries = parse_count(sub.max_retries, "max_retries", minimum=0, maximum=MAX_RETRIES)
        cpu_limit = 0 if r.cpu_limit is None else parse_cpus(r.cpu_limit, "resources.cpu_limit")
        memory_limit = 0 if r.memory_limit is None else parse_memory(r.memory_limit, "resources.memory_limit")
    except ResourceError as exc:
        raise Rejection(exc.field, f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}") from None
    # No requests at all (cpus 0, memory 0, no GPUs) is a best-effort job (services/domain/qos.py);
    # one of them 0 alone is a mistake far more often than a plan.
    best_effort = cpus_milli == 0 and memory_given and memory_bytes == 0 and not sub.whole_node_memory
    if best_effort and (gpus or sub.gpus_per_node):
        raise Rejection("resources.gpus", "a job that requests no CPUs and no memory is best-effort and may not "
                        "request GPUs; request CPUs and memory with them")
    if cpus_milli == 0 and not best_effort:
        raise Rejection("resources.cpus", "must be more than 0 (e.g. 1, 0.5, \"250m\"), or 0 together with "
                        "memory 0 for a best-effort job")
    if memory_given and memory_bytes == 0 and not sub.whole_node_memory and not best_effort:
        raise Rejection("resources.memory", "must be more than 0 (e.g. \"512m\", \"8g\", \"16Gi\"), or 0 "
                        "together with cpus 0 for a best-effort job")
    if r.cpu_limit is not None and cpu_limit == 0:
        raise Rejection("resources.cpu_limit", "must be more than 0 (or left out: the request is the limit)")
    if r.memory_limit is not None and memory_limit == 0:
        raise Rejection("resources.memory_limit", "must be more than 0 (or left out: the request is the limit)")
    if cpu_limit and sub.exclusive:
        raise Rejection("resources.cpu_limit", "an --exclusive job holds its nodes' CPUs: it has no CPU limit apart")
    if memory_limit and sub.whole_node_memory:
        raise Rejection("resources.memory_limit", "a job of --mem=0 holds its nodes' memory: it has no memory limit "
                        "apart")
    if cpu_limit and cpu_limit < cpus_milli:
        raise Rejection("resources.cpu_limit", f"{format_cpus(cpu_limit)} is below the request of "
                        f"{format_cpus(cpus_milli)} CPUs; a limit is at least the request")
    if sub.whole_node_memory:  # all of each node's memory (Slurm's --mem=0): none counted per task
        memory_bytes, memory_given = 0, True
    try:
        node_gpus = gpus_per_node(sub, gpus, limits)  # GPUs a node's tasks share (Slurm's --gres with tasks)
    except DirectiveRejection as exc:
        raise Rejection(exc.field, exc.reason) from None
    total_gpus = (node_gpus or gpus * tasks_per_node) * nodes
    if total_gpus > limits.max_gpus_per_job:
        raise Rejection("resources.gpus", f"{total_gpus} GPUs in total is above the limit of {limits.max_gpus_per_job} per job")
    if time_limit <= 0:
        raise Rejection("time_limit_s", f"{sub.time_limit_s!r} must be more than 0 seconds")
    if timeout is not None and timeout <= 0:
        raise Rejection("scheduling_timeout_s", "must be more than 0 seconds, or omitted to wait forever")
    if assembly is not None and assembly <= 0:
        raise Rejection("assembly_timeout_s", "must be more than 0 seconds, or omitted to wait forever")
    if least < nodes and sub.nodelist:
        raise Rejection("min_nodes", "a job that names its nodes (--nodelist) runs on all of them: it cannot be "
                        "elastic")
    if dep_timeout is not None and dep_timeout <= 0:
        raise Rejection("dependency_timeout_s", "must be more than 0 seconds, or omitted to wait forever")
    if model is None and (r.gpu_memory is not None) and gpus == 0 and node_gpus == 0:
        raise Rejection("resources.gpu_memory", "is set but no GPUs are requested")
    if gpus > 0 or node_gpus > 0:
        _check_gpu_model(model, gpu_models)
    elif model is not None:
        raise Rejection("resources.gpu_type", f"{r.gpu_type!r} is set but resources.gpus is 0")
    # 2b. the partition: the first the job names (or the default) that can run it, with its defaults
    parts = partitions if partitions is not None else Partitions()
    for i, name in enumerate(sub.partitions):
        if name.strip() and not valid_token(name.strip()):
            raise Rejection(f"partitions[{i}]", f"{name[:200]!r} is not a partition name (1-128 letters, digits, '_' "
                            "or '-')")
    candidates = parts.candidates(sub.partitions)
    if candidates.problem is not None:
        raise Rejection(*candidates.problem)
    account = sub.account or c.DEFAULT_ACCOUNT
    if scope and account == c.DEFAULT_ACCOUNT:
        account = scope  # the account its job will charge (intake_rules.scoped_spec)

    def need(memory: int) -> Need:
        return Need(cpus_milli, memory, gpus, model.type if model else None, model.variant if model else None,
                    gpu_memory, least, tasks_per_node, gpus_per_node=node_gpus)  # an elastic job needs its least

    partition = ""
    if candidates.none_defined:
        if not time_given:
            time_limit = limits.default_time_limit_s
        if not memory_given:
            memory_bytes = default_memory(None, cpus_milli, gpus)
        problem = capacity.problem(need(memory_bytes)) if capacity is not None else None
        if problem is not None:  # what no registered node could ever hold would wait for ever
            raise Rejection(*problem)
        if candidates.unknown and warnings is not None:
            warnings.append(f"partition {', '.join(repr(n) for n in candidates.unknown)} is not defined here (this "
                            "cluster defines no partitions); the job runs on any node")
    else:
        refused: list[tuple[str, str, str]] = []  # (partition, field, reason)
        for name in candidates.names:
            cfg = parts.configs[name]
            t = time_limit if time_given else default_time(cfg, limits.default_time_limit_s)
            m = memory_bytes if memory_given else default_memory(cfg, cpus_milli, gpus)
            problem = limit_problem(cfg, time_limit_s=t, time_given=time_given, nodes=least, account=account,
                                    qos=sub.qos)
            if problem is None and capacity is not None:
                nodes_of = capacity_of(name) if capacity_of is not None else capacity
                problem = nodes_of.problem(need(m))
                if problem is not None and len(nodes_of.nodes) < len(capacity.nodes):
                    count = len(nodes_of.nodes)
                    problem = (problem[0], f"partition {name!r} ({count} {'node' if count == 1 else 'nodes'}): "
                                           f"{problem[1]}")
            if problem is None:
                partition, time_limit, memory_bytes = name, t, m
                if cfg.max_nodes is not None and nodes > cfg.max_nodes:  # an elastic job's most, cut to MaxNodes
                    nodes = cfg.max_nodes
                    if warnings is not None:
                        warnings.append(f"at most {nodes} nodes in partition {name!r} (MaxNodes): the job grows "
                                        f"to {nodes}, not to {sub.nodes}")
                break
            refused.append((name, *problem))
        if not partition:
            if len(refused) == 1:
                raise Rejection(refused[0][1], refused[0][2])
            raise Rejection("partitions", "no partition of " + ",".join(n for n, _, _ in refused) + " can run it: "
                            + "; ".join(f"{field}: {reason}" for _, field, reason in refused))
        if warnings is not None:
            if candidates.unknown:
                warnings.append(f"partition {', '.join(repr(n) for n in candidates.unknown)} is not defined here; "
                                f"the job runs in {partition!r}")
            if parts.configs[partition].state == "down":
                warnings.append(f"partition {partition!r} is down: the job waits until an operator brings it up")
    if memory_limit and memory_limit < memory_bytes:
        raise Rejection("resources.memory_limit", f"{format_memory(memory_limit)} is below the request of "
                        f"{format_memory(memory_bytes)}; a limit is at least the request")
    if time_limit > limits.max_time_limit_s:
        raise Rejection("time_limit_s", f"{time_limit:g} s is above the maximum of {limits.max_time_limit_s:g} s")
    try:  # Slurm's option forms and directives (services/submission/directives.py)
        directives = slurm_fields(sub, nodes=nodes, time_limit_s=time_limit, features=features)
    except DirectiveRejection as exc:
        raise Rejection(exc.field, exc.reason) from None

    # 3. policy fields
    priority_class = _choice(sub.priority_class, c.PRIORITY_CLASSES, "priority_class")
    restart_policy = _choice(sub.restart_policy, c.RESTART_POLICIES, "restart_policy")
    if not -NICE_LIMIT <= sub.nice <= NICE_LIMIT:
        raise Rejection("nice", f"{sub.nice} is outside -{NICE_LIMIT}..{NICE_LIMIT}")
    if sub.nice < 0 and subject_tenant != ADMIN_TENANT:
        # A negative nice raises the job's priority (it is subtracted), which only operators may
        # do, as in Slurm; otherwise any tenant could jump its class by up to 10,000.
        raise Rejection("nice", f"only an operator may set a negative nice; {sub.nice} would raise the job's "
                        "priority. Submit with nice 0 or more (higher is lower priority) and ask an operator "
                        "to lower it (horizon update --admin, on horizon.in._admin.update)")
    for i, name in enumerate(sub.after_datasets):
        if not valid_token(name):
            raise Rejection(f"after_datasets[{i}]", f"{name!r} is not a dataset name (letters, digits, ._-)")
    for i, dep in enumerate(sub.dependencies):
        _choice(dep.kind, c.DEPENDENCY_KINDS, f"dependencies[{i}].kind")
        if not valid_token(dep.job_id):
            raise Rejection(f"dependencies[{i}].job_id", f"{dep.job_id!r} is not a job id")
        if dep.job_id == sub.job_id:
            raise Rejection(f"dependencies[{i}].job_id", "a job cannot depend on itself")
    # 4. array: Slurm's --array, tasks <job_id>_<index>
    array = None
    if sub.array is not None:
        try:
            array = parse_array(sub.array, "array", max_tasks=limits.max_array_tasks)
        except ResourceError as exc:
            raise Rejection(exc.field, f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}") from None
        longest = task_id(sub.job_id, array.indices[-1])
        if not valid_token(longest):
            raise Rejection("array", f"task ids such as {longest!r} would be longer than 128 characters; "
                            f"use a shorter job id or smaller indices")
        own = {task_id(sub.job_id, i) for i in array.indices}
        for i, dep in enumerate(sub.dependencies):
            if dep.job_id in own:
                raise Rejection(f"dependencies[{i}].job_id", f"{dep.job_id!r} is a task of this array; "
                                "an array cannot depend on its own tasks")
    for i, tol in enumerate(sub.tolerations):
        if tol.effect and tol.effect not in c.TAINT_EFFECTS:
            raise Rejection(f"tolerations[{i}].effect", f"{tol.effect!r} is not one of {', '.join(c.TAINT_EFFECTS)}")
        _choice(tol.operator, TOLERATION_OPS, f"tolerations[{i}].operator")
    if sub.sim_runtime_s is not None and not (sub.sim_runtime_s >= 0):
        raise Rejection("sim_runtime_s", "must be 0 or more seconds")
    # 5. where and how it runs
    if sub.cwd and (not sub.cwd.startswith("/") or "\x00" in sub.cwd or len(sub.cwd) > MAX_CWD_LENGTH):
        raise Rejection("cwd", f"{sub.cwd[:200]!r} must be an absolute path (horizon submit sends the directory it "
                        "runs in; --chdir changes it)")
    for name in ("stdout", "stderr"):
        problem = pattern_problem(getattr(sub, name))
        if problem is not None:
            raise Rejection(name, f"{getattr(sub, name)[:200]!r}: {problem}")
    _choice(sub.open_mode, OPEN_MODES, "open_mode")
    if sub.image and not _IMAGE_RE.fullmatch(sub.image):
        raise Rejection("image", f"{sub.image[:200]!r} is not an image reference (e.g. localhost/busybox:latest, "
                        "docker.io/library/python:3.12)")
    why = check_datasets(sub.datasets, empty_ok=True)
    if why:
        raise Rejection("datasets", why.removeprefix("datasets: "))

    spec = c.JobSpec(
        tenant=sub.tenant,
        account=sub.account or "default",
        user=sub.user,
        name=sub.name or sub.job_id,
        command=tuple(sub.command),
        env=dict(sub.env),
        payload=sub.payload,
        cpus_milli=cpus_milli,
        memory_bytes=memory_bytes,
        cpu_limit_milli=cpu_limit if cpu_limit > cpus_milli else 0,
        memory_limit_bytes=memory_limit if memory_limit > memory_bytes else 0,
        gpus=gpus,
        gpu_type=model.type if model else None,
        gpu_variant=model.variant if model else None,
        gpu_memory_bytes=gpu_memory,
        nodes=nodes,
        min_nodes=least if least < nodes else 0,
        assembly_timeout_s=assembly,
        tasks_per_node=tasks_per_node,
        time_limit_s=time_limit,
        scheduling_timeout_s=timeout,
        dependency_timeout_s=dep_timeout,
        after_datasets=tuple(sorted(set(sub.after_datasets))),
        priority_class=priority_class,  # type: ignore[arg-type]
        nice=sub.nice,
        qos=sub.qos,
        profile=_profile(sub.profile, parts.configs[partition].profile if partition else ""),
        partition=partition,
        dependencies=tuple(sub.dependencies),
        array=sub.job_id if array is not None else None,
        array_max_running=array.max_running if array is not None else 0,
        node_selector=dict(sub.node_selector),
        affinity=sub.affinity,
        tolerations=tuple(sub.tolerations),
        restart_policy=restart_policy,  # type: ignore[arg-type]
        max_retries=max_retries,
        preemptible=sub.preemptible,
        min_runtime_s=min_runtime,
        checkpoint_signal=sub.checkpoint_signal,
        labels=dict(sub.labels),
        sim_runtime_s=sub.sim_runtime_s,
        sim_exit_code=sub.sim_exit_code,
        cwd=sub.cwd,
        stdout=sub.stdout,
        stderr=sub.stderr,
        open_mode=sub.open_mode,
        image=sub.image,
        gpus_per_node=node_gpus,
        datasets=tuple(sorted(set(sub.datasets))),
        **directives,
    )
    # 6. size: what the job costs to carry (encoding is deterministic, so is this check)
    size = len(_size_encoder.encode(spec))
    if size > limits.max_spec_bytes:
        raise Rejection("job", f"is {size:,} bytes as accepted; at most {limits.max_spec_bytes:,}: shorten its "
                        "env, labels, node selector, payload or command")
    if array is not None and size * len(array.indices) > limits.max_array_bytes:
        raise Rejection("array", f"{len(array.indices):,} tasks of {size:,} bytes each is more than "
                        f"{limits.max_array_bytes:,} bytes; use fewer tasks or a smaller job")
    return spec


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


def admission(
    sub: c.JobSubmitted,
    *,
    subject_tenant: str,
    gpu_models: set[tuple[str, str | None]],
    limits: Limits = Limits(),
    capacity: Capacity | None = None,
    partitions: Partitions | None = None,
    capacity_of: Callable[[str], Capacity] | None = None,
    scope: str = "",
    features: Mapping[str, frozenset[str]] | None = None,
) -> Admission:
    """The jobs one submission makes, as (job id, spec): the job itself, or each task of an array
    in index order; and the warnings for its submitter. Raises ``Rejection`` like ``normalise``
    (which judges the submission once, not per task)."""
    warnings: list[str] = []
    spec = normalise(sub, subject_tenant=subject_tenant, gpu_models=gpu_models, limits=limits, capacity=capacity,
                     partitions=partitions, capacity_of=capacity_of, warnings=warnings, scope=scope,
                     features=features)
    if spec.array is None:
        return Admission([(sub.job_id, spec)], tuple(warnings))
    indices = parse_array(sub.array, "array", max_tasks=limits.max_array_tasks).indices  # valid: normalise checked it
    return Admission([(task_id(sub.job_id, i), spec_replace(spec, array_index=i)) for i in indices], tuple(warnings))


def admit(
    sub: c.JobSubmitted,
    *,
    subject_tenant: str,
    gpu_models: set[tuple[str, str | None]],
    limits: Limits = Limits(),
    capacity: Capacity | None = None,
    partitions: Partitions | None = None,
    features: Mapping[str, frozenset[str]] | None = None,
) -> list[tuple[str, c.JobSpec]]:
    """``admission``'s jobs alone."""
    return admission(sub, subject_tenant=subject_tenant, gpu_models=gpu_models, limits=limits, capacity=capacity,
                     partitions=partitions, features=features).jobs


def _profile(asked: str, of_partition: str) -> str:
    """The placement profile of a job: its own, else its partition's, else ``default``."""
    if asked and asked != "default":
        return asked
    return of_partition or "default"


def class_limit_reason(priority_class: str, limit: tuple[str, str] | None) -> str | None:
    """Why a tenant may not give a job ``priority_class``, or None.

    ``limit`` is (account, class): the strictest ``max_priority_class`` an operator set on the
    job's account or an account above it (``SubmissionState.class_limit``), or None for no limit.
    A class is above the limit when it ranks before it in ``PRIORITY_CLASSES``.
    """
    if limit is None or priority_class not in c.PRIORITY_CLASSES:
        return None
    account, highest = limit
    ranks = c.PRIORITY_CLASSES
    if ranks.index(priority_class) >= ranks.index(highest):
        return None
    allowed = ", ".join(ranks[ranks.index(highest):])
    return (f"{priority_class!r} is above {highest!r}, the highest class account {account!r} allows its jobs; "
            f"use one of {allowed}, or ask an operator (horizon update --admin, or horizon account set "
            f"{account} --max-priority-class)")


def _check_gpu_model(model: object, gpu_models: set[tuple[str, str | None]]) -> None:
    if not gpu_models:
        raise Rejection("resources.gpus", "no node with GPUs is registered in this cluster")
    if model is None:
        return
    known = sorted({f"{t}-{v}" if v else t for t, v in gpu_models} | {t for t, _ in gpu_models})
    gpu_type, variant = model  # type: ignore[misc]
    if not any(t == gpu_type and (variant is None or v == variant) for t, v in gpu_models):
        raise Rejection("resources.gpu_type", f"{str(model)!r} is not a GPU model of this cluster; known: {', '.join(known)}")


def spec_replace(spec: c.JobSpec, **changes: object) -> c.JobSpec:
    return msgspec.structs.replace(spec, **changes)
