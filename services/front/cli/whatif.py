"""``horizon whatif``: replay a span of the live log at virtual time as configured and as changed, and compare.

The what-if is services/front/sim/whatif/ (``whatif_report``: the comparison); this is reading the log,
the flags and the output."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from events.vocabulary import BACKFILL_MODES
from services.front.audit.log import read_log
from services.front.cli.options import nats_option
from services.front.client.progress import Bar
from services.front.sim import whatif as w
from services.front.sim.whatif.report import whatif_report
from services.runtime.log import LogError

__all__ = ["register"]

POLICIES = ["fcfs", "sjf", "f1", "multifactor"]


def _fmt(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def _print(out: dict[str, Any]) -> None:
    b, ch = out["baseline"], out["changed"]
    span = b["span"]
    fid = b["fidelity"]
    rejected = f", {span['rejected']:,} rejected at submission (not replayed)" if span.get("rejected") else ""
    click.echo(f"span {span['from']} .. {span['to']} (seq {span['first_seq']}..{span['last_seq']}): "
               f"{span['jobs']:,} jobs ({span['carried_in']:,} more replayed from before it{rejected}), "
               f"{span['capacity_gpus']:,} GPUs, {span['capacity_cpus']:,.0f} cores")
    elsewhere = fid["on_time_elsewhere"]
    latency = (f"; {elsewhere:,} more started on time on other nodes (the live services' latency, "
               f"see --json's divergences)") if elsewhere else ""
    click.echo(f"baseline reproduces {fid['reproduced']:,} of {fid['compared']:,} recorded starts "
               f"(within {fid['tolerance_s']:g} s, same nodes){latency}; {fid['unexplained']:,} differ without a "
               f"known cause")
    for why, n in fid["cannot_predict"].items():
        click.echo(f"  {n:,} {why}")
    click.echo("changes: " + ("; ".join(ch["changes"]) or "none"))
    more = ch["never_started"] - b["never_started"]
    if more > 0:
        click.echo(f"{more:,} more job{'s' if more > 1 else ''} never start{'s' if more == 1 else ''} in the changed "
                   f"run: each waits until its user's cancel or the end of the span, in the waits below")
    click.echo("")
    click.echo(f"{'':<34}{'baseline':>14}{'changed':>14}{'change':>12}")
    for key, label in (("never_started", "jobs never started"), ("mean_wait_s", "mean wait (s)"),
                       ("p50_wait_s", "p50 wait (s)"), ("p90_wait_s", "p90 wait (s)"),
                       ("p99_wait_s", "p99 wait (s)"), ("mean_bounded_slowdown", "mean bounded slowdown"),
                       ("utilization", f"utilisation ({b['utilization_of']})"),
                       ("gpu_hours_lost_to_preemption", "GPU-hours lost to preemption")):
        x, y = b[key], ch[key]
        delta = f"{(y - x) / x * 100:+.1f}%" if x else ("" if y == x else "new")
        click.echo(f"  {label:<32}{_fmt(x):>14}{_fmt(y):>14}{delta:>12}")
    click.echo(f"  {'fair-share distance':<32}{b['fairshare']['distance']:>14.3f}{ch['fairshare']['distance']:>14.3f}")
    for kind in ("tenant", "account", "partition", "class"):
        rows_b = {r[kind]: r for r in b[f"per_{kind}"]}
        rows_c = {r[kind]: r for r in ch[f"per_{kind}"]}
        if len(rows_b) <= 1 and len(rows_c) <= 1 and kind != "tenant":
            continue
        click.echo("")
        click.echo(f"{'per ' + kind:<20}{'jobs':>7}   {'mean wait (s)':>21}   {'p50':>17}   {'p90':>17}   "
                   f"{'p99':>17}   {'bounded slowdown':>17}")
        for name in sorted(set(rows_b) | set(rows_c)):
            x, y = rows_b.get(name, {}), rows_c.get(name, {})
            cells = []
            for key in ("mean_wait_s", "p50_wait_s", "p90_wait_s", "p99_wait_s", "mean_bounded_slowdown"):
                cells.append(f"{_fmt(x.get(key, 0.0)):>9} -> {_fmt(y.get(key, 0.0)):<8}")
            click.echo(f"  {name:<18}{x.get('jobs', 0):>7}   " + "   ".join(cells))
    fb = {r["account"]: r for r in b["fairshare"]["accounts"]}
    fc = {r["account"]: r for r in ch["fairshare"]["accounts"]}
    if len(fb) > 1:
        click.echo("")
        click.echo(f"{'fair share':<20}{'target':>10}{'delivered':>14}{'changed':>12}")
        for name in sorted(set(fb) | set(fc)):
            click.echo(f"  {name:<18}{fc.get(name, fb.get(name, {})).get('target', 0):>10.3f}"
                       f"{fb.get(name, {}).get('delivered', 0):>14.3f}{fc.get(name, {}).get('delivered', 0):>12.3f}")
    mv = ch["vs_baseline"]
    click.echo("")
    click.echo(f"jobs starting earlier: {mv['earlier']['jobs']:,} (mean {_fmt(mv['earlier']['mean_s'])} s, "
               f"p90 {_fmt(mv['earlier']['p90_s'])} s, most {_fmt(mv['earlier']['max_s'])} s); "
               f"later: {mv['later']['jobs']:,} (mean {_fmt(mv['later']['mean_s'])} s, p90 {_fmt(mv['later']['p90_s'])} s, "
               f"most {_fmt(mv['later']['max_s'])} s); unchanged: {mv['same']:,}")
    click.echo(f"replayed twice in {b['replay_wall_s'] + ch['replay_wall_s']:,.1f} s")


@click.command("whatif")
@nats_option
@click.option("--from", "from_text", default=None,
              help="Start of the span: a seq, an ISO 8601 time, or a duration before --to (7d, 36h). Default: 7d.")
@click.option("--to", "to_text", default=None,
              help="End of the span: a seq, an ISO 8601 time, or a duration before the log's last event. "
                   "Default: the log's last event.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A configuration change, applied at the span's start: policy.weight.fairshare=20000, "
                   "fairshare.half_life=3d, backfill=conservative, account.NAME.shares=4, "
                   "account.NAME.quota.gpus=64, preemption.victims=... (docs/whatif.md lists every key).")
@click.option("--profile", "profiles", multiple=True, metavar="NAME.KEY=VALUE",
              help="The same as --set profile.NAME.KEY=VALUE (e.g. default.backfill=shadow).")
@click.option("--preemption", "preemptions", multiple=True, metavar="KEY=VALUE",
              help="The same as --set preemption.KEY=VALUE (e.g. victims=lowest-priority-youngest).")
@click.option("--config", "config_json", multiple=True, metavar="JSON|FILE",
              help="Any operator configuration event(s) as JSON with a \"type\" (as horizon simulate's config).")
@click.option("--add-nodes", "add_nodes", multiple=True, metavar="COUNTxGPUS[TYPE]",
              help="Add nodes at the span's start, shaped like a recorded node of that GPU type: 4x8a100.")
@click.option("--remove-nodes", "remove", multiple=True, metavar="PATTERN",
              help="Remove the recorded nodes whose names match (shell glob, e.g. 'gpu-1*') for the whole span.")
@click.option("--policy", type=click.Choice(POLICIES), default="multifactor", show_default=True,
              help="The queue policy the services ran with (horizon up --policy), until a PolicyConfigured.")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True,
              help="The backfill mode the services ran with (horizon up --backfill-mode), until a ProfileConfigured.")
@click.option("--tolerance", "tolerance_s", type=float, default=1.0, show_default=True,
              help="Seconds a replayed start may differ from the recorded one and still reproduce it.")
@click.option("--warmup", default="7d", show_default=True,
              help="Also replay the jobs submitted this long before --from (not measured), so that the span "
                   "begins with the queue and fair-share usage it had; 0: none; all: from the log's start.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"baseline": {...}, "changed": {...}}.')
@click.option("--starts", "starts_file", type=click.Path(dir_okay=False), default=None,
              help="Also write each job's recorded, baseline and changed start and nodes (JSON) to this file.")
def whatif_command(nats_url: str, from_text: str | None, to_text: str | None, sets: tuple[str, ...],
                   profiles: tuple[str, ...], preemptions: tuple[str, ...], config_json: tuple[str, ...],
                   add_nodes: tuple[str, ...], remove: tuple[str, ...], policy: str, backfill_mode: str,
                   tolerance_s: float, warmup: str, as_json: bool, starts_file: str | None) -> None:
    """Replay a span of the live log (default: its last 7 days) twice at virtual time, through the same
    services: as configured, and with the changes asked for; compare waits, slowdown, utilisation,
    preemption and fair share. Users' submissions stay as recorded (docs/whatif.md)."""
    all_sets = (*sets, *(f"profile.{p}" for p in profiles), *(f"preemption.{p}" for p in preemptions))
    try:
        w.parse_sets(all_sets)  # bad keys answer before the log is read
        if warmup != "all":
            w.parse_duration(warmup, "--warmup")
        for spec in add_nodes:
            w.parse_add_nodes(spec)
        with Bar("reading") as bar:
            records = asyncio.run(read_log(nats_url, bar.update))
            out, starts = whatif_report(records, from_text=from_text, to_text=to_text, sets=all_sets,
                                config_json=config_json, add_nodes=add_nodes, remove=remove, policy=policy,
                                backfill=backfill_mode, tolerance_s=tolerance_s, warmup=warmup, bar=bar)
    except (w.WhatIfError, LogError) as exc:
        raise click.ClickException(str(exc)) from None
    if starts_file:
        Path(starts_file).write_text(json.dumps(starts))
    if as_json:
        click.echo(json.dumps(out))
    else:
        _print(out)


def register(group: click.Group) -> None:
    group.add_command(whatif_command, name="whatif")
