"""The Kubernetes backend's executor: each attempt a Pod per node of its allocation, bound by Horizon
and followed to its end.

It is an ``Executor`` (``services/nodes/backends/protocol.py``), so the node agent's adapter
(``services/nodes/agent/app.py``) carries out the log's placements, cancels and preemptions over
Kubernetes exactly as over processes or Slurm, and reports each start and end once with the same
deterministic ids.

* ``start``: for each node of the allocation, the Pod (``core.pod_manifest``; its name is the
  attempt's, so a second create is refused by the server and the existing pod followed), then its
  ``Binding`` to the node placement chose. The server binds a pod once (a second binding is a
  conflict), so a backend that restarts between create and report binds nothing twice. A gang is all
  or none: if one of its pods cannot be created or bound, all are deleted and the start fails. It
  returns when every pod runs (``JobStarted`` then follows) or one has ended or cannot start; one no
  longer wanted meanwhile is deleted.
* ``wait``: until every pod has ended (one ``kubeapi.Mirror`` of the pods watches them all), as an
  ``Outcome`` (``core.outcome``: phase, ``terminated`` exit code, ``OOMKilled``; a gang's first
  failure). A pod deleted by someone else before it ended is lost.
* ``stop``: deletion with the grace period (the kubelet sends SIGTERM, then SIGKILL when it is over).
* ``checkpoint``: Kubernetes 1.20 has no call to signal a container; its SIGTERM comes with deletion.
  So a job whose checkpoint signal is SIGTERM (or none other) is deleted with the checkpoint's time as
  its grace, and its reference is what it wrote to ``$HORIZON_CHECKPOINT_FILE``
  (``/dev/termination-log``: the kubelet copies it into the ended container's status). Another signal
  cannot be sent: the stop's SIGTERM is the job's only warning (docs/backends.md).
* ``adopt``: the attempt's pods, found by their labels and annotations, for a backend that restarted.
* ``read_output``: ``horizon logs`` (the agent's ``horizon.logs.<node>``): the attempt's pod's container
  log, through the API server (``output.py``).

Ended pods are left in the namespace (their logs and exit codes stay for ``kubectl``); a pod of an
attempt that no longer holds resources in the log is deleted by the backend (``backend.py``).
"""

from __future__ import annotations

import asyncio
import calendar
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from events import catalogue as c
from services.nodes.backends.kubernetes import admission, core
from services.nodes.backends.kubernetes.output import PodOutput
from services.nodes.backends.protocol import Files, Outcome
from services.nodes.job_environment import job_environment
from services.runtime.kubeapi import KubeAPI, KubeConflict, KubeError, KubeNotFound, Mirror, pod_path, pods_path

__all__ = ["KubernetesExecutor", "KubernetesExecution"]

log = logging.getLogger("horizon.kubernetes")

DELETE_WAIT_S = 60.0  # after a deletion, how long to wait for the kubelet to end the pod (past its grace)


def _parse_time(text: str | None) -> float | None:
    """The API's ``2026-11-28T21:17:04Z`` as a Unix time. UTC as written: ``mktime`` minus the zone's offset
    was an hour early under summer time, so a pod adopted after a restart had run an hour longer."""
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


class KubernetesExecution:
    """One attempt as its pods (see the module doc)."""

    pid: int | None = None

    def __init__(self, executor: KubernetesExecutor, keys: Sequence[str]) -> None:
        self.executor = executor
        self.keys = tuple(keys)  # "namespace/name" of each pod
        self.names = tuple(k.partition("/")[2] for k in self.keys)
        self.files = Files()
        self.started_wall: float | None = None
        self._checkpoint: str | None = None

    def pods(self) -> list[Mapping[str, Any] | None]:
        return [self.executor.mirror.items.get(key) for key in self.keys]

    def _all_ended(self) -> bool:
        return all(core.ended(p) or core.never_ran(p) is not None for p in self.pods())

    def _started(self) -> None:
        times = []
        for pod in self.pods():
            for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
                state = status.get("state") or {}
                started = (state.get("running") or state.get("terminated") or {}).get("startedAt")
                if _parse_time(started) is not None:
                    times.append(_parse_time(started))
        self.started_wall = min(times) if times else time.time()  # type: ignore[type-var]

    def _outcome(self) -> Outcome:
        return core.merged_outcome([core.outcome(p) for p in self.pods()])

    async def wait(self) -> Outcome:
        await self.executor.mirror.until(self._all_ended)
        return self._outcome()

    async def _delete(self, grace_period_s: float) -> None:
        for key, pod in zip(self.keys, self.pods()):
            if pod is None or (core.ended(pod) and core.never_ran(pod) is None):
                continue
            uid = ((pod.get("metadata") or {}).get("uid"))
            namespace, _, name = key.partition("/")
            try:
                await self.executor.api.delete(pod_path(namespace, name), int(grace_period_s), uid)
            except KubeNotFound:
                pass
            except KubeError as exc:
                log.warning("cannot delete pod %s: %s", name, exc)

    async def stop(self, grace_period_s: float) -> Outcome:
        """Delete the pods with the grace period (SIGTERM, then the kubelet's SIGKILL) and wait for their end."""
        if not self._all_ended():
            await self._delete(grace_period_s)
            await self.executor.mirror.until(self._all_ended, grace_period_s + DELETE_WAIT_S)
        return self._outcome()

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        """SIGTERM by deletion with ``timeout_s`` as its grace; the reference the job wrote by then."""
        if signal_name.removeprefix("SIG") not in ("TERM", ""):
            log.info("pods %s: Kubernetes cannot send SIG%s; the stop's SIGTERM warns the job", ",".join(self.names),
                     signal_name.removeprefix("SIG"))
            return None
        await self._delete(timeout_s)
        await self.executor.mirror.until(self._all_ended, timeout_s + DELETE_WAIT_S)
        return self.checkpoint_ref()

    def checkpoint_ref(self) -> str | None:
        for pod in self.pods():
            ref = core.checkpoint_message(pod)
            if ref is not None:
                self._checkpoint = ref
        return self._checkpoint


