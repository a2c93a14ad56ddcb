"""Node truth: what the machine the agent runs on really has.

``discover`` reads this machine: the CPUs this process may use
(``os.sched_getaffinity``), the memory (``/proc/meminfo`` MemTotal), the NUMA
layout (``/sys/devices/system/node/node*/cpulist``; one node 0 when the
kernel shows none) and the GPUs as the NVIDIA driver reports them through
NVML (``services/nodes/backends/process/nvml.py``: the ``GpuBackend`` protocol and
``NvmlBackend``, which the tests drive through a fake of the pynvml module).
``machine_node`` turns that into the one ``NodeSpec`` the agent registers,
with the notes a person should read ("no GPU found (NVML: ...)": on a
machine without a driver ``nvmlInit`` raises ``NVMLError_LibraryNotFound``).

Per GPU: ``id`` ``gpu<index>`` (the NVML index), the model as Horizon names it
(``gpu_model``: "NVIDIA A100-SXM4-80GB" -> ``a100`` / ``80gb``), memory, UUID,
minor number (``/dev/nvidia<minor>``), NUMA node (NVML's, else the PCI
device's ``numa_node`` in sysfs, else 0) and ``interconnect``: devices joined
by NVLink (directly or through NVSwitches) share ``nvlink-<n>``, numbered in
the order of their lowest index.

While the agent runs, ``services/nodes/agent/gpu_health.py`` watches the devices
found here.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from events import catalogue as c
from events.resources import format_memory
from events.subjects import valid_token
from services.nodes.spec import NodeSpec
from services.nodes.backends.process.nvml import GpuBackend, GpuUnavailable, NvmlBackend

__all__ = ["Machine", "discover", "discover_gpus", "machine_node", "node_name", "gpu_model", "parse_cpulist",
           "numa_layout", "describe_machine"]


# ------------------------------------------------------------------------------------------------ names


_MAKERS = {"nvidia", "tesla", "geforce", "quadro", "titan"}
# Words in a model name that are not the model: form factors, memory kinds, product lines.
_NOISE = re.compile(r"^(sxm\d*|pcie|pci|hbm\d*e?|nvl|gddr\d*x?|mig|ada|generation|max-q|laptop|gpu|ti)$")
_MEMORY = re.compile(r"^(\d+)(gb|g)$")


def gpu_model(name: str) -> tuple[str, str | None]:
    """Horizon's type and variant of a driver's model name (the vocabulary of ``parse_gpu_model``).

    "NVIDIA A100-SXM4-80GB" -> ("a100", "80gb"); "NVIDIA H100 80GB HBM3" -> ("h100", "80gb");
    "Tesla V100-SXM2-16GB" -> ("v100", "16gb"); "NVIDIA GeForce RTX 4090" -> ("rtx4090", None);
    "NVIDIA RTX A6000" -> ("a6000", None); "NVIDIA L4" -> ("l4", None).
    """
    words = [w for w in re.split(r"[\s\-_/]+", name.lower()) if w]
    words = [w for w in words if w not in _MAKERS]
    variant = None
    kept = []
    for w in words:
        memory = _MEMORY.match(w)
        if memory is not None:
            variant = variant or f"{memory[1]}gb"
        elif not _NOISE.match(w):
            kept.append(w)
    gpu_type = ""
    if kept:
        gpu_type = kept[0]
        if gpu_type in ("rtx", "gtx") and len(kept) > 1:
            # "RTX 4090" -> rtx4090; "RTX A6000" -> a6000 (the professional line is named by its letter)
            gpu_type = kept[1] if kept[1][0].isalpha() else gpu_type + kept[1]
    gpu_type = re.sub(r"[^a-z0-9_]", "", gpu_type) or "gpu"
    return gpu_type, variant


def node_name(hostname: str | None = None) -> str:
    """This host's name as a node name: the short host name, with anything but letters, digits, '_'
    and '-' made '-' (node names go into NATS subjects)."""
    host = (hostname if hostname is not None else socket.gethostname()).split(".")[0]
    name = re.sub(r"[^A-Za-z0-9_-]", "-", host)[:128].strip("-") or "node"
    return name if valid_token(name) else "node"


def parse_cpulist(text: str) -> list[int]:
    """The kernel's CPU list format: ``"0-3,8,10-11"`` -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


# ------------------------------------------------------------------------------------------------ discovery


@dataclass(frozen=True)
class Machine:
    """This machine as discovery found it."""

    hostname: str
    cpus: tuple[int, ...]  # the CPU ids this process may run on
    memory_bytes: int
    numa: dict[int, tuple[int, ...]]  # NUMA node -> its usable CPU ids
    gpus: tuple[c.GpuDevice, ...] = ()
    notes: tuple[str, ...] = field(default=())


