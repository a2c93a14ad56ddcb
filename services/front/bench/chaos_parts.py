"""One part of the chaos run (``services/front/bench/chaos.py``): a ``horizon service`` in its own OS process
and process group, ready when it says ``READY=1`` on its own ``$NOTIFY_SOCKET``, killed by its PID; and which
records of the log are its own (``publisher``). The takeover bench runs its parts the same way."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from events import catalogue as c
from services.domain.protocol import Record

__all__ = ["HORIZON", "Part", "publisher"]

HORIZON = [sys.executable, "-m", "services.front.cli.main"]


def _die_with_parent() -> None:
    """In the child: SIGTERM when the driver dies, however it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@dataclass
class Part:
    """One ``horizon service`` process: its command line, and the incarnation now running."""

    name: str
    argv: list[str]
    log_path: Path
    notify_dir: Path
    nodes: tuple[str, ...] = ()  # an agent's
    service: str = ""  # the service it runs (instances of one service: "scheduling", "scheduling#2", ...)
    proc: subprocess.Popen[bytes] | None = None
    sock: socket.socket | None = None
    ready: bool = False
    spawns: int = 0

    def spawn(self) -> None:
        """Start a new incarnation (from the main thread: PR_SET_PDEATHSIG follows the thread)."""
        self.spawns += 1
        path = self.notify_dir / f"{self.name}.{self.spawns}.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.ready = False
        env = {**os.environ, "NOTIFY_SOCKET": str(path)}
        with open(self.log_path, "ab") as out:
            out.write(f"--- chaos: start #{self.spawns} at {time.time():.3f}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=out, env=env, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def poll_ready(self) -> bool:
        if not self.ready and self.sock is not None:
            with contextlib.suppress(BlockingIOError):
                self.ready = b"READY=1" in self.sock.recv(4096)
        return self.ready

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> int:
        """SIGKILL this incarnation by its PID; returns the PID."""
        assert self.proc is not None
        pid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._close()
        return pid

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        self._close()

    def _close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def tail(self, lines: int = 5) -> str:
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])


def publisher(part: Part, record: Record, event: c.Event | None) -> bool:
    """Whether ``record`` is one of ``part``'s own (its service's decisions, whichever instance leads; an
    agent's reports; inventory's ticks)."""
    token = record.subject.split(".")[2] if record.subject.startswith("horizon.evt.") else ""
    if part.nodes:
        return (token == "agent" and event is not None and not isinstance(event, c.NodeRegistered)
                and event.source.removeprefix("agent/") in part.nodes)
    return token == part.service or (part.service == "inventory" and token == "clock")
