"""Client commands about jobs: submit, cancel, hold, release, queue, jobs, watch."""

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
from events.subjects import input_subject, valid_token
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
@click.option("--env", "env", multiple=True, help="KEY=VALUE for the job's environment (repeatable).")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE label (repeatable).")
@click.option("--sim-runtime", type=float, default=None, help="Seconds a simulated job runs (sim executor).")
@click.option("--no-wait", is_flag=True, help="Do not wait for acceptance.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"job_id\": …, \"state\": …} as JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(
    nats_url: str, tenant: str, job_id: str | None, name: str, account: str, user: str, gpus: int,
    gpu_type: str | None, gpu_memory: str | None, cpus: str, memory: str, nodes: int, tasks_per_node: int,
    time_limit: str | None, priority_class: str, restart_policy: str, max_retries: int,
    scheduling_timeout: str | None, env: tuple[str, ...], labels: tuple[str, ...], sim_runtime: float | None,
    no_wait: bool, as_json: bool, command: tuple[str, ...],
) -> None:
    """Submit a job: horizon submit --gpus 2 -- python train.py"""
    # Catch what we can here, with the same messages the submission service would give.
    parse_cpus(cpus, "--cpus")
    parse_memory(memory, "--mem")
    if gpu_type:
        parse_gpu_model(gpu_type, "--gpu-type")
    if gpu_memory:
        parse_memory(gpu_memory, "--gpu-memory")
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
        resources=c.ResourceRequest(cpus=cpus, memory=memory, gpus=gpus, gpu_type=gpu_type, gpu_memory=gpu_memory),
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        time_limit_s=parse_duration(time_limit, "--time") if time_limit else None,
        scheduling_timeout_s=parse_duration(scheduling_timeout, "--scheduling-timeout") if scheduling_timeout else None,
        priority_class=priority_class,
        restart_policy=restart_policy,
        max_retries=max_retries,
        sim_runtime_s=sim_runtime,
    )
    subject = input_subject(tenant, "submit")

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            sub = await nc.subscribe(f"horizon.evt.submission.*.{job_id}") if valid_token(job_id) else None
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


def _request(verb: str, cls: type[c.Event], answers: set[str]) -> click.Command:
    @click.command(name=verb, help=f"{verb.capitalize()} a job.")
    @nats_option
    @tenant_option
    @click.option("--reason", default="", help="Why (kept in the log).")
    @click.option("--json", "as_json", is_flag=True)
    @click.argument("job_id")
    def command(nats_url: str, tenant: str, reason: str, as_json: bool, job_id: str) -> None:
        if not valid_token(job_id):
            raise click.BadParameter(f"{job_id!r} is not a job id", param_hint="JOB_ID")
        fields: dict[str, Any] = {"job_id": job_id, "tenant": tenant, "user": default_user()}
        if "reason" in cls.__struct_fields__:
            fields["reason"] = reason
        event = cls(ts=time.time(), source="horizon-cli", correlation_id=job_id, **fields)

        async def go() -> dict[str, Any] | None:
            async with session(nats_url) as nc:
                sub = await nc.subscribe(f"horizon.evt.*.*.{job_id}")
                await publish_input(nc, input_subject(tenant, verb), event, msg_id=f"{verb}/{job_id}/{uuid.uuid4().hex}")
                return await await_answer(sub, answers | {"RequestRejected"}, timeout_s=10.0)

        answer = _run(go())
        if as_json:
            click.echo(json.dumps(answer or {"job_id": job_id, "type": None}))
        if answer is None:
            raise click.ClickException(f"no answer about {job_id} within 10 s (the request is in the log)")
        if answer["type"] == "RequestRejected":
            raise click.ClickException(f"{verb} {job_id}: {answer['reason']}")
        if not as_json:
            click.echo({"JobCancelled": f"{job_id} cancelled", "JobStopRequested": f"{job_id}: stopping",
                        "JobHeld": f"{job_id} held", "JobReleased": f"{job_id} released"}.get(answer["type"], answer["type"]))

    return command


cancel = _request("cancel", c.JobCancelRequested, {"JobCancelled", "JobStopRequested"})
hold = _request("hold", c.JobHoldRequested, {"JobHeld"})
release = _request("release", c.JobReleaseRequested, {"JobReleased"})


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
@click.option("--json", "as_json", is_flag=True)
def queue(nats_url: str, tenant: str | None, account: str | None, user: str | None, limit: int, as_json: bool) -> None:
    """Pending and held jobs in scheduling order, with why each waits (like squeue)."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query(nc, "jobs", {"states": ["PENDING", "HELD"], "tenant": tenant, "account": account,
                                            "user": user, "limit": limit, "order": "queue"})

    body = _run(go())
    if as_json:
        click.echo(json.dumps(body["jobs"]))
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
    for command in (submit, cancel, hold, release, queue, jobs, watch):
        group.add_command(command)

