"""Snapshots of a service's state: how they are cut, committed, verified, and uploaded.

A service rebuilds its state by folding the log; a snapshot is that state at
a sequence ``seq``, so that a restart folds only the tail ``seq + 1 ..``.
Trusting a snapshot is the risk: one that is partial, corrupt, from another
log or from another version of the code would silently give a state that is
no fold of this log. So a snapshot is written in two steps and checked on
the way back:

1. **Chunks.** The bytes are cut into chunks of at most ``CHUNK_SIZE``
   (states reach tens of MB; a NATS message is at most ``max_payload``,
   1 MiB by default), each stored under a subject of its own snapshot id
   (``horizon.snapshot.<name>.chunk.<id>``) with its index in a header.
2. **Commit.** Only when every chunk is stored, a ``Manifest`` (the seq, the
   chunk count, the size, the sha256 of the whole, the identity of the log
   it was folded from) is stored on ``horizon.snapshot.<name>.manifest``.
   The latest manifest *is* the latest snapshot; chunks without a manifest
   (a writer that died mid-way) are never read, and are pruned by the next
   commit.

``assemble`` puts the chunks back together and refuses (``SnapshotInvalid``)
anything that does not match its manifest. The log implementations call it
and turn a refusal into "no snapshot" with a warning; the runner then folds
the whole log, which is always correct, only slower.

Whether the *content* suits the code that reads it is the core's business:
its ``load`` returns None for a snapshot of another version or configuration
(it embeds its own fingerprint in what ``dump`` writes).

Why chunks in a stream rather than nats-py's object store, which does the
same: measured from Python on this machine, its reads run at 6-27 MB/s (an
ordered push consumer answering flow control from a polling task), ours at
~250 MB/s through ``PullReader`` (docs/benchmarks.md, section 4).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from events.subjects import check_token
from services.runtime.cancel import cancel_and_wait

__all__ = [
    "DumpPacer",
    "SNAPSHOT_STREAM",
    "SNAPSHOT_SUBJECTS",
    "CHUNK_SIZE",
    "FORMAT",
    "Manifest",
    "SnapshotInvalid",
    "new_snapshot_id",
    "split",
    "make_manifest",
    "encode_manifest",
    "decode_manifest",
    "assemble",
    "manifest_subject",
    "chunk_subject",
    "chunks_filter",
    "CHUNK_INDEX",
    "SnapshotUploader",
]

log = logging.getLogger("horizon.snapshots")

SNAPSHOT_STREAM = "HORIZON_SNAPSHOTS"
SNAPSHOT_SUBJECTS = ("horizon.snapshot.>",)
# 512 KiB: as fast as 1 MiB chunks in both directions (measured), and well under the
# default max_payload with room for headers.
CHUNK_SIZE = 512 * 1024
FORMAT = 1  # of the manifest and the chunking, not of the state (that is the core's)
CHUNK_INDEX = "Horizon-Snapshot-Chunk"


class SnapshotInvalid(Exception):
    """A stored snapshot that must not be trusted; the message says why."""


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """The commit record of one snapshot: what its chunks must add up to."""

    format: int = FORMAT
    name: str  # the service
    id: str  # unique per write: names the chunks' subject
    seq: int  # the last log sequence folded into the state
    size: int  # bytes
    chunks: int
    sha256: str  # of the whole
    log_id: str  # the log it was folded from (a recreated stream is another log)
    first_chunk_seq: int = 0  # where the chunks start in the store (JetStream: stream sequence)
    saved_at: float = 0.0  # wall-clock seconds, for people reading the store


_manifest_decoder = msgspec.json.Decoder(Manifest)


def new_snapshot_id(seq: int) -> str:
    """Unique per write, so a rewrite at the same seq never mixes its chunks with an older write's."""
    return f"{seq}-{os.urandom(6).hex()}"


def split(data: bytes, size: int = CHUNK_SIZE) -> list[bytes]:
    if size <= 0:
        raise ValueError("chunk size must be positive")
    return [data[i : i + size] for i in range(0, len(data), size)]


def make_manifest(
    name: str, snap_id: str, seq: int, data: bytes, chunks: int, log_id: str, first_chunk_seq: int = 0
) -> Manifest:
    return Manifest(
        name=name,
        id=snap_id,
        seq=seq,
        size=len(data),
        chunks=chunks,
        sha256=hashlib.sha256(data).hexdigest(),
        log_id=log_id,
        first_chunk_seq=first_chunk_seq,
        saved_at=time.time(),
    )


def encode_manifest(manifest: Manifest) -> bytes:
    return msgspec.json.encode(manifest)


def decode_manifest(data: bytes) -> Manifest:
    try:
        return _manifest_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise SnapshotInvalid(f"unreadable manifest: {exc}") from None


