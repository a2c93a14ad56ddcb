"""Node truth: what the machine the agent runs on really has.

``discover`` reads this machine: the CPUs this process may use
(``os.sched_getaffinity``), the memory (``/proc/meminfo`` MemTotal), the NUMA
layout (``/sys/devices/system/node/node*/cpulist``; one node 0 when the
kernel shows none) and the GPUs as the NVIDIA driver reports them through
NVML. ``machine_node`` turns that into the one ``NodeSpec`` the agent
registers, with the notes a person should read ("no GPU found (NVML: ...)").

NVML sits behind a small protocol, ``GpuBackend``; ``NvmlBackend`` is the
real one, written over a pynvml-like module (``nvidia-ml-py``). The tests
hand ``NvmlBackend`` a fake of that module, so the code that runs on a GPU
machine is the code the tests run; on a machine without a driver
``nvmlInit`` raises ``NVMLError_LibraryNotFound`` and discovery finds no GPU.

Per GPU: ``id`` ``gpu<index>`` (the NVML index, what ``CUDA_VISIBLE_DEVICES``
counts when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), the model as Horizon names it
(``gpu_model``: "NVIDIA A100-SXM4-80GB" -> ``a100`` / ``80gb``), memory, UUID,
minor number (``/dev/nvidia<minor>``), NUMA node (NVML's, else the PCI
device's ``numa_node`` in sysfs, else 0) and ``interconnect``: devices joined
by NVLink (directly or through NVSwitches) share ``nvlink-<n>``, numbered in
the order of their lowest index.

``GpuHealth`` watches the devices while the agent runs: ``check()`` returns
the devices that turned unhealthy since the last call, with the reason (an
XID critical error, a device NVML can no longer reach). The agent re-registers
its node with that reason in the device's ``health``; placement skips it.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from events import catalogue as c
from events.resources import format_memory
from events.subjects import valid_token
from services.agent.nodes import NodeSpec

__all__ = [
    "GpuBackend", "GpuUnavailable", "RawGpu", "NvmlBackend", "Machine", "GpuHealth", "discover", "discover_gpus",
    "machine_node", "node_name", "gpu_model", "parse_cpulist", "xid_reason", "describe_machine",
]

log = logging.getLogger("horizon.agent.discovery")


class GpuUnavailable(Exception):
    """The GPU backend cannot be used at all (no driver, no library); the message says why."""


@dataclass(frozen=True)
class RawGpu:
    """One device as the driver describes it, before Horizon names it."""

    index: int
    name: str  # the driver's model name, "NVIDIA A100-SXM4-80GB"
    memory_bytes: int
    uuid: str
    minor: int | None = None
    numa_node: int | None = None  # None: the driver does not say
    pci_bus_id: str = ""  # sysfs form, "0000:3b:00.0"


class GpuBackend(Protocol):
    """The few questions discovery and the health check ask of a GPU driver."""

    def open(self) -> None:
        """Start talking to the driver; raises ``GpuUnavailable`` with the reason."""

    def close(self) -> None: ...

    def gpus(self) -> list[RawGpu]:
        """Every device, by index."""

    def nvlink_peers(self, index: int) -> set[int]:
        """The indices of the devices NVLink joins to device ``index`` (empty where unknown)."""

    def problem(self, uuid: str) -> str:
        """Why the device cannot be reached ("" when it answers)."""

    def watch_xids(self) -> None:
        """Register for XID critical error events where the driver supports them."""

    def next_xid(self, timeout_ms: int) -> tuple[str, int] | None:
        """The next XID event (device UUID, "" for all devices; XID number), None after ``timeout_ms``."""


# ------------------------------------------------------------------------------------------------ NVML


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs names it: ``0000:3b:00.0``."""
    domain, _, rest = nvml_bus_id.strip().partition(":")
    if not rest:
        return nvml_bus_id.strip().lower()
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return nvml_bus_id.strip().lower()


# Errors that mean the device itself is gone or broken (not "this query is not supported").
_LOST_ERRORS = {"NVMLError_GpuIsLost": "GPU is lost", "NVMLError_NotFound": "not found",
                "NVMLError_ResetRequired": "needs a reset", "NVMLError_Unknown": "unknown error"}


