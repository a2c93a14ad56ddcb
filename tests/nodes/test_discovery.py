"""Node truth: the agent discovers this machine (CPUs, memory, NUMA) and its GPUs through NVML.

The NVML-missing path runs for real (this machine has no NVIDIA driver: ``nvmlInit`` raises
``NVMLError_LibraryNotFound``). The device path runs the real ``NvmlBackend`` over a fake of the
``pynvml`` module (the NVML boundary): boards, NVLink, XID events and lost devices as a driver
would report them, with pynvml's own error classes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from services.nodes.backends.process.discovery import (
    describe_machine, discover_gpus, gpu_model, machine_node, node_name, numa_layout, parse_cpulist,
)
from services.nodes.agent.gpu_health import GpuHealth, xid_reason
from services.nodes.backends.process.nvml import NvmlBackend
from services.nodes.spec import local_nodes


def _nvml_missing() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return True
    pynvml.nvmlShutdown()
    return False


def _meminfo_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


# ------------------------------------------------------------------------------------ the fake NVML


@dataclass
class Board:
    name: str
    memory_bytes: int
    bus_id: str  # NVML's form, 00000000:3B:00.0
    numa: int | None = None  # None: nvmlDeviceGetNumaNodeId is not supported for it
    minor: int = 0


class Handle:
    def __init__(self, index: int) -> None:
        self.index = index

    def __bool__(self) -> bool:
        return True


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml makes the subclass (NVMLError_GpuIsLost, ...)


class FakeNvml:
    """The part of ``pynvml`` the backend calls, answering like a driver with ``boards``.

    ``p2p``: sets of indices joined by NVLink as NVML's P2P status sees them, or None when the driver
    does not answer that (then ``links``: index -> remote PCI bus ids of its active NVLinks).
    """

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, boards: list[Board], p2p: list[set[int]] | None = None,
                 links: dict[int, list[str]] | None = None) -> None:
        self.boards = boards
        self.p2p = p2p
        self.links = links or {}
        self.inits = 0
        self.lost: set[int] = set()
        self.events: list[tuple[int | None, int]] = []  # (index or None for "no device", xid)
        self.registered: set[int] = set()
        self.no_events_for: set[int] = set()

    def _uuid(self, index: int) -> str:
        return f"GPU-{index:08x}-1111-2222-3333-444455556666"

    def _check(self, handle: Handle) -> int:
        if handle.index in self.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle.index

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.boards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if not 0 <= index < len(self.boards):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        for i in range(len(self.boards)):
            if self._uuid(i) == uuid:
                return Handle(i)
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return self.boards[self._check(handle)].name

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> SimpleNamespace:
        return SimpleNamespace(total=self.boards[self._check(handle)].memory_bytes, free=0, used=0)

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return self._uuid(self._check(handle))

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        return self.boards[self._check(handle)].minor

    def nvmlDeviceGetNumaNodeId(self, handle: Handle) -> int:
        numa = self.boards[self._check(handle)].numa
        if numa is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return numa

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> SimpleNamespace:
        return SimpleNamespace(busId=self.boards[self._check(handle)].bus_id.encode())  # bytes, as ctypes gives

    def nvmlDeviceGetP2PStatus(self, a: Handle, b: Handle, index: int) -> int:
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        if self.p2p is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        joined = any(a.index in group and b.index in group for group in self.p2p)
        return pynvml.NVML_P2P_STATUS_OK if joined else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        remotes = self.links.get(handle.index, [])
        if link >= max(len(remotes), 1) + 2:  # a board has a few links, some inactive
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if link < len(remotes) else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Handle, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.links[handle.index][link])

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: Handle, types: int, events: str) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError and events == "event-set"
        if handle.index in self.no_events_for:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.registered.add(handle.index)

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            raise _error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.events.pop(0)
        return SimpleNamespace(device=Handle(index) if index is not None else None,
                               eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlEventSetFree(self, events: str) -> None:
        pass


def dgx(count: int = 8) -> list[Board]:
    """An 8 x A100-SXM4-80GB box: boards 0-3 on NUMA node 0, 4-7 on node 1."""
    return [Board("NVIDIA A100-SXM4-80GB", 85899345920, f"00000000:{0x07 + 0x10 * i:02X}:00.0", numa=i // 4,
                  minor=i) for i in range(count)]


# ------------------------------------------------------------------------------------ this machine, for real


@pytest.mark.skipif(not _nvml_missing(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_discovery_finds_no_gpu_and_says_why():
    gpus, note = discover_gpus(NvmlBackend())
    assert gpus == []
    assert note == "no GPU found (NVML: NVML Shared Library Not Found)"
    spec, notes = machine_node()
    assert spec.gpus == () and notes == [note]
    assert describe_machine(spec, notes).endswith(", no GPU found (NVML: NVML Shared Library Not Found)")


def test_the_machine_node_has_this_machines_cpus_and_memory():
    spec, _ = machine_node()
    assert spec.cpus_milli == len(os.sched_getaffinity(0)) * 1000
    assert spec.memory_bytes == _meminfo_total()
    assert spec.simulated is False
    assert spec.name == node_name() and spec.name
    assert sorted(cpu for cpus in spec.numa_cpus.values() for cpu in cpus) == sorted(os.sched_getaffinity(0))
    reg = spec.registration("agent-1")
    assert reg.simulated is False and reg.cpus_milli == spec.cpus_milli and reg.node == spec.name
    named, _ = machine_node("gpu-host-7")
    assert named.name == "gpu-host-7"


def test_numa_layout_reads_the_kernels_cpulists(tmp_path):
    for node, cpus in (("node0", "0-3,8-11\n"), ("node1", "4-7,12-15\n"), ("node2", "\n")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus)
    (tmp_path / "possible").write_text("0-2\n")  # not a node directory
    # only the CPUs this process may use count; a node with none of them is left out
    assert numa_layout([0, 1, 4, 9, 12], tmp_path) == {0: (0, 1, 9), 1: (4, 12)}
    assert numa_layout([0, 1], tmp_path / "absent") == {0: (0, 1)}  # no NUMA shown: one node 0
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11] and parse_cpulist("\n") == []


@pytest.mark.parametrize(("host", "name"), [
    ("vm", "vm"), ("gpu-7.example.internal", "gpu-7"), ("rack1_n04", "rack1_n04"), ("weird host!", "weird-host"),
    ("...", "node"),
])
def test_node_names_from_host_names(host, name):
    assert node_name(host) == name


# ------------------------------------------------------------------------------------ devices, injected NVML


@pytest.mark.parametrize(("model", "expected"), [
    ("NVIDIA A100-SXM4-80GB", ("a100", "80gb")),
    ("NVIDIA A100-PCIE-40GB", ("a100", "40gb")),
    ("NVIDIA H100 80GB HBM3", ("h100", "80gb")),
    ("NVIDIA H100 PCIe", ("h100", None)),
    ("NVIDIA H100 NVL", ("h100", None)),
    ("Tesla V100-SXM2-16GB", ("v100", "16gb")),
    ("Tesla T4", ("t4", None)),
    ("NVIDIA L4", ("l4", None)),
    ("NVIDIA A10G", ("a10g", None)),
    ("NVIDIA GeForce RTX 4090", ("rtx4090", None)),
    ("NVIDIA RTX A6000", ("a6000", None)),
    ("NVIDIA GH200 480GB", ("gh200", "480gb")),
])
def test_driver_model_names_become_horizon_types_and_variants(model, expected):
    from events.resources import parse_gpu_model

    assert gpu_model(model) == expected
    gpu_type, variant = expected
    assert tuple(parse_gpu_model(f"{gpu_type}-{variant}" if variant else gpu_type)) == expected


def test_an_nvlinked_box_through_nvml():
    fake = FakeNvml(dgx(), p2p=[set(range(8))])  # NVSwitch: every pair peers over NVLink
    gpus, note = discover_gpus(NvmlBackend(fake))
    assert note == "" and fake.inits == 0  # opened and shut down again
    assert [g.id for g in gpus] == [f"gpu{i}" for i in range(8)]
    g5 = gpus[5]
    assert (g5.type, g5.variant, g5.memory_bytes) == ("a100", "80gb", 80 * 1024**3)
    assert g5.uuid == "GPU-00000005-1111-2222-3333-444455556666" and g5.minor == 5
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.interconnect for g in gpus} == {"nvlink-0"}
    assert all(g.health == "" for g in gpus)


def test_nvlink_pairs_from_the_links_and_numa_from_sysfs(tmp_path):
    boards = [Board("NVIDIA RTX A6000", 51527024640, f"00000000:{0x1A + i:02X}:00.0", numa=None, minor=i)
              for i in range(5)]
    bus = [b.bus_id for b in boards]
    # the driver gives no P2P status: NVLink bridges found link by link (0-1 and 2-3; 4 alone;
    # a link to something that is not one of our GPUs is ignored)
    fake = FakeNvml(boards, p2p=None, links={0: [bus[1]], 1: [bus[0]], 2: [bus[3], bus[3]], 3: [bus[2]],
                                             4: ["00000000:99:00.0"]})
    for i, numa in enumerate(["0", "0", "1", "-1", "garbage"]):
        device = tmp_path / "bus" / "pci" / "devices" / f"0000:{0x1a + i:02x}:00.0"
        device.mkdir(parents=True)
        (device / "numa_node").write_text(numa + "\n")
    gpus, _ = discover_gpus(NvmlBackend(fake, sys_root=tmp_path))
    assert [g.interconnect for g in gpus] == ["nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1", ""]
    assert [g.numa_node for g in gpus] == [0, 0, 1, 0, 0]  # -1 and unreadable: 0
    assert {(g.type, g.variant) for g in gpus} == {("a6000", None)}


def test_a_driver_with_no_device():
    gpus, note = discover_gpus(NvmlBackend(FakeNvml([])))
    assert gpus == [] and note == "no GPU found (NVML sees no device)"


def test_the_machine_node_with_gpus_and_how_up_says_it():
    spec, notes = machine_node("g1", NvmlBackend(FakeNvml(dgx(), p2p=[set(range(8))])))
    assert notes == [] and len(spec.gpus) == 8 and not spec.simulated
    text = describe_machine(spec, notes)
    assert text.startswith("node g1: ") and text.endswith(", 8 x a100-80gb GPUs (80Gi)")
    assert all(g.uuid for g in spec.registration("a").gpus)


# ------------------------------------------------------------------------------------ health


def test_health_reports_xid_errors_and_lost_devices_once():
    fake = FakeNvml(dgx(4), p2p=[{0, 1, 2, 3}])
    devices, _ = discover_gpus(NvmlBackend(fake))
    health = GpuHealth(NvmlBackend(fake), devices, xid_wait_ms=10)
    assert health.start() and fake.registered == {0, 1, 2, 3}
    assert health.check() == {}  # all well: the XID wait times out, every device answers
    fake.events = [(2, 79), (1, 13), (3, 43)]  # 13 and 43 are the application's fault, not the board's
    assert health.check() == {"gpu2": "XID 79: fell off the bus"}
    fake.lost.add(0)
    assert health.check() == {"gpu0": "lost: NVML cannot reach the device (GPU is lost)"}
    fake.events = [(2, 48)]
    assert health.check() == {}  # gpu2 is already out; gpu0 still lost: nothing new
    assert health.unhealthy == {"gpu2": "XID 79: fell off the bus",
                                "gpu0": "lost: NVML cannot reach the device (GPU is lost)"}
    marked = health.apply(devices)
    assert [d.health for d in marked] == ["lost: NVML cannot reach the device (GPU is lost)", "",
                                          "XID 79: fell off the bus", ""]
    assert marked[1] is devices[1]  # healthy devices are the same structs
    health.stop()
    assert fake.inits == 0


def test_an_xid_nvml_cannot_pin_on_a_device_marks_them_all():
    fake = FakeNvml(dgx(2))
    fake.no_events_for = {1}  # XID events are not supported on every board
    devices, _ = discover_gpus(NvmlBackend(fake))
    health = GpuHealth(NvmlBackend(fake), devices, xid_wait_ms=0)
    assert health.start() and fake.registered == {0}
    fake.events = [(None, 94)]
    assert health.check() == {"gpu0": "XID 94: contained ECC error", "gpu1": "XID 94: contained ECC error"}
    assert xid_reason(999) == "XID 999: critical error"


def test_health_without_a_driver_or_real_devices_watches_nothing():
    assert not GpuHealth(NvmlBackend(), [], xid_wait_ms=0).start()  # simulated nodes: nothing to watch
    dev = local_nodes(1, gpus_per_node=2)[0]
    assert dev.simulated and dev.registration("a").simulated
    assert not GpuHealth(NvmlBackend(), dev.gpus).start()  # their devices have no UUIDs
    if _nvml_missing():
        devices, _ = discover_gpus(NvmlBackend(FakeNvml(dgx(1))))
        health = GpuHealth(NvmlBackend(), devices)  # the real NVML: no library here
        assert not health.start() and health.check() == {}
