"""Client commands about jobs: submit, cancel, hold, release, update, queue, jobs, watch.

Requests (cancel, hold, release, update) go to ``horizon.in.<tenant>.<verb>``
about one's own jobs, or with ``--admin`` to ``horizon.in._admin.<verb>``
about anyone's. A job id naming an array asks for every live task, and the
command reports the answers together.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from events import catalogue as c
from events.resources import format_cpus, format_memory, parse_cpus, parse_duration, parse_gpu_model, parse_memory
from events.arrays import parse_array
from events.subjects import ADMIN_TENANT, admin_subject, input_subject, valid_token
from services.cli.client import await_answer, default_tenant, default_user, publish_input, query, session

__all__ = ["register"]

nats_option = click.option(
    "--nats", "nats_url", envvar="HORIZON_NATS_URL", default="nats://127.0.0.1:4222", show_default=True,
    help="URL of the NATS server (or $HORIZON_NATS_URL).",
)
tenant_option = click.option(
    "--tenant", default=default_tenant, show_default="$HORIZON_TENANT or default", help="Your tenant."
)


def console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    import sys

    # markup off: job names, reasons and "node[gpu0,gpu1]" are data, not rich markup
    return Console(markup=False, highlight=False) if sys.stdout.isatty() else Console(width=400, markup=False,
                                                                                      highlight=False)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _key_values(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


@click.command(context_settings={"ignore_unknown_options": False})
@nats_option
@tenant_option
@click.option("--job-id", default=None, help="Your id for the job (default: generated). Reusing one is a duplicate.")
@click.option("--name", default="", help="A name for the job.")
@click.option("--account", default="default", show_default=True)
@click.option("--user", default=default_user, show_default="$USER")
@click.option("--gpus", type=int, default=0, show_default=True, help="GPUs per task.")
@click.option("--gpu-type", default=None, help="GPU model, e.g. a100 or h100-80gb.")
@click.option("--gpu-memory", default=None, help="Minimum memory per GPU, e.g. 40Gi.")
@click.option("--cpus", default="1", show_default=True, help="CPUs per task: 2, 2.5 or 500m.")
@click.option("--mem", "memory", default="1Gi", show_default=True, help="Memory per task: 512m, 8g, 16Gi.")
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes (all or nothing).")
@click.option("--tasks-per-node", type=int, default=1, show_default=True)
@click.option("--time", "time_limit", default=None, help="Time limit: 90, 10m, 2h, 1-00:00:00 (default 1h).")
@click.option("--priority-class", default="normal", show_default=True,
              type=click.Choice(list(c.PRIORITY_CLASSES)))
@click.option("--restart-policy", default="never", show_default=True, type=click.Choice(list(c.RESTART_POLICIES)))
@click.option("--max-retries", type=int, default=0, show_default=True)
@click.option("--scheduling-timeout", default=None, help="Give up if not started within this duration.")
@click.option("--nice", type=int, default=0, show_default=True, help="Priority adjustment: higher is lower priority.")
@click.option("--array", "array", default=None,
              help="A job array, as Slurm's --array: 0-99, 0-99%10 (at most 10 at once), 1,3,5-7, 0-15:4. "
                   "Tasks are <job id>_<index>.")
@click.option("--dependency", "dependency", default=None,
              help="Start only after other jobs, as Slurm: afterok:a:b,afterany:c (also after, afternotok). "
                   "They may be submitted later.")
@click.option("--env", "env", multiple=True, help="KEY=VALUE for the job's environment (repeatable).")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE label (repeatable).")
@click.option("--profile", default="default", show_default=True, help="Placement profile (horizon profile set).")
@click.option("--node-selector", "selector", multiple=True, help="KEY=VALUE the node must have (repeatable).")
@click.option("--toleration", "tolerations", multiple=True,
              help="Tolerate a taint: KEY (any value), KEY=VALUE, optionally :EFFECT (repeatable).")
@click.option("--sim-runtime", type=float, default=None, help="Seconds a simulated job runs (sim executor).")
@click.option("--no-wait", is_flag=True, help="Do not wait for acceptance.")
@click.option("--check", is_flag=True, help="Only ask a submission instance whether the job would be accepted "
                                           "(the validation queue group); submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"job_id\": …, \"state\": …} as JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(
    nats_url: str, tenant: str, job_id: str | None, name: str, account: str, user: str, gpus: int,
    gpu_type: str | None, gpu_memory: str | None, cpus: str, memory: str, nodes: int, tasks_per_node: int,
    time_limit: str | None, priority_class: str, restart_policy: str, max_retries: int,
    scheduling_timeout: str | None, nice: int, array: str | None, dependency: str | None, env: tuple[str, ...],
    labels: tuple[str, ...], profile: str, selector: tuple[str, ...], tolerations: tuple[str, ...],
    sim_runtime: float | None, no_wait: bool, check: bool, as_json: bool, command: tuple[str, ...],
) -> None:
    """Submit a job: horizon submit --gpus 2 -- python train.py"""
    # Catch what we can here, with the same messages the submission service would give.
    parse_cpus(cpus, "--cpus")
    parse_memory(memory, "--mem")
    if gpu_type:
        parse_gpu_model(gpu_type, "--gpu-type")
    if gpu_memory:
        parse_memory(gpu_memory, "--gpu-memory")
    first_index = parse_array(array, "--array").indices[0] if array is not None else None
    job_id = job_id or f"{user if valid_token(user) else 'job'}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    event = c.JobSubmitted(
        ts=time.time(),
        source="horizon-cli",
        correlation_id=job_id,
        job_id=job_id,
        tenant=tenant,
        account=account,
        user=user,
        name=name,
        command=list(command),
        env=_key_values(env, "--env"),
        labels=_key_values(labels, "--label"),
        profile=profile,
        node_selector=_key_values(selector, "--node-selector"),
        tolerations=[_toleration(t) for t in tolerations],
        resources=c.ResourceRequest(cpus=cpus, memory=memory, gpus=gpus, gpu_type=gpu_type, gpu_memory=gpu_memory),
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        time_limit_s=parse_duration(time_limit, "--time") if time_limit else None,
        scheduling_timeout_s=parse_duration(scheduling_timeout, "--scheduling-timeout") if scheduling_timeout else None,
        priority_class=priority_class,
        nice=nice,
        array=array,
        dependencies=parse_dependency_option(dependency) if dependency else [],
        restart_policy=restart_policy,
        max_retries=max_retries,
        sim_runtime_s=sim_runtime,
    )
    if check:
        report_check(check_submission(nats_url, event), event.job_id, as_json)
        return
    result = send_submission(nats_url, event, no_wait=no_wait, first_index=first_index)
    if as_json:
        click.echo(json.dumps(result))
    elif result["state"] == "REJECTED":
        pass
    else:
        click.echo(job_id)
    if result["state"] == "REJECTED":
        raise click.ClickException(f"job {job_id} rejected: {result['reason']}")


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
    return _run(go())


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
            sub = await _Inbox.open(nc, answer_subjects) if valid_token(job_id) else None
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

    return _run(go())  # type: ignore[no-any-return]


def _toleration(text: str) -> c.Toleration:
    body, _, effect = text.partition(":")
    key, sep, value = body.partition("=")
    if not key:
        raise click.BadParameter(f"{text!r}: give KEY, KEY=VALUE, KEY:EFFECT or KEY=VALUE:EFFECT",
                                 param_hint="--toleration")
    if effect and effect not in c.TAINT_EFFECTS:
        raise click.BadParameter(f"{effect!r} is not one of {', '.join(c.TAINT_EFFECTS)}", param_hint="--toleration")
    return c.Toleration(key=key, operator="Equal" if sep else "Exists", value=value, effect=effect)


class _Inbox:
    """Messages of several subjects, read one at a time like a subscription's ``next_msg``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    @classmethod
    async def open(cls, nc: Any, subjects: list[str]) -> _Inbox:
        inbox = cls()

        async def put(msg: Any) -> None:
            inbox.queue.put_nowait(msg)

        for subject in subjects:
            await nc.subscribe(subject, cb=put)
        return inbox

    async def next_msg(self, timeout: float) -> Any:
        return await asyncio.wait_for(self.queue.get(), timeout)


