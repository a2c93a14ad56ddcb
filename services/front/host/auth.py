"""Accounts and permissions for ``horizon up --auth``: the credentials, the tenants, the server's config.

The design is ``deploy/nats/auth.conf``'s, generated instead of written by hand
(that file is the annotated example; ``tests/front/test_up_auth.py`` holds the two to
the same permissions):

* the account ``HORIZON`` holds JetStream, the services, the agent, the
  projections and the operator (``admin``), each a user of its own with only
  the subjects it needs (``service_permissions``);
* each tenant is an account of its own (``tenant-<name>``) with one user named
  like the tenant and no JetStream. What it can reach are the doors HORIZON
  exports to it alone and it imports (``tenant_imports``): its inputs go to the
  **intake** (``horizon.intake.<t>.<verb>``, imported under the name clients
  publish to, ``horizon.in.<t>.<verb>``), which alone writes them into the log,
  after namespacing their ids per tenant and dropping the headers a tenant may
  not send (docs/tenants.md); its queries, its validation, its jobs' output
  (``horizon.logs.<node>``) and its feed of events.

Files, under ``<data dir>/auth/`` (0700; every file 0600, written whole and
renamed into place):

=================  ==========================================================
``users.json``     the HORIZON users' passwords, made at the first ``up --auth``
``tenants.json``   the tenants: name -> password, and whether the account named
                   like it has been configured in the log yet
``nats.conf``      the server configuration, generated from the two above
=================  ==========================================================

Passwords are random (``secrets``), never printed or logged; a tenant's is in
the URL ``horizon tenant add`` prints for that tenant, and only there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from events.subjects import check_token, user_login
from services.front.client.accounts import HORIZON_ACCOUNT, HORIZON_USERS, SERVICE_USERS, TENANT_VIEWS

__all__ = [
    "HORIZON_ACCOUNT",
    "HORIZON_USERS",
    "TENANT_VIEWS",
    "Permissions",
    "Registry",
    "check_tenant_name",
    "render_config",
    "service_permissions",
    "tenant_account",
    "tenant_exports",
    "tenant_imports",
    "tls_only_config",
    "urls_for",
    "user_url",
    "write_private",
]

MAX_PAYLOAD = 1024 * 1024  # as deploy/nats/auth.conf; queries page under it (issue 17)


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    allow_responses: bool = False
    deny_publish: tuple[str, ...] = ()

    def as_conf(self) -> dict[str, Any]:
        publish: dict[str, Any] = {"allow": list(self.publish)}
        if self.deny_publish:
            publish["deny"] = list(self.deny_publish)
        out: dict[str, Any] = {"publish": publish, "subscribe": {"allow": list(self.subscribe)}}
        if self.allow_responses:
            out["allow_responses"] = True
        return out


def _api(*names: str) -> tuple[str, ...]:
    return tuple(f"$JS.API.{name}" for name in names)


# Reading the log: stream info and create (create never changes an existing stream), ephemeral
# consumers over HORIZON. Every part needs this much.
_STREAMS = ("HORIZON", "HORIZON_DLQ", "HORIZON_SNAPSHOTS")
_SETUP_AND_READ = (*_api(*(f"STREAM.INFO.{s}" for s in _STREAMS), *(f"STREAM.CREATE.{s}" for s in _STREAMS)),
                   *_api("CONSUMER.CREATE.HORIZON", "CONSUMER.MSG.NEXT.HORIZON.*", "CONSUMER.DELETE.HORIZON.*"))
_READ_DLQ = _api("CONSUMER.CREATE.HORIZON_DLQ", "CONSUMER.MSG.NEXT.HORIZON_DLQ.*", "CONSUMER.DELETE.HORIZON_DLQ.*")


def _fencing(service: str) -> tuple[str, ...]:
    """The last record on its own subjects, and its own leader lease (services/runtime/lease.py)."""
    return ("$JS.API.STREAM.MSG.GET.HORIZON", f"$KV.HORIZON_LEASES.{service}",
            *_api("STREAM.INFO.KV_HORIZON_LEASES", "STREAM.CREATE.KV_HORIZON_LEASES",
                  "STREAM.MSG.GET.KV_HORIZON_LEASES"))


def _snapshots(name: str) -> tuple[str, ...]:
    """Its own snapshots (every decision service takes them: submission, scheduling, placement, preemption,
    inventory)."""
    return (f"horizon.snapshot.{name}.>", *_SNAPSHOT_API)


_SNAPSHOT_API = (*_api("STREAM.MSG.GET.HORIZON_SNAPSHOTS", "STREAM.PURGE.HORIZON_SNAPSHOTS",
                    "CONSUMER.CREATE.HORIZON_SNAPSHOTS", "CONSUMER.MSG.NEXT.HORIZON_SNAPSHOTS.*",
                    "CONSUMER.DELETE.HORIZON_SNAPSHOTS.*"),)


def service_permissions() -> dict[str, Permissions]:
    """What each user of the HORIZON account may publish and subscribe to.

    Every service publishes only its own events (and dead letters); no service deletes, purges
    (but its own snapshots) or updates a stream. Client inputs (``horizon.in.>``) are
    written by the submission service's intake and by the operator only: a tenant's input reaches
    the log through the intake or not at all. Nobody, admin included, publishes a service's event.
    """
    service = {name: (f"horizon.evt.{name}.>", f"horizon.dlq.{name}", *_SETUP_AND_READ, *_READ_DLQ,
                      *_fencing(name)) for name in SERVICE_USERS}
    return {
        "admin": Permissions(publish=(">",), deny_publish=("horizon.evt.>",), subscribe=(">",)),
        # the intake (queue group `intake` on horizon.intake.>) stores tenants' inputs on horizon.in.>
        # and answers the requester with the PubAck; validation answers horizon.validate.<tenant>
        "submission": Permissions(publish=(*service["submission"], "horizon.in.>", *_snapshots("submission")),
                                  subscribe=("_INBOX.>", "horizon.intake.>", "horizon.validate.*"),
                                  allow_responses=True),
        "scheduling": Permissions(publish=(*service["scheduling"], *_snapshots("scheduling")), subscribe=("_INBOX.>",)),
        "placement": Permissions(publish=(*service["placement"], *_snapshots("placement")), subscribe=("_INBOX.>",)),
        "preemption": Permissions(publish=(*service["preemption"], *_snapshots("preemption")), subscribe=("_INBOX.>",)),
        # inventory also runs the log's clock and watches heartbeats (core NATS)
        "inventory": Permissions(publish=(*service["inventory"], "horizon.evt.clock.>", *_snapshots("inventory")),
                                 subscribe=("_INBOX.>", "horizon.hb.*")),
        # reports, registrations, heartbeats; serves its jobs' output (horizon.logs.<node>[.<tenant>]);
        # job steps between agents (horizon.step.<node>, the output back on horizon.step.io.<token>)
        "agent": Permissions(publish=("horizon.evt.agent.>", "horizon.hb.*", "horizon.step.>", *_SETUP_AND_READ),
                             subscribe=("_INBOX.>", "horizon.logs.>", "horizon.step.>"), allow_responses=True),
        # serves horizon.query.*, publishes each tenant's feed, writes no stream
        "projections": Permissions(publish=(*_SETUP_AND_READ, "horizon.tenant.>"),
                                   subscribe=("_INBOX.>", "horizon.query.>"), allow_responses=True),
    }


def check_tenant_name(name: str) -> str:
    """A tenant's name goes into subjects, an account name and a user name: a subject token not
    starting with '_' (events/subjects.py), and not the name of a user of the HORIZON account."""
    check_token(name, "tenant")
    if name.startswith("_"):
        raise ValueError(f"tenant: {name!r} may not start with '_' (reserved)")
    if name in HORIZON_USERS:
        raise ValueError(f"tenant: {name!r} is the name of one of Horizon's own users "
                         f"({', '.join(HORIZON_USERS)}); choose another")
    return name


def tenant_account(tenant: str) -> str:
    """The tenant's account. Prefixed, so no tenant name can be HORIZON (or any other account)."""
    return f"tenant-{tenant}"


