"""How ``horizon up --auth`` and ``--tls`` secure the embedded server, before and after it starts.

Before: ``prepare`` makes what is missing (the credentials, services/front/host/auth.py;
the certificates, services/front/host/tls.py) and writes the server's configuration.
After: ``Secured.part_urls`` gives each part of the stack its own user's URL,
and ``Secured.running`` the record that ``horizon tenant add`` and the operator
commands find in the data dir (services/front/host/running.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.front.host.auth import HORIZON_USERS, Registry, tls_only_config, urls_for
from services.front.host.running import Running
from services.front.host.tls import TlsFiles, ensure_machine_certificates

__all__ = ["Secured", "prepare", "mode_warning"]


@dataclass(frozen=True)
class Secured:
    config: Path | None  # nats-server's configuration; None: the plain embedded server
    users: dict[str, str] | None  # HORIZON's users and passwords under --auth
    tls: TlsFiles | None  # this machine's client files under --tls

    @property
    def scheme(self) -> str:
        return "tls" if self.tls is not None else "nats"

    def part_urls(self, host: str, port: int) -> dict[str, str]:
        """Each user's URL (``Stack.urls``); empty without accounts (every part uses the server's URL)."""
        if self.users is None:
            return {}
        return urls_for(self.users, self.scheme, host, port, HORIZON_USERS)

    def public_url(self, host: str, port: int) -> str:
        """The server's URL without credentials: what ``horizon up`` prints."""
        return f"{self.scheme}://{host}:{port}"

    def running(self, host: str, port: int, nats_pid: int) -> Running:
        return Running(host=host, port=port, nats_pid=nats_pid, auth=self.users is not None, tls=self.tls is not None,
                       config=str(self.config) if self.config else None)


def prepare(data_dir: Path, auth: bool, tls: bool) -> Secured:
    """Credentials and certificates (kept from an earlier run, made if missing) and the config."""
    data_dir = Path(data_dir).resolve()
    server_tls: dict[str, str] | None = None
    client: TlsFiles | None = None
    if tls:
        server, client = ensure_machine_certificates(data_dir)
        server_tls = {"ca": str(server.ca), "cert": str(server.cert), "key": str(server.key)}
    if auth:
        with Registry.locked(data_dir) as registry:
            return Secured(registry.write_config(server_tls), dict(registry.users), client)
    if server_tls is not None:
        return Secured(tls_only_config(data_dir, server_tls), None, client)
    return Secured(None, None, None)


def mode_warning(data_dir: Path, auth: bool) -> str | None:
    """A data dir's log lives in one NATS account: the global one without --auth, HORIZON with it.
    Switching between the two starts on an empty log (the other one is kept, not moved)."""
    jetstream = Path(data_dir) / "nats" / "jetstream"
    if auth and (jetstream / "$G" / "streams" / "HORIZON").exists():
        return (f"{data_dir} holds a log written without --auth; with --auth the log is the HORIZON account's, "
                f"which starts empty (the other is kept: `horizon up` without --auth sees it again)")
    if not auth and (jetstream / "HORIZON" / "streams" / "HORIZON").exists():
        return (f"{data_dir} holds a log written with --auth; without it the log is the global account's, "
                f"which starts empty (add --auth to see the other)")
    return None