class NvmlBackend:
    """``GpuBackend`` over NVML through a pynvml-like module (``nvidia-ml-py``'s ``pynvml`` by default).

    ``sys_root`` is where sysfs is mounted (``/sys``): the PCI device's ``numa_node`` is read there
    when NVML does not say.
    """

    def __init__(self, nvml: Any = None, sys_root: Path = Path("/sys")) -> None:
        self._nvml = nvml
        self.sys_root = sys_root
        self._open = False
        self._events: Any = None
        self._handles: dict[int, Any] = {}

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise GpuUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
            self._nvml = pynvml
        return self._nvml

    def open(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML: {_text(exc)}") from None
        except OSError as exc:  # the library is there but cannot be loaded
            raise GpuUnavailable(f"NVML: {exc}") from None
        self._open = True

    def close(self) -> None:
        if not self._open:
            return
        nvml = self.nvml
        if self._events is not None:
            try:
                nvml.nvmlEventSetFree(self._events)
            except nvml.NVMLError:
                pass
            self._events = None
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
        self._open = False
        self._handles.clear()

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._handles[index] = self.nvml.nvmlDeviceGetHandleByIndex(index)
        return handle

    def _optional(self, call: str, *args: Any) -> Any:
        """A query some devices or drivers do not answer: None then."""
        nvml = self.nvml
        fn = getattr(nvml, call, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except nvml.NVMLError:
            return None

    def gpus(self) -> list[RawGpu]:
        nvml = self.nvml
        out = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = self._handle(index)
            pci = self._optional("nvmlDeviceGetPciInfo", handle)
            bus_id = sysfs_bus_id(_text(pci.busId)) if pci is not None else ""
            numa = self._optional("nvmlDeviceGetNumaNodeId", handle)
            if numa is None or numa < 0:
                numa = self._sysfs_numa(bus_id)
            out.append(RawGpu(
                index=index,
                name=_text(nvml.nvmlDeviceGetName(handle)),
                memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                minor=self._optional("nvmlDeviceGetMinorNumber", handle),
                numa_node=numa,
                pci_bus_id=bus_id,
            ))
        return out

    def _sysfs_numa(self, bus_id: str) -> int | None:
        if not bus_id:
            return None
        try:
            node = int((self.sys_root / "bus" / "pci" / "devices" / bus_id / "numa_node").read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None  # -1: the platform has no NUMA affinity for it

    def nvlink_peers(self, index: int) -> set[int]:
        """Peers by NVML's peer-to-peer NVLink status (which also sees links through NVSwitches);
        where the driver does not answer that, by the remote PCI devices of the device's own links."""
        nvml = self.nvml
        count = nvml.nvmlDeviceGetCount()
        mine = self._handle(index)
        peers: set[int] = set()
        try:
            for other in range(count):
                if other != index:
                    status = nvml.nvmlDeviceGetP2PStatus(mine, self._handle(other), nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                    if status == nvml.NVML_P2P_STATUS_OK:
                        peers.add(other)
            return peers
        except (nvml.NVMLError, AttributeError):
            pass
        by_bus: dict[str, int] = {}
        for other in range(count):
            pci = self._optional("nvmlDeviceGetPciInfo", self._handle(other))
            if pci is not None:
                by_bus[sysfs_bus_id(_text(pci.busId))] = other
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(mine, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(mine, link)
            except nvml.NVMLError:
                break  # no such link (or no NVLink at all)
            other = by_bus.get(sysfs_bus_id(_text(remote.busId)))
            if other is not None and other != index:
                peers.add(other)
        return peers

    def problem(self, uuid: str) -> str:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            nvml.nvmlDeviceGetMemoryInfo(handle)
        except nvml.NVMLError as exc:
            what = _LOST_ERRORS.get(type(exc).__name__)
            return f"lost: NVML cannot reach the device ({what})" if what else ""
        return ""

    def watch_xids(self) -> None:
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.info("no XID events from NVML: %s", _text(exc))
            return
        watched = 0
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                nvml.nvmlDeviceRegisterEvents(self._handle(index), nvml.nvmlEventTypeXidCriticalError, events)
                watched += 1
            except nvml.NVMLError as exc:  # NotSupported on some boards
                log.info("no XID events for gpu%d: %s", index, _text(exc))
        if watched:
            self._events = events
        else:
            try:
                nvml.nvmlEventSetFree(events)
            except nvml.NVMLError:
                pass

    def next_xid(self, timeout_ms: int) -> tuple[str, int] | None:
        if self._events is None:
            return None
        nvml = self.nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        try:
            data = wait(self._events, timeout_ms)
        except nvml.NVMLError_Timeout:
            return None
        if data.eventType != nvml.nvmlEventTypeXidCriticalError:
            return "", -1  # not an XID; the caller skips it
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(data.device)) if data.device else ""
        except nvml.NVMLError:
            uuid = ""  # which device is not known: every device is suspect
        return uuid, int(data.eventData)


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


# ------------------------------------------------------------------------------------------------ health


# XIDs an application causes (bad address, illegal instruction, its own kill): the device is fine.
# NVIDIA's Kubernetes device plugin skips the same ones.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def xid_reason(xid: int) -> str:
    """``XID 79: fell off the bus``."""
    return f"XID {xid}: {_XIDS.get(xid, 'critical error')}"


class GpuHealth:
    """Watches ``devices`` (this node's, with their UUIDs) through ``backend``.

    ``start()`` opens the backend and registers for XID events; each ``check()`` then (1) drains the
    XID events, waiting at most ``xid_wait_ms`` for the first, (2) asks after every device still
    healthy, and returns the devices that turned unhealthy in this call: device id -> reason. A
    device stays unhealthy until the agent restarts (an XID 79 needs a reset, at least). ``check``
    blocks up to ``xid_wait_ms``: an asyncio agent calls it in a thread (``asyncio.to_thread``).
    ``start()`` returns False (and ``check`` finds nothing) when the backend cannot be opened.
    """

    def __init__(self, backend: GpuBackend, devices: Sequence[c.GpuDevice], *, xid_wait_ms: int = 100,
                 max_events: int = 1000) -> None:
        self.backend = backend
        self.devices = {d.id: d for d in devices if d.uuid}
        self.by_uuid = {d.uuid: d.id for d in self.devices.values()}
        self.xid_wait_ms = xid_wait_ms
        self.max_events = max_events
        self.unhealthy: dict[str, str] = {d.id: d.health for d in devices if d.health}
        self.started = False

    def start(self) -> bool:
        if not self.devices:
            return False
        try:
            self.backend.open()
        except GpuUnavailable as exc:
            log.warning("GPU health is not watched: %s", exc)
            return False
        self.backend.watch_xids()
        self.started = True
        return True

    def stop(self) -> None:
        if self.started:
            self.backend.close()
            self.started = False

    def check(self) -> dict[str, str]:
        if not self.started:
            return {}
        found: dict[str, str] = {}
        # 1. XID events: the first wait is the poll interval's grace, the rest are drained at once.
        wait = self.xid_wait_ms
        for _ in range(self.max_events):
            event = self.backend.next_xid(wait)
            if event is None:
                break
            wait = 0
            uuid, xid = event
            if xid < 0 or xid in APPLICATION_XIDS:
                continue
            targets = [self.by_uuid[uuid]] if uuid in self.by_uuid else ([] if uuid else list(self.devices))
            for device in targets:
                if device not in self.unhealthy and device not in found:
                    found[device] = xid_reason(xid)
        # 2. Every device still believed healthy must answer.
        for device_id, device in self.devices.items():
            if device_id in self.unhealthy or device_id in found:
                continue
            why = self.backend.problem(device.uuid)
            if why:
                found[device_id] = why
        self.unhealthy.update(found)
        return found

    def apply(self, devices: Sequence[c.GpuDevice]) -> tuple[c.GpuDevice, ...]:
        """``devices`` with ``health`` set to the reason of those found unhealthy."""
        return tuple(msgspec.structs.replace(d, health=self.unhealthy[d.id]) if d.id in self.unhealthy
                     and d.health != self.unhealthy[d.id] else d for d in devices)

