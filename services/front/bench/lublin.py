"""The Lublin-1 table: our policies on RLScheduler's 10 windows, beside the published figures.

Runs in process (the pure cores, identical decisions to the NATS mode, see
``services/front/sim/driver.py``), one window after another.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from services.nodes.spec import NodeSpec
from services.front.sim.driver import SimSettings, make_cores, predicting_profile, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.metrics import report
from services.front.sim.estimates import MODEL, with_user_estimates
from services.front.sim.traces import read_trace, window

__all__ = ["lublin_table", "modes_table", "prediction_table", "ledger_table", "with_synthetic_users", "POLICIES"]

POLICIES = ("fcfs", "sjf", "f1", "multifactor")
PUBLISHED_NAMES = {"fcfs": "FCFS", "sjf": "SJF", "f1": "F1"}


def _reference(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


async def _one(jobs: list, backfill: bool | str, policy: str, predict: bool = False,
               ledger_s: float | None = None) -> dict[str, Any]:
    nodes = [NodeSpec(f"n{i:03d}", 1000, 1 << 40) for i in range(256)]
    mode = backfill if isinstance(backfill, str) else ("easy" if backfill else "none")
    settings = SimSettings(policy=policy, backfill=mode, fairshare_ledger_s=ledger_s)
    config = [predicting_profile(mode)] if predict else []
    run = await simulate(jobs, nodes, settings, InProcessBus(make_cores(settings)), config=config)
    return report(run)


def lublin_table(trace: Path, reference: Path, policies: tuple[str, ...] = POLICIES,
                 progress: Any = None) -> dict[str, Any]:
    ref = _reference(reference)
    starts = ref["windows_0based_start_index"]
    length = ref["window_length"]
    data = read_trace(trace)
    out: dict[str, Any] = {"windows": starts, "window_length": length, "results": {}}
    for backfill in (False, True):
        mode = "backfill" if backfill else "no_backfill"
        for policy in policies:
            rows = []
            for start in starts:
                r = asyncio.run(_one(window(data, start, length), backfill, policy))
                rows.append(r)
                if progress:
                    progress(mode, policy, start, r)
            published = ref["results"][f"Lublin-1/bsld/{mode}"].get(PUBLISHED_NAMES.get(policy, ""), None)
            published_util = ref["results"][f"Lublin-1/utilization/{mode}"].get(PUBLISHED_NAMES.get(policy, ""), None)
            out["results"][f"{mode}/{policy}"] = {
                "bsld_per_window": [r["mean_bounded_slowdown"] for r in rows],
                "bsld_mean": sum(r["mean_bounded_slowdown"] for r in rows) / len(rows),
                "utilization_per_window": [r["utilization"] for r in rows],
                "utilization_mean": sum(r["utilization"] for r in rows) / len(rows),
                "published_bsld_per_window": published["per_window"] if published else None,
                "published_bsld_mean": published["mean"] if published else None,
                "published_utilization_mean": published_util["mean"] if published_util else None,
                "jobs_per_s": sum(r["jobs"] for r in rows) / sum(r["wall_s"] for r in rows),
            }
    return out


def shadow_comparison(trace: Path, reference: Path, policy: str = "fcfs") -> dict[str, Any]:
    """``policy`` with RLScheduler-style backfilling (``shadow`` mode) beside textbook EASY and theirs."""
    ref = _reference(reference)
    data = read_trace(trace)
    rows = [asyncio.run(_one(window(data, s, ref["window_length"]), "shadow", policy))
            for s in ref["windows_0based_start_index"]]
    return {"policy": policy, "mode": "shadow",
            "bsld_per_window": [r["mean_bounded_slowdown"] for r in rows],
            "bsld_mean": sum(r["mean_bounded_slowdown"] for r in rows) / len(rows)}


def modes_table(trace: Path, reference: Path, modes: tuple[str, ...], policy: str = "multifactor",
                starts: list[int] | None = None, progress: Any = None) -> dict[str, Any]:
    """``policy`` under each backfill mode (``none`` = strict order) on the reference windows, or on
    ``starts`` (other windows of the same length): per window and mean."""
    ref = _reference(reference)
    data = read_trace(trace)
    starts = starts or ref["windows_0based_start_index"]
    out: dict[str, Any] = {"policy": policy, "windows": starts, "window_length": ref["window_length"], "modes": {}}
    for mode in modes:
        rows = []
        for start in starts:
            rows.append(asyncio.run(_one(window(data, start, ref["window_length"]), mode, policy)))
            if progress:
                progress(mode, policy, start, rows[-1])
        per = [r["mean_bounded_slowdown"] for r in rows]
        out["modes"][mode] = {"bsld_per_window": per, "bsld_mean": sum(per) / len(per),
                              "utilization_mean": sum(r["utilization"] for r in rows) / len(rows)}
    return out


def prediction_table(trace: Path, reference: Path, seed: int = 1, policies: tuple[str, ...] = ("fcfs", "multifactor"),
                     modes: tuple[str, ...] = ("easy", "short"), starts: list[int] | None = None,
                     progress: Any = None) -> dict[str, Any]:
    """With and without EASY++ predictions, on the trace with user estimates drawn by Tsafrir et al.'s
    model (``services/front/sim/estimates.py``, ``seed``): per policy, strict order, then each backfill mode
    with the time limits (the estimates) and with predictions; per window and mean."""
    ref = _reference(reference)
    data = with_user_estimates(read_trace(trace), seed)
    starts = starts or ref["windows_0based_start_index"]
    out: dict[str, Any] = {"estimates": f"{MODEL}, seed {seed}", "windows": starts,
                           "window_length": ref["window_length"], "results": {}}
    for policy in policies:
        runs = [("none", False)] + [(m, p) for m in modes for p in (False, True)]
        for mode, predict in runs:
            rows = []
            for start in starts:
                rows.append(asyncio.run(_one(window(data, start, ref["window_length"]), mode, policy, predict)))
                if progress:
                    progress(f"{mode}{'+predicted' if predict else ''}", policy, start, rows[-1])
            per = [r["mean_bounded_slowdown"] for r in rows]
            out["results"][f"{policy}/{mode}/{'predicted' if predict else 'limit'}"] = {
                "bsld_per_window": per, "bsld_mean": sum(per) / len(per),
                "utilization_mean": sum(r["utilization"] for r in rows) / len(rows)}
    return out


def with_synthetic_users(trace: Any, users: int) -> Any:
    """The trace with ``users`` users (each its own account) in place of its own (Lublin-1 has none: -1
    everywhere): job ``i`` (file order) is user ``floor(users * frac(i * 0.6180339887)**2)``, a
    deterministic, skewed draw (user 0 submits most)."""
    jobs = [dataclasses.replace(j, account=f"u{u}", user=f"u{u}")
            for i, j in enumerate(trace.jobs) for u in (int(users * ((i * 0.6180339887) % 1.0) ** 2),)]
    return dataclasses.replace(trace, jobs=jobs)


def ledger_table(trace: Path, reference: Path, cadences: tuple[float, ...] = (60.0, 600.0, 3600.0),
                 users: int = 0, policy: str = "multifactor", progress: Any = None) -> dict[str, Any]:
    """Mean bounded slowdown with fair share exact per record and as of the ledger at each cadence
    (``LedgerSchedulingCore``, docs/scaling.md), EASY backfilling, on the reference windows; ``users``:
    the trace's jobs spread over that many synthetic users first (``with_synthetic_users``)."""
    ref = _reference(reference)
    data = read_trace(trace)
    if users:
        data = with_synthetic_users(data, users)
    out: dict[str, Any] = {"policy": policy, "backfill": "easy", "users": users or "the trace's",
                           "windows": ref["windows_0based_start_index"], "bsld": {}}
    for ledger_s in (None, *cadences):
        key = "exact" if ledger_s is None else f"ledger_{ledger_s:g}s"
        per = []
        for start in ref["windows_0based_start_index"]:
            per.append(asyncio.run(_one(window(data, start, ref["window_length"]), True, policy,
                                        ledger_s=ledger_s))["mean_bounded_slowdown"])
            if progress:
                progress(key, policy, start, per[-1])
        out["bsld"][key] = {"per_window": per, "mean": sum(per) / len(per)}
    exact = out["bsld"]["exact"]["mean"]
    for row in out["bsld"].values():
        row["vs_exact"] = row["mean"] / exact - 1.0
    return out


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 3 and sys.argv[3] == "--ledger":  # TRACE REF --ledger [USERS]
        print(json.dumps(ledger_table(Path(sys.argv[1]), Path(sys.argv[2]),
                                      users=int(sys.argv[4]) if len(sys.argv) > 4 else 0,
                                      progress=lambda m, p, s, r: print(f"{m:14} {s:5d} {r:.4f}", file=sys.stderr,
                                                                        flush=True)), indent=1))
        raise SystemExit(0)

    if len(sys.argv) > 3 and sys.argv[3] == "--predict":  # TRACE REF --predict [SEED [START,START,...]]
        print(json.dumps(prediction_table(
            Path(sys.argv[1]), Path(sys.argv[2]), seed=int(sys.argv[4]) if len(sys.argv) > 4 else 1,
            starts=[int(s) for s in sys.argv[5].split(",")] if len(sys.argv) > 5 else None,
            progress=lambda m, p, s, r: print(f"{p:12} {m:18} {s:5d} {r['mean_bounded_slowdown']:.2f}",
                                              file=sys.stderr, flush=True)), indent=1))
        raise SystemExit(0)

    if len(sys.argv) > 4 and sys.argv[3] == "--modes":  # TRACE REF --modes none,easy,short [START,START,...]
        print(json.dumps(modes_table(Path(sys.argv[1]), Path(sys.argv[2]), tuple(sys.argv[4].split(",")),
                                     starts=[int(s) for s in sys.argv[5].split(",")] if len(sys.argv) > 5 else None,
                                     progress=lambda m, p, s, r: print(f"{m:12} {s:5d} {r['mean_bounded_slowdown']:.2f}",
                                                                       file=sys.stderr, flush=True)), indent=1))
        raise SystemExit(0)

    if len(sys.argv) > 3 and sys.argv[3] == "--shadow":
        print(json.dumps({p: shadow_comparison(Path(sys.argv[1]), Path(sys.argv[2]), p) for p in ("fcfs", "sjf", "f1")}))
        raise SystemExit(0)

    def show(mode: str, policy: str, start: int, r: dict[str, Any]) -> None:
        print(f"{mode:12} {policy:12} {start:5d} bsld={r['mean_bounded_slowdown']:.2f} util={r['utilization']:.3f} "
              f"wall={r['wall_s']:.1f}s", file=sys.stderr, flush=True)

    result = lublin_table(Path(sys.argv[1]), Path(sys.argv[2]), progress=show)
    print(json.dumps(result, indent=1))
