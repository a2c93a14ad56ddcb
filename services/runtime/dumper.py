"""Snapshot dumps that do not stop the fold: the state is encoded in a forked child.

A runner's state is encoded by its core's ``dump`` (tens of MB at a million queued jobs, seconds of
CPU). Done in the runner, it stops the fold and the decisions for that long (the py-spy profile of
the 1M-backlog scale run: ~20% of each service's CPU, docs/benchmarks.md §2). On POSIX the
``SnapshotDumper`` forks instead: the child inherits the state copy-on-write as it is at the record
boundary, encodes it and writes the bytes to a pipe, then ``os._exit``; the parent only pays for the
fork (page tables) and reads the pipe from its event loop as the bytes come, then hands them to the
``SnapshotUploader`` as before. The bytes are those ``dump`` gives in the parent at the same seq:
the child runs the same function on a state that is, page for page, the parent's at the fork.

**Why fork is safe here.** A forked child of a threaded process holds only the thread that forked,
and any lock another thread held (aiosqlite's, OpenTelemetry's exporter's, an allocator's) stays
held for ever in the child; so the child must run only code that takes no such lock. It runs a
core's ``dump``: pure by the house rules (no I/O, no clock, no logging, no locks), over msgspec's
encoder (C, holding only the GIL, which CPython re-creates in the child, as it does the import
lock; glibc's malloc resets its own locks at fork). Then ``os.write`` to its pipe and
``os._exit``: no ``atexit``, no finalizers, no flush of the stdio buffers it inherited (the
parent's half-written log lines would be written twice), no close of the NATS socket or the event
loop's descriptors (their last close is the parent's; the child drops its references to them at once). Before encoding it disables the garbage
collector, so no finalizer of an object of those libraries runs in the child (nor does a collection
walk, and so copy, the whole heap). Signals are blocked across the fork, and the child drops the
event loop's signal wakeup descriptor (shared with the parent) before taking them again: a
Ctrl-C to the process group reaches the parent's loop once, from the parent. What remains: a
``dump`` that breaks the rules (takes a lock, logs) could hang or misbehave in the child. It is
bounded: a child that has not delivered within ``timeout_s`` is killed, one that exits without
its bytes is reported, both with a warning, and the service goes on with its last snapshot
(after ``MAX_FORK_FAILURES`` in a row it dumps synchronously again).

**What it costs.** The parent's event loop stops for the fork (copying the page tables: tens of ms
for a GB) and for reading the bytes as they come; the encoding takes another core's time instead.
Memory: reading an object in CPython writes its reference count, so the child copies every page
that holds an object ``dump`` reads, about the whole state, for as long as it runs (measured: at a
million queued jobs, 1.2 GB more for a 0.94 GB scheduler; docs/benchmarks.md §2, "Issue 35, third
session"). So the runner forks only while the kernel reports at least its RSS available, and the
child asks to be the first the kernel kills if memory runs out (``oom_score_adj``); otherwise it
dumps in process that time.

A runner has at most one child at a time (``ready`` is false while it runs, and the pacer then
counts the wall time of the child's encoding); several runners in one process (``horizon up``) may each have one.

Where fork is not available (not POSIX) or is turned off (``HORIZON_SNAPSHOT_FORK=0``, or
``fork=False``), the dump runs synchronously in the runner, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import struct
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from services.runtime.cancel import cancel_and_wait

try:
    import fcntl
except ImportError:  # not POSIX: no forked dumps either
    fcntl = None  # type: ignore[assignment]
from services.runtime.snapshots import DumpPacer, SnapshotUploader

__all__ = ["SnapshotDumper", "fork_dumps_enabled", "FORK_VARIABLE", "MAX_FORK_FAILURES"]

log = logging.getLogger("horizon.snapshots")

FORK_VARIABLE = "HORIZON_SNAPSHOT_FORK"  # "0" (or "off", "no", "false"): dump synchronously
MAX_FORK_FAILURES = 3  # forked dumps failed in a row before a runner dumps synchronously again
_HEADER = struct.Struct("<qd")  # the bytes that follow (-1: an error message follows), encoding seconds
_READ_MAX = 4 << 20  # bytes read from the pipe in one turn of the event loop at most
_PIPE_SIZE = 1 << 20  # Linux's default limit for an unprivileged pipe


def fork_dumps_enabled() -> bool:
    """Whether dumps run in a forked child here: POSIX with ``os.fork``, unless ``HORIZON_SNAPSHOT_FORK`` says no."""
    if os.name != "posix" or not hasattr(os, "fork"):
        return False
    return os.environ.get(FORK_VARIABLE, "1").strip().lower() not in ("0", "off", "no", "false")


class SnapshotDumper:
    """Dumps a runner's state for its uploader, at most one at a time, paced by ``pacer``.

    ``dump(state, seq)`` returns at once: the bytes reach ``uploader.offer(seq, ...)`` when the
    child has written them (``flush`` waits for that). A dump that fails is logged, counted
    (``failures``, and ``on_failure``) and never raised: the last snapshot, or a full replay, is
    still correct. ``last_blocked_s`` is how long the last dump held the event loop (the fork and
    the reads; the whole dump when synchronous).
    """

    # A child that has not delivered its bytes by then is stuck rather than slow (at a million queued
    # jobs the child encodes in ~5 s of CPU, 15-38 s of wall time on a busy 2-core machine): killed.
    timeout_s = 300.0
    reap_s = 10.0  # how long a child that delivered (or was killed) may take to exit

    def __init__(self, name: str, dump: Callable[[Any], bytes], uploader: SnapshotUploader, *,
                 pacer: DumpPacer | None = None, fork: bool | None = None,
                 on_failure: Callable[[], None] | None = None) -> None:
        self.name = name
        self._dump = dump
        self.uploader = uploader
        self.pacer = pacer if pacer is not None else DumpPacer()
        self.fork = fork_dumps_enabled() if fork is None else fork and fork_dumps_enabled()
        self._on_failure = on_failure
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Task[None] | None = None  # when_ready's
        self._unreaped: set[int] = set()
        self.forks = 0
        self.failures = 0
        self.failed_in_a_row = 0
        self.last_blocked_s = 0.0
        self.last_child_pid = 0
        self.last_child_cpu_s = 0.0  # CPU seconds the last child took in all (user and system, its exit too)

    def ready(self) -> bool:
        """No dump under way, and the pacer lets the next one start."""
        return (self._task is None or self._task.done()) and self.pacer.ready()

    def when_ready(self, wake: Callable[[], Awaitable[None]]) -> None:
        """Await ``wake()`` once, as soon as ``ready``: the child under way has ended and the pacer's rest
        has passed. A dump that came due while not ready must not wait for the next record (a runner
        that has gone idle gets none, and its last records would stay out of every snapshot: a longer
        fold at its next restart). One wake at a time; ``close`` cancels it."""
        if self._wake is None or self._wake.done() or self._wake is asyncio.current_task():  # (from ``wake``)
            self._wake = asyncio.create_task(self._when_ready(wake), name=f"horizon-dump-due-{self.name}")

    async def _when_ready(self, wake: Callable[[], Awaitable[None]]) -> None:
        while not self.ready():
            if self._task is not None and not self._task.done():
                await asyncio.wait({self._task})
            else:
                await asyncio.sleep(max(0.001, self.pacer.not_before - self.pacer.clock()))
        await wake()  # still ``_wake`` meanwhile, so that ``close`` cancels it

    def dump(self, state: Any, seq: int) -> None:
        """Start a dump of ``state`` at ``seq`` (in a child, or here and now); never raises."""
        if self.fork:
            started = time.perf_counter()
            try:
                room = _memory_for_a_child()
                if room is not None:
                    raise OSError(room)
                pid, fd = self._fork(state)
            except Exception as exc:  # noqa: BLE001 - no memory or processes for a child: dump here this once
                log.warning("%s: cannot fork to dump the state at seq %d (%s); dumping in process",
                            self.name, seq, exc)
            else:
                self.last_blocked_s = time.perf_counter() - started
                self.pacer.busy()
                self._task = asyncio.create_task(self._collect(pid, fd, seq), name=f"horizon-dump-{self.name}")
                return
        started = time.perf_counter()
        try:
            data = self.pacer.timed(lambda: self._dump(state))
        except Exception:  # noqa: BLE001 - a snapshot is an optimisation; the service goes on without it
            log.exception("%s: dump of the state at seq %d failed", self.name, seq)
            self._failed()
            return
        finally:
            self.last_blocked_s = time.perf_counter() - started
        self.uploader.offer(seq, data)

    def _fork(self, state: Any) -> tuple[int, int]:
        """Fork a child that encodes ``state`` into a pipe; the child's pid and the pipe's read end."""
        self._reap_left_over()
        read_fd, write_fd = os.pipe()
        if hasattr(fcntl, "F_SETPIPE_SZ"):  # fewer, larger reads (Linux); the default 64 KiB works too
            with contextlib.suppress(OSError):
                fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        # Signals wait until the child has dropped the loop's wakeup descriptor (see the module's doc).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            with warnings.catch_warnings():  # Python 3.12+ warns of any fork with threads: said why above
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:
            _child(write_fd, self._dump, state, mask)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.forks += 1
        self.last_child_pid = pid
        return pid, read_fd

    async def _collect(self, pid: int, fd: int, seq: int) -> None:
        """Read the child's bytes as they come, reap it, offer them; on any failure a warning."""
        started = time.monotonic()
        reader = _PipeReader(fd)
        loop = asyncio.get_running_loop()
        loop.add_reader(fd, reader.readable)
        try:
            await asyncio.wait({reader.done}, timeout=self.timeout_s)
        except BaseException:  # cancelled (a stop): kill it, and reap it now or at the next fork or close
            _kill(pid)
            self._unreaped.add(pid)
            self._reap_left_over()
            raise
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        self.last_blocked_s += reader.blocked_s
        why = reader.failure(self.timeout_s)
        status = await self._end(pid, kill=why is not None)
        if status not in (None, 0):
            how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
            why = f"it ended with {how}" if why is None else f"{why} ({how})"
        elapsed = time.monotonic() - started
        if why is not None:
            self.pacer.record(elapsed)
            self.failed_in_a_row += 1
            log.warning("%s: the dump at seq %d in child %d failed: %s; the last snapshot stands",
                        self.name, seq, pid, why)
            self._failed()
            if self.failed_in_a_row >= MAX_FORK_FAILURES:
                self.fork = False
                log.warning("%s: %d forked dumps failed in a row: dumping in process from now on",
                            self.name, self.failed_in_a_row)
            return
        self.failed_in_a_row = 0
        # Paced by the wall time of the child's encoding, as the synchronous dump was by its own: on a
        # busy machine both stretch, and the dumps space out alike. (Its CPU time would let dumps come
        # several times as often there, each costing more CPU than an in-process dump: the child's
        # copy-on-write faults, the fork, its exit.)
        self.pacer.record(reader.encode_s)
        blocked = time.perf_counter()
        data = bytes(reader.body)
        reader.body = bytearray()
        self.last_blocked_s += time.perf_counter() - blocked
        self.uploader.offer(seq, data)

    async def _end(self, pid: int, *, kill: bool) -> int | None:
        """Reap ``pid`` (killed first if ``kill``), polling without blocking: its exit status, None if unknown."""
        if kill:
            _kill(pid)
        deadline = time.monotonic() + self.reap_s
        pause = 0.001
        while True:
            try:
                done, status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its status is unknown
                return None
            if done:
                self.last_child_cpu_s = usage.ru_utime + usage.ru_stime
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() > deadline:
                if not kill:
                    kill = True
                    _kill(pid)
                    deadline = time.monotonic() + self.reap_s
                    continue
                log.warning("%s: dump child %d does not exit even killed; reaped later", self.name, pid)
                self._unreaped.add(pid)
                return None
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _reap_left_over(self) -> None:
        for pid in list(self._unreaped):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self._unreaped.discard(pid)
            except ChildProcessError:
                self._unreaped.discard(pid)

    def _failed(self) -> None:
        self.failures += 1
        if self._on_failure is not None:
            self._on_failure()

    async def flush(self) -> None:
        """Until the dump under way, if any, has been offered to the uploader (or has failed), and the
        uploader has stored what it holds."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        await self.uploader.flush()

    async def close(self, grace_s: float = 5.0) -> None:
        """Give a dump under way ``grace_s`` to deliver, then kill its child (and reap it); then close the
        uploader (its own grace for an upload under way). A pending ``when_ready`` is cancelled."""
        if self._wake is not None:
            await cancel_and_wait(self._wake)
        task = self._task
        if task is None or task.done():
            self._reap_left_over()
        else:
            await asyncio.wait({task}, timeout=grace_s)
            if not task.done():
                await cancel_and_wait(task)
            for _ in range(100):  # a killed child exits within milliseconds, unless the kernel is busy
                self._reap_left_over()
                if not self._unreaped:
                    break
                await asyncio.sleep(0.01)
        await self.uploader.close()


class _PipeReader:
    """The parent's side of the pipe: a header, then the body read straight into one buffer."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.head = b""
        self.size = -2  # not known yet
        self.encode_s = 0.0
        self.body = bytearray()
        self.got = 0
        self.error = b""
        self.blocked_s = 0.0

    def readable(self) -> None:
        started = time.perf_counter()
        try:
            self._read()
        except BlockingIOError:  # all there is for now: more when the pipe is readable again
            pass
        except OSError as exc:
            self.error = f"reading its pipe: {exc}".encode()
            self._finish()
        finally:
            self.blocked_s += time.perf_counter() - started

    def _read(self) -> None:
        taken = 0
        while taken < _READ_MAX and not self.done.done():
            if self.size == -2:
                chunk = os.read(self.fd, _HEADER.size - len(self.head))
                if not chunk:
                    return self._finish()
                self.head += chunk
                if len(self.head) == _HEADER.size:
                    self.size, self.encode_s = _HEADER.unpack(self.head)
                    if self.size >= 0:
                        self.body = bytearray(self.size)
                        if self.size == 0:
                            return self._finish()
            elif self.size == -1:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    return self._finish()
                self.error += chunk[: 2000 - len(self.error)]
            else:
                view = memoryview(self.body)[self.got:]
                n = os.readv(self.fd, [view[:_READ_MAX]])
                view.release()
                if n == 0:
                    return self._finish()
                self.got += n
                taken += n
                if self.got == self.size:
                    return self._finish()
        return None

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def failure(self, timeout_s: float) -> str | None:
        """Why the bytes cannot be used, or None."""
        if not self.done.done():
            return f"no bytes after {timeout_s:.0f} s: killed"
        if self.error and self.size != -1:
            return self.error.decode(errors="replace")
        if self.size == -1:
            return f"the dump raised {self.error.decode(errors='replace')}"
        if self.size == -2:
            return "it exited before writing its bytes"
        if self.got != self.size:
            return f"it exited after {self.got} of {self.size} bytes"
        return None


