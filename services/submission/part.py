"""The submission service as the host runs it: its core, and what every instance serves besides:
the validation answers and the intake of tenants' inputs."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from services.runtime.log import EventLog
from services.runtime.parts import PartSettings, ServicePart
from services.runtime.service import ServiceRunner
from services.submission.core import SubmissionCore
from services.submission.intake import IntakeServer
from services.submission.validator_pool import ValidationServer

__all__ = ["PART"]


def _core(settings: PartSettings) -> SubmissionCore:
    # The layout marker on a log without one: the other services then read horizon.evt.> alone (relay.py).
    return SubmissionCore(mark_layout=True)


def _serve(log_: EventLog, runner: ServiceRunner[Any], key: str, work: Awaitable[None]) -> Awaitable[None]:
    # Every instance, leader or standby, answers `horizon submit --check` and stores tenants'
    # inputs (two queue groups).
    # The intake applies each tenant's limits as this instance's fold of the log has them.
    nc = log_.nc  # type: ignore[attr-defined]
    intake = IntakeServer(nc, limits=lambda tenant: runner.state.tenants.of(tenant))
    return intake.serve(ValidationServer(nc, runner, key).serve(work))


PART = ServicePart("submission", _core, serve=_serve)
