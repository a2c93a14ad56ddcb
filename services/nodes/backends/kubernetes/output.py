"""``horizon logs`` for jobs run as pods: their output is the container's log, which the API server
serves (``GET …/pods/NAME/log``, the kubelet's file of what the container wrote).

The node agent answers ``horizon.logs.<node>[.<tenant>]`` (``services/nodes/agent/logs.py``: the
request, the answer, the tenant's rules) for every node of the backend; with an executor of pods it
asks ``PodOutput.read`` instead of reading files under a state directory. What differs from files:

* Kubernetes keeps one log per container, its standard output and error together as they were
  written: ``stdout`` is that log, and ``stderr`` is answered with an error saying so.
* The log lives as long as the pod. Ended pods stay in their namespace (with their logs); a cancelled
  or preempted attempt's pod is deleted (that is how Kubernetes 1.20 stops a container), and its log
  with it: it is then "no output", with the reason.
* A pod that has not started yet has an empty log (``horizon logs -f`` waits for it).
* Offsets count bytes of the log as the API server returns it. An ended pod's log no longer changes:
  the last few are kept in memory, since ``horizon logs`` asks for a long one chunk after chunk.

The attempt's pod on ``node`` is found by its annotations (``core.attempt_of``: this installation's,
the job, the attempt; attempt 0 is the latest on that node) among the pods of every namespace the
backend watches; for a gang, each node's own pod answers for that node.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from events.subjects import KEY_SEPARATOR, job_key
from services.nodes.backends.kubernetes import core
from services.runtime.kubeapi import KubeAPI, KubeError, KubeNotFound, Mirror

__all__ = ["PodOutput", "pod_of", "MAX_CHUNK"]

MAX_CHUNK = 512 * 1024  # as the agent's files (a reply fits a NATS message)
KEPT = 16  # ended pods whose logs are kept in memory
STREAMS = ("stdout", "stderr")
ONE_LOG = ("Kubernetes keeps a pod's standard output and error as one log: `horizon logs JOB` (without --err) "
           "shows both")


def pod_of(pods: Iterable[Mapping[str, Any]], install: str, node: str, job_id: str,
           attempt: int) -> Mapping[str, Any] | None:
    """The pod of ``job_id``'s ``attempt`` (0: its latest) bound to ``node``, or None. Pure."""
    found: Mapping[str, Any] | None = None
    number = -1
    for pod in pods:
        which = core.attempt_of(pod, install)
        if which is None or which[0] != job_id or (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if (attempt and which[1] == attempt) or (not attempt and which[1] > number):
            found, number = pod, which[1]
    return found


def _tenant_of(pod: Mapping[str, Any]) -> str:
    """The tenant whose job the pod runs: Horizon's annotation on the pods it creates; a Kubernetes user's
    pod belongs to its namespace's tenant (``admission.py``)."""
    meta = pod.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(core.ANNOTATION_TENANT) or meta.get("namespace") or "")


def _started(pod: Mapping[str, Any]) -> bool:
    """Its container has started (running or ended): there is a log to ask for."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if state.get("running") or state.get("terminated") or status.get("lastState", {}).get("terminated"):
            return True
    return False


class PodOutput:
    """Answers the agent's output requests (``read``) from the pods' logs (see the module doc)."""

    def __init__(self, api: KubeAPI, mirror: Mirror, install: str) -> None:
        self.api = api
        self.mirror = mirror  # the pods of every namespace
        self.install = install
        self._ended: OrderedDict[str, bytes] = OrderedDict()  # pod UID -> its log, for ended pods

    async def read(self, node: str, request: Mapping[str, Any], tenant: str | None = None) -> dict[str, Any]:
        """The answer to one request (``services/nodes/agent/logs.py``'s shape). A tenant asking about a
        job that is not its own gets, word for word, the answer for a job that does not exist, built from
        its request alone (issue 31)."""
        job_id = str(request.get("job_id", ""))
        stream = request.get("stream", "stdout")
        if stream not in STREAMS:
            return {"error": f"stream must be one of {', '.join(STREAMS)}"}
        if not job_id:
            return {"error": f"{job_id!r} is not a job id"}
        if stream == "stderr":
            return {"error": ONE_LOG}
        asked = int(request.get("attempt") or 0)
        nothing = {"error": f"node {node} has no output of job {job_id}" + (f" attempt {asked}" if asked else "")
                   + " (Kubernetes keeps a pod's log while the pod exists: a cancelled or preempted attempt's pod "
                   "is deleted)"}
        if tenant is not None and KEY_SEPARATOR in job_id:
            return nothing
        pods = list(self.mirror.items.values())
        keys = [job_key(tenant, job_id), job_id] if tenant is not None else [job_id]
        pod = next((p for p in (pod_of(pods, self.install, node, key, asked) for key in keys) if p is not None), None)
        if pod is None or (tenant is not None and _tenant_of(pod) != tenant):
            return nothing
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted (a cancelled or preempted attempt): once its container is gone, the kubelet
            # answers the log request with its own error text as if it were the log (seen under load).
            return nothing
        number = (core.attempt_of(pod, self.install) or ("", asked))[1]
        try:
            data = await self._log(pod)
        except KubeNotFound:
            return nothing  # deleted since the mirror saw it
        except KubeError as exc:
            return {"error": f"cannot read the log of pod {self._key(pod)} on node {node}: {exc}"}
        limit = max(0, min(int(request.get("limit") or MAX_CHUNK), MAX_CHUNK))
        offset = int(request.get("offset") or 0)
        size = len(data)
        start = max(0, size + offset) if offset < 0 else min(offset, size)
        return {"job_id": job_id, "attempt": number, "path": f"pod {self._key(pod)}", "size": size, "offset": start,
                "data": base64.b64encode(data[start:start + limit]).decode()}

    @staticmethod
    def _key(pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"

    async def _log(self, pod: Mapping[str, Any]) -> bytes:
        """The pod's container log (its first container's: Horizon's pods have one); empty before it starts."""
        if not _started(pod):
            return b""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if uid in self._ended:
            self._ended.move_to_end(uid)
            return self._ended[uid]
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        data: bytes = await self.api.logs(str(meta.get("namespace")), str(meta.get("name")), containers[0].get("name"))
        if core.ended(pod) and uid:
            self._ended[uid] = data
            while len(self._ended) > KEPT:
                self._ended.popitem(last=False)
        return data
