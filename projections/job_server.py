"""The jobs read model's queries over NATS request/reply, and the tenant feed it publishes.

``horizon.query.jobs`` (a list with filters and paging; ``steps: true`` adds each job's current
attempt's steps), ``horizon.query.job`` (one job with its history, paged, its attempts and its job
steps) and ``horizon.query.decisions``, in the queue group ``projections`` so several replicas can
share the load; the queries themselves: ``projections/job_queries.py``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from events.codec import decode_json
from events.subjects import job_key
from projections.job_queries import DECISIONS, EVENTS, JOBS, JOBS_BY_QUEUE
from projections.jobs import JobsProjection
from projections.paging import Listing, Pager
from projections.tenants import TENANT_FEED, as_tenant_sees, scope, tenant_keys
from services.domain.protocol import Record

__all__ = ["QueryServer"]


class QueryServer:
    """``horizon.query.jobs``, ``horizon.query.job`` and ``horizon.query.decisions`` over NATS request/reply.

    ``horizon.query.jobs.<tenant>`` and ``horizon.query.job.<tenant>`` answer about that tenant's
    jobs only. Under ``deploy/nats/auth.conf`` a tenant's account imports them as
    ``horizon.query.jobs`` and ``horizon.query.job``, so the tenant is set by the server's
    configuration, not by the asker, and the unscoped subjects are the operators' and services'.

    Every answer fits in one message (``projections/paging.py``): a listing is cut to a page that
    does, and says where the next page starts.

    It also publishes the projection's tenant feed (module docstring).
    """

    def __init__(self, nc: Any, projection: JobsProjection) -> None:
        self.nc = nc
        self.projection = projection
        self.pager = Pager(nc)
        self._subs: list[Any] = []

    async def start(self) -> None:
        self.projection.listeners.append(self._feed)
        for view, cb in (("jobs", self._jobs), ("job", self._job)):
            self._subs.append(await self.nc.subscribe(f"horizon.query.{view}", queue="projections", cb=cb))
            self._subs.append(await self.nc.subscribe(f"horizon.query.{view}.*", queue="projections", cb=cb))
        self._subs.append(await self.nc.subscribe("horizon.query.decisions", queue="projections", cb=self._decisions))

    async def _decisions(self, msg: Any) -> None:
        try:
            req = decode_json(msg.data or b"{}")
            allowed = {"job_id", "service", "tenant", "account", "user", "limit", "offset"}
            unknown = set(req) - allowed
            if unknown:
                raise ValueError(f"unknown query fields {sorted(unknown)}; allowed: {sorted(allowed)}")
            req["limit"] = self.pager.rows("decisions", req.get("limit", 1000))
            body = await self.projection.query_decisions(**req)
        except (ValueError, TypeError) as exc:
            body = {"error": str(exc)}
        await self._reply(msg, body, "decisions", DECISIONS)

    async def _feed(self, feed: list[tuple[str, Record]]) -> None:
        cut = len("horizon.")
        for tenant, record in feed:
            await self.nc.publish(f"{TENANT_FEED}.{tenant}.{record.subject[cut:]}", record.data)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.projection.listeners.remove(self._feed)
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _reply(self, msg: Any, body: dict[str, Any], view: str, listing: Listing | None = None) -> None:
        if msg.reply:
            await self.nc.publish(msg.reply, self.pager.encode(view, body, listing))

    async def _jobs(self, msg: Any) -> None:
        req: Any = {}
        try:
            req = decode_json(msg.data or b"{}")
            allowed = {"states", "tenant", "account", "user", "partition", "job_ids", "numbers", "array", "limit",
                       "offset", "order", "after", "steps", "specs"}
            unknown = set(req) - allowed
            if unknown:
                raise ValueError(f"unknown query fields {sorted(unknown)}; allowed: {sorted(allowed)}")
            tenant = scope(msg.subject)
            if tenant is not None:
                if req.get("tenant") not in (None, "", tenant):
                    raise ValueError(f"tenant {tenant!r} may list only its own jobs, not {req['tenant']!r}'s")
                req["tenant"] = tenant
                if req.get("job_ids"):
                    req["job_ids"] = tenant_keys(tenant, req["job_ids"])
                if req.get("numbers"):  # its numbers are its own (12 is acme:12: services/domain/job_numbers.py)
                    req["numbers"] = [job_key(tenant, str(n)) for n in req["numbers"]]
            req["limit"] = self.pager.rows("jobs", req.get("limit", 1000))
            body = await self.projection.query_jobs(**req)
            if tenant is not None:
                as_tenant_sees(tenant, body.get("jobs", ()))
        except (ValueError, TypeError) as exc:
            body = {"error": str(exc)}
        await self._reply(msg, body, "jobs", JOBS_BY_QUEUE if isinstance(req, dict) and req.get("order") == "queue"
                          else JOBS)

    async def _job(self, msg: Any) -> None:
        try:
            req = decode_json(msg.data or b"{}")
            page = {"limit": self.pager.rows("job", req.get("limit", 100_000)), "offset": req.get("offset", 0)}
            tenant = scope(msg.subject)
            body = {"job": None}
            for job_id in tenant_keys(tenant, [str(req["job_id"])]) if tenant else [str(req["job_id"])]:
                body = await self.projection.query_job(job_id, tenant=tenant, **page)
                if body["job"] is not None:
                    break
            if tenant is not None and body["job"] is not None:
                as_tenant_sees(tenant, [body["job"], *body["attempts"]])
        except (ValueError, TypeError, KeyError) as exc:
            body = {"error": f"bad request: {exc}"}
        await self._reply(msg, body, "job", EVENTS)
