"""``horizon ui``: the web dashboard (services/front/host/dashboard.py; docs/dashboard.md) on a port of this machine."""

from __future__ import annotations

import asyncio
import signal

import click

from services.front.audit.config import BACKFILL_MODES, POLICIES
from services.front.cli.options import nats_option
from services.front.host.dashboard_setup import dashboard_for, has_password

__all__ = ["register"]

UI_PORT = 8470


@click.command("ui")
@nats_option
@click.option("--port", type=click.IntRange(min=0, max=65535), default=None,
              help=f"HTTP port (0: a free one) [default: {UI_PORT}, or a free one when that is taken, as by the "
                   f"`horizon up` beside it].")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (0.0.0.0: every interface; then use --login).")
@click.option("--login/--no-login", default=None,
              help="Make browsers log in: with the printed token (the operator's view), or as a tenant with its "
                   "name and password [default: when the --nats URL carries a password, i.e. with accounts].")
@click.option("--token", envvar="HORIZON_UI_TOKEN", default=None,
              help="The login token (or $HORIZON_UI_TOKEN) [default: a new random one, printed].")
@click.option("--policy", type=click.Choice(POLICIES), default="multifactor", show_default=True,
              help="The queue policy the services run with (for the job story's audit verdicts).")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True,
              help="The backfill mode the services run with (for the audit verdicts).")
def ui(nats_url: str, port: int | None, host: str, login: bool | None, token: str | None, policy: str,
       backfill_mode: str) -> None:
    """Serve the web dashboard: the cluster's GPUs, the queue, fair share, each job's story, charts.

    It is a client like the CLI: over an operator's connection (the default: the `horizon up` on
    --data-dir) it shows everything and offers cancel and cordon; over a tenant's own URL
    (--nats with the tenant's credentials) that tenant's jobs only, read-only. With accounts the
    browser logs in (see docs/dashboard.md). Ctrl-C stops it.
    """
    from services.front.host.http import HttpServer

    login = has_password(nats_url) if login is None else login
    dashboard = dashboard_for(nats_url, login=login, token=token, policy=policy, backfill=backfill_mode)

    async def go() -> None:
        from services.runtime.jetstream import connect
        from services.runtime.log import LogError

        try:  # a clear answer now for a server that is not there or refuses the credentials
            probe = await connect(nats_url, name="horizon-ui-check", connect_timeout_s=3.0, max_attempts=2)
        except LogError as exc:  # one line for the user: it names the server and what to do
            raise click.ClickException(str(exc)) from None
        await probe.close()
        if not login and host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"warning: serving on {host} without --login: anyone who reaches it acts as "
                       f"{'the operator' if dashboard.tenant is None else 'tenant ' + dashboard.tenant}", err=True)
        web = HttpServer(host, UI_PORT if port is None else port)
        dashboard.mount(web)
        try:
            await web.start()
        except OSError as exc:
            if port is not None:  # a port asked for is that port or an error
                raise click.ClickException(f"cannot serve HTTP on {host}:{port}: {exc.strerror or exc}") from None
            # the default is taken, most often by the `horizon up` whose dashboard this is another of
            click.echo(f"warning: port {UI_PORT} is taken; serving HTTP on a free port", err=True)
            web.port = 0
            await web.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C and SIGTERM stop it in order
            loop.add_signal_handler(sig, stop.set)
        try:
            click.echo(f"Dashboard: {web.url}/", err=True)
            if login:
                who = "as the operator" if dashboard.tenant is None else f"(tenant {dashboard.tenant}'s view)"
                click.echo(f"Log in {who}: {web.url}/login?token={dashboard.token}"
                           + ("; or as a tenant with its name and password" if dashboard.tenant is None else ""),
                           err=True)
            click.echo("Ctrl-C stops it.", err=True)
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await web.stop()

    asyncio.run(go())


def register(group: click.Group) -> None:
    group.add_command(ui)
