"""From the sbatch options given to what the job asks for, one family of Slurm's options at a time.

``resolve_options`` walks the families in order, each a step with a name: 1. the shape (nodes x tasks
per node), 2. GPUs, 3. CPUs per task, 4. memory per task, 5. the time limit, 6. the queue (array,
dependency, nice, partitions, QOS, account, name, licenses), 7. the environment and files, 8. placement
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
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from events import catalogue as c
from events.resources import ResourceError
from services.front.slurm.sbatch_options import Directive
from services.front.slurm.sbatch_values import (array_spec, choice, constraint_text, exclusive_mode, export_list,
                                                license_list, nice_value, node_counts, non_empty, output_pattern,
                                                partition_list)
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
    """Nodes x tasks per node (Horizon's gangs are uniform); ``min_nodes``: an elastic gang's least;
    ``ntasks``: the tasks in all when fewer than the slots (``-N 3 -n 7``), or with ``spread`` the tasks
    submission spreads over the nodes it chooses (``-n`` without ``-N``: ``nodes`` and ``per_node`` are
    then 1, not sent); ``per_gpu``: ``--ntasks-per-gpu``."""

    nodes: int
    per_node: int
    min_nodes: int | None
    nodelist: list[str] | None
    excluded: list[str] | None
    ntasks: int | None = None
    spread: bool = False
    per_gpu: int | None = None

    @property
    def tasks(self) -> int:
        return self.ntasks or self.nodes * self.per_node


def resolve_shape(g: Given) -> Shape:
    """1. ``--nodes``, ``--nodelist``, ``--exclude``, ``--ntasks``, ``--ntasks-per-node``,
    ``--ntasks-per-gpu``: as Slurm lays a job out, within one gang shape (``_tasks_shape``)."""
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
    per_gpu = _ntasks_per_gpu(g, min_nodes, per_node)
    if per_gpu is not None and ntasks is None:  # the tasks are the GPUs' (--gres=gpu:4 --ntasks-per-gpu=2: 8)
        per_node = _node_gpus(g, nodes or 1) * per_gpu or 1
    base = Shape(nodes=nodes or 1, per_node=per_node or 1, min_nodes=min_nodes, nodelist=nodelist, excluded=excluded,
                 per_gpu=per_gpu)
    return base if ntasks is None else _tasks_shape(g, base, ntasks, nodes, per_node)


def _tasks_shape(g: Given, base: Shape, ntasks: int, nodes: int | None, per_node: int | None) -> Shape:
    """``--ntasks`` over the nodes, as Slurm: with ``-N`` (or ``-w``) over those, one each at least (fewer
    tasks than nodes: Slurm's sbatch warns and sets the nodes to the tasks); with ``--ntasks-per-node``
    as few nodes as that maximum allows; with neither, over as many nodes as the tasks need, which
    submission chooses (``services/submission/task_spread.py``), unless a per-job or per-node-shared
    amount needs the node count now (``--gpus``, ``--cpus-per-gpu`` with shared GPUs, tasks sharing
    GPUs by ``--ntasks-per-gpu``): then one node, as before. The gang's tasks per node are the fewest
    that hold the tasks on those nodes (``ceil(ntasks / nodes)``), and the tasks fill them in order
    (``JobSpec.ntasks``; ``-N 3 -n 7``: 3, 3 and 1)."""
    if nodes is None and per_node is None and ntasks == 1:
        return base  # one task: one node, nothing to spread
    if nodes is None and per_node is None:
        per_node = _tasks_by_gpus(g, base.per_gpu)  # --gres=gpu:4 --gpus-per-task=1: 4 tasks a node
        needs_nodes = ("gpus" in g or ("cpus-per-gpu" in g and "gpus-per-task" not in g)
                       or (base.per_gpu or 1) > 1)
        if per_node is None and not needs_nodes:
            return replace(base, nodes=1, per_node=1, ntasks=ntasks, spread=True)
        nodes = None if per_node is not None else 1
    if nodes is None:
        assert per_node is not None
        nodes = math.ceil(ntasks / per_node)
    elif ntasks < nodes:
        if base.nodelist is not None:
            g.fail("ntasks", f"{ntasks} task(s) cannot run on the {nodes} nodes --nodelist names: every node runs one "
                             "at least")
            return base
        g.note("ntasks", f"can't run {ntasks} processes on {nodes} nodes, setting nnodes to {ntasks} (as Slurm's "
                         "sbatch)")
        nodes = ntasks
    most = math.ceil(ntasks / nodes)
    if per_node is not None and most > per_node:
        g.fail("ntasks", f"{ntasks} tasks over {nodes} node(s) is more than --ntasks-per-node={per_node}")
        return base
    return replace(base, nodes=nodes, per_node=most, ntasks=ntasks if ntasks < nodes * most else None)


def _ntasks_per_gpu(g: Given, min_nodes: int | None, per_node: int | None) -> int | None:
    """``--ntasks-per-gpu``, which Slurm does not take with a node range, ``--gpus-per-task`` or
    ``--ntasks-per-node``; tasks that share a GPU share all their node's GPUs here (no binding)."""
    per_gpu = g.get("ntasks-per-gpu", lambda t: whole_number(t, "a number of tasks per GPU"))
    if per_gpu is None:
        return None
    for other in ("gpus-per-task", "ntasks-per-node"):
        if other in g:
            g.fail("ntasks-per-gpu", f"and --{other} exclude each other (as in Slurm)")
    if min_nodes is not None:
        g.fail("ntasks-per-gpu", "is not compatible with a range of nodes (as in Slurm)")
    if "ntasks" not in g and not any(name in g for name in ("gres", "gpus", "gpus-per-node")):
        g.fail("ntasks-per-gpu", "needs --ntasks, or the GPUs (--gres, --gpus or --gpus-per-node), to count the "
                                 "other from")
    if per_gpu > 1:
        g.note("ntasks-per-gpu", f"={per_gpu}: Horizon does not bind each task to one GPU (Slurm's "
                                 f"--gpu-bind=single:{per_gpu}): a node's tasks share its GPUs, each seeing them all")
    return per_gpu


def _tasks_by_gpus(g: Given, per_gpu: int | None) -> int | None:
    """The tasks a node holds when its GPUs (``--gres``, ``--gpus-per-node``) and each task's
    (``--gpus-per-task``), or the tasks of a GPU (``--ntasks-per-gpu``), are both given; None otherwise
    (or if they do not divide: step 2 says so)."""
    if not ("gres" in g or "gpus-per-node" in g):
        return None
    if per_gpu is not None:
        return _node_gpus(g, 1) * per_gpu or None
    if "gpus-per-task" not in g:
        return None
    try:
        each = gpu_spec(g["gpus-per-task"].value or "", "GPUs")[1]
    except Problem:
        return None
    node = _node_gpus(g, 1)
    return node // each if each and node and node % each == 0 else None


def _node_gpus(g: Given, nodes: int) -> int:
    """The GPUs a node gets by ``--gres``, ``--gpus-per-node`` or ``--gpus`` (in all, over ``nodes``), for
    ``--ntasks-per-gpu`` to count tasks from; 0 if none is readable (step 2 names the problem)."""
    for name, parse in (("gres", gres), ("gpus-per-node", lambda t: gpu_spec(t, "GPUs")),
                        ("gpus", lambda t: gpu_spec(t, "GPUs"))):
        if name in g:
            try:
                count = parse(g[name].value or "")[1]
            except Problem:
                return 0
            return count // nodes if name == "gpus" else count
    return 0


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
    if not gpu_forms and shape.per_gpu:  # --ntasks N --ntasks-per-gpu K: a GPU for every K of a node's tasks
        node_gpus = -(-shape.per_node // shape.per_gpu)
    if node_gpus == 0:
        gpu_type = None
    # --gpus-per-task gives each task its own GPUs, and so does --ntasks-per-gpu=1; the per-node and per-job
    # forms give a node's GPUs to all its tasks together (each sees them all), as Slurm does without
    # --gpu-bind. Tasks spread over nodes submission chooses share their node's GPUs.
    per_task_gpus = ("gpus-per-task" in g or (shape.per_gpu == 1 and node_gpus == shape.per_node)
                     or (shape.per_node == 1 and not shape.spread))
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
    """Memory per task (None: the partition's default), or all of each node's (``whole``), or each node's
    for its tasks to share once submission has spread them (``per_node``); and Slurm's
    ``SLURM_MEM_PER_NODE``/``_CPU``/``_GPU``, in MiB, as Slurm sets them."""

    per_task: int | None = None
    whole: bool = False
    env: dict[str, str] | None = None
    per_node: int | None = None


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
        env = {"SLURM_MEM_PER_NODE": str(size >> 20)}
        if shape.spread:  # how many tasks a node runs is submission's to choose: it shares this among them
            return Memory(per_node=size, env=env)
        return Memory(-(-size // shape.per_node), env=env)  # rounded up
    elif form == "mem-per-cpu":
        return Memory(size * cpus, env={"SLURM_MEM_PER_CPU": str(size >> 20)})
    elif gpus.per_node == 0:
        g.fail("mem-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
    elif shape.spread and gpus.shared:  # a node's GPUs, shared by the tasks submission puts there
        return Memory(per_node=size * gpus.per_node, env={"SLURM_MEM_PER_GPU": str(size >> 20)})
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
    licenses: dict[str, int] | None = None


def resolve_queue(g: Given) -> Queue:
    """6. ``--array``, ``--dependency``, ``--nice``, ``--partition``, ``--qos``, ``--account``, ``--job-name``,
    ``--comment``, ``--licenses``."""
    return Queue(array=g.get("array", array_spec), dependency=g.get("dependency", parse_dependency_list),
                 nice=g.get("nice", nice_value), partitions=g.get("partition", partition_list), qos=g.get("qos", non_empty),
                 account=g.get("account", non_empty), name=g.get("job-name", non_empty),
                 comment=g.get("comment", lambda t: t), licenses=g.get("licenses", license_list))


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
