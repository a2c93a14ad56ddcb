"""``horizon up``: everything on one machine, composed from the options the command was given.

``launch_up`` walks it in numbered steps: 1. the data dir is ours (its lock) before anything in it is
touched; 2. what runs the jobs: this machine as discovered, a development cluster of simulated nodes
(``Shape``), a Slurm partition or a Kubernetes cluster, or several of them at once (``--backend
agent,slurm,kubernetes``: ``launch_backends.py``); 3. credentials, certificates and the server's config; then either
every part in this process (``up_in_process``) or each its own supervised process
(``services/front/host/launch_processes.py``). ``horizon service`` is ``launch_service.py``; the
HTTP side, telemetry and the lines printed are ``launch_web.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from events.resources import parse_cpus, parse_duration, parse_memory
from services.front.client.problems import BadValue, Failure, UsageProblem
from services.front.client.terminal import say
from services.front.host.launch_backends import BACKENDS, parse_backends, shared_names
from services.front.host.launch_kubernetes import describe as describe_kubernetes
from services.front.host.launch_kubernetes import kubernetes_options, kubernetes_settings
from services.front.host.launch_web import (dashboard_line, http_server, metrics_line, metrics_tokens, ready_lines,
                                            telemetry, up_dashboard)
from services.front.host.lock import DataDirBusy, DataDirLock
from services.front.host.partitions import publish_stock
from services.front.host.running import Running
from services.front.host.secure import Secured, mode_warning, prepare
from services.front.host.stack import Stack
from services.nodes.backends.process.discovery import describe_machine, machine_node
from services.nodes.spec import NodeSpec, local_nodes
from services.runtime.natsserver import NatsServer

__all__ = ["DEV_NODES", "DEV_GPUS", "DEV_GPU_TYPE", "DEV_CPUS", "DEV_MEMORY", "Shape", "machine", "try_hint",
           "stop_signals", "configure_logging", "slurm_settings", "UpOptions", "launch_up", "up_in_process"]


@contextlib.asynccontextmanager
async def stop_signals() -> AsyncIterator[asyncio.Event]:
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


def configure_logging(verbose: bool, log_file: Path | None = None) -> None:
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


def machine(name: str | None = None) -> tuple[NodeSpec, str]:
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
        raise Failure(str(exc)) from None
    except OSError as exc:  # not a directory, not writable
        raise Failure(f"cannot use {data_dir} as the data directory: {exc}") from None


def _quota_settings(provider: str, every: str, conf: Path | None, processes: bool, kubeconfig: Path | None) -> Any:
    """``--quota-provider slurm|kubernetes``'s (source, seconds between syncs); None for the local provider."""
    if provider == "local":
        return None
    if processes:
        raise UsageProblem(f"--quota-provider {provider} runs in horizon up's own process: without --processes, or "
                           "run `horizon quota sync --every DURATION` beside it")
    try:
        every_s = parse_duration(every, "--quota-every")
    except ValueError as exc:
        raise BadValue(str(exc), "--quota-every") from None
    if every_s <= 0:
        raise BadValue("must be more than 0", "--quota-every")
    from services.quota.app import KubernetesQuotaSource, QuotaSourceError, SlurmQuotaSource

    if provider == "kubernetes":
        if kubeconfig is None:
            raise UsageProblem("--quota-provider kubernetes reads the cluster's ResourceQuotas: give --kubeconfig")
        source: Any = KubernetesQuotaSource(str(kubeconfig.resolve()))
        check = source.api  # a kubeconfig it cannot use is said now, not at the first sync
    else:
        source = SlurmQuotaSource(slurm_conf=str(conf.resolve()) if conf is not None else None)
        check = source.cluster_name  # a conf that names no cluster is said now, not at the first sync
    try:
        check()
    except QuotaSourceError as exc:
        raise Failure(str(exc)) from None
    return source, every_s


