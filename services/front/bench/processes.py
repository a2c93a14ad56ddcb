"""Horizon's services as OS processes for a benchmark: started, watched, stopped by PID."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


__all__ = ["HORIZON", "profile", "service_processes", "check_alive", "stop_processes", "wait_until"]


HORIZON = [sys.executable, "-m", "services.front.cli.main"]

def service_processes(url: str, *names: str) -> list[subprocess.Popen[bytes]]:
    logs = Path(tempfile.mkdtemp(prefix="horizon-bench-logs-"))
    procs = []
    for name in names:
        with open(logs / f"{name}.log", "wb") as out:
            proc = subprocess.Popen([*HORIZON, "service", name, "--nats", url], stdout=out, stderr=out)
        proc.log_path = logs / f"{name}.log"  # type: ignore[attr-defined]
        procs.append(proc)
        profile(proc, name)
    _RUNNING.extend(procs)
    return procs

_RUNNING: list[subprocess.Popen[bytes]] = []

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

def check_alive() -> None:
    """A service that died ends the benchmark with its last words, rather than a long wait."""
    for proc in _RUNNING:
        if proc.poll() is not None:
            tail = Path(proc.log_path).read_text(errors="replace").strip().splitlines()[-5:]  # type: ignore[attr-defined]
            raise RuntimeError(f"{' '.join(map(str, proc.args[3:4]))} exited with {proc.returncode}: " + " | ".join(tail))

def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc in _RUNNING:
            _RUNNING.remove(proc)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

async def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: timed out waiting for {what}")
        check_alive()
        await asyncio.sleep(0.01)
