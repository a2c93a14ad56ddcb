"""Snapshots on JetStream: chunks and a manifest in their own stream, ``HORIZON_SNAPSHOTS``.

Chunks are published pipelined like ``publish_many``, then a manifest that
commits them, then what it supersedes is pruned; they are read back with the
pull reader (nats-py's object store reads 10-40x slower from Python).
``services/runtime/snapshots.py`` has the format, the checks and the figures.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import nats.errors
import nats.js.errors

from events.subjects import STREAM
from services.runtime.log import LogUnavailable, Outgoing, PublishAck
from services.runtime.snapshots import (
    CHUNK_INDEX,
    CHUNK_SIZE,
    SNAPSHOT_STREAM,
    Manifest,
    SnapshotInvalid,
    assemble,
    chunk_subject,
    chunks_filter,
    decode_manifest,
    encode_manifest,
    make_manifest,
    manifest_subject,
    new_snapshot_id,
    split,
)

__all__ = ["JetStreamSnapshots"]

log = logging.getLogger("horizon.log")


class JetStreamSnapshots:
    """``save_snapshot`` and ``load_snapshot`` of ``JetStreamLog`` (``services/runtime/jetstream.py``),
    over its connection and its ``publish``, ``publish_many``, ``read`` and ``_ensure_snapshots``."""

    nc: Any
    js: Any
    _log_id: str | None

    async def save_snapshot(self, name: str, seq: int, data: bytes) -> None:
        """Chunks first, then the manifest that commits them, then prune what it supersedes."""
        await self._ensure_snapshots()
        snap_id = new_snapshot_id(seq)
        parts = split(bytes(data), min(CHUNK_SIZE, max(1024, self.nc.max_payload // 2)))
        first = await self._write_snapshot_chunks(name, snap_id, parts)
        manifest = make_manifest(name, snap_id, seq, data, len(parts), await self.log_identity(), first)
        await self._commit_snapshot(manifest)

    async def load_snapshot(self, name: str) -> tuple[int, bytes] | None:
        for _attempt in range(3):
            try:
                manifest = await self._snapshot_manifest(name)
            except SnapshotInvalid as exc:
                log.warning("%s: ignoring its snapshot: %s", name, exc)
                return None
            if manifest is None:
                return None
            parts = await self._read_chunks(manifest)
            try:
                return manifest.seq, assemble(manifest, parts, name=name, log_id=await self.log_identity())
            except SnapshotInvalid as exc:
                with contextlib.suppress(SnapshotInvalid):
                    latest = await self._snapshot_manifest(name)
                    if latest is not None and latest.id != manifest.id:
                        continue  # a newer commit pruned these chunks while we read: read that one
                log.warning("%s: ignoring its snapshot at seq %d: %s", name, manifest.seq, exc)
                return None
        log.warning("%s: its snapshot kept changing while being read; none loaded", name)
        return None

    async def log_identity(self) -> str:
        """Which log this is: the stream's creation time (a deleted and recreated stream is another log)."""
        if self._log_id is None:
            try:
                info = await self.js.stream_info(STREAM)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
                raise LogUnavailable(f"stream info: {type(exc).__name__}") from None
            self._log_id = f"{STREAM}@{info.created.isoformat() if info.created else ''}"
        return self._log_id

    async def _write_snapshot_chunks(self, name: str, snap_id: str, parts: list[bytes]) -> int:
        """Step 1 of a save (its own method for the contract tests): the stream sequence of the first chunk."""
        subject = chunk_subject(name, snap_id)
        items = [
            Outgoing(subject, part, f"snapshot/{name}/{snap_id}/{i}", headers={CHUNK_INDEX: str(i)})
            for i, part in enumerate(parts)
        ]
        # At most 16 MiB unacknowledged: with hundreds of chunks in flight the server answers some
        # with "too many requests" (measured at 400 MB in one go).
        group = max(1, (16 << 20) // max(1, max((len(p) for p in parts), default=1)))
        acks: list[PublishAck] = []
        for i in range(0, len(items), group):
            acks.extend(await self.publish_many(items[i : i + group]))
        return min((a.seq for a in acks), default=0)

    async def _commit_snapshot(self, manifest: Manifest) -> None:
        """Step 2: the manifest; then older chunks and manifests of the name go (a failure there is harmless)."""
        name = manifest.name
        ack = await self.publish(
            manifest_subject(name), encode_manifest(manifest), msg_id=f"snapshot/{name}/{manifest.id}/manifest"
        )
        try:
            await self.js.purge_stream(SNAPSHOT_STREAM, seq=manifest.first_chunk_seq or ack.seq,
                                       subject=chunks_filter(name))
            await self.js.purge_stream(SNAPSHOT_STREAM, subject=manifest_subject(name), keep=1)
        except Exception as exc:  # noqa: BLE001 - stale chunks cost space, never correctness
            log.warning("%s: could not prune older snapshots: %s", name, exc)

    async def _snapshot_manifest(self, name: str) -> Manifest | None:
        try:
            raw = await self.js.get_last_msg(SNAPSHOT_STREAM, manifest_subject(name))
        except nats.js.errors.NotFoundError:
            return None  # no snapshot stream yet, or no snapshot of this name
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogUnavailable(f"snapshot manifest of {name}: {type(exc).__name__}") from None
        return decode_manifest(raw.data or b"")

    async def _read_chunks(self, manifest: Manifest) -> list[tuple[int, bytes]]:
        if manifest.chunks == 0:
            return []
        parts: list[tuple[int, bytes]] = []
        subject = chunk_subject(manifest.name, manifest.id)
        # 16 MiB of credit per pull request: two in flight stay under the 64 MB a subscription or a
        # connection may fall behind before messages are dropped (measured: a 160 MB snapshot read
        # with 1,000-message requests had its connection cut again and again).
        window = max(1, (16 << 20) // max(1, manifest.size // max(1, manifest.chunks)))
        async for batch in self.read(max(1, manifest.first_chunk_seq), subjects=(subject,), stream=SNAPSHOT_STREAM,
                                     batch=window):
            for record in batch:
                index = (record.headers or {}).get(CHUNK_INDEX, "")
                parts.append((int(index) if index.isdigit() else -1, record.data))
        return parts
