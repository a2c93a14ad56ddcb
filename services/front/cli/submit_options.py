"""``horizon submit``'s options in groups, each decoded into a small dataclass the command receives whole.

A group is a run of click options (in the order ``--help`` lists them) and the dataclass of their
values: who (``Identity``), what each task holds (``Resources``), the gang (``Gang``), how long, how
urgent and what after a failure (``Lifecycle``), Slurm's ordering options (``SlurmOrder``), its
environment and labels (``Environment``), where it may run (``Placement``) and how it runs and writes
(``Runtime``). ``services/front/cli/submit.py`` makes the job of them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import click

from events import catalogue as c
from events.vocabulary import OPEN_MODES
from services.front.client.client import default_user

__all__ = ["Identity", "Resources", "Gang", "Lifecycle", "SlurmOrder", "Environment", "Placement", "Runtime",
           "identity_options", "resource_options", "gang_options", "lifecycle_options", "slurm_order_options",
           "environment_options", "placement_options", "runtime_options", "parse_node_range"]


def _group(cls: type, param: str, *options: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A decorator adding ``options`` to a command, which receives their values as one ``cls`` under ``param``
    (the options' parameter names are ``cls``'s fields)."""
    names = [f.name for f in dataclasses.fields(cls)]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def decoded(*args: Any, **kwargs: Any) -> Any:
            kwargs[param] = cls(**{name: kwargs.pop(name) for name in names})
            return command(*args, **kwargs)

        for option in reversed(options):
            decoded = option(decoded)
        return decoded

    return decorate


def _me() -> str:
    """Who submits: the tenant's user of --nats (or $HORIZON_NATS_URL) under accounts, else $USER."""
    ctx = click.get_current_context(silent=True)
    return default_user(ctx.params.get("nats_url") if ctx is not None else None)


@dataclasses.dataclass(frozen=True)
class Identity:
    job_id: str | None
    name: str
    account: str
    user: str


identity_options = _group(
    Identity, "identity",
    click.option("--job-id", default=None,
                 help="Your id for the job (default: generated). Reusing one is a duplicate."),
    click.option("--name", default="", help="A name for the job."),
    click.option("--account", default="default", show_default=True),
    click.option("--user", default=lambda: _me(), show_default="you: the user your URL logs in as, else $USER"),
)


@dataclasses.dataclass(frozen=True)
class Resources:
    """What each task holds."""

    gpus: int
    gpu_type: str | None
    gpu_memory: str | None
    cpus: str
    memory: str | None
    cpu_limit: str | None
    memory_limit: str | None


resource_options = _group(
    Resources, "resources",
    click.option("--gpus", type=int, default=0, show_default=True, help="GPUs per task."),
    click.option("--gpu-type", default=None, help="GPU model, e.g. a100 or h100-80gb."),
    click.option("--gpu-memory", default=None, help="Minimum memory per GPU, e.g. 40Gi."),
    click.option("--cpus", default="1", show_default=True, help="CPUs per task: 2, 2.5 or 500m."),
    click.option("--mem", "memory", default=None,
                 help="Memory per task: 512m, 8g, 16Gi (default: the partition's default per CPU or GPU, else "
                      "1Gi)."),
    click.option("--cpu-limit", default=None,
                 help="CPUs per task the job may use beyond --cpus (its QoS class is then burstable; default: "
                      "--cpus)."),
    click.option("--mem-limit", "memory_limit", default=None,
                 help="Memory per task the job may use beyond --mem (burstable; default: --mem). --cpus 0 --mem 0: "
                      "best-effort, the first to go when its node runs short of memory."),
)


@dataclasses.dataclass(frozen=True)
class Gang:
    """How many nodes, and tasks on each."""

    node_range: str
    min_available: int | None
    assembly_timeout: str | None
    tasks_per_node: int


gang_options = _group(
    Gang, "gang",
    click.option("--nodes", "-N", "node_range", default="1", show_default=True,
                 help="Nodes (all or nothing), or MIN-MAX for an elastic gang (as Slurm's -N 2-4): it starts on as "
                      "many as fit, at least MIN, grows toward MAX and is shrunk rather than preempted."),
    click.option("--min-available", type=int, default=None,
                 help="An elastic gang's least number of tasks (Volcano's minAvailable), in whole nodes of "
                      "--tasks-per-node; --nodes is then its most."),
    click.option("--assembly-timeout", default=None,
                 help="End a gang (UNSCHEDULABLE) that has not assembled its least nodes within this duration."),
    click.option("--tasks-per-node", type=int, default=1, show_default=True),
)


@dataclasses.dataclass(frozen=True)
class Lifecycle:
    """How long it may run, how urgent it is, and what follows a failure or a preemption."""

    time_limit: str | None
    priority_class: str
    checkpoint: str | None
    restart_policy: str
    max_retries: int
    scheduling_timeout: str | None
    nice: int