def slurm_settings(backend: str, shape: Shape, executor: str, processes: bool, conf: Path | None, partition: str,
                   bin_dir: str, conf_used: bool = False) -> Any:
    """``--backend slurm``'s settings (None without slurm among ``backend``'s names), or a usage error for options
    that cannot go with it. ``conf_used``: --slurm-conf serves the quota provider (so it is no stray option
    without the backend). Shape options go with the agent's nodes only (``--backend agent,slurm --nodes 2``)."""
    names = parse_backends(backend)
    if "slurm" not in names:
        if (conf is not None and not conf_used) or partition:
            raise UsageProblem("--slurm-conf and --slurm-partition go with --backend slurm (--slurm-conf also "
                               "with --quota-provider slurm)")
        return None
    if shape.dev and "agent" not in names:
        raise UsageProblem("--backend slurm takes its nodes from Slurm: no --nodes or other shape options")
    if executor != "process" or processes:
        raise UsageProblem("--backend slurm runs jobs through Slurm: no --executor sim or --processes")
    if not os.path.isfile(os.path.join(bin_dir, "sbatch")):
        raise UsageProblem(f"no sbatch in {bin_dir}: install Slurm's client commands or give --slurm-bin")
    from services.nodes.backends.slurm.backend import SlurmSettings, SlurmUnavailable, reachable

    settings = SlurmSettings(conf=str(conf.resolve()) if conf is not None else None, partition=partition,
                             bin_dir=bin_dir)
    try:  # before anything starts: a Slurm that does not answer is said at once
        reachable(settings)
    except SlurmUnavailable as exc:
        raise Failure(str(exc)) from None
    return settings


@dataclass(frozen=True)
class UpOptions:
    """``horizon up``'s options, as given (docs in its ``--help``)."""

    data_dir: Path
    port: int
    shape: Shape
    executor: str
    heartbeat_timeout: float
    policy: str
    backfill_mode: str
    otel: str
    ui_port: int | None
    processes: bool
    auth: bool
    use_tls: bool
    backend: str
    slurm_conf: Path | None
    slurm_partition: str
    slurm_bin: str
    quota_provider: str
    quota_every: str
    verbose: bool
    kubeconfig: Path | None = None  # --backend kubernetes (services/front/host/launch_kubernetes.py)
    namespace: str = ""
    default_image: str | None = None


def _what_runs(o: UpOptions, names: tuple[str, ...], slurm: Any, kubernetes: Any = None) -> tuple[list[NodeSpec], str]:
    """The nodes ``up``'s own agent hosts (none without the agent: a Slurm partition or a Kubernetes
    cluster gives its own) and what to say of what runs the jobs, backend by backend."""
    specs: list[NodeSpec] = []
    words: list[str] = []
    if "agent" in names:
        if o.shape.dev:
            specs, what = o.shape.dev_nodes(), o.shape.describe_dev()
        else:
            spec, what = machine()
            specs = [spec]
        words.append(what)
    if slurm is not None:
        conf_text = o.slurm_conf or os.environ.get("SLURM_CONF") or "the default slurm.conf"
        words.append(f"Slurm partition {o.slurm_partition or '(every node)'} of {conf_text}")
    if kubernetes is not None:
        words.append(describe_kubernetes(kubernetes))
    return specs, "; ".join(words)


def launch_up(o: UpOptions) -> None:
    """``horizon up``, until Ctrl-C or SIGTERM (see the module's docstring for its steps)."""
    names = parse_backends(o.backend)
    if o.shape.dev and len(names) > 1 and "agent" not in names:
        raise UsageProblem(f"--nodes and the other shape options shape the agent's nodes: --backend "
                           f"{','.join(names)} has no agent (add it: agent,{','.join(names)})")
    # --kubeconfig serves --quota-provider kubernetes too: then it is no stray option without the backend
    kubeconfig = None if o.quota_provider == "kubernetes" and "kubernetes" not in names else o.kubeconfig
    kube_args = (o.backend, o.shape.dev and "agent" not in names, o.executor, o.processes, kubeconfig, o.namespace,
                 o.default_image)
    kubernetes_options(*kube_args)  # every option's problem is said before any backend is asked
    quota = _quota_settings(o.quota_provider, o.quota_every, o.slurm_conf, o.processes, o.kubeconfig)
    slurm = slurm_settings(o.backend, o.shape, o.executor, o.processes, o.slurm_conf, o.slurm_partition, o.slurm_bin,
                           conf_used=o.quota_provider == "slurm")
    kubernetes = kubernetes_settings(*kube_args)
    data_dir = o.data_dir
    lock = _hold(data_dir)  # 1. the data dir is ours before anything in it is touched
    try:
        # 2. what runs: the machine (discovered) or the development cluster, a Slurm partition, a Kubernetes
        # cluster: one of them or several
        node_specs, what = _what_runs(o, names, slurm, kubernetes)
        configure_logging(o.verbose, data_dir / "horizon.log")
        warning = mode_warning(data_dir, o.auth)
        if warning:
            say(f"warning: {warning}", err=True)
        # 3. credentials and certificates (kept from an earlier run, made if missing), the server's config
        secured = prepare(data_dir, o.auth, o.use_tls)
        if secured.tls is not None:  # every part of this process, and every child, presents this machine's
            os.environ.update(secured.tls.env())
        server = NatsServer(store_dir=data_dir / "nats", port=o.port, log_file=data_dir / "nats-server.log",
                            config=secured.config)
        if o.processes:
            from services.front.host.launch_processes import up_processes  # (not in a `horizon service`'s start)

            common = ["--executor", o.executor, "--heartbeat-timeout", str(o.heartbeat_timeout), "--policy", o.policy,
                      "--backfill-mode", o.backfill_mode, "--otel", o.otel, "--metrics-port", "0",
                      *(["--verbose"] if o.verbose else [])]
            up_processes(server, data_dir, common, o.shape.args() if node_specs else None,
                         f"{what}, {o.executor} executor", try_hint(node_specs), secured, node_specs, o.ui_port)
            return
        server.start()
        try:
            asyncio.run(up_in_process(server, data_dir, node_specs, o.executor, o.heartbeat_timeout, what, o.policy,
                                      o.backfill_mode, o.otel, secured, o.ui_port, slurm, quota, kubernetes))
        except DataDirBusy as exc:  # the agent's own lock: an agent started apart on this data dir
            raise Failure(str(exc)) from None
        except RuntimeError as exc:  # the Slurm or Kubernetes backend could not start (services/nodes/backends/)
            if type(exc.__cause__).__name__ not in ("SlurmUnavailable", "KubernetesUnavailable"):
                raise
            raise Failure(str(exc.__cause__)) from None
        finally:
            Running.remove(data_dir)
            server.stop()
            say("stopped", err=True)
    finally:
        lock.release()


