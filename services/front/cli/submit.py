"""``horizon submit -- CMD``: a job (or an array) from command-line options, as a ``JobSubmitted``.

What the CLI can check alone it checks here, with the messages the submission service would give;
the rest is the service's verdict, which ``services/front/client/submitter.py`` waits for.
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
from events.vocabulary import OPEN_MODES
from services.front.client.client import default_user
from services.front.cli.options import nats_option, tenant_option
from services.front.slurm.slurm_values import (Problem, parse_checkpoint_signal, parse_dependency_list, slurm_begin,
                                       split_datasets)
from services.domain.output import pattern_problem
from services.front.client.submitter import check_submission, new_job_id, print_warnings, report_check, send_submission

__all__ = ["submit", "register"]


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


def parse_node_range(text: str) -> tuple[int | None, int]:
    """``--nodes``: ``N`` -> (None, N); ``MIN-MAX`` -> (MIN, MAX), an elastic gang."""
    low, sep, high = text.strip().partition("-")
    try:
        least, most = int(low), int(high) if sep else int(low)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give a number of nodes, or MIN-MAX (2-4)", param_hint="--nodes") from None
    if least < 1 or most < least:
        raise click.BadParameter(f"{text!r}: the least must be 1 or more and the most at least the least",
                                 param_hint="--nodes")
    return (least if sep and least < most else None), most


def _me() -> str:
    """Who submits: the tenant's user of --nats (or $HORIZON_NATS_URL) under accounts, else $USER."""
    ctx = click.get_current_context(silent=True)
    return default_user(ctx.params.get("nats_url") if ctx is not None else None)


@click.command(context_settings={"ignore_unknown_options": False})
@nats_option
@tenant_option
@click.option("--job-id", default=None, help="Your id for the job (default: generated). Reusing one is a duplicate.")
@click.option("--name", default="", help="A name for the job.")
@click.option("--account", default="default", show_default=True)
@click.option("--user", default=lambda: _me(), show_default="you: the user your URL logs in as, else $USER")
@click.option("--gpus", type=int, default=0, show_default=True, help="GPUs per task.")
@click.option("--gpu-type", default=None, help="GPU model, e.g. a100 or h100-80gb.")
@click.option("--gpu-memory", default=None, help="Minimum memory per GPU, e.g. 40Gi.")
@click.option("--cpus", default="1", show_default=True, help="CPUs per task: 2, 2.5 or 500m.")
@click.option("--mem", "memory", default=None,
              help="Memory per task: 512m, 8g, 16Gi (default: the partition's default per CPU or GPU, else 1Gi).")
@click.option("--cpu-limit", default=None,
              help="CPUs per task the job may use beyond --cpus (its QoS class is then burstable; default: --cpus).")
@click.option("--mem-limit", "memory_limit", default=None,
              help="Memory per task the job may use beyond --mem (burstable; default: --mem). --cpus 0 --mem 0: "
                   "best-effort, the first to go when its node runs short of memory.")
@click.option("--nodes", "-N", "node_range", default="1", show_default=True,
              help="Nodes (all or nothing), or MIN-MAX for an elastic gang (as Slurm's -N 2-4): it starts on as "
                   "many as fit, at least MIN, grows toward MAX and is shrunk rather than preempted.")
@click.option("--min-available", type=int, default=None,
              help="An elastic gang's least number of tasks (Volcano's minAvailable), in whole nodes of "
                   "--tasks-per-node; --nodes is then its most.")
@click.option("--assembly-timeout", default=None,
              help="End a gang (UNSCHEDULABLE) that has not assembled its least nodes within this duration.")
@click.option("--tasks-per-node", type=int, default=1, show_default=True)
@click.option("--time", "time_limit", default=None, help="Time limit: 90, 10m, 2h, 1-00:00:00 (default 1h).")
@click.option("--priority-class", default="normal", show_default=True,
              type=click.Choice(list(c.PRIORITY_CLASSES)))
@click.option("--checkpoint-signal", "checkpoint", default=None, metavar="SIG[@SECONDS]",
              help="The signal the job checkpoints on (USR1, SIGUSR1 or 10): sent to its main process before it "
                   "is preempted or migrated off a draining node (horizon node drain --migrate), which waits for "
                   "the checkpoint the job names in $HORIZON_CHECKPOINT_FILE; its next attempt finds it in "
                   "$HORIZON_CHECKPOINT_REF (docs/jobs.md). @SECONDS: also that long before its time limit, as "
                   "Slurm's --signal=B:SIG@SECONDS.")
