"""Reading jobs: ``horizon queue`` (squeue's view, in scheduling order), ``horizon jobs`` (the jobs table,
or sacct's history) and ``horizon watch`` (the log's events as they come).

Read-only: the queue and jobs tables are the projections' query API (``horizon.query.*``); ``watch``
subscribes to the event subjects. Submitting is ``submit.py``/``sbatch.py``, requests ``requests.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.table import Table

from events.codec import decode_json
from events.resources import format_cpus, format_memory
from services.front.client.client import default_user, query_all, session
from services.front.client.job_numbers import resolve_at
from services.front.client.job_queries import read_queue
from services.front.cli.options import console, nats_option, run
from services.front.client.reasons import summary

__all__ = ["queue", "jobs", "watch", "register"]


def _check_page(limit: int | None, offset: int) -> None:
    if (limit is not None and limit < 0) or offset < 0:
        raise click.UsageError("--limit and --offset must not be negative")


def _page_line(offset: int, shown: int, total: int) -> str:
    if not shown:
        return f"no rows past {offset} ({total} in all)"
    more = f"; next page: --offset {offset + shown}" if offset + shown < total else ""
    return f"rows {offset + 1}-{offset + shown} of {total}{more}"


def _gpus(row: dict[str, Any]) -> str:
    """The GPUs it asks for, or, while it holds nodes, the GPUs it holds (an elastic gang's, fewer than
    its most on fewer nodes)."""
    if not row.get("gpus"):
        return "-"
    count = row["gpus"]
    if row.get("state") in ("SCHEDULED", "RUNNING") and row.get("allocation"):
        count = sum(len(a.get("device_ids") or []) for a in row["allocation"]) or count
    return f"{count}x{row['gpu_type']}" if row.get("gpu_type") else str(count)


def _devices(row: dict[str, Any]) -> str:
    parts = []
    for alloc in row.get("allocation") or []:
        parts.append(f"{alloc['node']}[{','.join(alloc['device_ids'])}]" if alloc["device_ids"] else alloc["node"])
    return " ".join(parts) or "-"


def _reason_column(table: Table) -> None:
    """REASON, one line per row (services/front/client/reasons.py): a narrow terminal cuts it, never wraps it."""
    table.add_column("REASON", no_wrap=True, overflow="ellipsis")


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
@click.option("-p", "--partition", default=None, help="Only jobs of this partition (or several: a,b).")
@click.option("-t", "--states", "states", multiple=True,
              help="Jobs in these states instead of the pending and held ones: Slurm's names or codes (PENDING, "
                   "PD, RUNNING, R, CONFIGURING, CF, ...), Horizon's, comma-separated or repeated, or 'all'.")
@click.option("--limit", type=int, default=None, help="At most this many rows (default: all).")
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many rows first (paging, with --limit).")
@click.option("--why", is_flag=True, help="Under each job, every filter's verdict: how many nodes and why, and "
                                          "its reservation (from the scheduler's view).")
@click.option("-o", "--format", "fmt", default=None,
              help="squeue's --format, e.g. '%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R': %[.][WIDTH]FIELD ('.' "
                   "right-aligns; values are cut to WIDTH). Fields: %i id, %j name, %u user, %a account, "
                   "%T state, %t state code, %M time used, %l time limit, %L time left, %D nodes, %C CPUs, "
                   "%c CPUs per task, %m memory per node, %b GPUs per node, %R reason or nodes, %r reason, "
                   "%N nodes, %V submitted, %S started, %e ended, %Q priority class, %P partition, "
                   "%q QOS, %y nice, %F array id, %K array index, %% a percent sign.")
@click.option("--noheader", is_flag=True, help="With --format: no header line.")
@click.option("--json", "as_json", is_flag=True)
def queue(nats_url: str, tenant: str | None, account: str | None, user: str | None, me: bool,
          partition: str | None, states: tuple[str, ...], limit: int | None, offset: int, why: bool, fmt: str | None, noheader: bool,
          as_json: bool) -> None:
    """Pending and held jobs in scheduling order, with why each waits (like squeue)."""
    from services.front.slurm import squeue_format as slurm

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
            filters = {"tenant": tenant, "account": account, "user": user}
            parts = [p.strip() for p in (partition or "").split(",") if p.strip()]
            if len(parts) == 1:
                filters["partition"] = parts[0]
            body = await read_queue(nc, ask, filters, limit=limit, offset=offset)
            if len(parts) > 1:  # several: the read models take one, so the rest is sorted out here
                body["jobs"] = [row for row in body["jobs"] if row.get("partition") in parts]
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

    body, details, specs = run(go())
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
    for col in ("POS", "JOBID", "NAME", "USER", "ACCOUNT", "CLASS", "QOS CLASS", "PRIORITY", "GPUS", "CPUS", "MEM",
                "STATE", "WAITING"):
        table.add_column(col)
    _reason_column(table)
    for pos, row in enumerate(body["jobs"], offset + 1):
        priority = row.get("priority")
        table.add_row(str(row.get("rank") or pos), row["job_id"], row["name"] or "", row["user"] or "",
                      row["account"] or "", row["priority_class"] or "", row.get("qos") or "-",
                      "-" if priority is None else f"{priority:.1f}", _gpus(row), format_cpus(row["cpus_milli"] or 0),
                      format_memory(row["memory_bytes"] or 0), row["state"], _age(row["submitted_ts"]),
                      summary(row.get("why") or row["reason"])
                      or ("held" if row["state"] == "HELD" else "waiting for a cycle"))
    console().print(table)
    click.echo(f"{body['total']} queued (log seq {body['last_seq']})")


@click.command()
@nats_option
@click.option("--state", "states", multiple=True, help="Only jobs in this state (repeatable).")
@click.option("--tenant", default=None)
@click.option("--account", default=None)
@click.option("--user", default=None)
@click.option("--limit", type=int, default=None, help="At most this many jobs (default: all).")
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many rows first (paging, with --limit).")
@click.option("--history", is_flag=True, help="sacct's view: jobs that ran or ended, every user's unless --user "
                                             "(horizon sacct --allusers; see horizon sacct --help for more).")
@click.option("--starttime", default="midnight", show_default=True, help="With --history: as sacct's --starttime.")
@click.option("--json", "as_json", is_flag=True)
def jobs(nats_url: str, states: tuple[str, ...], tenant: str | None, account: str | None, user: str | None,
         limit: int | None, offset: int, history: bool, starttime: str, as_json: bool) -> None:
    """All jobs with their state, node and devices, in submission order.

    Read page by page (each answer of the projection fits in one NATS message), following a cursor
    on the submission order: every job that matches for the whole read is listed once; one that
    starts or stops matching meanwhile may or may not be."""
    _check_page(limit, offset)
    if history:
        from services.front.slurm.sacct_format import SACCT_DEFAULT, sacct_lines

        for line in sacct_lines(nats_url, states=states, user=user, account=account, tenant=tenant,
                                starttime=starttime, endtime=None, limit=limit, offset=offset, fmt=SACCT_DEFAULT,
                                as_json=as_json):
            click.echo(line)
        return

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query_all(nc, "jobs", {"states": list(states) or None, "tenant": tenant, "account": account,
                                                "user": user, "offset": offset}, "jobs", limit=limit)

    body = run(go())
    if as_json:
        click.echo(json.dumps(body["jobs"]))
        return
    table = Table(box=None, header_style="bold")
    # NUMBER: Slurm's job id (4213, 4213_7 for a task; services/domain/job_numbers.py), after the columns
    # scripts have read by position
    for col in ("JOBID", "NAME", "USER", "STATE", "CLASS", "GPUS", "NODE[DEVICES]", "EXIT", "NUMBER"):
        table.add_column(col)
    _reason_column(table)
    for row in body["jobs"]:
        table.add_row(row["job_id"], row["name"] or "", row["user"] or "", row["state"], row["priority_class"] or "",
                      _gpus(row), _devices(row), "" if row["exit_code"] is None else str(row["exit_code"]),
                      row.get("slurm_id") or "-",
                      summary(row["reason"]))
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
    if job_id:
        job_id = resolve_at(nats_url, [job_id])[job_id]  # a number (4213) names a job too
    subject = f"horizon.evt.*.*.{job_id}" if job_id else "horizon.evt.>"

    async def go() -> None:
        async with session(nats_url) as nc:
            sub = await nc.subscribe(subject)
            seen = 0
            async for msg in sub.messages:
                if as_json:
                    click.echo(msg.data.decode())
                else:
                    try:
                        body = decode_json(msg.data)
                    except ValueError:
                        continue
                    if isinstance(body, dict):
                        click.echo(_line(body))
                seen += 1
                if count and seen >= count:
                    return

    try:
        run(go())
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
    for command in (queue, jobs, watch):
        group.add_command(command)
