"""Commands that run Horizon: ``horizon up`` (everything on one machine) and ``horizon service``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from typing import Any

import click

from events.resources import parse_cpus, parse_memory
from events.subjects import valid_token
from services.agent.nodes import local_nodes
from services.runtime.jetstream import JetStreamLog, StreamSettings, redact_url
from services.runtime.natsserver import NatsServer
from services.host.stack import Stack
from services.host.registry import SERVICES
from services.host.supervisor import ChildSpec, Supervisor, notify_ready

__all__ = ["register"]


async def _until_signalled() -> None:
    """Wait for Ctrl-C or SIGTERM; either stops everything in order."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _logging(verbose: bool, log_file: Path | None = None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers = [logging.FileHandler(log_file)]
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        handlers=handlers,
    )
    logging.getLogger("nats").setLevel(logging.WARNING)


@click.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".horizon"), show_default=True)
@click.option("--port", type=int, default=4222, show_default=True, help="NATS client port (0: a free one).")
@click.option("--nodes", type=int, default=4, show_default=True, help="Local nodes to run.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option("--gpu-type", default="a100", show_default=True, help="GPU model of the local nodes, e.g. h100-80gb.")
@click.option("--cpus-per-node", default="64", show_default=True)
@click.option("--memory-per-node", default="512Gi", show_default=True)
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True,
              help="process: run the commands for real; sim: jobs only take their sim runtime.")
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True, help="Seconds before a silent node is lost.")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True,
              help="Queue order within a priority class.")
@click.option("--backfill-mode", type=click.Choice(["easy", "shadow", "greedy", "none"]), default="easy",
              show_default=True, help="What a job that does not fit means for the jobs behind it.")
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--processes", is_flag=True,
              help="Run every part as its own OS process (`horizon service NAME`), restarted if it dies; "
                   "logs in DATA_DIR/logs/, PIDs in DATA_DIR/processes.json.")
@click.option("--verbose", is_flag=True)
def up(data_dir: Path, port: int, nodes: int, gpus_per_node: int, gpu_type: str, cpus_per_node: str,
       memory_per_node: str, executor: str, heartbeat_timeout: float, policy: str, backfill_mode: str,
       otel: str, processes: bool, verbose: bool) -> None:
    """Start everything on this machine: nats-server, the five services, projections, local nodes."""
    node_specs = local_nodes(
        nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type, cpus=parse_cpus(cpus_per_node, "--cpus-per-node") // 1000,
        memory_bytes=parse_memory(memory_per_node, "--memory-per-node"),
    )
    _logging(verbose, data_dir / "horizon.log")
    server = NatsServer(store_dir=data_dir / "nats", port=port, log_file=data_dir / "nats-server.log")
    if processes:
        common = ["--executor", executor, "--heartbeat-timeout", str(heartbeat_timeout), "--policy", policy,
                  "--backfill-mode", backfill_mode, "--otel", otel, *(["--verbose"] if verbose else [])]
        agent = ["--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node), "--gpu-type", gpu_type,
                 "--cpus-per-node", cpus_per_node, "--memory-per-node", memory_per_node]
        _up_processes(server, data_dir, common, agent if nodes else None,
                      f"{nodes} nodes x {gpus_per_node} {gpu_type} GPUs, {executor} executor")
        return
    server.start()
    try:
        asyncio.run(_up(server, data_dir, node_specs, executor, heartbeat_timeout, nodes, gpus_per_node, gpu_type,
                        policy, backfill_mode, otel))
    finally:
        server.stop()
        click.echo("stopped", err=True)


