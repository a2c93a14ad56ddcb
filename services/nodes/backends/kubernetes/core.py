"""The Kubernetes backend's pure core: the API server's objects in, Horizon's nodes and outcomes out,
and the Pod of a placement. Pure: no I/O, no clock.

* ``node_spec``: a Node as a Horizon ``NodeSpec`` (``backend`` "kubernetes"): ``status.allocatable``'s
  ``cpu`` (milli-CPUs), ``memory`` and ``nvidia.com/gpu`` (one ``GpuDevice`` per GPU, its type and
  memory from GPU feature discovery's ``nvidia.com/gpu.product`` and ``nvidia.com/gpu.memory`` (MiB)
  labels when the node has them), the node's labels and taints, and what pods Horizon did not place
  hold there (``foreign_use``) as its ``foreign`` use: used capacity, its totals unchanged.
* ``node_drained``: why new pods are kept off the node (``spec.unschedulable``: a cordon; the
  ``Ready`` condition not True), or None.
* ``foreign_use``: per node, the requests of the pods bound there that have not ended and are not this
  installation's (another scheduler's, a static pod, another Horizon's): CPUs, memory, GPUs.
* ``pod_name``, ``pod_manifest``: the Pod of one attempt on one node of its allocation: a name that
  is the attempt's (``hz-<job>-<attempt>-<digest>``: the API server keeps one object per name, so an
  attempt is created once), ``schedulerName: horizon`` (no other scheduler takes it), requests equal to
  limits as placement decided (CPUs, memory, ``nvidia.com/gpu``), labels naming the installation and
  annotations the job and attempt (``attempt_of`` reads them back after a restart).
* ``outcome``: an ended Pod as the agent's ``Outcome`` (its phase and its container's ``terminated``
  exit code and reason, ``OOMKilled`` included); ``never_ran``: a pod whose container cannot start
  (its image cannot be pulled, a bad command), which ends the attempt instead of waiting for ever.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events import catalogue as c
from services.nodes.backends.protocol import Outcome
from services.nodes.spec import NodeSpec
from services.runtime.kubeapi import quantity

__all__ = ["BACKEND", "SCHEDULER", "GPU", "LABEL_INSTALL", "LABEL_MANAGED", "ANNOTATION_JOB", "ANNOTATION_ATTEMPT",
           "CHECKPOINT_FILE", "ISOLATION", "node_spec", "node_drained", "foreign_use", "pod_requests", "pod_name",
           "pod_manifest", "attempt_of", "ended", "running", "outcome", "never_ran", "Use"]

BACKEND = "kubernetes"
SCHEDULER = "horizon"  # spec.schedulerName of the pods Horizon places: the default scheduler leaves them
GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
LABEL_MANAGED = "horizon.io/managed-by"  # "horizon": a pod Horizon created
LABEL_INSTALL = "horizon.io/installation"  # which Horizon (two on one cluster keep apart)
ANNOTATION_JOB = "horizon.io/job"  # the job id, exact (a label value cannot hold every job id)
ANNOTATION_ATTEMPT = "horizon.io/attempt"
ANNOTATION_TENANT = "horizon.io/tenant"  # the job's tenant, exact (whose output `horizon logs` may show: output.py)
# The job writes its checkpoint reference here: the kubelet puts the file's content into the ended
# container's status (terminated.message), where the backend reads it.
CHECKPOINT_FILE = "/dev/termination-log"
ISOLATION = "kubernetes (the kubelet confines each pod in its container and cgroup)"
ENDED = ("Succeeded", "Failed")
# A container's waiting reasons after which it will not start by itself.
_NEVER_STARTS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


@dataclass(frozen=True)
class Use:
    """What pods Horizon did not place hold on one node (their requests) and which they are."""

    cpus_milli: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    pods: tuple[str, ...] = ()


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def node_spec(node: Mapping[str, Any], foreign: Use | None = None, held_devices: Iterable[str] = ()) -> NodeSpec:
    """The node Horizon registers for a Node object: its allocatable totals, always. With ``foreign``,
    what those pods request is the node's ``foreign`` use (``c.ForeignUse``), which placement counts
    as used; their GPUs (Kubernetes names no device of a pod's) are the highest-numbered ones no
    Horizon job holds (``held_devices``)."""
    meta, allocatable = _meta(node), (node.get("status") or {}).get("allocatable") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    cpus_milli = quantity(allocatable.get("cpu"), 1000)
    memory = quantity(allocatable.get("memory"))
    kind = labels.get("nvidia.com/gpu.product") or "gpu"
    gpu_memory = quantity(labels.get("nvidia.com/gpu.memory"), 1 << 20) if labels.get("nvidia.com/gpu.memory",
                                                                                        "").isdigit() else 0
    devices = tuple(c.GpuDevice(id=f"gpu{i}", type=kind, memory_bytes=gpu_memory)
                    for i in range(quantity(allocatable.get(GPU))))
    taints = tuple(c.Taint(key=str(t.get("key", "")), value=str(t.get("value") or ""),
                           effect=str(t.get("effect") or "NoSchedule"))
                   for t in (node.get("spec") or {}).get("taints") or [] if t.get("key"))
    use = None
    if foreign is not None and foreign.pods:
        held = set(held_devices)
        busy = [d.id for d in reversed(devices) if d.id not in held][:foreign.gpus]
        use = c.ForeignUse(cpus_milli=min(cpus_milli, foreign.cpus_milli), memory_bytes=min(memory, foreign.memory_bytes),
                           devices=sorted(busy, key=lambda d: int(d[3:])), jobs=list(foreign.pods))
    return NodeSpec(str(meta.get("name")), cpus_milli, memory, devices, labels, taints, backend=BACKEND,
                    isolation=ISOLATION, foreign=use)


def node_drained(node: Mapping[str, Any]) -> str | None:
    """Why no new pod should go to this node (a cordon, or it is not Ready), or None if they may."""
    if (node.get("spec") or {}).get("unschedulable"):
        return "Kubernetes: the node is cordoned (spec.unschedulable)"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            why = condition.get("message") or condition.get("reason") or ""
            return f"Kubernetes: the node is not Ready ({condition.get('status')}{': ' + why if why else ''})"
    return None


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int, int]:
    """(milli-CPUs, memory bytes, GPUs) a pod requests, as the scheduler counts them: the sum over its
    containers, at least its largest init container's, plus its overhead. A resource with a limit and no
    request requests its limit."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> tuple[int, int, int]:
        res = container.get("resources") or {}
        req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return quantity(req.get("cpu"), 1000), quantity(req.get("memory")), quantity(req.get(GPU))

    total = [sum(x) for x in zip((0, 0, 0), *(of(ct) for ct in spec.get("containers") or []))]
    for init in spec.get("initContainers") or []:
        total = [max(a, b) for a, b in zip(total, of(init))]
    overhead = spec.get("overhead") or {}
    return (total[0] + quantity(overhead.get("cpu"), 1000), total[1] + quantity(overhead.get("memory")), total[2])


def ended(pod: Mapping[str, Any] | None) -> bool:
    """The pod is gone, or its phase is final."""
    return pod is None or (pod.get("status") or {}).get("phase") in ENDED


def running(pod: Mapping[str, Any] | None) -> bool:
    """The pod runs (or has ended, or will never start)."""
    return ended(pod) or (pod or {}).get("status", {}).get("phase") == "Running" or never_ran(pod) is not None


def foreign_use(pods: Iterable[Mapping[str, Any]], install: str) -> dict[str, Use]:
    """Per node, what the bound pods that have not ended and are not this installation's request."""
    out: dict[str, Use] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        labels = _meta(pod).get("labels") or {}
        if not node or ended(pod) or (install and labels.get(LABEL_INSTALL) == install):
            continue
        cpus, memory, gpus = pod_requests(pod)
        was = out.get(node, Use())
        name = f"{_meta(pod).get('namespace', 'default')}/{_meta(pod).get('name')}"
        out[node] = Use(was.cpus_milli + cpus, was.memory_bytes + memory, was.gpus + gpus, (*was.pods, name))
    return out


def pod_name(install: str, job_id: str, attempt: int, node: str, index: int = 0) -> str:
    """The attempt's pod on its ``index``-th node: ``hz-<job>-<attempt>[-<index>]-<digest>``, at most 63
    characters (a DNS label, as a pod's hostname is), the same for the same attempt whoever asks."""
    slug = re.sub(r"[^a-z0-9]+", "-", job_id.lower()).strip("-")[:36] or "job"
    digest = hashlib.sha1(f"{install}:{job_id}:{attempt}:{node}".encode()).hexdigest()[:8]
    return f"hz-{slug}-{attempt}{f'-{index}' if index else ''}-{digest}"


def attempt_of(pod: Mapping[str, Any], install: str) -> tuple[str, int] | None:
    """(job id, attempt) of a pod this installation created, else None."""
    meta = _meta(pod)
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    attempt = str(notes.get(ANNOTATION_ATTEMPT, ""))
    if not install or labels.get(LABEL_INSTALL) != install or not attempt.isdigit() or not notes.get(ANNOTATION_JOB):
        return None
    return str(notes[ANNOTATION_JOB]), int(attempt)


def _label_value(text: str) -> str:
    """A label value (63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends) showing ``text``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:63].strip("_.-")


def pod_manifest(install: str, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation,
                 env: Mapping[str, str], image: str, namespace: str, grace_period_s: float,
                 index: int = 0) -> dict[str, Any]:
    """The Pod of the attempt's share ``alloc`` (see the module doc). It names no node: Horizon binds
    it (``Binding``) once it exists, as a scheduler does. Requests are limits (Guaranteed QoS when both
    CPU and memory are set): the CPUs and memory placement allocated on that node, its GPUs as
    ``nvidia.com/gpu``. The job's tolerations go with it (the kubelet evicts a pod that does not
    tolerate a ``NoExecute`` taint)."""
    resources: dict[str, str] = {"cpu": f"{max(1, alloc.cpus_milli)}m"}
    memory = alloc.memory_bytes or spec.memory_bytes * max(1, alloc.tasks)
    if memory:
        resources["memory"] = str(memory)
    if alloc.device_ids:
        resources[GPU] = str(len(alloc.device_ids))
    container: dict[str, Any] = {
        "name": "job", "image": spec.image or image, "imagePullPolicy": "IfNotPresent",
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "terminationMessagePath": CHECKPOINT_FILE, "terminationMessagePolicy": "File",
    }
    if spec.command:
        container["command"] = list(spec.command)
    tolerations = [{"key": t.key, "operator": t.operator if t.operator in ("Exists", "Equal") else "Equal",
                    **({"value": t.value} if t.value and t.operator != "Exists" else {}),
                    **({"effect": t.effect} if t.effect else {})}
                   for t in spec.tolerations if t.key]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod_name(install, job_id, attempt, alloc.node, index), "namespace": namespace,
            "labels": {LABEL_MANAGED: "horizon", LABEL_INSTALL: install, "horizon.io/job": _label_value(job_id),
                       "horizon.io/tenant": _label_value(spec.tenant)},
            "annotations": {ANNOTATION_JOB: job_id, ANNOTATION_ATTEMPT: str(attempt), "horizon.io/node": alloc.node,
                            ANNOTATION_TENANT: spec.tenant},
        },
        "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "containers": [container],
                 "terminationGracePeriodSeconds": max(0, int(grace_period_s)), "enableServiceLinks": False,
                 "automountServiceAccountToken": False, **({"tolerations": tolerations} if tolerations else {})},
    }


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if state:
            return state
    return None


def never_ran(pod: Mapping[str, Any] | None) -> str | None:
    """Why the pod's container will never start (its image, its command), or None."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _NEVER_STARTS:
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip(": ")
    return None


