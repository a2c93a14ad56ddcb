"""A 3-node JetStream cluster on loopback, from ``deploy/nats/cluster/n*.conf`` (tests and ``services/front/bench/cluster.py``).

The shipped configurations name fixed loopback ports (clients 4222-4224, routes 6222-6224,
monitoring 8222-8224). ``NatsCluster`` copies them into a work directory with every one of those
ports replaced by a free one and the store directory by one of its own (given with ``-sd``), so that several clusters
(parallel tests, a developer's own) never collide; then it runs one ``NatsServer`` per copy,
waits until the servers agree on a JetStream meta leader, and stops each by its PID.

``kill(i)`` is a crash (SIGKILL; the store stays), ``restart(i)`` the same server again on the
same ports and store, which rejoins and catches its replicas up from the others.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.runtime.natsserver import NatsServer, NatsServerError

__all__ = ["CLUSTER_CONFIGS", "NatsCluster"]

CLUSTER_CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "cluster"

_ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")
_STORE_DIR = re.compile(r'^(\s*store_dir:\s*).*$', re.MULTILINE)
_CLIENT = re.compile(r"^listen:\s*127\.0\.0\.1:(\d+)", re.MULTILINE)
_HTTP = re.compile(r"^http:\s*127\.0\.0\.1:(\d+)", re.MULTILINE)
_NAME = re.compile(r"^server_name:\s*(\S+)", re.MULTILINE)


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together while chosen, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass
class _Member:
    name: str
    config: Path
    client_port: int
    http_port: int
    server: NatsServer


@dataclass
class NatsCluster:
    work_dir: Path
    configs: Sequence[Path] = field(default_factory=lambda: sorted(CLUSTER_CONFIGS.glob("n*.conf")))
    members: list[_Member] = field(default_factory=list, init=False)

    # ------------------------------------------------------------------ start / stop

    def start(self, timeout_s: float = 30.0) -> NatsCluster:
        if not self.configs:
            raise NatsServerError(f"no cluster configurations (n*.conf) in {CLUSTER_CONFIGS}")
        texts = [Path(c).read_text() for c in self.configs]
        old = sorted({int(p) for text in texts for p in _ADDRESS.findall(text)})
        mapping = dict(zip(old, _free_ports(len(old))))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for original, text in zip(self.configs, texts):
            name_match, client, http = _NAME.search(text), _CLIENT.search(text), _HTTP.search(text)
            if not (name_match and client and http):
                raise NatsServerError(f"{original}: expected server_name, listen and http lines on 127.0.0.1")
            name = name_match.group(1)
            store = self.work_dir / name / "jetstream"
            text = _ADDRESS.sub(lambda m: f"127.0.0.1:{mapping[int(m.group(1))]}", text)
            # NatsServer passes the store with -sd, which nats-server refuses beside a store_dir line.
            text = _STORE_DIR.sub(lambda m: f"{m.group(1).replace('store_dir:', '# store_dir: -sd')} {store}", text)
            config = self.work_dir / f"{name}.conf"
            config.write_text(text)
            server = NatsServer(store_dir=store, port=mapping[int(client.group(1))], config=config,
                                log_file=self.work_dir / f"{name}.log")
            self.members.append(_Member(name, config, server.port, mapping[int(http.group(1))], server))
        try:
            for member in self.members:
                member.server.start()
            self.wait_meta_leader(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM each server by its PID (SIGKILL if it lingers)."""
        for member in self.members:
            member.server.stop()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults

    def kill(self, index: int) -> int:
        """SIGKILL one server by its PID (a crash; its store is kept); returns the PID."""
        server = self.members[index].server
        pid = server.pid
        if pid is None:
            raise NatsServerError(f"{self.members[index].name} is not running")
        server.kill()
        return pid

    def restart(self, index: int) -> None:
        """Start a killed server again, same ports and store: it rejoins the cluster."""
        self.members[index].server.start()

    # ------------------------------------------------------------------ what the servers say

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{m.client_port}" for m in self.members]

    @property
    def url(self) -> str:
        """All client URLs, comma-separated, as ``--nats`` and ``JetStreamLog.open`` take them."""
        return ",".join(self.urls)

    def index_of(self, name: str) -> int:
        for i, member in enumerate(self.members):
            if member.name == name:
                return i
        raise KeyError(f"no server named {name!r} in this cluster")

    def running(self) -> list[int]:
        return [i for i, m in enumerate(self.members) if m.server.process is not None]

    def jsz(self, index: int, query: str = "") -> dict[str, Any]:
        """The server's JetStream monitoring report (``/jsz``)."""
        url = f"http://127.0.0.1:{self.members[index].http_port}/jsz{'?' + query if query else ''}"
        with urllib.request.urlopen(url, timeout=2) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def meta_leader(self) -> str | None:
        """The meta leader every running server names, or None while they do not agree."""
        leaders = set()
        for i in self.running():
            try:
                leaders.add((self.jsz(i).get("meta_cluster") or {}).get("leader") or "")
            except (OSError, urllib.error.URLError, ValueError):
                return None
        if len(leaders) != 1 or "" in leaders:
            return None
        return leaders.pop()

    def wait_meta_leader(self, timeout_s: float = 30.0) -> str:
        """Wait until the running servers agree on a meta leader that sees every other running
        server as current (before that, creating a stream can time out)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.meta_leader()
            if leader:
                others = {self.members[i].name for i in self.running()} - {leader}
                try:
                    seen = (self.jsz(self.index_of(leader)).get("meta_cluster") or {}).get("replicas") or []
                except (OSError, urllib.error.URLError, ValueError, KeyError):
                    seen = []
                if others <= {r.get("name") for r in seen if r.get("current")}:
                    return leader
            time.sleep(0.1)
        raise NatsServerError(f"no JetStream meta leader agreed within {timeout_s:.0f} s")

    def stream_state(self, index: int, stream: str) -> dict[str, Any] | None:
        """What one server holds of a stream: ``{"leader", "last_seq", "messages", "replicas"}``."""
        report = self.jsz(index, "streams=true")
        for account in report.get("account_details") or []:
            for detail in account.get("stream_detail") or []:
                if detail.get("name") == stream:
                    cluster = detail.get("cluster") or {}
                    state = detail.get("state") or {}
                    return {"leader": cluster.get("leader", ""), "last_seq": state.get("last_seq", 0),
                            "messages": state.get("messages", 0), "replicas": cluster.get("replicas") or []}
        return None

    def stream_leader(self, stream: str) -> str | None:
        for i in self.running():
            try:
                state = self.stream_state(i, stream)
            except (OSError, urllib.error.URLError, ValueError):
                continue
            if state and state["leader"]:
                return str(state["leader"])
        return None