def _memory_for_a_child() -> str | None:
    """Why a child could run out of memory, or None. The child copies, page by page, every object
    ``dump`` reads (reading an object writes its reference count): up to the whole state, about the
    parent's RSS. So it forks only while the kernel reports at least that much available
    (``MemAvailable``, Linux; elsewhere it does not check)."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            available = next((int(line.split()[1]) * 1024 for line in fh if line.startswith(b"MemAvailable:")), None)
        with open("/proc/self/statm", "rb") as fh:
            resident = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
    if available is not None and available < resident:
        return (f"{available / 2**20:,.0f} MB available, a child may copy up to this process's "
                f"{resident / 2**20:,.0f} MB")
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _child(write_fd: int, dump: Callable[[Any], bytes], state: Any, mask: Any) -> None:
    """In the forked child: encode, write, ``os._exit``. Nothing here may return into the parent's code."""
    status = 70
    try:
        gc.disable()
        # Let go of every descriptor but the pipe and stdio (its crash report goes to stderr): a child
        # that outlives a crashed parent holds no NATS connection, database or listening socket open.
        # (Closing a descriptor the parent shares only drops the child's reference to it.)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, max(write_fd + 2, os.sysconf("SC_OPEN_MAX")))
        with contextlib.suppress(ValueError, OSError):  # (ValueError: not the main thread; it is, after a fork)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle (it stops us)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        with contextlib.suppress(OSError):  # if memory runs out, the kernel kills the child rather than the service
            adjust = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(adjust, b"1000")
            os.close(adjust)
        started = time.perf_counter()
        try:
            data = dump(state)
        except BaseException as exc:  # noqa: BLE001 - told to the parent, which logs it
            message = f"{type(exc).__name__}: {exc}".encode(errors="replace")[:2000]
            _write_all(write_fd, _HEADER.pack(-1, 0.0) + message)
            status = 1
        else:
            _write_all(write_fd, _HEADER.pack(len(data), time.perf_counter() - started))
            _write_all(write_fd, data)
            status = 0
    except BaseException:  # noqa: BLE001 - the parent sees the status and the missing bytes
        pass
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
