"""``horizon audit``: replay the log through the decision functions and prove every decision.

Reads the whole ``HORIZON`` stream (a progress bar on a terminal), folds it
through the five services' cores configured as the live services were, and
checks that every recorded decision is reproduced exactly from its
``basis_seq`` (``services/runtime/replay.py``; docs/audit.md). ``--job JOB``
tells one job's story from the log, each line marked reproduced or not. The
audit itself is ``services/front/audit/``; this is its flags and its output.

The contract: ``horizon audit --nats URL --json`` prints
``{"decisions": N, "reproduced": N, "mismatches": [...]}`` (and more keys), and
the exit code is non-zero when any decision is not reproduced.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import click

from services.front.audit.config import BACKFILL_MODES, POLICIES, AuditConfig, audit_cores
from services.front.audit.log import read_log, time_hint
from services.front.audit.story import fmt_time, job_story, story_events
from services.front.audit.summary import summary_json
from services.front.client.progress import Bar
from services.front.cli.options import nats_option
from services.runtime.log import LogError
from services.runtime.replay import AuditReport, audit, concerns

__all__ = ["register"]


def _short(text: str | None, width: int = 400) -> str:
    if text is None:
        return "(nothing)"
    return text if len(text) <= width else text[: width - 1] + "…"


SHOWN = 20  # mismatches printed in text; --json lists them all


def _print_mismatches(report: AuditReport) -> None:
    for m in report.mismatches[:SHOWN]:
        if m["kind"] == "gap":
            click.echo(f"  GAP: {m['reason']}")
            continue
        where = f"seq {m['seq']}" if m["seq"] is not None else "not in the log"
        about = f" job {m['job']}" if m["job"] else (f" node {m['node']}" if m["node"] else "")
        click.echo(f"  {where}  {m['service']} {m['type']}{about}  basis {m['basis_seq']}  id {m['id']}")
        click.echo(f"    {m['reason']}")
        if m["recorded"] is not None or m["replayed"] is not None:
            click.echo(f"    recorded: {_short(m['recorded'])}")
            click.echo(f"    replayed: {_short(m['replayed'])}")
    if len(report.mismatches) > SHOWN:
        click.echo(f"  … and {len(report.mismatches) - SHOWN} more (--json lists them all)")


def _print_summary(report: AuditReport, url: str, config: AuditConfig, first: int, last: int | None,
                   hint: str | None, elapsed: float) -> None:
    to = last if last is not None else report.last_seq
    scope = "every decision" if first <= 1 and to >= report.last_seq else f"decisions recorded at seq {first}..{to}"
    click.echo(f"horizon audit of {url}: {report.records} records, seq {report.first_seq}..{report.last_seq}; "
               f"checked {scope} ({elapsed:.1f} s)")
    click.echo(f"configuration: {config.describe()}")
    click.echo(f"  {'service':<12}{'decisions':>11}{'reproduced':>12}{'mismatches':>12}")
    for name, t in report.services.items():
        click.echo(f"  {name:<12}{t.decisions:>11}{t.reproduced:>12}{t.mismatches:>12}")
    click.echo(f"  {'total':<12}{report.decisions:>11}{report.reproduced:>12}{len(report.mismatches):>12}")
    if report.observations:
        click.echo(f"observations, not decisions (inventory's heartbeat watch: NodeLost/NodeReady): "
                   f"{report.observations}")
    if report.claims:
        click.echo(f"leaders' claims, not decisions (LeadershipClaimed, the fence of a leased service): {report.claims}")
    if report.ok:
        click.echo(f"OK: all {report.decisions} decisions reproduced exactly from their basis_seq.")
    else:
        click.echo(f"MISMATCHES: {len(report.mismatches)}")
        _print_mismatches(report)
    if hint:
        click.echo(f"hint: {hint}")


# ---------------------------------------------------------------------- the command


@click.command("audit")
@nats_option
@click.option("--from", "from_seq", type=click.IntRange(min=1), default=1, show_default=True,
              help="Check the decisions recorded from this seq on (the replay still folds from seq 1).")
@click.option("--to", "to_seq", type=click.IntRange(min=1), default=None,
              help="Check the decisions recorded up to this seq (default: the end of the log).")
@click.option("--job", "job_id", default=None, help="Tell this job's story, each line marked reproduced or not.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: decisions, reproduced, mismatches, ...")
@click.option("--policy", type=click.Choice(POLICIES), default="multifactor", show_default=True,
              help="The queue policy the services ran with (horizon up --policy), until a PolicyConfigured.")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True,
              help="The backfill mode the services ran with (horizon up --backfill-mode), until a ProfileConfigured.")
@click.option("--virtual-time", is_flag=True,
              help="The log was written by the simulator (horizon simulate --nats): replay at virtual time, "
                   "with the simulator's core configuration.")
def audit_command(nats_url: str, from_seq: int, to_seq: int | None, job_id: str | None, as_json: bool, policy: str,
                  backfill_mode: str, virtual_time: bool) -> None:
    """Replay the log and check that every decision is reproduced exactly from its basis_seq.

    Exits 1 when any decision is not reproduced (or the log cannot be read)."""
    if to_seq is not None and to_seq < from_seq:
        raise click.BadParameter(f"--to {to_seq} is before --from {from_seq}", param_hint="--to")
    config = AuditConfig(policy=policy, backfill=backfill_mode, virtual_time=virtual_time)
    started = time.perf_counter()
    with Bar("reading") as reading:
        records = asyncio.run(read_log(nats_url, reading.update))
        last = records[-1].seq
        if from_seq > last:
            raise LogError(f"--from {from_seq} is past the end of the log (its last seq is {last})")
        mine = story_events(records, job_id) if job_id is not None else []
        if job_id is not None and not mine:
            raise LogError(f"no job {job_id} in the log")
        replaying = reading.add("replaying", total=len(records))
        select = (lambda e: concerns(e, job_id)) if job_id else None
        report = audit(records, audit_cores(config, records), first=from_seq, last=to_seq, select=select, progress=replaying.update)
    elapsed = time.perf_counter() - started
    hint = time_hint(records, virtual_time)
    if job_id is not None:
        story = job_story(mine, job_id, report, virtual_time)
        _emit_story(job_id, story, report, nats_url, config, from_seq, to_seq, hint, as_json)
    elif as_json:
        click.echo(json.dumps(summary_json(report, nats_url, config, from_seq, to_seq, hint)))
    else:
        _print_summary(report, nats_url, config, from_seq, to_seq, hint, elapsed)
    if not report.ok:
        sys.exit(1)


def _emit_story(job_id: str, story: list[dict[str, Any]], report: AuditReport, url: str, config: AuditConfig,
                first: int, last: int | None, hint: str | None, as_json: bool) -> None:
    if as_json:
        out = summary_json(report, url, config, first, last, hint)
        out.update(job=job_id, story=story)
        click.echo(json.dumps(out))
        return
    click.echo(f"job {job_id}: its story in the log at {url} ({config.describe()})")
    virtual = config.virtual_time
    for line in story:
        click.echo(f"  {line['seq']:>8}  {fmt_time(line['time'], virtual):<24} {line['text']}  [{line['verdict']}]")
    click.echo(f"{report.decisions} decisions about {job_id}: {report.reproduced} reproduced, "
               f"{len(report.mismatches)} mismatches")
    if hint:
        click.echo(f"hint: {hint}")
    if report.mismatches:
        _print_mismatches(report)


def register(group: click.Group) -> None:
    group.add_command(audit_command)
