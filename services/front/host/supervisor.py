"""A small process supervisor: Horizon's parts as OS processes on one machine (``horizon up --processes``).

The distributed shape in miniature: each part runs as ``horizon service NAME --nats URL``, in
its own process group, exactly as a systemd unit or a Kubernetes container would run it. The
supervisor does for them what systemd does with ``Restart=on-failure``:

1. **Start** every child (stdout and stderr appended to ``<log_dir>/<name>.log``), each with
   its own readiness socket (below) and ``PR_SET_PDEATHSIG`` so that a SIGKILLed supervisor
   does not leave children behind.
2. **Watch**: a child that exits while the supervisor is not stopping is started again after a
   delay that doubles per quick failure (``min_delay_s`` up to ``max_delay_s``) and returns to
   ``min_delay_s`` once a child has lived ``stable_s``. Every exit and restart is logged, and
   ``pid_file`` always holds the current PIDs (``{"name": pid}``) for operators and tests.
3. **Stop**: SIGTERM to every child by its PID (never by name), in reverse start order; after
   ``timeout_s`` SIGKILL to whichever is still there.

Readiness uses the systemd notification protocol (``sd_notify``): a part sends ``READY=1`` as
one datagram to the Unix socket named by ``$NOTIFY_SOCKET`` once it has caught up with the log.
Under systemd (``Type=notify``) that is systemd's socket; here it is one socket per child, so
the same few lines serve both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ChildSpec", "Supervisor", "notify_ready"]

log = logging.getLogger("horizon.supervisor")


def notify_ready(status: str = "") -> bool:
    """Tell whoever started us (systemd, the supervisor) that we are ready; False if nobody asked."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # Linux abstract namespace
        address = "\0" + address[1:]
    message = "READY=1" + (f"\nSTATUS={status}" if status else "")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as exc:
        log.warning("could not notify readiness on %s: %s", os.environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM it when the supervisor dies, however it dies."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass(frozen=True)
class ChildSpec:
    """One part to run: its name (also its log file's), its command line, and variables of its own
    (a secret such as its NATS URL with its password goes here, never into ``argv``, which every
    user of the machine can read in ``ps``)."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _Child:
    spec: ChildSpec
    notify: socket.socket
    notify_path: str
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready: bool = False
    restarts: int = 0
    delay_s: float = 0.0
    restart_at: float | None = None  # when a dead child is due to start again


@dataclass
class Supervisor:
    specs: Sequence[ChildSpec]
    log_dir: Path
    pid_file: Path | None = None
    env: Mapping[str, str] | None = None
    min_delay_s: float = 0.5
    max_delay_s: float = 30.0
    stable_s: float = 30.0
    poll_s: float = 0.2
    _children: dict[str, _Child] = field(default_factory=dict, init=False)
    _sockets_dir: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)
    _stopping: bool = field(default=False, init=False)

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique: {names}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._sockets_dir = tempfile.TemporaryDirectory(prefix="horizon-notify-")
        for spec in self.specs:
            path = os.path.join(self._sockets_dir.name, f"{spec.name}.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
            sock.setblocking(False)
            child = _Child(spec, sock, path, delay_s=self.min_delay_s)
            self._children[spec.name] = child
            self._spawn(child)
        self._write_pids()

    def _spawn(self, child: _Child) -> None:
        env = dict(os.environ if self.env is None else self.env)
        env.update(child.spec.env)
        env["NOTIFY_SOCKET"] = child.notify_path
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_dir / f"{child.spec.name}.log", "ab") as out:
            child.process = subprocess.Popen(
                list(child.spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
                start_new_session=True,  # its own process group: a terminal's Ctrl-C reaches only us
                preexec_fn=_die_with_parent,
            )
        child.started_at = time.monotonic()
        child.ready = False
        child.restart_at = None
        log.info("started %s (pid %d): %s", child.spec.name, child.process.pid, " ".join(child.spec.argv))

    def _write_pids(self) -> None:
        if self.pid_file is None:
            return
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.pids(), indent=1) + "\n")
        tmp.replace(self.pid_file)  # readers never see half a file

    def pids(self) -> dict[str, int]:
        """The PID of every running child."""
        return {name: c.process.pid for name, c in self._children.items()
                if c.process is not None and c.process.poll() is None}

    # ------------------------------------------------------------------ watch

    def _drain_notifications(self) -> None:
        for child in self._children.values():
            while True:
                try:
                    data = child.notify.recv(4096)
                except (BlockingIOError, InterruptedError):
                    break
                if b"READY=1" in data.split(b"\n") and not child.ready:
                    child.ready = True
                    pid = child.process.pid if child.process else 0
                    log.info("%s (pid %d) is ready after %.1f s", child.spec.name, pid,
                             time.monotonic() - child.started_at)

    def not_ready(self) -> list[str]:
        self._drain_notifications()
        return [name for name, c in self._children.items() if not c.ready]

    def wait_ready(self, timeout_s: float, should_stop: Callable[[], bool] = lambda: False) -> list[str]:
        """Watch until every child has said READY=1 (restarting any that die meanwhile); the names
        of those that have not when ``timeout_s`` is up, or when ``should_stop`` says so."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            waiting = self.not_ready()
            if not waiting or time.monotonic() >= deadline or should_stop():
                return waiting
            time.sleep(self.poll_s)

    def poll(self) -> None:
        """One round: note children that exited, start again those whose delay has passed."""
        if self._stopping:
            return
        now = time.monotonic()
        changed = False
        for child in self._children.values():
            proc = child.process
            if child.restart_at is None and proc is not None and proc.poll() is not None:
                lived = now - child.started_at
                if lived >= self.stable_s:
                    child.delay_s = self.min_delay_s
                log.error("%s (pid %d) exited with %s after %.1f s; starting it again in %.1f s",
                          child.spec.name, proc.pid, _describe(proc.returncode), lived, child.delay_s)
                child.restart_at = now + child.delay_s
                child.delay_s = min(self.max_delay_s, child.delay_s * 2)
                child.ready = False
                changed = True
            if child.restart_at is not None and now >= child.restart_at:
                child.restarts += 1
                self._spawn(child)
                changed = True
        if changed:
            self._write_pids()

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Watch the children until ``should_stop()`` is true."""
        while not should_stop():
            self.poll()
            self._drain_notifications()
            time.sleep(self.poll_s)

    def restarts(self) -> dict[str, int]:
        return {name: c.restarts for name, c in self._children.items()}

    # ------------------------------------------------------------------ stop

    def stop(self, timeout_s: float = 15.0, *, force: Callable[[], bool] = lambda: False) -> None:
        """SIGTERM every child by PID (last started first), SIGKILL what remains after ``timeout_s``
        or as soon as ``force()`` says so (a second Ctrl-C)."""
        self._stopping = True
        running = [c for c in reversed(list(self._children.values()))
                   if c.process is not None and c.process.poll() is None]
        for child in running:
            assert child.process is not None
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while any(c.process.poll() is None for c in running if c.process) and time.monotonic() < deadline:
            if force():
                break
            time.sleep(0.05)
        for child in running:
            assert child.process is not None
            if child.process.poll() is None:
                log.warning("%s (pid %d) still running: SIGKILL", child.spec.name, child.process.pid)
                with contextlib.suppress(ProcessLookupError):
                    child.process.kill()
            child.process.wait()
            log.info("%s (pid %d) stopped: %s", child.spec.name, child.process.pid,
                     _describe(child.process.returncode))
        for child in self._children.values():
            child.notify.close()
        if self._sockets_dir is not None:
            self._sockets_dir.cleanup()
            self._sockets_dir = None
        if self.pid_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.pid_file.unlink()


def _describe(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
        return f"signal {-code}"
    return f"exit code {code}"