@click.option("--restart-policy", default="never", show_default=True, type=click.Choice(list(c.RESTART_POLICIES)))
@click.option("--max-retries", type=int, default=0, show_default=True)
@click.option("--scheduling-timeout", default=None, help="Give up if not started within this duration.")
@click.option("--nice", type=int, default=0, show_default=True, help="Priority adjustment: higher is lower priority.")
@click.option("--array", "array", default=None,
              help="A job array, as Slurm's --array: 0-99, 0-99%10 (at most 10 at once), 1,3,5-7, 0-15:4. "
                   "Tasks are <job id>_<index>.")
@click.option("--dependency", "dependency", default=None,
              help="Start only after other jobs, as Slurm: afterok:a:b,afterany:c (also after, afternotok; "
                   "aftercheckpoint:a once a has recorded its first checkpoint; afterdata:NAME once the dataset NAME is "
                   "announced, horizon dataset announce). They may be submitted later. "
                   "singleton: only when no other job of its name and user runs.")
@click.option("--dependency-timeout", default=None,
              help="End the job (DEPENDENCY_NEVER_SATISFIED) if its dependencies are not met this long after "
                   "acceptance: 90, 10m, 2h.")
@click.option("--deadline", default=None,
              help="As Slurm's --deadline: end the job (UNSCHEDULABLE) once it could no longer end by this time "
                   "(now + its time limit past it): 2026-12-01T18:00, 18:00, now+2hours.")
@click.option("--env", "env", multiple=True, help="KEY=VALUE for the job's environment (repeatable).")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE label (repeatable).")
@click.option("--profile", default="default", show_default=True,
              help="Placement profile (horizon profile set); default: the partition's.")
@click.option("-p", "--partition", "partition", default=None,
              help="Partitions it may run in, as Slurm's -p a,b: the first that can run it (default: the "
                   "default partition; horizon partition list).")
@click.option("--node-selector", "selector", multiple=True, help="KEY=VALUE the node must have (repeatable).")
@click.option("--toleration", "tolerations", multiple=True,
              help="Tolerate a taint: KEY (any value), KEY=VALUE, optionally :EFFECT (repeatable).")
@click.option("--chdir", "-D", "chdir", default=None,
              help="Working directory of the job (default: the directory you submit from); relative to it.")
@click.option("--output", "-o", "output", default=None,
              help="Standard output file, with Slurm's patterns %j %A %a %x %u %N (relative to the working "
                   "directory). Default: kept by the node's agent (horizon logs JOB).")
@click.option("--error", "-e", "error", default=None,
              help="Standard error file (patterns as --output). Default: with --output, the same file; "
                   "else kept by the agent (horizon logs --err JOB).")
@click.option("--open-mode", type=click.Choice(list(OPEN_MODES)), default="truncate", show_default=True,
              help="What a new attempt does to existing --output/--error files.")
@click.option("--image", default=None, help="Run the command in a container of this image (Podman on the node).")
@click.option("--dataset", "datasets", multiple=True,
              help="A dataset the job reads (repeatable, or a,b): placement prefers nodes that hold it "
                   "(horizon node add-datasets).")
