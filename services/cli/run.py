"""Commands that run Horizon: ``horizon up`` (everything on one machine) and ``horizon service``."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from typing import Any

import click

from events.resources import parse_cpus, parse_memory
from services.agent.app import local_nodes
from services.runtime.jetstream import JetStreamLog, StreamSettings
from services.runtime.natsserver import NatsServer
from services.runtime.stack import SERVICES, Stack

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
@click.option("--verbose", is_flag=True)
def up(data_dir: Path, port: int, nodes: int, gpus_per_node: int, gpu_type: str, cpus_per_node: str,
       memory_per_node: str, executor: str, heartbeat_timeout: float, policy: str, backfill_mode: str,
       otel: str, verbose: bool) -> None:
    """Start everything on this machine: nats-server, the five services, projections, local nodes."""
    node_specs = local_nodes(
        nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type, cpus=parse_cpus(cpus_per_node, "--cpus-per-node") // 1000,
        memory_bytes=parse_memory(memory_per_node, "--memory-per-node"),
    )
    _logging(verbose, data_dir / "horizon.log")
    server = NatsServer(store_dir=data_dir / "nats", port=port, log_file=data_dir / "nats-server.log")
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


@click.command()
@click.argument("name", type=click.Choice([*SERVICES, "projections", "agent"]))
@click.option("--nats", "nats_url", envvar="HORIZON_NATS_URL", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".horizon"), show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True, help="Stream replicas (3 on a NATS cluster).")
@click.option("--nodes", type=int, default=1, show_default=True, help="agent: local nodes this agent hosts.")
@click.option("--node-prefix", default="node", show_default=True, help="agent: node name prefix.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option("--gpu-type", default="a100", show_default=True)
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True)
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True)
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True)
@click.option("--backfill-mode", type=click.Choice(["easy", "shadow", "greedy", "none"]), default="easy",
              show_default=True)
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--verbose", is_flag=True)
def service(name: str, nats_url: str, data_dir: Path, replicas: int, nodes: int, node_prefix: str,
            gpus_per_node: int, gpu_type: str, executor: str, heartbeat_timeout: float, policy: str,
            backfill_mode: str, otel: str, verbose: bool) -> None:
    """Run one part alone against any NATS (the distributed shape)."""
    _logging(verbose)
    settings = StreamSettings(replicas=replicas)

    async def go() -> None:
        tracing, meters = _telemetry(otel, f"horizon-{name}")
        stack = Stack(nats_url, data_dir, executor=executor, heartbeat_timeout_s=heartbeat_timeout, settings=settings,
                      policy=policy, backfill=backfill_mode, tracer_provider=tracing, meter_provider=meters)
        setup = await JetStreamLog.open(nats_url, name=f"horizon-{name}-setup", settings=settings)
        await setup.close()
        if name == "agent":
            stack.nodes = local_nodes(nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type, prefix=node_prefix)
            await stack.start_agent()
        elif name == "projections":
            await stack.start_projection()
        else:
            await stack.start_service(name)
        click.echo(f"{name} running against {nats_url}; Ctrl-C stops it", err=True)
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


