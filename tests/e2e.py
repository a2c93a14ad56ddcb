"""Helpers for end-to-end tests against a real nats-server.

``RunningHorizon``: a running Horizon in the test's process (the services, the projections and an
agent of a ``Stack``) and a client connection tallying every event; the ``running_horizon`` fixture
(tests/conftest.py) starts one. ``HorizonUp``: a ``horizon up`` as a person starts it. Beside them,
what end-to-end tests share: a submission's JSON (``job_json``), a burst of inputs (``publish_all``),
the ``horizon`` command against a server, and the check that every decision replays
(``assert_replays``)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events import catalogue as c
from events.codec import DecodeError, decode
from services.domain.protocol import Record
from services.runtime.jetstream import JetStreamLog
from services.runtime.replay import replay_decisions

if TYPE_CHECKING:
    from services.front.host.stack import Stack


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


class RunningHorizon:
    """A running Horizon for an end-to-end test: ``stack`` (the decision services, the projections
    and an agent over ``stack.nodes``, as ``horizon up`` runs them) on the server at ``url``, and a
    client connection ``nc`` (``js``: its JetStream) whose ``tally`` counts every event published.
    ``stop`` closes the connection, then stops the stack; stopping twice is stopping once."""

    def __init__(self, stack: Stack, nc: Any, tally: Tally) -> None:
        self.stack = stack
        self.url = stack.url
        self.nc = nc
        self.js = nc.jetstream()
        self.tally = tally
        self.stopped = False

    @classmethod
    async def start(cls, url: str, data_dir: Path, **stack: Any) -> RunningHorizon:
        """A ``Stack(url, data_dir, **stack)`` started, then the tallying connection."""
        import nats

        from services.front.host.stack import Stack

        parts = Stack(url, data_dir, **stack)
        await parts.start()
        try:
            nc = await nats.connect(url)
        except BaseException:
            await parts.stop()
            raise
        tally = Tally()
        await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
        return cls(parts, nc, tally)

    async def records(self) -> list[Record]:
        """The whole log, as stored."""
        return await read_log(self.url)

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        try:
            await self.nc.close()
        finally:
            await self.stack.stop()


def job_json(job_id: str, tenant: str = "acme", **fields: Any) -> bytes:
    """A ``JobSubmitted`` input as a client sends it."""
    body = {"type": "JobSubmitted", "job_id": job_id, "tenant": tenant}
    body.update(fields)
    return json.dumps(body).encode()


async def publish_all(js: Any, items: list[tuple[str, bytes, str]], window: int = 200) -> None:
    """Publish (subject, data, Nats-Msg-Id) items, ``window`` at a time."""
    for i in range(0, len(items), window):
        await asyncio.gather(*[js.publish(s, d, headers={"Nats-Msg-Id": m}) for s, d, m in items[i:i + window]])


def assert_replays(records: list[Record]) -> None:
    """Every decision service, re-run over the log, reproduces each decision it recorded."""
    from services.inventory.core import InventoryCore
    from services.placement.core import PlacementCore
    from services.preemption.core import PreemptionCore
    from services.scheduling.core import SchedulingCore
    from services.submission.core import SubmissionCore

    # as the services run (services/submission/part.py): a log with the layout marker reproduces it
    for core in (SubmissionCore(mark_layout=True), SchedulingCore(), PlacementCore(), PreemptionCore(),
                 InventoryCore()):
        report = replay_decisions(core, records)
        assert report.mismatches == [], (core.name, report.mismatches[:3])
        assert report.reproduced == report.decisions


async def horizon(url: str, *args: str) -> tuple[int, str, str]:
    """``horizon ARGS --nats URL`` (``--nats`` before the job's command when there is one): exit code,
    stdout, stderr."""
    if "--" in args:
        cut = args.index("--")
        args = (*args[:cut], "--nats", url, *args[cut:])
    else:
        args = (*args, "--nats", url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.front.cli.main", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


# A job that checkpoints on SIGUSR1 (the reference written to a temporary file and renamed into
# place), says what it resumed from, and exits on SIGTERM.
CHECKPOINTING = r'''
trap 'echo "ckpt-of-attempt-$HORIZON_ATTEMPT" > "$HORIZON_CHECKPOINT_FILE.tmp"
      mv "$HORIZON_CHECKPOINT_FILE.tmp" "$HORIZON_CHECKPOINT_FILE"' USR1
trap 'exit 143' TERM
echo "resumed from ${HORIZON_CHECKPOINT_REF:-nothing}" >&2
while true; do sleep 0.05; done
'''


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
        """The state of the job by its id or by its number (what sbatch printed)."""
        rows = self.json("jobs")
        return next((row["state"] for row in rows if job_id in (row["job_id"], row.get("slurm_id"))), None)

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
