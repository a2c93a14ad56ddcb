"""Helpers for end-to-end tests against a real nats-server, and a running ``horizon up`` (``HorizonUp``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode
from services.runtime.jetstream import JetStreamLog
from services.domain.protocol import Record


async def read_log(url: str) -> list[Record]:
    log = await JetStreamLog.open(url, name="test-reader", create=False)
    out: list[Record] = []
    try:
        async for batch in log.read(1):
            out.extend(batch)
    finally:
        await log.close()
    return out


def events_of(records: list[Record]) -> list[c.Event]:
    out = []
    for r in records:
        try:
            out.append(decode(r.data))
        except DecodeError:
            pass
    return out


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


class Tally:
    """Counts events by type (and by job) from a core subscription to horizon.evt.>."""

    def __init__(self) -> None:
        self.by_type: dict[str, int] = {}
        self.by_job: dict[tuple[str, str], int] = {}
        self.last: dict[tuple[str, str], dict[str, Any]] = {}

    async def on_msg(self, msg: Any) -> None:
        body = json.loads(msg.data)
        kind = body.get("type", "?")
        self.by_type[kind] = self.by_type.get(kind, 0) + 1
        key = (kind, body.get("job_id") or body.get("node") or "")
        self.by_job[key] = self.by_job.get(key, 0) + 1
        self.last[key] = body

    def count(self, kind: str) -> int:
        return self.by_type.get(kind, 0)

    def has(self, kind: str, job_id: str) -> bool:
        return (kind, job_id) in self.by_job


class HorizonUp:
    """A ``horizon up`` as a person starts it: in a folder of its own (``root``), data in
    ``root/.horizon``, ``--port 0``, and commands run from that folder as typed, with no ``--nats``
    and no ``$HORIZON_NATS_URL`` (they find the server through ``.horizon/server.json``). Stopped
    by its PID (Ctrl-C), killed only if it does not stop."""

    def __init__(self, root: Path, *args: str) -> None:
        import subprocess
        import sys

        self.root = root
        self.data_dir = root / ".horizon"
        self.command = [sys.executable, "-m", "services.front.cli.main"]
        self.err = open(root / "up.err", "a")
        self.proc = subprocess.Popen([*self.command, "up", "--port", "0", "--ui-port", "0", "--data-dir",
                                      str(self.data_dir), *args], stdout=subprocess.PIPE, stderr=self.err,
                                     text=True, cwd=root)
        try:
            assert self.proc.stdout is not None
            self.url = self.proc.stdout.readline().strip()
            assert self.url.startswith("nats://"), (self.url, (root / "up.err").read_text())
        except BaseException:
            self.stop()
            raise

    def env(self) -> dict[str, str]:
        import os

        return {k: v for k, v in os.environ.items() if k not in ("HORIZON_NATS_URL", "HORIZON_TENANT")}

    def run(self, *args: str, cwd: Path | None = None, ok: bool = True, timeout: float = 60) -> Any:
        """``horizon ARGS`` from the folder (or ``cwd``); with ``ok``, it must exit 0."""
        import subprocess

        done = subprocess.run([*self.command, *args], capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or self.root, env=self.env())
        if ok:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def json(self, command: str, *args: str) -> Any:
        """``horizon COMMAND --json ARGS`` (before any ``--`` and the job's command), decoded."""
        return json.loads(self.run(command, "--json", *args).stdout)

    def until(self, what: str, check: Callable[[], Any], timeout: float = 60, every: float = 0.3) -> Any:
        """Poll ``check`` until it returns something true; that."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            assert time.monotonic() < deadline, f"not {what} within {timeout:g} s"
            time.sleep(every)

    def state(self, job_id: str) -> str | None:
        rows = self.json("jobs")
        return next((row["state"] for row in rows if row["job_id"] == job_id), None)

    def stop(self) -> None:
        import signal
        import subprocess

        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()
        from services.nodes.backends.process.executors import kill_attempts

        kill_attempts(self.data_dir)  # jobs outlive their agent: a failed test's must not outlive the test
