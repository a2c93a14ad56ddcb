"""Requests about jobs, as ``horizon cancel``, ``hold``, ``release`` and ``update`` and the dashboard send them.

A request goes to ``horizon.in.<tenant>.<verb>`` about one's own jobs, or as an operator to
``horizon.in._admin.<verb>`` about anyone's. Submission answers each on ``horizon.evt.submission.*``
with ``causation_id = seq:<the request's seq>``: one answer about a job, one per live task about an
array (its job id).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from events import catalogue as c
from events.codec import decode_json
from events.subjects import ADMIN_TENANT, admin_subject, input_subject, tenant_view, valid_job_key, valid_token
from services.front.client.client import default_user, publish_input, query_all, session

__all__ = ["DONE", "CANCEL_STATES", "LIVE_STATES", "request_subject", "names_a_job", "request_events",
           "update_event", "ask", "await_answers", "matching_jobs", "cancel_requests"]

# What each answer means, in a word.
DONE = {"JobCancelled": "cancelled", "JobStopRequested": "stopping", "JobHeld": "held", "JobReleased": "released",
        "JobPriorityChanged": "priority changed", "RequestRejected": "rejected"}
# ``cancel --state``'s words, as the read model's states (PENDING with held jobs, as Slurm).
CANCEL_STATES = {"PENDING": ["PENDING", "HELD"], "PD": ["PENDING", "HELD"], "RUNNING": ["SCHEDULED", "RUNNING"],
                 "R": ["SCHEDULED", "RUNNING"], "HELD": ["HELD"], "SCHEDULED": ["SCHEDULED"]}
LIVE_STATES = ["PENDING", "HELD", "SCHEDULED", "RUNNING"]


def request_subject(verb: str, admin: bool, tenant: str) -> str:
    return admin_subject(verb) if admin else input_subject(tenant, verb)


def names_a_job(job_id: str, admin: bool) -> bool:
    """A job id; for an operator also a tenant's job by its key in the log, ``<tenant>:<id>`` (a job that
    came through the intake under accounts: events/subjects.py ``job_key``)."""
    return valid_token(job_id) or (admin and valid_job_key(job_id))


def request_events(cls: type[c.Event], job_ids: tuple[str, ...], admin: bool, tenant: str,
                   reason: str) -> list[tuple[str, c.Event]]:
    """One request of ``cls`` per job id, in the order given, duplicates once. ValueError naming the
    first id that names no job."""
    events = []
    for job_id in dict.fromkeys(job_ids):
        if not names_a_job(job_id, admin):
            raise ValueError(f"{job_id!r} is not a job id")
        fields: dict[str, Any] = {"job_id": job_id, "tenant": ADMIN_TENANT if admin else tenant, "user": default_user()}
        if "reason" in cls.__struct_fields__:
            fields["reason"] = reason
        events.append((job_id, cls(ts=time.time(), source="horizon-cli", correlation_id=job_id, **fields)))
    return events


def update_event(job_id: str, admin: bool, tenant: str, priority_class: str | None,
                 nice: int | None) -> c.JobUpdateRequested:
    """The request to change a job's priority (ValueError if ``job_id`` names no job)."""
    if not names_a_job(job_id, admin):
        raise ValueError(f"{job_id!r} is not a job id")
    return c.JobUpdateRequested(ts=time.time(), source="horizon-cli", correlation_id=job_id, job_id=job_id,
                                tenant=ADMIN_TENANT if admin else tenant, priority_class=priority_class, nice=nice,
                                user=default_user())


async def await_answers(sub: Any, seq: int, job_id: str, timeout_s: float = 10.0,
                        quiet_s: float = 0.5) -> list[dict[str, Any]]:
    """Submission's answers to the request stored at ``seq`` (they carry ``causation_id = seq:<seq>``).

    A job gets one answer, about itself; an array one per task, so once the first has come
    the others are collected until ``quiet_s`` passes without one.
    """
    import nats.errors

    cause = f"seq:{seq}"
    answers: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        remaining = deadline - loop.time()
        if answers:
            remaining = min(remaining, quiet_s)
        if remaining <= 0:
            return answers
        try:
            msg = await sub.next_msg(timeout=remaining)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return answers
        try:
            body = decode_json(msg.data)
        except ValueError:
            continue
        if not isinstance(body, dict) or body.get("causation_id") != cause:
            continue
        answers.append(body)
        if body.get("job_id") == job_id:
            return answers  # about the job itself: a job, or an array with no live task


