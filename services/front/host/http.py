"""A small HTTP/1.1 server on asyncio for what a host serves beside the log: ``/metrics`` now, the
dashboard's pages later, on one port (``horizon up --ui-port``, ``horizon service --metrics-port``).

Handlers are mounted by path (``HttpServer.mount``); each gets the request and returns a
``Response`` whose body is bytes, or an async iterator of chunks for a stream that stays open
(server-sent events), sent with chunked transfer encoding. One request per connection is enough
for scrapers and browsers alike (``Connection: close``). It runs in the part's own event loop, so a
handler reads the part's in-memory state between two folds, never in the middle of one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["HttpServer", "Request", "Response", "Handler", "json_response"]

log = logging.getLogger(__name__)

_REASONS = {200: "OK", 204: "No Content", 303: "See Other", 304: "Not Modified", 400: "Bad Request",
            401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 413: "Content Too Large", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable"}
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024  # a POST's body (a form, a small JSON request): nothing here takes more


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes = b""  # a POST's body (Content-Length bytes)

    def cookie(self, name: str) -> str | None:
        """The value of the cookie ``name`` the client sent, if any."""
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


def json_response(body: Any, status: int = 200) -> Response:
    """``body`` as JSON, never cached (an API's answer)."""
    return Response(status, json.dumps(body).encode(), "application/json; charset=utf-8",
                    headers={"Cache-Control": "no-store"})


class HttpServer:
    """``mount(path, handler)`` (a path ending in ``/`` also takes everything under it), then
    ``start()``; ``port`` is the bound port (``0`` asks for a free one). A handler answers GET and
    HEAD, and POST too when mounted with ``methods=("GET", "HEAD", "POST")`` (its body in
    ``Request.body``, at most 64 KiB)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.routes: dict[str, Handler] = {}
        self.methods: dict[str, tuple[str, ...]] = {}
        self.parts: list[Any] = []  # started with the server, in its loop, and stopped before it
        self._server: asyncio.Server | None = None

    def mount(self, path: str, handler: Handler, methods: tuple[str, ...] = ("GET", "HEAD")) -> None:
        if path in self.routes:
            raise ValueError(f"{path} is already served")
        self.routes[path] = handler
        self.methods[path] = methods

    def attach(self, part: Any) -> None:
        """``part.start()`` when the server starts, in its event loop (``serve_in_thread``'s too), and
        ``part.stop()`` before it stops: what its handlers need (the dashboard's connection)."""
        self.parts.append(part)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host  # noqa: S104 (a URL to print)
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        for part in self.parts:
            await part.start()

    async def stop(self) -> None:
        for part in self.parts:
            with contextlib.suppress(Exception):
                await part.stop()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    def _route(self, path: str) -> str | None:
        if path in self.routes:
            return path
        prefixes = [p for p in self.routes if p.endswith("/") and path.startswith(p)]
        return max(prefixes, key=len) if prefixes else None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
                return
            response = await self._respond(head, reader)
            await self._write(writer, response)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, head: bytes, reader: asyncio.StreamReader | None = None) -> Response:
        try:
            lines = head[:_MAX_HEAD].decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
        except ValueError:
            return Response(400, b"bad request\n")
        parts = urlsplit(target)
        route = self._route(parts.path)
        if route is None:
            return Response(404, ("not found; served here: " + ", ".join(sorted(self.routes)) + "\n").encode())
        handler, allowed = self.routes[route], self.methods.get(route, ("GET", "HEAD"))
        if method not in allowed:
            return Response(405, f"{', '.join(allowed)} only\n".encode(), headers={"Allow": ", ".join(allowed)})
        body = b""
        if method == "POST":
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                return Response(400, b"bad Content-Length\n")
            if length < 0 or length > _MAX_BODY:
                return Response(413, f"a body of at most {_MAX_BODY} bytes\n".encode())
            if length and reader is not None:
                try:
                    body = await asyncio.wait_for(reader.readexactly(length), 10.0)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError):
                    return Response(400, b"the body ended early\n")
        try:
            response = await handler(Request(method, parts.path, parse_qs(parts.query), headers, body))
        except Exception:  # a handler's bug is a 500, never the end of the server
            log.exception("HTTP handler for %s failed", parts.path)
            return Response(500, b"internal error\n")
        if method == "HEAD" and isinstance(response.body, bytes):
            response.headers.setdefault("Content-Length", str(len(response.body)))
            response.body = b""
        return response

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, response: Response) -> None:
        status = f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}\r\n"
        headers = {"Content-Type": response.content_type, "Connection": "close", **response.headers}
        if isinstance(response.body, bytes):
            headers.setdefault("Content-Length", str(len(response.body)))
            writer.write((status + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1"))
            writer.write(response.body)
            await writer.drain()
            return
        headers["Transfer-Encoding"] = "chunked"
        writer.write((status + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1"))
        await writer.drain()
        async for chunk in response.body:
            if chunk:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def serve_in_thread(server: HttpServer) -> Callable[[], None]:
    """Start ``server`` on an event loop of its own in a daemon thread (for a host whose main thread
    is not a loop: ``horizon up --processes``); returns what stops it. Raises what ``start`` raised."""
    import threading

    loop = asyncio.new_event_loop()
    started, failed = threading.Event(), []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # noqa: BLE001 (handed to the caller)
            failed.append(exc)
            started.set()
            loop.close()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=run, name="horizon-http", daemon=True)
    thread.start()
    started.wait(10)
    if failed:
        raise failed[0]

    def stop() -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(5)

    return stop
