"""GPU health while the agent runs: ``GpuHealth.check()`` -> the devices that turned unhealthy, and why.

Two signals, both from the driver (``services/nodes/backends/process/nvml.py``): XID critical
error events (NVML's event set, waited on with a short timeout) and devices
NVML can no longer reach (lost from the bus, needing a reset). The agent
calls ``check()`` periodically and re-registers its node with the reason in
the device's ``health``; placement then neither chooses nor counts it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from events import catalogue as c
from services.nodes.backends.process.nvml import GpuBackend, GpuUnavailable

__all__ = ["GpuHealth", "xid_reason", "APPLICATION_XIDS"]

log = logging.getLogger("horizon.agent.gpu_health")


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
