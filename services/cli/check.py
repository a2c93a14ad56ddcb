"""``horizon check``: the whole-log invariants, from sequence 1 (issue 9's checker, for operators and tests).

* no device, CPU or byte of memory over-allocated at any sequence; every allocation on a registered
  node and its devices; the ledger recomputed from the jobs equals the incremental one;
* every ``JobScheduled`` that takes effect is for an accepted job; no attempt scheduled twice;
* no account over its quota without borrowing, nor over its running-jobs limit;
* every job ends in at most one terminal state (a second terminal event for an ended job is reported);
* and, unless ``--no-audit``, every recorded decision is reproduced by replay (``horizon audit``).

``--json`` prints ``{"records", "jobs", "live", "ended", "problems": [...], "audit": {...}}``; the exit
code is non-zero when there is any problem or mismatch.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from events import catalogue as c
from events.codec import DecodeError, decode
from services.cli.audit import AuditConfig, audit_cores, read_log
from services.cli.jobs import nats_option
from services.runtime.check import check_log
from services.runtime.log import LogError, Record
from services.state.jobs import LIVE, TERMINAL

__all__ = ["register", "terminal_twice"]

_ENDINGS = (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted, c.JobUnschedulable,
            c.JobDependencyNeverSatisfied)


def terminal_twice(records: list[Record]) -> list[str]:
    """Jobs with a second ending of the same attempt (two outcomes for one run)."""
    seen: dict[tuple[str, int], str] = {}
    out = []
    for record in records:
        if not record.subject.startswith("horizon.evt."):
            continue
        try:
            event = decode(record.data)
        except DecodeError:
            continue
        if isinstance(event, _ENDINGS):
            key = (event.job_id, getattr(event, "attempt", 0))
            kind = type(event).__name__
            if key in seen and seen[key] != kind:
                out.append(f"seq {record.seq}: {event.job_id} attempt {key[1]} ended twice ({seen[key]}, then {kind})")
            seen.setdefault(key, kind)
    return out


@click.command()
@nats_option
@click.option("--no-audit", is_flag=True, help="Only the invariants, not the replay of every decision.")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor",
              show_default=True, help="As the live services were started (for the replay).")
@click.option("--backfill-mode", type=click.Choice(["easy", "shadow", "greedy", "none"]), default="easy",
              show_default=True)
@click.option("--virtual-time", is_flag=True, help="The log is a simulator's (replay as the simulator runs).")
@click.option("--json", "as_json", is_flag=True)
def check(nats_url: str, no_audit: bool, policy: str, backfill_mode: str, virtual_time: bool, as_json: bool) -> None:
    """Check the whole log: capacity, ledger, attempts, quotas, endings, and (by default) every decision."""
    try:
        records = asyncio.run(read_log(nats_url))
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    report = check_log(records)
    problems = list(report.problems) + terminal_twice(records)
    states = [j.state for j in report.jobs.jobs.values()]
    body: dict[str, Any] = {
        "records": report.records, "jobs": len(states), "live": sum(1 for s in states if s in LIVE),
        "ended": sum(1 for s in states if s in TERMINAL), "scheduled": report.scheduled,
        "borrowed": report.borrowed, "problems": problems,
    }
    if not no_audit:
        from services.runtime.replay import audit

        config = AuditConfig(policy=policy, backfill=backfill_mode, virtual_time=virtual_time)
        result = audit(records, audit_cores(config))
        body["audit"] = {"decisions": result.decisions, "reproduced": result.reproduced,
                         "mismatches": len(result.mismatches)}
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