async def _up(server: NatsServer, data_dir: Path, node_specs: list, executor: str, heartbeat_timeout: float,
              nodes: int, gpus_per_node: int, gpu_type: str, policy: str, backfill: str, otel: str = "none") -> None:
    tracing, meters = _telemetry(otel, "horizon")
    stack = Stack(server.url, data_dir, nodes=node_specs, executor=executor, heartbeat_timeout_s=heartbeat_timeout,
                  policy=policy, backfill=backfill, tracer_provider=tracing, meter_provider=meters)
    try:
        await stack.start()
        click.echo(server.url, nl=True)
        click.echo(
            f"Horizon is up: {nodes} nodes x {gpus_per_node} {gpu_type} GPUs, {executor} executor; "
            f"data in {data_dir}/, logs in {data_dir}/horizon.log\n"
            f"Try, in another shell:\n"
            f"  horizon submit --gpus 2 -- nvidia-smi\n"
            f"  horizon queue\n"
            f"  horizon jobs\n"
            f"  horizon watch\n"
            f"Ctrl-C stops everything.",
            err=True,
        )
        supervisor = asyncio.create_task(stack.supervise())
        try:
            await _until_signalled()
        finally:
            supervisor.cancel()
    finally:
        await stack.stop()


def process_specs(url: str, data_dir: Path, common: list[str], agent: list[str] | None) -> list[ChildSpec]:
    """One ``horizon service NAME`` command line per part: the five services, the projections,
    and (unless ``agent`` is None) the agent with its node options."""
    base = [sys.executable, "-m", "services.cli.main", "service"]
    where = ["--nats", url, "--data-dir", str(data_dir.resolve())]
    specs = [ChildSpec(name, [*base, name, *where, *common]) for name in [*SERVICES, "projections"]]
    if agent is not None:
        specs.append(ChildSpec("agent", [*base, "agent", *where, *common, *agent]))
    return specs


def _up_processes(server: NatsServer, data_dir: Path, common: list[str], agent: list[str] | None,
                  shape: str) -> None:
    """``horizon up --processes``: nats-server here, every part a supervised child process.

    Phases: 1. the server and the streams (so a submission made as soon as the URL is printed is
    kept); 2. the children, then their readiness (sd_notify); 3. watch and restart until Ctrl-C
    or SIGTERM; 4. stop the children by PID, then the server. A second Ctrl-C kills at once.
    """
    signals: list[int] = []
    previous = {sig: signal.signal(sig, lambda num, _frame: signals.append(num))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    shout = logging.StreamHandler()  # exits and restarts also on the terminal
    shout.setLevel(logging.WARNING)
    logging.getLogger("horizon.supervisor").addHandler(shout)
    supervisor: Supervisor | None = None
    try:
        server.start()
        asyncio.run(_create_streams(server.url))
        supervisor = Supervisor(process_specs(server.url, data_dir, common, agent), data_dir / "logs",
                                pid_file=data_dir / "processes.json")
        supervisor.start()
        waiting = supervisor.wait_ready(120.0, should_stop=lambda: bool(signals))
        if not signals:
            if waiting:
                click.echo(f"not ready after 120 s: {', '.join(waiting)} (see {data_dir}/logs/)", err=True)
            click.echo(server.url, nl=True)
            names = ", ".join(f"{name} {pid}" for name, pid in supervisor.pids().items())
            click.echo(
                f"Horizon is up as processes: {shape}; PIDs: {names}\n"
                f"logs in {data_dir}/logs/, PIDs in {data_dir}/processes.json. Ctrl-C stops everything.",
                err=True,
            )
            supervisor.run(lambda: bool(signals))
    finally:
        if supervisor is not None:
            supervisor.stop(force=lambda: len(signals) > 1)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        click.echo("stopped", err=True)


async def _create_streams(url: str) -> None:
    setup = await JetStreamLog.open(url, name="horizon-setup")
    await setup.close()


@click.command()
@click.argument("name", type=click.Choice([*SERVICES, "projections", "agent"]))
@click.option("--nats", "nats_url", envvar="HORIZON_NATS_URL", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".horizon"), show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True, help="Stream replicas (3 on a NATS cluster).")
@click.option("--nodes", type=int, default=1, show_default=True, help="agent: local nodes this agent hosts.")
@click.option("--node-prefix", default="node", show_default=True, help="agent: node name prefix.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option("--gpu-type", default="a100", show_default=True)
@click.option("--cpus-per-node", default="64", show_default=True, help="agent: CPUs of each node.")
@click.option("--memory-per-node", default="512Gi", show_default=True, help="agent: memory of each node.")
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True)
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True)
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True)
@click.option("--backfill-mode", type=click.Choice(["easy", "shadow", "greedy", "none"]), default="easy",
              show_default=True)
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--lease-ttl", type=click.IntRange(min=1), default=10, show_default=True,
              help="Seconds a service's leader lease lasts unrenewed: how long a standby waits after its "
                   "leader dies. Must exceed the longest decision round.")
