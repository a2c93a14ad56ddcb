"""Job steps: which tasks an ``srun`` inside a job runs where, and what each task sees. Pure.

A job holds an allocation: on each of its nodes some task slots (its tasks per node), CPUs and
GPUs (``Slots``, from the job's ``NodeAllocation`` s). A step is one ``srun`` inside it: a
command run once per task on some of those nodes. ``plan_step`` turns srun's request
(``StepRequest``: ``-n``, ``-N``, ``--ntasks-per-node``, ``-c``, ``--gpus-per-task``, ...) and
the allocation into a ``StepLayout``: the step's nodes, each task's rank (``SLURM_PROCID``) and
local id (``SLURM_LOCALID``), and the GPUs each task sees; or refuses it with a ``StepError``
naming what does not fit. The rules, as Slurm users expect them inside an allocation:

* no option: the whole allocation, every node with its task slots (``-N2 --ntasks-per-node=4``
  -> 8 tasks, 4 per node);
* ``-N k``: the first k nodes (with their task slots, unless ``-n``/``--ntasks-per-node`` say
  otherwise); more nodes than the job holds is refused;
* ``-n m``: m tasks, over ``-N`` nodes, else over as many of the job's nodes as there are tasks
  (at most all of them); ``-n 1`` is one task on the first node;
* ``--ntasks-per-node p``: p tasks on each node (with ``-n``, nodes filled p at a time);
* the tasks of a node are consecutive ranks (``block``, Slurm's default: ``-N2 -n5`` is ranks
  0-2 on the first node, 3-4 on the second), or dealt round-robin (``-m cyclic``);
* ``-w``/``--nodelist`` and ``-x``/``--exclude`` choose among the job's nodes (a node the job
  does not hold is refused, naming it);
* a node runs at most as many tasks as its CPUs allow (``-c`` CPUs each, default 1) or its
  task slots, whichever is more; ``-O``/``--overcommit`` lifts that;
* GPUs: every task of a node sees the step's GPUs of that node (all the job's GPUs there, or
  the first ``--gpus-per-node``); with ``--gpus-per-task g`` each task gets g of its own, in
  order (local task i the GPUs ``i*g .. i*g+g-1`` of the node), and the node must hold enough.

``step_environment`` and ``task_environment`` give the ``SLURM_*`` variables of a step and of
one task; ``counts_text`` is Slurm's ``2(x3),1`` form of per-node counts; ``step_exit`` folds the
tasks' ends into what srun exits with and sacct shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from events import catalogue as c
from services.domain.hostlist import compress

__all__ = ["Slots", "StepRequest", "StepLayout", "StepError", "plan_step", "slots_of", "task_layout", "counts_text",
           "step_environment", "task_environment", "step_exit", "StepExit", "DISTRIBUTIONS", "step_state",
           "STEP_STATES"]

DISTRIBUTIONS = ("block", "cyclic")


class StepError(ValueError):
    """A step that does not fit the job's allocation; the message says what and why."""


@dataclass(frozen=True, slots=True)
class Slots:
    """What the job holds on one node: its task slots, CPUs (milli) and GPU device ids."""

    node: str
    tasks: int
    cpus_milli: int
    gpus: tuple[str, ...] = ()


def task_layout(held: Sequence[int], ntasks: int) -> list[int]:
    """How many of a job's ``ntasks`` tasks each of its nodes runs, the nodes in allocation order each
    holding ``held`` task slots: as Slurm lays a job's tasks out, each node as many as it holds while
    leaving at least one for each node after it. ``ntasks`` 0 (or all the slots): every slot.

    Worked through: ``-N 3 -n 7``, a gang of 3 nodes x 3 slots: 3, then min(3, 4 - 1) = 3, then 1
    (Slurm on 4-CPU nodes: 4, 2, 1); ``-n 10`` on 3 nodes of 4: 4, 4, 2 (Slurm's too); ``-n 5
    --ntasks-per-node=2``: 2, 2, 1."""
    if ntasks <= 0 or ntasks >= sum(held):
        return list(held)
    counts, left = [], ntasks
    for i, slots in enumerate(held):
        count = max(0, min(slots, left - (len(held) - 1 - i)))
        counts.append(count)
        left -= count
    return counts


