"""Submission validation as a queue group: every submission instance checks submissions on request.

One submission instance decides (it holds the lease); the others fold the
same log as hot standbys. All of them, leader and standbys, also answer
``horizon.validate.<tenant>`` in the queue group ``submission-validate``, so
the checks a client wants before it publishes — ``horizon submit --check``,
``horizon sbatch --check`` — spread over every instance, and adding
instances adds validation capacity without a second decider.

The answer is the verdict ``admit`` (``services/submission/normalise.py``)
gives on the instance's fold: the same field-by-field rules and limits, the
GPU models of the nodes registered so far, and what those nodes could ever
hold (a job too large for them is refused here too). It is advice, not a
decision: the leader decides on the submission when it reads it from the
log, with the checks against the log too (duplicate ids, dependencies on
rejected jobs, cycles), which need the decider's own basis.

Request: the ``JobSubmitted`` JSON. Answer: ``{"ok": true, "jobs": N, "partition", "warnings",
"basis_seq", "by"}`` (the partition it would run in, "" for none; what its ``JobAccepted`` would
warn) or ``{"ok": false, "field", "reason", "basis_seq", "by"}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode
from events.subjects import valid_token
from services.runtime.service import ServiceRunner
from services.domain.quoting import clipped
from services.submission.normalise import Rejection, admission

__all__ = ["ValidationServer", "VALIDATE_PREFIX", "QUEUE_GROUP", "validate_subject"]

log = logging.getLogger("horizon.submission")

VALIDATE_PREFIX = "horizon.validate"
QUEUE_GROUP = "submission-validate"


def validate_subject(tenant: str) -> str:
    return f"{VALIDATE_PREFIX}.{tenant}"


class ValidationServer:
    """Answers ``horizon.validate.<tenant>`` from ``runner``'s fold (the submission core's state)."""

    def __init__(self, nc: Any, runner: ServiceRunner[Any], instance: str) -> None:
        self.nc = nc
        self.runner = runner
        self.instance = instance
        self.answered = 0
        self._sub: Any = None

    async def serve(self, work: Awaitable[None]) -> None:
        """Answer requests while ``work`` (the instance's runner) runs."""
        self._sub = await self.nc.subscribe(f"{VALIDATE_PREFIX}.*", queue=QUEUE_GROUP, cb=self._answer)
        try:
            await work
        finally:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    def verdict(self, tenant: str, data: bytes) -> dict[str, Any]:
        state = self.runner.state
        body: dict[str, Any] = {"basis_seq": state.seq, "by": self.instance}
        try:
            event = decode(data)
        except DecodeError as exc:
            return {**body, "ok": False, "field": "", "reason": clipped(f"not a JobSubmitted: {exc}")}
        if not isinstance(event, c.JobSubmitted):
            return {**body, "ok": False, "field": "type", "reason": f"{event.event_type} is not a JobSubmitted"}
        try:
            admitted = admission(event, subject_tenant=tenant, gpu_models=state.gpu_models,
                                 limits=self.runner.core.limits, capacity=state.capacity, partitions=state.partitions,
                                 capacity_of=state.capacity_of, licenses=state.licenses)
            jobs = admitted.jobs
            state.check_account(jobs[0][1])  # a tenant asks here: its accounts and their class limits apply
            state.check_class(jobs[0][1])
        except Rejection as rej:
            return {**body, "ok": False, "field": rej.field, "reason": clipped(str(rej))}
        return {**body, "ok": True, "jobs": len(jobs), "partition": jobs[0][1].partition,
                "warnings": [clipped(w) for w in admitted.warnings]}

    async def _answer(self, msg: Any) -> None:
        if not msg.reply:
            return
        tenant = msg.subject[len(VALIDATE_PREFIX) + 1:]
        if not valid_token(tenant) or tenant.startswith("_"):
            body = {"ok": False, "field": "tenant", "reason": f"{clipped(tenant)!r} is not a tenant",
                    "by": self.instance}
        else:
            try:
                body = self.verdict(tenant, msg.data)
            except Exception as exc:  # noqa: BLE001 - a request must never take the instance down
                log.exception("validating a request failed")
                body = {"ok": False, "field": "", "reason": f"the validator failed: {clipped(str(exc))}",
                        "by": self.instance}
        self.answered += 1
        with contextlib.suppress(Exception):
            await self.nc.publish(msg.reply, json.dumps(body).encode())
