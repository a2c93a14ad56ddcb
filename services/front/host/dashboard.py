"""The web dashboard (``horizon ui``, and ``horizon up`` on its UI port): docs/dashboard.md.

A NATS client like the CLI: what it shows comes from the projections' query API
(``horizon.query.queue``, ``gpus``, ``usage``, ``jobs``, ``job``, ``partitions``), the job's output
from its node's agent (``horizon.logs.<node>``), the audit verdicts from the audit's own replay
(``services/front/cli/audit.py``). It follows the log (a JetStream reader from near its end; a tenant's
connection, which reads no stream, its feed ``horizon.evt.>``): each batch of events marks the
views stale, they are asked again once (after a short pause that gathers a burst), and the new
snapshot is pushed to every open page over server-sent events (``/api/stream``). Nothing polls.

Who sees what (enforced here, never only in the page):

* without accounts every client is trusted, as on the bus itself: the page is the operator's;
* with ``login``, a browser logs in with the operator's token (printed by ``horizon ui``, kept in
  ``DIR/auth/dashboard-token`` by ``horizon up --auth``) or as a tenant, with its name and NATS
  password (checked by connecting to the server as that tenant). A tenant's page is answered from
  the tenant-scoped queries (``horizon.query.<view>.<tenant>``, what its own account imports),
  the cluster map with other tenants' jobs blanked, fair share filtered to its associations;
* a dashboard connected with a tenant's own URL (``tenant``) shows that tenant's view only: the
  server's accounts set what it can ask.

Operator actions (cancel a job, cordon or uncordon a node) are the CLI's own requests
(``JobCancelRequested`` on ``horizon.in._admin.cancel``, ``NodeCommandIssued`` on
``horizon.in._admin.node``), sent only for an operator's session with its CSRF token.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import mimetypes
import secrets
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from events import catalogue as c
from events.codec import decode_json
from events.subjects import ADMIN_TENANT, admin_subject, job_key, tenant_view, valid_token
from services.front.host.http import HttpServer, Request, Response
from services.runtime.log import READ_MODEL_LINGER_S

__all__ = ["Dashboard", "STATIC", "COOKIE"]

log = logging.getLogger("horizon.dashboard")

STATIC = Path(__file__).with_name("ui")  # index.html, app.js, style.css: shipped as package data
COOKIE = "horizon_ui"
TENANT_VIEWS = ("jobs", "job", "queue", "allocations")  # answered per tenant (services/front/host/contract.py)
BUCKET_S = 5.0  # charts: one point per 5 s of log time
BUCKETS = 240  # 20 minutes of them
QUEUE_ROWS = 500  # the queue view's rows (the first in scheduling order)
DEBOUNCE_S = 0.05  # a burst of events is one refresh
EVERY_S = 0.25  # and refreshes are at least this far apart
HISTORY = 20_000  # records read back at start for the charts
FAILED_LOGIN_S = 1.0  # the answer to a wrong token or password waits this long
# Logged-in browsers kept per user (the operator, each tenant): past it, that user's oldest session
# must log in again, never another user's (a cap over everyone let one tenant's logins end the
# operator's session: issue 31). At most this many times the number of tenants plus one in all.
MAX_SESSIONS_PER_USER = 100
RESTART_S = 1.0  # a log follower that stopped is started again after this pause
STOP_STEP_S = 3.0  # each step of stopping the dashboard, at most
_JSON = "application/json; charset=utf-8"
_LIVE = ("SCHEDULED", "RUNNING")


@dataclass
class Session:
    tenant: str | None  # None: the operator
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(16))


@dataclass
class Scope:
    """What one audience (the operator, or one tenant) is shown, and its open streams."""

    tenant: str | None
    snapshot: dict[str, Any] | None = None
    streams: set[asyncio.Queue[bytes | None]] = field(default_factory=set)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


class Series:
    """The charts' data, by 5 s buckets of log time: decisions recorded (the same rule as the
    decisions table, projections/jobs.py), queue length and GPU use at each refresh, and the waits
    of the jobs placed (accepted, or requeued, to scheduled)."""

    def __init__(self) -> None:
        self.decisions: dict[int, int] = {}
        self.samples: deque[dict[str, Any]] = deque(maxlen=BUCKETS * 4)
        self.waits: deque[tuple[float, float, str | None]] = deque(maxlen=20_000)
        self.accepted: dict[str, tuple[float, str | None]] = {}  # job -> (accepted or last ended, tenant)
        self.last_ts = 0.0

    def event(self, body: dict[str, Any], ts: float, subject: str) -> None:
        self.last_ts = max(self.last_ts, ts)
        kind = body.get("type")
        source = str(body.get("source") or "")
        if body.get("basis_seq") is not None and source and not source.startswith(("agent", "clock")):
            bucket = int(ts // BUCKET_S)
            self.decisions[bucket] = self.decisions.get(bucket, 0) + 1
            for old in [b for b in self.decisions if b < bucket - BUCKETS]:
                del self.decisions[old]
        job = body.get("job_id")
        if not isinstance(job, str):
            return
        if kind == "JobAccepted":
            spec = body.get("spec") or {}
            self.accepted[job] = (ts, spec.get("tenant") if isinstance(spec, dict) else None)
        elif kind == "JobScheduled" and job in self.accepted:
            since, tenant = self.accepted[job]
            self.waits.append((ts, max(0.0, ts - since), tenant))
        elif kind in ("JobRequeued", "JobPreempted") and job in self.accepted:
            self.accepted[job] = (ts, self.accepted[job][1])
        elif kind in ("JobSucceeded", "JobFailed", "JobCancelled", "JobTimedOut", "JobRejected"):
            self.accepted.pop(job, None)

    def sample(self, ts: float, queued: dict[str | None, int], busy: int, total: int) -> None:
        self.samples.append({"t": ts, "queued": queued, "busy": busy, "total": total})

    def view(self, tenant: str | None) -> dict[str, Any]:
        end = int((self.last_ts or time.time()) // BUCKET_S)
        start = end - BUCKETS + 1
        decisions = [[b * BUCKET_S, self.decisions.get(b, 0) / BUCKET_S] for b in range(start, end + 1)]
        by_bucket: dict[int, dict[str, Any]] = {}
        for s in self.samples:
            by_bucket[int(s["t"] // BUCKET_S)] = s
        queue, util = [], []
        for b, s in sorted(by_bucket.items()):
            if b < start:
                continue
            queue.append([s["t"], s["queued"].get(tenant, 0) if tenant is not None else s["queued"].get(None, 0)])
            util.append([s["t"], s["busy"] / s["total"] if s["total"] else 0.0])
        waits: dict[int, list[float]] = {}
        for ts, wait, who in self.waits:
            if tenant is None or who == tenant:
                waits.setdefault(int(ts // BUCKET_S), []).append(wait)
        wait_rows = [[b * BUCKET_S, _pct(w, 0.5), _pct(w, 0.9), _pct(w, 0.99), len(w)]
                     for b, w in sorted(waits.items()) if b >= start]
        return {"bucket_s": BUCKET_S, "from": start * BUCKET_S, "to": (end + 1) * BUCKET_S,
                "decisions": decisions, "queue": queue, "utilisation": util, "wait": wait_rows}


class Dashboard:
    """The dashboard's server side: mount it on an ``HttpServer`` (``mount``), then ``start`` it in
    that server's event loop (``HttpServer.attach`` does both at the server's start)."""

    def __init__(self, url: str, *, login: bool = False, tenant: str | None = None, token: str | None = None,
                 policy: str = "multifactor", backfill: str = "easy") -> None:
        self.url = url
        self.login = login
        self.tenant = tenant  # the connection is this tenant's own
        self.token = token or secrets.token_urlsafe(24)
        self.policy, self.backfill = policy, backfill
        self.nc: Any = None
        self.log: Any = None  # the JetStream log, when this connection may read it
        self.sessions: dict[str, Session] = {}
        self._user_sessions: dict[str | None, dict[str, None]] = {}  # user -> its session ids, oldest first
        self.scopes: dict[str | None, Scope] = {}
        self.series = Series()
        self.ready = asyncio.Event()
        self._dirty = asyncio.Event()
        self._target_seq = 0  # the last record the follower has seen: the standing's views must show it
        self._handled_seq = 0  # the last record the follower handled: a new follower starts after it
        self._target_evt = 0  # the last event (horizon.evt.>): the jobs read model's views must show it
        self._tasks: list[asyncio.Task[Any]] = []
        self._follower: Any = None
        self._sub: Any = None
        self._audits: dict[tuple[str, int], dict[str, Any]] = {}
        self._audit_lock = asyncio.Lock()
        self._stopping = False
        self._web: HttpServer | None = None
        self._has_accounts: bool | None = None  # whether the server checks passwords (tenant logins)
        self._whatif_run: dict[str, Any] = {"state": "idle"}  # the page's `horizon whatif` (one at a time)
        self._whatif_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ life

    def mount(self, web: HttpServer) -> None:
        self._web = web
        web.mount("/", self._static)
        web.mount("/login", self._login, methods=("GET", "HEAD", "POST"))
        web.mount("/logout", self._logout, methods=("POST",))
        web.mount("/api/me", self._me)
        web.mount("/api/snapshot", self._snapshot)
        web.mount("/api/stream", self._stream)
        web.mount("/api/job", self._job)
        web.mount("/api/audit", self._audit)
        web.mount("/api/action/", self._action, methods=("POST",))
        web.mount("/api/whatif", self._whatif, methods=("GET", "HEAD", "POST"))
        web.attach(self)

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._run(), name="dashboard"))

    async def stop(self) -> None:
        self._stopping = True
        for scope in self.scopes.values():
            for queue in list(scope.streams):
                queue.put_nowait(None)
        from services.runtime.cancel import cancel_and_wait

        # Each step within STOP_STEP_S: `horizon up` must exit on Ctrl-C whatever a task or the connection
        # does meanwhile (seen twice under the full suite's load: up, its stack stopped, still running
        # after 60 s; not reproduced alone), so a step that outlasts it is logged and left behind.
        steps: list[tuple[str, Any]] = [(task.get_name(), cancel_and_wait(task)) for task in self._tasks]
        if self._whatif_task is not None:  # a replay already in its thread finishes there, unread
            steps.append(("whatif", cancel_and_wait(self._whatif_task)))
        if self._follower is not None:
            steps.append(("log follower", self._follower.stop()))
        if self.nc is not None:
            steps.append(("connection", self.nc.close()))
        for what, step in steps:
            try:
                await asyncio.wait_for(step, STOP_STEP_S)
            except asyncio.TimeoutError:
                log.warning("dashboard: stopping its %s took over %g s; left behind", what, STOP_STEP_S)
            except Exception:  # noqa: BLE001 - stopping: what failed is gone either way
                pass

    async def _run(self) -> None:
        from services.runtime.jetstream import JetStreamLog, connect

        self.nc = await connect(self.url, name="horizon-ui")
        self._tasks.append(asyncio.create_task(self._refresher(), name="dashboard-refresh"))
        if self.tenant is None:
            import nats.js.errors

            js_log = JetStreamLog(self.nc)
            while True:
                try:
                    last = await js_log.last_seq()
                except nats.js.errors.NotFoundError:  # the stack is still making its streams
                    await asyncio.sleep(0.2)
                    continue
                except Exception as exc:  # noqa: BLE001 (no JetStream for this user: the event subjects)
                    log.info("dashboard: the log cannot be read (%s); following the event subjects", exc)
                    break
                self.log = js_log
                self._target_seq = last
                self._handled_seq = max(1, last - HISTORY + 1) - 1
                self._follower = await js_log.follow(self._records, from_seq=max(1, last - HISTORY + 1),
                                                     linger_s=READ_MODEL_LINGER_S)
                self._tasks.append(asyncio.create_task(self._keep_following(js_log), name="dashboard-follow"))
                break
        if self.log is None:
            self._sub = await self.nc.subscribe("horizon.evt.>", cb=self._feed)
        self._dirty.set()
        self.ready.set()

    async def _keep_following(self, js_log: Any) -> None:
        """Watch the log follower: one that ends (whatever ended it) is logged and started again from
        the record after the last batch it handled, so the page never silently stops following."""
        while not self._stopping:
            ending = asyncio.ensure_future(self._follower.wait())
            try:
                await asyncio.wait({ending})
            except asyncio.CancelledError:  # the dashboard stops
                ending.cancel()
                raise
            why = "it was cancelled" if ending.cancelled() else repr(ending.exception())
            log.warning("dashboard: the log follower stopped (%s); following again from seq %d", why,
                        self._handled_seq + 1)
            with contextlib.suppress(Exception):
                await self._follower.stop()
            await asyncio.sleep(RESTART_S)
            while not self._stopping:
                try:
                    self._follower = await js_log.follow(self._records, from_seq=self._handled_seq + 1,
                                                         linger_s=READ_MODEL_LINGER_S)
                    break
                except Exception as exc:  # noqa: BLE001 - the server away: try again
                    log.warning("dashboard: cannot follow the log (%s); trying again", exc)
                    await asyncio.sleep(RESTART_S)

    async def _records(self, batch: list[Any]) -> None:
        for record in batch:
            # Any body the intake stored reaches here as it was sent (a tenant's input on
            # horizon.in.>): what cannot be read, or charted, is skipped, never the end of the follower.
            try:
                body = decode_json(record.data)
                if isinstance(body, dict):
                    self.series.event(body, record.time, record.subject)
            except ValueError:
                continue
            except Exception:  # noqa: BLE001 - a chart misses one record
                log.warning("dashboard: cannot chart seq %d on %s", record.seq, record.subject, exc_info=True)
        self._handled_seq = batch[-1].seq
        self._target_seq = max(self._target_seq, batch[-1].seq)
        events = [r.seq for r in batch if r.subject.startswith("horizon.evt.")]
        if events:
            self._target_evt = max(self._target_evt, events[-1])
        self._dirty.set()

    async def _feed(self, msg: Any) -> None:
        try:
            body = decode_json(msg.data)
            if isinstance(body, dict):
                self.series.event(body, float(body.get("ts") or time.time()), msg.subject)
        except (ValueError, TypeError):  # not JSON, too deep, or a "ts" that is no number
            return
        self._dirty.set()

    # ------------------------------------------------------------------ queries

    def _subject(self, view: str, tenant: str | None) -> str:
        """The query's subject for an audience: a tenant logged in asks its scoped subject (the one its
        own account imports); a tenant's own connection asks the plain one (its import scopes it)."""
        if tenant is not None and self.tenant is None and view in TENANT_VIEWS:
            return f"horizon.query.{view}.{tenant}"
        return f"horizon.query.{view}"

    async def ask(self, view: str, request: dict[str, Any], tenant: str | None = None,
                  timeout_s: float = 5.0) -> dict[str, Any]:
        import nats.errors

        try:
            msg = await self.nc.request(self._subject(view, tenant), json.dumps(request).encode(), timeout=timeout_s)
        except nats.errors.NoRespondersError:
            return {"error": f"nothing serves horizon.query.{view} for this connection"}
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return {"error": f"horizon.query.{view} did not answer within {timeout_s:g} s"}
        try:
            body = decode_json(msg.data)
        except ValueError as exc:
            return {"error": f"horizon.query.{view} answered what cannot be read: {exc}"}
        return body if isinstance(body, dict) else {"error": "not an object"}

    async def ask_all(self, view: str, request: dict[str, Any], key: str, tenant: str | None = None,
                      most: int = 100_000) -> dict[str, Any]:
        """A listing followed page by page (each answer fits in one message: projections/paging.py),
        at most ``most`` rows: the first page's answer with every page's rows under ``key``."""
        first: dict[str, Any] | None = None
        rows: list[Any] = []
        ask = dict(request)
        while True:
            page = await self.ask(view, ask, tenant)
            if "error" in page:
                return page if first is None else {**first, key: rows}
            first = first or page
            rows.extend(page.get(key) or [])
            following = page.get("next")
            if not following or not page.get(key) or len(rows) >= most:
                return {**first, key: rows[:most]}
            ask.update(following)

    async def _refresher(self) -> None:
        loop = asyncio.get_running_loop()
        last = -EVERY_S
        while True:
            await self._dirty.wait()
            # a burst is one refresh, and a busy log at most one every EVERY_S: each asks the
            # projections (which bring their tables up to their fold to answer)
            await asyncio.sleep(max(DEBOUNCE_S, last + EVERY_S - loop.time()))
            last = loop.time()
            self._dirty.clear()
            try:
                await self._refresh()
            except Exception:  # noqa: BLE001 (the next event tries again)
                log.exception("dashboard refresh failed")

    async def _refresh(self) -> None:
        targets = {"gpus": self._target_seq, "queue": self._target_seq, "running": self._target_evt}
        base = None
        for _attempt in range(40):  # the views catch up with the records that woke us (at most ~2 s)
            base = await self._views(None)
            behind = [k for k, target in targets.items() if isinstance(base.get(k), dict)
                      and "error" not in base[k] and int(base[k].get("last_seq") or 0) < target]
            if not behind or self.log is None:
                break
            await asyncio.sleep(0.05)
        assert base is not None
        gpus = base.get("gpus") or {}
        counts = gpus.get("counts") or {}
        queued: dict[str | None, int] = {None: int((base.get("queue") or {}).get("total") or 0)}
        for row in (base.get("queue") or {}).get("jobs") or []:
            if row.get("state") == "PENDING":
                queued[row.get("tenant")] = queued.get(row.get("tenant"), 0) + 1
        if isinstance(gpus.get("counts"), dict):
            busy = int(counts.get("busy", 0))
            total = sum(int(v) for v in counts.values())
        else:  # no cluster map for this connection: its own GPUs in use
            busy = sum(len(d) for n in gpus.get("nodes") or [] for d in [n.get("gpus") or []])
            total = busy
        self.series.sample(self.series.last_ts or time.time(), queued, busy, total)  # log time of the newest record
        own = self.scopes.setdefault(None, Scope(None))
        own.snapshot = self._finish(base, None)
        self._push(own)
        for tenant, scope in list(self.scopes.items()):
            if tenant is None:
                continue
            if not scope.streams:  # nobody watches: asked afresh when someone does
                scope.snapshot = None
                continue
            scope.snapshot = self._finish(await self._views(tenant, base), tenant)
            self._push(scope)

    async def _views(self, tenant: str | None, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every view of the page, as ``tenant`` may see it (None: the connection's own view)."""
        asks: dict[str, Any] = {
            "queue": self.ask_all("queue", {"limit": QUEUE_ROWS}, "jobs", tenant, QUEUE_ROWS),
            "running": self.ask_all("jobs", {"states": list(_LIVE), "limit": QUEUE_ROWS}, "jobs", tenant, QUEUE_ROWS),
        }
        if base is None and self.tenant is None:
            asks.update(gpus=self.ask_all("gpus", {}, "nodes"), usage=self.ask_all("usage", {}, "rows"),
                        partitions=self.ask_all("partitions", {}, "partitions"))
        elif base is None:  # a tenant's own connection: its account imports no cluster-wide view
            asks["gpus"] = self._own_gpus(None)
        else:
            asks["usage"] = self.ask_all("usage", {"tenant": tenant}, "rows")
        answers = dict(zip(asks, await asyncio.gather(*asks.values())))
        if base is not None:
            for row in (answers.get("usage") or {}).get("rows") or []:
                row["tenants"] = [t for t in row.get("tenants") or [] if t == tenant]  # not who else charges it
            answers["gpus"] = _blank_others(base.get("gpus") or {}, tenant)
            answers["partitions"] = base.get("partitions") or {}
        elif "error" in (answers.get("gpus") or {}):
            answers["gpus"] = await self._own_gpus(tenant)
        return answers

    async def _own_gpus(self, tenant: str | None) -> dict[str, Any]:
        """Without the cluster map (a tenant's connection): the GPUs its own jobs hold, by node."""
        body = await self.ask_all("allocations", {}, "allocations", tenant)
        nodes: dict[str, list[dict[str, Any]]] = {}
        for row in body.get("allocations") or []:
            for device in row.get("device_ids") or []:
                nodes.setdefault(row["node"], []).append({
                    "id": device, "type": "", "numa": 0, "state": "busy", "job_id": row["job_id"],
                    "tenant": row.get("tenant"), "why": ""})
        return {"nodes": [{"node": n, "state": "", "gpus": g, "held_for": []} for n, g in sorted(nodes.items())],
                "partial": "the cluster map is the operator's: these are the GPUs your jobs hold",
                "last_seq": body.get("last_seq", 0)}

    def _finish(self, views: dict[str, Any], tenant: str | None) -> dict[str, Any]:
        audience = tenant or self.tenant
        return {**views, "series": self.series.view(audience), "tenant": audience, "at": time.time(),
                "seq": self._target_seq}

    def _push(self, scope: Scope) -> None:
        if not scope.streams or scope.snapshot is None:
            return
        data = b"event: snapshot\ndata: " + json.dumps(scope.snapshot).encode() + b"\n\n"
        for queue in list(scope.streams):
            if queue.qsize() > 4:  # a slow page: it gets the newest only
                while not queue.empty():
                    queue.get_nowait()
            queue.put_nowait(data)

    # ------------------------------------------------------------------ sessions

    def _session(self, request: Request) -> Session | None:
        if not self.login:
            # open to whoever reaches the port, but by its own name: a page of another site whose
            # name was made to point at 127.0.0.1 (DNS rebinding) is not let in
            return Session(self.tenant, csrf="open") if self._our_host(request) else None
        sid = request.cookie(COOKIE)
        return self.sessions.get(sid) if sid else None

    def _our_host(self, request: Request) -> bool:
        bound = self._web.host if self._web is not None else "127.0.0.1"
        if bound in ("", "0.0.0.0", "::"):  # noqa: S104 (every interface: any name may reach it)
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        return name in ("127.0.0.1", "localhost", "[::1]", bound, f"[{bound}]")

    def _new_session(self, tenant: str | None) -> Response:
        user = tenant if self.tenant is None else self.tenant
        own = self._user_sessions.setdefault(user, {})
        while len(own) >= MAX_SESSIONS_PER_USER:  # this user's oldest goes (dicts keep their order)
            oldest = next(iter(own))
            del own[oldest]
            self.sessions.pop(oldest, None)
        sid = secrets.token_urlsafe(24)
        self.sessions[sid] = Session(user)
        own[sid] = None
        cookie = f"{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict"
        return Response(303, b"", headers={"Location": "/", "Set-Cookie": cookie})

    async def _login(self, request: Request) -> Response:
        if request.method != "POST":
            token = (request.query.get("token") or [""])[0]
            if token and secrets.compare_digest(token, self.token):
                return self._new_session(None)
            return await self._file("index.html")
        form = {k: v[0] for k, v in parse_qs(request.body.decode("utf-8", "replace")).items()}
        if form.get("token"):
            if secrets.compare_digest(form["token"], self.token):
                return self._new_session(None)
            await asyncio.sleep(FAILED_LOGIN_S)  # a guesser gets one try a second per connection
            return _json({"error": "wrong token"}, 401)
        tenant, password = form.get("tenant", ""), form.get("password", "")
        if self.tenant is not None or not self.login or not await self._accounts():
            return _json({"error": "this dashboard logs in with its token only (tenants log in where the "
                                   "server has accounts)"}, 400)
        if not tenant or not valid_token(tenant) or tenant.startswith("_") or not password:
            return _json({"error": "give a tenant and its password"}, 400)
        nc = await self._tenant_connection(tenant, password)
        if nc is None:
            await asyncio.sleep(FAILED_LOGIN_S)
            return _json({"error": f"the server did not accept tenant {tenant!r} with that password"}, 401)
        with contextlib.suppress(Exception):
            await nc.close()  # it proved the password; the views are asked on the tenant's scoped subjects
        return self._new_session(tenant)

    async def _accounts(self) -> bool:
        """Whether the server checks passwords: one without accounts lets anyone in under any name,
        so a tenant's password would prove nothing there (asked once, with a name nobody has)."""
        if self._has_accounts is None:
            probe = await self._tenant_connection(f"nobody-{secrets.token_hex(8)}", secrets.token_urlsafe(16))
            if probe is not None:
                with contextlib.suppress(Exception):
                    await probe.close()
            self._has_accounts = probe is None
        return self._has_accounts

    async def _tenant_connection(self, tenant: str, password: str) -> Any:
        """A connection as the tenant, made by the server itself: it checks the password."""
        from urllib.parse import quote, urlsplit, urlunsplit

        from services.runtime.jetstream import connect

        first = urlsplit(self.url.split(",")[0].strip())
        host = first.hostname or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        netloc = f"{quote(tenant, safe='')}:{quote(password, safe='')}@{host}" + (f":{first.port}" if first.port else "")
        try:
            return await connect(urlunsplit((first.scheme, netloc, "", "", "")), name=f"horizon-ui-{tenant}",
                                 connect_timeout_s=3.0, max_attempts=1)
        except Exception:  # noqa: BLE001 (refused: a wrong name or password)
            return None

    async def _logout(self, request: Request) -> Response:
        sid = request.cookie(COOKIE)
        session = self.sessions.pop(sid, None) if sid else None
        if session is not None:
            self._user_sessions.get(session.tenant, {}).pop(sid, None)  # type: ignore[arg-type]
        return Response(303, b"", headers={"Location": "/", "Set-Cookie": f"{COOKIE}=; Path=/; Max-Age=0"})

    # ------------------------------------------------------------------ pages and API

    async def _static(self, request: Request) -> Response:
        name = request.path.lstrip("/") or "index.html"
        return await self._file(name)

    async def _file(self, name: str) -> Response:
        path = (STATIC / name).resolve()
        if STATIC.resolve() not in path.parents or not path.is_file():
            served = ", ".join(sorted(self._web.routes)) if self._web is not None else "/"
            return Response(404, f"not found; served here: {served}\n".encode())
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        return Response(200, path.read_bytes(), kind, headers={"Cache-Control": "no-cache"})

    async def _me(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return _json({"login": True, "tenants": self.tenant is None and await self._accounts()}, 401)
        return _json({"tenant": session.tenant, "operator": session.tenant is None, "csrf": session.csrf,
                      "login": self.login, "ready": self.ready.is_set(), "policy": self.policy})

    def _scope(self, session: Session) -> Scope:
        return self.scopes.setdefault(session.tenant if self.tenant is None else None, Scope(session.tenant))

    async def _current(self, session: Session) -> dict[str, Any]:
        scope = self._scope(session)
        if scope.snapshot is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.ready.wait(), 10.0)
            if not self.ready.is_set():
                return {"error": "not connected to NATS yet"}
            tenant = scope.tenant if self.tenant is None else None
            if tenant is None:
                views = await self._views(None)
            else:
                views = await self._views(tenant, await self._views(None))
            scope.snapshot = self._finish(views, tenant)
        return scope.snapshot

    async def _snapshot(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        return _json(await self._current(session))

    async def _stream(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        scope = self._scope(session)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        first = await self._current(session)
        queue.put_nowait(b"event: snapshot\ndata: " + json.dumps(first).encode() + b"\n\n")
        scope.streams.add(queue)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b"retry: 1000\n\n"
                while not self._stopping:
                    try:
                        item = await asyncio.wait_for(queue.get(), 15.0)
                    except asyncio.TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    if item is None:
                        return
                    yield item
            finally:
                scope.streams.discard(queue)

        return Response(200, events(), "text/event-stream; charset=utf-8",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _job(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        job_id = (request.query.get("id") or [""])[0]
        if not job_id:
            return _json({"error": "which job? /api/job?id=JOB"}, 400)
        tenant = session.tenant if self.tenant is None else None
        body = await self.ask("job", {"job_id": job_id}, tenant)
        if "error" in body:
            return _json(body, 502)
        if body.get("job") is None:
            return _json({"error": f"no job {job_id!r}" + (" of yours" if session.tenant else "")}, 404)
        body["output"] = await self._output(body, tenant)
        return _json(body)

    async def _output(self, body: dict[str, Any], tenant: str | None) -> dict[str, Any]:
        """The tail of the job's latest attempt's standard output, from its node's agent."""
        import nats.errors

        row = body["job"]
        attempts = {a["attempt"]: a for a in body.get("attempts") or []}
        found = attempts.get(row.get("attempt") or 0)
        node = ((found or {}).get("node") or "").split(",")[0]
        if not node:
            return {"text": "", "note": "it has not run yet"}
        subject = f"horizon.logs.{node}" + (f".{tenant}" if tenant is not None and self.tenant is None else "")
        ask = {"job_id": row["job_id"], "attempt": row["attempt"], "stream": "stdout", "offset": -4096}
        try:
            msg = await self.nc.request(subject, json.dumps(ask).encode(), timeout=3)
            answer = decode_json(msg.data)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, ValueError):
            return {"text": "", "note": f"the agent of {node} does not answer"}
        if "error" in answer:
            return {"text": "", "note": str(answer["error"])}
        return {"text": base64.b64decode(answer.get("data") or "").decode("utf-8", "replace"), "node": node,
                "size": answer.get("size")}

    async def _audit(self, request: Request) -> Response:
        """The audit's verdict on each decision of the job's story (services/front/cli/audit.py: the whole
        log replayed through the five cores, as ``horizon audit --job``), by sequence."""
        session = self._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        job_id = (request.query.get("id") or [""])[0]
        if self.log is None:
            return _json({"error": "the audit reads the whole log: it needs the operator's connection"}, 503)
        tenant = session.tenant if self.tenant is None else None
        body = await self.ask("job", {"job_id": job_id}, tenant)
        if body.get("job") is None:
            return _json({"error": f"no job {job_id!r}" + (" of yours" if session.tenant else "")}, 404)
        mine = {e["seq"] for e in body.get("events") or []}
        key = job_key(tenant, job_id) if tenant is not None and ":" not in job_id else job_id
        last = int(body.get("last_seq") or 0)
        async with self._audit_lock:  # one replay at a time: each reads and folds the whole log
            cached = self._audits.get((key, last))
            if cached is None:
                cached = await self._replay(key) if tenant is None else await self._replay(key, fallback=job_id)
                self._audits = {(key, last): cached}  # the newest only: a log grows
        verdicts = {seq: v for seq, v in cached["verdicts"].items() if int(seq) in mine}
        return _json({"job_id": job_id, "verdicts": verdicts, "decisions": sum(
            1 for v in verdicts.values() if v == "reproduced" or v.startswith("NOT")),
            "reproduced": sum(1 for v in verdicts.values() if v == "reproduced"),
            "mismatches": sum(1 for v in verdicts.values() if v.startswith("NOT")),
            "config": {"policy": self.policy, "backfill_mode": self.backfill}, "records": cached["records"]})

    async def _replay(self, key: str, fallback: str | None = None) -> dict[str, Any]:
        from services.front.cli.audit import AuditConfig, audit_cores, job_story, read_log, story_events
        from services.runtime.replay import audit, concerns

        records = await read_log(self.url)
        config = AuditConfig(policy=self.policy, backfill=self.backfill)

        def run() -> dict[str, Any]:
            for job in (key, fallback):
                if job is None:
                    continue
                mine = story_events(records, job)
                if not mine:
                    continue
                report = audit(records, audit_cores(config, records), select=lambda e: concerns(e, job))
                story = job_story(mine, job, report, False)
                return {"verdicts": {str(line["seq"]): line["verdict"] for line in story}, "records": len(records)}
            return {"verdicts": {}, "records": len(records)}

        return await asyncio.get_running_loop().run_in_executor(None, run)

    async def _whatif(self, request: Request) -> Response:
        """The What-if page (docs/whatif.md): GET, the last run (its state, progress and comparison);
        POST ``{"set": [...], "from", "to", "add_nodes": [...], "remove_nodes": [...]}`` starts one,
        the same comparison as ``horizon whatif --json``, replayed in a worker thread. Operators
        only: it reads the whole log."""
        session = self._session(request)
        if session is None:
            return _json({"error": "log in first"}, 401)
        if session.tenant is not None or self.log is None:
            return _json({"error": "what-if replays the whole log: it is for operators"}, 403)
        if request.method != "POST":
            return _json(self._whatif_run)
        if request.headers.get("x-horizon-csrf") != session.csrf:
            return _json({"error": "missing or wrong X-Horizon-CSRF header"}, 403)
        if self._whatif_task is not None and not self._whatif_task.done():
            return _json({"error": "a what-if is already running; wait for it"}, 409)
        from services.front.sim import whatif as w

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
        self._whatif_run = {"state": "running", "request": request_echo, "progress": {}, "started": time.time()}
        self._whatif_task = asyncio.create_task(self._run_whatif(sets, add, remove, span), name="dashboard-whatif")
        return _json(self._whatif_run, 202)

    async def _run_whatif(self, sets: tuple[str, ...], add: tuple[str, ...], remove: tuple[str, ...],
                          span: dict[str, str | None]) -> None:
        from services.front.cli.audit import read_log
        from services.front.cli.whatif import whatif_report

        run = self._whatif_run
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
            records = await read_log(self.url, Tracker().update)
            out, _ = await asyncio.get_running_loop().run_in_executor(None, lambda: whatif_report(
                records, from_text=span["from"], to_text=span["to"], sets=sets, add_nodes=add, remove=remove,
                policy=self.policy, backfill=self.backfill, bar=Tracker()))
        except Exception as exc:  # noqa: BLE001 - shown on the page, as the CLI prints it in one line
            run.update(state="failed", error=str(exc), finished=time.time())
            return
        run.update(state="done", result=out, finished=time.time())

    async def _action(self, request: Request) -> Response:
        session = self._session(request)
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
            from services.front.cli.requests import cancel_requests

            answers = await cancel_requests(self.nc, [job], tenant=ADMIN_TENANT, admin=True, reason=reason,
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
        from services.front.client.client import await_answer, default_user, publish_input

        event = c.NodeCommandIssued(ts=time.time(), source="horizon-ui", correlation_id=node, node=node,
                                    action=action, reason=reason, user=default_user())
        sub = await self.nc.subscribe(f"horizon.evt.inventory.*.{node}")
        try:
            seq = await publish_input(self.nc, admin_subject("node"), event,
                                      msg_id=f"node/{node}/{action}/{uuid.uuid4().hex}")
            deadline = asyncio.get_running_loop().time() + 10.0
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                answer = await await_answer(sub, {"NodeCordoned", "NodeUncordoned", "RequestRejected"}, left)
                if answer is None:
                    break
                if answer.get("causation_id") == f"seq:{seq}":
                    ok = answer.get("type") != "RequestRejected"
                    return _json({"node": node, "answer": answer.get("type"), "reason": answer.get("reason")},
                                 200 if ok else 409)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return _json({"error": "no answer from inventory within 10 s"}, 504)


def _blank_others(gpus: dict[str, Any], tenant: str | None) -> dict[str, Any]:
    """The cluster map as ``tenant`` may see it: every GPU's state, but the job and tenant only on
    its own (another tenant's job is "another tenant's")."""
    out = dict(gpus)
    nodes = []
    for node in gpus.get("nodes") or []:
        devices = [{**d, "job_id": tenant_view(tenant, d["job_id"])} if tenant is not None and d.get("tenant") == tenant
                   and d.get("job_id") else d if d.get("tenant") == tenant
                   else {**d, "job_id": None, "tenant": None, "other": d.get("state") == "busy"}
                   for d in node.get("gpus") or []]
        own = [tenant_view(tenant, j) for j in node.get("held_for") or [] if tenant and j.startswith(f"{tenant}:")]
        nodes.append({**node, "gpus": devices, "held_for": own})
    out["nodes"] = nodes
    return out


def _json(body: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(body).encode(), _JSON, headers={"Cache-Control": "no-store"})
