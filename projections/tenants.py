"""What a tenant may see of the read models: its scope, its jobs' keys and ids, and its feed of events.

**The tenant feed.** A tenant may read only its own jobs' events, but event
subjects (``horizon.evt.<service>.<Type>.<job>``) do not name the tenant, so
no subject permission can select them. The jobs projection, which knows every
job's tenant, copies each event about a job it applies live (not the history
it catches up on) to ``horizon.tenant.<tenant>.evt.<service>.<Type>.<job>``
(core NATS, at most once; the log and the queries stay the truth;
``projections/job_server.py`` publishes it). Under ``deploy/nats/auth.conf``
each tenant's account imports its own prefix as ``horizon.evt.>``, so a
tenant's ``horizon submit``, ``cancel`` or ``watch`` sees its jobs' events on
the usual subjects and nothing else. Which tenant: the job's; for
``RequestRejected``, ``JobRejected`` and ``InputRejected``, the tenant that
sent the input (never an operator's request; a body naming another tenant is
answered to its sender alone). One copy per projection replica running.

**Scoped queries.** ``horizon.query.<view>.<tenant>`` answers about that
tenant's jobs only (``scope``); a tenant names its jobs by the ids it gave
them (``tenant_keys`` finds them, ``as_tenant_sees`` answers with them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from events import catalogue as c
from events.base import Event
from events.subjects import ADMIN_TENANT, job_key, tenant_view, valid_token
from services.domain.jobs import Job

__all__ = ["TENANT_FEED", "feed_tenant", "tenant_keys", "as_tenant_sees", "scope"]

TENANT_FEED = "horizon.tenant"  # horizon.tenant.<tenant>.evt.<service>.<Type>.<job>


def feed_tenant(event: Event, job: Job | None, known: str | None) -> str | None:
    """The tenant whose feed gets ``event`` (about a job), or None (module docstring: the tenant feed)."""
    if isinstance(event, (c.RequestRejected, c.JobRejected, c.InputRejected)):
        tenant: str | None = event.tenant  # the sender's (submission names it from the subject)
    else:
        tenant = job.spec.tenant if job is not None and job.spec is not None else known
    if tenant is None or tenant == ADMIN_TENANT or not valid_token(tenant):
        return None
    return tenant


def tenant_keys(tenant: str, job_ids: list[str]) -> list[str]:
    """The log keys a tenant's ids may stand for: its job through the intake (``<tenant>:<id>``)
    first, then the id as it is (a job submitted without accounts); the tenant filter keeps
    either to that tenant's own jobs."""
    return [key for job_id in job_ids for key in (job_key(tenant, str(job_id)), str(job_id))]


def as_tenant_sees(tenant: str, rows: Iterable[dict[str, Any]]) -> None:
    """A tenant's answer names its jobs by the ids it gave them (``tenant_view``), in the explanations
    too ("waiting for g-1: not submitted yet", not "acme:g-1")."""
    own = tenant + ":"
    for row in rows:
        if isinstance(row.get("job_id"), str):
            row["job_id"] = tenant_view(tenant, row["job_id"])
        if isinstance(row.get("slurm_id"), str):
            # Its numbers are its own (acme:12 is its 12); a job of its numbered in the cluster's scope (one
            # an operator published for it) shows no number: that would tell the cluster's count.
            if row["slurm_id"].startswith(own):
                row["slurm_id"] = row["slurm_id"][len(own):]
            else:
                row["slurm_id"] = None
                if "number" in row:
                    row["number"] = None
                if isinstance(row.get("spec"), dict):
                    row["spec"]["number"] = row["spec"]["array_number"] = 0
        spec = row.get("spec")
        if isinstance(spec, dict):  # its array and the jobs it waits for, by the tenant's ids too
            if isinstance(spec.get("array"), str):
                spec["array"] = tenant_view(tenant, spec["array"])
            for dep in spec.get("dependencies") or ():
                if isinstance(dep, dict) and isinstance(dep.get("job_id"), str):
                    dep["job_id"] = tenant_view(tenant, dep["job_id"])
        for holder in (row, row.get("why")):
            if not isinstance(holder, dict):
                continue
            for field in ("why", "reason"):
                if isinstance(holder.get(field), str) and own in holder[field]:
                    holder[field] = holder[field].replace(own, "")


def scope(subject: str) -> str | None:
    """The tenant of ``horizon.query.<view>.<tenant>``; None for ``horizon.query.<view>``."""
    parts = subject.split(".")
    return parts[3] if len(parts) == 4 else None