class KubernetesExecutor:
    """Attempts as pods in ``namespace`` (see the module doc). ``image``: the image of a job that names
    none. ``wanted(job, attempt)``: whether the attempt is still to run (the backend asks its agent's
    view of the log): one cancelled while its pods wait to start is deleted, not waited for."""

    detached = True  # pods outlive the backend: a restarted one adopts them
    state_dir: Path | None = None  # the pods' output is the container's log (read_output), not files here

    def __init__(self, api: KubeAPI, mirror: Mirror, namespace: str, install: str, image: str,
                 grace_period_s: float = 10.0, nodes: Mapping[str, Any] | None = None) -> None:
        self.api = api
        self.mirror = mirror  # the pods of every namespace
        self.namespace = namespace
        self.install = install
        self.image = image
        self.grace_period_s = grace_period_s
        self.nodes = dict(nodes or {})  # node -> NodeSpec (its GPUs, for the job's environment)
        self.wanted: Callable[[str, int], bool] = lambda job_id, attempt: True
        self.bindings = 0  # how many Bindings this executor has posted (the tests count them)
        self.output = PodOutput(api, mirror, install)  # `horizon logs`: the pods' container logs (output.py)

    def isolation(self) -> str:
        return core.ISOLATION

    async def read_output(self, node: str, request: dict[str, Any], tenant: str | None) -> dict[str, Any]:
        """``horizon logs``: the attempt's pod's container log (``ServesOutput``, ``output.py``)."""
        return await self.output.read(node, request, tenant)

    def processes_here(self) -> None:
        return None  # its jobs run in the cluster's pods

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.mirror.items.get(f"{self.namespace}/{name}")

    def _devices(self, node: str) -> dict[str, c.GpuDevice]:
        spec = self.nodes.get(node)
        return {gpu.id: gpu for gpu in spec.gpus} if spec is not None else {}

    def _manifest(self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, index: int,
                  checkpoint_ref: str | None, held: Sequence[c.NodeAllocation]) -> dict[str, Any]:
        env = {k: v for k, v in job_environment(job_id, attempt, spec, alloc, checkpoint_ref,
                                                self._devices(alloc.node), held).items()
               # the device plugin sets CUDA_VISIBLE_DEVICES; the container's own paths are not the node's
               if k.startswith(("HORIZON_", "SLURM_")) or k in spec.env}
        env["HORIZON_CHECKPOINT_FILE"] = core.CHECKPOINT_FILE
        # Each pod of a gang runs the command (there is no srun to start the others): it is node ``index``
        # of the job, and its first task's rank is the tasks of the nodes before it.
        env["SLURM_NODEID"] = str(index)
        env["SLURM_PROCID"] = str(sum(max(1, a.tasks) for a in held[:index]))
        return core.pod_manifest(self.install, job_id, attempt, spec, alloc, env, self.image, self.namespace,
                                 self.grace_period_s, index)

    async def _create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the pod, or the existing one of the same name (created before a restart)."""
        name = manifest["metadata"]["name"]
        try:
            return await self.api.create(pods_path(self.namespace), manifest)
        except KubeConflict:
            log.info("pod %s exists (created before a restart): followed", name)
            return await self.api.get(pod_path(self.namespace, name))

    async def _bind(self, pod: Mapping[str, Any], node: str) -> None:
        """Bind the pod to ``node`` unless it is bound already: the server refuses a second binding."""
        meta, bound = pod.get("metadata") or {}, (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound != node:
                raise RuntimeError(f"pod {meta.get('name')} is bound to {bound}, not {node}")
            return
        namespace = str(meta.get("namespace") or self.namespace)
        try:
            await self.api.bind(namespace, meta["name"], node, meta.get("uid"))
            self.bindings += 1
        except KubeConflict as exc:
            current = await self.api.get(pod_path(namespace, meta["name"]))
            if (current.get("spec") or {}).get("nodeName") != node:
                raise RuntimeError(f"pod {meta['name']} cannot be bound to {node}: {exc}") from exc

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
        allocations: Sequence[c.NodeAllocation] = (),
    ) -> KubernetesExecution:
        held = list(allocations) or [alloc]
        users = admission.pods_of_payload(spec.payload)
        if users is not None:  # a Kubernetes user's own pods: bound where Horizon placed the job
            return await self._until_running(job_id, attempt, await self._bind_users(job_id, attempt, users, held))
        if not spec.command and not (spec.image or self.image):
            raise ValueError("the job has no command to run")
        manifests = [self._manifest(job_id, attempt, spec, a, i, checkpoint_ref, held) for i, a in enumerate(held)]
        execution = KubernetesExecution(self, [f"{self.namespace}/{m['metadata']['name']}" for m in manifests])
        try:  # all or none: every pod created, then every one bound
            pods = [await self._create(m) for m in manifests]
            for pod, share in zip(pods, held):
                await self._bind(pod, share.node)
        except (KubeError, RuntimeError) as exc:
            await execution._delete(0)
            raise RuntimeError(f"the pods could not be created and bound: {exc}") from exc
        log.info("%s attempt %d: pods %s bound to %s", job_id, attempt, ",".join(execution.names),
                 ",".join(a.node for a in held))
        return await self._until_running(job_id, attempt, execution)

    async def _bind_users(self, job_id: str, attempt: int, users: tuple[str, list[tuple[str, str]]],
                          held: Sequence[c.NodeAllocation]) -> KubernetesExecution:
        """Bind a user's pods (``admission.py``), one to each node of the allocation, all or none. Each is
        first marked as this installation's (its label, the job and attempt: ``attempt_of`` finds it after
        a restart, and it is no longer counted as another's use of its node), then bound. A pod that is
        gone, or is another incarnation of its name (its UID), fails the start: the job ends, and the pod's
        controller creates the next one, which is a new job."""
        namespace, pods = users
        if len(pods) != len(held):
            raise RuntimeError(f"the job has {len(pods)} pods and {len(held)} nodes")
        execution = KubernetesExecution(self, [f"{namespace}/{name}" for name, _ in pods])
        marks = {"metadata": {"labels": {core.LABEL_INSTALL: self.install},
                              "annotations": {core.ANNOTATION_JOB: job_id, core.ANNOTATION_ATTEMPT: str(attempt)}}}
        try:
            for (name, uid), share in zip(pods, held):
                pod = await self.api.get(pod_path(namespace, name))
                if str((pod.get("metadata") or {}).get("uid")) != uid:
                    raise RuntimeError(f"pod {namespace}/{name} was deleted (another pod has its name now)")
                if not (pod.get("spec") or {}).get("nodeName"):
                    pod = await self.api.patch(pod_path(namespace, name), marks)
                await self._bind(pod, share.node)
        except KubeNotFound as exc:
            raise RuntimeError(f"a pod of the job was deleted before Horizon bound it: {exc}") from exc
        except (KubeError, RuntimeError) as exc:
            raise RuntimeError(f"the pods could not be bound: {exc}") from exc
        log.info("%s attempt %d: the user's pods %s bound to %s", job_id, attempt, ",".join(execution.keys),
                 ",".join(a.node for a in held))
        return execution

    async def _until_running(self, job_id: str, attempt: int, execution: KubernetesExecution) -> KubernetesExecution:
        """Return once every pod runs (or one has ended or cannot start); one no longer wanted is deleted."""
        def ready() -> bool:
            pods = execution.pods()
            return all(core.running(p) for p in pods) or any(core.never_ran(p) or core.ended(p) for p in pods)

        while not await self.mirror.until(ready, 1.0):
            if not self.wanted(job_id, attempt):
                await execution._delete(0)
                await self.mirror.until(execution._all_ended, DELETE_WAIT_S)
                break
        execution._started()
        return execution

    def adopt(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> KubernetesExecution | None:
        found = sorted(f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
                       for p in core.pods_of(self.mirror.items.values(), self.install, job_id, attempt))
        if not found:
            return None
        if any(not (self.mirror.items.get(key) or {}).get("spec", {}).get("nodeName")
               and not core.ended(self.mirror.items.get(key)) for key in found):
            return None  # created, not yet bound when the last backend stopped: started again (bound once)
        execution = KubernetesExecution(self, found)
        execution._started()
        return execution

    def released(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        return None