def tenant_exports(tenant: str) -> list[dict[str, Any]]:
    """What HORIZON exports to ``tenant``'s account alone."""
    only = [tenant_account(tenant)]
    services = [f"horizon.intake.{tenant}.*", *(f"horizon.query.{view}.{tenant}" for view in TENANT_VIEWS),
                f"horizon.validate.{tenant}", f"horizon.logs.*.{tenant}"]
    return ([{"service": subject, "accounts": only} for subject in services]
            + [{"stream": f"horizon.tenant.{tenant}.>", "accounts": only}])


def tenant_imports(tenant: str) -> list[dict[str, Any]]:
    """What ``tenant``'s account imports, and the names its clients use for them: the same subjects
    as on a server without accounts, so the CLI and any client work unchanged."""

    def service(subject: str, to: str | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {"service": {"account": HORIZON_ACCOUNT, "subject": subject}}
        if to is not None:
            entry["to"] = to
        return entry

    def shared(entry: dict[str, Any]) -> dict[str, Any]:
        # `share`: the server adds Nats-Request-Info naming the requesting user (replacing any header
        # of that name the client sent), so the intake knows which of the tenant's users sent it
        return {**entry, "share": True}

    return [
        # js.publish("horizon.in.<t>.submit") is a request to the intake, whose reply is the PubAck
        shared(service(f"horizon.intake.{tenant}.*", f"horizon.in.{tenant}.*")),
        *(service(f"horizon.query.{view}.{tenant}", f"horizon.query.{view}") for view in TENANT_VIEWS),
        shared(service(f"horizon.validate.{tenant}")),
        # `horizon logs JOB` asks horizon.logs.<node>; the agent answers about this tenant's jobs only
        service(f"horizon.logs.*.{tenant}", "horizon.logs.*"),
        {"stream": {"account": HORIZON_ACCOUNT, "subject": f"horizon.tenant.{tenant}.evt.>"}, "to": "horizon.evt.>"},
    ]


def render_config(users: Mapping[str, str] | None, tenants: Mapping[str, str], tls: Mapping[str, str] | None,
                  tenant_users: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The nats-server configuration (JSON, which nats-server's format includes).

    ``users``: HORIZON's user -> password, None for a server without accounts (``--tls`` alone);
    ``tenants``: tenant -> its own login's password; ``tenant_users``: tenant -> its users' passwords
    by user name (``horizon user add``; each a login ``<tenant>.<name>`` in the tenant's account);
    ``tls``: the server's ``cert``, ``key`` and the
    ``ca`` its clients' certificates must be signed by (mutual TLS), or None. Listen address,
    port and store directory come from the command line (services/runtime/natsserver.py).
    """
    conf: dict[str, Any] = {"max_payload": MAX_PAYLOAD}
    if users is not None:
        permissions = service_permissions()
        horizon = {
            "jetstream": "enabled",
            "exports": [export for tenant in sorted(tenants) for export in tenant_exports(tenant)],
            "users": [{"user": user, "password": users[user], "permissions": permissions[user].as_conf()}
                      for user in HORIZON_USERS],
        }
        accounts: dict[str, Any] = {HORIZON_ACCOUNT: horizon}
        for tenant in sorted(tenants):
            # no JetStream, no permissions inside: the account is the wall, the imports the doors
            logins = [{"user": tenant, "password": tenants[tenant]}]
            logins += [{"user": user_login(tenant, name), "password": password}
                       for name, password in sorted((tenant_users or {}).get(tenant, {}).items())]
            accounts[tenant_account(tenant)] = {"users": logins, "imports": tenant_imports(tenant)}
        conf["accounts"] = accounts
    if tls is not None:
        # timeout: seconds a client has to finish the handshake; verify: clients need a certificate
        conf["tls"] = {"cert_file": tls["cert"], "key_file": tls["key"], "ca_file": tls["ca"], "verify": True,
                       "timeout": 2}
    head = ("# Generated by `horizon up` (services/front/host/auth.py) from the files beside it; rewritten at every\n"
            "# start and by `horizon tenant add`: edit those commands, not this file. The annotated model\n"
            "# is deploy/nats/auth.conf.\n")
    return head + json.dumps(conf, indent=2) + "\n"


def user_url(scheme: str, user: str, password: str, host: str, port: int) -> str:
    """``scheme://user:password@host:port``, user and password URL-encoded."""
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by its owner only, from its creation on, and rename it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def _password() -> str:
    return secrets.token_urlsafe(24)  # 192 bits; URL-safe, so it needs no quoting anywhere


@dataclass
class Registry:
    """The credentials of one data dir (``<data dir>/auth/``): HORIZON's users and the tenants.

    Open it with ``Registry.locked(data_dir)``, which holds ``auth/registry.lock`` so that two
    ``horizon tenant add`` at once cannot lose one another's tenant.
    """

    root: Path
    users: dict[str, str] = field(default_factory=dict)
    tenants: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        return self.root / "nats.conf"

    @classmethod
    @contextlib.contextmanager
    def locked(cls, data_dir: Path) -> Iterator[Registry]:
        root = Path(data_dir) / "auth"
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        fd = os.open(root / "registry.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: another add finishes in a moment
            registry = cls(root, _read(root / "users.json"), _read(root / "tenants.json"))
            missing = [user for user in HORIZON_USERS if user not in registry.users]
            if missing:
                registry.users.update({user: _password() for user in missing})
                write_private(root / "users.json", json.dumps(registry.users, indent=2) + "\n")
            yield registry
        finally:
            os.close(fd)  # closing drops the flock

    @staticmethod
    def exists(data_dir: Path) -> bool:
        return (Path(data_dir) / "auth" / "users.json").exists()

    @staticmethod
    def read_users(data_dir: Path) -> dict[str, str]:
        """HORIZON's passwords without taking the lock (written whole, renamed: never half-read)."""
        return _read(Path(data_dir) / "auth" / "users.json")

    def add_tenant(self, name: str) -> tuple[dict[str, Any], bool]:
        """The tenant's record, and whether it is new (a new one gets a password and is saved)."""
        check_tenant_name(name)
        if name in self.tenants:
            return self.tenants[name], False
        self.tenants[name] = {"password": _password(), "account_configured": False}
        self.save_tenants()
        return self.tenants[name], True

    def add_user(self, tenant: str, name: str, identity: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """``tenant``'s user ``name`` with its Unix ``identity`` (uid, gid, groups, unix_user); whether it
        is new. A user added again keeps its password and takes the identity given now."""
        record = self.tenants[tenant]
        users = record.setdefault("users", {})
        new = name not in users
        entry = users.setdefault(name, {"password": _password()})
        entry.update(identity)
        entry["configured"] = False  # its UserConfigured is (re)published
        self.save_tenants()
        return entry, new

    def save_tenants(self) -> None:
        write_private(self.root / "tenants.json", json.dumps(self.tenants, indent=2, sort_keys=True) + "\n")

    def write_config(self, tls: Mapping[str, str] | None) -> Path:
        text = render_config(self.users, {t: r["password"] for t, r in self.tenants.items()}, tls,
                             {t: {name: u["password"] for name, u in r.get("users", {}).items()}
                              for t, r in self.tenants.items()})
        write_private(self.config_path, text)
        return self.config_path


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def tls_only_config(data_dir: Path, tls: Mapping[str, str]) -> Path:
    """``--tls`` without ``--auth``: a config with the ``tls`` block alone, ``<data dir>/tls/nats.conf``."""
    path = Path(data_dir) / "tls" / "nats.conf"
    write_private(path, render_config(None, {}, tls))
    return path


def urls_for(users: Mapping[str, str], scheme: str, host: str, port: int,
             names: Sequence[str] = HORIZON_USERS) -> dict[str, str]:
    """Each HORIZON user's URL on that server."""
    return {user: user_url(scheme, user, users[user], host, port) for user in names}