async def ask(nats_url: str, verb: str, events: list[tuple[str, c.Event]], admin: bool,
              tenant: str) -> dict[str, list[dict[str, Any]]]:
    """Publish a request about each job (or array) in turn; each one's answers, by job id."""
    subject = request_subject(verb, admin, tenant)
    async with session(nats_url) as nc:
        sub = await nc.subscribe("horizon.evt.submission.*.*")
        answered: dict[str, list[dict[str, Any]]] = {}
        for job_id, event in events:
            seq = await publish_input(nc, subject, event, msg_id=f"{verb}/{job_id}/{uuid.uuid4().hex}")
            answered[job_id] = await await_answers(sub, seq, job_id)
        return answered


async def matching_jobs(nc: Any, *, tenant: str, admin: bool, name: str | None, user: str | None,
                        state: str | None, account: str | None) -> list[str]:
    """The live jobs matching ``cancel``'s filters, as the read model lists them (one's own tenant's
    unless ``admin``)."""
    states = CANCEL_STATES[state.upper()] if state else LIVE_STATES
    body = await query_all(nc, "jobs", {"states": states, "tenant": None if admin else tenant,
                                        "account": account, "user": user}, "jobs")
    return [row["job_id"] for row in body["jobs"] if name is None or row["name"] == name]


async def cancel_requests(nc: Any, targets: list[str], *, tenant: str, admin: bool, reason: str,
                          advance: Any = None, timeout_s: float = 10.0,
                          quiet_s: float = 0.5) -> dict[str, list[dict[str, Any]]]:
    """Publish a cancel request per job id and collect submission's answers to each (by its request's
    seq): one about the job itself, or, for an array's id, one per live task (``ID_N``), gathered
    until ``quiet_s`` passes without another. ``advance()`` is called as each target is answered."""
    subject = request_subject("cancel", admin, tenant)
    who = default_user()
    answers: dict[str, list[dict[str, Any]]] = {}
    done: set[str] = set()
    asked: dict[str, str] = {}  # "seq:<n>" -> job id
    early: dict[str, list[dict[str, Any]]] = {}  # answers that came before their publish was acknowledged
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()
    last_task: dict[str, float] = {}  # array id -> when its last task's answer came

    def finish(job: str) -> None:
        if job not in done:
            done.add(job)
            if advance is not None:
                advance()
        if len(done) == len(targets):
            finished.set()

    def take(body: dict[str, Any]) -> None:
        job = asked.get(body.get("causation_id", ""))
        if job is None or job in done:
            return
        about = str(body.get("job_id") or "")
        if not admin:  # a tenant's feed names its jobs by their keys in the log (<tenant>:<id>)
            about = tenant_view(tenant, about)
        if about == job:
            answers.setdefault(job, []).append(body)
            finish(job)
        elif about.startswith(job + "_"):  # a task of the array named by ``job``
            answers.setdefault(job, []).append(body)
            last_task[job] = loop.time()

    async def on_msg(msg: Any) -> None:
        try:
            body = decode_json(msg.data)
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        cause = str(body.get("causation_id") or "")
        if cause in asked:
            take(body)
        elif cause.startswith("seq:"):
            early.setdefault(cause, []).append(body)

    sub = await nc.subscribe("horizon.evt.submission.*.*", cb=on_msg)
    try:
        for job_id in targets:
            event = c.JobCancelRequested(ts=time.time(), source="horizon-cli", correlation_id=job_id, job_id=job_id,
                                         tenant=ADMIN_TENANT if admin else tenant, reason=reason, user=who)
            seq = await publish_input(nc, subject, event, msg_id=f"cancel/{job_id}/{uuid.uuid4().hex}")
            asked[f"seq:{seq}"] = job_id
            for body in early.pop(f"seq:{seq}", []):
                take(body)
        deadline = loop.time() + timeout_s
        while not finished.is_set() and loop.time() < deadline:
            for job, when in list(last_task.items()):
                if job not in done and loop.time() - when >= quiet_s:
                    finish(job)  # an array: its tasks have answered
            before = sum(len(a) for a in answers.values())
            try:
                await asyncio.wait_for(finished.wait(), min(quiet_s / 2, max(0.0, deadline - loop.time())))
            except asyncio.TimeoutError:
                if sum(len(a) for a in answers.values()) > before:
                    deadline = max(deadline, loop.time() + 2.0)  # still answering: give it time
    finally:
        await sub.unsubscribe()
    return answers
