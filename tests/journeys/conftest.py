"""Journeys: the README's and the docs' commands, run as written by a person on a fresh clone.

``clone`` (once a run, shared by its pytest-xdist workers): the checkout's files as a fresh clone has them (tracked and new, not
ignored: no .venv, no .horizon) in a folder of its own, installed by the README's own install
command read from the README (``python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'``).
Every journey's person has that clone's ``.venv/bin`` on PATH and a home folder of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.journeys.docblocks import ROOT, block
from tests.journeys.person import Background, Person, free_port, port_free

UP_READY = r"Horizon is up"
DEFAULT_PORT = 4222


@dataclass
class Clone:
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / ".venv" / "bin"


def _checkout_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def readme_install() -> tuple[str, str]:
    """The README's first command, and its install part (all before ``&& .venv/bin/horizon up``)."""
    first = block("readme-install-up").commands[0].text
    install, sep, rest = first.rpartition(" && ")
    assert sep and rest.strip() == ".venv/bin/horizon up", f"the README's first command changed shape: {first}"
    return first, install


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _users(folder: Path, change: int) -> int:
    """The pytest workers using the clone now, after ``change`` (under ``_locked``)."""
    path = folder / "users"
    users = (int(path.read_text()) if path.exists() else 0) + change
    path.write_text(str(users))
    return users


@pytest.fixture(scope="session")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    """Made once a run: under pytest-xdist the workers share it (in the run's temporary folder; the first
    one makes it while the others wait), and the last one done with it clears the jobs left in it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / "fresh-clone"
        folder.mkdir(exist_ok=True)
    else:
        folder = tmp_path_factory.mktemp("fresh")
    root = folder / "horizon"
    with _locked(folder):
        if not (folder / "installed").exists():
            shutil.rmtree(root, ignore_errors=True)
            _make_clone(root)
            (folder / "installed").touch()
        _users(folder, +1)
    yield Clone(root)
    with _locked(folder):
        if _users(folder, -1) == 0:
            from services.nodes.backends.process.executors import kill_attempts

            kill_attempts(root)


def _make_clone(root: Path) -> None:
    for name in _checkout_files():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
        target.chmod((ROOT / name).stat().st_mode)
    _, install = readme_install()
    person = Person(root.parent / "installer", root / ".venv" / "bin", cwd=root)
    person.run(install, timeout=900)


@pytest.fixture
def person(clone: Clone, tmp_path: Path) -> Iterator[Person]:
    someone = Person(tmp_path / "home", clone.bin)
    try:
        yield someone
    finally:
        someone.stop_all()


@dataclass
class Up:
    """A running ``horizon up`` as the person started it, and what it printed."""

    bg: Background
    url: str
    dashboard: str
    port_changed: bool


@contextlib.contextmanager
def _default_port_turn(command: str) -> Iterator[None]:
    """Whoever takes the default port holds this lock (``flock``, machine-wide) from looking at it until
    their ``up`` holds it: journeys on other pytest-xdist workers, or other runs, wait, then see it taken."""
    if "--port" in command:
        yield
        return
    with open(Path(tempfile.gettempdir()) / "horizon-journeys-default-port.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start_up(person: Person, command: str, cwd: Path, timeout: float = 240.0) -> Up:
    """Start ``horizon up`` as the doc says. When the default port is taken (another Horizon on this
    machine) the person makes the one change anyone would: a free ``--port`` (before the line's
    comment, if it has one), and ``HORIZON_NATS_URL`` exported for every command after it; not
    under ``--auth``, where that URL without credentials would stand in for the operator's, which
    the commands find in the data dir whatever the port (and a tenant's URL carries its port)."""
    changed = False
    with _default_port_turn(command):
        if "--port" not in command and not port_free(DEFAULT_PORT):
            port = free_port()
            line, hash_, comment = command.partition(" #")
            command = f"{line.rstrip()} --port {port}" + (f"  #{comment}" if hash_ else "")
            url = f"nats://127.0.0.1:{port}"
            if "--auth" not in line.split():
                person.env["HORIZON_NATS_URL"] = url
            person.subs["nats://127.0.0.1:4222"] = url  # as written in the clients
            changed = True
        bg = person.start(command, cwd=cwd)
        bg.wait_for(UP_READY, timeout=timeout)
    url = bg.out.strip().splitlines()[0]
    dashboard = bg.wait_for(r"Dashboard: (\S+)").group(1)
    return Up(bg, url, dashboard, changed)


@pytest.fixture(scope="module")
def someone(clone: Clone, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Person]:
    """A person for a whole module's journey (one `horizon up` serving several of its steps)."""
    person = Person(tmp_path_factory.mktemp("person") / "home", clone.bin)
    try:
        yield person
    finally:
        person.stop_all()
        from services.nodes.backends.process.executors import kill_attempts

        kill_attempts(person.home)


def _state_of(jobs_json: str, job: str) -> str:
    """The state of the job by its id or by its number (what sbatch printed: ``slurm_id``)."""
    return next((row["state"] for row in json.loads(jobs_json) if job in (row["job_id"], row.get("slurm_id"))), "")


def job_state(person: Person, job: str) -> str:
    return _state_of(person.run("horizon jobs --json").out, job)


def wait_state(person: Person, job: str, *states: str, timeout: float = 90.0) -> str:
    """`horizon jobs` again until the job is in one of ``states``; returns the state."""
    seen = person.until("horizon jobs --json", lambda r: r.rc == 0 and _state_of(r.out, job) in states,
                        timeout=timeout)
    return _state_of(seen.out, job)


def submitted_id(result: object) -> str:
    """The job id ``horizon submit`` printed, or the number ``sbatch`` printed (its last word)."""
    return str(getattr(result, "out")).strip().split()[-1]


@contextlib.contextmanager
def running(person: Person, command: str, *, at: str = "cluster", then: str | None = None) -> Iterator[Up]:
    """``horizon up`` started by ``person`` in their folder ``at``, for a module's journey; the
    person then works in ``then`` (another folder of theirs; default: beside ``up``); Ctrl-C at the end."""
    up = start_up(person, command, cwd=person.folder(at))
    person.cwd = person.folder(then or at)
    try:
        yield up
    finally:
        up.bg.interrupt()
