"""The web side of a Horizon that ``horizon up`` or ``horizon service`` launches: its HTTP server
(``/metrics`` and the dashboard), who may scrape it, its telemetry providers, and the lines that tell
the operator where to look and what to try."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.front.client.problems import Failure
from services.front.client.terminal import say
from services.front.host.dashboard_setup import METRICS_TOKEN_FILE, TOKEN_FILE, dashboard_for, keep_token
from services.front.host.secure import Secured
from services.runtime.natsserver import NatsServer

__all__ = ["UI_PORT", "up_dashboard", "dashboard_line", "metrics_tokens", "metrics_line", "ready_lines",
           "http_server", "telemetry"]

UI_PORT = 8470  # horizon up's HTTP port: /metrics and the dashboard's pages


def up_dashboard(secured: Secured, server: NatsServer, data_dir: Path, policy: str, backfill: str) -> Any:
    """``up``'s dashboard, as the operator; with accounts browsers log in (the operator with the
    token kept in DIR/auth/dashboard-token, a tenant with its name and password)."""
    url = secured.part_urls(server.host, server.port).get("admin") or secured.public_url(server.host, server.port)
    auth = secured.users is not None
    return dashboard_for(url, login=auth, token=keep_token(data_dir) if auth else None, policy=policy,
                         backfill=backfill)


def dashboard_line(web_url: str, secured: Secured, data_dir: Path) -> str:
    if secured.users is None:
        return f"Dashboard: {web_url}/\n"
    return (f"Dashboard: {web_url}/ (log in with the operator's token in {data_dir}/auth/{TOKEN_FILE}, "
            f"or as a tenant with its name and password)\n")


def metrics_tokens(secured: Secured, data_dir: Path) -> list[str]:
    """Who may scrape ``up``'s /metrics: anyone without accounts (every client is trusted); with them,
    whoever presents the dashboard's token or the scrape credential (both kept in DIR/auth/, made
    once; the scrape credential last)."""
    if secured.users is None:
        return []
    return [keep_token(data_dir), keep_token(data_dir, METRICS_TOKEN_FILE)]


def metrics_line(web_url: str, secured: Secured, data_dir: Path) -> str:
    if secured.users is None:
        return f"Metrics (Prometheus): {web_url}/metrics\n"
    return (f"Metrics (Prometheus): {web_url}/metrics (Authorization: Bearer, the token in "
            f"{data_dir}/auth/{METRICS_TOKEN_FILE} or the dashboard's)\n")


def ready_lines(secured: Secured, data_dir: Path, hint: str, url: str = "", port: int = 4222) -> str:
    """What to try once up: without accounts, the commands as they are; with them, a tenant first.

    Every command shown runs as printed from another shell: it carries ``--nats URL`` when the
    server is not on the default port (``--port 0``, or 4222 taken), and ``--data-dir`` when the
    data directory is not ``./.horizon``."""
    nats = f" --nats {url}" if url and port != 4222 else ""

    def cmd(text: str) -> str:  # "horizon submit -- x" -> "horizon submit --nats URL -- x"
        head, _, rest = text.partition(" ")
        verb, _, tail = rest.partition(" ")
        return f"{head} {verb}{nats}" + (f" {tail}" if tail else "")

    if secured.users is None:
        tls = ("Clients need this machine's certificate: HORIZON_TLS_CA, HORIZON_TLS_CERT and HORIZON_TLS_KEY "
               f"set to {data_dir}/tls/ca.pem, client.pem and client.key (docs/tenants.md)\n"
               if secured.tls is not None else "")
        tries = "".join(f"  {cmd(c)}\n" for c in (hint, "horizon queue", "horizon jobs", "horizon watch"))
        return f"{tls}Try, in another shell:\n{tries}"
    where = f" --data-dir {data_dir}" if data_dir != Path(".horizon").absolute() else ""
    return (f"Accounts on: each part and the operator have a user of their own (credentials in {data_dir}/auth/, "
            f"not shown)\n"
            f"Try, in another shell:\n"
            f"  horizon tenant add acme --json{where}   # prints acme's URL\n"
            f"  HORIZON_NATS_URL=<that URL> {hint}\n"
            f"  horizon account set acme --tenant acme --shares 2{where}   # an operator command\n")


async def http_server(registry: Any, host: str, port: int | None, fallback: bool = False,
                      dashboard: Any = None, tokens: list[str] | None = None) -> Any:
    """The host's HTTP server with ``/metrics`` mounted (for a bearer of one of ``tokens`` only, if
    any) and ``dashboard`` at ``/``; ``port`` None is ``UI_PORT``, and with ``fallback`` a free port
    when that one is taken (another ``horizon up``)."""
    from services.front.host.http import HttpServer
    from services.front.host.metrics import metrics_handler, require_bearer

    web = HttpServer(host, UI_PORT if port is None else port)
    web.mount("/metrics", require_bearer(metrics_handler(registry), tokens or []))
    if dashboard is not None:
        dashboard.mount(web)
    try:
        await web.start()
    except OSError as exc:
        if not fallback:
            raise Failure(f"cannot serve HTTP on {host}:{web.port}: {exc.strerror or exc}") from None
        say(f"warning: port {web.port} is taken; serving HTTP on a free port", err=True)
        web.port = 0
        await web.start()
    return web


def telemetry(exporter: str, service_name: str, prometheus: bool = False) -> tuple[Any, Any, Any]:
    """Tracer and meter providers for ``--otel`` (None, None when off), and with ``prometheus`` a
    meter provider Prometheus scrapes (also exporting to ``--otel``'s exporter) and its registry."""
    if exporter == "none":
        if prometheus:
            from services.front.host.metrics import prometheus_provider

            return (None, *prometheus_provider(service_name))
        return None, None, None
    from services.runtime.telemetry import configure

    try:
        tracing = configure(exporter, service_name)
    except ValueError as exc:
        raise Failure(str(exc)) from None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    if exporter == "console":
        reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=60_000)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter  # type: ignore

        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    if prometheus:
        from services.front.host.metrics import prometheus_provider

        return (tracing, *prometheus_provider(service_name, [reader]))
    return tracing, MeterProvider(metric_readers=[reader]), None
