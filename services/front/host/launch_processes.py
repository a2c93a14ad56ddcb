"""``horizon up --processes``: nats-server here, every part a supervised child process
(``horizon service NAME``), restarted if it dies."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from services.front.client.problems import Failure
from services.front.client.terminal import say
from services.front.host.dashboard_setup import METRICS_TOKEN_FILE
from services.front.host.launch_web import (UI_PORT, dashboard_line, metrics_line, metrics_tokens, ready_lines,
                                            up_dashboard)
from services.front.host.partitions import publish_stock
from services.front.host.running import Running
from services.front.host.secure import Secured
from services.front.host.supervisor import ChildSpec, Supervisor
from services.front.registry import SERVICES
from services.nodes.spec import NodeSpec
from services.runtime.jetstream import JetStreamLog
from services.runtime.natsserver import NatsServer

__all__ = ["process_specs", "up_processes"]


def process_specs(url: str, data_dir: Path, common: list[str], agent: list[str] | None,
                  urls: dict[str, str] | None = None) -> list[ChildSpec]:
    """One ``horizon service NAME`` command line per part: the five services, the projections,
    and (unless ``agent`` is None) the agent with its node options (``[]``: this machine).

    ``urls`` (``--auth``): each part's own URL, given in its environment (``HORIZON_NATS_URL``),
    not on its command line, which holds no password."""
    base = [sys.executable, "-m", "services.front.cli.main", "service"]
    names = [*SERVICES, "projections", *(["agent"] if agent is not None else [])]
    specs = []
    for name in names:
        own = (urls or {}).get(name)
        where = [*(["--nats", url] if own is None else []), "--data-dir", str(data_dir.resolve())]
        env = {"HORIZON_NATS_URL": own} if own is not None else {}
        specs.append(ChildSpec(name, [*base, name, *where, *common, *(agent if name == "agent" and agent else [])],
                               env=env))
    return specs


async def _create_streams(url: str) -> None:
    setup = await JetStreamLog.open(url, name="horizon-setup")
    await setup.close()


def _serve_web(server: NatsServer, data_dir: Path, common: list[str], agent: list[str] | None, secured: Secured,
               ui_port: int | None) -> tuple[Any, Any, list[str]]:
    """/metrics on the HTTP port: every child's, merged at each scrape (each child serves its own on a
    free port, printed in its log), and the dashboard; the server, how to stop it, and the tokens."""
    from services.front.host.http import HttpServer, serve_in_thread
    from services.front.host.metrics import child_metrics_url, merged_handler, require_bearer

    logs = data_dir / "logs"
    names = [spec.name for spec in process_specs("", data_dir, common, agent)]
    web = HttpServer("127.0.0.1", UI_PORT if ui_port is None else ui_port)
    tokens = metrics_tokens(secured, data_dir)  # under --auth, the children's own /metrics too
    web.mount("/metrics", require_bearer(merged_handler(
        lambda: [u for u in (child_metrics_url(logs / f"{n}.log") for n in names) if u is not None],
        token=tokens[-1] if tokens else None), tokens))
    policy = common[common.index("--policy") + 1] if "--policy" in common else "multifactor"
    backfill = common[common.index("--backfill-mode") + 1] if "--backfill-mode" in common else "easy"
    up_dashboard(secured, server, data_dir, policy, backfill).mount(web)  # connects once the server is up
    try:
        stop_web = serve_in_thread(web)
    except OSError as exc:
        if ui_port is not None:
            raise Failure(f"cannot serve HTTP on 127.0.0.1:{web.port}: {exc.strerror or exc}") from None
        say(f"warning: port {web.port} is taken; serving HTTP on a free port", err=True)
        web.port = 0
        stop_web = serve_in_thread(web)
    return web, stop_web, tokens


def up_processes(server: NatsServer, data_dir: Path, common: list[str], agent: list[str] | None,
                 shape: str, hint: str = "horizon submit -- hostname", secured: Secured | None = None,
                 nodes: list[NodeSpec] | None = None, ui_port: int | None = None) -> None:
    """``horizon up --processes``: nats-server here, every part a supervised child process.

    Phases: 1. the server and the streams (so a submission made as soon as the URL is printed is
    kept); 2. the children, then their readiness (sd_notify); 3. watch and restart until Ctrl-C
    or SIGTERM; 4. stop the children by PID, then the server. A second Ctrl-C kills at once.
    """
    signals: list[int] = []
    previous = {sig: signal.signal(sig, lambda num, _frame: signals.append(num))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    shout = logging.StreamHandler()  # exits and restarts also on the terminal
    shout.setLevel(logging.WARNING)
    logging.getLogger("horizon.supervisor").addHandler(shout)
    supervisor: Supervisor | None = None
    stop_web: Any = None
    try:
        secured = secured or Secured(None, None, None)
        web, stop_web, tokens = _serve_web(server, data_dir, common, agent, secured, ui_port)
        server.start()
        url, urls = secured.public_url(server.host, server.port), secured.part_urls(server.host, server.port)
        asyncio.run(_create_streams(urls.get("admin", url)))
        asyncio.run(publish_stock(urls.get("admin", url), nodes or []))  # the stock partitions
        specs = process_specs(url, data_dir, common, agent, urls)
        if tokens:  # each child's /metrics asks for the scrape credential (the file's path, not the token)
            specs = [dataclasses.replace(spec, env={**spec.env, "HORIZON_METRICS_TOKEN_FILE": str(
                data_dir / "auth" / METRICS_TOKEN_FILE)}) for spec in specs]
        supervisor = Supervisor(specs, data_dir / "logs", pid_file=data_dir / "processes.json")
        supervisor.start()
        waiting = supervisor.wait_ready(120.0, should_stop=lambda: bool(signals))
        if not signals:
            if waiting:
                say(f"not ready after 120 s: {', '.join(waiting)} (see {data_dir}/logs/)", err=True)
            assert server.pid is not None
            secured.running(server.host, server.port, server.pid).write(data_dir)
            say(url)
            pids = ", ".join(f"{name} {pid}" for name, pid in supervisor.pids().items())
            say(
                f"Horizon is up as processes: {shape}; PIDs: {pids}\n"
                f"logs in {data_dir}/logs/, PIDs in {data_dir}/processes.json.\n"
                f"{dashboard_line(web.url, secured, data_dir)}"
                f"{metrics_line(web.url, secured, data_dir)}"
                f"{ready_lines(secured, data_dir, hint, url, server.port)}"
                f"Ctrl-C stops everything.",
                err=True,
            )
            supervisor.run(lambda: bool(signals))
    finally:
        if supervisor is not None:
            supervisor.stop(force=lambda: len(signals) > 1)
        if stop_web is not None:
            stop_web()
        Running.remove(data_dir)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        say("stopped", err=True)
