"""The submission client that ``horizon submit`` and ``horizon sbatch`` share: a job id, the dry check,
publishing a ``JobSubmitted`` and waiting for its verdict.

It speaks to Horizon only through NATS (``services/front/client/client.py``): the dry check is a request to the
submission instances' validation queue group, the submission an input event whose answer is read from
``horizon.evt.submission.*``. Turning options or a script into a ``JobSubmitted`` is the commands' part.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import msgspec

from events import catalogue as c
from events.codec import decode_json
from events.subjects import input_subject, valid_token
from events.transport import VERDICT_WAIT_S
from services.front.client.client import await_answer, publish_input, run, session
from services.front.client.problems import Failure

__all__ = ["new_job_id", "check_submission", "check_lines", "refuse_rejected", "warning_lines", "send_submission",
           "Inbox"]


def new_job_id(user: str) -> str:
    """A fresh job id for ``user``: ``<user>-<YYYYmmdd-HHMMSS>-<6 hex>`` (``job-…`` when the user name is
    not a valid token)."""
    return f"{user if valid_token(user) else 'job'}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def check_submission(nats_url: str, event: c.JobSubmitted, timeout_s: float = 5.0) -> dict[str, Any]:
    """Ask the submission instances' validation queue group (``services/submission/validator_pool.py``)
    whether ``event`` would be accepted; nothing is published to the log."""
    import nats.errors

    from events.codec import encode
    from services.submission.validator_pool import validate_subject

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            try:
                msg = await nc.request(validate_subject(event.tenant), encode(event), timeout=timeout_s)
            except nats.errors.NoRespondersError:
                raise Failure("no submission instance answers horizon.validate: is Horizon running?") from None
            except nats.errors.TimeoutError:
                raise Failure(f"no submission instance answered within {timeout_s:g} s") from None
            return decode_json(msg.data)  # type: ignore[no-any-return]

    if not valid_token(event.tenant) or event.tenant.startswith("_"):
        return {"ok": False, "field": "tenant", "reason": f"{event.tenant!r} is not a tenant"}
    return run(go())


def warning_lines(answer: dict[str, Any], prog: str) -> list[str]:
    """The warnings of a verdict (``JobAccepted.warnings``, or a check's), one line each (for stderr)."""
    return [f"{prog}: warning: {warning}" for warning in answer.get("warnings") or ()]


def check_lines(verdict: dict[str, Any], job_id: str, as_json: bool, prog: str = "horizon submit") \
        -> tuple[list[str], list[str]]:
    """What a ``check_submission`` verdict prints: its lines for stdout, and for stderr (its warnings; none
    with ``as_json``). A job that would be rejected is said by ``refuse_rejected`` after them."""
    if as_json:
        return [json.dumps({"job_id": job_id, **verdict})], []
    said = []
    if verdict["ok"]:
        where = f" in partition {verdict['partition']}" if verdict.get("partition") else ""
        said.append(f"job {job_id} would be accepted{where}: {verdict['jobs']} job(s) "
                    f"(checked by {verdict.get('by')} at log seq {verdict.get('basis_seq')}; nothing submitted)")
    return said, warning_lines(verdict, prog)


def refuse_rejected(verdict: dict[str, Any], job_id: str) -> None:
    """A check's verdict that the job would be rejected, as a ``Failure`` (exit 1)."""
    if not verdict["ok"]:
        raise Failure(f"job {job_id} would be rejected: {verdict['reason']}")


VERDICTS = {"JobAccepted", "JobRejected", "InputRejected", "RequestRejected"}


def send_submission(nats_url: str, event: c.JobSubmitted, *, no_wait: bool = False,
                    timeout_s: float = VERDICT_WAIT_S) -> dict[str, Any]:
    """Publish a submission and wait (``timeout_s`` at most) for its verdict: ``{"job_id", "state", "seq"}``,
    with ``state`` PENDING (accepted: and ``partition``, the one it got, and ``warnings`` if its
    ``JobAccepted`` has any), REJECTED (and ``reason``, ``field``) or SUBMITTED (``no_wait``, or no
    verdict in time: then ``reason`` says so).

    The verdict is the submission service's event whose ``causation_id`` is ``seq:<the PubAck's seq>``
    (``JobAccepted``, one per task of an array; ``JobRejected``; ``InputRejected``; ``RequestRejected``
    for a job id already submitted), read from ``horizon.evt.submission.>``: the whole stream of them,
    or, connected as a tenant under accounts, that tenant's feed. A publish the log had already stored
    (a retry, the same Nats-Msg-Id) has had its verdict: the job's state is asked of the projections.
    """
    job_id = event.job_id
    subject = input_subject(event.tenant, "submit")

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            sub = None if no_wait else await Inbox.open(nc, ["horizon.evt.submission.>"])
            sent = await with_numbers_resolved(nc, event)
            seq, duplicate = await publish_input(nc, subject, sent, msg_id=job_id, with_duplicate=True)
            result: dict[str, Any] = {"job_id": job_id, "state": "SUBMITTED", "seq": seq}
            if sub is None:
                return result
            if duplicate:
                return await _known(nc, result)
            answer = await await_answer(sub, VERDICTS, timeout_s=timeout_s, causation=f"seq:{seq}")
            if answer is None:
                result["reason"] = (f"no verdict within {timeout_s:g} s (the log stored the submission at seq "
                                    f"{seq}); see `horizon show {job_id}`")
            elif answer["type"] == "JobAccepted":
                result["state"] = "PENDING"
                result["partition"] = (answer.get("spec") or {}).get("partition", "")
                number = _number(answer.get("spec") or {})
                if number:
                    result["number"] = number
                if answer.get("warnings"):
                    result["warnings"] = list(answer["warnings"])
            else:
                field = answer.get("field") or answer.get("path") or ("job_id" if answer["type"] == "RequestRejected"
                                                                       else "")
                result.update(state="REJECTED", reason=answer["reason"], field=field)
            return result

    return run(go())  # type: ignore[no-any-return]


async def _known(nc: Any, result: dict[str, Any]) -> dict[str, Any]:
    """A submission the log already held: its job's state now, from the projections."""
    from services.front.client.client import query
    from services.runtime.log import LogError

    try:
        body = await query(nc, "job", {"job_id": result["job_id"], "limit": 0})
    except LogError as exc:
        result["reason"] = f"already submitted (seq {result['seq']}); its state is unknown: {exc}"
        return result
    job = body.get("job")
    if job is None:
        result["reason"] = f"already submitted (seq {result['seq']}); no verdict is known yet"
    elif job["state"] == "REJECTED":
        result.update(state="REJECTED", reason=job.get("reason") or "rejected", field="")
    else:
        result["state"] = "PENDING" if job["state"] == "PENDING" else job["state"]
        if job.get("number"):
            result["number"] = job["number"]
    return result


def _number(spec: dict[str, Any]) -> int:
    """The number ``sbatch`` prints for an accepted job: its own, or for an array's task the array's."""
    return int(spec.get("array_number") or spec.get("number") or 0)


async def with_numbers_resolved(nc: Any, event: c.JobSubmitted) -> c.JobSubmitted:
    """``event`` with the dependencies it names by number (``afterok:4213``, ``afterok:4213_7``) named by
    the ids they stand for (``services/front/client/job_numbers.py``): the log's dependencies are on ids."""
    from services.front.client.client import query
    from services.front.client.job_numbers import numbered, resolve_ids

    refs = [d.job_id for d in event.dependencies if numbered(d.job_id) is not None]
    if not refs:
        return event
    named = await resolve_ids(nc, refs)
    for ref in refs:
        # A number names a job already accepted: one that names none is refused, as Slurm's "Job dependency
        # problem" (a job whose id is those digits, given with --job-id, is still named by its id).
        if named[ref] == ref and (await query(nc, "job", {"job_id": ref, "limit": 0})).get("job") is None:
            raise Failure(f"dependencies: no job {ref} (a job's number names a job already submitted; "
                          f"squeue or horizon jobs shows the numbers)")
    deps = [msgspec.structs.replace(d, job_id=named.get(d.job_id, d.job_id)) for d in event.dependencies]
    return msgspec.structs.replace(event, dependencies=deps)


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
