"""``horizon service NAME``: one part alone against any NATS (the distributed shape); or
``horizon service a,b,c``: decision services in one process, reading the log on one shared reader
(``services/runtime/fanout.py``), each with its own lease, fence and snapshots.

``launch_service`` checks the options, then runs the part until it fails or Ctrl-C/SIGTERM stops it:
1. telemetry and, if asked, its own /metrics; 2. the streams; 3. the part (a service, the
projections, the agent, the Slurm or the Kubernetes backend), said ready on $NOTIFY_SOCKET once caught up; 4. its
stop, and a non-zero exit if it failed (so systemd or Kubernetes restarts it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from events.subjects import valid_partition, valid_token
from services.front.client.problems import BadValue, Failure, UsageProblem
from services.front.client.terminal import say
from services.front.host.launch import Shape, configure_logging, machine, slurm_settings, stop_signals
from services.front.host.launch_kubernetes import kubernetes_settings
from services.front.host.launch_web import http_server, telemetry
from services.front.host.lock import DataDirBusy
from services.front.host.metrics import read_token
from services.front.host.stack import Stack
from services.front.host.supervisor import notify_ready
from services.front.registry import SERVICES
from services.runtime.jetstream import JetStreamLog, StreamSettings, redact_url

__all__ = ["ServiceOptions", "launch_service"]


@dataclass(frozen=True)
class ServiceOptions:
    """``horizon service``'s options, as given (docs in its ``--help``)."""

    name: str  # one part, or decision services separated by commas
    nats_url: str
    data_dir: Path
    replicas: int
    nodes: int | None  # the shape options (Shape)
    gpus_per_node: int | None
    gpu_type: str | None
    cpus_per_node: str | None
    memory_per_node: str | None
    node_prefix: str
    node_name: str | None
    executor: str
    heartbeat_timeout: float
    policy: str
    backfill_mode: str
    otel: str
    metrics_port: int | None
    metrics_std: bool
    metrics_host: str
    metrics_token_file: Path | None
    lease_ttl: int
    slurm_conf: Path | None
    slurm_partition: str
    slurm_bin: str
    partitions: tuple[str, ...]
    kubeconfig: Path | None = None  # kubernetes (services/front/host/launch_kubernetes.py)
    namespace: str = ""
    default_image: str | None = None


def _check_names(o: ServiceOptions) -> None:
    """--partition only for the partitioned services, and names that can go into subjects."""
    if o.partitions:
        from services.front.registry import PARTITIONED

        for name in o.name.split(","):
            if name not in PARTITIONED:
                raise UsageProblem(f"--partition goes with {' or '.join(PARTITIONED)}: {name} has one leader "
                                   f"for the whole cluster")
        for p in o.partitions:
            if not valid_partition(p) or p.startswith("-"):
                raise BadValue(f"{p!r}: use letters, digits, '_', '-' or '.'", "--partition")


def _check_nodes(o: ServiceOptions) -> None:
    if not valid_token(f"{o.node_prefix}-00"):  # node names go into subjects (horizon.hb.<node>)
        raise BadValue(f"{o.node_prefix!r}: use letters, digits, '_' or '-' (no dots)", "--node-prefix")
    if o.node_name is not None and not valid_token(o.node_name):
        raise BadValue(f"{o.node_name!r}: use letters, digits, '_' or '-' (no dots)", "--node-name")


def launch_service(o: ServiceOptions, verbose: bool) -> None:
    """Run ``o.name`` until it fails or is stopped (see the module's docstring)."""
    configure_logging(verbose)
    _check_names(o)
    settings = StreamSettings(replicas=o.replicas)
    shape = Shape(o.nodes, o.gpus_per_node, o.gpu_type, o.cpus_per_node, o.memory_per_node)
    _check_nodes(o)
    slurm = None
    if o.name == "slurm":
        slurm = slurm_settings("slurm", shape, o.executor, False, o.slurm_conf, o.slurm_partition, o.slurm_bin)
    elif o.slurm_conf is not None or o.slurm_partition:
        raise UsageProblem("--slurm-conf and --slurm-partition go with `horizon service slurm`")
    kubernetes = kubernetes_settings("kubernetes" if o.name == "kubernetes" else "", False, o.executor, False,
                                     o.kubeconfig, o.namespace, o.default_image)
    metrics_port = o.metrics_port
    if metrics_port is None and o.metrics_std:
        from services.front.host.metrics import METRICS_PORTS

        first = o.name.split(",")[0]  # several services in one process: the first one's
        metrics_port = METRICS_PORTS["agent" if first in ("slurm", "kubernetes") else first]  # one or the other runs on a machine
    try:
        asyncio.run(_run_part(o, shape, settings, slurm, metrics_port, kubernetes))
    except DataDirBusy as exc:  # the agent's lock on --data-dir (one agent per data dir)
        raise Failure(str(exc)) from None


