"""Requests about jobs: ``horizon cancel``, ``hold``, ``release`` and ``update``.

Requests go to ``horizon.in.<tenant>.<verb>`` about one's own jobs, or with ``--admin`` to
``horizon.in._admin.<verb>`` about anyone's. ``cancel``, ``hold`` and ``release`` take several job ids,
as ``scancel`` does (one request each, a line of answer each). A job id naming an array asks for every
live task, and the command reports the answers together. ``cancel`` also takes squeue-like filters (``scancel``'s
``--name``, ``--user``, ``--state``, ``--account``) and cancels every matching job.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import click
from rich.console import Console

from events import catalogue as c
from events.codec import decode_json
from events.subjects import ADMIN_TENANT, admin_subject, input_subject, tenant_view, valid_job_key, valid_token
from services.front.client.client import default_user, publish_input, query_all, session
from services.front.cli.options import admin_option, nats_option, run, tenant_option

__all__ = ["cancel", "hold", "release", "update", "cancel_requests", "register"]


_DONE = {"JobCancelled": "cancelled", "JobStopRequested": "stopping", "JobHeld": "held", "JobReleased": "released",
         "JobPriorityChanged": "priority changed", "RequestRejected": "rejected"}


async def _await_answers(sub: Any, seq: int, job_id: str, timeout_s: float = 10.0,
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


def _ask(nats_url: str, verb: str, events: list[tuple[str, c.Event]], admin: bool, tenant: str,
         as_json: bool) -> None:
    """Publish a request about each job (or array) in turn, print the answers, fail if one of them was
    carried out for none of its tasks."""
    subject = admin_subject(verb) if admin else input_subject(tenant, verb)

    async def go() -> dict[str, list[dict[str, Any]]]:
        async with session(nats_url) as nc:
            sub = await nc.subscribe("horizon.evt.submission.*.*")
            answered: dict[str, list[dict[str, Any]]] = {}
            for job_id, event in events:
                seq = await publish_input(nc, subject, event, msg_id=f"{verb}/{job_id}/{uuid.uuid4().hex}")
                answered[job_id] = await _await_answers(sub, seq, job_id)
            return answered

    _report(verb, run(go()), as_json)


def _report(verb: str, answered: dict[str, list[dict[str, Any]]], as_json: bool) -> None:
    """Each job's answers in a line (an array's tasks counted by outcome, the refused ones listed on
    stderr); exit 1 naming every job whose request was not answered or refused for all of it."""
    if as_json:
        if len(answered) == 1:
            [answers] = answered.values()
            click.echo(json.dumps(answers if len(answers) != 1 else answers[0]))
        else:
            click.echo(json.dumps([a for answers in answered.values() for a in answers]))
    failed = []
    for job_id, answers in answered.items():
        if not answers:
            failed.append(f"no answer about {job_id} within 10 s (the request is in the log)")
            continue
        refused = [a for a in answers if a["type"] == "RequestRejected"]
        if not as_json:
            if len(answers) == 1 and not refused:
                click.echo(f"{job_id}: {_DONE.get(answers[0]['type'], answers[0]['type'])}")
            elif len(answers) > 1:
                counts: dict[str, int] = {}
                for a in answers:
                    counts[_DONE.get(a["type"], a["type"])] = counts.get(_DONE.get(a["type"], a["type"]), 0) + 1
                click.echo(f"{job_id}: {len(answers)} tasks: "
                           + ", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
                for a in refused[:10]:
                    click.echo(f"  {a['job_id']}: {a['reason']}", err=True)
                if len(refused) > 10:
                    click.echo(f"  ... and {len(refused) - 10} more", err=True)
        if len(refused) == len(answers):
            failed.append(f"{verb} {job_id}: {refused[0]['reason']}")
    if len(failed) == 1:
        raise click.ClickException(failed[0])
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(answered)} jobs: " + "; ".join(failed))


def _names_a_job(job_id: str, admin: bool) -> bool:
    """A job id; for an operator also a tenant's job by its key in the log, ``<tenant>:<id>`` (a job that
    came through the intake under accounts: events/subjects.py ``job_key``)."""
    return valid_token(job_id) or (admin and valid_job_key(job_id))


def _request_events(verb: str, cls: type[c.Event], job_ids: tuple[str, ...], admin: bool, tenant: str,
                    reason: str) -> list[tuple[str, c.Event]]:
    """One request of ``cls`` per job id (each checked to name a job), in the order given, duplicates once."""
    events = []
    for job_id in dict.fromkeys(job_ids):
        if not _names_a_job(job_id, admin):
            raise click.BadParameter(f"{job_id!r} is not a job id", param_hint="JOB_ID")
        fields: dict[str, Any] = {"job_id": job_id, "tenant": ADMIN_TENANT if admin else tenant, "user": default_user()}
        if "reason" in cls.__struct_fields__:
            fields["reason"] = reason
        events.append((job_id, cls(ts=time.time(), source="horizon-cli", correlation_id=job_id, **fields)))
    return events


def _request(verb: str, cls: type[c.Event]) -> click.Command:
    @click.command(name=verb, help=f"{verb.capitalize()} jobs, or every task of an array (its job id): "
                                   f"horizon {verb} J1 J2 ...")
    @nats_option
    @tenant_option
    @admin_option
    @click.option("--reason", default="", help="Why (kept in the log).")
    @click.option("--json", "as_json", is_flag=True)
    @click.argument("job_ids", metavar="JOB_ID...", nargs=-1, required=True)
    def command(nats_url: str, tenant: str, admin: bool, reason: str, as_json: bool, job_ids: tuple[str, ...]) -> None:
        _ask(nats_url, verb, _request_events(verb, cls, job_ids, admin, tenant, reason), admin, tenant, as_json)

    return command


@click.command()
@nats_option
@tenant_option
@admin_option
@click.option("--reason", default="", help="Why (kept in the log).")
@click.option("-n", "--name", "name", default=None, help="Every live job with this name (as scancel --name).")
@click.option("-u", "--user", "user", default=None, help="Every live job of this user.")
@click.option("--me", is_flag=True, help="Every live job of yours (--user $USER).")
@click.option("-t", "--state", "state", default=None,
              type=click.Choice(["PENDING", "RUNNING", "HELD", "SCHEDULED", "PD", "R"], case_sensitive=False),
              help="Only jobs in this state: PENDING (with held ones, as Slurm), RUNNING (with scheduled ones), "
                   "HELD, SCHEDULED.")
@click.option("-A", "--account", "account", default=None, help="Every live job of this account.")
@click.option("--json", "as_json", is_flag=True)
@click.argument("job_ids", metavar="[JOB_ID]...", nargs=-1)
def cancel(nats_url: str, tenant: str, admin: bool, reason: str, name: str | None, user: str | None, me: bool,
           state: str | None, account: str | None, as_json: bool, job_ids: tuple[str, ...]) -> None:
    """Cancel jobs, every task of an array (its job id), or every job matching filters (like scancel).

    \b
    horizon cancel JOB [JOB...]
    horizon cancel --name train --state PENDING     every pending job named train (in your tenant)
    horizon cancel --me                             every live job of yours
    """
    if me:
        user = user or default_user()
    filtered = any(v is not None for v in (name, user, state, account))
    if job_ids:
        if filtered:
            raise click.UsageError("give JOBs or filters (--name, --user, --state, --account), not both")
        events = _request_events("cancel", c.JobCancelRequested, job_ids, admin, tenant, reason)
        _ask(nats_url, "cancel", events, admin, tenant, as_json)
        return
    if not filtered:
        raise click.UsageError("give a JOB, or filters to choose the jobs: --name, --user (--me), --state, --account")
    _cancel_matching(nats_url, tenant=tenant, admin=admin, reason=reason, name=name, user=user, state=state,
                     account=account, as_json=as_json)


_CANCEL_STATES = {"PENDING": ["PENDING", "HELD"], "PD": ["PENDING", "HELD"], "RUNNING": ["SCHEDULED", "RUNNING"],
                  "R": ["SCHEDULED", "RUNNING"], "HELD": ["HELD"], "SCHEDULED": ["SCHEDULED"]}


def _cancel_matching(nats_url: str, *, tenant: str, admin: bool, reason: str, name: str | None, user: str | None,
                     state: str | None, account: str | None, as_json: bool) -> None:
    """Ask the read model for the live jobs matching the filters, then request a cancel of each."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    states = _CANCEL_STATES[state.upper()] if state else ["PENDING", "HELD", "SCHEDULED", "RUNNING"]
    err = Console(stderr=True)

    async def go() -> tuple[list[str], dict[str, dict[str, Any]]]:
        async with session(nats_url) as nc:
            body = await query_all(nc, "jobs", {"states": states, "tenant": None if admin else tenant,
                                                "account": account, "user": user}, "jobs")
            targets = [row["job_id"] for row in body["jobs"] if name is None or row["name"] == name]
            if not targets:
                return targets, {}
            with Progress(TextColumn("cancelling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=err, transient=True, disable=len(targets) < 10 or not err.is_terminal) as bar:
                task = bar.add_task("cancel", total=len(targets))
                answered = await cancel_requests(nc, targets, tenant=tenant, admin=admin, reason=reason,
                                                 advance=lambda: bar.advance(task))
            return targets, {job: bodies[0] for job, bodies in answered.items()}

    targets, answers = run(go())
    if as_json:
        click.echo(json.dumps([answers.get(j, {"job_id": j, "type": None}) for j in targets]))
    if not targets:
        if not as_json:
            click.echo("no live job matches", err=True)
        return
    counts: dict[str, int] = {}
    for answer in answers.values():
        what = _DONE.get(answer["type"], answer["type"])
        counts[what] = counts.get(what, 0) + 1
    refused = [a for a in answers.values() if a["type"] == "RequestRejected"]
    missing = [j for j in targets if j not in answers]
    if not as_json:
        if len(targets) <= 20:
            for j in targets:
                if j in answers:
                    a = answers[j]
                    click.echo(f"{j}: {_DONE.get(a['type'], a['type'])}"
                               + (f": {a['reason']}" if a["type"] == "RequestRejected" else ""))
        click.echo(f"{len(targets)} job(s): " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
                   + (f", {len(missing)} unanswered" if missing else ""))
    if missing:
        raise click.ClickException(f"no answer about {len(missing)} job(s) within 10 s (the requests are in the "
                                   f"log): {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if refused and len(refused) == len(targets):
        raise click.ClickException(f"cancel: {refused[0]['reason']}")


async def cancel_requests(nc: Any, targets: list[str], *, tenant: str, admin: bool, reason: str,
                          advance: Any = None, timeout_s: float = 10.0,
                          quiet_s: float = 0.5) -> dict[str, list[dict[str, Any]]]:
    """Publish a cancel request per job id and collect submission's answers to each (by its request's
    seq): one about the job itself, or, for an array's id, one per live task (``ID_N``), gathered
    until ``quiet_s`` passes without another. ``advance()`` is called as each target is answered."""
    subject = admin_subject("cancel") if admin else input_subject(tenant, "cancel")
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


hold = _request("hold", c.JobHoldRequested)
release = _request("release", c.JobReleaseRequested)


@click.command()
@nats_option
@tenant_option
@admin_option
@click.option("--priority-class", default=None, type=click.Choice(list(c.PRIORITY_CLASSES)),
              help="The new class (an owner may only lower it).")
@click.option("--nice", type=int, default=None, help="The new nice value (an owner may only raise it).")
@click.option("--json", "as_json", is_flag=True)
@click.argument("job_id")
def update(nats_url: str, tenant: str, admin: bool, priority_class: str | None, nice: int | None, as_json: bool,
           job_id: str) -> None:
    """Change the priority of a pending or held job, or of every task of an array."""
    if not _names_a_job(job_id, admin):
        raise click.BadParameter(f"{job_id!r} is not a job id", param_hint="JOB_ID")
    if priority_class is None and nice is None:
        raise click.UsageError("give --priority-class, --nice or both")
    event = c.JobUpdateRequested(ts=time.time(), source="horizon-cli", correlation_id=job_id, job_id=job_id,
                                 tenant=ADMIN_TENANT if admin else tenant, priority_class=priority_class, nice=nice,
                                 user=default_user())
    _ask(nats_url, "update", [(job_id, event)], admin, tenant, as_json)


def register(group: click.Group) -> None:
    for command in (cancel, hold, release, update):
        group.add_command(command)