async def _start_agent(stack: Stack, agent_nodes: list[NodeSpec], executor: str) -> tuple[list[NodeSpec], list[str]]:
    """After the other backends: every node ``up`` offers (the Slurm partition's as Slurm gave them, the
    Kubernetes cluster's as its API server did, then the agent's, which starts here) and each backend's
    executor; ``Failure``, before the agent registers anything, if two backends offer a node of one name."""
    offered: dict[str, list[NodeSpec]] = {}
    for backend in ("slurm", "kubernetes"):
        if backend in stack.parts:
            offered[backend] = list(stack.parts[backend].obj.agent.nodes.values())
    if agent_nodes:
        offered["agent"] = agent_nodes
    clash = shared_names({backend: [n.name for n in specs] for backend, specs in offered.items()})
    if clash is not None:
        raise Failure(clash)
    if agent_nodes:
        stack.nodes = agent_nodes
        await stack.start_agent()
    order = [b for b in BACKENDS if b in offered]  # as `up` says them: the agent's first
    return [n for b in order for n in offered[b]], [executor if b == "agent" else b for b in order]


async def up_in_process(server: NatsServer, data_dir: Path, node_specs: list[NodeSpec], executor: str,
                        heartbeat_timeout: float, what: str, policy: str, backfill: str, otel: str = "none",
                        secured: Secured | None = None, ui_port: int | None = None, slurm: Any = None,
                        quota: Any = None, kubernetes: Any = None) -> None:
    """Every part in this process, with the HTTP server, until Ctrl-C or SIGTERM."""
    secured = secured or Secured(None, None, None)
    tracing, meters, registry = telemetry(otel, "horizon", prometheus=True)
    url = secured.public_url(server.host, server.port)
    board = up_dashboard(secured, server, data_dir, policy, backfill)
    web = await http_server(registry, "127.0.0.1", ui_port, fallback=ui_port is None, dashboard=board,
                            tokens=metrics_tokens(secured, data_dir))
    # the agent starts last, once the others' nodes are known (a node is one backend's: _start_agent)
    stack = Stack(url, data_dir, executor=executor, heartbeat_timeout_s=heartbeat_timeout,
                  policy=policy, backfill=backfill, tracer_provider=tracing, meter_provider=meters,
                  urls=secured.part_urls(server.host, server.port), slurm=slurm, quota=quota, kubernetes=kubernetes)
    async with stop_signals() as stop:
        try:
            await stack.start()
            node_specs, executors = await _start_agent(stack, node_specs, executor)
            # its partitions, as the operator (services/front/host/partitions.py: never over an operator's)
            await publish_stock(stack.url_of("admin"), node_specs)
            executor = " + ".join(executors) + (" executor" if len(executors) == 1 else " executors")
            assert server.pid is not None
            secured.running(server.host, server.port, server.pid).write(data_dir)
            say(url)
            say(
                f"Horizon is up: {what}, {executor}; "
                f"data in {data_dir}/, logs in {data_dir}/horizon.log\n"
                f"{dashboard_line(web.url, secured, data_dir)}"
                f"{metrics_line(web.url, secured, data_dir)}"
                f"{ready_lines(secured, data_dir, try_hint(node_specs), url, server.port)}"
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
