"""The Kubernetes backend: Horizon decides, a Kubernetes cluster runs (docs/backends.md, Kubernetes).

``KubernetesBackend`` is the node agent (``services/nodes/agent/app.py``, its contract unchanged) over
a cluster's nodes: they are the API server's Nodes (mapped by ``core.node_spec``,
``NodeRegistered.backend`` "kubernetes"), and its executor makes each attempt a Pod per node of its
allocation, bound by Horizon (``schedulerName: horizon``, a ``Binding``) and followed to its end
(``executor.KubernetesExecutor``). It keeps one ``kubeapi.Mirror`` (list, then watch) of the Nodes
and one of the pods of every namespace, and on each change, at most every ``sync_interval_s``:

* re-registers a node whose offer changed: what pods Horizon did not place request there
  (``core.foreign_use``: another scheduler's, static pods, another Horizon's) is its ``foreign`` use,
  which placement counts as used (its totals stay), gone when they end; a node's new labels or taints;
* drains in Horizon a node the cluster keeps pods off (a cordon: ``spec.unschedulable``; not Ready),
  as a ``NodeCommandIssued`` drain from user ``kubernetes`` with the reason, and uncordons it when the
  cluster takes it back; only its own drains are undone (read back from the log at start-up);
* deletes a pod Horizon created whose attempt no longer holds resources in the log (it ended while no
  backend watched): left running, it would hold capacity Horizon counts free;
* submits the pods Kubernetes users gave Horizon (``schedulerName: horizon``) as jobs and writes
  Horizon's why onto those that wait (``intake.PodIntake``; ``admission.py``);
* renews its ``Lease`` (``coordination.k8s.io/v1``, ``horizon-<installation>`` in the namespace): who
  runs this backend and since when, for ``kubectl get lease``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from events import catalogue as c
from services.domain.jobs import HOLDS_RESOURCES, JobState
from services.nodes.agent.app import NodeAgent
from services.nodes.backends.kubernetes import core
from services.nodes.backends.kubernetes.executor import KubernetesExecutor
from services.nodes.backends.kubernetes.intake import PodIntake
from services.nodes.backends import node_book
from services.nodes.backends.node_book import NodeBook, held_devices, offer
from services.nodes.spec import NodeSpec
from services.runtime.kubeapi import (KubeAPI, KubeConflict, KubeError, KubeNotFound, Mirror, in_cluster,
                                      load_kubeconfig, nodes_path, pod_path, pods_path)
from services.runtime.cancel import cancel_and_wait
from services.runtime.log import EventLog

__all__ = ["KubernetesSettings", "KubernetesBackend", "KubernetesUnavailable", "KUBERNETES_USER", "DEFAULT_IMAGE",
           "reachable", "installation"]

log = logging.getLogger("horizon.kubernetes")

KUBERNETES_USER = "kubernetes"  # the user of the drain and uncordon commands the backend issues
# at least how often the nodes are compared and the users' waiting pods get Horizon's why (intake.py),
# with no change of a pod to wake it
WHY_EVERY_S = 3.0
DEFAULT_IMAGE = "busybox:1.35"  # a job that names no --image runs in it (the test cluster has it)


class KubernetesUnavailable(RuntimeError):
    """The backend cannot start: the API server does not answer, refuses us, or has no nodes."""


@dataclass(frozen=True)
class KubernetesSettings:
    kubeconfig: str = ""  # the kubeconfig file ("": the pod's service account, in the cluster)
    context: str | None = None  # its context (None: its current-context)
    namespace: str = ""  # where Horizon's pods go ("": the context's namespace)
    image: str = DEFAULT_IMAGE  # the image of a job that names none
    sync_interval_s: float = 1.0  # at most how often the nodes are compared with Horizon's
    lease_s: int = 30  # the Lease's duration; renewed every third of it
    install: str = ""  # this installation's id in its pods' labels ("": kept in the data dir, made once)


def installation(state_dir: Path) -> str:
    """This installation's id (``<state dir>/kubernetes-installation``), in its pods'
    ``horizon.io/installation`` label: two Horizons over one cluster see each other's pods as foreign,
    busy capacity."""
    return node_book.installation(state_dir, "kubernetes")


def _api(settings: KubernetesSettings) -> KubeAPI:
    try:
        config = load_kubeconfig(settings.kubeconfig, settings.context) if settings.kubeconfig else in_cluster()
    except (OSError, ValueError) as exc:
        raise KubernetesUnavailable(str(exc)) from exc
    if settings.namespace:
        config = dataclasses.replace(config, namespace=settings.namespace)
    return KubeAPI(config)


def reachable(settings: KubernetesSettings) -> int:
    """How many nodes the cluster has, as its API server answers now; ``KubernetesUnavailable`` if it does
    not answer or has none (``horizon up --backend kubernetes`` asks before it starts anything)."""
    api = _api(settings)

    async def count() -> int:
        try:
            await api.get(f"/api/v1/namespaces/{api.namespace}")
            return len((await api.list(nodes_path())).get("items") or [])
        except KubeNotFound as exc:
            raise KubernetesUnavailable(f"the namespace {api.namespace!r} does not exist") from exc
        except KubeError as exc:
            raise KubernetesUnavailable(f"cannot reach Kubernetes at {api.config.server} ({exc}); "
                                        "check --kubeconfig") from exc
    found = asyncio.run(count())
    if not found:
        raise KubernetesUnavailable(f"the cluster at {api.config.server} has no nodes")
    return found


class KubernetesBackend:
    """The node agent over a Kubernetes cluster (see the module doc)."""

    def __init__(self, log_: EventLog, settings: KubernetesSettings, state_dir: Path, *, nc: Any = None,
                 heartbeat_interval_s: float = 1.0, grace_period_s: float = 10.0,
                 admin_log: EventLog | None = None) -> None:
        self.log = log_
        self.admin_log = admin_log or log_  # its drains are an operator's input
        self.settings = settings
        self.state_dir = Path(state_dir).absolute()
        self.nc = nc
        self.heartbeat_interval_s = heartbeat_interval_s
        self.grace_period_s = grace_period_s
        self.install = settings.install or installation(self.state_dir)
        self.api = _api(settings)
        self.namespace = self.api.namespace
        self._dirty = asyncio.Event()
        self.nodes = Mirror(self.api, nodes_path(), on_change=lambda kind, obj: self._dirty.set())
        self.pods = Mirror(self.api, pods_path(None), on_change=lambda kind, obj: self._dirty.set())
        self.executor: KubernetesExecutor | None = None
        self.agent: NodeAgent | None = None
        self.intake: PodIntake | None = None  # the users' pods with schedulerName horizon (intake.py)
        self.book = NodeBook(log_, self.admin_log, by="kubernetes", user=KUBERNETES_USER,
                             resumed="Kubernetes took it back ({})")
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lease_renewed = 0.0
        self._acquired = ""

    # ------------------------------------------------------------------ the cluster's nodes

    def specs(self) -> list[NodeSpec]:
        foreign = core.foreign_use(self.pods.items.values(), self.install)
        return [core.node_spec(node, foreign.get(name), held_devices(self.agent, name))
                for name, node in sorted(self.nodes.items.items())]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # 1. the cluster as it is: its nodes and every pod (a list, then a watch of each)
        try:
            await self.api.get(f"/api/v1/namespaces/{self.namespace}")
            self.nodes.start()
            self.pods.start()
            await asyncio.wait_for(asyncio.gather(self.nodes.synced.wait(), self.pods.synced.wait()),
                                   self.api.timeout_s)
        except (KubeError, asyncio.TimeoutError) as exc:
            await self._stop_mirrors()
            why = self.nodes.error or self.pods.error or str(exc) or "no answer"
            raise KubernetesUnavailable(f"cannot reach Kubernetes at {self.api.config.server} ({why})") from exc
        if not self.nodes.items:
            await self._stop_mirrors()
            raise KubernetesUnavailable(f"the cluster at {self.api.config.server} has no nodes")
        # 2. the node agent over its nodes, with the executor of pods
        specs = self.specs()
        executor = KubernetesExecutor(self.api, self.pods, self.namespace, self.install, self.settings.image,
                                      self.grace_period_s, {s.name: s for s in specs})
        agent = NodeAgent(self.log, specs, executor, nc=self.nc, name="kubernetes",
                          heartbeat_interval_s=self.heartbeat_interval_s, grace_period_s=self.grace_period_s)
        self.executor, self.agent = executor, agent

        def wanted(job_id: str, attempt: int) -> bool:
            job = agent.core.jobs.get(job_id)
            return (job is not None and job.attempt == attempt and job.state is JobState.SCHEDULED
                    and job_id not in agent.core.stop_requests and job_id not in agent.core.preemptions)

        executor.wanted = wanted
        self.intake = PodIntake(self.api, self.log, self.pods, self.install, lambda: agent.core.jobs, self.nc)
        # 3. its own drains and the nodes' registrations, from the log; then the agent catches up, adopts
        await self.book.read()
        await agent.start()
        for spec in specs:  # a registration equal to an old one is dropped as its duplicate: say it again
            if self.book.differs_from_logged(spec):
                await self._register(agent.nodes[spec.name])
        # 4. keep Horizon's nodes as the cluster's
        await self._sync()
        self._task = asyncio.create_task(self._loop(), name="kubernetes-nodes")
        self.ready.set()
        log.info("Kubernetes backend: %d nodes of %s, pods in namespace %s", len(specs), self.api.config.server,
                 self.namespace)

    async def _stop_mirrors(self) -> None:
        await self.nodes.stop()
        await self.pods.stop()

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self.agent is not None:
            await self.agent.stop()
        await self._stop_mirrors()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), WHY_EVERY_S)
            self._dirty.clear()
            try:
                await self._sync()
            except Exception:  # noqa: BLE001 - the next change tries again; the watch must not die
                log.exception("the Kubernetes node sync failed")
            await asyncio.sleep(self.settings.sync_interval_s)

    # ------------------------------------------------------------------ keeping Horizon's nodes as the cluster's

    async def _sync(self) -> None:
        agent = self.agent
        assert agent is not None
        await self._reap()
        if self.intake is not None:
            await self.intake.sync()
        await self._renew_lease()
        for spec in self.specs():
            known = agent.nodes.get(spec.name)
            if known is None:
                continue  # a node that joined the cluster is offered after a restart of the backend
            if offer(spec) != offer(known):
                agent.nodes[spec.name] = spec
                await self._register(spec)
            await self.book.follow(spec.name, core.node_drained(self.nodes.items[spec.name]))
        await self.book.gone(set(agent.nodes) - set(self.nodes.items), "Kubernetes: the node is no longer in the cluster")

    async def _reap(self) -> None:
        """Delete the pods Horizon created whose attempt no longer holds resources in the log."""
        agent = self.agent
        assert agent is not None
        for key, pod in sorted(self.pods.items.items()):
            found = core.attempt_of(pod, self.install)
            if found is None or core.ended(pod) or found[0] in agent.running:
                continue
            job = agent.core.jobs.get(found[0])
            if job is not None and job.attempt == found[1] and job.state in HOLDS_RESOURCES:
                continue
            namespace, _, name = key.partition("/")
            log.warning("pod %s (%s attempt %d) runs for an attempt that has ended in Horizon: deleted", key, *found)
            with contextlib.suppress(KubeNotFound):
                try:
                    await self.api.delete(pod_path(namespace, name), 0)
                except KubeError as exc:
                    log.warning("cannot delete pod %s: %s", key, exc)

    async def _renew_lease(self) -> None:
        """This instance's Lease, renewed every third of its duration."""
        now = time.monotonic()
        if now - self._lease_renewed < self.settings.lease_s / 3:
            return
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self._acquired = self._acquired or stamp
        name = f"horizon-{self.install}"
        spec = {"holderIdentity": f"{socket.gethostname()}/{os.getpid()}", "leaseDurationSeconds": self.settings.lease_s,
                "acquireTime": self._acquired, "renewTime": stamp}
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        try:
            try:
                await self.api.patch(f"{path}/{name}", {"spec": spec})
            except KubeNotFound:
                await self.api.create(path, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                             "metadata": {"name": name, "labels": {core.LABEL_INSTALL: self.install}},
                                             "spec": spec})
            self._lease_renewed = now
        except (KubeConflict, KubeError) as exc:
            log.warning("cannot renew the Lease %s: %s", name, exc)

    async def _register(self, spec: NodeSpec) -> None:
        assert self.agent is not None
        use = spec.foreign or c.ForeignUse()
        log.info("%s registered: %g CPUs, %d MiB, %d GPUs; pods Horizon did not place (%s) hold %g CPUs, %d MiB",
                 spec.name, spec.cpus_milli / 1000, spec.memory_bytes >> 20, len(spec.gpus),
                 ",".join(use.jobs) or "none", use.cpus_milli / 1000, use.memory_bytes >> 20)
        await self.book.register(spec, self.agent.name)
