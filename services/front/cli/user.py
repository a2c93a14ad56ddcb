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

import grp
import json
from pathlib import Path
from typing import Any

import click

from events.subjects import check_token, user_login
from services.front.cli.options import DEFAULT_DATA_DIR, nats_option
from services.front.host.auth import Registry, check_tenant_name, user_url
from services.front.host.logins import (credentials_file, open_login, operator_context, publish_user, server_tls,
                                        unix_identity)

__all__ = ["register"]


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