admin_option = click.option(
    "--admin", is_flag=True,
    help="Ask as an operator (horizon.in._admin.<verb>): any tenant's job, and priority either way.",
)
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
        body = json.loads(msg.data)
        if body.get("causation_id") != cause:
            continue
        answers.append(body)
        if body.get("job_id") == job_id:
            return answers  # about the job itself: a job, or an array with no live task


def _ask(nats_url: str, verb: str, event: c.Event, job_id: str, admin: bool, tenant: str,
         as_json: bool) -> None:
    """Publish a request about a job (or an array), print the answers, fail if none carried it out."""
    subject = admin_subject(verb) if admin else input_subject(tenant, verb)

    async def go() -> list[dict[str, Any]]:
        async with session(nats_url) as nc:
            sub = await nc.subscribe("horizon.evt.submission.*.*")
            seq = await publish_input(nc, subject, event, msg_id=f"{verb}/{job_id}/{uuid.uuid4().hex}")
            return await _await_answers(sub, seq, job_id)

    answers = _run(go())
    if as_json:
        click.echo(json.dumps(answers if len(answers) != 1 else answers[0]))
    if not answers:
        raise click.ClickException(f"no answer about {job_id} within 10 s (the request is in the log)")
    refused = [a for a in answers if a["type"] == "RequestRejected"]
    if not as_json:
        if len(answers) == 1 and not refused:
            click.echo(f"{job_id}: {_DONE.get(answers[0]['type'], answers[0]['type'])}")
        elif len(answers) > 1:
            counts: dict[str, int] = {}
            for a in answers:
                counts[_DONE.get(a["type"], a["type"])] = counts.get(_DONE.get(a["type"], a["type"]), 0) + 1
            click.echo(f"{job_id}: {len(answers)} tasks: " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
            for a in refused[:10]:
                click.echo(f"  {a['job_id']}: {a['reason']}", err=True)
            if len(refused) > 10:
                click.echo(f"  ... and {len(refused) - 10} more", err=True)
    if len(refused) == len(answers):
        raise click.ClickException(f"{verb} {job_id}: {refused[0]['reason']}")


def _request(verb: str, cls: type[c.Event]) -> click.Command:
    @click.command(name=verb, help=f"{verb.capitalize()} a job, or every task of an array (its job id).")
    @nats_option
    @tenant_option
    @admin_option
    @click.option("--reason", default="", help="Why (kept in the log).")
    @click.option("--json", "as_json", is_flag=True)
    @click.argument("job_id")
    def command(nats_url: str, tenant: str, admin: bool, reason: str, as_json: bool, job_id: str) -> None:
        if not valid_token(job_id):
            raise click.BadParameter(f"{job_id!r} is not a job id", param_hint="JOB_ID")
        fields: dict[str, Any] = {"job_id": job_id, "tenant": ADMIN_TENANT if admin else tenant, "user": default_user()}
        if "reason" in cls.__struct_fields__:
            fields["reason"] = reason
        event = cls(ts=time.time(), source="horizon-cli", correlation_id=job_id, **fields)
        _ask(nats_url, verb, event, job_id, admin, tenant, as_json)

    return command


_cancel_one = _request("cancel", c.JobCancelRequested)


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
@click.argument("job_id", required=False)
def cancel(nats_url: str, tenant: str, admin: bool, reason: str, name: str | None, user: str | None, me: bool,
           state: str | None, account: str | None, as_json: bool, job_id: str | None) -> None:
    """Cancel a job, every task of an array (its job id), or every job matching filters (like scancel).

    \b
    horizon cancel JOB
    horizon cancel --name train --state PENDING     every pending job named train (in your tenant)
    horizon cancel --me                             every live job of yours
    """
    if me:
        user = user or default_user()
    filtered = any(v is not None for v in (name, user, state, account))
    if job_id is not None:
        if filtered:
            raise click.UsageError("give a JOB or filters (--name, --user, --state, --account), not both")
        ctx = click.get_current_context()
        ctx.invoke(_cancel_one, nats_url=nats_url, tenant=tenant, admin=admin, reason=reason, as_json=as_json,
                   job_id=job_id)
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
            body = await query(nc, "jobs", {"states": states, "tenant": None if admin else tenant,
                                            "account": account, "user": user, "limit": 100_000})
            targets = [row["job_id"] for row in body["jobs"] if name is None or row["name"] == name]
            if not targets:
                return targets, {}
            with Progress(TextColumn("cancelling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=err, transient=True, disable=len(targets) < 10 or not err.is_terminal) as bar:
                task = bar.add_task("cancel", total=len(targets))
                answers = await _cancel_each(nc, targets, tenant=tenant, admin=admin, reason=reason,
                                             advance=lambda: bar.advance(task))
            return targets, answers

    targets, answers = _run(go())
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


async def _cancel_each(nc: Any, targets: list[str], *, tenant: str, admin: bool, reason: str,
                       advance: Any, timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
    """Publish a cancel request per job and collect submission's answer to each (by its request's seq)."""
    subject = admin_subject("cancel") if admin else input_subject(tenant, "cancel")
    who = default_user()
    answers: dict[str, dict[str, Any]] = {}
    asked: dict[str, str] = {}  # "seq:<n>" -> job id
    early: dict[str, list[dict[str, Any]]] = {}  # answers that came before their publish was acknowledged
    finished = asyncio.Event()

    def take(body: dict[str, Any]) -> None:
        job = asked.get(body.get("causation_id", ""))
        if job is None or body.get("job_id") != job or job in answers:
            return
        answers[job] = body
        advance()
        if len(answers) == len(targets):
            finished.set()

    async def on_msg(msg: Any) -> None:
        body = json.loads(msg.data)
        cause = body.get("causation_id", "")
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not finished.is_set() and loop.time() < deadline:
            before = len(answers)
            try:
                await asyncio.wait_for(finished.wait(), min(1.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                if len(answers) > before:
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
    if not valid_token(job_id):
        raise click.BadParameter(f"{job_id!r} is not a job id", param_hint="JOB_ID")
    if priority_class is None and nice is None:
        raise click.UsageError("give --priority-class, --nice or both")
    event = c.JobUpdateRequested(ts=time.time(), source="horizon-cli", correlation_id=job_id, job_id=job_id,
                                 tenant=ADMIN_TENANT if admin else tenant, priority_class=priority_class, nice=nice,
                                 user=default_user())
    _ask(nats_url, "update", event, job_id, admin, tenant, as_json)


_SLURM_KINDS = {"after": "after", "afterok": "after-ok", "afternotok": "after-not-ok", "afterany": "after-any"}


def parse_dependency_option(text: str) -> list[c.Dependency]:
    """Slurm's ``--dependency``: ``afterok:a:b,afterany:c`` (Horizon's ``after-ok`` spelling too).

    Every listed dependency must be met (Slurm's ``,``); Slurm's ``?`` (any one of them) is
    not supported.
    """
    out = []
    for part in text.split(","):
        kind, _, ids = part.strip().partition(":")
        kind = _SLURM_KINDS.get(kind.strip().lower(), kind.strip().lower())
        if kind not in c.DEPENDENCY_KINDS or not ids:
            raise click.BadParameter(
                f"{part!r} is not KIND:JOB[:JOB...]; kinds: {', '.join(_SLURM_KINDS)} (or {', '.join(c.DEPENDENCY_KINDS)})",
                param_hint="--dependency")
        out.extend(c.Dependency(kind=kind, job_id=job) for job in ids.split(":") if job)
    return out


def _check_page(limit: int, offset: int) -> None:
    if limit < 0 or offset < 0:
        raise click.UsageError("--limit and --offset must not be negative")


def _page_line(offset: int, shown: int, total: int) -> str:
    if not shown:
        return f"no rows past {offset} ({total} in all)"
    more = f"; next page: --offset {offset + shown}" if offset + shown < total else ""
    return f"rows {offset + 1}-{offset + shown} of {total}{more}"


def _gpus(row: dict[str, Any]) -> str:
    if not row.get("gpus"):
        return "-"
    return f"{row['gpus']}x{row['gpu_type']}" if row.get("gpu_type") else str(row["gpus"])


def _devices(row: dict[str, Any]) -> str:
    parts = []
    for alloc in row.get("allocation") or []:
        parts.append(f"{alloc['node']}[{','.join(alloc['device_ids'])}]" if alloc["device_ids"] else alloc["node"])
    return " ".join(parts) or "-"


def _age(ts: float | None) -> str:
    if not ts:
        return "-"
    seconds = max(0, int(time.time() - ts))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@click.command()
@nats_option
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("-A", "--account", default=None)
@click.option("-u", "--user", default=None)
@click.option("--me", is_flag=True, help="Only your jobs (--user $USER).")
@click.option("-t", "--states", "states", multiple=True,
              help="Jobs in these states instead of the pending and held ones: Slurm's names or codes (PENDING, "
                   "PD, RUNNING, R, CONFIGURING, CF, ...), Horizon's, comma-separated or repeated, or 'all'.")
@click.option("--limit", type=int, default=1000, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many rows first (paging, with --limit).")
@click.option("--why", is_flag=True, help="Under each job, every filter's verdict: how many nodes and why, and "
                                          "its reservation (from the scheduler's view).")
@click.option("-o", "--format", "fmt", default=None,
              help="squeue's --format, e.g. '%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R': %[.][WIDTH]FIELD ('.' "
                   "right-aligns; values are cut to WIDTH). Fields: %i id, %j name, %u user, %a account, "
                   "%T state, %t state code, %M time used, %l time limit, %L time left, %D nodes, %C CPUs, "
                   "%c CPUs per task, %m memory per node, %b GPUs per node, %R reason or nodes, %r reason, "
                   "%N nodes, %V submitted, %S started, %e ended, %Q priority class, %P partition (profile), "
                   "%q QOS, %y nice, %F array id, %K array index, %% a percent sign.")
@click.option("--noheader", is_flag=True, help="With --format: no header line.")
@click.option("--json", "as_json", is_flag=True)
def queue(nats_url: str, tenant: str | None, account: str | None, user: str | None, me: bool,
          states: tuple[str, ...], limit: int, offset: int, why: bool, fmt: str | None, noheader: bool,
          as_json: bool) -> None:
    """Pending and held jobs in scheduling order, with why each waits (like squeue)."""
    from services.cli import slurm

    _check_page(limit, offset)
    if fmt is not None and why:
        raise click.UsageError("--format and --why are two different views: give one")
    if me:
        user = user or default_user()
    ask, match = slurm.select_states(states) if states else (["PENDING", "HELD"], set())
    if fmt is not None:
        slurm.squeue_lines([], fmt, header=False)  # a bad field is an error before anything is asked

    async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with session(nats_url) as nc:
            # Waiting jobs come from the scheduler's queue (scheduling order, priority, why), the
            # others (running, ended) from the jobs read model, after them.
            waiting = [s for s in (ask or ["PENDING", "HELD"]) if s in ("PENDING", "HELD")]
            others = None if ask is None else [s for s in ask if s not in ("PENDING", "HELD")]
            filters = {"tenant": tenant, "account": account, "user": user}
            body: dict[str, Any] = {"jobs": [], "total": 0, "last_seq": 0}
            if waiting:
                body = await query(nc, "queue", {**filters, "states": waiting, "limit": limit, "offset": offset})
            if others is None or others:
                # One list, the waiting jobs first: a page that starts past them starts inside the rest.
                rest = await query(nc, "jobs", {**filters, "states": others, "limit": max(0, limit - len(body["jobs"])),
                                                "offset": max(0, offset - body["total"]), "order": "queue"})
                body["jobs"] += [row for row in rest["jobs"] if row["state"] not in ("PENDING", "HELD")]
                body["total"] += sum(1 for row in rest["jobs"] if row["state"] not in ("PENDING", "HELD"))
                body["last_seq"] = min(body["last_seq"], rest["last_seq"]) if waiting else rest["last_seq"]
            body["jobs"] = [row for row in body["jobs"] if slurm.state_matches(row, match)]
            details: dict[str, Any] = {}
            if why:  # the queue's rows carry the scheduler's explanation; others have none
                for row in body["jobs"]:
                    if "why" in row:
                        details[row["job_id"]] = {k: row.get(k) for k in ("why", "why_kind", "reasons", "reserved_at",
                                                                           "reserved_nodes", "priority", "factors")}
            specs: dict[str, Any] = {}
            if fmt is not None and not as_json and slurm.needs_specs(fmt):
                specs = await slurm.accepted_specs(nc, [row["job_id"] for row in body["jobs"]])
            return body, details, specs

    body, details, specs = _run(go())
    if fmt is not None and not as_json:
        for line in slurm.squeue_lines(body["jobs"], fmt, header=not noheader, specs=specs):
            click.echo(line)
        return
    if why:
        for row in body["jobs"]:
            row["why"] = details.get(row["job_id"], {})
    if as_json:
        click.echo(json.dumps(body["jobs"]))
        return
    if why:
        for pos, row in enumerate(body["jobs"], offset + 1):
            detail = row["why"]
            click.echo(f"{pos:>4}  {row['job_id']}  {row['state']}  {row['account'] or ''}/{row['user'] or '-'}  "
                       f"{_gpus(row)} GPUs  waiting {_age(row['submitted_ts'])}"
                       f"{' [' + detail['why_kind'] + ']' if detail.get('why_kind') else ''}: "
                       f"{detail.get('why', row['reason'] or '')}")
            for reason in detail.get("reasons", []):
                click.echo(f"        {reason['nodes']:>5} nodes  {reason['filter']:<16} {reason['reason']}")
            if detail.get("reserved_at") is not None:
                click.echo(f"        reserved on nodes {','.join(detail['reserved_nodes'])} at "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(detail['reserved_at']))}")
        click.echo(f"{body['total']} queued (log seq {body['last_seq']})")
        return
    table = Table(box=None, header_style="bold")
    for col in ("POS", "JOBID", "NAME", "USER", "ACCOUNT", "CLASS", "PRIORITY", "GPUS", "CPUS", "MEM", "STATE",
                "WAITING", "REASON"):
        table.add_column(col)
    for pos, row in enumerate(body["jobs"], offset + 1):
        priority = row.get("priority")
        table.add_row(str(row.get("rank") or pos), row["job_id"], row["name"] or "", row["user"] or "",
                      row["account"] or "", row["priority_class"] or "",
                      "-" if priority is None else f"{priority:.1f}", _gpus(row), format_cpus(row["cpus_milli"] or 0),
                      format_memory(row["memory_bytes"] or 0), row["state"], _age(row["submitted_ts"]),
                      row.get("why") or row["reason"] or ("held" if row["state"] == "HELD" else "waiting for a cycle"))
    console().print(table)
    click.echo(f"{body['total']} queued (log seq {body['last_seq']})")


@click.command()
@nats_option
@click.option("--state", "states", multiple=True, help="Only jobs in this state (repeatable).")
@click.option("--tenant", default=None)
@click.option("--account", default=None)
@click.option("--user", default=None)
@click.option("--limit", type=int, default=1000, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many rows first (paging, with --limit).")
@click.option("--history", is_flag=True, help="sacct's view: jobs that ran or ended, every user's unless --user "
                                             "(horizon sacct --allusers; see horizon sacct --help for more).")
@click.option("--starttime", default="midnight", show_default=True, help="With --history: as sacct's --starttime.")
@click.option("--json", "as_json", is_flag=True)
def jobs(nats_url: str, states: tuple[str, ...], tenant: str | None, account: str | None, user: str | None,
         limit: int, offset: int, history: bool, starttime: str, as_json: bool) -> None:
    """All jobs with their state, node and devices."""
    _check_page(limit, offset)
    if history:
        from services.cli.slurm import SACCT_DEFAULT, run_sacct

        run_sacct(nats_url, states=states, user=user, account=account, tenant=tenant, starttime=starttime,
                  endtime=None, limit=limit, offset=offset, fmt=SACCT_DEFAULT, as_json=as_json)
        return

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query(nc, "jobs", {"states": list(states) or None, "tenant": tenant, "account": account,
                                            "user": user, "limit": limit, "offset": offset})

    body = _run(go())
    if as_json:
        click.echo(json.dumps(body["jobs"]))
        return
    table = Table(box=None, header_style="bold")
    for col in ("JOBID", "NAME", "USER", "STATE", "CLASS", "GPUS", "NODE[DEVICES]", "EXIT", "REASON"):
        table.add_column(col)
    for row in body["jobs"]:
        table.add_row(row["job_id"], row["name"] or "", row["user"] or "", row["state"], row["priority_class"] or "",
                      _gpus(row), _devices(row), "" if row["exit_code"] is None else str(row["exit_code"]),
                      row["reason"] or "")
    console().print(table)
    if offset or len(body["jobs"]) < body.get("total", 0):
        click.echo(_page_line(offset, len(body["jobs"]), body.get("total", 0)))


@click.command()
@nats_option
@click.option("--job", "job_id", default=None, help="Only this job's story.")
@click.option("--json", "as_json", is_flag=True, help="One JSON event per line.")
@click.option("--count", type=int, default=0, help="Stop after this many events (0: until Ctrl-C).")
def watch(nats_url: str, job_id: str | None, as_json: bool, count: int) -> None:
    """Follow decisions and job events live (horizon.evt.>)."""
    subject = f"horizon.evt.*.*.{job_id}" if job_id else "horizon.evt.>"

    async def go() -> None:
        async with session(nats_url) as nc:
            sub = await nc.subscribe(subject)
            seen = 0
            async for msg in sub.messages:
                if as_json:
                    click.echo(msg.data.decode())
                else:
                    body = json.loads(msg.data)
                    click.echo(_line(body))
                seen += 1
                if count and seen >= count:
                    return

    try:
        _run(go())
    except KeyboardInterrupt:
        pass


def _line(body: dict[str, Any]) -> str:
    kind = body.get("type", "?")
    who = body.get("job_id") or body.get("node") or body.get("cycle", "")
    detail = ""
    if kind == "JobScheduled":
        detail = " ".join(f"{a['node']}[{','.join(a['device_ids'])}]" for a in body.get("allocations", []))
    elif kind == "PlacementBlocked":
        detail = "; ".join(f"{r['nodes']} nodes: {r['reason']}" for r in body.get("reasons", []))
    elif kind == "SchedulingCycleCompleted":
        detail = f"{len(body.get('candidates', []))} candidates of {body.get('queued')} queued"
    elif kind in ("JobRejected", "JobFailed", "RequestRejected", "JobCancelled", "NodeLost"):
        detail = body.get("reason", "")
    stamp = time.strftime("%H:%M:%S", time.localtime(body.get("ts") or time.time()))
    return f"{stamp} {kind:<26} {who} {detail}".rstrip()


def register(group: click.Group) -> None:
    from services.cli import sbatch, slurm

    for command in (submit, cancel, hold, release, update, queue, jobs, watch):
        group.add_command(command)
    sbatch.register(group)  # here rather than in main.py: the Slurm-style commands belong with the job commands
    slurm.register(group)

