"""Horizon's services as OS processes for a benchmark: started, watched, stopped by PID.

Each process gets its own log file (its last lines are the message when it dies) and its own
``$NOTIFY_SOCKET`` (a Unix datagram socket of ours): ``horizon service`` says ``READY=1`` there
once it has caught up with the log (the systemd protocol, services/front/host/supervisor.py), which
is how a benchmark knows a (re)started service has caught up. ``rss_bytes`` reads a process's
resident memory from ``/proc/PID/status``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


__all__ = ["HORIZON", "profile", "spawn", "service_processes", "is_ready", "rss_bytes", "check_alive",
           "running", "stop_processes", "stop_all", "wait_until", "log_tail"]


HORIZON = [sys.executable, "-m", "services.front.cli.main"]

_RUNNING: list[subprocess.Popen[bytes]] = []
_LOGS: list[Path] = []


def _logs_dir() -> Path:
    if not _LOGS:
        _LOGS.append(Path(tempfile.mkdtemp(prefix="horizon-bench-logs-")))
    return _LOGS[0]


def spawn(url: str, name: str, *extra: str, label: str | None = None) -> subprocess.Popen[bytes]:
    """``horizon service NAME --nats URL EXTRA...`` in its own process, watched by ``check_alive``."""
    label = label or name
    logs = _logs_dir()
    path = logs / f"{label}-{time.monotonic_ns()}.log"
    notify_path = str(logs / f"{label}-{time.monotonic_ns()}.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    sock.setblocking(False)
    env = {**os.environ, "NOTIFY_SOCKET": notify_path}
    with open(path, "wb") as out:
        proc = subprocess.Popen([*HORIZON, "service", name, "--nats", url, *extra], stdout=out, stderr=out, env=env)
    proc.log_path = path  # type: ignore[attr-defined]
    proc.label = label  # type: ignore[attr-defined]
    proc.notify = sock  # type: ignore[attr-defined]
    proc.notify_path = notify_path  # type: ignore[attr-defined]
    proc.ready = False  # type: ignore[attr-defined]
    _RUNNING.append(proc)
    profile(proc, label)
    return proc


def service_processes(url: str, *names: str) -> list[subprocess.Popen[bytes]]:
    return [spawn(url, name) for name in names]


def is_ready(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` has said ``READY=1`` on its notify socket (caught up with the log)."""
    if getattr(proc, "ready", False):
        return True
    sock = getattr(proc, "notify", None)
    while sock is not None:
        try:
            data = sock.recv(4096)
        except (BlockingIOError, OSError):
            break
        if b"READY=1" in data.split(b"\n"):
            proc.ready = True  # type: ignore[attr-defined]
    return bool(getattr(proc, "ready", False))


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (``VmRSS`` of ``/proc/PID/status``), 0 once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def profile(proc: subprocess.Popen[bytes], name: str) -> None:
    """With ``HORIZON_BENCH_PROFILE=DIR``, sample the service with py-spy (not a dependency: ``pip
    install py-spy``) until it exits, into ``DIR/<name>.txt`` (collapsed stacks, 250 samples/s)."""
    where = os.environ.get("HORIZON_BENCH_PROFILE")
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if not where or not spy:
        return
    Path(where).mkdir(parents=True, exist_ok=True)
    subprocess.Popen([spy, "record", "-p", str(proc.pid), "-r", "250", "--format", "raw", "--nonblocking",
                      "-o", str(Path(where) / f"{name}.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def log_tail(proc: subprocess.Popen[bytes], lines: int = 5) -> str:
    try:
        tail = Path(proc.log_path).read_text(errors="replace").strip().splitlines()[-lines:]  # type: ignore[attr-defined]
    except OSError:
        return "(no log)"
    return " | ".join(tail)


def check_alive() -> None:
    """A service that died ends the benchmark with its last words, rather than a long wait."""
    for proc in _RUNNING:
        if proc.poll() is not None:
            name = getattr(proc, "label", " ".join(map(str, proc.args[3:4])))  # type: ignore[index]
            raise RuntimeError(f"{name} (pid {proc.pid}) exited with {proc.returncode}: {log_tail(proc)}")


def running() -> list[subprocess.Popen[bytes]]:
    """The processes started and not stopped yet (dead ones included: ``check_alive`` reports them)."""
    return list(_RUNNING)


def stop_processes(procs: list[subprocess.Popen[bytes]], timeout_s: float = 20.0) -> None:
    """SIGTERM each (by its PID), wait ``timeout_s``, SIGKILL what lingers."""
    for proc in procs:
        if proc in _RUNNING:
            _RUNNING.remove(proc)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sock = getattr(proc, "notify", None)
        if sock is not None:
            sock.close()
            Path(proc.notify_path).unlink(missing_ok=True)  # type: ignore[attr-defined]


def stop_all() -> None:
    """Every process the harness started and has not stopped yet (a stage that failed midway)."""
    stop_processes(list(_RUNNING))


async def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: timed out waiting for {what}")
        check_alive()
        await asyncio.sleep(0.01)
