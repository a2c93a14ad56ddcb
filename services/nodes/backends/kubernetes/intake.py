"""The Kubernetes users' pods into Horizon's log, and Horizon's answer back onto their pods
(docs/backends.md, "Kubernetes users submit as Kubernetes users do").

``PodIntake.sync`` runs in the backend's loop (``backend.py``) on every change of the pods it mirrors:

* each pod (or complete pod group) with ``schedulerName: horizon`` that Horizon has not seen becomes a
  ``JobSubmitted`` on ``horizon.in.<namespace>.submit`` (``admission.job_submitted``), its
  ``Nats-Msg-Id`` the job id, so a second backend or a restart submits it once; submission then
  accepts or rejects it as any client's job;
* while the job waits, the pod's ``PodScheduled`` condition is False with Horizon's why (the
  scheduler's read model, ``horizon.query.queue``: the same sentence as ``horizon jobs``; placement's
  last verdict in the log when no read model answers), written when it changes; a rejected, cancelled
  or unschedulable job's pod keeps its reason (its controller or user deletes it);
* a pod deleted while its job waits cancels the job (``JobCancelRequested``, the pod named).

Once placed, the executor binds the pod (``executor.py``) and its status is the kubelet's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from events import catalogue as c
from events.codec import encode
from events.subjects import input_subject
from services.domain.jobs import Job, JobState, JobTable
from services.nodes.backends.kubernetes import admission
from services.runtime.kubeapi import KubeAPI, KubeError, KubeNotFound, Mirror, pod_path
from services.runtime.log import EventLog

__all__ = ["PodIntake"]

log = logging.getLogger("horizon.kubernetes")

QUERY_TIMEOUT_S = 2.0
WAITS = (JobState.PENDING, JobState.HELD)
ENDED_UNPLACED = (JobState.REJECTED, JobState.CANCELLED, JobState.UNSCHEDULABLE, JobState.DEPENDENCY_NEVER_SATISFIED)


class PodIntake:
    """See the module doc. ``jobs``: the backend's agent's job table (its fold of the log)."""

    def __init__(self, api: KubeAPI, log_: EventLog, pods: Mirror, install: str, jobs: Callable[[], JobTable],
                 nc: Any = None) -> None:
        self.api = api
        self.log = log_
        self.pods = pods
        self.install = install
        self.jobs = jobs
        self.nc = nc
        self.submitted: dict[str, tuple[str, ...]] = {}  # job id -> its pods' keys, submitted by this process
        self._shown: dict[str, str] = {}  # pod key -> the condition message last written
        self._cancelled: set[str] = set()
        self._read_back = False

    def _waiting_of_users(self, table: JobTable) -> None:
        """Once, at start: the waiting jobs that users' pods made (before a restart), to watch their pods."""
        for job in table.jobs.values():
            found = admission.pods_of_payload(job.spec.payload if job.spec else None)
            if found is not None and job.state in WAITS:
                self.submitted.setdefault(job.job_id, tuple(f"{found[0]}/{name}" for name, _ in found[1]))
        self._read_back = True

    async def sync(self) -> None:
        requests, waiting = admission.requests(self.pods.items.values(), self.install)
        table = self.jobs()
        if not self._read_back:
            self._waiting_of_users(table)
        for request in requests:
            if not table.known(request.job_id) and request.job_id not in self.submitted:
                await self._submit(request)
        shown = {w.key: (w.why, "Unschedulable") for w in waiting}
        shown.update(await self._answers(table, requests))
        for key, (message, reason) in sorted(shown.items()):
            if self._shown.get(key) != message:
                await self._condition(key, message, reason)
        await self._cancel_orphans(table)
        for key in [k for k in self._shown if k not in self.pods.items]:
            del self._shown[key]

    async def _submit(self, request: admission.Request) -> None:
        event = admission.job_submitted(request, time.time())
        await self.log.publish(input_subject(event.tenant, "submit"), encode(event), msg_id=request.job_id)
        self.submitted[request.job_id] = request.keys
        log.info("pods %s submitted to Horizon as job %s (account %s)", ",".join(request.keys), request.job_id,
                 event.account)

    async def _answers(self, table: JobTable, requests: list[admission.Request]) -> dict[str, tuple[str, str]]:
        """Per pod key, the message and reason its condition should show now."""
        jobs = {r.job_id: table.get(r.job_id) for r in requests}
        whys = await self._whys(sorted(j for j, job in jobs.items() if job is not None and job.state in WAITS))
        out: dict[str, tuple[str, str]] = {}
        for request in requests:
            job = jobs[request.job_id]
            if job is None:
                message, reason = f"submitted as job {request.job_id}; not yet accepted", "Unschedulable"
            elif job.state in WAITS:  # the scheduler's why, else placement's last verdict in the log
                why = whys.get(request.job_id) or job.reason or "queued"
                message, reason = f"job {request.job_id} {job.state.value.lower()}: {why}", "Unschedulable"
            elif job.state in ENDED_UNPLACED:
                message = f"job {request.job_id} {job.state.value}: {job.reason}"
                reason = "Horizon" + job.state.value.title().replace("_", "")
            else:
                continue  # placed: the executor binds it, the kubelet's status follows
            for key in request.keys:
                out[key] = (message, reason)
        return out

    async def _whys(self, job_ids: list[str]) -> dict[str, str]:
        """The scheduler's why of each waiting job (``horizon.query.queue``), or none if nothing answers."""
        if not job_ids or self.nc is None:
            return {}
        ask = {"job_id": sorted(job_ids), "limit": len(job_ids)}
        try:
            msg = await self.nc.request("horizon.query.queue", json.dumps(ask).encode(), timeout=QUERY_TIMEOUT_S)
            rows = json.loads(msg.data).get("jobs") or []
        except Exception:  # noqa: BLE001 - no read model yet (starting): placement's verdict stands
            return {}
        return {str(r["job_id"]): str(r["why"]) for r in rows if isinstance(r, Mapping) and r.get("why")}

    async def _condition(self, key: str, message: str, reason: str) -> None:
        namespace, _, name = key.partition("/")
        status = {"status": {"conditions": [admission.scheduled_condition(message, reason)]}}
        try:
            await self.api.patch(pod_path(namespace, name) + "/status", status)
            self._shown[key] = message
        except KubeNotFound:
            self._shown.pop(key, None)
        except KubeError as exc:
            log.warning("cannot write pod %s's condition: %s", key, exc)

    async def _cancel_orphans(self, table: JobTable) -> None:
        """Cancel the waiting jobs whose pods were deleted (or replaced under their name)."""
        for job_id, keys in sorted(self.submitted.items()):
            job = table.get(job_id)
            if job is None or job_id in self._cancelled:
                continue
            if job.state not in WAITS:
                self.submitted.pop(job_id, None)  # placed or ended (never requeued): nothing more to watch
                continue
            gone = [key for key in keys if not self._same_pod(key, job)]
            if gone:
                await self._cancel(job, gone)

    def _same_pod(self, key: str, job: Job) -> bool:
        pod = self.pods.items.get(key)
        found = admission.pods_of_payload(job.spec.payload if job.spec else None)
        if pod is None or found is None:
            return pod is not None
        uids = {f"{found[0]}/{name}": uid for name, uid in found[1]}
        return str((pod.get("metadata") or {}).get("uid")) == uids.get(key)

    async def _cancel(self, job: Job, gone: list[str]) -> None:
        assert job.spec is not None
        event = c.JobCancelRequested(ts=time.time(), source=admission.SOURCE, correlation_id=job.job_id,
                                     job_id=job.job_id, tenant=job.spec.tenant, user=job.spec.user,
                                     reason=f"its pod {', '.join(gone)} was deleted in Kubernetes")
        await self.log.publish(input_subject(job.spec.tenant, "cancel"), encode(event), msg_id=f"k8s-cancel/{job.job_id}")
        self._cancelled.add(job.job_id)
        log.info("job %s cancelled: its pods %s were deleted", job.job_id, ",".join(gone))
