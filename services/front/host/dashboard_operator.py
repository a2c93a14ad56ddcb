"""The dashboard's operator pages: the audit's verdicts on a job's story (``/api/audit``), the What-if
page (``/api/whatif``) and the operator's actions (``/api/action/cancel|cordon|uncordon``), each the
CLI's own library (services/front/audit/, services/front/sim/whatif/, services/front/client/)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from events import catalogue as c
from events.codec import decode_json
from events.subjects import ADMIN_TENANT, job_key, valid_token
from services.front.audit.config import AuditConfig
from services.front.audit.log import read_log
from services.front.audit.story import job_verdicts
from services.front.client.client import default_user
from services.front.client.node_commands import send_node_command
from services.front.client.requests import cancel_requests
from services.front.host.http import Request, Response, json_response as _json
from services.front.sim import whatif as w

__all__ = ["OperatorPages"]


class _Dashboard(Protocol):
    """What the pages use of the dashboard (services/front/host/dashboard.py)."""

    url: str
    tenant: str | None
    policy: str
    backfill: str
    nc: Any
    log: Any

    def _session(self, request: Request) -> Any: ...

    async def ask(self, view: str, request: dict[str, Any], tenant: str | None = None,
                  timeout_s: float = 5.0) -> dict[str, Any]: ...


class OperatorPages:
    """The pages that read the whole log or act for the operator; one replay of each kind at a time."""

    def __init__(self, dashboard: _Dashboard) -> None:
        self.dashboard = dashboard
        self._audits: dict[tuple[str, int], dict[str, Any]] = {}
        self._audit_lock = asyncio.Lock()
        self.whatif_run: dict[str, Any] = {"state": "idle"}  # the page's `horizon whatif` (one at a time)
        self.whatif_task: asyncio.Task[None] | None = None

    async def audit(self, request: Request) -> Response:
        """The audit's verdict on each decision of the job's story (services/front/audit/: the whole
        log replayed through the five cores, as ``horizon audit --job``), by sequence."""
        d = self.dashboard
        session = d._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        job_id = (request.query.get("id") or [""])[0]
        if d.log is None:
            return _json({"error": "the audit reads the whole log: it needs the operator's connection"}, 503)
        tenant = session.tenant if d.tenant is None else None
        body = await d.ask("job", {"job_id": job_id}, tenant)
        if body.get("job") is None:
            return _json({"error": f"no job {job_id!r}" + (" of yours" if session.tenant else "")}, 404)
        mine = {e["seq"] for e in body.get("events") or []}
        key = job_key(tenant, job_id) if tenant is not None and ":" not in job_id else job_id
        last = int(body.get("last_seq") or 0)
        async with self._audit_lock:  # one replay at a time: each reads and folds the whole log
            cached = self._audits.get((key, last))
            if cached is None:
                cached = await self._replay(key) if tenant is None else await self._replay(key, job_id)
                self._audits = {(key, last): cached}  # the newest only: a log grows
        verdicts = {seq: v for seq, v in cached["verdicts"].items() if int(seq) in mine}
        return _json({"job_id": job_id, "verdicts": verdicts, "decisions": sum(
            1 for v in verdicts.values() if v == "reproduced" or v.startswith("NOT")),
            "reproduced": sum(1 for v in verdicts.values() if v == "reproduced"),
            "mismatches": sum(1 for v in verdicts.values() if v.startswith("NOT")),
            "config": {"policy": d.policy, "backfill_mode": d.backfill}, "records": cached["records"]})

    async def _replay(self, *jobs: str) -> dict[str, Any]:
        records = await read_log(self.dashboard.url)
        config = AuditConfig(policy=self.dashboard.policy, backfill=self.dashboard.backfill)
        verdicts = await asyncio.get_running_loop().run_in_executor(
            None, lambda: job_verdicts(records, config, *jobs))
        return {"verdicts": verdicts, "records": len(records)}

    async def whatif(self, request: Request) -> Response:
        """The What-if page (docs/whatif.md): GET, the last run (its state, progress and comparison);
        POST ``{"set": [...], "from", "to", "add_nodes": [...], "remove_nodes": [...]}`` starts one,
        the same comparison as ``horizon whatif --json``, replayed in a worker thread. Operators
        only: it reads the whole log."""
        d = self.dashboard
        session = d._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        if session.tenant is not None or d.log is None:
            return _json({"error": "what-if replays the whole log: it is for operators"}, 403)
        if request.method != "POST":
            return _json(self.whatif_run)
        if request.headers.get("x-horizon-csrf") != session.csrf:
            return _json({"error": "missing or wrong X-Horizon-CSRF header"}, 403)
        if self.whatif_task is not None and not self.whatif_task.done():
            return _json({"error": "a what-if is already running; wait for it"}, 409)
        try:
            form = decode_json(request.body or b"{}")
            sets = tuple(str(x).strip() for x in form.get("set") or () if str(x).strip())
            add = tuple(str(x).strip() for x in form.get("add_nodes") or () if str(x).strip())
            remove = tuple(str(x).strip() for x in form.get("remove_nodes") or () if str(x).strip())
            span = {k: (str(form[k]).strip() or None) if form.get(k) else None for k in ("from", "to")}
            w.parse_sets(sets)  # a bad key is answered now, not after reading the log
            for spec in add:
                w.parse_add_nodes(spec)
        except (ValueError, TypeError, AttributeError) as exc:  # WhatIfError is a ValueError
            return _json({"error": str(exc) if isinstance(exc, w.WhatIfError) else f"the body: {exc}"}, 400)
        request_echo = {"set": list(sets), "add_nodes": list(add), "remove_nodes": list(remove), **span}
        self.whatif_run = {"state": "running", "request": request_echo, "progress": {}, "started": time.time()}
        self.whatif_task = asyncio.create_task(self._run_whatif(sets, add, remove, span), name="dashboard-whatif")
        return _json(self.whatif_run, 202)

    async def _run_whatif(self, sets: tuple[str, ...], add: tuple[str, ...], remove: tuple[str, ...],
                          span: dict[str, str | None]) -> None:
        d = self.dashboard
        run = self.whatif_run
        progress: dict[str, list[int]] = run["progress"]

        class Tracker:  # what whatif_report's progress bar is given: one task per replay
            def __init__(self, label: str = "reading") -> None:
                self.label = label

            def add(self, label: str, total: int | None = None) -> Tracker:
                progress[label] = [0, total or 0]
                return Tracker(label)

            def update(self, done: int, total: int | None = None) -> None:
                progress[self.label] = [done, total or 0]

        try:
            records = await read_log(d.url, Tracker().update)
            out, _ = await asyncio.get_running_loop().run_in_executor(None, lambda: w.whatif_report(
                records, from_text=span["from"], to_text=span["to"], sets=sets, add_nodes=add, remove=remove,
                policy=d.policy, backfill=d.backfill, bar=Tracker()))
        except Exception as exc:  # noqa: BLE001 - shown on the page, as the CLI prints it in one line
            run.update(state="failed", error=str(exc), finished=time.time())
            return
        run.update(state="done", result=out, finished=time.time())

    async def action(self, request: Request) -> Response:
        d = self.dashboard
        session = d._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        if session.tenant is not None:
            return _json({"error": "operator actions are for operators: a tenant's dashboard is read-only"}, 403)
        if request.headers.get("x-horizon-csrf") != session.csrf:
            return _json({"error": "missing or wrong X-Horizon-CSRF header"}, 403)
        try:
            form = decode_json(request.body or b"{}")
        except ValueError:
            return _json({"error": "the body must be JSON"}, 400)
        what = request.path.rsplit("/", 1)[-1]
        reason = str(form.get("reason") or "from the dashboard")
        if what == "cancel":
            job = str(form.get("job_id") or "")
            if not job:
                return _json({"error": "which job?"}, 400)
            answers = await cancel_requests(d.nc, [job], tenant=ADMIN_TENANT, admin=True, reason=reason,
                                            timeout_s=10.0)
            got = answers.get(job) or []
            if not got:
                return _json({"error": "no answer from the submission service within 10 s"}, 504)
            refused = [a for a in got if a.get("type") == "RequestRejected"]
            return _json({"job_id": job, "answer": got[0].get("type"),
                          "reason": refused[0].get("reason") if refused else None}, 409 if refused else 200)
        if what in ("cordon", "uncordon"):
            node = str(form.get("node") or "")
            if not node or not valid_token(node):
                return _json({"error": "which node?"}, 400)
            return await self._node_command(node, what, reason)
        return _json({"error": f"unknown action {what!r}: cancel, cordon or uncordon"}, 404)

    async def _node_command(self, node: str, action: str, reason: str) -> Response:
        """``horizon node cordon|uncordon NODE``: the same request, answered by inventory."""
        event = c.NodeCommandIssued(ts=time.time(), source="horizon-ui", correlation_id=node, node=node,
                                    action=action, reason=reason, user=default_user())
        answer, _ = await send_node_command(self.dashboard.nc, event, {"NodeCordoned", "NodeUncordoned",
                                                                      "RequestRejected"})
        if answer is None:
            return _json({"error": "no answer from inventory within 10 s"}, 504)
        ok = answer.get("type") != "RequestRejected"
        return _json({"node": node, "answer": answer.get("type"), "reason": answer.get("reason")}, 200 if ok else 409)
