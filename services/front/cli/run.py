"""Commands that run Horizon: ``horizon up`` (everything on one machine) and ``horizon service``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path

from collections.abc import AsyncIterator
from typing import Any

import click

from events.resources import parse_cpus, parse_duration, parse_memory
from events.vocabulary import BACKFILL_MODES
from events.subjects import valid_token
from services.front.cli.ui import METRICS_TOKEN_FILE
from services.nodes.backends.process.discovery import describe_machine, machine_node
from services.nodes.spec import NodeSpec, local_nodes
from services.front.host.partitions import publish_stock
from services.runtime.jetstream import JetStreamLog, StreamSettings, redact_url
from services.runtime.natsserver import NatsServer
from services.front.host.lock import DataDirBusy, DataDirLock
from services.front.host.metrics import read_token
from services.front.host.running import Running
from services.front.host.secure import Secured, mode_warning, prepare
from services.front.host.stack import Stack
from services.front.registry import SERVICES
from services.front.host.supervisor import ChildSpec, Supervisor, notify_ready

UI_PORT = 8470  # horizon up's HTTP port: /metrics and the dashboard's pages

__all__ = ["register"]


@contextlib.asynccontextmanager
async def _signals() -> AsyncIterator[asyncio.Event]:
    """An event Ctrl-C or SIGTERM sets, from the start of the block: one that comes while the parts
    are still starting stops everything in order once they have started (not a KeyboardInterrupt
    in the middle of a start, which leaves files open)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
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


# The shape of a development cluster when any shape option is given (the others take these).
DEV_NODES, DEV_GPUS, DEV_GPU_TYPE, DEV_CPUS, DEV_MEMORY = 4, 8, "a100", "64", "512Gi"
_SHAPE_HELP = "Development cluster (simulated nodes): "


def shape_options(command: Any) -> Any:
    """--nodes, --gpus-per-node, --gpu-type, --cpus-per-node, --memory-per-node: any of them makes a
    development cluster of simulated nodes; none of them, this machine as it is."""
    for option in reversed([
        click.option("--nodes", type=click.IntRange(min=0), default=None,
                     help=f"{_SHAPE_HELP}how many [default: {DEV_NODES} when any shape option is given]. "
                          "Without any shape option: this machine is the one node, as discovered."),
        click.option("--gpus-per-node", type=click.IntRange(min=0), default=None,
                     help=f"{_SHAPE_HELP}GPUs of each [default: {DEV_GPUS}]."),
        click.option("--gpu-type", default=None, help=f"{_SHAPE_HELP}their GPU model, e.g. h100-80gb "
                                                      f"[default: {DEV_GPU_TYPE}]."),
        click.option("--cpus-per-node", default=None, help=f"{_SHAPE_HELP}CPUs of each [default: {DEV_CPUS}]."),
        click.option("--memory-per-node", default=None, help=f"{_SHAPE_HELP}memory of each [default: {DEV_MEMORY}]."),
    ]):
        command = option(command)
    return command


class Shape:
    """What an ``up`` or an agent runs: a development cluster (``dev``) or this machine."""

    def __init__(self, nodes: int | None, gpus_per_node: int | None, gpu_type: str | None,
                 cpus_per_node: str | None, memory_per_node: str | None) -> None:
        self.dev = any(v is not None for v in (nodes, gpus_per_node, gpu_type, cpus_per_node, memory_per_node))
        self.nodes = DEV_NODES if nodes is None else nodes
        self.gpus_per_node = DEV_GPUS if gpus_per_node is None else gpus_per_node
        self.gpu_type = gpu_type or DEV_GPU_TYPE
        self.cpus_text = cpus_per_node or DEV_CPUS
        self.memory_text = memory_per_node or DEV_MEMORY
        if self.dev:  # checked before anything starts (a bad value touches nothing)
            self.cpus = parse_cpus(self.cpus_text, "--cpus-per-node") // 1000
            self.memory_bytes = parse_memory(self.memory_text, "--memory-per-node")

    def args(self) -> list[str]:
        """The same shape as agent options (``horizon service agent``); none for the machine."""
        if not self.dev:
            return []
        return ["--nodes", str(self.nodes), "--gpus-per-node", str(self.gpus_per_node), "--gpu-type", self.gpu_type,
                "--cpus-per-node", self.cpus_text, "--memory-per-node", self.memory_text]

    def dev_nodes(self, prefix: str = "node") -> list[NodeSpec]:
        return local_nodes(self.nodes, gpus_per_node=self.gpus_per_node, gpu_type=self.gpu_type, cpus=self.cpus,
                           memory_bytes=self.memory_bytes, prefix=prefix)

    def describe_dev(self) -> str:
        if not self.nodes:
            return "no nodes (an agent started apart registers its own: horizon service agent)"
        what = f"{self.nodes} simulated node{'s' if self.nodes != 1 else ''}"
        if not self.gpus_per_node:
            return f"{what}, no GPUs"
        return f"{what} x {self.gpus_per_node} {self.gpu_type} GPUs (simulated: not real devices)"


