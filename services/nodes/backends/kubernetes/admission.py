"""Pods that Kubernetes users give Horizon to schedule, as Horizon jobs. Pure: pods (as the API server's
JSON) in, ``JobSubmitted`` events and pod patches out; no I/O, no clock.

A user's pod is Horizon's when its ``spec.schedulerName`` is ``horizon`` and Horizon did not create it
(docs/backends.md, "Kubernetes users submit as Kubernetes users do"). The labels are Kueue's, so a pod
written for Kueue needs only its scheduler name changed:

* ``kueue.x-k8s.io/queue-name``: the Horizon account charged (fair share, quotas); without it, the
  pod's namespace. The tenant is the namespace.
* ``kueue.x-k8s.io/pod-group-name`` (label) with ``kueue.x-k8s.io/pod-group-total-count``
  (annotation): a gang. Nothing is submitted until that many pods of the group exist; then the first
  ``total-count`` of them (by creation time, then name) are one job of as many nodes, bound all or none.
* ``kueue.x-k8s.io/priority-class`` (label): Horizon's priority class (``low``, ``normal``, ``high``
  ...); ``horizon.io/checkpoint-signal`` (annotation): the signal before a preemption (Kubernetes can
  only send SIGTERM, with the deletion).

The job: its resources are the pod's requests (``core.pod_requests``: containers summed, init
containers at most, overhead), its time limit the pod's ``activeDeadlineSeconds`` (else the cluster's
default), its node selector and tolerations the pod's; it is not requeued (a bound pod cannot be bound
again: a preempted or lost one ends, and its controller, a ``batch/v1`` Job, creates the next pod,
which is a new job). Its id is ``k8s-<namespace>-<name>-<digest of the UIDs>``: the same for the same
pods whoever computes it, and never the same for a pod created again under the same name. The
``payload`` names the pods (namespace, names, UIDs): the executor binds those pods where Horizon places
the job instead of creating its own (``executor.py``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from events import catalogue as c
from services.domain.cluster import BACKEND_LABEL
from services.nodes.backends.kubernetes import core

__all__ = ["QUEUE_LABEL", "GROUP_LABEL", "GROUP_COUNT", "PRIORITY_LABEL", "CHECKPOINT_ANNOTATION", "PAYLOAD_KEY",
           "Request", "Waiting", "users_pod", "requests", "job_submitted", "pods_of_payload", "scheduled_condition",
           "BACKEND_SELECTOR"]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
CHECKPOINT_ANNOTATION = "horizon.io/checkpoint-signal"
PAYLOAD_KEY = "kubernetes"  # the payload's key naming the pods: {"kubernetes": {"namespace", "pods"}}
SOURCE = "horizon-kubernetes"  # the JobSubmitted's source
# The submitted job runs on this backend's nodes only (its pods are bound to them), whatever other
# backends offer nodes to the same Horizon (every node has the label, services/domain/cluster.py).
BACKEND_SELECTOR = {BACKEND_LABEL: core.BACKEND}


@dataclass(frozen=True)
class Request:
    """One job to submit: the pods it is (one, or a group's), oldest first."""

    job_id: str
    namespace: str
    pods: tuple[Mapping[str, Any], ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f"{self.namespace}/{_name(p)}" for p in self.pods)


@dataclass(frozen=True)
class Waiting:
    """A pod not submitted yet, and why (its group is incomplete, its group count is wrong)."""

    key: str
    why: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("name", ""))


def _slug(text: str, most: int) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", text).strip("-")[:most].strip("-") or "pod"


def users_pod(pod: Mapping[str, Any], install: str) -> bool:
    """A pod a user gave Horizon, still to be placed: ``schedulerName: horizon``, not created by a
    Horizon, not bound, not ended, not being deleted."""
    meta, spec = _meta(pod), pod.get("spec") or {}
    labels = meta.get("labels") or {}
    return (spec.get("schedulerName") == core.SCHEDULER and labels.get(core.LABEL_MANAGED) != "horizon"
            and not spec.get("nodeName") and not meta.get("deletionTimestamp") and not core.ended(pod)
            and core.attempt_of(pod, install) is None)


def _order(pod: Mapping[str, Any]) -> tuple[str, str]:
    return str(_meta(pod).get("creationTimestamp", "")), _name(pod)


def _job_id(namespace: str, name: str, pods: Iterable[Mapping[str, Any]]) -> str:
    uids = ",".join(sorted(str(_meta(p).get("uid", "")) for p in pods))
    digest = hashlib.sha1(f"{namespace}/{name}:{uids}".encode()).hexdigest()[:10]
    return f"k8s-{_slug(namespace, 40)}-{_slug(name, 60)}-{digest}"


