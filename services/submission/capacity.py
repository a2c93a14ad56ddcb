"""What the cluster could ever hold: each registered node's capacity, kept per node shape. Pure.

Submission refuses a job that no registered node could ever run (issue 16: ``--gpus 99`` on
8-GPU nodes used to wait forever). The question is about the hardware, not about now:

* every node registered and not removed counts, whatever its state: a node that is cordoned,
  draining, lost (down) or not ready yet can take the job later;
* a GPU whose ``health`` is set (an XID error, fallen off the bus) counts too: a device is
  repaired or replaced and its node registers it healthy again, so a broken GPU makes a job
  wait, not impossible. A rejection is final and a wait is not, so the doubt goes to the job.
  Placement, which decides for now, counts healthy devices only (its ``GpuCapacity``): while a
  device is broken it may call such a job ``fits_nowhere``, and the job waits for the repair.
  Counting every device also means no health report has to be folded here;
* only resources are judged (CPUs, memory, GPUs of the type/variant with at least the GPU
  memory asked): a node selector, affinity or taint no node matches is placement's to explain,
  since labels and taints change with an operator's command.

A job needs, on each of ``nodes`` distinct nodes, ``tasks_per_node`` x (CPUs, memory, GPUs): the
per-node need of ``services.domain.cluster.request_of``. It could ever run when at least
``nodes`` registered nodes hold that need when empty.

With no node registered at all (a cluster starting: the agents have not registered yet), nothing
is judged: the job is accepted and waits, as it did before this rule (the GPU vocabulary check of
``validate.normalise`` still refuses GPUs when no GPU model is known). Nodes are judged in the
order of the log, like every decision: a job submitted while only some nodes of a starting
cluster have registered is judged against those.

Cost: nodes are folded into shapes (CPUs, memory, GPUs grouped by model and memory); thousands
of identical nodes are one shape with a count. A submission is judged once (an array's template,
not each task) over the shapes, and the verdict for one per-node need is kept until a node
event changes the shapes, so a stream of same-sized jobs costs a dictionary lookup each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from events import catalogue as c
from events.resources import format_cpus, format_memory

__all__ = ["Capacity", "Need", "Shape", "GpuGroup"]


@dataclass(frozen=True, slots=True, order=True)
class GpuGroup:
    """A node's GPUs of one model and memory size."""

    type: str
    variant: str  # "" for none (sortable with the others)
    memory_bytes: int
    count: int

    @property
    def model(self) -> str:
        return f"{self.type}-{self.variant}" if self.variant else self.type


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """What a node offers when empty; nodes with the same shape are judged once."""

    cpus_milli: int
    memory_bytes: int
    gpus: tuple[GpuGroup, ...] = ()

    @classmethod
    def of(cls, event: c.NodeRegistered) -> Shape:
        counts: dict[tuple[str, str, int], int] = {}
        for d in event.gpus:  # every device, healthy or not (see the module's docstring)
            key = (d.type, d.variant or "", d.memory_bytes)
            counts[key] = counts.get(key, 0) + 1
        groups = tuple(GpuGroup(t, v, m, n) for (t, v, m), n in sorted(counts.items()))
        return cls(event.cpus_milli, event.memory_bytes, groups)

    def matching(self, need: Need) -> list[GpuGroup]:
        """The GPU groups a job's GPUs may come from (as ``cluster.device_matches`` decides)."""
        return [g for g in self.gpus if _model_matches(g, need) and g.memory_bytes >= need.gpu_memory_bytes]

    def describe(self) -> str:
        gpus = sum(g.count for g in self.gpus)
        models = ", ".join(f"{g.count} {g.model}" for g in self.gpus)
        parts = [f"{format_cpus(self.cpus_milli)} CPUs", f"{format_memory(self.memory_bytes)} memory",
                 f"{_gpus(gpus)} ({models})" if gpus else "no GPUs"]
        return ", ".join(parts)


def _model_matches(group: GpuGroup, need: Need) -> bool:
    if need.gpu_type is not None and group.type != need.gpu_type:
        return False
    return need.gpu_variant is None or group.variant == need.gpu_variant