def _machine(name: str | None = None) -> tuple[NodeSpec, str]:
    """This machine's node, and what to say of it."""
    spec, notes = machine_node(name)
    return spec, describe_machine(spec, notes)


def try_hint(nodes: list[NodeSpec]) -> str:
    """A first job that works here: ``nvidia-smi`` only where real GPUs are."""
    if any(n.gpus and not n.simulated for n in nodes):
        return "horizon submit --gpus 1 -- nvidia-smi"
    if any(n.gpus for n in nodes):
        return "horizon submit --gpus 1 -- sh -c 'echo \"GPUs: $CUDA_VISIBLE_DEVICES\"'"
    return "horizon submit -- hostname"


def _hold(data_dir: Path) -> DataDirLock:
    """The data directory's lock, or exit non-zero saying who holds it (touching nothing else)."""
    try:
        return DataDirLock(data_dir, command="horizon up").acquire()
    except DataDirBusy as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # not a directory, not writable
        raise click.ClickException(f"cannot use {data_dir} as the data directory: {exc}") from None


@click.command()
@click.option("--data-dir", type=click.Path(path_type=Path, resolve_path=True), default=Path(".horizon"),
              show_default=True, help="Where the log and the read models live (made absolute at start: every part "
                                      "and every job's supervisor uses it whatever its own directory).")
@click.option("--port", type=int, default=4222, show_default=True, help="NATS client port (0: a free one).")
@shape_options
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True,
              help="process: run the commands for real; sim: jobs only take their sim runtime.")
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True, help="Seconds before a silent node is lost.")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True,
              help="Queue order within a priority class.")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy",
              show_default=True, help="What a job that does not fit means for the jobs behind it.")
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--ui-port", type=click.IntRange(min=0, max=65535), default=None,
              help=f"HTTP port on 127.0.0.1 serving the web dashboard (/) and /metrics (Prometheus text) for every part `up` runs "
                   f"[default: {UI_PORT}, or a free port if that one is taken; 0: a free port].")
@click.option("--processes", is_flag=True,
              help="Run every part as its own OS process (`horizon service NAME`), restarted if it dies; "
                   "logs in DATA_DIR/logs/, PIDs in DATA_DIR/processes.json.")
@click.option("--auth", is_flag=True,
              help="NATS accounts and permissions: each part and the operator its own user, each tenant an "
                   "account of its own (add them with `horizon tenant add NAME`); credentials in "
                   "DATA_DIR/auth/, never printed. See docs/tenants.md.")
@click.option("--tls", "use_tls", is_flag=True,
              help="Mutual TLS between every part and the server: a CA and certificates made in DATA_DIR/tls/; "
                   "other clients need HORIZON_TLS_CA, HORIZON_TLS_CERT and HORIZON_TLS_KEY.")
@click.option("--backend", type=click.Choice(["agent", "slurm"]), default="agent", show_default=True,
              help="What runs the jobs: agent (Horizon's node agent, on this machine or a development cluster) or "
                   "slurm (an existing Slurm cluster's partition: Horizon decides, Slurm runs; docs/backends.md).")
@click.option("--slurm-conf", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="--backend slurm: the cluster's slurm.conf [default: $SLURM_CONF, else Slurm's own].")
@click.option("--slurm-partition", default="", help="--backend slurm: the partition whose nodes Horizon schedules "
              "onto [default: every node].")
@click.option("--slurm-bin", default="/usr/bin", show_default=True,
              help="--backend slurm: where Slurm's sbatch, scontrol and scancel are.")
@click.option("--quota-provider", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="Where accounts' limits come from: local (horizon account set) or slurm (Slurm's associations "
                   "and QOS through sacctmgr, with --slurm-conf; synced every --quota-every; docs/backends.md).")
@click.option("--quota-every", default="5m", show_default=True,
              help="--quota-provider slurm: how often to sync (also at start; `horizon quota sync` syncs now).")
