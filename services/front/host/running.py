"""What a running ``horizon up`` tells the commands run beside it: ``<data dir>/server.json``.

``horizon up`` writes it once its server is ready and removes it when it stops:
where the server listens, its PID (``horizon tenant add`` makes it reload its
configuration), and whether it runs with accounts (``--auth``) and mutual TLS
(``--tls``). It holds no secret: the operator's password is in ``auth/``
(``services/front/host/auth.py``), the certificates in ``tls/`` (``services/front/host/tls.py``).

``operator_endpoint(data_dir)`` turns it into what an operator command needs:
the URL with the ``admin`` user's credentials under ``--auth``, and this
machine's client certificate under ``--tls``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from services.front.host.auth import Registry, user_url
from services.front.host.tls import TlsFiles

__all__ = ["Running", "operator_endpoint"]

FILE = "server.json"


@dataclass(frozen=True)
class Running:
    host: str
    port: int
    nats_pid: int
    auth: bool
    tls: bool
    config: str | None = None  # the file nats-server was started with (reloaded by tenant add)

    @property
    def scheme(self) -> str:
        return "tls" if self.tls else "nats"

    @property
    def url(self) -> str:
        """The server's URL, without credentials (what ``horizon up`` prints)."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def write(self, data_dir: Path) -> None:
        path = Path(data_dir) / FILE
        tmp = path.with_name(f".{FILE}.tmp")
        tmp.write_text(json.dumps(asdict(self)) + "\n")
        os.replace(tmp, path)

    @staticmethod
    def remove(data_dir: Path) -> None:
        (Path(data_dir) / FILE).unlink(missing_ok=True)

    @classmethod
    def read(cls, data_dir: Path) -> Running | None:
        """The record, if a ``horizon up`` wrote one and its nats-server still runs."""
        try:
            record = cls(**json.loads((Path(data_dir) / FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return record if record.server_alive() else None

    def server_alive(self) -> bool:
        """The PID is a nats-server (not a process that reused the PID of a dead one)."""
        try:
            cmdline = Path(f"/proc/{self.nats_pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"nats-server" in cmdline and (self.config is None or self.config.encode() in cmdline)


def machine_tls(data_dir: Path) -> TlsFiles:
    where = Path(data_dir) / "tls"
    return TlsFiles(where / "ca.pem", where / "client.pem", where / "client.key")


def operator_endpoint(data_dir: Path) -> tuple[str, TlsFiles | None] | None:
    """The operator's URL (with ``admin``'s credentials under ``--auth``) and TLS files (under
    ``--tls``) of the ``horizon up`` running on ``data_dir``; None if none runs there."""
    running = Running.read(data_dir)
    if running is None:
        return None
    tls = machine_tls(data_dir) if running.tls else None
    if not running.auth:
        return running.url, tls
    users = Registry.read_users(data_dir)
    if "admin" not in users:
        return None
    return user_url(running.scheme, "admin", users["admin"], running.host, running.port), tls
