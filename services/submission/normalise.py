"""Validation and normalisation of a ``JobSubmitted`` into a ``JobSpec``. Pure.

Every problem is a ``Rejection`` (``services.submission.rejection``) naming the field, what was
wrong and what is allowed, so ``JobRejected.reason`` can be shown to the person who submitted.
``normalise`` is a sequence of named steps, each raising the first problem it finds: identity and
sizes, then what the job asks for (``services.submission.asked``), its partition
(``services.submission.partition_choice``), Slurm's directives, policy fields, the array, where it
runs, and what the accepted spec costs to carry.

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

import msgspec

from events import catalogue as c
from events.arrays import ArraySpec, parse_array, task_id
from events.resources import ResourceError
from events.subjects import ADMIN_TENANT, valid_token
from events.vocabulary import IMAGE_PATTERN, MAX_CWD_LENGTH, NICE_LIMIT, OPEN_MODES, TOLERATION_OPS, Limits
from services.domain.datasets import check_datasets
from services.domain.licenses import Licenses, request_problem
from services.domain.output import pattern_problem
from services.domain.partitions import Partitions
from services.submission.asked import (Asked, spec_fields, check_cpus_and_memory, check_durations_and_elasticity,
                                       check_final_limits, check_gpus, check_tasks, elastic_least, parse_asked,
                                       with_gpus_per_node)
from services.submission.capacity import Capacity
from services.submission.common_shape import common_spec, is_common
from services.submission.components import normalise_components
from services.submission.directives import DirectiveRejection, slurm_fields
from services.submission.partition_choice import choose_partition
from services.submission.rejection import Rejection, choice

__all__ = ["Limits", "Rejection", "Admission", "normalise", "admit", "admission", "class_limit_reason",
           "elastic_least"]


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


_size_encoder = msgspec.json.Encoder()
_IMAGE_RE = re.compile(IMAGE_PATTERN)


class Admission(msgspec.Struct, frozen=True):
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
    licenses: Licenses | None = None,
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
    is refused (None: not judged). ``licenses``: the licenses the operator defined
    (``services.domain.licenses``); a job naming one that is not, or more than its total, is refused
    (None: not judged; the names and counts are checked anyway). Slurm's other option
    forms and directives are ``services/submission/directives.py``'s.

    ``command``: a job runs a command, unless it is simulated
    (``sim_runtime_s``: the simulated executor runs nothing) or carries an
    opaque ``payload`` for an external executor (SPEC, section 3).

    The steps run in this order, each raising the first problem it finds, so a submission with
    several problems is told the same one every time.
    """
    # The common shape (common_shape.py): no directives, array, files, image or datasets to judge
    common = is_common(sub)
    # 1. identity and tenancy, and what the job carries
    _check_identity(sub, subject_tenant)
    _check_sizes(sub, limits)
    # 2. resources
    asked = parse_asked(sub, limits)
    asked = check_cpus_and_memory(sub, asked)
    asked = with_gpus_per_node(sub, asked, limits)
    check_durations_and_elasticity(sub, asked)
    check_tasks(sub, asked)
    check_gpus(sub, asked, gpu_models)
    # 2b. the partition: the first the job names (or the default) that can run it, with its defaults
    parts = partitions if partitions is not None else Partitions()
    partition, asked = choose_partition(sub, asked, parts, limits=limits, capacity=capacity,
                                        capacity_of=capacity_of, warnings=warnings, scope=scope)
    check_final_limits(asked, limits)
    directives = {} if common else _slurm_directives(sub, asked, features)
    # 3. policy fields
    priority_class, restart_policy = _check_policy(sub, subject_tenant)
    _check_licenses(sub, licenses)
    # 4. array: Slurm's --array, tasks <job_id>_<index>; tolerations; a simulated run time
    array = _parse_array(sub, limits)
    _check_tolerations(sub)
    _check_sim_runtime(sub)
    # 5. where and how it runs
    if common:
        _check_cwd(sub)
        spec = common_spec(sub, asked, partition, parts, priority_class)
    else:
        _check_files_and_image(sub)
        spec = _spec(sub, asked, partition, parts, array, priority_class, restart_policy, directives)
    if sub.components:  # 5b. a heterogeneous job: each other component judged as the job with its shape
        held = capacity_of(partition) if capacity_of is not None and partition else capacity
        spec = spec_replace(spec, components=normalise_components(sub, spec, limits, lambda one: normalise(
            one, subject_tenant=subject_tenant, gpu_models=gpu_models, limits=limits, capacity=capacity,
            partitions=partitions, capacity_of=capacity_of, warnings=[], scope=scope, features=features),
            registered=sum(n for _, n in held.sorted_shapes()) if held is not None else 0))
    # 6. size: what the job costs to carry (encoding is deterministic, so is this check)
    _check_size(spec, array, limits)
    return spec