@click.option("--verbose", is_flag=True)
def up(data_dir: Path, port: int, nodes: int | None, gpus_per_node: int | None, gpu_type: str | None,
       cpus_per_node: str | None, memory_per_node: str | None, executor: str, heartbeat_timeout: float, policy: str,
       backfill_mode: str, otel: str, ui_port: int | None, processes: bool, auth: bool, use_tls: bool,
       backend: str, slurm_conf: Path | None, slurm_partition: str, slurm_bin: str, quota_provider: str,
       quota_every: str, verbose: bool) -> None:
    """Start everything on this machine: nats-server, the five services, projections, and a node.

    Without shape options the node is this machine as it is: its CPUs, memory and GPUs (found
    through NVML). With any of --nodes, --gpus-per-node, --gpu-type, --cpus-per-node,
    --memory-per-node it is a development cluster of simulated nodes of that shape instead (their
    GPUs are not real devices; jobs still run for real with the process executor).

    One `horizon up` per data directory: a second one on the same --data-dir says who holds it and
    exits non-zero.

    It has partitions of its own nodes, as the operator configures them: main (the default, every
    node), gpu (the nodes with GPUs) and cpu (those without, when there are both); an operator's
    `horizon partition set` is never overwritten.

    With --auth the same stack runs with NATS accounts: the services, the agent, the projections and
    the operator are users of their own with only the subjects they need, and each tenant an account
    of its own whose inputs reach the log only through the submission service's intake. The operator
    commands run beside it find the operator's credentials in the data dir (--data-dir).

    With --backend slurm the nodes are a Slurm partition's (--slurm-conf, --slurm-partition) and
    each job placed on them runs as a Slurm batch job pinned to the nodes Horizon chose. With
    --quota-provider slurm the accounts, their shares and limits are Slurm's (sacctmgr), synced into
    the log at start and every --quota-every.
    """
    shape = Shape(nodes, gpus_per_node, gpu_type, cpus_per_node, memory_per_node)
    quota = _quota_settings(quota_provider, quota_every, slurm_conf, processes)
    slurm = _slurm_settings(backend, shape, executor, processes, slurm_conf, slurm_partition, slurm_bin,
                            conf_used=quota is not None)
    lock = _hold(data_dir)  # 1. the data dir is ours before anything in it is touched
    try:
        # 2. what runs: the machine (discovered), the development cluster, or a Slurm partition
        if slurm is not None:
            node_specs = []
            conf_text = slurm_conf or os.environ.get("SLURM_CONF") or "the default slurm.conf"
            what = f"Slurm partition {slurm_partition or '(every node)'} of {conf_text}"
        elif shape.dev:
            node_specs, what = shape.dev_nodes(), shape.describe_dev()
        else:
            machine, what = _machine()
            node_specs = [machine]
        _logging(verbose, data_dir / "horizon.log")
        warning = mode_warning(data_dir, auth)
        if warning:
            click.echo(f"warning: {warning}", err=True)
        # 3. credentials and certificates (kept from an earlier run, made if missing), the server's config
        secured = prepare(data_dir, auth, use_tls)
        if secured.tls is not None:  # every part of this process, and every child, presents this machine's
            os.environ.update(secured.tls.env())
        server = NatsServer(store_dir=data_dir / "nats", port=port, log_file=data_dir / "nats-server.log",
                            config=secured.config)
        if processes:
            common = ["--executor", executor, "--heartbeat-timeout", str(heartbeat_timeout), "--policy", policy,
                      "--backfill-mode", backfill_mode, "--otel", otel, "--metrics-port", "0",
                      *(["--verbose"] if verbose else [])]
            _up_processes(server, data_dir, common, shape.args() if node_specs else None,
                          f"{what}, {executor} executor", try_hint(node_specs), secured, node_specs, ui_port)
            return
        server.start()
        try:
            asyncio.run(_up(server, data_dir, node_specs, executor, heartbeat_timeout, what, policy, backfill_mode,
                            otel, secured, ui_port, slurm, quota))
        except DataDirBusy as exc:  # the agent's own lock: an agent started apart on this data dir
            raise click.ClickException(str(exc)) from None
        except RuntimeError as exc:  # the Slurm backend could not start (services/nodes/backends/slurm/backend.py)
            if slurm is None or type(exc.__cause__).__name__ != "SlurmUnavailable":
                raise
            raise click.ClickException(str(exc.__cause__)) from None
        finally:
            Running.remove(data_dir)
            server.stop()
            click.echo("stopped", err=True)
    finally:
        lock.release()