class Need(msgspec.Struct, frozen=True):
    """What a job asks of each of its nodes, per task and per node (a hashable cache key; a frozen Struct:
    one is made per submission, six times cheaper than a frozen dataclass)."""

    cpus_milli: int  # per task
    memory_bytes: int  # per task
    gpus: int  # per task
    gpu_type: str | None
    gpu_variant: str | None
    gpu_memory_bytes: int
    nodes: int
    tasks_per_node: int
    gpus_per_node: int = 0  # > 0: the GPUs a node holds for its tasks to share (then ``gpus`` is 0)

    @property
    def node_cpus(self) -> int:
        return self.cpus_milli * self.tasks_per_node

    @property
    def node_memory(self) -> int:
        return self.memory_bytes * self.tasks_per_node

    @property
    def node_gpus(self) -> int:
        return self.gpus_per_node or self.gpus * self.tasks_per_node

    @property
    def model(self) -> str:
        if self.gpu_type is None:
            return ""
        return f"{self.gpu_type}-{self.gpu_variant}" if self.gpu_variant else self.gpu_type

    def holds(self, shape: Shape) -> bool:
        if self.node_cpus > shape.cpus_milli or self.node_memory > shape.memory_bytes:
            return False
        return self.node_gpus == 0 or sum(g.count for g in shape.matching(self)) >= self.node_gpus

    def per_task(self, amount: str) -> str:
        tasks = "task" if self.tasks_per_node == 1 else "tasks"
        return f"({amount} per task x {self.tasks_per_node} {tasks} per node)"

    def describe(self) -> str:
        """The per-node need in words: "8 a100 GPUs, 4 CPUs and 64Gi memory"."""
        parts = []
        if self.node_gpus:
            model = f"{self.model} " if self.model else ""
            parts.append(f"{self.node_gpus} {model}{'GPU' if self.node_gpus == 1 else 'GPUs'}"
                         + (f" of {format_memory(self.gpu_memory_bytes)} or more" if self.gpu_memory_bytes else ""))
        parts.append(f"{format_cpus(self.node_cpus)} {'CPU' if self.node_cpus == 1000 else 'CPUs'}")
        parts.append(f"{format_memory(self.node_memory)} memory")
        return ", ".join(parts[:-1]) + " and " + parts[-1]


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


_CACHE_SIZE = 4096  # distinct per-node needs remembered between node events


