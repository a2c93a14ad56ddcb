"""The GPU driver as discovery and the health check ask it: ``GpuBackend``, and ``NvmlBackend`` over NVML.

``NvmlBackend`` talks to a pynvml-like module (``nvidia-ml-py``'s ``pynvml``
by default): the tests give it a fake of that module, so the code that runs
on a GPU machine is the code the tests run. Every call that some boards or
drivers do not answer (NUMA node, minor number, P2P status, NVLink state,
XID events) is optional: a missing answer is "unknown", never a failure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["GpuBackend", "GpuUnavailable", "RawGpu", "NvmlBackend", "sysfs_bus_id"]

log = logging.getLogger("horizon.agent.nvml")


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