def _ready_lines(secured: Secured, data_dir: Path, hint: str, url: str = "", port: int = 4222) -> str:
    """What to try once up: without accounts, the commands as they are; with them, a tenant first.

    Every command shown runs as printed from another shell: it carries ``--nats URL`` when the
    server is not on the default port (``--port 0``, or 4222 taken), and ``--data-dir`` when the
    data directory is not ``./.horizon``."""
    nats = f" --nats {url}" if url and port != 4222 else ""

    def cmd(text: str) -> str:  # "horizon submit -- x" -> "horizon submit --nats URL -- x"
        head, _, rest = text.partition(" ")
        verb, _, tail = rest.partition(" ")
        return f"{head} {verb}{nats}" + (f" {tail}" if tail else "")

    if secured.users is None:
        tls = ("Clients need this machine's certificate: HORIZON_TLS_CA, HORIZON_TLS_CERT and HORIZON_TLS_KEY "
               f"set to {data_dir}/tls/ca.pem, client.pem and client.key (docs/tenants.md)\n"
               if secured.tls is not None else "")
        tries = "".join(f"  {cmd(c)}\n" for c in (hint, "horizon queue", "horizon jobs", "horizon watch"))
        return f"{tls}Try, in another shell:\n{tries}"
    where = f" --data-dir {data_dir}" if data_dir != Path(".horizon").absolute() else ""
    return (f"Accounts on: each part and the operator have a user of their own (credentials in {data_dir}/auth/, "
            f"not shown)\n"
            f"Try, in another shell:\n"
            f"  horizon tenant add acme --json{where}   # prints acme's URL\n"
            f"  HORIZON_NATS_URL=<that URL> {hint}\n"
            f"  horizon account set acme --tenant acme --shares 2{where}   # an operator command\n")


def _quota_settings(provider: str, every: str, conf: Path | None, processes: bool) -> Any:
    """``--quota-provider slurm``'s (source, seconds between syncs); None for the local provider."""
    if provider == "local":
        return None
    if processes:
        raise click.UsageError("--quota-provider slurm runs in horizon up's own process: without --processes, or "
                               "run `horizon quota sync --every DURATION` beside it")
    try:
        every_s = parse_duration(every, "--quota-every")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--quota-every") from None
    if every_s <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--quota-every")
    from services.quota.app import QuotaSourceError, SlurmQuotaSource

    source = SlurmQuotaSource(slurm_conf=str(conf.resolve()) if conf is not None else None)
    try:
        source.cluster_name()  # a conf that names no cluster is said now, not at the first sync
    except QuotaSourceError as exc:
        raise click.ClickException(str(exc)) from None
    return source, every_s


def _slurm_settings(backend: str, shape: Shape, executor: str, processes: bool, conf: Path | None, partition: str,
                    bin_dir: str, conf_used: bool = False) -> Any:
    """``--backend slurm``'s settings (None for the agent), or a usage error for options that cannot go with it.
    ``conf_used``: --slurm-conf serves the quota provider (so it is no stray option without the backend)."""
    if backend != "slurm":
        if (conf is not None and not conf_used) or partition:
            raise click.UsageError("--slurm-conf and --slurm-partition go with --backend slurm (--slurm-conf also "
                                   "with --quota-provider slurm)")
        return None
    if shape.dev:
        raise click.UsageError("--backend slurm takes its nodes from Slurm: no --nodes or other shape options")
    if executor != "process" or processes:
        raise click.UsageError("--backend slurm runs jobs through Slurm: no --executor sim or --processes")
    if not os.path.isfile(os.path.join(bin_dir, "sbatch")):
        raise click.UsageError(f"no sbatch in {bin_dir}: install Slurm's client commands or give --slurm-bin")
    from services.nodes.backends.slurm.backend import SlurmSettings, SlurmUnavailable, reachable

    settings = SlurmSettings(conf=str(conf.resolve()) if conf is not None else None, partition=partition,
                             bin_dir=bin_dir)
    try:  # before anything starts: a Slurm that does not answer is said at once
        reachable(settings)
    except SlurmUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    return settings