async def _start_part(o: ServiceOptions, shape: Shape, stack: Stack) -> list[str]:
    """3. The part started; its names in the stack (a service's: its lease's key)."""
    name = o.name
    if "," in name:  # decision services, on one shared reader
        keys = [p.name for p in await stack.start_services(name.split(","), partitions=o.partitions)]
        say(f"{', '.join(keys)} running against {redact_url(o.nats_url)} on one reader; each decides while "
            f"it holds its lease (ttl {o.lease_ttl} s); Ctrl-C stops them", err=True)
        notify_ready(f"{', '.join(keys)} running")
        return keys
    if name == "agent":
        if shape.dev:
            stack.nodes, what = shape.dev_nodes(o.node_prefix), shape.describe_dev()
        else:
            spec, what = machine(o.node_name)
            stack.nodes = [spec]
        say(f"agent: {what}, {o.executor} executor", err=True)
        await stack.start_agent()
    elif name == "slurm":
        await stack.start_slurm()
    elif name == "kubernetes":
        await stack.start_kubernetes()
    elif name == "projections":
        await stack.start_projection()
    else:
        key = (await stack.start_service(name, partitions=o.partitions)).name
    if name in SERVICES:
        role = f"; it decides while it holds the {key} lease (ttl {o.lease_ttl} s)"
        if o.partitions:
            role += f", for partition{'s' if len(o.partitions) > 1 else ''} {', '.join(o.partitions)}"
    else:
        role, key = "", name
    say(f"{key} running against {redact_url(o.nats_url)}{role}; Ctrl-C stops it", err=True)
    notify_ready(f"{key} running")
    return [key]


async def _run_part(o: ServiceOptions, shape: Shape, settings: StreamSettings, slurm: Any,
                    metrics_port: int | None, kubernetes: Any = None) -> None:
    name = o.name.replace(",", "+")
    # 1. telemetry, and the part's own /metrics if asked
    tracing, meters, registry = telemetry(o.otel, f"horizon-{name}", prometheus=metrics_port is not None)
    web = None
    if metrics_port is not None:
        tokens = [read_token(o.metrics_token_file)] if o.metrics_token_file is not None else []
        web = await http_server(registry, o.metrics_host, metrics_port, tokens=tokens)
        say(f"{name}: metrics (Prometheus) on {web.url}/metrics", err=True)
    stack = Stack(o.nats_url, o.data_dir, executor=o.executor, heartbeat_timeout_s=o.heartbeat_timeout,
                  settings=settings, policy=o.policy, backfill=o.backfill_mode, tracer_provider=tracing,
                  meter_provider=meters, lease_ttl_s=o.lease_ttl, slurm=slurm, kubernetes=kubernetes)
    if "," not in o.name:
        stack.shared_reader = False  # a part alone reads as it always has: its own consumer
    # 2. the streams
    setup = await JetStreamLog.open(o.nats_url, name=f"horizon-{name}-setup", settings=settings)
    await setup.close()
    failed: list[str] = []
    async with stop_signals() as stop:
        try:
            keys = await _start_part(o, shape, stack)
            tasks = {stack.parts[key].task for key in keys}
            signalled = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({*tasks, signalled}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                signalled.cancel()
                failed = stack.failed()
        finally:
            # 4. its stop
            try:
                await stack.stop()
            finally:
                if web is not None:
                    await web.stop()
    if failed:  # exit non-zero so a supervisor (systemd, Kubernetes) restarts us
        raise Failure("; ".join(failed))
