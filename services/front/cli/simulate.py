"""``horizon simulate TRACE``: a workload trace through the real services at virtual time.

The simulation is ``services/front/sim/simulation.py``; this is its flags and its output."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from events.vocabulary import BACKFILL_MODES
from services.front.client.progress import Bar
from services.front.sim.simulation import NoClusterSize, run_simulation
from services.placement.backfill import FLAG_MODE
from services.preemption.core import VICTIM_ORDERS

__all__ = ["register", "simulate_cmd"]


@click.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--window", "window_spec", default=None, help="START:LEN, 0-based in file order (default: all).")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True)
@click.option("--backfill", "backfill", type=click.Choice(BACKFILL_MODES), is_flag=False, flag_value=FLAG_MODE,
              default=None, help=f"Backfilling in placement (else strict order): --backfill alone is {FLAG_MODE!r} "
                                 "(docs/benchmarks.md), or name a mode: --backfill short (without the lane), easy "
                                 "(textbook EASY), shadow (RLScheduler's), conservative, greedy, none.")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default=None,
              help="The same as --backfill MODE (kept for scripts; wins over --backfill).")
@click.option("--in-process", is_flag=True, help="Drive the pure cores directly (fast); default: real services over NATS.")
@click.option("--nodes", type=int, default=None, help="Cluster size (default: from the trace header).")
@click.option("--gpus-per-node", type=int, default=0, help="Make a GPU cluster: trace processors become GPUs.")
@click.option("--gpu-type", default="a100", show_default=True)
@click.option("--cpus-per-node", type=int, default=None)
@click.option("--nats", "nats_url", default=None, help="Use this NATS server (default: a private bundled one).")
@click.option("--preemption-victims", type=click.Choice(list(VICTIM_ORDERS)), default=None,
              help="Victim order: Horizon's 'cheapest' (the default) or Kueue's default order "
                   "'lowest-priority-youngest'; added to the run's configuration after the trace's own.")
@click.option("--user-estimates", "user_estimates", type=int, default=None, metavar="SEED",
              help="Replace every job's estimate (its time limit) by one drawn with Tsafrir, Etsion and "
                   "Feitelson's model of user runtime estimates (JSSPP 2005), seeded: for traces whose "
                   "estimates are the run times, such as Lublin-1 (services/front/sim/estimates.py).")
@click.option("--predict-runtimes", is_flag=True,
              help="Backfill with EASY++ predicted run times (the mean of the user's last two, capped by the "
                   "limit) instead of the time limits: the default profile's runtime_estimate 'predicted'.")
@click.option("--fairshare-ledger", "fairshare_ledger_s", type=click.FloatRange(min=0), default=None,
              metavar="SECONDS",
              help="Order by fair share as of the ledger, as partition leaders do (docs/scaling.md): usage "
                   "published as UsageCharged entries at most every SECONDS of virtual time. Default: exact "
                   "per record, as the whole-cluster scheduler.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option("--starts", "starts_file", type=click.Path(dir_okay=False), default=None,
              help="Also write each job's start time and nodes (JSON) to this file.")
def simulate_cmd(trace: str, window_spec: str | None, policy: str, backfill: str | None, backfill_mode: str | None,
                 in_process: bool, nodes: int | None,
                 gpus_per_node: int, gpu_type: str, cpus_per_node: int | None, nats_url: str | None, as_json: bool,
                 starts_file: str | None, preemption_victims: str | None, user_estimates: int | None,
                 predict_runtimes: bool, fairshare_ledger_s: float | None) -> None:
    """Run TRACE (SWF, CSV or JSON) through Horizon's services at virtual time and report.

    A JSON job list may carry arrays, dependencies, failures and retries per job, and
    operator configuration ({"config": [...], "jobs": [...]}); see services/front/sim/traces.py.
    """
    start, length = 0, None
    if window_spec:
        try:
            a, b = window_spec.split(":")
            start, length = int(a), int(b)
        except ValueError:
            raise click.BadParameter("use START:LEN, e.g. 1981:1024", param_hint="--window") from None
    try:
        with Bar("simulating") as bar:
            out, run = asyncio.run(run_simulation(trace, start=start, length=length, policy=policy,
                                                  backfill=backfill_mode or backfill or False,
                                                  in_process=in_process, nodes=nodes, gpus_per_node=gpus_per_node,
                                                  gpu_type=gpu_type, cpus_per_node=cpus_per_node, nats_url=nats_url,
                                                  preemption_victims=preemption_victims,
                                                  user_estimates=user_estimates, predict_runtimes=predict_runtimes,
                                                  progress=bar.update, fairshare_ledger_s=fairshare_ledger_s))
    except NoClusterSize as exc:
        raise click.UsageError(str(exc)) from None
    if starts_file:
        Path(starts_file).write_text(json.dumps(
            {j: {"start_s": r.start_s, "nodes": r.allocation, "state": r.state,
                 "attempts": [[a.start_s, a.end_s, a.outcome] for a in r.attempts]}
             for j, r in sorted(run.results.items())}))
    if as_json:
        click.echo(json.dumps(out))
        return
    bf = out["backfill_mode"]
    extra = (" with predicted run times" if predict_runtimes else "") + (
        f", user estimates {out['user_estimates']}" if user_estimates is not None else "")
    click.echo(f"{out['trace']} window {out['window']}  policy {policy}{f' + backfill {bf}' if bf != 'none' else ''}"
               f"{extra}  "
               f"({out['mode']}, {out['nodes']} nodes)")
    if not out.get("jobs"):
        click.echo("no job started")
        return
    for key, label in (("jobs", "jobs"), ("mean_wait_s", "mean wait (s)"), ("p50_wait_s", "p50 wait (s)"),
                       ("p90_wait_s", "p90 wait (s)"), ("p99_wait_s", "p99 wait (s)"),
                       ("mean_bounded_slowdown", "mean bounded slowdown"), ("utilization", "utilisation"),
                       ("makespan_s", "makespan (s)"), ("backfilled", "backfilled jobs"), ("retries", "retried attempts"),
                       ("jobs_per_s", "jobs simulated per second")):
        value = out[key]
        click.echo(f"  {label:<28} {value:,.3f}" if isinstance(value, float) else f"  {label:<28} {value:,}")
    if out.get("preemptions"):
        click.echo(f"  {'preemptions':<28} {out['preemptions']:,}  (victim order {out['preemption_victims']})")
        click.echo(f"  {'GPU-hours lost to preemption':<28} {out['preempted_gpu_s'] / 3600:,.3f}  ("
                   + ", ".join(f"{k} {v / 3600:,.1f}" for k, v in out["preempted_gpu_s_by_class"].items()) + ")")
        click.echo(f"  {'bounded slowdown to the end':<28} {out['mean_bounded_slowdown_to_end']:,.3f}")
    if set(out["outcomes"]) != {"SUCCEEDED"}:
        click.echo(f"  {'outcomes':<28} " + ", ".join(f"{k} {v:,}" for k, v in out["outcomes"].items()))


def register(group: click.Group) -> None:
    group.add_command(simulate_cmd, name="simulate")