def requests(pods: Iterable[Mapping[str, Any]], install: str) -> tuple[list[Request], list[Waiting]]:
    """The jobs the users' pods make now, and the pods that wait for the rest of their group; each in
    name order, so every caller sees the same list."""
    singles: list[Request] = []
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        if not users_pod(pod, install):
            continue
        namespace = str(_meta(pod).get("namespace", "default"))
        group = (_meta(pod).get("labels") or {}).get(GROUP_LABEL)
        if group:
            groups.setdefault((namespace, str(group)), []).append(pod)
        else:
            singles.append(Request(_job_id(namespace, _name(pod), [pod]), namespace, (pod,)))
    waiting: list[Waiting] = []
    for (namespace, group), members in sorted(groups.items()):
        members.sort(key=_order)
        counts = {str((_meta(p).get("annotations") or {}).get(GROUP_COUNT, "")) for p in members}
        count = next(iter(counts)) if len(counts) == 1 else ""
        if not count.isdigit() or int(count) < 1:
            why = (f"the pods of group {group} disagree on {GROUP_COUNT} ({', '.join(sorted(counts))})" if len(counts) > 1
                   else f"pod group {group}: annotation {GROUP_COUNT} must be a whole number of pods, "
                        f"not {count or 'missing'}")
            waiting += [Waiting(f"{namespace}/{_name(p)}", why) for p in members]
            continue
        if len(members) < int(count):
            why = f"pod group {group}: {len(members)} of its {count} pods exist; Horizon waits for all of them"
            waiting += [Waiting(f"{namespace}/{_name(p)}", why) for p in members]
            continue
        chosen = members[: int(count)]
        singles.append(Request(_job_id(namespace, group, chosen), namespace, tuple(chosen)))
    return sorted(singles, key=lambda r: r.job_id), sorted(waiting, key=lambda w: w.key)


def _cpus(milli: int) -> str:
    return f"{max(1, milli)}m"


def job_submitted(request: Request, ts: float) -> c.JobSubmitted:
    """The ``JobSubmitted`` of a request (see the module doc). ``ts``: when the backend saw it."""
    first = request.pods[0]
    meta, spec = _meta(first), first.get("spec") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    cpus, memory, gpus = core.pod_requests(first)
    deadline = spec.get("activeDeadlineSeconds")
    tolerations = [c.Toleration(key=str(t.get("key") or ""), operator=str(t.get("operator") or "Equal"),
                                value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
                   for t in spec.get("tolerations") or []
                   # the kubelet's own not-ready/unreachable tolerations (added to every pod) mean nothing here
                   if not str(t.get("key") or "").startswith("node.kubernetes.io/")]
    image = next((str(ct.get("image")) for ct in spec.get("containers") or [] if ct.get("image")), "")
    group = labels.get(GROUP_LABEL)
    return c.JobSubmitted(
        ts=ts, source=SOURCE, correlation_id=request.job_id, job_id=request.job_id,
        tenant=request.namespace, account=str(labels.get(QUEUE_LABEL) or request.namespace),
        user=str(spec.get("serviceAccountName") or "default"), name=str(group or _name(first)),
        payload={PAYLOAD_KEY: {"namespace": request.namespace,
                               "pods": [{"name": _name(p), "uid": str(_meta(p).get("uid", ""))} for p in request.pods]}},
        resources=c.ResourceRequest(cpus=_cpus(cpus), memory=memory or None, gpus=gpus),
        nodes=len(request.pods),
        time_limit_s=float(deadline) if isinstance(deadline, int) and deadline > 0 else None,
        priority_class=str(labels.get(PRIORITY_LABEL) or "normal"),
        checkpoint_signal=str(notes[CHECKPOINT_ANNOTATION]) if notes.get(CHECKPOINT_ANNOTATION) else None,
        node_selector={**{str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}, **BACKEND_SELECTOR},
        tolerations=tolerations,
        requeue=False,
        image=image,
        labels={"kubernetes.namespace": request.namespace, "kubernetes.pod": _name(first),
                **({"kubernetes.pod-group": str(group)} if group else {})},
    )


def pods_of_payload(payload: Any) -> tuple[str, list[tuple[str, str]]] | None:
    """(namespace, [(pod name, uid)]) of a job a user's pods made, from its spec's payload; else None."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get(PAYLOAD_KEY), Mapping):
        return None
    found = payload[PAYLOAD_KEY]
    pods = found.get("pods")
    if not isinstance(found.get("namespace"), str) or not isinstance(pods, list) or not pods:
        return None
    out = [(str(p.get("name", "")), str(p.get("uid", ""))) for p in pods if isinstance(p, Mapping)]
    return (found["namespace"], out) if all(name for name, _ in out) else None


def scheduled_condition(message: str, reason: str = "Unschedulable") -> dict[str, Any]:
    """The pod's ``PodScheduled`` condition while Horizon has not placed it: False, with Horizon's why
    (``kubectl describe pod`` and ``kubectl get pod -o yaml`` show it, as they show the default
    scheduler's)."""
    return {"type": "PodScheduled", "status": "False", "reason": reason, "message": f"Horizon: {message}"[:1024]}
