"""A trace through the real services at virtual time (``horizon simulate``, the benches, the Lublin guard):
the cluster the trace or the flags describe (``cluster_for``), the run over the in-process bus or a
NATS server of its own (``run_simulation``) and its report (``services/front/sim/metrics.py``)."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.resources import parse_memory
from services.front.sim.buses import InProcessBus, NatsBus
from services.front.sim.driver import SimSettings, make_cores, predicting_profile, simulate
from services.front.sim.estimates import MODEL, with_user_estimates
from services.front.sim.metrics import report
from services.front.sim.traces import Trace, read_trace, window
from services.nodes.spec import NodeSpec, local_nodes
from services.preemption.core import PreemptionConfig

__all__ = ["NoClusterSize", "cluster_for", "run_simulation"]


class NoClusterSize(ValueError):
    """The trace says nothing of the cluster's size and no ``nodes`` was given."""


def cluster_for(trace: Trace, nodes: int | None, gpus_per_node: int, gpu_type: str,
                cpus_per_node: int | None) -> tuple[list[NodeSpec], SimSettings]:
    """The cluster from flags, else from the trace header (MaxNodes nodes of MaxProcs/MaxNodes cores)."""
    if nodes is None:
        count = trace.max_nodes or trace.max_procs
        if not count:
            raise NoClusterSize("the trace has no MaxNodes/MaxProcs header: give --nodes")
        per = max(1, (trace.max_procs or count) // count)
        specs = [NodeSpec(f"n{i:04d}", per * 1000, parse_memory("1Ti")) for i in range(count)]
        return specs, SimSettings(procs_per_node=per)
    if gpus_per_node:
        specs = local_nodes(nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type, cpus=cpus_per_node or 64,
                            memory_bytes=parse_memory("1Ti"), prefix="n")
        return specs, SimSettings(gpus_per_node=gpus_per_node, gpu_type=gpu_type)
    per = cpus_per_node or 1
    specs = [NodeSpec(f"n{i:04d}", per * 1000, parse_memory("1Ti")) for i in range(nodes)]
    return specs, SimSettings(procs_per_node=per)


async def run_simulation(trace_path: str, *, start: int = 0, length: int | None = None, policy: str = "multifactor",
                         backfill: bool | str = False, in_process: bool = False, nodes: int | None = None,
                         gpus_per_node: int = 0, gpu_type: str = "a100", cpus_per_node: int | None = None,
                         nats_url: str | None = None, preemption_victims: str | None = None,
                         user_estimates: int | None = None, predict_runtimes: bool = False,
                         progress: Callable[[int, int], None] | None = None,
                         fairshare_ledger_s: float | None = None) -> tuple[dict[str, Any], Any]:
    """Run the trace (its window ``start``, ``length`` jobs) and report: the report's JSON (what
    ``horizon simulate --json`` prints) and the run (each job's result)."""
    trace = read_trace(trace_path)
    if user_estimates is not None:  # the whole trace, then the window: a window's estimates do not depend on it
        trace = with_user_estimates(trace, user_estimates)
    config = list(trace.config)
    if preemption_victims is not None:  # after the trace's own configuration, so it wins
        config.append(c.PreemptionConfigured(victims=preemption_victims))
    jobs = window(trace, start, length or len(trace.jobs))
    specs, base = cluster_for(trace, nodes, gpus_per_node, gpu_type, cpus_per_node)
    mode = backfill if isinstance(backfill, str) else ("easy" if backfill else "none")
    if predict_runtimes:  # the default profile with EASY++ predictions, after the trace's configuration
        config.append(predicting_profile(mode))
    settings = SimSettings(policy=policy, backfill=mode, procs_per_node=base.procs_per_node,
                           gpus_per_node=base.gpus_per_node, gpu_type=base.gpu_type,
                           fairshare_ledger_s=fairshare_ledger_s)
    cores = make_cores(settings)
    if in_process:
        run = await simulate(jobs, specs, settings, InProcessBus(cores), config=config, progress=progress)
    else:
        from services.runtime.natsserver import NatsServer

        with tempfile.TemporaryDirectory(prefix="horizon-sim-") as tmp:
            server = None
            if nats_url is None:  # an empty log of its own: a simulation is not history
                server = NatsServer(store_dir=Path(tmp) / "js", port=0).start()
                nats_url = server.url
            bus = NatsBus(nats_url, cores)
            try:
                await bus.start()  # refuses a log that is not empty: never mix a simulation with history
                run = await simulate(jobs, specs, settings, bus, config=config, progress=progress)
            finally:
                await bus.close()
                if server is not None:
                    server.stop()
    out = report(run, gpus=bool(settings.gpus_per_node))
    # How jobs ended (SUCCEEDED, FAILED, DEPENDENCY_NEVER_SATISFIED, ...; "" = never started) and extra attempts.
    out["outcomes"] = dict(sorted(Counter(r.state or "NOT_STARTED" for r in run.results.values()).items()))
    out["retries"] = sum(max(0, len(r.attempts) - 1) for r in run.results.values())
    out.update({"trace": str(trace_path), "window": f"{start}:{len(jobs)}", "policy": policy,
                "backfill": bool(backfill), "backfill_mode": mode, "preemption_victims": _victims(config),
                "runtime_estimate": "predicted" if predict_runtimes else "limit",
                "user_estimates": None if user_estimates is None else f"{MODEL}:{user_estimates}",
                "mode": "in-process" if in_process else "nats", "nodes": len(specs)})
    return out, run


def _victims(config: list[Any]) -> str:
    """The victim order the run used: the last PreemptionConfigured that sets one, else the default."""
    chosen = PreemptionConfig().victims
    for event in config:
        if isinstance(event, c.PreemptionConfigured) and event.victims is not None:
            chosen = event.victims
    return chosen
