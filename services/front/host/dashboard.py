"""The web dashboard (``horizon ui``, and ``horizon up`` on its UI port): docs/dashboard.md.

A NATS client like the CLI: what it shows comes from the projections' query API
(``horizon.query.queue``, ``gpus``, ``usage``, ``jobs``, ``job``, ``partitions``), the job's output
from its node's agent (``horizon.logs.<node>``), the audit verdicts from the audit's own replay
(``services/front/audit/``). It follows the log (a JetStream reader from near its end; a tenant's
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
import contextlib
import json
import logging
import mimetypes
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import msgspec

from events.codec import decode_json
from events.subjects import tenant_view, valid_token
from services.front.client.accounts import TENANT_VIEWS  # answered per tenant (services/front/host/contract.py)
from services.front.client.output import output_tail
from services.front.host.dashboard_charts import BUCKET_S, Series, charted
from services.front.host.dashboard_operator import OperatorPages
from services.front.host.http import HttpServer, Request, Response, json_response as _json
from services.runtime.log import READ_MODEL_LINGER_S

__all__ = ["Dashboard", "STATIC", "COOKIE"]

log = logging.getLogger("horizon.dashboard")

STATIC = Path(__file__).with_name("ui")  # index.html, app.js, style.css: shipped as package data
COOKIE = "horizon_ui"
QUEUE_ROWS = 500  # the queue view's rows (the first in scheduling order)
DEBOUNCE_S = 0.05  # a burst of events is one refresh
EVERY_S = 0.25  # and refreshes are at least this far apart while a page watches
UNWATCHED_EVERY_S = BUCKET_S / 4  # with no page open: the charts' samples alone (the series keeps 4 a bucket)
HISTORY = 20_000  # records read back at start for the charts
FAILED_LOGIN_S = 1.0  # the answer to a wrong token or password waits this long
# Logged-in browsers kept per user (the operator, each tenant): past it, that user's oldest session
# must log in again, never another user's (a cap over everyone let one tenant's logins end the
# operator's session: issue 31). At most this many times the number of tenants plus one in all.
MAX_SESSIONS_PER_USER = 100
RESTART_S = 1.0  # a log follower that stopped is started again after this pause
STOP_STEP_S = 3.0  # each step of stopping the dashboard, at most
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
        self._stopping = False
        self._web: HttpServer | None = None
        self._has_accounts: bool | None = None  # whether the server checks passwords (tenant logins)
        self.operator = OperatorPages(self)  # the audit, what-if and action pages

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
        web.mount("/api/audit", self.operator.audit)
        web.mount("/api/action/", self.operator.action, methods=("POST",))
        web.mount("/api/whatif", self.operator.whatif, methods=("GET", "HEAD", "POST"))
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
        if self.operator.whatif_task is not None:  # a replay already in its thread finishes there, unread
            steps.append(("whatif", cancel_and_wait(self.operator.whatif_task)))
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
                body = charted(record.data)
            except (msgspec.DecodeError, RecursionError):  # not a JSON object, or nested too deep to read
                continue
            try:
                self.series.event(body, record.time, record.subject)
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
        last = -UNWATCHED_EVERY_S
        while True:
            await self._dirty.wait()
            # a burst is one refresh, and a busy log at most one every EVERY_S: each asks the
            # projections (which bring their tables up to their fold to answer). With no page open,
            # one every UNWATCHED_EVERY_S for the charts' samples (four a second cost an idle
            # horizon up ~3% of its time); a page that opens is answered afresh (_current).
            watched = any(scope.streams for scope in self.scopes.values())
            every = EVERY_S if watched else UNWATCHED_EVERY_S
            await asyncio.sleep(max(DEBOUNCE_S, last + every - loop.time()))
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
        # nobody watches: asked afresh when someone does (a page's first snapshot, or /api/snapshot)
        own.snapshot = self._finish(base, None) if own.streams else None
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
        body["output"] = await output_tail(self.nc, body, tenant if self.tenant is None else None)
        return _json(body)


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
