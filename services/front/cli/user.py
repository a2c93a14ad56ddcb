"""``horizon user add NAME --tenant T``: a user of a tenant, with its own login and the Unix user its jobs run as.

An operator command, run beside the ``horizon up --auth`` it adds to (it reads the data dir).
Holding the data dir's registry lock, like ``horizon tenant add``:

1. the user's Unix identity: ``--unix-user U`` (default: the Unix user named NAME) read from this
   machine's passwd and group databases, or ``--uid`` with ``--gid``/``--groups`` for a uid this
   machine does not name; uid 0 is refused unless ``--allow-root``;
2. its login, ``<tenant>.<name>`` in the tenant's account, with a random password (a user added
   again keeps its password): the server's configuration rewritten and reloaded until the new login
   answers (services/front/host/tenants.py ``open_doors``);
3. ``UserConfigured`` published as the operator: from then on the submission core gives every job
   that login submits that user's name and Unix identity, and its nodes run the job as that uid.

``--json`` prints ``{"user", "tenant", "uid", "nats_url"}``.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import ssl
import time
from pathlib import Path
from typing import Any

import click

from events import catalogue as c
from events.subjects import check_token, user_login
from services.nodes.backends.process.identity import NOBODY
from services.front.cli.options import DEFAULT_DATA_DIR, nats_option
from services.front.cli.policy import configure
from services.front.host.auth import Registry, check_tenant_name, user_url, write_private
from services.front.host.running import Running, operator_endpoint
from services.front.host.tenants import DoorsClosed, open_doors
from services.front.host.tls import TlsFiles, tenant_certificate

__all__ = ["register", "unix_identity", "publish_user", "credentials_file", "open_login", "server_tls", "NOBODY"]


def unix_identity(unix_user: str | None, uid: int | None = None, gid: int | None = None,
                  groups: tuple[int, ...] = (), allow_root: bool = False) -> dict[str, Any]:
    """``{"unix_user", "uid", "gid", "groups"}`` from this machine's passwd and group databases (by
    name), or as given (``uid``); raises ``click.ClickException`` naming what is wrong."""
    if uid is None:
        try:
            entry = pwd.getpwnam(unix_user or "")
        except KeyError:
            raise click.ClickException(f"there is no Unix user {unix_user!r} on this machine: create it "
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
        raise click.ClickException("that is uid 0 (root): a tenant's jobs would run as root. Refused unless "
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
    """``UserConfigured`` as the operator; raises ``click.ClickException`` if it was refused."""
    event = c.UserConfigured(ts=time.time(), source="horizon-cli", correlation_id=f"{tenant}.{name}", tenant=tenant,
                             name=name, uid=identity["uid"], gid=identity["gid"], groups=list(identity["groups"]),
                             unix_user=identity.get("unix_user", ""), allow_root=bool(identity.get("allow_root")),
                             user="horizon user add")
    result = configure(admin_url, "user", event)
    if result["applied"] is False:
        raise click.ClickException(f"user {name} of tenant {tenant}: its identity was rejected: {result['reason']}")


def operator_context(data_dir: Path) -> tuple[Running, str]:
    """The running ``up --auth`` on ``data_dir`` and the operator's URL; a clear error otherwise."""
    running = Running.read(data_dir)
    if running is None:
        raise click.ClickException(f"no `horizon up --auth` is running on {data_dir} (nothing live in "
                                   f"{data_dir}/server.json): start it first")
    if not running.auth:
        raise click.ClickException(f"the `horizon up` running on {data_dir} has no accounts: users need "
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
        raise click.ClickException(str(exc)) from None
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


@click.group()
def user() -> None:
    """Users of a tenant of `horizon up --auth` (operators): each its own login and Unix user."""


def _identity_options(command: Any) -> Any:
    """The options that say which Unix identity a user's jobs run as (``user add``, ``user map``)."""
    for option in reversed([
        click.option("--unix-user", default=None, help="The Unix user its jobs run as (default: the one named NAME)."),
        click.option("--uid", type=int, default=None, help="A uid instead of --unix-user (one this machine need not name)."),
        click.option("--gid", type=int, default=None, help="Its primary group (default: the Unix user's, or the uid)."),
        click.option("--groups", default=None, help="Supplementary gids, comma-separated (default: the group database's)."),
        click.option("--allow-root", is_flag=True, help="Allow uid 0: the user's jobs then run as root."),
    ]):
        command = option(command)
    return command


@user.command(name="add")
@click.argument("name")
@click.option("--tenant", "tenant", required=True, help="The tenant the user belongs to (`horizon tenant add` first).")
@_identity_options
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA_DIR, show_default=True,
              help="The data dir of the running `horizon up --auth`.")