def checkpoint_message(pod: Mapping[str, Any] | None) -> str | None:
    """What the job wrote to its checkpoint file (the ended container's termination message), if anything."""
    state = _terminated(pod or {})
    message = str((state or {}).get("message") or "").strip()
    return message or None


def outcome(pod: Mapping[str, Any] | None, pod_logs_tail: str = "") -> Outcome:
    """How the pod ended, as the agent reports it. Gone before it ended (deleted by someone else, its
    node lost) is lost; a container that never started, or a pod its kubelet refused (``OutOfcpu``:
    it still counted a pod the API server had already forgotten) or evicted, is an ``error``; ``OOMKilled`` is out of memory;
    an exit code of 128 + n with no other is signal n (the container runtime's convention)."""
    if pod is None:
        return Outcome(exit_code=None, lost=True)
    why = never_ran(pod)
    if why is not None:
        return Outcome(exit_code=None, error=why)
    state = _terminated(pod)
    phase = (pod.get("status") or {}).get("phase")
    if state is None:
        if phase == "Succeeded":
            return Outcome(exit_code=0, stderr_tail=pod_logs_tail)
        reason = (pod.get("status") or {}).get("reason") or ""
        message = (pod.get("status") or {}).get("message") or ""
        if phase == "Failed" and reason:  # the kubelet refused it (OutOfcpu, NodeAffinity, ...) or evicted it
            return Outcome(exit_code=None, error=f"Kubernetes: {reason}: {message}".rstrip(": "))
        return Outcome(exit_code=None, lost=True, stderr_tail=f"{reason}: {message}".strip(": "))
    code = int(state.get("exitCode") or 0)
    if state.get("reason") == "OOMKilled":
        return Outcome(exit_code=code or None, stderr_tail=pod_logs_tail, out_of_memory=True)
    if code > 128 and state.get("signal") is None and code - 128 in (1, 2, 6, 9, 10, 12, 15):
        return Outcome(exit_code=-(code - 128), stderr_tail=pod_logs_tail, signalled=True)
    return Outcome(exit_code=code, stderr_tail=pod_logs_tail)


def pods_of(pods: Iterable[Mapping[str, Any]], install: str, job_id: str, attempt: int) -> list[Mapping[str, Any]]:
    """The pods of one attempt (one per node of its allocation)."""
    return [p for p in pods if attempt_of(p, install) == (job_id, attempt)]


def merged_outcome(outcomes: Sequence[Outcome]) -> Outcome:
    """A gang's outcome: its first failure (an error, a loss, a non-zero exit), else success."""
    for o in outcomes:
        if o.error or o.lost or o.out_of_memory or o.exit_code != 0:
            return o
    return outcomes[0] if outcomes else Outcome(exit_code=None, lost=True)