def discover_gpus(backend: GpuBackend) -> tuple[list[c.GpuDevice], str]:
    """The devices ``backend`` reports, named as Horizon names them, and a note when there are none."""
    try:
        backend.open()
    except GpuUnavailable as exc:
        return [], f"no GPU found ({exc})"
    try:
        raw = backend.gpus()
        if not raw:
            return [], "no GPU found (NVML sees no device)"
        links = {gpu.index: backend.nvlink_peers(gpu.index) for gpu in raw}
    finally:
        backend.close()
    groups = _nvlink_groups([gpu.index for gpu in raw], links)
    devices = []
    for gpu in raw:
        gpu_type, variant = gpu_model(gpu.name)
        devices.append(c.GpuDevice(
            id=f"gpu{gpu.index}", type=gpu_type, variant=variant, memory_bytes=gpu.memory_bytes,
            numa_node=gpu.numa_node if gpu.numa_node is not None and gpu.numa_node >= 0 else 0,
            interconnect=groups.get(gpu.index, ""), uuid=gpu.uuid, minor=gpu.minor,
        ))
    return devices, ""


def _nvlink_groups(indices: Sequence[int], links: dict[int, set[int]]) -> dict[int, str]:
    """Connected components of the NVLink graph (two or more devices), ``nvlink-<n>`` in the order of
    each component's lowest index."""
    parent = {i: i for i in indices}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, peers in links.items():
        for j in peers:
            if j in parent and i in parent:
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    members: dict[int, list[int]] = {}
    for i in sorted(indices):
        members.setdefault(root(i), []).append(i)
    out: dict[int, str] = {}
    for n, (_, group) in enumerate(sorted((g[0], g) for g in members.values() if len(g) > 1)):
        for i in group:
            out[i] = f"nvlink-{n}"
    return out


def usable_cpus() -> tuple[int, ...]:
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def total_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemTotal in bytes."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            value, _, unit = line.split(":", 1)[1].strip().partition(" ")
            return int(value) * (1024 if unit.strip().lower() == "kb" else 1)
    raise ValueError(f"{meminfo}: no MemTotal line")


def numa_layout(cpus: Iterable[int], nodes_dir: Path = Path("/sys/devices/system/node")) -> dict[int, tuple[int, ...]]:
    """NUMA node -> the usable CPUs on it; one node 0 holding them all when the kernel shows none."""
    usable = set(cpus)
    layout: dict[int, tuple[int, ...]] = {}
    try:
        entries = sorted(nodes_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    except OSError:
        entries = []
    for entry in entries:
        try:
            listed = parse_cpulist((entry / "cpulist").read_text())
        except (OSError, ValueError):
            continue
        mine = tuple(cpu for cpu in listed if cpu in usable)
        if mine:
            layout[int(entry.name[4:])] = mine
    return layout or {0: tuple(sorted(usable))}


def discover(backend: GpuBackend | None = None, *, root: Path = Path("/")) -> Machine:
    """This machine: usable CPUs, memory, NUMA layout and GPUs (through ``backend``, NVML by default).

    ``root`` is where ``/proc`` and ``/sys`` are read (``/``).
    """
    cpus = usable_cpus()
    gpus, note = discover_gpus(backend if backend is not None else NvmlBackend(sys_root=root / "sys"))
    return Machine(hostname=socket.gethostname(), cpus=cpus, memory_bytes=total_memory(root / "proc" / "meminfo"),
                   numa=numa_layout(cpus, root / "sys" / "devices" / "system" / "node"), gpus=tuple(gpus),
                   notes=(note,) if note else ())


def describe_machine(spec: NodeSpec, notes: Sequence[str] = ()) -> str:
    """``node vm: 2 CPUs, 23.5 GiB, no GPU found (NVML: ...)`` / ``node g1: 64 CPUs, 512 GiB, 8 x a100-80gb``."""
    cpus = spec.cpus_milli // 1000
    memory = f"{spec.memory_bytes / 1024**3:.1f}".removesuffix(".0") + " GiB"
    if spec.gpus:
        models: dict[str, int] = {}
        for d in spec.gpus:
            model = f"{d.type}-{d.variant}" if d.variant else d.type
            models[model] = models.get(model, 0) + 1
        gpus = ", ".join(f"{n} x {model} GPU{'s' if n > 1 else ''} ({format_memory(_memory_of(spec, model))})"
                         for model, n in models.items())
    else:
        gpus = next((n for n in notes if n.startswith("no GPU")), "no GPU")
    return f"node {spec.name}: {cpus} CPU{'s' if cpus != 1 else ''}, {memory}, {gpus}"


def _memory_of(spec: NodeSpec, model: str) -> int:
    return max(d.memory_bytes for d in spec.gpus if (f"{d.type}-{d.variant}" if d.variant else d.type) == model)


def machine_node(name: str | None = None, backend: GpuBackend | None = None, *, root: Path = Path("/"),
                 isolation: str = "", labels: dict[str, str] | None = None) -> tuple[NodeSpec, list[str]]:
    """The one ``NodeSpec`` of this machine (named after its host unless ``name``), and the notes
    for the person who started it ("no GPU found (NVML: NVML Shared Library Not Found)")."""
    machine = discover(backend, root=root)
    spec = NodeSpec(
        name=name or node_name(machine.hostname),
        cpus_milli=len(machine.cpus) * 1000,
        memory_bytes=machine.memory_bytes,
        gpus=machine.gpus,
        labels=dict(labels or {}),
        simulated=False,
        isolation=isolation,
        numa_cpus=dict(machine.numa),
    )
    return spec, list(machine.notes)
