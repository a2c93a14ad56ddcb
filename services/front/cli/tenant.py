"""``horizon tenant add NAME``: a tenant of the ``horizon up --auth`` running on this machine.

An operator command, run beside that ``up`` (it reads the data dir, as only
the operator can). In order, holding the data dir's registry lock:

1. the tenant's record: a new one gets a random password; an existing one is
   kept as it is (so adding a tenant again prints the same answer);
2. the server's configuration, rewritten with the tenant's account and the
   doors HORIZON exports to it (services/front/host/auth.py), and the running
   server made to serve it (services/front/host/tenants.py ``open_doors``: reloads
   until the tenant's imports answer);
3. once per tenant, an account named like it that only it may charge:
   ``AccountConfigured(account=NAME, tenants=[NAME])`` on
   ``horizon.in._admin.account``, published as the operator (configure it
   further with ``horizon account set NAME --tenant NAME ...``);
4. how the tenant connects: ``--json`` prints ``{"tenant", "nats_url"}``,
   ``nats_url`` with the tenant's user and password in it (``nats.connect(url)``
   alone connects as the tenant), plus ``"tls"`` (its CA, certificate and key)
   under ``--tls``; without ``--json``, the path of a file of shell variables
   for the tenant (``HORIZON_NATS_URL``, ``HORIZON_TLS_*``), which the
   terminal does not show.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from events import catalogue as c
from services.front.cli.options import DEFAULT_DATA_DIR
from services.front.client.configure import configure
from services.front.host.logins import (credentials_file, default_login_identity, open_login, operator_context,
                                        publish_user, server_tls, unix_identity)
from services.front.host.auth import Registry, check_tenant_name, user_url

__all__ = ["register"]

# A tenant's jobs may use every class but critical unless the operator says otherwise: a critical job
# preempts any other class, across tenants (docs/tenants.md, "Classes").
DEFAULT_MAX_CLASS = "high"


@click.group()
def tenant() -> None:
    """Tenants of `horizon up --auth` (operators): each an account of its own."""


@tenant.command(name="add")
@click.argument("name")
@click.option("--unix-user", default=None,
              help="The Unix user the tenant's own login runs jobs as (default: the one named NAME, else nobody).")
@click.option("--allow-root", is_flag=True, help="Allow --unix-user root: the login's jobs then run as root.")
@click.option("--max-class", type=click.Choice(c.PRIORITY_CLASSES), default=DEFAULT_MAX_CLASS, show_default=True,
              help="The highest priority class the tenant's jobs may use (critical preempts across tenants).")
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA_DIR, show_default=True,
              help="The data dir of the running `horizon up --auth`.")
@click.option("--json", "as_json", is_flag=True, help='Print {"tenant": NAME, "nats_url": URL}.')
def tenant_add(name: str, unix_user: str | None, allow_root: bool, max_class: str, data_dir: Path,
               as_json: bool) -> None:
    """Create tenant NAME (an account with one login) on the running `horizon up --auth`, and say how it connects.

    Adding a tenant that exists prints the same answer again (and sets its login's Unix user when
    --unix-user is given).
    """
    try:
        check_tenant_name(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    identity = unix_identity(unix_user, allow_root=allow_root) if unix_user else None
    running, admin_url = operator_context(data_dir)
    with Registry.locked(data_dir) as registry:
        record, new = registry.add_tenant(name)
        if new:
            registry.write_config(server_tls(data_dir) if running.tls else None)
        url = user_url(running.scheme, name, record["password"], running.host, running.port)
        tls = open_login(running, admin_url, data_dir, name, url, changed=new)
        if not record.get("account_configured"):
            event = c.AccountConfigured(ts=time.time(), source="horizon-cli", correlation_id=name, account=name,
                                        tenants=[name], user="horizon tenant add", max_priority_class=max_class)
            result = configure(admin_url, "account", event)
            if result["applied"] is False:
                raise click.ClickException(f"tenant {name} added, but its account was rejected: {result['reason']}")
            record["account_configured"] = True
            record["max_class"] = max_class
            registry.save_tenants()
        if identity is not None or not record.get("login"):
            # the login's Unix identity, in the log: the submission core stamps it on the login's jobs
            login = identity or default_login_identity(name)
            publish_user(admin_url, name, name, login)
            record["login"] = login
            registry.save_tenants()
        env_file = credentials_file(data_dir, name, url, tls)
    if as_json:
        answer: dict[str, object] = {"tenant": name, "nats_url": url}
        if tls is not None:
            answer["tls"] = tls.as_json()
        click.echo(json.dumps(answer))
        return
    login = record["login"]
    classes = c.PRIORITY_CLASSES[c.PRIORITY_CLASSES.index(record.get("max_class") or "critical"):]
    click.echo(f"tenant {name} {'added' if new else 'exists'}; it may charge account {name} "
               f"(`horizon account set {name} --tenant {name} ...` to configure it).\n"
               f"Its jobs may use the classes {', '.join(classes)} (`horizon account set {name} --tenant {name} "
               f"--max-priority-class CLASS` changes it).\n"
               f"Its login's jobs run as Unix user {login.get('unix_user') or login['uid']} (uid {login['uid']}); "
               f"give each person a user of their own with `horizon user add NAME --tenant {name}`.\n"
               f"Its credentials: {env_file} (its URL with its password, readable by you only).\n"
               f"Hand that file to the tenant; with it:\n"
               f"  set -a; . {env_file}; set +a\n"
               f"  horizon submit --chdir /tmp -- hostname   # a folder its Unix user may enter\n"
               f"(`horizon tenant add {name} --json` prints the URL itself.)")


def register(group: click.Group) -> None:
    from services.front.cli.tenant_set import tenant_set  # `horizon tenant set NAME`: its limits

    tenant.add_command(tenant_set)
    group.add_command(tenant)

