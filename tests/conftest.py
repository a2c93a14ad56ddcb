"""Fixtures: a real nats-server per test (bundled binary, free port, temporary store), and a running
Horizon on it (``running_horizon``).

The suite runs on pytest-xdist workers (``-n auto --dist loadgroup`` in pyproject.toml): most tests wait
on servers and subprocesses, not on the CPU. ``pytest_xdist_auto_num_workers`` says how many: 3 for a
run over folders (the whole suite), none (in-process, as before) when every argument is a file or a
test; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` or ``-n N`` on the command line overrides it. Tests that share
something of the machine's run on one worker, one after another (``_xdist_group``, below)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
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


# 2 cores (docs/benchmarks.md section 7): 3 workers 676-764 s against 1,283-1,386 s in one process; 4 took
# 619 s once, but the README journey then timed out (120 s) and more timing-bound tests failed
WORKERS = 3

# Tests that use one thing of the machine's run one after another, on one worker. The Slurm and
# Kubernetes test clusters: one group, since tests/nodes/test_backends_together.py runs both (a test
# belongs to one group), and the Kubernetes cluster is one per worker that uses it (``kubernetes_cluster``,
# session-scoped): here, one. Podman (containers named after their job), Unix users made with useradd,
# cgroups at fixed paths under memory pressure: "host". The dashboard's headless chromium: "chromium".
CLUSTERS = "clusters"
SHARED = {
    "tests/nodes/test_containers.py": "host",
    "tests/nodes/test_real_nodes.py": "host",
    "tests/nodes/test_tenant_users.py": "host",
    "tests/journeys/test_containers.py": "host",
    "tests/services/test_qos_services.py": "host",
    "tests/front/test_dashboard.py": "chromium",
    "tests/journeys/test_dashboard.py": "chromium",
}
SLURM_HELPERS = ("tests.slurm_cluster", "tests.slurm_accounting")


def pytest_configure(config: pytest.Config) -> None:
    """A worker's jobs get cgroups of its own (services/nodes/backends/process/cgroups.py): tests name their
    jobs (``ckpt``, ``victim``) on the same node names, and removing one attempt's cgroup kills what is in it."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is not None:
        os.environ["HORIZON_CGROUP_PARENT"] = f"horizon-{worker}"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: ``WORKERS`` for a run over folders, 0 (no workers) for named files or tests."""
    wanted = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if wanted:
        return int(wanted)
    named = [Path(arg.split("::")[0]) for arg in config.args]
    return 0 if named and all(p.is_file() for p in named) else WORKERS


def _uses_slurm(module: object) -> bool:
    """The test module starts a real Slurm cluster (imports one of ``SLURM_HELPERS`` or a name from one)."""
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, type(os)) else getattr(value, "__module__", "")
        if name in SLURM_HELPERS:
            return True
    return False


def _xdist_group(item: pytest.Item) -> str | None:
    """The group ``item`` must run in, or None (any worker, beside anything)."""
    path = item.nodeid.split("::")[0]
    module = getattr(item, "module", None)
    if "kubernetes_cluster" in item.fixturenames or (module is not None and _uses_slurm(module)):
        return CLUSTERS
    if path in SHARED:
        return SHARED[path]
    # A module's own costly setup (a module-scoped fixture, or a session-scoped one the module defines: a
    # `horizon up`, a built image) is made once: the module's tests stay together on one worker.
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        scope, where = defs[-1].scope, defs[-1].baseid
        if scope in ("module", "class", "package") or (scope == "session" and where == path):
            return path
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = _xdist_group(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))


# pytest-xdist 3.8's --dist loadgroup tells the groups to its scheduler by appending "@group" to the
# tests' node ids, which pytest 9.2's structured node ids no longer allow: every test then goes anywhere,
# silently (pytest-xdist issue 1386). Here the workers write each test's group to a file instead, and the
# scheduler (xdist's scope scheduler: a scope's tests run on one worker, one after another, the largest
# scopes first) reads it; a test of no group is a scope of its own.
GROUPS_KEY = "horizon_xdist_groups"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller: a folder for the workers' group files, one for the run."""
    config = node.config
    if not hasattr(config, GROUPS_KEY):
        setattr(config, GROUPS_KEY, tempfile.mkdtemp(prefix="horizon-xdist-groups-"))
    node.workerinput[GROUPS_KEY] = getattr(config, GROUPS_KEY)


@pytest.hookimpl(tryfirst=True)  # before the worker tells the controller its collection is done
def pytest_collection_finish(session: pytest.Session) -> None:
    """Worker: each collected test's group (its final node id -> group), written before the scheduler reads it."""
    folder = getattr(session.config, "workerinput", {}).get(GROUPS_KEY)
    if folder is None:
        return
    groups = {item.nodeid: str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
              for item in session.items if (mark := item.get_closest_marker("xdist_group")) is not None}
    path = Path(folder) / f"{session.config.workerinput['workerid']}.json"
    path.with_suffix(".tmp").write_text(json.dumps(groups))
    path.with_suffix(".tmp").replace(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, GROUPS_KEY):
        shutil.rmtree(getattr(config, GROUPS_KEY), ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None  # xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # every worker has collected (the same tests) before the first call
                files = sorted(Path(getattr(config, GROUPS_KEY)).glob("*.json"))
                self.groups = json.loads(files[0].read_text()) if files else {}
            group = self.groups.get(nodeid)
            return f"group:{group}" if group is not None else nodeid

    return GroupScheduling(config, log)


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