def slots_of(allocations: Sequence[c.NodeAllocation], tasks_per_node: int = 1,
             cpus_milli_per_task: int = 1000, ntasks: int = 0) -> list[Slots]:
    """The job's ``Slots``, node by node in allocation order (its first node is the batch node); with
    ``ntasks`` (``JobSpec.ntasks``: fewer tasks than its nodes hold slots) a node's slots are its tasks
    of ``task_layout``, its CPUs what it holds."""
    held = [max(1, a.tasks or tasks_per_node) for a in allocations]
    tasks = task_layout(held, ntasks)
    return [Slots(a.node, max(1, n), a.cpus_milli or cpus_milli_per_task * h, tuple(a.device_ids))
            for a, n, h in zip(allocations, tasks, held)]


@dataclass(frozen=True, slots=True)
class StepRequest:
    """What srun asked for (None: not given)."""

    ntasks: int | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    gpus_per_node: int | None = None
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    distribution: str = "block"
    overcommit: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StepRequest":
        def number(key: str) -> int | None:
            value = data.get(key)
            if value is None:
                return None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StepError(f"{key.replace('_', '-')}: {value!r} is not a whole number")
            return value

        return cls(ntasks=number("ntasks"), nodes=number("nodes"), ntasks_per_node=number("ntasks_per_node"),
                   cpus_per_task=number("cpus_per_task"), gpus_per_task=number("gpus_per_task"),
                   gpus_per_node=number("gpus_per_node"), nodelist=tuple(map(str, data.get("nodelist") or ())),
                   exclude=tuple(map(str, data.get("exclude") or ())),
                   distribution=str(data.get("distribution") or "block"), overcommit=bool(data.get("overcommit")))


@dataclass(frozen=True, slots=True)
class StepLayout:
    """Where a step's tasks run: ``nodes[i]`` runs the ranks ``ranks[i]`` (local ids 0, 1, ... in that
    order), and its local task j sees the GPUs ``gpus[i][j]`` (device ids)."""

    nodes: tuple[str, ...]
    ranks: tuple[tuple[int, ...], ...]
    gpus: tuple[tuple[tuple[str, ...], ...], ...]
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    distribution: str = "block"
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def ntasks(self) -> int:
        return sum(len(r) for r in self.ranks)

    @property
    def counts(self) -> list[int]:
        return [len(r) for r in self.ranks]

    def step_gpus(self) -> int:
        """The distinct GPUs the step's tasks see, over all its nodes."""
        return sum(len({g for task in node for g in task}) for node in self.gpus)

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "ranks": [list(r) for r in self.ranks],
                "gpus": [[list(t) for t in node] for node in self.gpus], "cpus_per_task": self.cpus_per_task,
                "gpus_per_task": self.gpus_per_task, "distribution": self.distribution}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StepLayout":
        return cls(tuple(data["nodes"]), tuple(tuple(r) for r in data["ranks"]),
                   tuple(tuple(tuple(t) for t in node) for node in data["gpus"]), data.get("cpus_per_task"),
                   data.get("gpus_per_task"), data.get("distribution") or "block")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _choose_nodes(request: StepRequest, allocation: Sequence[Slots]) -> list[Slots]:
    held = {s.node: s for s in allocation}
    names = [s.node for s in allocation]
    problems = [n for n in (*request.nodelist, *request.exclude) if n not in held]
    if problems:
        raise StepError(f"the job holds no node {', '.join(problems)} (its nodes: {', '.join(names)})")
    if request.nodelist:
        wanted = set(request.nodelist)
        candidates = [held[n] for n in names if n in wanted]
    else:
        candidates = list(allocation)
    candidates = [s for s in candidates if s.node not in set(request.exclude)]
    if not candidates:
        raise StepError("--exclude leaves none of the job's nodes")
    return candidates


