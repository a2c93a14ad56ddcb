"""``horizon sacct`` (= ``horizon jobs --history``): jobs that ran or ended, with sacct's columns.

Click wiring: Slurm's names of the states are ``services/front/slurm/job_rows.py``'s, sacct's fields,
time window and printing ``services/front/slurm/sacct_format.py``'s (squeue's format:
``services/front/slurm/squeue_format.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import click

from services.front.client.client import default_user
from services.front.cli.options import nats_option
from services.front.cli.slurm_getopt import SlurmCommand
from services.front.slurm.job_rows import nodes_of
from services.nodes.job_environment import CLUSTER_NAME
from services.front.slurm.sacct_format import SACCT_DEFAULT, SACCT_FIELDS, sacct_lines

__all__ = ["sacct", "one_cluster", "register"]


def _listed(values: Iterable[str]) -> list[str]:
    """Slurm's list options: repeated, comma-separated, or both."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _sacct_window(starttime: str | None, states: tuple[str, ...], job_ids: list[str]) -> str | None:
    """sacct's default ``--starttime``: with ``-j`` none (Unix epoch 0), with ``-s`` now (the jobs in
    those states now), else midnight."""
    if starttime is not None:
        return starttime
    if job_ids:
        return None
    return "now" if states else "midnight"


def one_cluster(names: list[str]) -> None:
    """``-M/--clusters``: Snakemake's Slurm executor asks ``sacct ... --clusters all`` of every cluster;
    Horizon is one, named as its jobs' ``SLURM_CLUSTER_NAME``. Another name is an error saying so."""
    others = [n for n in names if n.lower() not in ("all", CLUSTER_NAME)]
    if others:
        raise click.BadParameter(f"no cluster {', '.join(others)} here: Horizon is one cluster, {CLUSTER_NAME!r} "
                                 "('all' names it too)", param_hint="-M/--clusters")


@click.command(cls=SlurmCommand)
@nats_option
@click.option("-j", "--jobs", "jobs", multiple=True,
              help="Only these jobs (comma-separated or repeated; an array's id: all its tasks), in any state; "
                   "without -S, since the beginning.")
@click.option("-s", "--state", "states", multiple=True,
              help="Only jobs in these states: Slurm's names or codes (COMPLETED, CD, FAILED, TIMEOUT, RUNNING, "
                   "PENDING, ...), Horizon's (SUCCEEDED, ...), comma-separated or repeated; 'all'. "
                   "Default: every job that has run or ended. Without -S: the jobs in these states now.")
@click.option("-u", "--user", "users", multiple=True, help="Only these users' jobs (default: yours; comma-separated).")
@click.option("-a", "--allusers", is_flag=True, help="Every user's jobs.")
@click.option("-A", "--account", "--accounts", "accounts", multiple=True, help="Only these accounts' jobs.")
@click.option("--name", "names", multiple=True, help="Only jobs with these names (comma-separated).")
@click.option("-r", "--partition", "partitions", multiple=True, help="Only jobs in these partitions (comma-separated).")
@click.option("-N", "--nodelist", "nodelist", multiple=True,
              help="Only jobs that ran on one of these nodes (comma-separated).")
@click.option("--tenant", default=None, help="Only this tenant's jobs.")
@click.option("-S", "--starttime", default=None,
              help="Jobs running or ended at or after this time: YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM, "
                   "now-2days, today, midnight. Default: midnight; with -j the beginning; with -s now.")
@click.option("-E", "--endtime", default=None, help="Jobs begun (or submitted) at or before this time; same forms.")
@click.option("-o", "--format", "fmt", default=None,
              help="Comma-separated fields, NAME%WIDTH right-justified, NAME%-WIDTH left-justified ($SACCT_FORMAT "
                   "if set, else " + SACCT_DEFAULT + "): " + ",".join(SACCT_FIELDS) + ".")
