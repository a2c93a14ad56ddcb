"""From the sbatch options given to what the job asks for, one family of Slurm's options at a time.

``resolve_options`` walks the families in order, each a step with a name: 1. the shape (nodes x tasks
per node), 2. GPUs, 3. CPUs per task, 4. memory per task, 5. the time limit, 6. the queue (array,
dependency, nice, partitions, QOS, account, name), 7. the environment and files, 8. placement
(constraint, exclusive), 9. requeue and signals, 10. the start window (begin, deadline). Each step
reads its options through ``Given``, which files a bad value as a problem naming the option and its
line and a value that does less here than in Slurm as a warning; a step never stops at the first
problem, so every problem of a script is reported together. Pure: the submitter's clock comes in.

The values of single options are read by ``sbatch_values.py``; what they become in a ``JobSubmitted`` is
``services/front/slurm/sbatch.py``'s business.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events import catalogue as c
from events.resources import ResourceError
from services.front.slurm.sbatch_options import Directive
from services.front.slurm.sbatch_values import (array_spec, choice, constraint_text, exclusive_mode, export_list,
                                                nice_value, node_counts, non_empty, output_pattern, partition_list)
from services.front.slurm.slurm_values import (
    NO_LIMIT,
    Problem,
    gpu_spec,
    gres,
    host_list,
    parse_dependency_list,
    slurm_begin,
    slurm_memory,
    slurm_signal,
    slurm_time,
    whole_number,
)

__all__ = ["Given", "Shape", "Gpus", "Memory", "Queue", "Files", "Placement", "Ending", "Resolved",
           "resolve_options"]


# --------------------------------------------------------------------------
# The options given, and where their problems and warnings go
# --------------------------------------------------------------------------


class Given:
    """The options that count (the last of each) and where their problems and warnings go."""

    def __init__(self, given: dict[str, Directive], problems: list[str],
                 warn: Callable[[Directive, str], None]) -> None:
        self.given = given
        self.problems = problems
        self._warn = warn

    def __contains__(self, name: str) -> bool:
        return name in self.given

    def __getitem__(self, name: str) -> Directive:
        return self.given[name]

    def get(self, name: str, parse: Any) -> Any:
        """The option's value read by ``parse`` (None when not given, or when its value is a problem)."""
        d = self.given.get(name)
        if d is None:
            return None
        try:
            return parse(d.value if d.value is not None else "")
        except Problem as exc:
            self.problems.append(d.problem(str(exc)))
        except ResourceError as exc:
            self.problems.append(d.problem(f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}"))
        return None

    def fail(self, name: str, text: str) -> None:
        self.problems.append(self.given[name].problem(text))

    def note(self, name: str, text: str) -> None:
        self._warn(self.given[name], text)


# --------------------------------------------------------------------------
# The steps, in the order resolve_options takes them
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Nodes x tasks per node (Horizon's gangs are uniform); ``min_nodes``: an elastic gang's least."""

    nodes: int
    per_node: int
    min_nodes: int | None
    nodelist: list[str] | None
    excluded: list[str] | None

    @property
    def tasks(self) -> int:
        return self.nodes * self.per_node


def resolve_shape(g: Given) -> Shape:
    """1. ``--nodes``, ``--nodelist``, ``--exclude``, ``--ntasks``, ``--ntasks-per-node``."""
    node_range = g.get("nodes", node_counts)
    nodes = None
    min_nodes: int | None = None  # -N MIN-MAX: an elastic gang of MAX nodes, MIN at least
    if node_range is not None:
        nodes = node_range[0]
        if node_range[1] != nodes:
            if "use-min-nodes" in g:  # Slurm: prefer the least of the range; here, run on exactly that
                g.note("use-min-nodes", f"runs on {nodes} node(s), the least of {node_range[0]}-{node_range[1]}, "
                                        "and does not grow")
            else:  # elastic: starts at the largest count that fits, grows and shrinks in the range
                min_nodes, nodes = node_range
                if "ntasks" in g and "ntasks-per-node" not in g:
                    g.fail("ntasks", f"with a range of nodes ({node_range[0]}-{node_range[1]}) give "
                                     "--ntasks-per-node: an elastic job's tasks follow its nodes")
    nodelist = g.get("nodelist", host_list)
    if nodelist is not None:  # the job runs on exactly these: they make its node count
        if nodes is None:
            nodes = len(nodelist)
        elif nodes != len(nodelist):
            g.fail("nodelist", f"names {len(nodelist)} node(s) and --nodes asks for {nodes}: Horizon runs a job on "
                               "exactly the nodes listed")
    excluded = g.get("exclude", host_list)
    ntasks = g.get("ntasks", lambda t: whole_number(t, "a number of tasks"))
    per_node = g.get("ntasks-per-node", lambda t: whole_number(t, "a number of tasks per node"))
    if ntasks is not None and min_nodes is not None and per_node is not None:
        ntasks = None  # an elastic job runs --ntasks-per-node on each of its nodes, however many they are
    if ntasks is not None:
        if nodes is None:
            nodes = 1 if per_node is None else math.ceil(ntasks / per_node)
        if ntasks % nodes:
            g.fail("ntasks", f"{ntasks} tasks do not divide evenly over {nodes} node(s): Horizon puts the same number "
                             "of tasks on every node; give --nodes and --ntasks-per-node")
            per_node = per_node or 1
        elif per_node is not None and ntasks // nodes > per_node:
            g.fail("ntasks", f"{ntasks} tasks over {nodes} node(s) is more than --ntasks-per-node={per_node}")
        else:
            per_node = ntasks // nodes
    return Shape(nodes=nodes or 1, per_node=per_node or 1, min_nodes=min_nodes, nodelist=nodelist, excluded=excluded)


@dataclass(frozen=True)
class Gpus:
    """A node's GPUs, and how its tasks hold them: each its own (``per_task``) or all together (``shared``)."""

    per_node: int
    gpu_type: str | None
    per_task: int
    shared: int


def resolve_gpus(g: Given, shape: Shape) -> Gpus:
    """2. ``--gpus-per-task``, ``--gpus-per-node``, ``--gres``, ``--gpus``: each form says how many a node
    holds (they must agree); then per task, or shared."""
    gpu_type: str | None = None
    node_gpus: int | None = None
    gpu_forms: list[tuple[str, str | None, int]] = []  # option, type, per node
    for name, parse in (("gpus-per-task", lambda t: gpu_spec(t, "GPUs")),
                        ("gpus-per-node", lambda t: gpu_spec(t, "GPUs")),
                        ("gres", gres),
                        ("gpus", lambda t: gpu_spec(t, "GPUs"))):
        spec = g.get(name, parse)
        if spec is None:
            continue
        kind, count = spec
        if name == "gpus-per-task":
            count *= shape.per_node
        elif name == "gpus":
            if count % shape.nodes:
                g.fail(name, f"{count} GPUs in all do not divide evenly over {shape.nodes} node(s): Horizon gives "
                             "every node of a job the same GPUs")
                continue
            count //= shape.nodes
        gpu_forms.append((name, kind, count))
    type_from = ""
    for name, kind, count in gpu_forms:
        if node_gpus is not None and count != node_gpus:
            g.fail(name, f"asks for {count} GPU(s) per node where --{gpu_forms[0][0]} asks for {node_gpus}")
        if kind and gpu_type and kind != gpu_type:
            g.fail(name, f"asks for GPU type {kind} where --{type_from} asks for {gpu_type}")
        node_gpus = count if node_gpus is None else node_gpus
        if kind and not gpu_type:
            gpu_type, type_from = kind, name
    node_gpus = node_gpus or 0
    if node_gpus == 0:
        gpu_type = None
    # --gpus-per-task gives each task its own GPUs; the per-node and per-job forms give a node's GPUs to
    # all its tasks together (each sees them all), as Slurm does without --gpu-bind.
    per_task_gpus = "gpus-per-task" in g or shape.per_node == 1
    return Gpus(per_node=node_gpus, gpu_type=gpu_type,
                per_task=node_gpus // shape.per_node if per_task_gpus else 0,
                shared=0 if per_task_gpus else node_gpus)


def resolve_cpus(g: Given, shape: Shape, gpus: Gpus) -> int:
    """3. ``--cpus-per-task``, ``--cpus-per-gpu``: CPUs per task."""
    cpus = g.get("cpus-per-task", lambda t: whole_number(t, "a number of CPUs"))
    cpus_per_gpu = g.get("cpus-per-gpu", lambda t: whole_number(t, "a number of CPUs"))
    if cpus_per_gpu is not None:
        if "cpus-per-task" in g:
            g.fail("cpus-per-gpu", "and --cpus-per-task exclude each other (as in Slurm)")
        elif gpus.per_node == 0:
            g.fail("cpus-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
        elif cpus_per_gpu * gpus.per_node % shape.per_node:
            g.fail("cpus-per-gpu", f"{cpus_per_gpu * gpus.per_node} CPUs per node do not divide evenly over "
                                   f"{shape.per_node} task(s): give --cpus-per-task")
        else:
            cpus = cpus_per_gpu * gpus.per_node // shape.per_node
    return cpus or 1


@dataclass(frozen=True)
class Memory:
    """Memory per task (None: the partition's default), or all of each node's (``whole``); and Slurm's
    ``SLURM_MEM_PER_NODE``/``_CPU``/``_GPU``, in MiB, as Slurm sets them."""

    per_task: int | None = None
    whole: bool = False
    env: dict[str, str] | None = None


def resolve_memory(g: Given, shape: Shape, cpus: int, gpus: Gpus) -> Memory:
    """4. ``--mem``, ``--mem-per-cpu``, ``--mem-per-gpu`` (Horizon counts memory per task; --mem is per node)."""
    mem_forms = [name for name in ("mem", "mem-per-cpu", "mem-per-gpu") if name in g]
    if len(mem_forms) > 1:
        g.fail(mem_forms[1], f"and --{mem_forms[0]} exclude each other (as in Slurm)")
        return Memory()
    if not mem_forms:
        return Memory()
    form = mem_forms[0]
    size = g.get(form, slurm_memory)
    if size is None:
        return Memory()
    if size == 0 and form == "mem":
        return Memory(whole=True)  # all of each node's memory (Slurm's --mem=0)
    if size == 0:
        g.fail(form, "0 is not a memory size here (--mem=0 asks for all of each node's memory)")
    elif form == "mem":
        return Memory(-(-size // shape.per_node), env={"SLURM_MEM_PER_NODE": str(size >> 20)})  # rounded up
    elif form == "mem-per-cpu":
        return Memory(size * cpus, env={"SLURM_MEM_PER_CPU": str(size >> 20)})
    elif gpus.per_node == 0:
        g.fail("mem-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
    else:
        return Memory(-(-size * gpus.per_node // shape.per_node), env={"SLURM_MEM_PER_GPU": str(size >> 20)})
    return Memory()


def resolve_time_limit(g: Given) -> tuple[float | None, float | None]:
    """5. ``--time`` and ``--time-min``: the time limit, and the least a backfilled job may be given.
    Whole minutes, seconds rounded up (``slurm_time``). No limit (``--time=0``, ``UNLIMITED``) is sent as
    0, which submission makes the partition's MaxTime, else the cluster's longest (every Horizon job has
    a limit: backfill plans with it); ``--time-min=0`` is none."""
    time_limit = g.get("time", slurm_time)
    time_min = g.get("time-min", slurm_time) or None
    if time_limit == NO_LIMIT:
        g.note("time", f"={g['time'].value}: no time limit: the job gets its partition's MaxTime, else the "
                       "cluster's longest limit (every Horizon job has one; backfill plans with it)")
    elif time_min is not None and time_limit is not None and time_min > time_limit:
        g.fail("time-min", f"{time_min:g} s is more than the time limit (--time, {time_limit:g} s)")
    return time_limit, time_min


@dataclass(frozen=True)
class Queue:
    """How the job waits its turn and whose it is."""

    array: str | None
    dependency: tuple[list[c.Dependency], bool] | None
    nice: int | None
    partitions: list[str] | None
    qos: str | None
    account: str | None
    name: str | None
    comment: str | None


def resolve_queue(g: Given) -> Queue:
    """6. ``--array``, ``--dependency``, ``--nice``, ``--partition``, ``--qos``, ``--account``, ``--job-name``,
    ``--comment``."""
    return Queue(array=g.get("array", array_spec), dependency=g.get("dependency", parse_dependency_list),
                 nice=g.get("nice", nice_value), partitions=g.get("partition", partition_list), qos=g.get("qos", non_empty),
                 account=g.get("account", non_empty), name=g.get("job-name", non_empty),
                 comment=g.get("comment", lambda t: t))


@dataclass(frozen=True)
class Files:
    """The job's environment (``--export``), its output files and working directory, its image."""

    export: list[tuple[str, str | None]] | None
    open_mode: str | None
    output: str | None
    error: str | None
    chdir: str | None
    image: str | None


def resolve_files(g: Given) -> Files:
    """7. ``--export``, ``--open-mode``, ``--output``, ``--error``, ``--chdir``, ``--container-image`` (and
    ``--kill-on-invalid-dep``, read in its place among them)."""
    export = g.get("export", export_list)
    open_mode = g.get("open-mode", choice("append", "truncate"))
    if g.get("kill-on-invalid-dep", choice("yes", "no")) == "no":
        g.note("kill-on-invalid-dep", "no effect here: Horizon ends a job whose dependency can never be met "
                                      "(DEPENDENCY_NEVER_SATISFIED) rather than leaving it pending")
    return Files(export=export, open_mode=open_mode, output=g.get("output", output_pattern),
                 error=g.get("error", output_pattern), chdir=g.get("chdir", non_empty),
                 image=g.get("container-image", non_empty))


@dataclass(frozen=True)
class Placement:
    constraint: str | None
    exclusive: str | None


def resolve_placement(g: Given) -> Placement:
    """8. ``--constraint``, ``--exclusive``."""
    constraint = g.get("constraint", constraint_text)
    exclusive = g.get("exclusive", exclusive_mode)
    if exclusive in ("user", "mcs", "topo"):
        g.note("exclusive", f"={exclusive}: Horizon gives the job whole nodes, shared with no other job")
    return Placement(constraint=constraint, exclusive=exclusive)


@dataclass(frozen=True)
class Ending:
    """How the job's run ends or gives up: its limits, signal and start window."""

    time_limit: float | None
    time_min: float | None
    signal: tuple[c.LimitSignal, bool] | None
    immediate: int | None
    begin: float | None
    deadline: float | None


def resolve_requeue_and_signal(g: Given) -> tuple[tuple[c.LimitSignal, bool] | None, int | None]:
    """9. ``--requeue``, ``--signal``, ``--immediate``, ``--wait-all-nodes``: the signal before the time
    limit, and how long the job may wait to start."""
    requeue = g.get("requeue", choice("", "expedite"))
    if requeue == "expedite":
        g.note("requeue", "=expedite: Horizon requeues the job with its own priority, not the highest")
    signal = g.get("signal", slurm_signal)
    if signal is not None and signal[1]:
        g.note("signal", "R: Horizon has no reservations with a start delay to overlap; the signal is sent as asked")
    immediate = g.get("immediate", lambda t: whole_number(t, "a number of seconds") if t else 1)
    if immediate is not None:
        g.note("immediate", f"Horizon submits the job, which ends UNSCHEDULABLE if it has not started within "
                            f"{immediate} s (Slurm would not submit it)")
    g.get("wait-all-nodes", choice("0", "1"))
    return signal, immediate


def resolve_start_window(g: Given, now: datetime | None) -> tuple[float | None, float | None]:
    """10. ``--begin`` and ``--deadline``, read on the submitter's clock (``now``; None: read it now)."""
    begin = g.get("begin", lambda t: slurm_begin(t, now or datetime.now().astimezone()))
    deadline = g.get("deadline", lambda t: slurm_begin(t, now or datetime.now().astimezone()))
    if deadline is not None and begin is not None and deadline <= begin:
        g.fail("deadline", "Incompatible begin and deadline time specification: the deadline is not after --begin")
    return begin, deadline


@dataclass(frozen=True)
class Resolved:
    """Every family of options, resolved."""

    shape: Shape
    gpus: Gpus
    cpus: int
    memory: Memory
    queue: Queue
    files: Files
    placement: Placement
    ending: Ending


def resolve_options(g: Given, now: datetime | None) -> Resolved | None:
    """The steps 1-10 in order (the order problems on one line are listed in); None if any found a problem."""
    shape = resolve_shape(g)
    gpus = resolve_gpus(g, shape)
    cpus = resolve_cpus(g, shape, gpus)
    memory = resolve_memory(g, shape, cpus, gpus)
    time_limit, time_min = resolve_time_limit(g)
    queue = resolve_queue(g)
    files = resolve_files(g)
    placement = resolve_placement(g)
    signal, immediate = resolve_requeue_and_signal(g)
    begin, deadline = resolve_start_window(g, now)
    if g.problems:
        return None
    return Resolved(shape=shape, gpus=gpus, cpus=cpus, memory=memory, queue=queue, files=files, placement=placement,
                    ending=Ending(time_limit=time_limit, time_min=time_min, signal=signal, immediate=immediate,
                                  begin=begin, deadline=deadline))