async def _up(server: NatsServer, data_dir: Path, node_specs: list[NodeSpec], executor: str, heartbeat_timeout: float,
              what: str, policy: str, backfill: str, otel: str = "none", secured: Secured | None = None,
              ui_port: int | None = None, slurm: Any = None, quota: Any = None) -> None:
    secured = secured or Secured(None, None, None)
    tracing, meters, registry = _telemetry(otel, "horizon", prometheus=True)
    url = secured.public_url(server.host, server.port)
    board = _dashboard(secured, server, data_dir, policy, backfill)
    web = await _http_server(registry, "127.0.0.1", ui_port, fallback=ui_port is None, dashboard=board,
                             tokens=_metrics_tokens(secured, data_dir))
    stack = Stack(url, data_dir, nodes=node_specs, executor=executor, heartbeat_timeout_s=heartbeat_timeout,
                  policy=policy, backfill=backfill, tracer_provider=tracing, meter_provider=meters,
                  urls=secured.part_urls(server.host, server.port), slurm=slurm, quota=quota)
    async with _signals() as stop:
        try:
            await stack.start()
            if slurm is not None:  # the partition's nodes, as Slurm gave them
                node_specs = list(stack.parts["slurm"].obj.agent.nodes.values())
                executor = "slurm"
            # its partitions, as the operator (services/front/host/partitions.py: never over an operator's)
            await publish_stock(stack.url_of("admin"), node_specs)
            assert server.pid is not None
            secured.running(server.host, server.port, server.pid).write(data_dir)
            click.echo(url, nl=True)
            click.echo(
                f"Horizon is up: {what}, {executor} executor; "
                f"data in {data_dir}/, logs in {data_dir}/horizon.log\n"
                f"{_dashboard_line(web.url, secured, data_dir)}"
                f"{_metrics_line(web.url, secured, data_dir)}"
                f"{_ready_lines(secured, data_dir, try_hint(node_specs), url, server.port)}"
                f"Ctrl-C stops everything.",
                err=True,
            )
            supervisor = asyncio.create_task(stack.supervise())
            try:
                await stop.wait()
            finally:
                supervisor.cancel()
        finally:
            try:
                await stack.stop()
            finally:
                await web.stop()


def process_specs(url: str, data_dir: Path, common: list[str], agent: list[str] | None,
                  urls: dict[str, str] | None = None) -> list[ChildSpec]:
    """One ``horizon service NAME`` command line per part: the five services, the projections,
    and (unless ``agent`` is None) the agent with its node options (``[]``: this machine).

    ``urls`` (``--auth``): each part's own URL, given in its environment (``HORIZON_NATS_URL``),
    not on its command line, which holds no password."""
    base = [sys.executable, "-m", "services.front.cli.main", "service"]
    names = [*SERVICES, "projections", *(["agent"] if agent is not None else [])]
    specs = []
    for name in names:
        own = (urls or {}).get(name)
        where = [*(["--nats", url] if own is None else []), "--data-dir", str(data_dir.resolve())]
        env = {"HORIZON_NATS_URL": own} if own is not None else {}
        specs.append(ChildSpec(name, [*base, name, *where, *common, *(agent if name == "agent" and agent else [])],
                               env=env))
    return specs


def _up_processes(server: NatsServer, data_dir: Path, common: list[str], agent: list[str] | None,
                  shape: str, hint: str = "horizon submit -- hostname", secured: Secured | None = None,
                  nodes: list[NodeSpec] | None = None, ui_port: int | None = None) -> None:
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
    stop_web: Any = None
    try:
        secured = secured or Secured(None, None, None)
        # /metrics on the HTTP port: every child's, merged at each scrape (each child serves its own
        # on a free port, printed in its log)
        from services.front.host.http import HttpServer, serve_in_thread
        from services.front.host.metrics import child_metrics_url, merged_handler, require_bearer

        logs = data_dir / "logs"
        names = [spec.name for spec in process_specs("", data_dir, common, agent)]
        web = HttpServer("127.0.0.1", UI_PORT if ui_port is None else ui_port)
        tokens = _metrics_tokens(secured, data_dir)  # under --auth, the children's own /metrics too
        web.mount("/metrics", require_bearer(merged_handler(
            lambda: [u for u in (child_metrics_url(logs / f"{n}.log") for n in names) if u is not None],
            token=tokens[-1] if tokens else None), tokens))
        policy = common[common.index("--policy") + 1] if "--policy" in common else "multifactor"
        backfill = common[common.index("--backfill-mode") + 1] if "--backfill-mode" in common else "easy"
        _dashboard(secured, server, data_dir, policy, backfill).mount(web)  # connects once the server is up
        try:
            stop_web = serve_in_thread(web)
        except OSError as exc:
            if ui_port is not None:
                raise click.ClickException(f"cannot serve HTTP on 127.0.0.1:{web.port}: {exc.strerror or exc}") from None
            click.echo(f"warning: port {web.port} is taken; serving HTTP on a free port", err=True)
            web.port = 0
            stop_web = serve_in_thread(web)
        server.start()
        url, urls = secured.public_url(server.host, server.port), secured.part_urls(server.host, server.port)
        asyncio.run(_create_streams(urls.get("admin", url)))
        asyncio.run(publish_stock(urls.get("admin", url), nodes or []))  # the stock partitions
        specs = process_specs(url, data_dir, common, agent, urls)
        if tokens:  # each child's /metrics asks for the scrape credential (the file's path, not the token)
            specs = [dataclasses.replace(spec, env={**spec.env, "HORIZON_METRICS_TOKEN_FILE": str(
                data_dir / "auth" / METRICS_TOKEN_FILE)}) for spec in specs]
        supervisor = Supervisor(specs, data_dir / "logs", pid_file=data_dir / "processes.json")
        supervisor.start()
        waiting = supervisor.wait_ready(120.0, should_stop=lambda: bool(signals))
        if not signals:
            if waiting:
                click.echo(f"not ready after 120 s: {', '.join(waiting)} (see {data_dir}/logs/)", err=True)
            assert server.pid is not None
            secured.running(server.host, server.port, server.pid).write(data_dir)
            click.echo(url, nl=True)
            pids = ", ".join(f"{name} {pid}" for name, pid in supervisor.pids().items())
            click.echo(
                f"Horizon is up as processes: {shape}; PIDs: {pids}\n"
                f"logs in {data_dir}/logs/, PIDs in {data_dir}/processes.json.\n"
                f"{_dashboard_line(web.url, secured, data_dir)}"
                f"{_metrics_line(web.url, secured, data_dir)}"
                f"{_ready_lines(secured, data_dir, hint, url, server.port)}"
                f"Ctrl-C stops everything.",
                err=True,
            )
            supervisor.run(lambda: bool(signals))
    finally:
        if supervisor is not None:
            supervisor.stop(force=lambda: len(signals) > 1)
        if stop_web is not None:
            stop_web()
        Running.remove(data_dir)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        click.echo("stopped", err=True)