lifecycle_options = _group(
    Lifecycle, "lifecycle",
    click.option("--time", "time_limit", default=None, help="Time limit: 90, 10m, 2h, 1-00:00:00 (default 1h; 0: "
                                                            "none, i.e. the partition's MaxTime, else the most)."),
    click.option("--priority-class", default="normal", show_default=True,
                 type=click.Choice(list(c.PRIORITY_CLASSES))),
    click.option("--checkpoint-signal", "checkpoint", default=None, metavar="SIG[@SECONDS]",
                 help="The signal the job checkpoints on (USR1, SIGUSR1 or 10): sent to its main process before it "
                      "is preempted or migrated off a draining node (horizon node drain --migrate), which waits for "
                      "the checkpoint the job names in $HORIZON_CHECKPOINT_FILE; its next attempt finds it in "
                      "$HORIZON_CHECKPOINT_REF (docs/jobs.md). @SECONDS: also that long before its time limit, as "
                      "Slurm's --signal=B:SIG@SECONDS."),
    click.option("--restart-policy", default="never", show_default=True, type=click.Choice(list(c.RESTART_POLICIES))),
    click.option("--max-retries", type=int, default=0, show_default=True),
    click.option("--scheduling-timeout", default=None, help="Give up if not started within this duration."),
    click.option("--nice", type=int, default=0, show_default=True,
                 help="Priority adjustment: higher is lower priority."),
)


@dataclasses.dataclass(frozen=True)
class SlurmOrder:
    """Slurm's options of when a job may start: an array, dependencies, a deadline."""

    array: str | None
    dependency: str | None
    dependency_timeout: str | None
    deadline: str | None
    licenses: str | None


slurm_order_options = _group(
    SlurmOrder, "slurm",
    click.option("--array", "array", default=None,
                 help="A job array, as Slurm's --array: 0-99, 0-99%10 (at most 10 at once), 1,3,5-7, 0-15:4. "
                      "Tasks are <job id>_<index>."),
    click.option("--dependency", "dependency", default=None,
                 help="Start only after other jobs, as Slurm: afterok:a:b,afterany:c (also after, afternotok; "
                      "aftercheckpoint:a once a has recorded its first checkpoint; afterdata:NAME once the dataset "
                      "NAME is announced, horizon dataset announce). They may be submitted later. "
                      "singleton: only when no other job of its name and user runs."),
    click.option("--dependency-timeout", default=None,
                 help="End the job (DEPENDENCY_NEVER_SATISFIED) if its dependencies are not met this long after "
                      "acceptance: 90, 10m, 2h."),
    click.option("--deadline", default=None,
                 help="As Slurm's --deadline: end the job (UNSCHEDULABLE) once it could no longer end by this time "
                      "(now + its time limit past it): 2026-12-01T18:00, 18:00, now+2hours."),
    click.option("--licenses", "-L", "licenses", default=None,
                 help="Licenses it needs, as Slurm's -L: matlab:2,abaqus (a count of 1 when none is given). It "
                      "starts only when they are free (horizon license list)."),
)


@dataclasses.dataclass(frozen=True)
class Environment:
    env: tuple[str, ...]
    labels: tuple[str, ...]


environment_options = _group(
    Environment, "environment",
    click.option("--env", "env", multiple=True, help="KEY=VALUE for the job's environment (repeatable)."),
    click.option("--label", "labels", multiple=True, help="KEY=VALUE label (repeatable)."),
)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where it may run."""

    profile: str
    partition: str | None
    selector: tuple[str, ...]
    tolerations: tuple[str, ...]


placement_options = _group(
    Placement, "placement",
    click.option("--profile", default="default", show_default=True,
                 help="Placement profile (horizon profile set); default: the partition's."),
    click.option("-p", "--partition", "partition", default=None,
                 help="Partitions it may run in, as Slurm's -p a,b: the first that can run it (default: the "
                      "default partition; horizon partition list)."),
    click.option("--node-selector", "selector", multiple=True, help="KEY=VALUE the node must have (repeatable)."),
    click.option("--toleration", "tolerations", multiple=True,
                 help="Tolerate a taint: KEY (any value), KEY=VALUE, optionally :EFFECT (repeatable)."),
)


@dataclasses.dataclass(frozen=True)
class Runtime:
    """Where it runs and writes, in what, with what data (and a simulated job's runtime)."""

    chdir: str | None
    output: str | None
    error: str | None
    open_mode: str
    image: str | None
    datasets: tuple[str, ...]
    sim_runtime: float | None


runtime_options = _group(
    Runtime, "runtime",
    click.option("--chdir", "-D", "chdir", default=None,
                 help="Working directory of the job (default: the directory you submit from); relative to it."),
    click.option("--output", "-o", "output", default=None,
                 help="Standard output file, with Slurm's patterns %j %A %a %x %u %N (relative to the working "
                      "directory). Default: kept by the node's agent (horizon logs JOB)."),
    click.option("--error", "-e", "error", default=None,
                 help="Standard error file (patterns as --output). Default: with --output, the same file; "
                      "else kept by the agent (horizon logs --err JOB)."),
    click.option("--open-mode", type=click.Choice(list(OPEN_MODES)), default="truncate", show_default=True,
                 help="What a new attempt does to existing --output/--error files."),
    click.option("--image", default=None, help="Run the command in a container of this image (Podman on the node)."),
    click.option("--dataset", "datasets", multiple=True,
                 help="A dataset the job reads (repeatable, or a,b): placement prefers nodes that hold it "
                      "(horizon node add-datasets)."),
    click.option("--sim-runtime", type=float, default=None, help="Seconds a simulated job runs (sim executor)."),
)


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
