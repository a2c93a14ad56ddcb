"""``horizon bench``: the benchmark harness (not part of the test suite)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from services.front.bench.harness import BENCHMARKS, ScaleSizes, Sizes, run_benchmarks, run_scale_benchmarks
from services.front.bench.plot import curves_svg, curves_table
from services.front.bench.stage import StageFailed, budget_factor

__all__ = ["register"]


def _counts(text: str | None, option: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        values = tuple(int(v.replace("_", "")) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r}: give whole numbers separated by commas (e.g. 1000,4000)",
                                 param_hint=option) from None
    if not values or any(v <= 0 for v in values):
        raise click.BadParameter(f"{text!r}: give one or more numbers above 0", param_hint=option)
    return values


@click.command()
@click.option("--only", "only", multiple=True, type=click.Choice(list(BENCHMARKS)), help="Run just this one (repeatable).")
@click.option("--quick", is_flag=True, help="Small sizes (a smoke run, not the recorded figures).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option("--scale", is_flag=True, help="The 100k-GPU run: 12,500 nodes x 8 GPUs, a backlog of 1,000,000, the "
              "curves over nodes x backlog, partitions 1/2/4 (long: see docs/benchmarks.md).")
@click.option("--nodes", "nodes_text", default=None, metavar="N,N,...",
              help="--scale: the grid's node counts [default: 1000,4000,12500]; the largest is the loaded cluster.")
@click.option("--backlog", "backlog_text", default=None, metavar="N,N,...",
              help="--scale: the grid's backlogs [default: 50000,250000,1000000]; the largest is the loaded cluster's.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="--scale: write the curves as an SVG line plot here.")
@click.option("--table", "table", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="--scale: write the curves as a markdown table here.")
def bench(only: tuple[str, ...], quick: bool, as_json: bool, scale: bool, nodes_text: str | None,
          backlog_text: str | None, plot: Path | None, table: Path | None) -> None:
    """Measure intake, scheduling throughput, replay, latency and memory against the raw bus.

    Every stage runs under a budget derived from its size ($HORIZON_BENCH_BUDGET multiplies them);
    a stage that misses it fails with what it waited for, the others still run, and the exit code
    is 1. With --scale: the scale figures, the curves and partitions 1/2/4 instead.
    """
    nodes, backlog = _counts(nodes_text, "--nodes"), _counts(backlog_text, "--backlog")
    if not scale and (nodes or backlog or plot or table):
        raise click.UsageError("--nodes, --backlog, --plot and --table go with --scale")
    if scale and only:
        raise click.UsageError("--only picks stages of the plain run; --scale runs its own")
    try:
        budget_factor()
    except StageFailed as exc:
        raise click.UsageError(str(exc)) from None
    say = None if as_json else (lambda n: click.echo(f"running {n} …", err=True))
    if scale:
        results = asyncio.run(run_scale_benchmarks(ScaleSizes(quick=quick, nodes=nodes, backlog=backlog), progress=say))
        _write_curves(results["curves"], plot, table)
        _show_scale(results, as_json)
    else:
        names = list(only) or list(BENCHMARKS)
        results = asyncio.run(run_benchmarks(names, Sizes(quick=quick), progress=say))
        _show(results, names, as_json)
    if results.get("failed"):
        for line in _errors(results):
            click.echo(f"error: {line}", err=True)
        raise SystemExit(1)


def _errors(results: dict[str, Any]) -> list[str]:
    out = [v["error"] for k, v in results.items() if isinstance(v, dict) and v.get("error")]
    out += [c["error"] for c in results.get("curves", []) if c.get("error")]
    return out


def _write_curves(curves: list[dict[str, Any]], plot: Path | None, table: Path | None) -> None:
    for path, text in ((plot, curves_svg(curves)), (table, curves_table(curves))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def _show(results: dict[str, Any], names: list[str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(results))
        return
    for name in names:
        click.echo(f"{name}:")
        for key, value in results[name].items():
            click.echo(f"  {key:<32} {value}")


def _show_scale(results: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(results))
        return
    for name in ("scale", "partitions"):
        click.echo(f"{name}:")
        for key, value in results[name].items():
            if not isinstance(value, dict):
                click.echo(f"  {key:<32} {value}")
    click.echo("curves:")
    click.echo(curves_table(results["curves"]), nl=False)


def register(group: click.Group) -> None:
    group.add_command(bench)
