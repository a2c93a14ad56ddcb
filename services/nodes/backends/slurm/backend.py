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
import contextlib
import dataclasses
import hashlib
import logging
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.nodes.agent.app import NodeAgent
from services.nodes.spec import NodeSpec
from services.nodes.backends.slurm import core
from services.nodes.backends.slurm.executor import Slurm, SlurmError, SlurmExecutor, SlurmWatch
from services.domain.envelope import decision_id
from services.domain.jobs import HOLDS_RESOURCES, JobState
from services.domain.protocol import Record
from services.runtime.follow import each, read_through
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
    """This installation's id (``<state dir>/slurm-installation``, made once: 8 hex digits), which its
    Slurm jobs' comments carry: two Horizons over one Slurm cluster never take each other's jobs for
    their own (each sees the other's as Slurm's own, busy capacity)."""
    path = Path(state_dir) / "slurm-installation"
    try:
        known = path.read_text().strip()
    except OSError:
        known = ""
    if known:
        return known
    path.parent.mkdir(parents=True, exist_ok=True)
    made = secrets.token_hex(4)
    path.write_text(made + "\n")
    return made


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
        self.drained: dict[str, str] = {}  # node -> the reason of the drain this backend issued
        self.logged: dict[str, c.NodeRegistered] = {}  # node -> its latest registration in the log
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ Slurm's nodes

    async def read_nodes(self) -> dict[str, dict[str, str]]:
        """The partition's nodes, by name (``scontrol show node -o``)."""
        records = core.parse_records(await self.slurm.run("scontrol", "show", "node", "-o"))
        part = self.settings.partition
        return {r["NodeName"]: r for r in records if "NodeName" in r
                and (not part or part in (r.get("Partitions") or "").split(","))}

    def _held_devices(self, node: str) -> set[str]:
        held: set[str] = set()
        if self.agent is None:
            return held
        for job in self.agent.core.jobs.jobs.values():
            if job.state in HOLDS_RESOURCES:
                for alloc in job.allocations:
                    if alloc.node == node:
                        held.update(alloc.device_ids)
        return held

    def specs(self, nodes: dict[str, dict[str, str]]) -> list[NodeSpec]:
        foreign = core.foreign_use(self.watch.jobs.values(), self.install)
        return [core.node_spec(record, self.settings.partition, foreign.get(name), self._held_devices(name))
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
        await self._read_log()
        self.watch.start()
        await agent.start()
        for spec in specs:  # a registration equal to an old one is dropped as its duplicate: say it again
            logged = self.logged.get(spec.name)
            if logged is not None and _offer(spec) != _offer(_as_spec(logged)):
                await self._register(agent.nodes[spec.name])
        await self._sync(nodes)
        self._task = asyncio.create_task(self._loop(), name="slurm-nodes")
        self.ready.set()
        log.info("Slurm backend: %d nodes of partition %s", len(specs), self.settings.partition or "(all)")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
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
            if _offer(spec) != _offer(known):
                agent.nodes[spec.name] = spec
                await self._register(spec)
            reason = core.node_drained(nodes[spec.name])
            if reason is not None and spec.name not in self.drained:
                if await self._command(spec.name, "drain", reason):
                    self.drained[spec.name] = reason
            elif reason is None and spec.name in self.drained:
                if await self._command(spec.name, "uncordon", self.drained[spec.name]):
                    del self.drained[spec.name]
        part = self.settings.partition or "any partition"
        for name in sorted(set(agent.nodes) - set(nodes) - set(self.drained)):  # gone from Slurm's partition
            reason = f"Slurm: the node is no longer in {part}"
            if await self._command(name, "drain", reason):
                self.drained[name] = reason

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
        """Register the node's changed capacity. Its id is the registration's (a digest of the body)
        and the time the change was seen: a node back to a shape it had before (Slurm's own job
        ended) must not be taken for a duplicate of that earlier registration; a retry of this one is."""
        assert self.agent is not None
        now = time.time()
        reg = msgspec.structs.replace(spec.registration(self.agent.name, int(now * 1000)), ts=now)
        use = spec.foreign or c.ForeignUse()
        log.info("%s registered: %s CPUs, %s MiB, %d GPUs; Slurm's own jobs %s hold %s CPUs, %s MiB, GPUs %s",
                 spec.name, spec.cpus_milli // 1000, spec.memory_bytes // core.MIB, len(spec.gpus),
                 ",".join(use.jobs) or "(none)", use.cpus_milli // 1000, use.memory_bytes // core.MIB,
                 ",".join(use.devices) or "-")
        for _ in range(3):
            try:
                await self.log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
                self.logged[spec.name] = reg
                return
            except Exception as exc:  # noqa: BLE001 - the log is unavailable: a moment, then again
                log.warning("could not register %s: %s", spec.name, exc)
                await asyncio.sleep(0.5)

    async def _command(self, node: str, action: str, reason: str) -> bool:
        digest = hashlib.sha1(reason.encode()).hexdigest()[:12]
        msg_id = decision_id("slurm", c.NodeCommandIssued, node, action, digest)
        event = c.NodeCommandIssued(id=msg_id, ts=time.time(), source="slurm", correlation_id=node, node=node,
                                    action=action, reason=reason if action == "drain" else f"Slurm resumed it ({reason})",
                                    user=SLURM_USER)
        try:
            await self.admin_log.publish(admin_subject("node"), encode(event), msg_id=msg_id)
        except Exception as exc:  # noqa: BLE001 - the next sync tries again
            log.warning("could not %s %s: %s", action, node, exc)
            return False
        log.info("%s: %s (%s)", node, action, reason)
        return True

    async def _read_log(self) -> None:
        """Its state across restarts: the drains this backend issued that no uncordon has undone, and
        each node's latest registration."""
        def apply(_record: Record, event: Event) -> None:
            if isinstance(event, c.NodeRegistered):
                self.logged[event.node] = event
            if not isinstance(event, c.NodeCommandIssued):
                return
            if event.action == "drain" and event.user == SLURM_USER:
                self.drained[event.node] = event.reason
            elif event.action in ("uncordon", "remove"):
                self.drained.pop(event.node, None)

        await read_through(self.log, each(apply), subjects=(admin_subject("node"), "horizon.evt.agent.NodeRegistered.>"))


def _offer(spec: NodeSpec) -> tuple[Any, ...]:
    """What a registration offers placement: a change of it is registered again."""
    return spec.cpus_milli, spec.memory_bytes, tuple(spec.gpus), dict(spec.labels), spec.foreign


def _as_spec(reg: c.NodeRegistered) -> NodeSpec:
    return NodeSpec(reg.node, reg.cpus_milli, reg.memory_bytes, tuple(reg.gpus), dict(reg.labels),
                    foreign=reg.foreign)