@click.option("--sim-runtime", type=float, default=None, help="Seconds a simulated job runs (sim executor).")
@click.option("--no-wait", is_flag=True, help="Do not wait for acceptance.")
@click.option("--check", is_flag=True, help="Only ask a submission instance whether the job would be accepted "
                                           "(the validation queue group); submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"job_id\": …, \"state\": …} as JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(
    nats_url: str, tenant: str, job_id: str | None, name: str, account: str, user: str, gpus: int,
    gpu_type: str | None, gpu_memory: str | None, cpus: str, memory: str | None, cpu_limit: str | None,
    memory_limit: str | None, node_range: str, min_available: int | None, assembly_timeout: str | None,
    tasks_per_node: int,
    time_limit: str | None, priority_class: str, checkpoint: str | None, restart_policy: str, max_retries: int,
    scheduling_timeout: str | None, nice: int, array: str | None, dependency: str | None,
    dependency_timeout: str | None, deadline: str | None, env: tuple[str, ...],
    labels: tuple[str, ...], profile: str, partition: str | None, selector: tuple[str, ...],
    tolerations: tuple[str, ...],
    chdir: str | None, output: str | None, error: str | None, open_mode: str, image: str | None,
    datasets: tuple[str, ...], sim_runtime: float | None, no_wait: bool, check: bool, as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Submit a job: horizon submit --gpus 2 -- python train.py"""
    # Catch what we can here, with the same messages the submission service would give.
    parse_cpus(cpus, "--cpus")
    if memory is not None:
        parse_memory(memory, "--mem")
    if cpu_limit is not None:
        parse_cpus(cpu_limit, "--cpu-limit")
    if memory_limit is not None:
        parse_memory(memory_limit, "--mem-limit")
    partitions = [p.strip() for p in partition.split(",") if p.strip()] if partition else []
    if partition is not None and not partitions:
        raise click.BadParameter("is empty: name a partition, or several as a,b", param_hint="--partition")
    if gpu_type:
        parse_gpu_model(gpu_type, "--gpu-type")
    if gpu_memory:
        parse_memory(gpu_memory, "--gpu-memory")
    if not command and sim_runtime is None:
        raise click.UsageError("give the command to run after --, e.g. horizon submit -- python train.py "
                               "(a simulated job takes --sim-runtime instead)")
    cwd = os.path.normpath(os.path.join(os.getcwd(), os.path.expanduser(chdir))) if chdir else os.getcwd()
    for flag, pattern in (("--output", output), ("--error", error)):
        problem = pattern_problem(pattern) if pattern else None
        if problem is not None:
            raise click.BadParameter(f"{pattern!r}: {problem}", param_hint=flag)
    if array is not None:
        parse_array(array, "--array")  # a bad range is a usage error here, before anything is sent
    min_nodes, nodes = parse_node_range(node_range)
    job_id = job_id or new_job_id(user)
    dependencies, singleton = _dependencies(dependency) if dependency else ([], False)
    dependencies, after_datasets = split_datasets(dependencies)
    checkpoint_signal, limit_signal = None, None
    if checkpoint is not None:
        try:
            checkpoint_signal, limit_signal = parse_checkpoint_signal(checkpoint)
        except Problem as exc:
            raise click.BadParameter(str(exc), param_hint="--checkpoint-signal") from None
    deadline_ts = None
    if deadline is not None:
        try:
            deadline_ts = slurm_begin(deadline, datetime.now().astimezone())
        except Problem as exc:
            raise click.BadParameter(str(exc), param_hint="--deadline") from None
    event = c.JobSubmitted(
        ts=time.time(),
        source="horizon-cli",
        correlation_id=job_id,
        job_id=job_id,
        tenant=tenant,
        account=account,
        user=user,
        name=name,
        command=list(command),
        env=_key_values(env, "--env"),
        labels=_key_values(labels, "--label"),
        profile=profile,
        partitions=partitions,
        node_selector=_key_values(selector, "--node-selector"),
        tolerations=[_toleration(t) for t in tolerations],
        resources=c.ResourceRequest(cpus=cpus, memory=memory, gpus=gpus, gpu_type=gpu_type, gpu_memory=gpu_memory,
                                    cpu_limit=cpu_limit, memory_limit=memory_limit),
        nodes=nodes,
        min_nodes=min_nodes,
        min_available=min_available,
        assembly_timeout_s=parse_duration(assembly_timeout, "--assembly-timeout") if assembly_timeout else None,
        tasks_per_node=tasks_per_node,
        time_limit_s=parse_duration(time_limit, "--time") if time_limit else None,
        scheduling_timeout_s=parse_duration(scheduling_timeout, "--scheduling-timeout") if scheduling_timeout else None,
        priority_class=priority_class,
        nice=nice,
        array=array,
        dependencies=dependencies,
        singleton=singleton,
        dependency_timeout_s=(parse_duration(dependency_timeout, "--dependency-timeout")
                              if dependency_timeout else None),
        deadline_ts=deadline_ts,
        after_datasets=after_datasets,
        restart_policy=restart_policy,
        max_retries=max_retries,
        checkpoint_signal=checkpoint_signal,
        limit_signal=limit_signal,
        sim_runtime_s=sim_runtime,
        cwd=cwd,
        stdout=output or "",
        stderr=error or "",
        open_mode=open_mode,
        image=image or "",
        datasets=sorted({n.strip() for d in datasets for n in d.split(",") if n.strip()}),
    )
    if check:
        report_check(check_submission(nats_url, event), event.job_id, as_json)
        return
    result = send_submission(nats_url, event, no_wait=no_wait)
    print_warnings(result, "horizon submit")
    if as_json:
        click.echo(json.dumps(result))
    elif result["state"] != "REJECTED" and (no_wait or result["state"] != "SUBMITTED"):
        click.echo(job_id)
    if result["state"] == "REJECTED":
        raise click.ClickException(f"job {job_id} rejected: {result['reason']}")
    if result["state"] == "SUBMITTED" and not no_wait:
        raise click.ClickException(f"job {job_id}: {result['reason']}")


def _toleration(text: str) -> c.Toleration:
    body, _, effect = text.partition(":")
    key, sep, value = body.partition("=")
    if not key:
        raise click.BadParameter(f"{text!r}: give KEY, KEY=VALUE, KEY:EFFECT or KEY=VALUE:EFFECT",
                                 param_hint="--toleration")
    if effect and effect not in c.TAINT_EFFECTS:
        raise click.BadParameter(f"{effect!r} is not one of {', '.join(c.TAINT_EFFECTS)}", param_hint="--toleration")
    return c.Toleration(key=key, operator="Equal" if sep else "Exists", value=value, effect=effect)


def register(group: click.Group) -> None:
    group.add_command(submit)
