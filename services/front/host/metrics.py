"""Prometheus exposition of a host's OpenTelemetry metrics (``/metrics``; docs/observability.md).

The parts record their metrics through an OpenTelemetry meter provider (``TracedLog``'s counters
and decision-round histogram, the projections' gauges of the read models); ``prometheus_provider``
gives them one whose readers include OpenTelemetry's Prometheus reader on a registry of this host's
own, and ``metrics_handler`` renders that registry in the Prometheus text format when scraped. The
observable gauges (queue length, GPUs by state, consumer lag) are computed at the scrape from the
state the parts keep in memory: nothing polls the database.

OpenTelemetry's names become Prometheus's: dots turn to underscores, a counter gets ``_total``
and a unit its suffix (``horizon.decide.duration`` in ms is ``horizon_decide_duration_milliseconds``).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import urllib.request
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from services.front.host.http import Request, Response

__all__ = ["prometheus_provider", "metrics_handler", "merged_handler", "child_metrics_url", "require_bearer",
           "read_token", "CONTENT_TYPE", "METRICS_PORTS"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Each part's own port for ``horizon service NAME --metrics`` (several parts on one machine under
# systemd); in Kubernetes every pod has its address and they all use 9470.
METRICS_PORTS = {"submission": 9471, "scheduling": 9472, "placement": 9473, "preemption": 9474,
                 "inventory": 9475, "projections": 9476, "agent": 9477}

# Decision latencies are milliseconds: buckets from a fraction of one to tens of seconds.
# Queue waits are seconds: from at once to days.
_S_BUCKETS = (0.1, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0)
_MS_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0)


def prometheus_provider(service_name: str, readers: list[Any] | None = None) -> tuple[Any, Any]:
    """A meter provider that Prometheus can scrape (plus ``readers``, e.g. ``--otel``'s exporter) and
    the registry holding it."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(registry=registry, disable_target_info=True, scope_info_enabled=False)
    views = [View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(_MS_BUCKETS))
             for name in ("horizon.decide.duration", "horizon.cycle.latency")]
    views.append(View(instrument_name="horizon.job.wait", aggregation=ExplicitBucketHistogramAggregation(_S_BUCKETS)))
    provider = MeterProvider(metric_readers=[reader, *(readers or [])], views=views,
                             resource=Resource.create({"service.name": service_name}))
    return provider, registry


def read_token(path: Path | str) -> str:
    """A token kept in a file (its first line): a scrape credential, or the dashboard's token."""
    words = Path(path).read_text().split()
    if not words:
        raise ValueError(f"{path} holds no token")
    return words[0]


def require_bearer(handler: Any, tokens: Collection[str]) -> Any:
    """``handler`` answered only for a request that carries ``Authorization: Bearer T``, ``T`` one of
    ``tokens`` (none: answered for anyone, as without accounts, where every client is trusted).

    Under accounts the metrics name tenants (queue length by tenant, waits, rejections), so a
    scrape is the operator's: the dashboard's token, or a scrape credential of its own
    (``DIR/auth/metrics-token`` for ``horizon up --auth``; Prometheus's ``authorization:
    credentials_file``). Anyone who reached the port used to read them (issue 31)."""
    wanted = [t.encode() for t in tokens if t]
    if not wanted:
        return handler

    async def guarded(request: Request) -> Response:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        offered = given.strip().encode()
        # every token compared, in constant time: how far a guess got is not in the answer's time
        if scheme.lower() == "bearer" and sum(secrets.compare_digest(offered, t) for t in wanted):
            return await handler(request)
        return Response(401, b"this /metrics needs the operator's token or a scrape credential: "
                             b"Authorization: Bearer <token> (docs/observability.md)\n",
                        headers={"WWW-Authenticate": 'Bearer realm="horizon metrics"'})

    return guarded


def metrics_handler(registry: Any) -> Any:
    """The ``/metrics`` handler over ``registry`` (the Prometheus text exposition format, 0.0.4)."""
    from prometheus_client import generate_latest

    async def handle(_request: Request) -> Response:
        # in the event loop's thread, between two folds: the gauges read a consistent state
        return Response(200, generate_latest(registry), CONTENT_TYPE)

    return handle


_PRINTED = re.compile(r"metrics \(Prometheus\) on (http://\S+/metrics)")


def child_metrics_url(log_file: Path) -> str | None:
    """The ``/metrics`` URL a ``horizon service NAME --metrics-port 0`` child printed last in its log
    (a restarted child appends its new one)."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return None
    found = _PRINTED.findall(text)
    return found[-1].replace("http://0.0.0.0:", "http://127.0.0.1:") if found else None


def _fetch(url: str, token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310 (a URL our own child printed)
        return str(reply.read().decode())


def merged_handler(sources: Callable[[], list[str]], token: str | None = None) -> Any:
    """``/metrics`` for parts that run as processes of their own (``horizon up --processes``): each
    scrape fetches every child's ``/metrics`` (``sources()``, with ``token`` as the bearer when the
    children require one) and serves their families merged, one family per name with every child's
    samples (their ``part`` label tells them apart). A child that does not answer (restarting) is
    left out of that scrape."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    async def handle(_request: Request) -> Response:
        loop = asyncio.get_running_loop()
        urls = sources()
        texts = await asyncio.gather(*(loop.run_in_executor(None, _fetch, u, token) for u in urls),
                                     return_exceptions=True)
        families: dict[str, Any] = {}
        for text in texts:
            if isinstance(text, BaseException):
                continue
            for family in text_string_to_metric_families(text):
                known = families.setdefault(family.name, family)
                if known is not family:
                    known.samples.extend(family.samples)

        class Merged:
            def collect(self) -> Any:
                return iter(families.values())

        registry = CollectorRegistry(auto_describe=False)
        registry.register(Merged())
        return Response(200, generate_latest(registry), CONTENT_TYPE)

    return handle
