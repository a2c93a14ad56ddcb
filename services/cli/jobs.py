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
@click.option("--json", "as_json", is_flag=True, help="Print {\"job_id\": …, \"state\": …} as JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(
    nats_url: str, tenant: str, job_id: str | None, name: str, account: str, user: str, gpus: int,
    gpu_type: str | None, gpu_memory: str | None, cpus: str, memory: str, nodes: int, tasks_per_node: int,
    time_limit: str | None, priority_class: str, restart_policy: str, max_retries: int,
    scheduling_timeout: str | None, nice: int, array: str | None, dependency: str | None, env: tuple[str, ...],
    labels: tuple[str, ...], profile: str, selector: tuple[str, ...], tolerations: tuple[str, ...],
    sim_runtime: float | None, no_wait: bool, as_json: bool, command: tuple[str, ...],
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
    subject = input_subject(tenant, "submit")
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

    result = _run(go())
    if as_json:
        click.echo(json.dumps(result))
    elif result["state"] == "REJECTED":
        pass
    else:
        click.echo(job_id)
    if result["state"] == "REJECTED":
        raise click.ClickException(f"job {job_id} rejected: {result['reason']}")


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


cancel = _request("cancel", c.JobCancelRequested)
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
@click.option("--account", default=None)
@click.option("--user", default=None)
@click.option("--limit", type=int, default=1000, show_default=True)
@click.option("--why", is_flag=True, help="Under each job, every filter's verdict: how many nodes and why, and "
                                          "its reservation (from the scheduler's view).")
@click.option("--json", "as_json", is_flag=True)
def queue(nats_url: str, tenant: str | None, account: str | None, user: str | None, limit: int, why: bool,
          as_json: bool) -> None:
    """Pending and held jobs in scheduling order, with why each waits (like squeue)."""

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        async with session(nats_url) as nc:
            body = await query(nc, "jobs", {"states": ["PENDING", "HELD"], "tenant": tenant, "account": account,
                                            "user": user, "limit": limit, "order": "queue"})
            details: dict[str, Any] = {}
            if why:
                for row in body["jobs"]:
                    details[row["job_id"]] = await query(nc, "priority", {"job_id": row["job_id"]})
            return body, details

    body, details = _run(go())
    if why:
        for row in body["jobs"]:
            row["why"] = details.get(row["job_id"], {})
    if as_json:
        click.echo(json.dumps(body["jobs"]))
        return
    if why:
        for pos, row in enumerate(body["jobs"], 1):
            detail = row["why"]
            click.echo(f"{pos:>4}  {row['job_id']}  {row['state']}  {row['account'] or ''}/{row['user'] or '-'}  "
                       f"{_gpus(row)} GPUs  waiting {_age(row['submitted_ts'])}: {detail.get('why', row['reason'] or '')}")
            for reason in detail.get("reasons", []):
                click.echo(f"        {reason['nodes']:>5} nodes  {reason['filter']:<16} {reason['reason']}")
            if detail.get("reserved_at") is not None:
                click.echo(f"        reserved on nodes {','.join(detail['reserved_nodes'])} at "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(detail['reserved_at']))}")
        click.echo(f"{body['total']} queued (log seq {body['last_seq']})")
        return
    table = Table(box=None, header_style="bold")
    for col in ("POS", "JOBID", "NAME", "USER", "ACCOUNT", "CLASS", "GPUS", "CPUS", "MEM", "STATE", "WAITING", "REASON"):
        table.add_column(col)
    for pos, row in enumerate(body["jobs"], 1):
        table.add_row(str(pos), row["job_id"], row["name"] or "", row["user"] or "", row["account"] or "",
                      row["priority_class"] or "", _gpus(row), format_cpus(row["cpus_milli"] or 0),
                      format_memory(row["memory_bytes"] or 0), row["state"], _age(row["submitted_ts"]),
                      row["reason"] or ("held" if row["state"] == "HELD" else "waiting for a cycle"))
    console().print(table)
    click.echo(f"{body['total']} queued (log seq {body['last_seq']})")


@click.command()
@nats_option
@click.option("--state", "states", multiple=True, help="Only jobs in this state (repeatable).")
@click.option("--tenant", default=None)
@click.option("--account", default=None)
@click.option("--user", default=None)
@click.option("--limit", type=int, default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def jobs(nats_url: str, states: tuple[str, ...], tenant: str | None, account: str | None, user: str | None,
         limit: int, as_json: bool) -> None:
    """All jobs with their state, node and devices."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query(nc, "jobs", {"states": list(states) or None, "tenant": tenant, "account": account,
                                            "user": user, "limit": limit})

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
    for command in (submit, cancel, hold, release, update, queue, jobs, watch):
        group.add_command(command)

