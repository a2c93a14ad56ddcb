"""``horizon bench``: the benchmark harness (not part of the test suite)."""

from __future__ import annotations

import asyncio
import json

import click

from services.front.bench.harness import BENCHMARKS, Sizes, run_benchmarks

__all__ = ["register"]


@click.command()
@click.option("--only", "only", multiple=True, type=click.Choice(list(BENCHMARKS)), help="Run just this one (repeatable).")
@click.option("--quick", is_flag=True, help="Small sizes (a smoke run, not the recorded figures).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def bench(only: tuple[str, ...], quick: bool, as_json: bool) -> None:
    """Measure intake, scheduling throughput, replay, latency and memory against the raw bus."""
    names = list(only) or list(BENCHMARKS)
    results = asyncio.run(run_benchmarks(names, Sizes(quick=quick),
                                         progress=None if as_json else lambda n: click.echo(f"running {n} …", err=True)))
    if as_json:
        click.echo(json.dumps(results))
        return
    for name in names:
        click.echo(f"{name}:")
        for key, value in results[name].items():
            click.echo(f"  {key:<32} {value}")


def register(group: click.Group) -> None:
    group.add_command(bench)