@click.option("-b", "--brief", is_flag=True, help="JobID, State and ExitCode.")
@click.option("-l", "--long", "long_", is_flag=True, help="Every field Horizon has.")
@click.option("-e", "--helpformat", is_flag=True, help="List the fields --format takes.")
@click.option("-X", "--allocations", is_flag=True, help="The jobs alone, not their steps.")
@click.option("-p", "--parsable", "parsable1", is_flag=True, help="Fields separated by |, one at the end too.")
@click.option("-P", "--parsable2", "parsable", is_flag=True, help="Fields separated by |, no padding.")
@click.option("--delimiter", default="|", show_default=True, help="The separator of -p and -P.")
@click.option("-n", "--noheader", is_flag=True)
@click.option("--limit", type=int, default=100_000, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True,
              help="Skip this many of the matching jobs first (paging, with --limit).")
@click.option("-M", "--clusters", "clusters", multiple=True,
              help=f"Accepted for this cluster: 'all' or its name, {CLUSTER_NAME!r} (Horizon is one cluster).")
@click.option("--json", "as_json", is_flag=True, help="The read model's rows, with the sacct fields under 'slurm'.")
def sacct(nats_url: str, jobs: tuple[str, ...], states: tuple[str, ...], users: tuple[str, ...], allusers: bool,
          accounts: tuple[str, ...], names: tuple[str, ...], partitions: tuple[str, ...], nodelist: tuple[str, ...],
          tenant: str | None, starttime: str | None, endtime: str | None, fmt: str | None, brief: bool, long_: bool,
          helpformat: bool, allocations: bool, parsable1: bool, parsable: bool, delimiter: str, noheader: bool,
          limit: int, offset: int, clusters: tuple[str, ...], as_json: bool) -> None:
    """Jobs that ran or ended, with sacct's columns (your own since midnight, unless told otherwise)."""
    one_cluster(_listed(clusters))
    if helpformat:
        for i in range(0, len(SACCT_FIELDS), 4):
            click.echo("".join(f"{name:<20}" for name in list(SACCT_FIELDS)[i:i + 4]).rstrip())
        return
    if limit < 0 or offset < 0:
        raise click.UsageError("--limit and --offset must not be negative")
    job_ids = _listed(jobs)
    user_list, account_list, name_list = _listed(users), _listed(accounts), _listed(names)
    nodes, partition_list = set(_listed(nodelist)), set(_listed(partitions))
    if not user_list and not allusers and not job_ids:  # as sacct: your own jobs, unless you name them
        user_list = [default_user()]
    if fmt is None:
        fmt = ("JobID,State,ExitCode" if brief else ",".join(SACCT_FIELDS) if long_ else
               os.environ.get("SACCT_FORMAT") or SACCT_DEFAULT)
    wanted_names = {n.lower() for n in name_list}
    wanted_accounts = {a.lower() for a in account_list}

    def select(row: dict[str, Any]) -> bool:
        return ((not user_list or row.get("user") in user_list)
                and (not wanted_accounts or (row.get("account") or "").lower() in wanted_accounts)
                and (not wanted_names or (row.get("name") or "").lower() in wanted_names)
                and (not partition_list or row.get("partition") in partition_list)
                and (not nodes or bool(nodes & set(nodes_of(row)))))

    for line in sacct_lines(
            nats_url, states=states, user=user_list[0] if len(user_list) == 1 else None,
            account=account_list[0] if len(account_list) == 1 else None, tenant=tenant,
            starttime=_sacct_window(starttime, states, job_ids), endtime=endtime, limit=limit, fmt=fmt,
            as_json=as_json, parsable=parsable or parsable1, trailing=parsable1 and not parsable,
            delimiter=delimiter, noheader=noheader, offset=offset, job_ids=job_ids,
            select=select if (len(user_list) > 1 or account_list or name_list or nodes or partition_list) else None,
            allocations=allocations):
        click.echo(line)


def register(group: click.Group) -> None:
    group.add_command(sacct)
