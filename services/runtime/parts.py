"""How a service tells the plumbing what is special about it: its ``ServicePart``.

Each service registers one ``ServicePart`` in its own ``part.py``
(``services/<name>/part.py``); the host (``services/front/registry.py``) lists
them, and whatever composes the services (``horizon up``, ``horizon service``,
the audit) goes through the part, never through a branch on the service's
name. A part says:

* ``make_core(settings)``: its pure core, configured from the cluster's
  ``PartSettings`` (each core takes what concerns it: scheduling the queue
  policy, placement the backfill mode, ...);
* ``make_runner(log, core, lease, settings)``: what runs the core; by default
  the shared ``ServiceRunner``, a service with more to run beside it
  (inventory's heartbeat watch and clock) returns its own object with
  ``runner`` and ``run()``;
* ``serve(log, runner, key, work)``: what every instance serves beside its
  work, leader or standby (submission answers validation requests); by
  default nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from services.runtime.log import EventLog
from services.runtime.service import ServiceRunner

if TYPE_CHECKING:
    from services.runtime.lease import Lease

__all__ = ["PartSettings", "Running", "ServicePart"]


@dataclass(frozen=True)
class PartSettings:
    """What the host configures for the whole cluster; each part takes what concerns it."""

    policy: str = "multifactor"  # the queue policy until a PolicyConfigured (scheduling)
    backfill: str = "easy"  # the default profile's backfill mode until a ProfileConfigured (placement)
    heartbeat_timeout_s: float = 10.0  # silence before a node is lost (inventory)
    tick_interval_s: float | None = 5.0  # the log's clock (inventory); None: no ticks
    max_candidates: int | None = None  # jobs a cycle offers at most (scheduling); None: its default


class Running(Protocol):
    """What a part runs: the runner of its core, and a coroutine that runs until cancelled."""

    runner: ServiceRunner[Any]

    def run(self) -> Awaitable[None]: ...


def _plain_runner(log_: EventLog, core: Any, lease: Lease | None, settings: PartSettings) -> Running:
    return ServiceRunner(log_, core, lease=lease)


def _nothing(log_: EventLog, runner: ServiceRunner[Any], key: str, work: Awaitable[None]) -> Awaitable[None]:
    return work


@dataclass(frozen=True)
class ServicePart:
    name: str  # the service name: the <service> token of its subjects and its lease
    make_core: Callable[[PartSettings], Any]
    make_runner: Callable[[EventLog, Any, "Lease | None", PartSettings], Running] = field(default=_plain_runner)
    serve: Callable[[EventLog, ServiceRunner[Any], str, Awaitable[None]], Awaitable[None]] = field(default=_nothing)
