"""Fixtures: a real nats-server per test (bundled binary, free port, temporary store), and a running
Horizon on it (``running_horizon``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.runtime.bytecode import compile_tree
from services.runtime.jetstream import JetStreamLog
from services.runtime.memory_log import MemoryLog
from services.runtime.natsserver import NatsServer
from tests.e2e import RunningHorizon


def pytest_sessionstart(session: pytest.Session) -> None:
    """The tests start hundreds of ``horizon`` processes: let them find the checkout compiled."""
    compile_tree()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh JetStream server on a free loopback port, stopped by PID afterwards."""
    server = NatsServer(store_dir=tmp_path / "js", port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def js_log(nats_server: NatsServer) -> AsyncIterator[JetStreamLog]:
    log = await JetStreamLog.open(nats_server.url, name="test")
    try:
        yield log
    finally:
        await log.close()


@pytest.fixture
async def running_horizon(nats_server: NatsServer,
                          tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[RunningHorizon]]]:
    """Starts a running Horizon on ``nats_server``: ``await running_horizon(nodes=..., executor="sim", ...)``
    takes ``Stack``'s fields (data in ``tmp_path`` unless ``data_dir`` says otherwise). A test stops it
    with ``stop()`` before reading what the log holds at its end; whatever is still running when the
    test ends, passed or failed, is stopped here."""
    started: list[RunningHorizon] = []

    async def start(*, data_dir: Path | None = None, **stack: Any) -> RunningHorizon:
        running = await RunningHorizon.start(nats_server.url, data_dir or tmp_path, **stack)
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in reversed(started):
            await running.stop()


@pytest.fixture(params=["memory", "jetstream"])
async def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[object]:
    """The contract suite runs against both implementations of the EventLog port."""
    if request.param == "memory":
        yield MemoryLog()
        return
    server = NatsServer(store_dir=tmp_path / "js", port=0)
    server.start()
    log = await JetStreamLog.open(server.url, name="contract")
    try:
        yield log
    finally:
        await log.close()
        server.stop()


@pytest.fixture(autouse=True)
def _no_job_left_running(tmp_path: Path) -> Iterator[None]:
    """Jobs outlive their agent (services/nodes/backends/process/attempt_supervisor.py), so a test that stops its stack leaves the
    jobs it did not wait for running: kill them, as an operator clearing the node would."""
    yield
    from services.nodes.backends.process.executors import kill_attempts

    kill_attempts(tmp_path)


@pytest.fixture(scope="session")
def kubernetes_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Kubernetes cluster for the whole run (``tests/kubernetes_cluster.py``): fails in CI and
    is skipped elsewhere, with the reason, where it cannot start; stopped, leaving nothing behind, at
    the end of the run."""
    import os

    from tests.kubernetes_cluster import start_cluster, stop_cluster, unavailable

    why = unavailable()
    if why is not None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    folder = tmp_path_factory.mktemp("k8s")
    try:
        cluster = start_cluster(folder)
    except (RuntimeError, OSError) as exc:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(str(exc))
    try:
        yield cluster
    finally:
        stop_cluster(folder)