async def _create_streams(url: str) -> None:
    setup = await JetStreamLog.open(url, name="horizon-setup")
    await setup.close()


@click.command()
@click.argument("name", type=click.Choice([*SERVICES, "projections", "agent", "slurm"]))
@click.option("--nats", "nats_url", envvar="HORIZON_NATS_URL", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, resolve_path=True), default=Path(".horizon"),
              show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True, help="Stream replicas (3 on a NATS cluster).")
@shape_options
@click.option("--node-prefix", default="node", show_default=True,
              help="agent, development cluster: node name prefix (nodes PREFIX-00, PREFIX-01, ...).")
@click.option("--node-name", default=None,
              help="agent, this machine: the node's name [default: the short host name].")
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True)
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True)
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True)
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy",
              show_default=True)
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None, envvar="HORIZON_METRICS_PORT",
              help="Serve /metrics (Prometheus text) on this port (0: a free one, printed) [default: none].")
@click.option("--metrics", "metrics_std", is_flag=True,
              help="Serve /metrics on the part's own port: submission 9471, scheduling 9472, placement 9473, "
                   "preemption 9474, inventory 9475, projections 9476, agent 9477 (unless --metrics-port).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address --metrics-port listens on (0.0.0.0: every interface, for a scraper elsewhere).")
@click.option("--metrics-token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              envvar="HORIZON_METRICS_TOKEN_FILE",
              help="Answer /metrics only with 'Authorization: Bearer <the token in this file>' (or "
                   "$HORIZON_METRICS_TOKEN_FILE); under accounts its series name tenants [default: open].")
@click.option("--lease-ttl", type=click.IntRange(min=1), default=10, show_default=True,
              help="Seconds a service's leader lease lasts unrenewed: how long a standby waits after its "
                   "leader dies. Must exceed the longest decision round.")
@click.option("--slurm-conf", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="slurm: the cluster's slurm.conf [default: $SLURM_CONF, else Slurm's own].")
@click.option("--slurm-partition", default="", help="slurm: the partition whose nodes Horizon schedules onto "
              "[default: every node].")
@click.option("--slurm-bin", default="/usr/bin", show_default=True, help="slurm: where Slurm's commands are.")
@click.option("--partition", "partitions", multiple=True, metavar="NAME",
              help="scheduling, placement: lead only these partitions' jobs (repeat for several), under "
                   "their own subjects, lease and snapshots (docs/scaling.md) [default: the whole cluster].")
