"""The inventory service as the host runs it: the runner with the heartbeat watch and the log's clock beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.inventory.app import InventoryService
from services.inventory.core import InventoryCore
from services.runtime.log import EventLog
from services.runtime.parts import PartSettings, Running, ServicePart

if TYPE_CHECKING:
    from services.runtime.lease import Lease

__all__ = ["PART"]


def _core(settings: PartSettings) -> InventoryCore:
    return InventoryCore()


def _runner(log_: EventLog, core: Any, lease: Lease | None, settings: PartSettings) -> Running:
    return InventoryService(log_, getattr(log_, "nc", None), core=core, heartbeat_timeout_s=settings.heartbeat_timeout_s,
                            tick_interval_s=settings.tick_interval_s, lease=lease)


PART = ServicePart("inventory", _core, make_runner=_runner)