def plan_step(request: StepRequest, allocation: Sequence[Slots]) -> StepLayout:
    """The step's layout in the job's allocation (see the module doc); ``StepError`` if it does not fit.

    Worked through, a job of ``-N2 --ntasks-per-node=2`` with 4 GPUs per node (node-00, node-01):
    no option -> ranks (0, 1) on node-00 and (2, 3) on node-01, each task seeing the node's 4
    GPUs; ``--gpus-per-task=2`` -> local task 0 of each node gpu0, gpu1 and local task 1 gpu2,
    gpu3; ``-n 3`` -> (0, 1) and (2,); ``-N 1`` -> (0, 1) on node-00; ``-N 3`` -> refused.
    """
    if request.distribution not in DISTRIBUTIONS:
        raise StepError(f"--distribution {request.distribution!r}: Horizon lays out tasks "
                        f"{' or '.join(DISTRIBUTIONS)}")
    for name, value in (("--ntasks", request.ntasks), ("--nodes", request.nodes),
                        ("--ntasks-per-node", request.ntasks_per_node), ("--cpus-per-task", request.cpus_per_task)):
        if value is not None and value < 1:
            raise StepError(f"{name} must be at least 1, not {value}")
    candidates = _choose_nodes(request, allocation)
    warnings: list[str] = []
    held = len(allocation)

    # 1. how many nodes
    if request.nodes is not None:
        if request.nodes > len(candidates):
            where = "the job holds" if len(candidates) == held else "the step may use"
            raise StepError(f"the step asks for {_plural(request.nodes, 'node')}; {where} {len(candidates)} "
                            f"({', '.join(s.node for s in candidates)})")
        k = request.nodes
    elif request.nodelist:
        k = len(candidates)
    elif request.ntasks is not None:
        per = request.ntasks_per_node
        k = min(len(candidates), math.ceil(request.ntasks / per) if per else request.ntasks)
    else:
        k = len(candidates)
    if request.ntasks is not None and request.ntasks < k:
        if request.nodes is not None or request.nodelist:
            warnings.append(f"{_plural(request.ntasks, 'task')} cannot use {_plural(k, 'node')}: using "
                            f"{_plural(request.ntasks, 'node')}")
        k = request.ntasks
    chosen = candidates[:k]

    # 2. how many tasks on each node
    per = request.ntasks_per_node
    if request.ntasks is None and per is None:
        counts = [s.tasks for s in chosen]
    elif request.ntasks is None:
        assert per is not None
        counts = [per] * k
    elif per is not None:
        if request.ntasks > per * k:
            raise StepError(f"{_plural(request.ntasks, 'task')} at {per} per node need "
                            f"{_plural(math.ceil(request.ntasks / per), 'node')}; the step has {k}")
        left, counts = request.ntasks, []
        for _ in chosen:
            counts.append(min(per, left))
            left -= counts[-1]
        if 0 in counts:
            if request.nodes is not None:
                raise StepError(f"{_plural(request.ntasks, 'task')} at {per} per node leave some of the "
                                f"{_plural(k, 'node')} without a task")
            k = counts.index(0)
            counts, chosen = counts[:k], chosen[:k]
    else:
        base, extra = divmod(request.ntasks, k)
        counts = [base + (1 if i < extra else 0) for i in range(k)]

    # 3. room on each node: CPUs (or its task slots), then GPUs
    cpus = request.cpus_per_task
    node_gpus: list[tuple[str, ...]] = []
    for slots, count in zip(chosen, counts):
        if not request.overcommit:
            room = slots.cpus_milli // (cpus * 1000) if cpus else max(slots.tasks, slots.cpus_milli // 1000)
            if count > room:
                need = f"{count * (cpus or 1)} CPUs" if cpus else f"{count} task slots"
                raise StepError(f"{_plural(count, 'task')} on {slots.node} need {need}; the job holds "
                                f"{slots.cpus_milli / 1000:g} CPUs and {_plural(slots.tasks, 'task')} there "
                                "(ask for fewer tasks, or --overcommit)")
        gpus = slots.gpus
        if request.gpus_per_node is not None:
            if request.gpus_per_node > len(gpus):
                raise StepError(f"--gpus-per-node={request.gpus_per_node}: the job holds "
                                f"{_plural(len(gpus), 'GPU')} on {slots.node}")
            gpus = gpus[:request.gpus_per_node]
        if request.gpus_per_task and count * request.gpus_per_task > len(gpus):
            raise StepError(f"{_plural(count, 'task')} on {slots.node} at --gpus-per-task={request.gpus_per_task} "
                            f"need {_plural(count * request.gpus_per_task, 'GPU')}; the job holds {len(gpus)} there")
        node_gpus.append(gpus)

    # 4. ranks: consecutive per node (block), or dealt round-robin (cyclic)
    ranks: list[list[int]] = [[] for _ in chosen]
    if request.distribution == "cyclic":
        rank, i = 0, 0
        total = sum(counts)
        while rank < total:
            if len(ranks[i]) < counts[i]:
                ranks[i].append(rank)
                rank += 1
            i = (i + 1) % len(chosen)
    else:
        rank = 0
        for i, count in enumerate(counts):
            ranks[i] = list(range(rank, rank + count))
            rank += count
    g = request.gpus_per_task or 0
    task_gpus = tuple(
        tuple(gpus[j * g:(j + 1) * g] if g else gpus for j in range(len(node_ranks)))
        for gpus, node_ranks in zip(node_gpus, ranks)
    )
    return StepLayout(tuple(s.node for s in chosen), tuple(tuple(r) for r in ranks), task_gpus, cpus,
                      request.gpus_per_task or None, request.distribution, tuple(warnings))