@click.option("--verbose", is_flag=True)
def service(name: str, nats_url: str, data_dir: Path, replicas: int, nodes: int | None, gpus_per_node: int | None,
            gpu_type: str | None, cpus_per_node: str | None, memory_per_node: str | None, node_prefix: str,
            node_name: str | None, executor: str, heartbeat_timeout: float, policy: str, backfill_mode: str,
            otel: str, metrics_port: int | None, metrics_std: bool, metrics_host: str,
            metrics_token_file: Path | None, lease_ttl: int,
            slurm_conf: Path | None, slurm_partition: str, slurm_bin: str, partitions: tuple[str, ...],
            verbose: bool) -> None:
    """Run one part alone against any NATS (the distributed shape).

    --nats takes one URL or several separated by commas (the servers of a NATS cluster). Once the
    part has caught up with the log it says READY=1 on $NOTIFY_SOCKET if set (systemd Type=notify).

    Run a service as many times as you like: every instance folds the log, the one holding the
    service's lease (KV bucket HORIZON_LEASES) decides, the others are hot standbys that take over
    within --lease-ttl seconds of its death (at once when it stops gracefully).

    The agent hosts this machine as one node (its CPUs, memory and GPUs, as discovered) unless a
    shape option makes it host a development cluster of simulated nodes instead. `slurm` is the
    Slurm backend instead of an agent: a Slurm partition's nodes (--slurm-conf, --slurm-partition;
    docs/backends.md).

    Scheduling and placement scale out by partition: `--partition gpu` runs the leader of partition
    gpu's jobs and nodes only, beside the leaders of the others (each pair on its own subjects;
    fair share and quotas stay global; docs/scaling.md).
    """
    _logging(verbose)
    if partitions:
        from services.front.registry import PARTITIONED

        if name not in PARTITIONED:
            raise click.UsageError(f"--partition goes with {' or '.join(PARTITIONED)}: {name} has one leader "
                                   f"for the whole cluster")
        for p in partitions:
            if not valid_token(p) or p.startswith("-"):
                raise click.BadParameter(f"{p!r}: use letters, digits, '_' or '-' (no dots)", param_hint="--partition")
    settings = StreamSettings(replicas=replicas)
    shape = Shape(nodes, gpus_per_node, gpu_type, cpus_per_node, memory_per_node)
    if not valid_token(f"{node_prefix}-00"):  # node names go into subjects (horizon.hb.<node>)
        raise click.BadParameter(f"{node_prefix!r}: use letters, digits, '_' or '-' (no dots)",
                                 param_hint="--node-prefix")
    if node_name is not None and not valid_token(node_name):
        raise click.BadParameter(f"{node_name!r}: use letters, digits, '_' or '-' (no dots)",
                                 param_hint="--node-name")

    slurm = None
    if name == "slurm":
        slurm = _slurm_settings("slurm", shape, executor, False, slurm_conf, slurm_partition, slurm_bin)
    elif slurm_conf is not None or slurm_partition:
        raise click.UsageError("--slurm-conf and --slurm-partition go with `horizon service slurm`")
    if metrics_port is None and metrics_std:
        from services.front.host.metrics import METRICS_PORTS

        metrics_port = METRICS_PORTS["agent" if name == "slurm" else name]  # one or the other runs on a machine

    async def go() -> None:
        tracing, meters, registry = _telemetry(otel, f"horizon-{name}", prometheus=metrics_port is not None)
        web = None
        if metrics_port is not None:
            tokens = [read_token(metrics_token_file)] if metrics_token_file is not None else []
            web = await _http_server(registry, metrics_host, metrics_port, tokens=tokens)
            click.echo(f"{name}: metrics (Prometheus) on {web.url}/metrics", err=True)
        stack = Stack(nats_url, data_dir, executor=executor, heartbeat_timeout_s=heartbeat_timeout, settings=settings,
                      policy=policy, backfill=backfill_mode, tracer_provider=tracing, meter_provider=meters,
                      lease_ttl_s=lease_ttl, slurm=slurm)
        setup = await JetStreamLog.open(nats_url, name=f"horizon-{name}-setup", settings=settings)
        await setup.close()
        failed: list[str] = []
        async with _signals() as stop:
            try:
                if name == "agent":
                    if shape.dev:
                        stack.nodes, what = shape.dev_nodes(node_prefix), shape.describe_dev()
                    else:
                        machine, what = _machine(node_name)
                        stack.nodes = [machine]
                    click.echo(f"agent: {what}, {executor} executor", err=True)
                    await stack.start_agent()
                elif name == "slurm":
                    await stack.start_slurm()
                elif name == "projections":
                    await stack.start_projection()
                else:
                    key = (await stack.start_service(name, partitions=partitions)).name
                if name in SERVICES:
                    role = f"; it decides while it holds the {key} lease (ttl {lease_ttl} s)"
                    if partitions:
                        role += f", for partition{'s' if len(partitions) > 1 else ''} {', '.join(partitions)}"
                else:
                    role, key = "", name
                click.echo(f"{key} running against {redact_url(nats_url)}{role}; Ctrl-C stops it", err=True)
                notify_ready(f"{key} running")
                part = stack.parts[key]
                signalled = asyncio.create_task(stop.wait())
                try:
                    await asyncio.wait({part.task, signalled}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    signalled.cancel()
                    failed = stack.failed()
            finally:
                try:
                    await stack.stop()
                finally:
                    if web is not None:
                        await web.stop()
        if failed:  # exit non-zero so a supervisor (systemd, Kubernetes) restarts us
            raise click.ClickException("; ".join(failed))

    try:
        asyncio.run(go())
    except DataDirBusy as exc:  # the agent's lock on --data-dir (one agent per data dir)
        raise click.ClickException(str(exc)) from None


def _dashboard(secured: Secured, server: NatsServer, data_dir: Path, policy: str, backfill: str) -> Any:
    """``up``'s dashboard, as the operator; with accounts browsers log in (the operator with the
    token kept in DIR/auth/dashboard-token, a tenant with its name and password)."""
    from services.front.cli.ui import dashboard_for, keep_token

    url = secured.part_urls(server.host, server.port).get("admin") or secured.public_url(server.host, server.port)
    auth = secured.users is not None
    return dashboard_for(url, login=auth, token=keep_token(data_dir) if auth else None, policy=policy,
                         backfill=backfill)


def _dashboard_line(web_url: str, secured: Secured, data_dir: Path) -> str:
    from services.front.cli.ui import TOKEN_FILE

    if secured.users is None:
        return f"Dashboard: {web_url}/\n"
    return (f"Dashboard: {web_url}/ (log in with the operator's token in {data_dir}/auth/{TOKEN_FILE}, "
            f"or as a tenant with its name and password)\n")


def _metrics_tokens(secured: Secured, data_dir: Path) -> list[str]:
    """Who may scrape ``up``'s /metrics: anyone without accounts (every client is trusted); with them,
    whoever presents the dashboard's token or the scrape credential (both kept in DIR/auth/, made
    once; the scrape credential last)."""
    from services.front.cli.ui import keep_token

    if secured.users is None:
        return []
    return [keep_token(data_dir), keep_token(data_dir, METRICS_TOKEN_FILE)]


def _metrics_line(web_url: str, secured: Secured, data_dir: Path) -> str:
    if secured.users is None:
        return f"Metrics (Prometheus): {web_url}/metrics\n"
    return (f"Metrics (Prometheus): {web_url}/metrics (Authorization: Bearer, the token in "
            f"{data_dir}/auth/{METRICS_TOKEN_FILE} or the dashboard's)\n")


async def _http_server(registry: Any, host: str, port: int | None, fallback: bool = False,
                       dashboard: Any = None, tokens: list[str] | None = None) -> Any:
    """The host's HTTP server with ``/metrics`` mounted (for a bearer of one of ``tokens`` only, if
    any) and ``dashboard`` at ``/``; ``port`` None is ``UI_PORT``, and with ``fallback`` a free port
    when that one is taken (another ``horizon up``)."""
    from services.front.host.http import HttpServer
    from services.front.host.metrics import metrics_handler, require_bearer

    web = HttpServer(host, UI_PORT if port is None else port)
    web.mount("/metrics", require_bearer(metrics_handler(registry), tokens or []))
    if dashboard is not None:
        dashboard.mount(web)
    try:
        await web.start()
    except OSError as exc:
        if not fallback:
            raise click.ClickException(f"cannot serve HTTP on {host}:{web.port}: {exc.strerror or exc}") from None
        click.echo(f"warning: port {web.port} is taken; serving HTTP on a free port", err=True)
        web.port = 0
        await web.start()
    return web


def _telemetry(exporter: str, service_name: str, prometheus: bool = False) -> tuple[Any, Any, Any]:
    """Tracer and meter providers for ``--otel`` (None, None when off), and with ``prometheus`` a
    meter provider Prometheus scrapes (also exporting to ``--otel``'s exporter) and its registry."""
    if exporter == "none":
        if prometheus:
            from services.front.host.metrics import prometheus_provider

            return (None, *prometheus_provider(service_name))
        return None, None, None
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
    if prometheus:
        from services.front.host.metrics import prometheus_provider

        return (tracing, *prometheus_provider(service_name, [reader]))
    return tracing, MeterProvider(metric_readers=[reader]), None


def register(group: click.Group) -> None:
    group.add_command(up)
    group.add_command(service)


