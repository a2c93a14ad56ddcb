"""``horizon submit -- CMD``: a job (or an array) from command-line options, as a ``JobSubmitted``.

The options come in groups (``services/front/cli/submit_options.py``), each decoded into a small
dataclass; ``job_submitted`` checks what the CLI can check alone, with the messages the submission
service would give, and makes the job; the rest is the service's verdict, which
``services/front/client/submitter.py`` waits for.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

import click

from events import catalogue as c
from events.arrays import parse_array
from events.resources import parse_cpus, parse_duration, parse_gpu_model, parse_memory
from services.domain.output import pattern_problem
from services.front.cli.options import nats_option, tenant_option
from services.front.cli.submit_options import (
    Environment,
    Gang,
    Identity,
    Lifecycle,
    Placement,
    Resources,
    Runtime,
    SlurmOrder,
    environment_options,
    gang_options,
    identity_options,
    lifecycle_options,
    parse_node_range,
    placement_options,
    resource_options,
    runtime_options,
    slurm_order_options,
)
from services.front.client.submitter import (check_lines, check_submission, new_job_id, refuse_rejected,
                                             send_submission, warning_lines)
from services.front.slurm.slurm_values import (Problem, parse_checkpoint_signal, parse_dependency_list, slurm_begin,
                                               split_datasets)
from services.front.slurm.sbatch_values import license_list

__all__ = ["submit", "job_submitted", "register"]


@click.command(context_settings={"ignore_unknown_options": False})
@nats_option
@tenant_option
@identity_options
@resource_options
@gang_options
@lifecycle_options
@slurm_order_options
@environment_options
@placement_options
@runtime_options
@click.option("--no-wait", is_flag=True, help="Do not wait for acceptance.")
@click.option("--check", is_flag=True, help="Only ask a submission instance whether the job would be accepted "
                                           "(the validation queue group); submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"job_id\": …, \"state\": …} as JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(nats_url: str, tenant: str, identity: Identity, resources: Resources, gang: Gang, lifecycle: Lifecycle,
           slurm: SlurmOrder, environment: Environment, placement: Placement, runtime: Runtime, no_wait: bool,
           check: bool, as_json: bool, command: tuple[str, ...]) -> None:
    """Submit a job: horizon submit --gpus 2 -- python train.py"""
    event = job_submitted(tenant, identity, resources, gang, lifecycle, slurm, environment, placement, runtime,
                          command)
    job_id = event.job_id
    if check:
        verdict = check_submission(nats_url, event)
        out, err = check_lines(verdict, job_id, as_json)
        for line in out:
            click.echo(line)
        for line in err:
            click.echo(line, err=True)
        refuse_rejected(verdict, job_id)
        return
    result = send_submission(nats_url, event, no_wait=no_wait)
    for line in warning_lines(result, "horizon submit"):
        click.echo(line, err=True)
    if as_json:
        click.echo(json.dumps(result))
    elif result["state"] != "REJECTED" and (no_wait or result["state"] != "SUBMITTED"):
        click.echo(job_id)
    if result["state"] == "REJECTED":
        raise click.ClickException(f"job {job_id} rejected: {result['reason']}")
    if result["state"] == "SUBMITTED" and not no_wait:
        raise click.ClickException(f"job {job_id}: {result['reason']}")


# --------------------------------------------------------------------------
# From the groups to a JobSubmitted
# --------------------------------------------------------------------------


def _key_values(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


def _dependencies(text: str) -> tuple[list[c.Dependency], bool]:
    """``--dependency``, read by the one Slurm dependency parser that ``horizon sbatch`` uses too: the
    dependencies on jobs, and whether ``singleton`` was among them."""
    try:
        return parse_dependency_list(text)
    except Problem as exc:
        raise click.BadParameter(str(exc), param_hint="--dependency") from None


def _toleration(text: str) -> c.Toleration:
    body, _, effect = text.partition(":")
    key, sep, value = body.partition("=")
    if not key:
        raise click.BadParameter(f"{text!r}: give KEY, KEY=VALUE, KEY:EFFECT or KEY=VALUE:EFFECT",
                                 param_hint="--toleration")
    if effect and effect not in c.TAINT_EFFECTS:
        raise click.BadParameter(f"{effect!r} is not one of {', '.join(c.TAINT_EFFECTS)}", param_hint="--toleration")
    return c.Toleration(key=key, operator="Equal" if sep else "Exists", value=value, effect=effect)


def _check_resources(r: Resources) -> None:
    parse_cpus(r.cpus, "--cpus")
    if r.memory is not None:
        parse_memory(r.memory, "--mem")
    if r.cpu_limit is not None:
        parse_cpus(r.cpu_limit, "--cpu-limit")
    if r.memory_limit is not None:
        parse_memory(r.memory_limit, "--mem-limit")


def _partitions(partition: str | None) -> list[str]:
    partitions = [p.strip() for p in partition.split(",") if p.strip()] if partition else []
    if partition is not None and not partitions:
        raise click.BadParameter("is empty: name a partition, or several as a,b", param_hint="--partition")
    return partitions


def _check_output(run: Runtime) -> None:
    for flag, pattern in (("--output", run.output), ("--error", run.error)):
        problem = pattern_problem(pattern) if pattern else None
        if problem is not None:
            raise click.BadParameter(f"{pattern!r}: {problem}", param_hint=flag)


def _signals(checkpoint: str | None) -> tuple[str | None, c.LimitSignal | None]:
    """``--checkpoint-signal``: the checkpoint signal, and the signal before the time limit (``@SECONDS``)."""
    if checkpoint is None:
        return None, None
    try:
        return parse_checkpoint_signal(checkpoint)
    except Problem as exc:
        raise click.BadParameter(str(exc), param_hint="--checkpoint-signal") from None


def _deadline(deadline: str | None) -> float | None:
    if deadline is None:
        return None
    try:
        return slurm_begin(deadline, datetime.now().astimezone())
    except Problem as exc:
        raise click.BadParameter(str(exc), param_hint="--deadline") from None


def _seconds(text: str | None, flag: str) -> float | None:
    return parse_duration(text, flag) if text else None


def job_submitted(tenant: str, identity: Identity, resources: Resources, gang: Gang, lifecycle: Lifecycle,
                  slurm: SlurmOrder, environment: Environment, placement: Placement, run: Runtime,
                  command: tuple[str, ...]) -> c.JobSubmitted:
    """The job the options describe, checked first as far as the CLI can alone (in this order, so the
    first bad option is the one named)."""
    _check_resources(resources)
    partitions = _partitions(placement.partition)
    if resources.gpu_type:
        parse_gpu_model(resources.gpu_type, "--gpu-type")
    if resources.gpu_memory:
        parse_memory(resources.gpu_memory, "--gpu-memory")
    if not command and run.sim_runtime is None:
        raise click.UsageError("give the command to run after --, e.g. horizon submit -- python train.py "
                               "(a simulated job takes --sim-runtime instead)")
    cwd = os.path.normpath(os.path.join(os.getcwd(), os.path.expanduser(run.chdir))) if run.chdir else os.getcwd()
    _check_output(run)
    if slurm.array is not None:
        parse_array(slurm.array, "--array")  # a bad range is a usage error here, before anything is sent
    min_nodes, nodes = parse_node_range(gang.node_range)
    job_id = identity.job_id or new_job_id(identity.user)
    dependencies, singleton = _dependencies(slurm.dependency) if slurm.dependency else ([], False)
    dependencies, after_datasets = split_datasets(dependencies)
    checkpoint_signal, limit_signal = _signals(lifecycle.checkpoint)
    deadline_ts = _deadline(slurm.deadline)
    return c.JobSubmitted(
        ts=time.time(),
        source="horizon-cli",
        correlation_id=job_id,
        job_id=job_id,
        tenant=tenant,
        account=identity.account,
        user=identity.user,
        name=identity.name,
        command=list(command),
        env=_key_values(environment.env, "--env"),
        labels=_key_values(environment.labels, "--label"),
        profile=placement.profile,
        partitions=partitions,
        node_selector=_key_values(placement.selector, "--node-selector"),
        tolerations=[_toleration(t) for t in placement.tolerations],
        resources=c.ResourceRequest(cpus=resources.cpus, memory=resources.memory, gpus=resources.gpus,
                                    gpu_type=resources.gpu_type, gpu_memory=resources.gpu_memory,
                                    cpu_limit=resources.cpu_limit, memory_limit=resources.memory_limit),
        nodes=nodes,
        min_nodes=min_nodes,
        min_available=gang.min_available,
        assembly_timeout_s=_seconds(gang.assembly_timeout, "--assembly-timeout"),
        tasks_per_node=gang.tasks_per_node,
        time_limit_s=_seconds(lifecycle.time_limit, "--time"),
        scheduling_timeout_s=_seconds(lifecycle.scheduling_timeout, "--scheduling-timeout"),
        priority_class=lifecycle.priority_class,
        nice=lifecycle.nice,
        array=slurm.array,
        dependencies=dependencies,
        singleton=singleton,
        dependency_timeout_s=_seconds(slurm.dependency_timeout, "--dependency-timeout"),
        deadline_ts=deadline_ts,
        after_datasets=after_datasets,
        restart_policy=lifecycle.restart_policy,
        max_retries=lifecycle.max_retries,
        checkpoint_signal=checkpoint_signal,
        limit_signal=limit_signal,
        sim_runtime_s=run.sim_runtime,
        cwd=cwd,
        stdout=run.output or "",
        stderr=run.error or "",
        open_mode=run.open_mode,
        image=run.image or "",
        datasets=sorted({n.strip() for d in run.datasets for n in d.split(",") if n.strip()}),
        licenses=_licenses(slurm.licenses),
    )


def _licenses(text: str | None) -> dict[str, int]:
    """``--licenses``/``-L``, read as sbatch reads it (``services/front/slurm/sbatch_values.py``)."""
    if text is None:
        return {}
    try:
        return license_list(text)
    except Problem as exc:
        raise click.BadParameter(str(exc), param_hint="--licenses") from None


def register(group: click.Group) -> None:
    group.add_command(submit)