def counts_text(counts: Sequence[int]) -> str:
    """Slurm's per-node counts: ``[4, 4]`` -> ``4(x2)``; ``[2, 2, 2, 1]`` -> ``2(x3),1``."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        out.append(str(counts[i]) if i == j else f"{counts[i]}(x{j - i + 1})")
        i = j + 1
    return ",".join(out)


def step_environment(layout: StepLayout, step: int, job_nodelist: str) -> dict[str, str]:
    """The ``SLURM_*`` variables every task of the step sees."""
    nodelist = compress(layout.nodes)
    per_node = counts_text(layout.counts)
    env = {
        "SLURM_STEP_ID": str(step), "SLURM_STEPID": str(step),
        "SLURM_STEP_NUM_TASKS": str(layout.ntasks), "SLURM_STEP_NUM_NODES": str(len(layout.nodes)),
        "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_NTASKS": str(layout.ntasks), "SLURM_NPROCS": str(layout.ntasks),
        "SLURM_NNODES": str(len(layout.nodes)), "SLURM_TASKS_PER_NODE": per_node,
        "SLURM_JOB_NODELIST": job_nodelist, "SLURM_NODELIST": job_nodelist,
        "SLURM_DISTRIBUTION": layout.distribution,
    }
    if layout.cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(layout.cpus_per_task)
    if layout.gpus_per_task is not None:
        env["SLURM_GPUS_PER_TASK"] = str(layout.gpus_per_task)
    return env


def task_environment(layout: StepLayout, node_index: int, local: int, cpus_milli: int,
                     visible: Sequence[str]) -> dict[str, str]:
    """The variables of local task ``local`` on the step's node ``node_index``: who it is (rank, local
    id, node), where (``SLURMD_NODENAME``), and its GPUs (``visible``: as ``CUDA_VISIBLE_DEVICES``
    names them on that node)."""
    node = layout.nodes[node_index]
    ranks = layout.ranks[node_index]
    mine = layout.gpus[node_index][local]
    node_gpus = {g for task in layout.gpus[node_index] for g in task}
    return {
        "SLURM_PROCID": str(ranks[local]), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node_index),
        "SLURMD_NODENAME": node, "SLURM_TOPOLOGY_ADDR": node, "HORIZON_NODE": node,
        "SLURM_GTIDS": ",".join(map(str, ranks)), "SLURM_CPUS_ON_NODE": str(max(1, cpus_milli // 1000)),
        "SLURM_GPUS_ON_NODE": str(len(node_gpus)),
        "CUDA_VISIBLE_DEVICES": ",".join(visible), "HORIZON_GPU_IDS": ",".join(mine),
    }


@dataclass(frozen=True, slots=True)
class StepExit:
    """How a step ended: the highest exit code of its tasks, the highest signal that killed one
    (0: none), and what srun exits with (the higher of the code and 128 + the signal, as Slurm's)."""

    exit_code: int
    signal: int
    srun_code: int


def step_exit(codes: Sequence[int | None]) -> StepExit:
    """Fold the tasks' ends (an exit code, ``-N`` for a task killed by signal N, None for one that
    never reported) into the step's: ``[0, 3, -9]`` -> exit code 3, signal 9, srun exits 137."""
    exited = [code for code in codes if code is not None and code >= 0]
    signals = [-code for code in codes if code is not None and code < 0]
    exit_code = max(exited, default=0)
    sig = max(signals, default=0)
    srun = max(exit_code, 128 + sig if sig else 0)
    if any(code is None for code in codes) and srun == 0:
        srun = 1  # a task whose end is unknown is no success
    return StepExit(exit_code, sig, srun)


# A step's state, in Slurm's names (sacct shows them): RUNNING until JobStepEnded says how it ended.
STEP_STATES = ("RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def step_state(event: c.JobStepStarted | c.JobStepEnded) -> str:
    """``RUNNING`` for a started step; an ended one ``TIMEOUT`` (srun's ``--time``), ``CANCELLED``
    (stopped), ``FAILED`` (a task exited non-zero or was killed, or its end is unknown) or ``COMPLETED``."""
    if isinstance(event, c.JobStepStarted):
        return "RUNNING"
    if event.timed_out:
        return "TIMEOUT"
    if event.cancelled:
        return "CANCELLED"
    if event.exit_code or event.signal or any(code is None for code in event.task_exit_codes):
        return "FAILED"
    return "COMPLETED"
