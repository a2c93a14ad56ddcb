"""What a backend that offers another system's nodes (Slurm's, Kubernetes') keeps of them in the log.

Both backends run the node agent over nodes their own system owns, and follow that system: a node
whose offer changed (its system's own work took or gave back capacity, a label or taint changed) is
registered again; a node its system took out of service is drained by an operator command in this
backend's name, and uncordoned once its system gives it back; a node gone from the system is drained.
``NodeBook`` is that bookkeeping, written once: what each node last registered (``logged``), the
drains this backend issued that no uncordon has undone (``drained``), both read back from the log at
start so that a restarted backend neither repeats nor forgets them.

Also here: the installation id a backend marks its work with (two Horizons over one system see each
other's work as foreign, busy capacity) and the devices the agent's jobs hold on a node.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.domain.envelope import decision_id
from services.domain.jobs import HOLDS_RESOURCES
from services.domain.protocol import Record
from services.nodes.spec import NodeSpec
from services.runtime.follow import each, read_through
from services.runtime.log import EventLog

__all__ = ["NodeBook", "installation", "held_devices", "offer", "as_spec"]

log = logging.getLogger("horizon.backends")


def installation(state_dir: Path, kind: str) -> str:
    """This installation's id (``<state dir>/<kind>-installation``, made once: 8 hex digits)."""
    path = Path(state_dir) / f"{kind}-installation"
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


def held_devices(agent: Any, node: str) -> set[str]:
    """The devices the agent's jobs that hold resources have on ``node`` (none without an agent)."""
    held: set[str] = set()
    for job in (agent.core.jobs.jobs.values() if agent is not None else ()):
        if job.state in HOLDS_RESOURCES:
            for alloc in job.allocations:
                if alloc.node == node:
                    held.update(alloc.device_ids)
    return held


def offer(spec: NodeSpec) -> tuple[Any, ...]:
    """What a registration offers placement: a change of it is registered again."""
    return spec.cpus_milli, spec.memory_bytes, tuple(spec.gpus), dict(spec.labels), tuple(spec.taints), spec.foreign


def as_spec(reg: c.NodeRegistered) -> NodeSpec:
    return NodeSpec(reg.node, reg.cpus_milli, reg.memory_bytes, tuple(reg.gpus), dict(reg.labels),
                    tuple(reg.taints), foreign=reg.foreign)


class NodeBook:
    """``by``'s registrations and drains of its system's nodes. ``user`` signs its commands;
    ``resumed`` words an uncordon (``"Slurm resumed it ({})"``, the drain's reason in the braces)."""

    def __init__(self, log_: EventLog, admin_log: EventLog, *, by: str, user: str, resumed: str) -> None:
        self.log = log_
        self.admin_log = admin_log  # its drains are an operator's input
        self.by = by
        self.user = user
        self.resumed = resumed
        self.drained: dict[str, str] = {}  # node -> the reason of the drain this backend issued
        self.logged: dict[str, c.NodeRegistered] = {}  # node -> its latest registration in the log

    async def read(self) -> None:
        """Its state across restarts: the drains it issued that no uncordon has undone, and each node's
        latest registration."""
        def apply(_record: Record, event: Event) -> None:
            if isinstance(event, c.NodeRegistered):
                self.logged[event.node] = event
            if not isinstance(event, c.NodeCommandIssued):
                return
            if event.action == "drain" and event.user == self.user:
                self.drained[event.node] = event.reason
            elif event.action in ("uncordon", "remove"):
                self.drained.pop(event.node, None)

        await read_through(self.log, each(apply), subjects=(admin_subject("node"), "horizon.evt.agent.NodeRegistered.>"))

    def differs_from_logged(self, spec: NodeSpec) -> bool:
        """Whether the log's last registration of the node offers something else (a registration equal to
        an older one would be dropped as its duplicate: say it again)."""
        logged = self.logged.get(spec.name)
        return logged is not None and offer(spec) != offer(as_spec(logged))

    async def register(self, spec: NodeSpec, agent: str) -> None:
        """Register the node's changed offer. Its id is the registration's (a digest of the body) and
        the time the change was seen: a node back to an earlier shape is no duplicate of that earlier
        registration; a retry of this one is."""
        now = time.time()
        reg = msgspec.structs.replace(spec.registration(agent, int(now * 1000)), ts=now)
        for _ in range(3):
            try:
                await self.log.publish(event_subject("agent", reg), encode(reg), msg_id=reg.id)
                self.logged[spec.name] = reg
                return
            except Exception as exc:  # noqa: BLE001 - the log is unavailable: a moment, then again
                log.warning("could not register %s: %s", spec.name, exc)
                await asyncio.sleep(0.5)

    async def follow(self, node: str, reason: str | None) -> None:
        """Drain ``node`` when its system took it out of service (``reason``), uncordon it once it gives
        it back; only drains this backend issued are undone."""
        if reason is not None and node not in self.drained:
            if await self._command(node, "drain", reason):
                self.drained[node] = reason
        elif reason is None and node in self.drained:
            if await self._command(node, "uncordon", self.drained[node]):
                del self.drained[node]

    async def gone(self, nodes: Iterable[str], reason: str) -> None:
        """Drain the nodes no longer in the system (those not drained already)."""
        for node in sorted(set(nodes) - set(self.drained)):
            if await self._command(node, "drain", reason):
                self.drained[node] = reason

    async def _command(self, node: str, action: str, reason: str) -> bool:
        digest = hashlib.sha1(reason.encode()).hexdigest()[:12]
        msg_id = decision_id(self.by, c.NodeCommandIssued, node, action, digest)
        event = c.NodeCommandIssued(id=msg_id, ts=time.time(), source=self.by, correlation_id=node, node=node,
                                    action=action, user=self.user,
                                    reason=reason if action == "drain" else self.resumed.format(reason))
        try:
            await self.admin_log.publish(admin_subject("node"), encode(event), msg_id=msg_id)
        except Exception as exc:  # noqa: BLE001 - the next sync tries again
            log.warning("could not %s %s: %s", action, node, exc)
            return False
        log.info("%s: %s (%s)", node, action, reason)
        return True
