"""The node model: what a node is (``NodeSpec``), the event that registers it, and a uniform cluster. Pure.

A ``NodeSpec`` is a node as its agent declares it: CPUs, memory, GPU devices
(with their NUMA node), labels and taints. ``NodeSpec.registration`` builds
the ``NodeRegistered`` the agent publishes at start-up; its id is
deterministic (``agent/NodeRegistered/<node>/<digest of the body>``), so an
agent that restarts with the same node registers it once, and one whose node
changed registers the change. ``local_nodes`` builds ``count`` identical
nodes for the development cluster (``horizon up --nodes N``), the simulator,
the benchmarks and the tests: they are ``simulated`` (their GPUs are not
real devices). A real machine's node comes from ``services/nodes/backends/process/discovery.py``.

No I/O here: the agent (``services/nodes/agent/app.py``) stamps the time and
publishes; the simulator, the benchmarks and the CLI use the same model
without starting an agent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import msgspec

from events import catalogue as c
from events.codec import encode
from services.domain.envelope import decision_id

__all__ = ["NodeSpec", "local_nodes"]


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus_milli: int
    memory_bytes: int
    gpus: tuple[c.GpuDevice, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[c.Taint, ...] = ()
    simulated: bool = False  # a development node: its GPUs (and CPUs beyond the machine's) are not real
    isolation: str = ""  # how the agent confines jobs on it ("none: ..." when it cannot)
    # NUMA node -> its CPU ids (discovery's layout; the agent pins jobs NUMA-local to their GPUs).
    # Not registered: the agent's own knowledge, not the scheduler's.
    numa_cpus: dict[int, tuple[int, ...]] = field(default_factory=dict)
    backend: str = ""  # the execution backend that offers it ("": the node agent; docs/backends.md)
    foreign: c.ForeignUse | None = None  # what work its backend did not place holds there (used, not less)

    def registration(self, agent: str, *also: object) -> c.NodeRegistered:
        """The node's ``NodeRegistered`` by ``agent``; ``also``: more of its id after the body's digest (the
        Slurm backend adds the time it saw the change)."""
        body = c.NodeRegistered(
            node=self.name,
            cpus_milli=self.cpus_milli,
            memory_bytes=self.memory_bytes,
            gpus=list(self.gpus),
            labels=dict(self.labels),
            taints=list(self.taints),
            agent=agent,
            isolation=self.isolation,
            simulated=self.simulated,
            backend=self.backend,
            foreign=self.foreign,
            correlation_id=self.name,
            source=f"agent/{self.name}",
        )
        digest = hashlib.sha1(_digest_form(body)).hexdigest()[:12]
        return msgspec.structs.replace(body, id=decision_id("agent", c.NodeRegistered, self.name, digest, *also))


def _digest_form(body: c.NodeRegistered) -> bytes:
    """The bytes a registration's id digests: its encoding, without ``backend`` when it is the node
    agent's ("") and without ``foreign`` when there is none, so that a registration keeps the id it had
    before those fields existed."""
    if body.backend and body.foreign is not None:
        return encode(body)
    fields = msgspec.to_builtins(body)
    if body.foreign is None:
        fields.pop("foreign", None)
    if not body.backend:
        fields.pop("backend", None)
    return msgspec.json.encode(fields)


def local_nodes(
    count: int,
    *,
    gpus_per_node: int = 8,
    gpu_type: str = "a100",
    cpus: int = 64,
    memory_bytes: int = 512 * 1024**3,
    gpu_memory_bytes: int = 80 * 1024**3,
    prefix: str = "node",
) -> list[NodeSpec]:
    """``count`` identical nodes; GPUs split evenly over two NUMA nodes."""
    model, _, variant = gpu_type.lower().partition("-")
    nodes = []
    for i in range(count):
        gpus = tuple(
            c.GpuDevice(
                id=f"gpu{g}",
                type=model,
                variant=variant or None,
                memory_bytes=gpu_memory_bytes,
                numa_node=0 if g < max(1, gpus_per_node // 2) else 1,
            )
            for g in range(gpus_per_node)
        )
        width = max(2, len(str(count - 1)))
        nodes.append(NodeSpec(f"{prefix}-{i:0{width}d}", cpus * 1000, memory_bytes, gpus, simulated=True))
    return nodes
