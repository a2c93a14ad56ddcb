"""The whole what-if, from the log's records: the span asked for, the workload, two replays (as
configured and as changed) and their comparison (``whatif_report``: what ``horizon whatif --json``
prints and the dashboard's What-if page shows)."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import time
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import msgspec

from events.catalogue import ClockTicked
from events.codec import DecodeError, decode
from services.front.sim.traces import read_config
from services.front.sim.whatif.changes import added_nodes, change_events, parse_add_nodes, parse_sets, remove_nodes
from services.front.sim.whatif.measures import capacity_of, fidelity, measure, moves
from services.front.sim.whatif.replay import run_whatif
from services.front.sim.whatif.times import DAY, WhatIfError, iso, parse_duration, parse_when
from services.front.sim.whatif.workload import workload_from_log

__all__ = ["Span", "span_of", "whatif_report", "Progress"]


class Progress(Protocol):
    """A progress display with one task per replay (``horizon whatif``'s bar, the dashboard's tracker)."""

    def add(self, label: str, total: int | None = None) -> Any: ...


class Span(NamedTuple):
    start: float
    end: float
    first: float  # the log's first event
    activity: float  # the log's last event other than a clock tick, and its seq
    activity_seq: int


def span_of(records: list[Any], from_text: str | None, to_text: str | None) -> Span:
    """The span asked for, never starting before the log does (nothing is known of the time before it:
    a log shorter than the default seven days is measured over its own length). The last activity is
    the last event other than a clock tick: an idle stack adds a tick every few seconds and nothing else."""
    times: dict[int, float] = {}
    last = activity = 0.0
    activity_seq = 0
    for r in records:
        try:
            event = decode(r.data)
        except DecodeError:
            continue
        t = event.ts if event.ts > 0 else r.time
        times[r.seq] = t
        last = max(last, t)
        if not isinstance(event, ClockTicked) and t >= activity:
            activity, activity_seq = t, r.seq
    end = parse_when(to_text, last, times.get) if to_text else last
    start = parse_when(from_text, end, times.get) if from_text else end - 7 * DAY
    first = min(times.values(), default=start)
    if first < end:
        start = max(start, first)
    return Span(start, end, first, activity or end, activity_seq)


def whatif_report(records: list[Any], *, from_text: str | None = None, to_text: str | None = None,
                  sets: tuple[str, ...] = (), config_json: tuple[str, ...] = (), add_nodes: tuple[str, ...] = (),
                  remove: tuple[str, ...] = (), policy: str = "multifactor", backfill: str = "easy",
                  tolerance_s: float = 1.0, warmup: str = "7d", bar: Progress | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole comparison (what ``--json`` prints), from the log's records, and each measured job's
    recorded, baseline and changed start (what ``--starts`` writes)."""
    changes = parse_sets(sets)
    extra = []
    for text in config_json:
        source = Path(text).read_text() if not text.lstrip().startswith(("{", "[")) and Path(text).exists() else text
        try:
            entries = json.loads(source)
        except json.JSONDecodeError as exc:
            raise WhatIfError(f"--config {text!r}: not JSON nor a JSON file ({exc})") from None
        try:
            extra.extend(read_config(entries if isinstance(entries, list) else [entries], "--config"))
        except ValueError as exc:
            raise WhatIfError(str(exc)) from None
    for spec in add_nodes:
        parse_add_nodes(spec)
    start, end, first, activity, activity_seq = span_of(records, from_text, to_text)
    warm_from = first if warmup == "all" else start - parse_duration(warmup, "--warmup")
    workload = workload_from_log(records, start, end, warm_from_s=warm_from, tolerance_s=tolerance_s)
    if to_text is None and start < activity < end and not workload.open_at_end():
        # The log's end is its last clock tick: with every job over, the cluster sat idle from its last
        # activity on, and that idle tail (how long before whatif was run) would only dilute utilisation.
        # Nothing but ticks follows, so the workload is the same; only its span ends there.
        workload.end_s, workload.last_seq = activity, activity_seq
    if not workload.measured:
        raise WhatIfError(f"no job was submitted between {iso(start)} and {iso(end)}: nothing to replay "
                            f"(give --from/--to)")
    timed, removed = remove_nodes(workload, remove)
    timed = timed + added_nodes(add_nodes, workload)
    change = change_events(changes, workload.base_config, backfill) + extra
    total = len(workload.jobs)

    def tracker(label: str) -> Any:
        task = bar.add(label, total=total) if bar is not None else None
        return (lambda done, _all: task.update(done, _all)) if task is not None else None

    started = time.perf_counter()
    base_run = asyncio.run(run_whatif(workload, workload.timed, [], policy=policy, backfill=backfill,
                                        progress=tracker("baseline")))
    base_wall = time.perf_counter() - started
    started = time.perf_counter()
    changed_run = asyncio.run(run_whatif(workload, timed, change, policy=policy, backfill=backfill,
                                           progress=tracker("changed")))
    changed_wall = time.perf_counter() - started
    configured = [e for _, e in workload.timed if e.ts <= end]
    baseline = measure(workload, base_run, configured)
    baseline["fidelity"] = fidelity(workload, base_run, tolerance_s)
    baseline["span"] = workload.describe()
    baseline["replay_wall_s"] = base_wall
    changed = measure(workload, changed_run, configured + change, capacity=capacity_of(timed))
    # every change, as asked for: the keys set, the configuration events given, the nodes added and removed
    changed["changes"] = (changes.keys + [f"{e.event_type} {json.dumps(_fields(e))}" for e in extra]
                          + [f"add nodes {spec}" for spec in add_nodes]
                          + [f"remove nodes {pattern} ({', '.join(_matching(removed, pattern))})"
                             for pattern in remove])
    changed["nodes_added"] = sum(parse_add_nodes(s)[0] for s in add_nodes)
    changed["nodes_removed"] = removed
    changed["vs_baseline"] = moves(workload, base_run, changed_run)
    changed["replay_wall_s"] = changed_wall
    starts = {}
    for job_id in sorted(workload.measured):
        info, x, y = workload.recorded[job_id], base_run.results.get(job_id), changed_run.results.get(job_id)
        starts[job_id] = {"tenant": info.tenant, "account": info.account, "submit_s": info.submit_s,
                          "recorded_start_s": info.start_s, "recorded_nodes": info.nodes,
                          "baseline_start_s": x.start_s if x else None, "baseline_nodes": x.allocation if x else [],
                          "changed_start_s": y.start_s if y else None, "changed_nodes": y.allocation if y else []}
    return {"baseline": baseline, "changed": changed}, starts


def _matching(names: list[str], pattern: str) -> list[str]:
    return [n for n in names if fnmatch.fnmatchcase(n, pattern)]


def _fields(event: Any) -> dict[str, Any]:
    return {k: v for k, v in msgspec.to_builtins(event).items()
            if k not in ("id", "ts", "source", "correlation_id", "causation_id", "v", "type")}
