"""Logins on a running ``horizon up --auth`` (``horizon tenant add``, ``horizon user add``, ``user map``): the
Unix identity a login's jobs run as, the operator's connection from the data dir, the server made to serve
a new login, ``UserConfigured`` published, and the credentials file handed to the tenant."""

from __future__ import annotations

import asyncio
import os
import pwd
import ssl
import time
from pathlib import Path
from typing import Any

from events import catalogue as c
from services.front.client.configure import configure
from services.front.host.auth import write_private
from services.front.host.running import Running, operator_endpoint
from services.front.host.tenants import DoorsClosed, open_doors
from services.front.host.tls import TlsFiles, tenant_certificate
from services.nodes.backends.process.identity import NOBODY

__all__ = ["LoginError", "unix_identity", "default_login_identity", "publish_user", "operator_context", "open_login",
           "server_tls", "credentials_file"]


class LoginError(ValueError):
    """What stops a login being added, in one line for the operator."""


def unix_identity(unix_user: str | None, uid: int | None = None, gid: int | None = None,
                  groups: tuple[int, ...] = (), allow_root: bool = False) -> dict[str, Any]:
    """``{"unix_user", "uid", "gid", "groups"}`` from this machine's passwd and group databases (by
    name), or as given (``uid``); raises ``LoginError`` naming what is wrong."""
    if uid is None:
        try:
            entry = pwd.getpwnam(unix_user or "")
        except KeyError:
            raise LoginError(f"there is no Unix user {unix_user!r} on this machine: create it "
                                       f"(useradd), or name one with --unix-user, or give --uid") from None
        uid, primary, name = entry.pw_uid, gid if gid is not None else entry.pw_gid, entry.pw_name
        if not groups:
            groups = tuple(dict.fromkeys([primary, *os.getgrouplist(name, primary)]))
    else:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = ""
        primary = gid if gid is not None else uid
    if uid == 0 and not allow_root:
        raise LoginError("that is uid 0 (root): a tenant's jobs would run as root. Refused unless "
                                   "you say so with --allow-root")
    return {"unix_user": name, "uid": uid, "gid": primary, "groups": list(groups or (primary,)),
            "allow_root": allow_root}


def default_login_identity(tenant: str) -> dict[str, Any]:
    """The Unix identity of a tenant's own login when the operator names none: the Unix user named like
    the tenant if there is one, else ``nobody``; a non-root operator's own (a node's agent that is not
    root runs every job as itself, so that is what the login's jobs run as anyway)."""
    if os.geteuid() != 0:
        return unix_identity(pwd.getpwuid(os.geteuid()).pw_name)
    try:
        pwd.getpwnam(tenant)
        return unix_identity(tenant)
    except KeyError:
        return unix_identity(NOBODY)


def publish_user(admin_url: str, tenant: str, name: str, identity: dict[str, Any]) -> None:
    """``UserConfigured`` as the operator; raises ``LoginError`` if it was refused."""
    event = c.UserConfigured(ts=time.time(), source="horizon-cli", correlation_id=f"{tenant}.{name}", tenant=tenant,
                             name=name, uid=identity["uid"], gid=identity["gid"], groups=list(identity["groups"]),
                             unix_user=identity.get("unix_user", ""), allow_root=bool(identity.get("allow_root")),
                             user="horizon user add")
    result = configure(admin_url, "user", event)
    if result["applied"] is False:
        raise LoginError(f"user {name} of tenant {tenant}: its identity was rejected: {result['reason']}")


def operator_context(data_dir: Path) -> tuple[Running, str]:
    """The running ``up --auth`` on ``data_dir`` and the operator's URL; a clear error otherwise."""
    running = Running.read(data_dir)
    if running is None:
        raise LoginError(f"no `horizon up --auth` is running on {data_dir} (nothing live in "
                                   f"{data_dir}/server.json): start it first")
    if not running.auth:
        raise LoginError(f"the `horizon up` running on {data_dir} has no accounts: users need "
                                   f"`horizon up --auth`")
    operator = operator_endpoint(data_dir)
    assert operator is not None
    admin_url, machine = operator
    if machine is not None and not os.environ.get("HORIZON_TLS_CERT"):
        os.environ.update(machine.env())  # the operator's connection presents this machine's certificate
    return running, admin_url


def open_login(running: Running, admin_url: str, data_dir: Path, tenant: str, url: str,
               changed: bool) -> TlsFiles | None:
    """Have the running server serve a login of ``tenant`` (``url``) as the configuration file now says
    (services/front/host/tenants.py ``open_doors``, probing as that login); the tenant's certificate under
    ``--tls`` (by absolute paths: it is handed to the tenant, not used from this folder)."""
    tls = tenant_certificate(Path(data_dir).absolute(), tenant) if running.tls else None
    context = None
    if tls is not None:
        context = ssl.create_default_context(cafile=str(tls.ca))
        context.load_cert_chain(str(tls.cert), str(tls.key))
    try:
        asyncio.run(open_doors(running, admin_url, tenant, url, context, changed=changed))
    except DoorsClosed as exc:
        raise LoginError(str(exc)) from None
    return tls


def server_tls(data_dir: Path) -> dict[str, str]:
    where = Path(data_dir).resolve() / "tls"
    return {"ca": str(where / "ca.pem"), "cert": str(where / "server.pem"), "key": str(where / "server.key")}


def credentials_file(data_dir: Path, name: str, url: str, tls: TlsFiles | None) -> Path:
    """``auth/tenants/<name>.env``: the tenant's variables, for the operator to hand over."""
    where = Path(data_dir) / "auth" / "tenants"
    where.mkdir(parents=True, exist_ok=True)
    os.chmod(where, 0o700)
    lines = [f"# tenant {name}: `set -a; . {where / (name + '.env')}; set +a`, then any horizon command",
             f"HORIZON_NATS_URL='{url}'"]
    if tls is not None:
        lines += [f"{var}='{value}'" for var, value in tls.env().items()]
    path = where / f"{name}.env"
    write_private(path, "\n".join(lines) + "\n")
    return path
