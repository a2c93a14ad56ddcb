"""A small asyncio client of the Kubernetes API: what Horizon's Kubernetes backend and quota provider
need, over stdlib ``ssl`` and asyncio streams (no Kubernetes client library).

* ``load_kubeconfig(path, context=None)``: a kubeconfig file (YAML) as ``KubeConfig``: the server, its
  CA (``certificate-authority`` file or ``-data``), the user's client certificate and key (file or
  ``-data``), a bearer ``token`` (or ``tokenFile``), ``insecure-skip-tls-verify``, and the context's
  namespace. ``in_cluster()``: a pod's service account, for a backend that runs inside the cluster.
* ``KubeAPI``: one HTTP/1.1 request per connection (``Connection: close``; JSON in and out):
  ``get``, ``list`` (label and field selectors; the list's ``resourceVersion`` comes with it),
  ``create``, ``delete`` (a grace period, a precondition on the UID), ``patch`` (merge patch, or a
  status subresource's), ``bind`` (a pod's ``Binding`` subresource: what a scheduler does), ``logs``
  and ``watch`` (``?watch=1`` from a resource version: ``(type, object)`` as the server sends them).
* ``Mirror``: a list then a watch of one collection (pods of a namespace, nodes), kept as a dict by
  name, relisted when the watch ends or its resource version is gone (``410``); ``until`` waits for a
  predicate over it. Readers share one mirror instead of polling.
* Errors: ``KubeError`` (the server's status: ``code``, ``reason``, ``message``), ``KubeNotFound``
  (404), ``KubeConflict`` (409: it exists, or a precondition failed), ``KubeGone`` (410: a watch's
  resource version is too old), ``KubeUnavailable`` (no answer: connection refused, TLS, timeout).

The API used is stable since Kubernetes 1.20 (core ``v1``: Pod, Binding, Node, ResourceQuota, Namespace;
``coordination.k8s.io/v1`` Lease): docs/backends.md, "Kubernetes". It is plumbing: it knows no
Horizon event, service or node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from services.runtime.cancel import cancel_and_wait

__all__ = ["KubeConfig", "load_kubeconfig", "in_cluster", "KubeAPI", "Mirror", "KubeError", "KubeNotFound",
           "KubeConflict", "KubeGone", "KubeUnavailable", "pods_path", "pod_path", "nodes_path", "quantity"]

log = logging.getLogger("horizon.kubeapi")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeError(RuntimeError):
    """The API server refused a request: its HTTP ``code`` and the ``Status``'s ``reason`` and ``message``."""

    def __init__(self, code: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if reason or message else str(code))
        self.code, self.reason, self.message = code, reason, message


class KubeNotFound(KubeError):
    """404: no such object (or namespace)."""


class KubeConflict(KubeError):
    """409: the object exists already, or a precondition (UID, resource version) failed."""


class KubeGone(KubeError):
    """410: a watch's resource version is older than the server keeps: list again."""


class KubeUnavailable(KubeError):
    """No answer from the server (connection refused or reset, TLS failure, timeout)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "Unavailable", message)


_ERRORS: dict[int, type[KubeError]] = {404: KubeNotFound, 409: KubeConflict, 410: KubeGone}


@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and who we are to it."""

    server: str  # https://host:port
    ca_file: str = ""
    ca_data: str = ""  # PEM
    cert_file: str = ""
    cert_data: bytes = b""  # PEM
    key_file: str = ""
    key_data: bytes = b""  # PEM
    token: str = ""
    insecure: bool = False  # insecure-skip-tls-verify
    namespace: str = "default"  # the context's