@click.option("--json", "as_json", is_flag=True, help='Print {"user", "tenant", "uid", "nats_url"}.')
def user_add(name: str, tenant: str, unix_user: str | None, uid: int | None, gid: int | None, groups: str | None,
             allow_root: bool, data_dir: Path, as_json: bool) -> None:
    """Add user NAME to tenant T: its own login (URL) and the Unix user its jobs run as.

    Adding a user again keeps its login and takes the identity given now.
    """
    identity = _identity(name, tenant, unix_user, uid, gid, groups, allow_root)
    running, admin_url = operator_context(data_dir)
    with Registry.locked(data_dir) as registry:
        if tenant not in registry.tenants:
            raise click.ClickException(f"no tenant {tenant!r}: add it first (`horizon tenant add {tenant}`)")
        if name == tenant:
            raise click.ClickException(f"{name!r} is the tenant's own login; set its Unix user with "
                                       f"`horizon tenant add {tenant} --unix-user U`")
        entry, new = registry.add_user(tenant, name, identity)
        if new:
            registry.write_config(server_tls(data_dir) if running.tls else None)
        url = user_url(running.scheme, user_login(tenant, name), entry["password"], running.host, running.port)
        tls = open_login(running, admin_url, data_dir, tenant, url, changed=new)
        publish_user(admin_url, tenant, name, identity)
        entry["configured"] = True
        registry.save_tenants()
    if as_json:
        answer: dict[str, Any] = {"user": name, "tenant": tenant, "uid": identity["uid"], "nats_url": url}
        if tls is not None:
            answer["tls"] = tls.as_json()
        click.echo(json.dumps(answer))
        return
    env_file = credentials_file(data_dir, user_login(tenant, name), url, tls)
    who = identity["unix_user"] or f"uid {identity['uid']}"
    click.echo(f"user {name} of tenant {tenant} {'added' if new else 'updated'}: its jobs run as {who} "
               f"(uid {identity['uid']}, gid {identity['gid']}{_group(identity['gid'])}).\n"
               f"Its credentials: {env_file} (its URL with its password, readable by you only); hand that "
               f"file to the user.")


@user.command(name="map")
@nats_option
@click.argument("name")
@click.option("--tenant", "tenant", required=True, help="The tenant the user belongs to.")
@_identity_options
@click.option("--json", "as_json", is_flag=True, help='Print {"user", "tenant", "uid", "gid", "groups"}.')
def user_map(nats_url: str, name: str, tenant: str, unix_user: str | None, uid: int | None, gid: int | None,
             groups: str | None, allow_root: bool, as_json: bool) -> None:
    """Map user NAME of tenant T to the Unix user its jobs run as, on a server configured by hand.

    For a server whose configuration you write yourself (deploy/nats/auth.conf): the login NAME (in the
    tenant's account, with `share: true` on its intake import) is yours to create there; this publishes
    only its identity (UserConfigured). `horizon up --auth` does both with `horizon user add`.
    """
    identity = _identity(name, tenant, unix_user, uid, gid, groups, allow_root)
    publish_user(nats_url, tenant, name, identity)
    answer = {"user": name, "tenant": tenant, "uid": identity["uid"], "gid": identity["gid"],
              "groups": identity["groups"]}
    click.echo(json.dumps(answer) if as_json else
               f"user {name} of tenant {tenant}: its jobs run as {identity['unix_user'] or 'uid ' + str(identity['uid'])} "
               f"(uid {identity['uid']}, gid {identity['gid']}{_group(identity['gid'])})")


def _identity(name: str, tenant: str, unix_user: str | None, uid: int | None, gid: int | None, groups: str | None,
              allow_root: bool) -> dict[str, Any]:
    """The checked names and the Unix identity of ``user add`` and ``user map``."""
    try:
        check_tenant_name(tenant)
        check_token(name, "user")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if uid is not None and unix_user is not None:
        raise click.UsageError("give --unix-user or --uid, not both")
    try:
        gids = tuple(int(g) for g in groups.split(",") if g.strip()) if groups else ()
    except ValueError:
        raise click.BadParameter(f"{groups!r}: gids, comma-separated", param_hint="--groups") from None
    return unix_identity(unix_user or (name if uid is None else None), uid, gid, gids, allow_root)


def _group(gid: int) -> str:
    try:
        return f" ({grp.getgrgid(gid).gr_name})"
    except KeyError:
        return ""


def register(group: click.Group) -> None:
    group.add_command(user)
