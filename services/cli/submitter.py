"""The submission client that ``horizon submit`` and ``horizon sbatch`` share: a job id, the dry check,
publishing a ``JobSubmitted`` and waiting for its verdict.

It speaks to Horizon only through NATS (``services/cli/client.py``): the dry check is a request to the
submission instances' validation queue group, the submission an input event whose answer is read from
``horizon.evt.submission.*``. Turning options or a script into a ``JobSubmitted`` is the commands' part.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import click

from events import catalogue as c
from events.arrays import parse_array
from events.subjects import input_subject, valid_token
from services.cli.client import await_answer, publish_input, session
from services.cli.options import run

__all__ = ["new_job_id", "check_submission", "report_check", "send_submission", "Inbox"]


def new_job_id(user: str) -> str:
    """A fresh job id for ``user``: ``<user>-<YYYYmmdd-HHMMSS>-<6 hex>`` (``job-…`` when the user name is
    not a valid token)."""
    return f"{user if valid_token(user) else 'job'}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def check_submission(nats_url: str, event: c.JobSubmitted, timeout_s: float = 5.0) -> dict[str, Any]:
    """Ask the submission instances' validation queue group (``services/submission/validation.py``)
    whether ``event`` would be accepted; nothing is published to the log."""
    import nats.errors

    from events.codec import encode
    from services.submission.validation import validate_subject

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            try:
                msg = await nc.request(validate_subject(event.tenant), encode(event), timeout=timeout_s)
            except nats.errors.NoRespondersError:
                raise click.ClickException("no submission instance answers horizon.validate: is Horizon running?") \
                    from None
            except nats.errors.TimeoutError:
                raise click.ClickException(f"no submission instance answered within {timeout_s:g} s") from None
            return json.loads(msg.data)  # type: ignore[no-any-return]

    if not valid_token(event.tenant) or event.tenant.startswith("_"):
        return {"ok": False, "field": "tenant", "reason": f"{event.tenant!r} is not a tenant"}
    return run(go())


def report_check(verdict: dict[str, Any], job_id: str, as_json: bool) -> None:
    """Print a ``check_submission`` verdict; a job that would be rejected is an error (exit 1)."""
    if as_json:
        click.echo(json.dumps({"job_id": job_id, **verdict}))
    elif verdict["ok"]:
        click.echo(f"job {job_id} would be accepted: {verdict['jobs']} job(s) "
                   f"(checked by {verdict.get('by')} at log seq {verdict.get('basis_seq')}; nothing submitted)")
    if not verdict["ok"]:
        raise click.ClickException(f"job {job_id} would be rejected: {verdict['reason']}")


def send_submission(nats_url: str, event: c.JobSubmitted, *, no_wait: bool = False,
                    first_index: int | None = None) -> dict[str, Any]:
    """Publish a submission and wait (10 s at most) for its verdict: ``{"job_id", "state", "seq"}``, with
    ``state`` PENDING, REJECTED (and ``reason``, ``field``) or SUBMITTED (no answer yet, or ``no_wait``).

    ``first_index``: the first task's index when ``event`` is an array (default: parsed from ``event.array``).
    """
    job_id = event.job_id
    if first_index is None and event.array is not None:
        first_index = parse_array(event.array, "--array").indices[0]
    subject = input_subject(event.tenant, "submit")
    # An array's verdict: JobRejected about the array, or a JobAccepted per task (the first is enough).
    answer_subjects = [f"horizon.evt.submission.*.{job_id}"]
    if first_index is not None:
        answer_subjects = [f"horizon.evt.submission.JobRejected.{job_id}",
                           f"horizon.evt.submission.JobAccepted.{job_id}_{first_index}"]

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            sub = await Inbox.open(nc, answer_subjects) if valid_token(job_id) else None
            seq = await publish_input(nc, subject, event, msg_id=job_id)
            result: dict[str, Any] = {"job_id": job_id, "state": "SUBMITTED", "seq": seq}
            if no_wait or sub is None:
                return result
            answer = await await_answer(sub, {"JobAccepted", "JobRejected"}, timeout_s=10.0)
            if answer is None:
                return result
            if answer["type"] == "JobRejected":
                result.update(state="REJECTED", reason=answer["reason"], field=answer.get("field", ""))
            else:
                result["state"] = "PENDING"
            return result

    return run(go())  # type: ignore[no-any-return]


class Inbox:
    """Messages of several subjects, read one at a time like a subscription's ``next_msg``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    @classmethod
    async def open(cls, nc: Any, subjects: list[str]) -> Inbox:
        inbox = cls()

        async def put(msg: Any) -> None:
            inbox.queue.put_nowait(msg)

        for subject in subjects:
            await nc.subscribe(subject, cb=put)
        return inbox

    async def next_msg(self, timeout: float) -> Any:
        return await asyncio.wait_for(self.queue.get(), timeout)
