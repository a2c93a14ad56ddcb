"""Preemption: Horizon's victim choice against Kueue's default order, on one workload.

Runs the same job list twice through ``horizon simulate --in-process`` (the
same function, ``run_simulation``), once with ``victims = "cheapest"``
(Horizon's cost: least work lost, then fewest GPUs, then youngest) and once
with ``"lowest-priority-youngest"`` (Kueue's default order), and prints one
JSON object comparing them: GPU-hours lost to preemption, preemptions, the
wait of high and critical jobs, bounded slowdown, and how long each run took.

    python -m services.front.bench.preemption [WORKLOAD] [--nodes 64] [--gpus-per-node 8] [--out FILE]
        [--gpus-first] [--decisions] [--sweep NODES:HOURS:FIRST-LAST ...]

``--gpus-first`` adds a third run, "cheapest" with the order first specified
(fewest GPUs before least work lost; ``GpusFirst``), which lost more GPU-time
than Kueue's order and was changed.
``--decisions`` replays each run asking, at every preemption it decides, what
the other order would have taken in the same state (``decisions``): the choice
itself, apart from how the runs diverge afterwards. ``--sweep`` runs both orders
on freshly generated workloads of another size for several seeds (``sweep``).

``WORKLOAD`` defaults to ``docs/workloads/preemption-mixed.json``
(``services/front/bench/preemption_workload.py`` writes it). Placement uses EASY
backfilling and the queue the default multifactor policy, as ``horizon
simulate --backfill`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.base import Event
from services.front.sim.simulation import cluster_for, run_simulation
from services.preemption.core import VICTIM_ORDERS, PreemptionCore, PreemptionState
from services.front.sim.driver import SimRun, SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.metrics import job_gpus, report
from services.front.sim.traces import read_trace
from services.domain.jobs import Job, JobState

__all__ = ["compare", "run_one", "summary", "decisions", "sweep", "gpus_first", "GpusFirst",
           "DEFAULT_WORKLOAD"]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORKLOAD = ROOT / "docs" / "workloads" / "preemption-mixed.json"
URGENT = ("critical", "high")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _shown(path: Path) -> str:
    """The path relative to the repository when it is inside it (results stay comparable across checkouts)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def summary(out: dict[str, Any], run: SimRun) -> dict[str, Any]:
    """The figures the comparison is judged by, from one run's report and results."""
    results = list(run.results.values())
    urgent = [r for r in results if r.job.priority_class in URGENT and r.start_s is not None]
    victims = [(job_gpus(r.job), a.end_s - a.start_s, r.job.priority_class)
               for r in results for a in r.attempts if a.outcome == "PREEMPTED"]
    ages = [age for _, age, _ in victims]
    return {
        "victims": out["preemption_victims"],
        "jobs": len(results),
        "all_finished": all(r.state == "SUCCEEDED" for r in results),
        "outcomes": out["outcomes"],
        "preemptions": out["preemptions"],
        "lost_gpu_hours": out["preempted_gpu_s"] / 3600.0,
        "lost_gpu_hours_by_victim_class": {k: v / 3600.0 for k, v in out["preempted_gpu_s_by_class"].items()},
        "preemptions_by_victim_class": out["preemptions_by_class"],
        "preempted_gpus": sum(g for g, _, _ in victims),
        "victim_mean_gpus": _mean([float(g) for g, _, _ in victims]),
        "victim_mean_age_min": (_mean(ages) or 0.0) / 60.0 if ages else None,
        "victim_median_age_min": statistics.median(ages) / 60.0 if ages else None,
        "jobs_preempted": sum(1 for r in results if any(a.outcome == "PREEMPTED" for a in r.attempts)),
        "urgent_jobs": len(urgent),
        "urgent_mean_wait_s": _mean([r.start_s - r.job.submit_s for r in urgent]),  # type: ignore[operator]
        "mean_wait_s_by_class": out["mean_wait_s_by_class"],
        "mean_wait_s": out["mean_wait_s"],
        "mean_bounded_slowdown": out["mean_bounded_slowdown"],
        "mean_bounded_slowdown_to_end": out["mean_bounded_slowdown_to_end"],
        "utilization": out["utilization"],
        "makespan_s": out["makespan_s"],
        "wall_s": out["wall_s"],
    }


