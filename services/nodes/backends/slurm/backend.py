"""The Slurm backend: Horizon decides, a Slurm cluster runs (docs/backends.md, Slurm).

``SlurmBackend`` is the node agent (``services/nodes/agent/app.py``, its contract unchanged) over a Slurm
partition: its nodes are the partition's (``scontrol show node -o``, mapped by ``core.node_spec``,
``NodeRegistered.backend`` "slurm"), its executor submits each attempt as a Slurm batch job pinned to
the nodes placement chose and follows it to its end (``executor.SlurmExecutor``). Every
``sync_interval_s`` it reads the nodes again and

* re-registers a node whose offer changed: what jobs submitted outside Horizon hold there
  (``core.foreign_use``) is its ``foreign`` use (``NodeRegistered.foreign``), which placement counts
  as used (its totals stay: a job that needs the whole node waits), and is gone when they end;
* leaves a node whose state Slurm does not know yet (``UNKNOWN``: slurmctld restarted) as it was;
* drains in Horizon a node Slurm keeps new jobs off (``DRAIN``, ``DOWN``, ...): a
  ``NodeCommandIssued`` drain from user ``slurm`` with Slurm's state and reason, answered by inventory
  like an operator's; when Slurm takes the node back, an uncordon. Only drains it issued itself are
  undone (an operator's ``horizon node drain`` stays), also across restarts: it reads its own
  commands back from the log at start-up;
* cancels a Slurm job Horizon submitted (by its comment) whose attempt no longer holds resources in
  the log: one that ended while no backend watched would otherwise hold capacity Horizon counts free.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from events import catalogue as c
from services.domain.jobs import HOLDS_RESOURCES, JobState
from services.nodes.agent.app import NodeAgent
from services.nodes.backends import node_book
from services.nodes.backends.node_book import NodeBook, held_devices, offer
from services.nodes.backends.slurm import core
from services.nodes.backends.slurm.executor import Slurm, SlurmError, SlurmExecutor, SlurmWatch
from services.nodes.spec import NodeSpec
from services.runtime.cancel import cancel_and_wait
from services.runtime.log import EventLog

__all__ = ["SlurmSettings", "SlurmBackend", "SlurmUnavailable", "SLURM_USER", "reachable", "installation"]

log = logging.getLogger("horizon.slurm")

SLURM_USER = "slurm"  # the user of the drain and uncordon commands the backend issues


class SlurmUnavailable(RuntimeError):
    """The backend cannot start: Slurm does not answer, or the partition has no nodes."""


@dataclass(frozen=True)
class SlurmSettings:
    conf: str | None = None  # slurm.conf (SLURM_CONF of the Slurm commands); None: Slurm's default
    partition: str = ""  # the partition whose nodes Horizon schedules onto ("": every node)
    bin_dir: str = "/usr/bin"  # where sbatch, scontrol, squeue, scancel are
    sync_interval_s: float = 2.0  # how often the nodes are read again
    poll_interval_s: float = 0.5  # how often the jobs are read (one scontrol for all)
    # this installation's id in its Slurm jobs' comments ("": the one kept in the data dir, made once)
    install: str = ""


def installation(state_dir: Path) -> str:
    """This installation's id (``<state dir>/slurm-installation``), which its Slurm jobs' comments
    carry: two Horizons over one Slurm cluster never take each other's jobs for their own (each sees
    the other's as Slurm's own, busy capacity)."""
    return node_book.installation(state_dir, "slurm")


def reachable(settings: SlurmSettings) -> int:
    """How many nodes the partition has, as Slurm answers now; ``SlurmUnavailable`` if it does not
    answer or has none (``horizon up --backend slurm`` asks before it starts anything)."""
    slurm = Slurm(settings.conf, settings.bin_dir)
    try:
        text = slurm.run_sync("scontrol", "show", "node", "-o", timeout_s=60)
    except (SlurmError, OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnavailable(f"cannot reach Slurm ({exc}); check --slurm-conf and that slurmctld runs") from exc
    count = sum(1 for r in core.parse_records(text) if "NodeName" in r and
                (not settings.partition or settings.partition in (r.get("Partitions") or "").split(",")))
    if not count:
        raise SlurmUnavailable(f"Slurm has no nodes in partition {settings.partition!r}")
    return count


class SlurmBackend:
    """The node agent over a Slurm partition (see the module doc)."""

    def __init__(self, log_: EventLog, settings: SlurmSettings, state_dir: Path, *, nc: Any = None,
                 heartbeat_interval_s: float = 1.0, grace_period_s: float = 10.0, admin_log: EventLog | None = None) -> None:
        self.log = log_
        # where its drain and uncordon commands go: an operator's input (on a server with accounts, the
        # operator's connection: an agent's user may not publish operator commands)
        self.admin_log = admin_log or log_
        self.settings = settings
        self.state_dir = Path(state_dir).absolute()  # sbatch runs elsewhere: never relative to our cwd
        self.nc = nc
        self.heartbeat_interval_s = heartbeat_interval_s
        self.grace_period_s = grace_period_s
        self.slurm = Slurm(settings.conf, settings.bin_dir)
        self.install = settings.install or installation(self.state_dir)
        self.watch = SlurmWatch(self.slurm, self.install, settings.poll_interval_s)
        self.agent: NodeAgent | None = None
        self.book = NodeBook(log_, self.admin_log, by="slurm", user=SLURM_USER, resumed="Slurm resumed it ({})")
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ Slurm's nodes

    async def read_nodes(self) -> dict[str, dict[str, str]]:
        """The partition's nodes, by name (``scontrol show node -o``)."""
        records = core.parse_records(await self.slurm.run("scontrol", "show", "node", "-o"))
        part = self.settings.partition
        return {r["NodeName"]: r for r in records if "NodeName" in r
                and (not part or part in (r.get("Partitions") or "").split(","))}

    def specs(self, nodes: dict[str, dict[str, str]]) -> list[NodeSpec]:
        foreign = core.foreign_use(self.watch.jobs.values(), self.install)
        return [core.node_spec(record, self.settings.partition, foreign.get(name), held_devices(self.agent, name))
                for name, record in sorted(nodes.items())]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        try:
            nodes = await self.read_nodes()
        except SlurmError as exc:
            raise SlurmUnavailable(f"cannot reach Slurm ({exc}); check --slurm-conf and that slurmctld runs") from exc
        if not nodes:
            raise SlurmUnavailable(f"Slurm has no nodes in partition {self.settings.partition!r}")
        await self.watch.refresh()
        specs = self.specs(nodes)
        executor = SlurmExecutor(self.slurm, self.state_dir, self.settings.partition,
                                 {s.name: s for s in specs}, self.watch)
        agent = NodeAgent(self.log, specs, executor, nc=self.nc, name="slurm",
                          heartbeat_interval_s=self.heartbeat_interval_s, grace_period_s=self.grace_period_s)
        self.agent = agent

        def wanted(job_id: str, attempt: int) -> bool:
            job = agent.core.jobs.get(job_id)
            return (job is not None and job.attempt == attempt and job.state is JobState.SCHEDULED
                    and job_id not in agent.core.stop_requests and job_id not in agent.core.preemptions)

        def limit(job_id: str) -> float | None:
            job = agent.core.jobs.get(job_id)
            return job.limit_s if job is not None and job.spec is not None else None

        executor.wanted, executor.limits = wanted, limit
        await self.book.read()
        self.watch.start()
        await agent.start()
        for spec in specs:
            if self.book.differs_from_logged(spec):
                await self._register(agent.nodes[spec.name])
        await self._sync(nodes)
        self._task = asyncio.create_task(self._loop(), name="slurm-nodes")
        self.ready.set()
        log.info("Slurm backend: %d nodes of partition %s", len(specs), self.settings.partition or "(all)")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self.agent is not None:
            await self.agent.stop()
        await self.watch.stop()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sync_interval_s)
            try:
                await self._sync(await self.read_nodes())
            except SlurmError as exc:
                log.warning("cannot read Slurm's nodes: %s", exc)
            except Exception:  # noqa: BLE001 - the next round tries again; the watch must not die
                log.exception("the Slurm node sync failed")

    # ------------------------------------------------------------------ keeping Horizon's nodes as Slurm's

    async def _sync(self, nodes: dict[str, dict[str, str]]) -> None:
        agent = self.agent
        assert agent is not None
        await self._reap()
        for spec in self.specs(nodes):
            known = agent.nodes.get(spec.name)
            if known is None:
                continue  # a node added to the partition is offered after a restart of the backend
            if core.node_unknown(nodes[spec.name]):
                continue  # slurmctld restarted and knows nothing of it yet: no news, not a drain
            spec = dataclasses.replace(spec, isolation=known.isolation)
            if offer(spec) != offer(known):
                agent.nodes[spec.name] = spec
                await self._register(spec)
            await self.book.follow(spec.name, core.node_drained(nodes[spec.name]))
        part = self.settings.partition or "any partition"
        await self.book.gone(set(agent.nodes) - set(nodes), f"Slurm: the node is no longer in {part}")

    async def _reap(self) -> None:
        """Cancel the Slurm jobs Horizon submitted whose attempt no longer holds resources in Horizon's
        log (it ended while no backend watched, e.g. failed as lost after the backend was down longer
        than the heartbeat timeout): left running, they would hold capacity Horizon counts as free."""
        agent = self.agent
        assert agent is not None
        for slurm_id, record in sorted(self.watch.jobs.items()):
            key = core.attempt_of(record, self.install)
            if key is None or record.get("JobState") not in core.ACTIVE or key[0] in agent.running:
                continue
            job = agent.core.jobs.get(key[0])
            if job is not None and job.attempt == key[1] and job.state in HOLDS_RESOURCES:
                continue
            log.warning("Slurm job %s (%s attempt %d) runs for an attempt that has ended in Horizon: cancelled",
                        slurm_id, key[0], key[1])
            try:
                await self.slurm.run("scancel", slurm_id)
            except SlurmError as exc:
                log.warning("%s", exc)

    async def _register(self, spec: NodeSpec) -> None:
        assert self.agent is not None
        use = spec.foreign or c.ForeignUse()
        log.info("%s registered: %s CPUs, %s MiB, %d GPUs; Slurm's own jobs %s hold %s CPUs, %s MiB, GPUs %s",
                 spec.name, spec.cpus_milli // 1000, spec.memory_bytes // core.MIB, len(spec.gpus),
                 ",".join(use.jobs) or "(none)", use.cpus_milli // 1000, use.memory_bytes // core.MIB,
                 ",".join(use.devices) or "-")
        await self.book.register(spec, self.agent.name)