def _named(items: Any, name: str, what: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            return dict(item.get(what) or {})
    raise ValueError(f"{path}: no {what} named {name!r}")


def _relative(base: Path, file: str) -> str:
    """A kubeconfig's file paths are relative to the kubeconfig's folder."""
    return str((base.parent / file).resolve()) if file and not os.path.isabs(file) else file


def load_kubeconfig(path: str | Path, context: str | None = None) -> KubeConfig:
    """The kubeconfig's ``context`` (default: its ``current-context``) as a ``KubeConfig``;
    ``ValueError`` naming what is missing."""
    import yaml  # PyYAML: the kubeconfig is YAML

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the kubeconfig {path}: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ValueError(f"{path} is no kubeconfig")
    name = context or doc.get("current-context") or ""
    if not name:
        raise ValueError(f"{path} names no current-context: give a context")
    ctx = _named(doc.get("contexts"), name, "context", path)
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    user = _named(doc.get("users"), ctx.get("user", ""), "user", path) if ctx.get("user") else {}
    if not cluster.get("server"):
        raise ValueError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        token = Path(_relative(path, user["tokenFile"])).read_text().strip()
    b64 = lambda key: base64.b64decode(user.get(key) or "")  # noqa: E731
    return KubeConfig(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=_relative(path, cluster.get("certificate-authority") or ""),
        ca_data=base64.b64decode(cluster.get("certificate-authority-data") or "").decode(),
        cert_file=_relative(path, user.get("client-certificate") or ""), cert_data=b64("client-certificate-data"),
        key_file=_relative(path, user.get("client-key") or ""), key_data=b64("client-key-data"),
        token=token, insecure=bool(cluster.get("insecure-skip-tls-verify")),
        namespace=str(ctx.get("namespace") or "default"))


def in_cluster() -> KubeConfig:
    """The pod's own service account (``KUBERNETES_SERVICE_HOST``/``_PORT`` and its mounted token)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ValueError("not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST)")
    host = f"[{host}]" if ":" in host else host
    namespace = (SERVICE_ACCOUNT / "namespace").read_text().strip() if (SERVICE_ACCOUNT / "namespace").exists() else ""
    return KubeConfig(server=f"https://{host}:{port}", ca_file=str(SERVICE_ACCOUNT / "ca.crt"),
                      token=(SERVICE_ACCOUNT / "token").read_text().strip(), namespace=namespace or "default")


def _ssl_context(config: KubeConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=config.ca_file or None, cadata=config.ca_data or None)
    if config.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if config.cert_file or config.cert_data:
        if config.cert_data or config.key_data:  # ssl loads a chain from files only: a private, short-lived one
            with tempfile.TemporaryDirectory(prefix="horizon-kube-") as folder:
                cert = Path(folder) / "client.crt"
                key = Path(folder) / "client.key"
                cert.write_bytes(config.cert_data or Path(config.cert_file).read_bytes())
                key.write_bytes(config.key_data or Path(config.key_file).read_bytes())
                ctx.load_cert_chain(str(cert), str(key))
        else:
            ctx.load_cert_chain(config.cert_file, config.key_file or None)
    return ctx


def pods_path(namespace: str | None = None) -> str:
    """The pods of ``namespace`` (None: of every namespace)."""
    return f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def nodes_path() -> str:
    return "/api/v1/nodes"


_SUFFIX = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
           "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+))?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")


def quantity(text: str | int | float | None, scale: float = 1) -> int:
    """A Kubernetes quantity (``"2"``, ``"500m"``, ``"3977232Ki"``, ``"1e3"``) times ``scale``, rounded
    up to a whole number: ``quantity("500m", 1000)`` is 500 (milli-CPUs), ``quantity("1Gi")`` 1073741824;
    ``ValueError`` for what is no quantity."""
    if text is None or text == "":
        return 0
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _QUANTITY.fullmatch(str(text).strip())
        if m is None:
            raise ValueError(f"not a Kubernetes quantity: {text!r}")
        number, exponent, suffix = m.groups()
        value = float(number) * 10 ** int(exponent or 0) * _SUFFIX[suffix or ""]
    scaled = value * scale
    whole = int(scaled)
    return whole if whole >= scaled - 1e-6 else whole + 1


class KubeAPI:
    """Requests to one API server (see the module doc). ``timeout_s`` bounds each request but a watch."""

    def __init__(self, config: KubeConfig, timeout_s: float = 30.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        url = urllib.parse.urlsplit(config.server)
        self.tls = url.scheme == "https"
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if self.tls else 80)
        self.prefix = url.path.rstrip("/")
        self._ssl = _ssl_context(config) if self.tls else None

    @property
    def namespace(self) -> str:
        return self.config.namespace

    # ------------------------------------------------------------------ HTTP

    async def _open(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
                    content_type: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int, dict[str, str]]:
        """Send the request; the status and headers of the answer, the body still to read."""
        target = self.prefix + path
        if query:
            target += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = b"" if body is None else json.dumps(body).encode()
        headers = [f"{method} {target} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept: application/json",
                   "User-Agent: horizon", "Connection: close", f"Content-Length: {len(data)}"]
        if body is not None:
            headers.append(f"Content-Type: {content_type}")
        if self.config.token:
            headers.append(f"Authorization: Bearer {self.config.token}")
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self._ssl, server_hostname=self.host if self.tls else None, limit=1 << 24)
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + data)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit():
                raise KubeUnavailable(f"{method} {path}: no HTTP answer ({status_line!r})")
            answer: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = line.decode("latin-1").partition(":")
                answer[key.strip().lower()] = value.strip()
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            raise KubeUnavailable(f"{method} {self.config.server}{path}: {exc}") from exc
        return reader, writer, int(parts[1]), answer

    @staticmethod
    async def _chunks(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked, sized or until the connection closes)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    return
                yield await reader.readexactly(size)
                await reader.readexactly(2)
        elif "content-length" in headers:
            yield await reader.readexactly(int(headers["content-length"]))
        else:
            yield await reader.read()

    @staticmethod
    def _refusal(code: int, body: bytes) -> KubeError:
        try:
            status = json.loads(body)
        except ValueError:
            status = {"message": body.decode(errors="replace")[:500]}
        return _ERRORS.get(code, KubeError)(code, str(status.get("reason", "")), str(status.get("message", "")))

    async def request(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None,
                      content_type: str = "application/json", raw: bool = False, binary: bool = False) -> Any:
        """One request; its JSON answer (the text with ``raw``, the bytes with ``binary``), or the
        ``KubeError`` of a refusal."""
        async def exchange() -> tuple[int, bytes]:
            reader, writer, code, headers = await self._open(method, path, query, body, content_type)
            try:
                return code, b"".join([chunk async for chunk in self._chunks(reader, headers)])
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
        try:
            code, data = await asyncio.wait_for(exchange(), self.timeout_s)
        except asyncio.TimeoutError:
            raise KubeUnavailable(f"{method} {path}: no answer within {self.timeout_s:g} s") from None
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ValueError) as exc:
            raise KubeUnavailable(f"{method} {path}: {exc}") from exc
        if code >= 300:
            raise self._refusal(code, data)
        if binary:
            return data
        if raw:
            return data.decode(errors="replace")
        return json.loads(data) if data else {}

    # ------------------------------------------------------------------ verbs

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def list(self, path: str, label_selector: str | None = None,
                   field_selector: str | None = None) -> dict[str, Any]:
        """The collection (``items``, and ``metadata.resourceVersion`` to watch from)."""
        return await self.request("GET", path, query={"labelSelector": label_selector,
                                                      "fieldSelector": field_selector})

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body)

    async def delete(self, path: str, grace_period_s: int | None = None, uid: str | None = None) -> dict[str, Any]:
        """Delete, with a grace period (the kubelet sends SIGTERM, SIGKILL after it) and, with ``uid``, only
        that incarnation of the name."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = max(0, int(grace_period_s))
        if uid:
            body["preconditions"] = {"uid": uid}
        return await self.request("DELETE", path, body)

    async def patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386); ``path`` may name a subresource (``.../status``)."""
        return await self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    async def bind(self, namespace: str, pod: str, node: str, uid: str | None = None) -> dict[str, Any]:
        """Bind the pod to ``node`` (its ``Binding`` subresource). The server binds a pod once: a second
        binding is a ``KubeConflict``; with ``uid``, only that incarnation of the name."""
        meta: dict[str, Any] = {"name": pod, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        return await self.request("POST", pod_path(namespace, pod) + "/binding", body)

    async def logs(self, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None,
                   limit_bytes: int | None = None) -> bytes:
        """The container's log as the kubelet keeps it (its output and error together), as bytes."""
        return await self.request("GET", pod_path(namespace, pod) + "/log", binary=True,
                                  query={"container": container, "tailLines": tail_lines,
                                         "limitBytes": limit_bytes})

    async def watch(self, path: str, resource_version: str = "", label_selector: str | None = None,
                    field_selector: str | None = None, timeout_s: int = 300) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The collection's changes from ``resource_version``: ``(ADDED | MODIFIED | DELETED | BOOKMARK,
        object)``, until the server ends the watch (after ``timeout_s``). An ``ERROR`` event is raised
        as its ``KubeError`` (``KubeGone``: list again)."""
        query = {"watch": "1", "resourceVersion": resource_version or None, "timeoutSeconds": timeout_s,
                 "allowWatchBookmarks": "true", "labelSelector": label_selector, "fieldSelector": field_selector}
        reader, writer, code, headers = await self._open("GET", path, query, None, "")
        try:
            if code >= 300:
                raise self._refusal(code, b"".join([c async for c in self._chunks(reader, headers)]))
            pending = b""
            try:
                async for chunk in self._chunks(reader, headers):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type", ""), event.get("object") or {}
                        if kind == "ERROR":
                            raise _ERRORS.get(int(obj.get("code") or 0), KubeError)(
                                int(obj.get("code") or 0), str(obj.get("reason", "")), str(obj.get("message", "")))
                        yield kind, obj
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ValueError) as exc:
                raise KubeUnavailable(f"watch {path}: {exc}") from exc
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


class Mirror:
    """One collection as the server has it, kept by a list then a watch (see the module doc). ``items``:
    ``namespace/name`` (``name`` for a cluster-wide kind) -> the object; ``synced`` is set after the
    first list; ``on_change(kind, obj)`` is called for each change seen."""

    def __init__(self, api: KubeAPI, path: str, label_selector: str | None = None,
                 field_selector: str | None = None, retry_s: float = 1.0,
                 on_change: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.api, self.path = api, path
        self.label_selector, self.field_selector = label_selector, field_selector
        self.retry_s = retry_s
        self.on_change = on_change
        self.items: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.error = ""
        self.changed_at = 0.0  # monotonic time of the last change
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def relist(self) -> str:
        """List the collection now; its resource version."""
        listed = await self.api.list(self.path, self.label_selector, self.field_selector)
        self.items = {_key(item): item for item in listed.get("items") or []}
        self.error = ""
        await self._notify("SYNC", {})
        self.synced.set()
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    async def _notify(self, kind: str, obj: dict[str, Any]) -> None:
        self.changed_at = time.monotonic()
        if self.on_change is not None and kind != "SYNC":
            self.on_change(kind, obj)
        async with self._changed:
            self._changed.notify_all()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"kube-mirror {self.path}")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _run(self) -> None:
        version = ""
        while True:
            try:
                if not version:
                    version = await self.relist()
                async for kind, obj in self.api.watch(self.path, version, self.label_selector, self.field_selector):
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        self.items.pop(_key(obj), None)
                    else:
                        self.items[_key(obj)] = obj
                    await self._notify(kind, obj)
            except KubeGone:
                version = ""  # too old: list again
            except KubeError as exc:
                if str(exc) != self.error:
                    log.warning("watching %s: %s", self.path, exc)
                self.error = str(exc)
                version = ""
                await asyncio.sleep(self.retry_s)

    async def until(self, ready: Callable[[], bool], timeout_s: float | None = None) -> bool:
        """Wait until ``ready()`` holds (checked at each change); whether it does."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        async with self._changed:
            while not ready():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
        return True