def run_one(workload: Path, victims: str, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    out, run = asyncio.run(run_simulation(str(workload), in_process=True, nodes=nodes, gpus_per_node=gpus_per_node,
                                          backfill=True, preemption_victims=victims))
    return summary(out, run)


def compare(workload: Path = DEFAULT_WORKLOAD, nodes: int = 64, gpus_per_node: int = 8,
            progress: Any = None) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    for victims in VICTIM_ORDERS:
        runs[victims] = run_one(workload, victims, nodes, gpus_per_node)
        if progress:
            progress(victims, runs[victims])
    ours, kueue = runs["cheapest"], runs["lowest-priority-youngest"]
    lost_ours, lost_kueue = ours["lost_gpu_hours"], kueue["lost_gpu_hours"]
    return {
        "workload": _shown(workload),
        "cluster": {"nodes": nodes, "gpus_per_node": gpus_per_node},
        "policy": "multifactor", "backfill": "easy",
        "runs": runs,
        "lost_gpu_hours_saved": lost_kueue - lost_ours,
        "lost_gpu_hours_ratio": lost_ours / lost_kueue if lost_kueue else None,
        "cheapest_loses_less": lost_ours < lost_kueue,
    }


@dataclass
class _Shadowed(PreemptionCore):
    """The preemption core, deciding as configured, that also asks at every preemption it decides
    what the other victim order would have taken for the same preemptor in the same state."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def _lost(self, state: PreemptionState, victims: list[str]) -> float:
        """GPU-seconds the victims have run (a simulated job does not checkpoint): what stopping them loses."""
        out = 0.0
        for v in victims:
            job = state.jobs.jobs[v]
            started = job.started_ts if job.state is JobState.RUNNING else state.now  # scheduled, not started: nothing
            out += job.spec.total_gpus * max(0.0, state.now - started)  # type: ignore[union-attr]
        return out

    def decide(self, state: PreemptionState) -> list[Event]:
        out = super().decide(state)
        rounds: dict[str, list[str]] = {}
        for e in out:
            if isinstance(e, c.PreemptionRequested):
                rounds.setdefault(e.for_job, []).append(e.job_id)
        if not rounds:
            return out
        mine = state.config
        other = next(v for v in VICTIM_ORDERS if v != mine.victims)
        taken: set[str] = set()
        for pre in (j.job_id for j in self.preemptors(state)[: self.max_preemptors_per_round]):
            chosen = rounds.get(pre)
            if not chosen:
                continue
            state.config = replace(mine, victims=other)
            try:
                alt = self.plan(state, pre, taken).victims
            finally:
                state.config = mine
            spec = state.jobs.jobs[pre].spec
            assert spec is not None
            specs = {v: state.jobs.jobs[v].spec for v in {*chosen, *alt}}
            self.rows.append({
                "t": state.now, "preemptor": pre, "class": spec.priority_class, "gpus": spec.total_gpus,
                "chosen": len(chosen), "chosen_gpus": sum(specs[v].total_gpus for v in chosen),  # type: ignore[union-attr]
                "chosen_lost_gpu_s": self._lost(state, chosen),
                "other": len(alt), "other_gpus": sum(specs[v].total_gpus for v in alt),  # type: ignore[union-attr]
                "other_lost_gpu_s": self._lost(state, alt),
                "chosen_classes": sorted(specs[v].priority_class for v in chosen),  # type: ignore[union-attr]
                "other_classes": sorted(specs[v].priority_class for v in alt),  # type: ignore[union-attr]
            })
            taken.update(chosen)
        return out


def _simulate_with(workload: Path, victims: str, nodes: int, gpus_per_node: int,
                   preemption: PreemptionCore) -> SimRun:
    """``run_simulation``'s in-process run (EASY backfilling, multifactor), with this preemption core."""
    trace = read_trace(workload)
    specs, base = cluster_for(trace, nodes, gpus_per_node, "a100", None)
    settings = SimSettings(policy="multifactor", backfill="easy", gpus_per_node=base.gpus_per_node,
                           gpu_type=base.gpu_type)
    cores = [preemption if isinstance(k, PreemptionCore) else k for k in make_cores(settings)]
    config = [*trace.config, c.PreemptionConfigured(victims=victims)]
    return asyncio.run(simulate(trace.jobs, specs, settings, InProcessBus(cores), config=config))


@dataclass
class GpusFirst(PreemptionCore):
    """Not Horizon's policy: the "cheapest" passes with the order first specified, fewest GPUs before
    least work lost. ``cost`` returns (GPUs, work lost, age) and the core ranks work lost (its second
    entry) first, then GPUs (its first); swapping the two entries ranks GPUs first."""

    def cost(self, state: PreemptionState, victim: Job) -> tuple[float, float, float]:
        gpus, work, age = super().cost(state, victim)
        return (work, gpus, age)


def gpus_first(workload: Path, nodes: int = 64, gpus_per_node: int = 8) -> dict[str, Any]:
    """The run with ``GpusFirst``: what ranking GPUs before work lost, as first specified, loses."""
    run = _simulate_with(workload, "cheapest", nodes, gpus_per_node, GpusFirst(virtual_time=True))
    out = report(run, gpus=True)
    out["outcomes"] = dict(sorted(Counter(r.state or "NOT_STARTED" for r in run.results.values()).items()))
    out["preemption_victims"] = "cheapest, fewest GPUs first (the order first specified)"
    return summary(out, run)


def decisions(workload: Path, victims: str, nodes: int = 64, gpus_per_node: int = 8) -> dict[str, Any]:
    """Decision by decision: every preemption of a run with ``victims``, beside the set the other order
    would have taken in the same state. Separates the choice itself from where the runs later diverge."""
    shadow = _Shadowed(virtual_time=True)
    _simulate_with(workload, victims, nodes, gpus_per_node, shadow)
    rows = shadow.rows
    less = sum(1 for r in rows if r["chosen_lost_gpu_s"] < r["other_lost_gpu_s"])
    more = sum(1 for r in rows if r["chosen_lost_gpu_s"] > r["other_lost_gpu_s"])
    by_class: dict[str, dict[str, float]] = {}
    for r in rows:
        b = by_class.setdefault(r["class"], {"decisions": 0, "chosen_lost_gpu_h": 0.0, "other_lost_gpu_h": 0.0,
                                             "chosen_victims": 0, "other_victims": 0})
        b["decisions"] += 1
        b["chosen_lost_gpu_h"] += r["chosen_lost_gpu_s"] / 3600.0
        b["other_lost_gpu_h"] += r["other_lost_gpu_s"] / 3600.0
        b["chosen_victims"] += r["chosen"]
        b["other_victims"] += r["other"]
    return {
        "victims": victims,
        "other": next(v for v in VICTIM_ORDERS if v != victims),
        "decisions": len(rows),
        "chosen_loses_less": less, "chosen_loses_more": more, "same_loss": len(rows) - less - more,
        "chosen_lost_gpu_h": sum(r["chosen_lost_gpu_s"] for r in rows) / 3600.0,
        "other_lost_gpu_h": sum(r["other_lost_gpu_s"] for r in rows) / 3600.0,
        "chosen_victims": sum(r["chosen"] for r in rows), "other_victims": sum(r["other"] for r in rows),
        "preemptor_gpus": sum(r["gpus"] for r in rows),
        "chosen_victim_gpus": sum(r["chosen_gpus"] for r in rows),
        "other_victim_gpus": sum(r["other_gpus"] for r in rows),
        # work lost per GPU freed: the GPU-weighted mean age of the victims
        "chosen_lost_h_per_gpu": _ratio(sum(r["chosen_lost_gpu_s"] for r in rows) / 3600.0,
                                        sum(r["chosen_gpus"] for r in rows)),
        "other_lost_h_per_gpu": _ratio(sum(r["other_lost_gpu_s"] for r in rows) / 3600.0,
                                       sum(r["other_gpus"] for r in rows)),
        "by_preemptor_class": by_class,
        "rows": rows,
    }


def sweep(nodes: int, hours: float, seeds: range, gpus_per_node: int = 8, progress: Any = None,
          with_gpus_first: bool = False) -> dict[str, Any]:
    """Both orders on the generator's workload at another size, for several seeds: how robust the result is."""
    from services.front.bench.preemption_workload import generate, write

    rows = []
    with tempfile.TemporaryDirectory(prefix="horizon-preemption-") as tmp:
        for seed in seeds:
            path = Path(tmp) / f"w{seed}.json"
            write(path, generate(seed=seed, nodes=nodes, gpus_per_node=gpus_per_node, hours=hours))
            runs = {v: run_one(path, v, nodes, gpus_per_node) for v in VICTIM_ORDERS}
            if with_gpus_first:
                runs["gpus-first (former)"] = gpus_first(path, nodes, gpus_per_node)
            ours, kueue = runs["cheapest"], runs["lowest-priority-youngest"]
            row = {"seed": seed, "jobs": ours["jobs"],
                   "all_finished": ours["all_finished"] and kueue["all_finished"],
                   "lost_gpu_hours": {v: r["lost_gpu_hours"] for v, r in runs.items()},
                   "preemptions": {v: r["preemptions"] for v, r in runs.items()},
                   "urgent_mean_wait_s": {v: r["urgent_mean_wait_s"] for v, r in runs.items()},
                   "cheapest_loses_less": ours["lost_gpu_hours"] < kueue["lost_gpu_hours"]}
            rows.append(row)
            if progress:
                progress(nodes, hours, row)
    total = {v: sum(r["lost_gpu_hours"][v] for r in rows) for v in rows[0]["lost_gpu_hours"]} if rows else {}
    return {"nodes": nodes, "gpus_per_node": gpus_per_node, "hours": hours, "seeds": [seeds.start, seeds.stop - 1],
            "cheapest_loses_less_in": sum(1 for r in rows if r["cheapest_loses_less"]), "runs": len(rows),
            "lost_gpu_hours_total": total, "rows": rows}


def _sweep_spec(text: str) -> tuple[int, float, range]:
    try:
        nodes, hours, seeds = text.split(":")
        first, _, last = seeds.partition("-")
        return int(nodes), float(hours), range(int(first), int(last or first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use NODES:HOURS:FIRST-LAST, e.g. 16:12:1-10") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Horizon's victim choice against Kueue's default order.")
    parser.add_argument("workload", type=Path, nargs="?", default=DEFAULT_WORKLOAD)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="Also write the JSON here.")
    parser.add_argument("--decisions", action="store_true",
                        help="Also replay each run asking, at every preemption, what the other order would have taken.")
    parser.add_argument("--gpus-first", action="store_true",
                        help="Also run 'cheapest' with the order first specified, fewest GPUs before least "
                             "work lost (in the comparison and the sweeps).")
    parser.add_argument("--sweep", type=_sweep_spec, action="append", default=[], metavar="NODES:HOURS:SEEDS",
                        help="Also run both orders on generated workloads of this size for these seeds "
                             "(e.g. 16:12:1-10); repeatable.")
    args = parser.parse_args(argv)

    def show(victims: str, r: dict[str, Any]) -> None:
        print(f"{victims:26} lost {r['lost_gpu_hours']:.1f} GPU-h in {r['preemptions']} preemptions; "
              f"urgent wait {r['urgent_mean_wait_s']:.0f} s; wall {r['wall_s']:.0f} s", file=sys.stderr, flush=True)

    result = compare(args.workload, args.nodes, args.gpus_per_node, progress=show)
    if args.gpus_first:
        former = gpus_first(args.workload, args.nodes, args.gpus_per_node)
        result["gpus_first"] = former
        show("gpus-first (former)", former)
    if args.decisions:
        result["decisions"] = {}
        for victims in VICTIM_ORDERS:
            d = decisions(args.workload, victims, args.nodes, args.gpus_per_node)
            d.pop("rows")
            result["decisions"][victims] = d
            print(f"{victims:26} decision by decision: {d['chosen_lost_gpu_h']:.1f} GPU-h lost, the other order "
                  f"{d['other_lost_gpu_h']:.1f}, over {d['decisions']} decisions", file=sys.stderr, flush=True)
    if args.sweep:
        result["sweeps"] = []

        def row(nodes: int, hours: float, r: dict[str, Any]) -> None:
            lost = r["lost_gpu_hours"]
            print(f"sweep {nodes} nodes {hours:g} h seed {r['seed']}: "
                  + ", ".join(f"{k} {v:.1f} GPU-h" for k, v in lost.items()), file=sys.stderr, flush=True)

        for nodes, hours, seeds in args.sweep:
            result["sweeps"].append(sweep(nodes, hours, seeds, args.gpus_per_node, progress=row,
                                          with_gpus_first=args.gpus_first))
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