def assemble(manifest: Manifest, parts: Sequence[tuple[int, bytes]], *, name: str, log_id: str) -> bytes:
    """The snapshot's bytes from ``(index, chunk)`` pairs in any order, or ``SnapshotInvalid``.

    Checks, in order: the manifest's format, that it is this service's and this
    log's, that every chunk ``0 .. chunks - 1`` is there exactly once, and the
    size and digest of the whole.
    """
    if manifest.format != FORMAT:
        raise SnapshotInvalid(f"manifest format {manifest.format}, this code reads {FORMAT}")
    if manifest.name != name:
        raise SnapshotInvalid(f"manifest names service {manifest.name!r}, not {name!r}")
    if manifest.log_id != log_id:
        raise SnapshotInvalid(f"folded from another log ({manifest.log_id!r}; this log is {log_id!r})")
    by_index: dict[int, bytes] = {}
    for index, chunk in parts:
        if not 0 <= index < manifest.chunks:
            raise SnapshotInvalid(f"chunk index {index} outside 0..{manifest.chunks - 1}")
        by_index.setdefault(index, chunk)  # a chunk stored twice (a re-published retry) is the same bytes
    if len(by_index) != manifest.chunks:
        missing = manifest.chunks - len(by_index)
        raise SnapshotInvalid(f"{missing} of {manifest.chunks} chunks missing")
    data = b"".join(by_index[i] for i in range(manifest.chunks))
    if len(data) != manifest.size:
        raise SnapshotInvalid(f"{len(data)} bytes, the manifest says {manifest.size}")
    if hashlib.sha256(data).hexdigest() != manifest.sha256:
        raise SnapshotInvalid("sha256 does not match the manifest")
    return data


def manifest_subject(name: str) -> str:
    return f"horizon.snapshot.{check_token(name, 'snapshot name')}.manifest"


def chunk_subject(name: str, snap_id: str) -> str:
    return f"horizon.snapshot.{check_token(name, 'snapshot name')}.chunk.{check_token(snap_id, 'snapshot id')}"


def chunks_filter(name: str) -> str:
    """Every chunk of every snapshot of ``name`` (what a commit prunes below its own first chunk)."""
    return f"horizon.snapshot.{check_token(name, 'snapshot name')}.chunk.>"


SaveSnapshot = Callable[[str, int, bytes], Awaitable[None]]


class DumpPacer:
    """Keeps a service's dumps to at most ``1 / (1 + rest)`` of its time: after a dump that took ``d``
    seconds, the next waits until ``rest * d`` seconds have passed as well as the record interval.

    A dump costs time in proportion to the state (at a million queued jobs 1-2 s of a scheduler
    that cannot fold meanwhile), while the record interval passes in proportion to the rate: under a
    burst on a big backlog, dumps every 50,000 records took most of a service's time (a
    million-job backlog scheduled at half the rate of a 50,000-job one). The price is a longer tail
    to fold at a restart after a crash: at most ``rest`` dumps' worth of records more. Wall time
    paces an optimisation here; it decides nothing. A dump in a forked child (services/runtime/dumper.py)
    no longer stops the fold, but its encoding still takes a core (of two, on the machine measured):
    ``d`` is then the wall time of the child's encoding, and the pacer is not ready while the child runs.
    """

    def __init__(self, rest: float = 9.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.rest = rest
        self.clock = clock
        self.not_before = float("-inf")
        self.last_s = 0.0  # what the last dump took

    def ready(self) -> bool:
        return self.clock() >= self.not_before

    def busy(self) -> None:
        """A dump is under way elsewhere (a forked child, services/runtime/dumper.py): not ready until ``record``."""
        self.not_before = float("inf")

    def record(self, seconds: float) -> None:
        """A dump that took ``seconds`` has just ended."""
        self.last_s = seconds
        self.not_before = self.clock() + self.rest * seconds

    def timed(self, dump: Callable[[], bytes]) -> bytes:
        started = self.clock()
        try:
            return dump()
        finally:
            self.record(self.clock() - started)


class SnapshotUploader:
    """Uploads dumps in the background, one at a time; a newer dump supersedes one still queued.

    The runner dumps the state as it is at a record boundary (in a forked child or synchronously,
    ``services/runtime/dumper.py``) and hands the bytes over; uploading tens of MB must not hold up the fold.
    A failed upload is logged and counted, never raised: the previous
    snapshot, or a full replay, is still correct.
    """

    def __init__(self, name: str, save: SaveSnapshot) -> None:
        self.name = name
        self._save = save
        self._queued: tuple[int, bytes] | None = None
        self._task: asyncio.Task[None] | None = None
        self.saved = 0
        self.failed = 0
        self.superseded = 0
        self.saved_seq = 0  # seq of the last snapshot stored

    def offer(self, seq: int, data: bytes) -> None:
        if self._queued is not None:
            self.superseded += 1
        self._queued = (seq, data)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"horizon-snapshot-{self.name}")

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while self._queued is not None:
            seq, data = self._queued
            self._queued = None
            started = time.perf_counter()
            try:
                await self._save(self.name, seq, data)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - an upload failure must not stop the service
                self.failed += 1
                log.warning("%s: snapshot at seq %d not saved: %s: %s", self.name, seq, type(exc).__name__, exc)
                continue
            self.saved += 1
            self.saved_seq = seq
            log.info("%s: snapshot at seq %d saved (%d bytes in %.2f s)",
                     self.name, seq, len(data), time.perf_counter() - started)

    async def flush(self) -> None:
        """Until nothing is queued or uploading."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self, grace_s: float = 5.0) -> None:
        """Give a running upload ``grace_s`` to finish, then cancel it (a partial upload is never loaded)."""
        if self._task is None or self._task.done():
            return
        try:
            await asyncio.wait_for(self.flush(), grace_s)
        except asyncio.TimeoutError:
            pass
        if not self._task.done():
            await cancel_and_wait(self._task)