@click.option("--verbose", is_flag=True)
def service(name: str, nats_url: str, data_dir: Path, replicas: int, nodes: int, node_prefix: str,
            gpus_per_node: int, gpu_type: str, cpus_per_node: str, memory_per_node: str, executor: str,
            heartbeat_timeout: float, policy: str, backfill_mode: str, otel: str, lease_ttl: int,
            verbose: bool) -> None:
    """Run one part alone against any NATS (the distributed shape).

    --nats takes one URL or several separated by commas (the servers of a NATS cluster). Once the
    part has caught up with the log it says READY=1 on $NOTIFY_SOCKET if set (systemd Type=notify).

    Run a service as many times as you like: every instance folds the log, the one holding the
    service's lease (KV bucket HORIZON_LEASES) decides, the others are hot standbys that take over
    within --lease-ttl seconds of its death (at once when it stops gracefully).
    """
    _logging(verbose)
    settings = StreamSettings(replicas=replicas)
    cpus = parse_cpus(cpus_per_node, "--cpus-per-node") // 1000
    memory_bytes = parse_memory(memory_per_node, "--memory-per-node")
    if not valid_token(f"{node_prefix}-00"):  # node names go into subjects (horizon.hb.<node>)
        raise click.BadParameter(f"{node_prefix!r}: use letters, digits, '_' or '-' (no dots)",
                                 param_hint="--node-prefix")

    async def go() -> None:
        tracing, meters = _telemetry(otel, f"horizon-{name}")
        stack = Stack(nats_url, data_dir, executor=executor, heartbeat_timeout_s=heartbeat_timeout, settings=settings,
                      policy=policy, backfill=backfill_mode, tracer_provider=tracing, meter_provider=meters,
                      lease_ttl_s=lease_ttl)
        setup = await JetStreamLog.open(nats_url, name=f"horizon-{name}-setup", settings=settings)
        await setup.close()
        if name == "agent":
            stack.nodes = local_nodes(nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type, cpus=cpus,
                                      memory_bytes=memory_bytes, prefix=node_prefix)
            await stack.start_agent()
        elif name == "projections":
            await stack.start_projection()
        else:
            await stack.start_service(name)
        role = f"; it decides while it holds the {name} lease (ttl {lease_ttl} s)" if name in SERVICES else ""
        click.echo(f"{name} running against {redact_url(nats_url)}{role}; Ctrl-C stops it", err=True)
        notify_ready(f"{name} running")
        part = stack.parts[name]
        signalled = asyncio.create_task(_until_signalled())
        try:
            await asyncio.wait({part.task, signalled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signalled.cancel()
            failed = stack.failed()
            await stack.stop()
        if failed:  # exit non-zero so a supervisor (systemd, Kubernetes) restarts us
            raise click.ClickException("; ".join(failed))

    asyncio.run(go())


def _telemetry(exporter: str, service_name: str) -> tuple[Any, Any]:
    """Tracer and meter providers for ``--otel`` (None, None when off)."""
    if exporter == "none":
        return None, None
    from services.runtime.telemetry import configure

    try:
        tracing = configure(exporter, service_name)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    if exporter == "console":
        reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=60_000)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter  # type: ignore

        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return tracing, MeterProvider(metric_readers=[reader])


def register(group: click.Group) -> None:
    group.add_command(up)
    group.add_command(service)


