"""Requests about jobs: ``horizon cancel``, ``hold``, ``release`` and ``update``.

Requests go to ``horizon.in.<tenant>.<verb>`` about one's own jobs, or with ``--admin`` to
``horizon.in._admin.<verb>`` about anyone's. A job may be named by its number (``4213``, ``4213_7``:
``services/front/client/job_numbers.py``). ``cancel``, ``hold`` and ``release`` take several job ids,
as ``scancel`` does (one request each, a line of answer each). A job id naming an array asks for every
live task, and the command reports the answers together. ``cancel`` also takes squeue-like filters (``scancel``'s
``--name``, ``--user``, ``--state``, ``--account``) and cancels every matching job.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from events import catalogue as c
from services.front.client.client import default_user, run, session
from services.front.client.job_numbers import resolve_at
from services.front.client.requests import (DONE, ask, cancel_requests, matching_jobs, names_a_job, request_events,
                                            update_event)
from services.front.cli.options import admin_option, nats_option, tenant_option

__all__ = ["cancel", "hold", "release", "update", "register"]


def _ask(nats_url: str, verb: str, events: list[tuple[str, c.Event]], admin: bool, tenant: str,
         as_json: bool, given: dict[str, str] | None = None) -> None:
    """Publish a request about each job (or array) in turn, print the answers, fail if one of them was
    carried out for none of its tasks. ``given``: id -> the number it was named by (said so)."""
    answered = run(ask(nats_url, verb, events, admin, tenant))
    _report(verb, {(given or {}).get(job_id, job_id): answers for job_id, answers in answered.items()}, as_json)


def _named(nats_url: str, job_ids: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """The ids ``job_ids`` name (a number, 4213 or 4213_7, names a job: services/front/client/job_numbers.py),
    and each id named by number -> the number."""
    named = resolve_at(nats_url, list(job_ids))
    return tuple(named[j] for j in job_ids), {named[j]: j for j in job_ids if named[j] != j}


def _events(cls: type[c.Event], job_ids: tuple[str, ...], admin: bool, tenant: str,
            reason: str) -> list[tuple[str, c.Event]]:
    try:
        return request_events(cls, job_ids, admin, tenant, reason)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="JOB_ID") from None


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
                click.echo(f"{job_id}: {DONE.get(answers[0]['type'], answers[0]['type'])}")
            elif len(answers) > 1:
                counts: dict[str, int] = {}
                for a in answers:
                    counts[DONE.get(a["type"], a["type"])] = counts.get(DONE.get(a["type"], a["type"]), 0) + 1
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
        job_ids, given = _named(nats_url, job_ids)
        _ask(nats_url, verb, _events(cls, job_ids, admin, tenant, reason), admin, tenant, as_json, given)

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
        job_ids, given = _named(nats_url, job_ids)
        events = _events(c.JobCancelRequested, job_ids, admin, tenant, reason)
        _ask(nats_url, "cancel", events, admin, tenant, as_json, given)
        return
    if not filtered:
        raise click.UsageError("give a JOB, or filters to choose the jobs: --name, --user (--me), --state, --account")
    _cancel_matching(nats_url, tenant=tenant, admin=admin, reason=reason, name=name, user=user, state=state,
                     account=account, as_json=as_json)


def _cancel_matching(nats_url: str, *, tenant: str, admin: bool, reason: str, name: str | None, user: str | None,
                     state: str | None, account: str | None, as_json: bool) -> None:
    """Ask the read model for the live jobs matching the filters, then request a cancel of each."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)

    async def go() -> tuple[list[str], dict[str, dict[str, Any]]]:
        async with session(nats_url) as nc:
            targets = await matching_jobs(nc, tenant=tenant, admin=admin, name=name, user=user, state=state,
                                          account=account)
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
        what = DONE.get(answer["type"], answer["type"])
        counts[what] = counts.get(what, 0) + 1
    refused = [a for a in answers.values() if a["type"] == "RequestRejected"]
    missing = [j for j in targets if j not in answers]
    if not as_json:
        if len(targets) <= 20:
            for j in targets:
                if j in answers:
                    a = answers[j]
                    click.echo(f"{j}: {DONE.get(a['type'], a['type'])}"
                               + (f": {a['reason']}" if a["type"] == "RequestRejected" else ""))
        click.echo(f"{len(targets)} job(s): " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
                   + (f", {len(missing)} unanswered" if missing else ""))
    if missing:
        raise click.ClickException(f"no answer about {len(missing)} job(s) within 10 s (the requests are in the "
                                   f"log): {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if refused and len(refused) == len(targets):
        raise click.ClickException(f"cancel: {refused[0]['reason']}")


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
    if priority_class is None and nice is None and names_a_job(job_id, admin):
        raise click.UsageError("give --priority-class, --nice or both")
    (job_id,), given = _named(nats_url, (job_id,))
    try:
        event = update_event(job_id, admin, tenant, priority_class, nice)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="JOB_ID") from None
    _ask(nats_url, "update", [(job_id, event)], admin, tenant, as_json, given)


def register(group: click.Group) -> None:
    for command in (cancel, hold, release, update):
        group.add_command(command)
