"""One owner per data directory: ``DataDirLock``.

Two ``horizon up`` on one data directory would run two nats-servers over one
JetStream store, and the store does not survive that (issue 16: a corrupt
index, accepted jobs gone after a restart). So ``horizon up`` takes
``<data_dir>/lock`` before it touches anything else there, and the agent its
own ``<data_dir>/agent.lock`` (``DataDirLock(data_dir, "agent")``).

The lock is ``flock(LOCK_EX | LOCK_NB)`` on that file: the kernel drops it
when the process ends, however it ends (``kill -9`` included), so a lock is
never stale; the file may stay behind, unlocked, and the next owner takes it.
Once it holds the lock, the owner writes who it is into the file (JSON: pid,
host, command, started), so that a second comer can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["DataDirLock", "DataDirBusy"]


class DataDirBusy(Exception):
    """Another process holds the lock; ``holder`` is what it wrote (may be empty while it starts)."""

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        self.path = path
        self.holder = holder
        super().__init__(self.describe())

    def describe(self) -> str:
        where = self.path.parent
        h = self.holder
        if not h.get("pid"):
            return f"{where} is in use by another Horizon (it holds {self.path}); stop it or use another --data-dir"
        since = h.get("started")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, int | float) else "?"
        return (f"{where} is in use by {h.get('command') or 'another Horizon'}, pid {h['pid']} on host "
                f"{h.get('host', '?')} since {when}; stop it or use another --data-dir")


class DataDirLock:
    """``<data_dir>/<name>`` held with ``flock`` while this process runs.

    ``acquire()`` creates the directory if needed, takes the lock or raises ``DataDirBusy``, and
    writes the holder's record; ``release()`` (or the process's end) lets it go. Usable as a
    context manager.
    """

    def __init__(self, data_dir: Path, name: str = "", command: str | None = None) -> None:
        self.path = Path(data_dir) / (f"{name}.lock" if name else "lock")
        self.command = command or _command()
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DataDirLock:
        if self._fd is not None:
            return self
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            # The data dir is the operator's alone: credentials, the log, every job's supervisor files. Jobs
            # run as their users (services/nodes/backends/process/identity.py) and must not enter it (docs/tenants.md).
            if self.path.parent.stat().st_uid == os.geteuid():
                os.chmod(self.path.parent, 0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirBusy(self.path, self.holder()) from None
        except BaseException:
            os.close(fd)
            raise
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                             "started": time.time()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
        self._fd = fd
        return self

    def holder(self) -> dict[str, Any]:
        """What the holder wrote ({} if nothing readable yet)."""
        try:
            data = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no holder any more (a reader finds an empty record, not a stale one)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _command() -> str:
    """``horizon up``, ``horizon service agent``: the subcommand of this process's command line."""
    words = []
    for arg in sys.argv[1:3]:
        if arg.startswith("-") or (words and words[0] != "service"):
            break
        words.append(arg)
    return " ".join(["horizon", *words])