def _check_identity(sub: c.JobSubmitted, subject_tenant: str) -> None:
    """The job id, the tenant (the subject's own) and the account and user are well-formed names."""
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


def _check_sizes(sub: c.JobSubmitted, limits: Limits) -> None:
    """A name, a command (or a payload, or a simulated run) and an environment within their bounds."""
    if len(sub.name) > limits.max_name_length:
        raise Rejection("name", f"is {len(sub.name)} characters long; at most {limits.max_name_length}")
    if (not sub.command or not sub.command[0]) and sub.sim_runtime_s is None and sub.payload is None:
        raise Rejection("command", "is empty: give the command to run")
    depth = _depth(sub.payload) if sub.payload is not None else 0
    if depth > MAX_PAYLOAD_DEPTH:
        # What decoded here may not decode in a service whose stack is deeper when it reads the job: a
        # fixed bound, not the interpreter's recursion limit, decides.
        raise Rejection("payload", f"is nested {depth} deep; at most {MAX_PAYLOAD_DEPTH}")
    if sum(map(len, sub.command)) > limits.max_command_bytes:
        raise Rejection("command", f"is longer than {limits.max_command_bytes} bytes")
    if len(sub.env) > limits.max_env_entries:
        raise Rejection("env", f"has {len(sub.env)} entries; at most {limits.max_env_entries}")
    if sub.submit_env is not None and len(sub.submit_env) > limits.max_env_entries:
        raise Rejection("submit_env", f"the submitting environment has {len(sub.submit_env)} variables; at most "
                                      f"{limits.max_env_entries} (sbatch --export=NONE, or --export=VAR,..., sends "
                                      "fewer)")


def _slurm_directives(sub: c.JobSubmitted, asked: Asked,
                     features: Mapping[str, frozenset[str]] | None) -> dict[str, object]:
    """Slurm's option forms and directives (``services/submission/directives.py``), as spec fields."""
    try:
        return slurm_fields(sub, nodes=asked.nodes, time_limit_s=asked.time_limit, features=features)
    except DirectiveRejection as exc:
        raise Rejection(exc.field, exc.reason) from None


def _check_policy(sub: c.JobSubmitted, subject_tenant: str) -> tuple[str, str]:
    """The priority class and restart policy (returned), the nice (negative: operators' only), the
    datasets waited for and the dependencies."""
    priority_class = choice(sub.priority_class, c.PRIORITY_CLASSES, "priority_class")
    restart_policy = choice(sub.restart_policy, c.RESTART_POLICIES, "restart_policy")
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
        choice(dep.kind, c.DEPENDENCY_KINDS, f"dependencies[{i}].kind")
        if not valid_token(dep.job_id):
            raise Rejection(f"dependencies[{i}].job_id", f"{dep.job_id!r} is not a job id")
        if dep.job_id == sub.job_id:
            raise Rejection(f"dependencies[{i}].job_id", "a job cannot depend on itself")
    return priority_class, restart_policy


def _check_licenses(sub: c.JobSubmitted, licenses: Licenses | None) -> None:
    """The licenses it asks for are well formed and, when the cluster's are known, defined and no more
    than there are (more could never start: Slurm refuses it at submission too)."""
    if not sub.licenses:
        return
    why = request_problem(sub.licenses) or (licenses.problem(sub.licenses) if licenses is not None else None)
    if why is not None:
        raise Rejection("licenses", why)


def _parse_array(sub: c.JobSubmitted, limits: Limits) -> ArraySpec | None:
    """Slurm's ``--array`` parsed (None: not an array), with task ids that are valid and that none of
    the job's dependencies names."""
    if sub.array is None:
        return None
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
    return array


def _check_tolerations(sub: c.JobSubmitted) -> None:
    """Each toleration's effect and operator are known ones."""
    for i, tol in enumerate(sub.tolerations):
        if tol.effect and tol.effect not in c.TAINT_EFFECTS:
            raise Rejection(f"tolerations[{i}].effect", f"{tol.effect!r} is not one of {', '.join(c.TAINT_EFFECTS)}")
        choice(tol.operator, TOLERATION_OPS, f"tolerations[{i}].operator")


def _check_sim_runtime(sub: c.JobSubmitted) -> None:
    """A simulated run time is 0 or more seconds."""
    if sub.sim_runtime_s is not None and not (sub.sim_runtime_s >= 0):
        raise Rejection("sim_runtime_s", "must be 0 or more seconds")


