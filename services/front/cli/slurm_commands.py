"""``horizon squeue`` and ``horizon scancel``: squeue's and scancel's options, output and exit codes,
over the same code as ``horizon queue`` and ``horizon cancel``.

They are what the shims named ``squeue`` and ``scancel`` run (``services/front/cli/slurm_dispatch.py``), so
their options are Slurm's even where Horizon's commands differ: ``-h`` is ``--noheader`` for squeue,
as in Slurm (help is ``--help``); scancel prints nothing when it succeeds. The views are Horizon's
read models: squeue's rows are ``read_queue``'s (the waiting jobs in the scheduler's order, then the
others), its columns ``SQUEUE_FIELDS`` of ``services/front/slurm/squeue_format.py``; its format, grouping
and sort ``services/front/slurm/squeue_view.py``'s, what scancel names ``services/front/slurm/scancel_jobs.py``'s.

What squeue shows as Slurm does: by default the live jobs (pending, held, configuring, running),
every user's; a pending array's waiting tasks on one line (``ID_[0-9]``) unless ``-r``; ``-l`` the
long format under a date line; ``$SQUEUE_FORMAT``, ``$SQUEUE_FORMAT2`` and the other ``SQUEUE_*``
variables when the options are not given. Filters by lists (``-u a,b``, ``-j 12,13``) as squeue's.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

import click

from events.subjects import tenant_view
from services.front.client.client import default_user, query_all, session
from services.front.client.job_numbers import resolve_at, resolve_ids, shown_id
from services.front.client.requests import cancel_requests
from services.front.cli.options import admin_option, nats_option, tenant_option
from services.front.cli.slurm_getopt import SlurmCommand
from services.front.slurm.job_rows import select_states, state_matches
from services.front.slurm.sacct_format import job_matches
from services.front.slurm.scancel_jobs import SCANCEL_STATES, scancel_targets
from services.front.slurm.squeue_format import SQUEUE_FIELDS, accepted_specs, needs_specs, squeue_lines
from services.front.slurm.squeue_view import (LIVE, LONG_NAMES, SQUEUE_DEFAULT, group_arrays, sort_rows, spec_value,
                                              squeue_format, squeue_rows)

__all__ = ["squeue", "scancel", "register"]


def _listed(values: Iterable[str]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


@click.command(name="squeue", cls=SlurmCommand, context_settings={"help_option_names": ["--help"]})
@nats_option
@click.option("-A", "--account", "--accounts", "accounts", multiple=True, help="Only these accounts' jobs (a,b).")
@click.option("-a", "--all", "all_partitions", is_flag=True, help="Accepted: Horizon hides no partition.")
@click.option("--hide", is_flag=True, help="Accepted: Horizon hides no partition.")
@click.option("-r", "--array", "one_per_task", is_flag=True,
              help="One line per array task (by default an array's pending tasks share one line, ID_[0-9]).")
@click.option("-h", "--noheader", is_flag=True, help="No header line.")
@click.option("-i", "--iterate", type=click.IntRange(min=1), default=None,
              help="Print again every this many seconds, under the time, until Ctrl-C.")
@click.option("-j", "--jobs", "jobs", multiple=True, help="Only these jobs (12,13; an array's id: its tasks).")
@click.option("-l", "--long", "long_", is_flag=True, help="The long format (state and time limit), under a date.")
@click.option("-L", "--licenses", "licenses", multiple=True, help="Only jobs asking for these licenses (a,b).")
@click.option("--me", is_flag=True, help="Only your jobs.")
@click.option("-n", "--name", "names", multiple=True, help="Only jobs with these names.")
@click.option("-o", "--format", "fmt", default=None,
              help="squeue's format, %[.][WIDTH]FIELD (docs/slurm.md lists the fields); default "
                   f"'{SQUEUE_DEFAULT}'.")
@click.option("-O", "--Format", "fmt_long", default=None,
              help="Fields by name, name[:[.][size][suffix]],... (size 20 unless given): "
                   + ",".join(LONG_NAMES) + ".")
@click.option("-p", "--partition", "--partitions", "partitions", multiple=True, help="Only these partitions' jobs.")
@click.option("-q", "--qos", "qos", multiple=True, help="Only jobs of these QOS.")
@click.option("-S", "--sort", "sort_keys", default=None, help="Sort by these fields of -o: 'P,-t,i'.")
@click.option("-t", "--states", "--state", "states", multiple=True,
              help="Only jobs in these states (PD,R,CD,... or all); default: pending and running ones.")
@click.option("-u", "--user", "--users", "users", multiple=True, help="Only these users' jobs (a,b).")
@click.option("-w", "--nodelist", "nodelist", multiple=True, help="Only jobs on these nodes (a,b).")
@click.option("--json", "as_json", is_flag=True,
              help="{\"jobs\": [...]}: the read model's rows, squeue's columns under 'slurm'.")
@click.version_option(None, "-V", "--version", package_name="horizon-scheduler", message="horizon %(version)s")
def squeue(nats_url: str, accounts: tuple[str, ...], all_partitions: bool, hide: bool, one_per_task: bool,
           noheader: bool, iterate: int | None, jobs: tuple[str, ...], long_: bool, licenses: tuple[str, ...], me: bool,
           names: tuple[str, ...],
           fmt: str | None, fmt_long: str | None, partitions: tuple[str, ...], qos: tuple[str, ...],
           sort_keys: str | None, states: tuple[str, ...], users: tuple[str, ...], nodelist: tuple[str, ...],
           as_json: bool) -> None:
    """The jobs in Horizon's queue as squeue shows them (squeue's options and columns)."""
    env = dict(os.environ)
    fmt = squeue_format(fmt, fmt_long, long_, env)
    squeue_lines([], fmt, header=False)  # a bad field is an error before anything is asked
    user_list = [default_user()] if me else _listed(users) or _listed([env.get("SQUEUE_USERS", "")])
    account_list = _listed(accounts) or _listed([env.get("SQUEUE_ACCOUNT", "")])
    name_list = _listed(names) or _listed([env.get("SQUEUE_NAMES", "")])
    partition_list = _listed(partitions) or _listed([env.get("SQUEUE_PARTITION", "")])
    qos_list = _listed(qos) or _listed([env.get("SQUEUE_QOS", "")])
    license_names = set(_listed(licenses) or _listed([env.get("SQUEUE_LICENSES", "")]))
    state_list = _listed(states) or _listed([env.get("SQUEUE_STATES", "")])
    job_ids = list(resolve_at(nats_url, _listed(jobs)).values())  # 4213, 4213_7: the ids they name
    nodes = set(_listed(nodelist))
    sort_keys = sort_keys or env.get("SQUEUE_SORT") or None
    if sort_keys:
        sort_rows([], sort_keys, 0.0, {})  # a bad field is an error before anything is asked
    one_per_task = one_per_task or bool(env.get("SQUEUE_ARRAY"))
    ask, match = select_states(state_list) if state_list else (LIVE, set())
    filters = {"tenant": None, "user": user_list[0] if len(user_list) == 1 else None,
               "account": account_list[0] if len(account_list) == 1 else None}
    wanted = {"user": set(user_list), "account": {a.lower() for a in account_list},
              "name": {n.lower() for n in name_list}}

    def keep(row: dict[str, Any]) -> bool:
        return ((not job_ids or job_matches(row["job_id"], job_ids))
                and state_matches(row, match)
                and (not partition_list or bool(set((row.get("partition") or "").split(",")) & set(partition_list)))
                and (not wanted["user"] or row.get("user") in wanted["user"])
                and (not wanted["account"] or (row.get("account") or "").lower() in wanted["account"])
                and (not wanted["name"] or (row.get("name") or "").lower() in wanted["name"])
                and (not nodes or bool(nodes & {a["node"] for a in row.get("allocation") or []})))

    all_specs = bool(as_json or qos_list or license_names or needs_specs(fmt) or (sort_keys and needs_specs(
        "".join(f"%{k.lstrip('+-')}" for k in sort_keys.split(",") if k.strip().lstrip("+-")))))

    while True:
        rows, specs = asyncio.run(squeue_rows(nats_url, ask, filters, keep, all_specs, not one_per_task))
        if qos_list:
            rows = [r for r in rows if spec_value("q", r, specs).lower() in {q.lower() for q in qos_list}]
        if license_names:
            rows = [r for r in rows if r["job_id"] in specs and license_names & set(specs[r["job_id"]].licenses)]
        now = time.time()
        if sort_keys:
            rows = sort_rows(rows, sort_keys, now, specs)
        if as_json:
            for row in rows:
                row["slurm"] = {header: str(get(row, now, specs.get(row["job_id"])))
                                for header, get, _ in SQUEUE_FIELDS.values()}
            click.echo(json.dumps({"jobs": rows}))
        else:
            if not one_per_task:
                rows = group_arrays(rows, specs)
            if (long_ or iterate) and not noheader:
                click.echo(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
            for line in squeue_lines(rows, fmt, header=not noheader, now=now, specs=specs):
                click.echo(line)
        if iterate is None:
            return
        sys.stdout.flush()
        try:
            time.sleep(iterate)
        except KeyboardInterrupt:
            return
        click.echo("")


# --------------------------------------------------------------------------
# scancel
# --------------------------------------------------------------------------


@click.command(name="scancel", cls=SlurmCommand, context_settings={"help_option_names": ["--help"]})
@nats_option
@tenant_option
@admin_option
@click.option("-u", "--user", "users", multiple=True, help="Only this user's jobs.")
@click.option("--me", is_flag=True, help="Only your jobs.")
@click.option("-n", "--name", "--jobname", "names", multiple=True, help="Only jobs with this name.")
@click.option("-t", "--state", "state", default=None,
              type=click.Choice(sorted(SCANCEL_STATES), case_sensitive=False),
              help="Only jobs in this state: PENDING (held ones too) or RUNNING (being started too).")
@click.option("-A", "--account", "accounts", multiple=True, help="Only this account's jobs.")
@click.option("-p", "--partition", "partitions", multiple=True, help="Only jobs in this partition.")
@click.option("-q", "--qos", "qos", multiple=True, help="Only jobs of this QOS.")
@click.option("-w", "--nodelist", "nodelist", multiple=True, help="Only jobs on these nodes (a,b).")
@click.option("-s", "--signal", "signal_name", default=None,
              help="Not supported: Horizon sends a job no signal without ending it (scancel JOB stops it, its "
                   "checkpoint signal first).")
@click.option("-b", "--batch", is_flag=True, help="With --signal only (not supported).")
@click.option("-f", "--full", is_flag=True, help="With --signal only (not supported).")
@click.option("-i", "--interactive", is_flag=True, help="Not supported: scancel asks nothing here.")
@click.option("-H", "--hurry", is_flag=True, help="Accepted (no burst buffer to stage out).")
@click.option("-Q", "--quiet", is_flag=True, help="No error messages about jobs that are not cancelled.")
@click.option("-v", "--verbose", count=True, help="Say what is done to each job.")
@click.option("--reason", default="", help="Why (Horizon's; kept in the log).")
@click.version_option(None, "-V", "--version", package_name="horizon-scheduler", message="horizon %(version)s")
@click.argument("job_args", nargs=-1)
def scancel(nats_url: str, tenant: str, admin: bool, users: tuple[str, ...], me: bool, names: tuple[str, ...],
            state: str | None, accounts: tuple[str, ...], partitions: tuple[str, ...], qos: tuple[str, ...],
            nodelist: tuple[str, ...], signal_name: str | None, batch: bool, full: bool, interactive: bool,
            hurry: bool, quiet: bool, verbose: int, reason: str, job_args: tuple[str, ...]) -> None:
    """Cancel jobs as scancel does: JOBID... (ID, ID_N, ID_[1-3], ID_*, a,b) and/or filters (your own jobs
    that match every filter; any user's with -u or --admin); silent when it succeeds."""
    if signal_name is not None or batch or full:
        raise click.UsageError("--signal (and -b/-f) is not supported: Horizon sends a job no signal without "
                               "ending it; 'scancel JOB' stops the job (its checkpoint signal first, if it has one)")
    if interactive:
        raise click.UsageError("-i/--interactive is not supported: give the jobs to cancel")
    user_list = [default_user()] if me else _listed(users)
    account_list, name_list = _listed(accounts), _listed(names)
    partition_list, qos_list, nodes = _listed(partitions), _listed(qos), set(_listed(nodelist))
    filtered = bool(user_list or account_list or name_list or partition_list or qos_list or nodes or state)
    targets = scancel_targets(job_args)
    if filtered and not user_list and not admin:
        user_list = [default_user()]  # as Slurm lets a user cancel only their own jobs
    if not targets and not filtered:
        raise click.UsageError("No job identification provided: give JOBIDs or filters (-u, -n, -t, -A, -p, -q, -w)")

    named: dict[str, str] = {}  # what a target names (4213 -> its id: services/front/client/job_numbers.py)

    async def go() -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
        nonlocal targets
        async with session(nats_url) as nc:
            named.update(await resolve_ids(nc, targets))
            targets = list(dict.fromkeys(named[t] for t in targets))
            chosen = list(targets)
            if filtered:
                states = SCANCEL_STATES[state.upper()] if state else LIVE
                if not states:
                    return [], {}
                ask = {"states": states, "tenant": None if admin else tenant,
                       "user": user_list[0] if len(user_list) == 1 else None,
                       "account": account_list[0] if len(account_list) == 1 else None}
                rows = (await query_all(nc, "jobs", ask, "jobs"))["jobs"]
                rows = [r for r in rows if (not targets or job_matches(r["job_id"], targets))
                        and (not user_list or r.get("user") in user_list)
                        and (not account_list or r.get("account") in account_list)
                        and (not name_list or r.get("name") in name_list)
                        and (not partition_list or r.get("partition") in partition_list)
                        and (not nodes or bool(nodes & {a["node"] for a in r.get("allocation") or []}))]
                if qos_list:
                    specs = await accepted_specs(nc, [r["job_id"] for r in rows])
                    rows = [r for r in rows if spec_value("q", r, specs) in qos_list]
                chosen = [r["job_id"] for r in rows]
                named.update({shown_id(r): r["job_id"] for r in rows})  # said by their numbers
            if not chosen:
                return [], {}
            answers = await cancel_requests(nc, chosen, tenant=tenant, admin=admin, reason=reason)
            return chosen, answers

    chosen, answers = asyncio.run(go())
    given = {job_id: ref for ref, job_id in named.items()}  # said in the words it was given

    def said(job_id: str) -> str:
        base, _, index = job_id.rpartition("_")
        if job_id not in given and base in given and index.isdigit():
            return f"{given[base]}_{index}"  # a task of an array named by number: 4213_7
        return given.get(job_id, job_id)

    failed = False
    for job in chosen:
        got = answers.get(job)
        if not got:
            failed = True
            if not quiet:
                click.echo(f"scancel: error: no answer about job {said(job)} within 10 s (the request is in the log)",
                           err=True)
            continue
        for answer in got:
            about = said(answer["job_id"] if admin else tenant_view(tenant, answer["job_id"]))  # the id you gave
            if answer["type"] == "RequestRejected":
                failed = True
                if not quiet:
                    click.echo(f"scancel: error: Kill job error on job id {about}: {answer['reason']}", err=True)
            elif verbose:
                what = "Terminating" if answer["type"] == "JobStopRequested" else "Cancelled"
                click.echo(f"scancel: {what} job {about}", err=True)
    if verbose and filtered and not chosen:
        click.echo("scancel: no job matches", err=True)
    if failed:
        raise click.exceptions.Exit(1)


def register(group: click.Group) -> None:
    group.add_command(squeue)
    group.add_command(scancel)
