"""``horizon tenant add NAME``: a tenant of the ``horizon up --auth`` running on this machine.

An operator command, run beside that ``up`` (it reads the data dir, as only
the operator can). In order, holding the data dir's registry lock:

1. the tenant's record: a new one gets a random password; an existing one is
   kept as it is (so adding a tenant again prints the same answer);
2. the server's configuration, rewritten with the tenant's account and the
   doors HORIZON exports to it (services/host/auth.py), and the running
   server made to serve it (services/host/tenants.py ``open_doors``: reloads
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

import asyncio
import json
import os
import ssl
import time
from pathlib import Path

import click

from events import catalogue as c
from services.cli.options import DEFAULT_DATA_DIR
from services.cli.policy import configure
from services.host.auth import Registry, check_tenant_name, user_url, write_private
from services.host.running import Running, operator_endpoint
from services.host.tenants import DoorsClosed, open_doors
from services.host.tls import TlsFiles, tenant_certificate

__all__ = ["register"]


@click.group()
def tenant() -> None:
    """Tenants of `horizon up --auth` (operators): each an account of its own."""


def _server_tls(data_dir: Path) -> dict[str, str]:
    where = Path(data_dir).resolve() / "tls"
    return {"ca": str(where / "ca.pem"), "cert": str(where / "server.pem"), "key": str(where / "server.key")}


def _credentials_file(data_dir: Path, name: str, url: str, tls: TlsFiles | None) -> Path:
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


@tenant.command(name="add")
@click.argument("name")
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA_DIR, show_default=True,
              help="The data dir of the running `horizon up --auth`.")
@click.option("--json", "as_json", is_flag=True, help='Print {"tenant": NAME, "nats_url": URL}.')
def tenant_add(name: str, data_dir: Path, as_json: bool) -> None:
    """Create tenant NAME (an account with one user) on the running `horizon up --auth`, and say how it connects.

    Adding a tenant that exists prints the same answer again.
    """
    try:
        check_tenant_name(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    running = Running.read(data_dir)
    if running is None:
        raise click.ClickException(f"no `horizon up --auth` is running on {data_dir} (nothing live in "
                                   f"{data_dir}/server.json): start it first")
    if not running.auth:
        raise click.ClickException(f"the `horizon up` running on {data_dir} has no accounts: tenants need "
                                   f"`horizon up --auth`")
    operator = operator_endpoint(data_dir)
    assert operator is not None
    admin_url, machine = operator
    if machine is not None and not os.environ.get("HORIZON_TLS_CERT"):
        os.environ.update(machine.env())  # the operator's connection presents this machine's certificate
    with Registry.locked(data_dir) as registry:
        record, new = registry.add_tenant(name)
        if new:
            registry.write_config(_server_tls(data_dir) if running.tls else None)
        url = user_url(running.scheme, name, record["password"], running.host, running.port)
        # by absolute paths: the answer and the .env file are handed to the tenant, not used from this folder
        tls = tenant_certificate(Path(data_dir).absolute(), name) if running.tls else None
        context = None
        if tls is not None:
            context = ssl.create_default_context(cafile=str(tls.ca))
            context.load_cert_chain(str(tls.cert), str(tls.key))
        try:
            asyncio.run(open_doors(running, admin_url, name, url, context, changed=new))
        except DoorsClosed as exc:
            raise click.ClickException(str(exc)) from None
        if not record.get("account_configured"):
            event = c.AccountConfigured(ts=time.time(), source="horizon-cli", correlation_id=name, account=name,
                                        tenants=[name], user="horizon tenant add")
            result = configure(admin_url, "account", event)
            if result["applied"] is False:
                raise click.ClickException(f"tenant {name} added, but its account was rejected: {result['reason']}")
            record["account_configured"] = True
            registry.save_tenants()
        env_file = _credentials_file(data_dir, name, url, tls)
    if as_json:
        answer: dict[str, object] = {"tenant": name, "nats_url": url}
        if tls is not None:
            answer["tls"] = tls.as_json()
        click.echo(json.dumps(answer))
        return
    click.echo(f"tenant {name} {'added' if new else 'exists'}; it may charge account {name} "
               f"(`horizon account set {name} --tenant {name} ...` to configure it).\n"
               f"Its credentials: {env_file} (its URL with its password, readable by you only).\n"
               f"Hand that file to the tenant; with it:\n"
               f"  set -a; . {env_file}; set +a\n"
               f"  horizon submit -- hostname\n"
               f"(`horizon tenant add {name} --json` prints the URL itself.)")


def register(group: click.Group) -> None:
    group.add_command(tenant)

