"""``horizon check``: the whole-log invariants, from sequence 1 (issue 9's checker, for operators and tests).

``services.front.host.check.check_log`` checks them (its docstring states each one exactly):

* no device, CPU or byte of memory over-allocated at any sequence; every allocation names devices
  that exist; the ledger recomputed from the jobs equals the incremental one;
* every ``JobScheduled`` is for an accepted job, on nodes fit for placement at its basis (a node lost
  after the basis is a race, but the attempt must then end); no attempt scheduled twice;
* every accepted job ends in exactly one terminal state or is still live: one ending per run and per
  wait, none for a job never accepted or an attempt never scheduled;
* quotas: running jobs, GPUs, CPUs, memory and GPUs per type within each account's limits (what it
  holds by borrowing aside), and a cohort within the sum of its quotas whenever one of it borrows;
* and, unless ``--no-audit``, every recorded decision is reproduced by replay (``horizon audit``).

``--json`` prints ``{"records", "jobs", "live", "ended", "scheduled", "borrowed", "problems": [...],
"audit": {...}}``; the exit code is non-zero when there is any problem or mismatch.
"""

from __future__ import annotations

import asyncio
import json

import click

from events.vocabulary import BACKFILL_MODES
from services.front.audit.config import AuditConfig, audit_cores
from services.front.audit.log import read_log
from services.front.cli.options import nats_option
from services.front.client.progress import Bar
from services.front.host.check import check_log, check_summary
from services.runtime.log import LogError
from services.runtime.replay import audit

__all__ = ["register"]


@click.command()
@nats_option
@click.option("--no-audit", is_flag=True, help="Only the invariants, not the replay of every decision.")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor",
              show_default=True, help="As the live services were started (for the replay).")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy",
              show_default=True)
@click.option("--virtual-time", is_flag=True, help="The log is a simulator's (replay as the simulator runs).")
@click.option("--json", "as_json", is_flag=True)
def check(nats_url: str, no_audit: bool, policy: str, backfill_mode: str, virtual_time: bool, as_json: bool) -> None:
    """Check the whole log: capacity, ledger, attempts, quotas, endings, and (by default) every decision."""
    with Bar("reading") as reading:
        try:
            records = asyncio.run(read_log(nats_url, reading.update))
        except LogError as exc:
            raise click.ClickException(str(exc)) from None
        report = check_log(records)
        replaying = reading.add("replaying", total=len(records)) if not no_audit else None
        if replaying is not None:
            config = AuditConfig(policy=policy, backfill=backfill_mode, virtual_time=virtual_time)
            result = audit(records, audit_cores(config, records), progress=replaying.update)
    body = check_summary(report, None if no_audit else result)
    problems = body["problems"]
    failed = bool(problems) or bool(body.get("audit", {}).get("mismatches"))
    if as_json:
        click.echo(json.dumps(body))
    else:
        click.echo(f"{body['records']:,} records, {body['jobs']:,} jobs ({body['live']:,} live, "
                   f"{body['ended']:,} ended), {body['scheduled']:,} attempts scheduled")
        for problem in problems[:50]:
            click.echo(f"  problem: {problem}")
        if len(problems) > 50:
            click.echo(f"  ... and {len(problems) - 50} more")
        if "audit" in body:
            a = body["audit"]
            click.echo(f"decisions: {a['decisions']:,}, reproduced {a['reproduced']:,}, mismatches {a['mismatches']}"
                       f"{' (horizon audit shows them)' if a['mismatches'] else ''}")
        click.echo("ok" if not failed else "FAILED")
    if failed:
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(check)