class Capacity:
    """The registered nodes' shapes, folded from ``NodeRegistered`` and ``NodeRemoved``.

    Those are the only events that change what a node offers: cordon, drain, loss and taints
    change when it can be used, not what it has (``events/catalogue/``). A node that registers
    again (an agent restarted, or a node removed and re-added) offers what it registers now.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, Shape] = {}  # node -> its shape; removed nodes are dropped
        self.shapes: dict[Shape, int] = {}  # shape -> how many nodes have it
        self._sorted: list[tuple[Shape, int]] | None = None
        self._verdicts: dict[Need, tuple[str, str] | None] = {}

    def apply(self, event: c.Event) -> bool:
        """Fold a node event; True if what the cluster offers may have changed."""
        if isinstance(event, c.NodeRegistered):
            self._drop(event.node)
            shape = Shape.of(event)
            self.nodes[event.node] = shape
            self.shapes[shape] = self.shapes.get(shape, 0) + 1
        elif isinstance(event, c.NodeRemoved) and event.node in self.nodes:
            self._drop(event.node)
        else:
            return False
        self._sorted = None
        self._verdicts.clear()
        return True

    def _drop(self, node: str) -> None:
        shape = self.nodes.pop(node, None)
        if shape is None:
            return
        left = self.shapes[shape] - 1
        if left:
            self.shapes[shape] = left
        else:
            del self.shapes[shape]

    def subset(self, names: Iterable[str]) -> Capacity:
        """What only the nodes ``names`` offer (a partition's; names not registered are left out)."""
        out = Capacity()
        for name in names:
            shape = self.nodes.get(name)
            if shape is not None:
                out.nodes[name] = shape
                out.shapes[shape] = out.shapes.get(shape, 0) + 1
        return out

    def sorted_shapes(self) -> list[tuple[Shape, int]]:
        """The shapes and their node counts, in one fixed order (never the dictionaries')."""
        if self._sorted is None:
            self._sorted = sorted(self.shapes.items())
        return self._sorted

    def holding(self, need: Need) -> int:
        """How many registered nodes could each hold ``need``'s per-node share, when empty."""
        return sum(n for shape, n in self.sorted_shapes() if need.holds(shape))

    def problem(self, need: Need) -> tuple[str, str] | None:
        """(field, reason) if no ``need.nodes`` registered nodes could ever hold the job; None if
        they could, or if no node is registered at all (nothing is known yet)."""
        if not self.nodes:
            return None
        if need in self._verdicts:
            return self._verdicts[need]
        if len(self._verdicts) >= _CACHE_SIZE:
            self._verdicts.clear()
        verdict = self._verdicts[need] = self._judge(need)
        return verdict

    def _judge(self, need: Need) -> tuple[str, str] | None:
        """The phases: (1) count the nodes that hold the per-node need; enough of them: no problem.
        (2) else name the first resource that no node has enough of, alone: GPUs (their model, their
        memory, their number), CPUs, memory; (3) else no node has them all at once; (4) else too
        few nodes have it."""
        shapes = self.sorted_shapes()
        # 1. the nodes that could hold one share of the job
        holding = sum(n for shape, n in shapes if need.holds(shape))
        if holding >= need.nodes:
            return None
        # 2. one resource alone
        if need.node_gpus:
            why = self._gpu_problem(need, shapes)
            if why is not None:
                return why
        most_cpus = max(shape.cpus_milli for shape, _ in shapes)
        if need.node_cpus > most_cpus:
            return ("resources.cpus",
                    f"{format_cpus(need.node_cpus)} CPUs per node {need.per_task(format_cpus(need.cpus_milli))} is "
                    f"more than any node has: the largest has {format_cpus(most_cpus)} CPUs")
        most_memory = max(shape.memory_bytes for shape, _ in shapes)
        if need.node_memory > most_memory:
            return ("resources.memory",
                    f"{format_memory(need.node_memory)} memory per node "
                    f"{need.per_task(format_memory(need.memory_bytes))} is more than any node has: the largest "
                    f"has {format_memory(most_memory)}")
        # 3. each resource fits some node, but no node has them all
        if holding == 0:
            kinds = sorted(shapes, key=lambda sn: (-_offered_gpus(sn[0], need), -sn[0].cpus_milli,
                                                   -sn[0].memory_bytes, sn[0]))
            listed = "; ".join(f"{shape.describe()} ({n} {'node' if n == 1 else 'nodes'})" for shape, n in kinds[:3])
            more = f"; and {len(kinds) - 3} more kinds" if len(kinds) > 3 else ""
            return ("resources", f"{need.describe()} per node: no node has all of it at once; the nodes have "
                                 f"{listed}{more}")
        # 4. too few nodes
        return ("nodes", f"{need.nodes} nodes of {need.describe()} each; only {holding} registered "
                         f"{'node' if holding == 1 else 'nodes'} could hold one")

    @staticmethod
    def _gpu_problem(need: Need, shapes: list[tuple[Shape, int]]) -> tuple[str, str] | None:
        models = [g for shape, _ in shapes for g in shape.gpus if _model_matches(g, need)]
        if not models:
            have = sorted({g.model for shape, _ in shapes for g in shape.gpus})
            if not have:
                return ("resources.gpus", "no registered node has GPUs")
            return ("resources.gpu_type", f"no registered node has {need.model} GPUs; the nodes have "
                                          f"{', '.join(have)}")
        if need.gpu_memory_bytes:
            largest = max(g.memory_bytes for g in models)
            if largest < need.gpu_memory_bytes:
                model = f"{need.model} " if need.model else ""
                return ("resources.gpu_memory",
                        f"{format_memory(need.gpu_memory_bytes)} per GPU is more than any {model}GPU has: the "
                        f"largest has {format_memory(largest)}")
        best, most = None, -1
        for shape, _ in shapes:
            count = _offered_gpus(shape, need)
            if count > most:
                best, most = shape, count
        if need.node_gpus <= most:
            return None
        assert best is not None
        groups = best.matching(need)
        kinds = sorted({g.model for g in groups})
        if len(kinds) == 1:
            offered = f"{most} {kinds[0]} {'GPU' if most == 1 else 'GPUs'}"
        else:
            by_model: dict[str, int] = {}
            for g in groups:
                by_model[g.model] = by_model.get(g.model, 0) + g.count
            offered = f"{_gpus(most)} ({', '.join(f'{n} {m}' for m, n in sorted(by_model.items()))})"
        if need.gpu_memory_bytes:
            offered += f" of {format_memory(need.gpu_memory_bytes)} or more"
        return ("resources.gpus", f"{_gpus(need.node_gpus)} per node {need.per_task(str(need.gpus))} is more than any "
                                  f"node has: the largest has {offered}")


def _offered_gpus(shape: Shape, need: Need) -> int:
    return sum(g.count for g in shape.matching(need))
