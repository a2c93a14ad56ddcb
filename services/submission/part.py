"""The submission service as the host runs it: its core, and the validation answers every instance gives."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from services.runtime.log import EventLog
from services.runtime.parts import PartSettings, ServicePart
from services.runtime.service import ServiceRunner
from services.submission.core import SubmissionCore
from services.submission.validation import ValidationServer

__all__ = ["PART"]


def _core(settings: PartSettings) -> SubmissionCore:
    return SubmissionCore()


def _serve(log_: EventLog, runner: ServiceRunner[Any], key: str, work: Awaitable[None]) -> Awaitable[None]:
    # Every instance, leader or standby, answers `horizon submit --check` (a queue group).
    return ValidationServer(log_.nc, runner, key).serve(work)  # type: ignore[attr-defined]


PART = ServicePart("submission", _core, serve=_serve)
