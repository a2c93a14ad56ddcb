"""Running Horizon's parts: one service alone, or the whole stack on one machine.

Each part gets its own NATS connection, as it would in its own process, so
the in-process stack (``horizon up``, the end-to-end tests) exercises the same
paths as the distributed shape (``horizon service NAME --nats URL``): its own
publishing, lease, fence, snapshots and dead letters. What the decision
services, the read models and the agent of one process read, they read together
(``shared_reader``, on by default; ``HORIZON_SHARED_READER=0`` turns it off,
to compare): one consumer on a connection of its own, each record parsed and
decoded once and handed to every part (``services/runtime/fanout.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import time
from functools import partial
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.nodes.backends.protocol import Executor
from services.nodes.spec import NodeSpec
from services.front.host.lock import DataDirLock
from services.front.registry import SERVICES, service_part
from services.runtime.jetstream import JetStreamLog, StreamSettings
from services.runtime.lease import Lease
from services.runtime.parts import PartSettings
from services.runtime.cancel import cancel_and_wait
from services.runtime.fanout import MAX_LAG, SharedReader

__all__ = ["Part", "Stack"]

log = logging.getLogger("horizon.stack")

# Records a read model or the agent may have queued on the shared reader before it waits for them:
# more than a decision service, so that the services do not wait for a database commit or a process start.
FOLLOWER_MAX_LAG = 5 * MAX_LAG


@dataclass
class Part:
    """One running part: its log connection, the object that runs, and its task."""

    name: str
    log: JetStreamLog
    obj: Any
    task: asyncio.Task[None]


# The modules of every part ``Stack.start`` runs (the projections' and the agent's are imported by the
# methods that start them, so that ``horizon service NAME`` imports only its own part).
_WHOLE_STACK = ("projections.job_server", "projections.jobs", "projections.scheduling", "projections.standing",
                "services.domain.queue.fold", "services.nodes.agent.app", "services.nodes.backends.process.executors")


def _import_services(names: Sequence[str]) -> None:
    """Import services ``names`` before any of them runs: an import inside the running event loop stalls the
    parts already reading, and a part started behind them reads on its own until it catches up with the
    shared reader."""
    for name in names:
        if name in SERVICES:
            SERVICES[name]  # noqa: B018 - imports services/<name>/part.py


def _import_whole_stack() -> None:
    """Every part of the whole stack imported before any of them runs (``_import_services``)."""
    _import_services(tuple(SERVICES))
    for module in _WHOLE_STACK:
        importlib.import_module(module)


@dataclass
class Stack:
    url: str
    data_dir: Path
    nodes: list[NodeSpec] = field(default_factory=list)
    executor: str = "process"  # or "sim"
    heartbeat_timeout_s: float = 10.0
    heartbeat_interval_s: float = 1.0
    tick_interval_s: float | None = 5.0  # the log's clock (see services/inventory/app.py); None: no ticks
    policy: str = "multifactor"
    backfill: str = "easy"
    settings: StreamSettings = field(default_factory=StreamSettings)
    # Leader leases for the five services (services/runtime/lease.py), in whole seconds: any number
    # of instances of a service may run against one log, one decides. None: no lease, for a
    # caller sure that each service runs once (a restarted service then decides at once).
    lease_ttl_s: int | None = 10
    parts: dict[str, Part] = field(default_factory=dict)
    # On a server with accounts (``horizon up --auth``): each part's URL, by its user (the service's
    # name, "agent", "projections"; "admin" sets up the streams). A part not named here uses ``url``.
    urls: dict[str, str] = field(default_factory=dict)
    # The Slurm backend's settings (services/nodes/backends/slurm/backend.py, SlurmSettings): run it, over that
    # cluster's nodes (horizon up --backend slurm), beside a node agent over ``nodes`` if there are any.
    slurm: Any = None
    # The Kubernetes backend's settings (services/nodes/backends/kubernetes/backend.py, KubernetesSettings):
    # run it, over that cluster's nodes (horizon up --backend kubernetes), beside the others given.
    kubernetes: Any = None
    # A quota provider kept in sync (horizon up --quota-provider slurm|kubernetes): (its QuotaSource,
    # seconds between syncs); it publishes account configurations, as the operator (docs/backends.md).
    quota: Any = None
    tracer_provider: Any = None  # OpenTelemetry: each part's log is traced (services/runtime/telemetry.py)
    meter_provider: Any = None
    # The decision services read the log through one shared reader (module docstring); False: each
    # its own consumer, as a service alone does.
    shared_reader: bool = field(default_factory=lambda: os.environ.get("HORIZON_SHARED_READER", "1") != "0")
    reader: SharedReader | None = None
    reader_log: JetStreamLog | None = None
    _reader_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def part_settings(self) -> PartSettings:
        return PartSettings(policy=self.policy, backfill=self.backfill, heartbeat_timeout_s=self.heartbeat_timeout_s,
                            tick_interval_s=self.tick_interval_s)

    def url_of(self, part: str) -> str:
        """The URL part ``part`` connects with ("scheduling#2", a standby, as scheduling)."""
        return self.urls.get(part.split("#", 1)[0], self.url)

    async def start(self) -> None:
        _import_whole_stack()
        setup = await JetStreamLog.open(self.url_of("admin"), name="horizon-setup", settings=self.settings)
        await setup.close()
        await self.start_services(SERVICES)
        await self.start_projection()
        # each backend given (horizon up --backend agent,slurm,kubernetes: all three, on one queue)
        if self.slurm is not None:
            await self.start_slurm()
        if self.kubernetes is not None:
            await self.start_kubernetes()
        if self.nodes:
            await self.start_agent()
        if self.quota is not None:
            await self.start_quota()

    async def _connect(self, name: str) -> Any:
        log_ = await JetStreamLog.open(self.url_of(name), name=f"horizon-{name}", settings=self.settings,
                                       create=False)
        if self.tracer_provider is None and self.meter_provider is None:
            return log_
        from services.runtime.telemetry import TracedLog

        return TracedLog(log_, name, self.tracer_provider, self.meter_provider)

    async def _launch(self, name: str, log_: JetStreamLog, obj: Any, run: Any, ready: asyncio.Event) -> Part:
        """Run ``run`` as the part's task, wait until ``ready`` (or its failure), and register it."""
        task = asyncio.create_task(run, name=f"horizon-{name}")
        await _until_ready(ready, task, name)
        part = Part(name, log_, obj, task)
        self.parts[name] = part
        return part

    async def start_services(self, names: Sequence[str], *, partitions: tuple[str, ...] = ()) -> list[Part]:
        """Start services ``names``: with a shared reader all at once, so that they catch up together on
        its one consumer (from the earliest snapshot); without, one after the other."""
        _import_services(names)
        if not self.shared_reader or len(names) < 2:
            return [await self.start_service(name, partitions=partitions) for name in names]
        started = await asyncio.gather(*(self.start_service(name, partitions=partitions) for name in names),
                                       return_exceptions=True)
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        return [p for p in started if isinstance(p, Part)]

    async def _shared(self, key: str) -> SharedReader:
        """The process's shared reader, on a connection of its own (as part ``key``'s user, who may read the log)."""
        async with self._reader_lock:  # the services start at once: one opens it
            if self.reader is None:
                self.reader_log = await JetStreamLog.open(self.url_of(key), name="horizon-reader",
                                                          settings=self.settings, create=False)
                self.reader = SharedReader(self.reader_log)
        return self.reader

    async def start_service(self, name: str, *, key: str | None = None, partitions: tuple[str, ...] = ()) -> Part:
        """Start service ``name``, registered as part ``key`` (default: the name; another key, by
        convention ``name#2``, runs one more instance: a hot standby while another holds the lease).
        With ``partitions``, the leader of those partitions only (docs/scaling.md): its own service
        token (``scheduling-gpu``), lease, fence and snapshots; ``key`` defaults to that token."""
        part = service_part(name, partitions)
        key = key or part.name
        log_ = await self._connect(key)
        lease = None
        # A partition leader always has one: its rounds are fenced, and the fence is what keeps
        # quotas exact across leaders (docs/scaling.md).
        ttl = self.lease_ttl_s if self.lease_ttl_s is not None or not partitions else 10
        if ttl is not None:
            lease = Lease(log_.nc, part.name, ttl_s=ttl, replicas=self.settings.replicas)
        settings = self.part_settings()
        obj = part.make_runner(log_, part.make_core(settings), lease, settings)
        runner = obj.runner
        if self.shared_reader:
            runner.make_follower = (await self._shared(key)).follow
        work = part.serve(log_, runner, key, obj.run())
        return await self._launch(key, log_, obj, work, runner.ready)

    async def start_projection(self) -> Part:
        # The read models' modules, imported by the process that runs them (a service's process does not)
        from projections.job_server import QueryServer
        from projections.jobs import JobsProjection
        from projections.scheduling import SchedulerView
        from projections.standing import StandingStore
        from services.domain.queue.fold import QueueFold

        log_ = await self._connect("projections")
        projection = JobsProjection(log_, self.data_dir / "projections" / "jobs.sqlite")
        await projection.open()
        server = QueryServer(log_.nc, projection)
        await server.start()
        standing = StandingStore(self.data_dir / "projections" / "standing.sqlite")
        scheduler = SchedulerView(log_, log_.nc, QueueFold(policy=self.policy), meter_provider=self.meter_provider,
                                  store=standing)
        if self.shared_reader:  # the read models join the services' reader, with more slack
            reader = await self._shared("projections")
            projection.make_follower = scheduler.make_follower = partial(reader.follow, max_lag=FOLLOWER_MAX_LAG)

        async def run() -> None:
            try:
                await projection.start()
                await scheduler.start()
                await projection.wait()
            finally:  # each stop even if the one before was cut short: they close the databases
                await every_step(scheduler.stop, server.stop, projection.stop)

        return await self._launch("projections", log_, projection, run(), projection.ready)

    async def start_agent(self) -> Part:
        from services.nodes.agent.app import NodeAgent  # the agent's modules, in the process that runs it
        from services.nodes.backends.process.executors import ProcessExecutor, SimExecutor

        log_ = await self._connect("agent")
        lock = None
        if self.executor == "sim":
            executor: Executor = SimExecutor()
        else:
            # One agent per data dir: two would both adopt (and report) the same attempts.
            lock = DataDirLock(self.data_dir, "agent").acquire()
            executor = ProcessExecutor(self.data_dir / "jobs", {n.name: n for n in self.nodes})
        agent = NodeAgent(log_, self.nodes, executor, nc=log_.nc, heartbeat_interval_s=self.heartbeat_interval_s)
        if self.shared_reader:  # the agent too, with the read models' slack
            agent.make_follower = partial((await self._shared("agent")).follow, max_lag=FOLLOWER_MAX_LAG)

        async def run() -> None:
            try:
                await agent.start()
                try:
                    await asyncio.Event().wait()
                finally:
                    await agent.stop()
            finally:
                if lock is not None:
                    lock.release()

        return await self._launch("agent", log_, agent, run(), agent.ready)

    async def start_slurm(self) -> Part:
        """The Slurm backend (docs/backends.md): the node agent over a Slurm partition's nodes."""
        from services.nodes.backends.slurm.backend import SlurmBackend

        return await self._start_backend("slurm", lambda log_, admin: SlurmBackend(
            log_, self.slurm, self.data_dir / "jobs", nc=log_.nc, heartbeat_interval_s=self.heartbeat_interval_s,
            admin_log=admin))

    async def start_kubernetes(self) -> Part:
        """The Kubernetes backend (docs/backends.md): the node agent over a Kubernetes cluster's nodes."""
        from services.nodes.backends.kubernetes.backend import KubernetesBackend

        return await self._start_backend("kubernetes", lambda log_, admin: KubernetesBackend(
            log_, self.kubernetes, self.data_dir / "jobs", nc=log_.nc, heartbeat_interval_s=self.heartbeat_interval_s,
            admin_log=admin))

    async def _start_backend(self, name: str, make: Callable[[Any, Any], Any]) -> Part:
        """A backend that offers its own system's nodes: one of each per data dir (two would both run, and
        report, the same attempts: ``<data dir>/<name>.lock``; beside the agent's and the other backend's, as
        one ``up`` over several backends runs them); its drains are operator commands, so on a server with
        accounts they go on the operator's connection."""
        log_ = await self._connect("agent")
        lock = DataDirLock(self.data_dir, name).acquire()
        admin = await self._connect("admin") if "admin" in self.urls else None
        backend = make(log_, admin)

        async def run() -> None:
            try:
                await backend.start()
                try:
                    await asyncio.Event().wait()
                finally:
                    await backend.stop()
            finally:
                lock.release()
                if admin is not None:
                    with contextlib.suppress(Exception):
                        await admin.close()

        return await self._launch(name, log_, backend, run(), backend.ready)

    async def start_quota(self) -> Part:
        """The quota provider (services/quota/): Slurm's accounts or Kubernetes' ResourceQuotas, synced on a
        schedule."""
        from services.quota.app import keep_in_sync

        log_ = await self._connect("admin")  # account configurations are operator inputs
        source, every_s = self.quota
        ready = asyncio.Event()
        return await self._launch("quota", log_, source, keep_in_sync(log_, source, every_s, ready, time.time),
                                  ready)

    async def kill(self, name: str) -> None:
        """Cancel one part abruptly (a crash, as far as the log can tell) and close its connection."""
        part = self.parts.pop(name)
        await cancel_and_wait(part.task)
        with contextlib.suppress(Exception):
            await part.log.nc.close()

    async def restart(self, name: str) -> Part:
        if name in self.parts:
            await self.kill(name)
        service = name.split("#", 1)[0]  # "scheduling#2": a second instance of scheduling
        if service in SERVICES:
            return await self.start_service(service, key=name)
        others = {"projections": self.start_projection, "agent": self.start_agent, "slurm": self.start_slurm,
                  "kubernetes": self.start_kubernetes, "quota": self.start_quota}
        if name not in others:
            raise ValueError(f"unknown part {name!r}; parts: {', '.join([*SERVICES, *others])}")
        return await others[name]()

    async def stop(self) -> None:
        """Stop every part, all at once: each part's graceful stop (a lease handed over, a last
        snapshot or store) runs beside the others'. One after another, the parts not yet told kept
        deciding, snapshotting and answering on the shared event loop while the first wound down:
        with 60,000 jobs pending, ``horizon up`` took 37 s after Ctrl-C (issue 31)."""
        parts = [self.parts.pop(name) for name in reversed(list(self.parts))]

        async def stop_one(part: Part) -> None:
            began = time.monotonic()
            await cancel_and_wait(part.task, every_s=10.0)  # past a graceful stop (lease 2 s, snapshot 5 s)
            with contextlib.suppress(Exception):
                await part.log.close()
            log.info("%s stopped in %.1f s", part.name, time.monotonic() - began)

        await asyncio.gather(*(stop_one(part) for part in parts))
        reader, reader_log, self.reader, self.reader_log = self.reader, self.reader_log, None, None
        if reader is not None:
            await reader.close()
        if reader_log is not None:
            with contextlib.suppress(Exception):
                await reader_log.close()

    async def supervise(self, interval_s: float = 1.0, max_delay_s: float = 30.0) -> None:
        """Restart any part whose task ended on its own (e.g. the log was unreachable for too
        long), with a growing delay per part; runs until cancelled."""
        delays: dict[str, float] = {}
        while True:
            await asyncio.sleep(interval_s)
            for name, part in list(self.parts.items()):
                if not part.task.done() or part.task.cancelled():
                    continue
                delay = delays.get(name, 0.0)
                log.error("%s stopped (%r); restarting it in %.1f s", name, part.task.exception(), delay)
                await asyncio.sleep(delay)
                delays[name] = min(max_delay_s, max(interval_s, 2 * delay))
                try:
                    await self.restart(name)
                except Exception as exc:  # noqa: BLE001 - try again next round
                    log.error("could not restart %s: %s", name, exc)

    def failed(self) -> list[str]:
        """Parts whose task ended on its own (a bug or a lost server): name and error."""
        out = []
        for name, part in self.parts.items():
            if part.task.done() and not part.task.cancelled():
                out.append(f"{name}: {part.task.exception()!r}")
        return out


async def every_step(*steps: Callable[[], Awaitable[None]]) -> None:
    """Run each step in order, the next one also when one before failed or was cancelled (``Stack.stop``
    cancels a part again every 10 s: a stop cut short must not skip the closes after it); the first
    error, a cancellation included, is raised once every step has had its turn."""
    first: BaseException | None = None
    for step in steps:
        try:
            await step()
        except BaseException as exc:  # noqa: BLE001 - raised below, after the other steps
            first = first or exc
    if first is not None:
        raise first


async def _until_ready(ready: asyncio.Event, task: asyncio.Task[None], name: str) -> None:
    waiter = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        exc = task.exception()
        raise RuntimeError(f"{name} stopped during start-up: {exc}") from exc