def _check_cwd(sub: c.JobSubmitted) -> None:
    """An absolute working directory, or none."""
    if sub.cwd and (not sub.cwd.startswith("/") or "\x00" in sub.cwd or len(sub.cwd) > MAX_CWD_LENGTH):
        raise Rejection("cwd", f"{sub.cwd[:200]!r} must be an absolute path (horizon submit sends the directory it "
                        "runs in; --chdir changes it)")


def _check_files_and_image(sub: c.JobSubmitted) -> None:
    """Where and how it runs: an absolute working directory, output patterns, the open mode, the
    container image and the datasets."""
    _check_cwd(sub)
    for name in ("stdout", "stderr"):
        problem = pattern_problem(getattr(sub, name))
        if problem is not None:
            raise Rejection(name, f"{getattr(sub, name)[:200]!r}: {problem}")
    choice(sub.open_mode, OPEN_MODES, "open_mode")
    if sub.image and not _IMAGE_RE.fullmatch(sub.image):
        raise Rejection("image", f"{sub.image[:200]!r} is not an image reference (e.g. localhost/busybox:latest, "
                        "docker.io/library/python:3.12)")
    why = check_datasets(sub.datasets, empty_ok=True)
    if why:
        raise Rejection("datasets", why.removeprefix("datasets: "))


def _spec(sub: c.JobSubmitted, asked: Asked, partition: str, parts: Partitions, array: ArraySpec | None,
          priority_class: str, restart_policy: str, directives: dict[str, object]) -> c.JobSpec:
    """The accepted spec: the submission as checked, with what its steps parsed and chose."""
    return c.JobSpec(
        tenant=sub.tenant,
        account=sub.account or "default",
        user=sub.user,
        name=sub.name or sub.job_id,
        command=tuple(sub.command),
        env=dict(sub.env),
        submit_env=dict(sub.submit_env) if sub.submit_env is not None else None,
        payload=sub.payload,
        **spec_fields(asked),
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
        max_retries=asked.max_retries,
        preemptible=sub.preemptible,
        min_runtime_s=asked.min_runtime,
        checkpoint_signal=sub.checkpoint_signal,
        labels=dict(sub.labels),
        sim_runtime_s=sub.sim_runtime_s,
        sim_exit_code=sub.sim_exit_code,
        cwd=sub.cwd,
        stdout=sub.stdout,
        stderr=sub.stderr,
        open_mode=sub.open_mode,
        image=sub.image,
        gpus_per_node=asked.node_gpus,
        datasets=tuple(sorted(set(sub.datasets))),
        licenses=dict(sorted(sub.licenses.items())),
        **directives,  # type: ignore[arg-type]
    )


def _check_size(spec: c.JobSpec, array: ArraySpec | None, limits: Limits) -> None:
    """What the job costs to carry, as accepted (and for an array, all its tasks) within the limits."""
    size = len(_size_encoder.encode(spec))
    carried = len(_size_encoder.encode(spec.submit_env)) if spec.submit_env else 0
    # sbatch copies the submitting shell's environment by default: say so when that is what weighs
    hint = (f" (its submitting environment is {carried:,} of them: sbatch --export=NONE, or --export=VAR,..., "
            "carries less)") if carried * 2 > size else ""
    if size > limits.max_spec_bytes:
        raise Rejection("job", f"is {size:,} bytes as accepted; at most {limits.max_spec_bytes:,}: shorten its "
                        f"env, labels, node selector, payload or command{hint}")
    if array is not None and size * len(array.indices) > limits.max_array_bytes:
        raise Rejection("array", f"{len(array.indices):,} tasks of {size:,} bytes each is more than "
                        f"{limits.max_array_bytes:,} bytes; use fewer tasks or a smaller job{hint}")


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
    licenses: Licenses | None = None,
) -> Admission:
    """The jobs one submission makes, as (job id, spec): the job itself, or each task of an array
    in index order; and the warnings for its submitter. Raises ``Rejection`` like ``normalise``
    (which judges the submission once, not per task)."""
    warnings: list[str] = []
    spec = normalise(sub, subject_tenant=subject_tenant, gpu_models=gpu_models, limits=limits, capacity=capacity,
                     partitions=partitions, capacity_of=capacity_of, warnings=warnings, scope=scope,
                     features=features, licenses=licenses)
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


def spec_replace(spec: c.JobSpec, **changes: object) -> c.JobSpec:
    return msgspec.structs.replace(spec, **changes)
