"""``MemoryLog``: the ``EventLog`` port in memory, with the same observable contract as JetStream.

For tests of the pure cores on the real runner without NATS. Time is injected (a
callable returning seconds), so a simulation stamps records at virtual time.
The duplicate window is honoured against that clock. Snapshots are kept as
chunks and a manifest, like on JetStream, and checked by the same
``assemble``, so the contract tests of partial and corrupt snapshots mean the
same on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from events.subjects import WHOLE_LOG
from services.runtime.log import FENCED_BATCH_MAX, BatchHandler, DeadLetter, Delivery, Fence, LogConflict, Outgoing, PublishAck, TaskFollower, clean_header, subject_matches
from services.domain.protocol import MSG_ID, Record
from services.runtime.snapshots import (
    Manifest,
    SnapshotInvalid,
    assemble,
    make_manifest,
    new_snapshot_id,
    split,
)

__all__ = ["MemoryLog"]

log = logging.getLogger("horizon.log")


def _matches_any(patterns: Sequence[str], subject: str) -> bool:
    return any(subject_matches(p, subject) for p in patterns)


class _MemDurable:
    def __init__(self, log: MemoryLog, name: str, subjects: Sequence[str]) -> None:
        self.name = name
        self._log = log
        self._subjects = tuple(subjects)
        state = log._durables.setdefault(name, {"acked": set(), "delivered": {}})
        self._acked: set[int] = state["acked"]  # type: ignore[assignment]
        self._delivered: dict[int, int] = state["delivered"]  # type: ignore[assignment]
        # A new instance starts again from the first unacked message (like a JetStream
        # durable whose un-acked deliveries time out and are redelivered).
        self._cursor = 0
        self._stopped = False

    async def fetch(self, max_messages: int = 256, timeout_s: float = 1.0) -> list[Delivery]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            out: list[Delivery] = []
            records = self._log._records
            while self._cursor < len(records) and len(out) < max_messages:
                record = records[self._cursor]
                self._cursor += 1
                if record.seq in self._acked or not _matches_any(self._subjects, record.subject):
                    continue
                count = self._delivered.get(record.seq, 0) + 1
                self._delivered[record.seq] = count
                out.append(Delivery(record, count, self._acker(record.seq)))
            if out or self._stopped:
                return out
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return []
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._log._wait_for_more(len(records)), remaining)

    def _acker(self, seq: int):  # noqa: ANN202 - a closure
        async def ack() -> None:
            self._acked.add(seq)

        return ack

    async def stop(self) -> None:
        self._stopped = True


class MemoryLog:
    def __init__(self, *, clock: Callable[[], float] = time.time, duplicate_window_s: float = 120.0) -> None:
        self._records: list[Record] = []
        self._clock = clock
        self._window = duplicate_window_s
        self._ids: dict[str, tuple[int, float]] = {}
        self._last_by_subject: dict[str, int] = {}
        self._durables: dict[str, dict[str, object]] = {}
        self._dlq: list[DeadLetter] = []
        self._grew = asyncio.Condition()
        # Snapshots: chunks by (name, snapshot id) and index; the committed manifest by name.
        self.log_id = f"memory-{os.urandom(6).hex()}"
        self._snap_chunks: dict[tuple[str, str], dict[int, bytes]] = {}
        self._snap_manifests: dict[str, Manifest] = {}

    @property
    def records(self) -> list[Record]:
        return self._records

    async def _wait_for_more(self, seen: int) -> None:
        async with self._grew:
            await self._grew.wait_for(lambda: len(self._records) > seen)

    async def _notify(self) -> None:
        async with self._grew:
            self._grew.notify_all()

    def append(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected_last_subject_seq: int | None = None,
        headers: Mapping[str, str] | None = None,
        at: float | None = None,
    ) -> PublishAck:
        """Synchronous publish (for the in-process simulator and tests); wakes readers lazily."""
        now = self._clock() if at is None else at
        seen = self._ids.get(msg_id)
        if seen is not None and now - seen[1] <= self._window:
            return PublishAck(seen[0], True)
        if expected_last_subject_seq is not None:
            last = self._last_by_subject.get(subject, 0)
            if last != expected_last_subject_seq:
                raise LogConflict(f"{subject}: wrong last sequence: {last}")
        seq = len(self._records) + 1
        hdrs = {MSG_ID: msg_id}
        if headers:
            hdrs.update(headers)
        self._records.append(Record(seq, subject, data, now, hdrs))
        self._ids[msg_id] = (seq, now)
        self._last_by_subject[subject] = seq
        return PublishAck(seq, False)

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected_last_subject_seq: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishAck:
        ack = self.append(
            subject, data, msg_id=msg_id, expected_last_subject_seq=expected_last_subject_seq, headers=headers
        )
        await self._notify()
        return ack

    async def publish_many(self, items: Sequence[Outgoing]) -> list[PublishAck]:
        acks = [
            self.append(
                i.subject,
                i.data,
                msg_id=i.msg_id,
                expected_last_subject_seq=i.expected_last_subject_seq,
                headers=i.headers,
            )
            for i in items
        ]
        await self._notify()
        return acks

    async def publish_fenced(self, items: Sequence[Outgoing], fence: Fence) -> list[PublishAck]:
        """All or none, as JetStream's atomic batches: see ``EventLog.publish_fenced``.

        The order of the checks is JetStream's: a single message is checked against the fence
        first and then for a duplicate (reported, not refused); a batch is refused for a
        duplicate first, then checked against the fence.
        """
        acks: list[PublishAck] = []
        last = fence.last_seq
        try:
            for start in range(0, len(items), FENCED_BATCH_MAX):
                part = items[start : start + FENCED_BATCH_MAX]
                if any(i.expected_last_subject_seq is not None for i in part):
                    raise ValueError("publish_fenced: the fence is the only expectation a message may carry")
                now = self._clock()
                if len(part) > 1:
                    for item in part:
                        seen = self._ids.get(item.msg_id)
                        if seen is not None and now - seen[1] <= self._window:
                            raise LogConflict(f"{item.subject}: the batch repeats msg id {item.msg_id!r}")
                actual = self._last_matching(fence.subjects)
                if actual != last:
                    raise LogConflict(f"{fence.subjects}: wrong last sequence: {actual}")
                part_acks = [self.append(i.subject, i.data, msg_id=i.msg_id, headers=i.headers, at=now) for i in part]
                acks.extend(part_acks)
                last = max((a.seq for a, i in zip(part_acks, part, strict=True)
                            if not a.duplicate and subject_matches(fence.subjects, i.subject)), default=last)
        finally:
            if acks:
                await self._notify()
        return acks

    def _last_matching(self, subject: str) -> int:
        for record in reversed(self._records):
            if subject_matches(subject, record.subject):
                return record.seq
        return 0

    async def last_seq(self, subject: str | None = None) -> int:
        return len(self._records) if subject is None else self._last_matching(subject)

    async def next_seq(self, subject: str, after: int) -> int:
        records = self._records
        return next((records[i].seq for i in range(max(after, 0), len(records))
                     if subject_matches(subject, records[i].subject)), 0)

    async def read(
        self, from_seq: int = 1, *, subjects: Sequence[str] = WHOLE_LOG, until_seq: int | None = None
    ) -> AsyncIterator[list[Record]]:
        end = len(self._records) if until_seq is None else min(until_seq, len(self._records))
        batch: list[Record] = []
        for record in self._records[max(from_seq, 1) - 1 : end]:
            if _matches_any(subjects, record.subject):
                batch.append(record)
                if len(batch) >= 1000:
                    yield batch
                    batch = []
        if batch:
            yield batch

    async def follow(
        self, handler: BatchHandler, *, from_seq: int = 1, subjects: Sequence[str] = WHOLE_LOG,
        linger_s: float = 0.0,
    ) -> TaskFollower:
        async def pump() -> None:
            position = max(from_seq, 1) - 1
            while True:
                end = len(self._records)
                if position >= end:
                    await self._wait_for_more(end)
                    if linger_s > 0:
                        await asyncio.sleep(linger_s)
                    continue
                batch = [r for r in self._records[position:end] if _matches_any(subjects, r.subject)]
                position = end
                if batch:
                    await handler(batch)

        return TaskFollower(asyncio.create_task(pump(), name="horizon-memory-follow"))

    async def durable(self, name: str, *, subjects: Sequence[str] = WHOLE_LOG) -> _MemDurable:
        return _MemDurable(self, name, subjects)

    async def dead_letter(self, service: str, record: Record, error: str) -> None:
        if any(d.service == service and d.seq == record.seq for d in self._dlq):
            return  # dead-lettering is idempotent, like the msg-id on JetStream
        self._dlq.append(
            DeadLetter(service, record.subject, record.seq, clean_header(error), record.data, self._clock())
        )

    async def dead_letters(self, service: str | None = None) -> list[DeadLetter]:
        return [d for d in self._dlq if service is None or d.service == service]

    # ---------------------------------------------------------------- snapshots

    async def save_snapshot(self, name: str, seq: int, data: bytes) -> None:
        snap_id = new_snapshot_id(seq)
        parts = split(bytes(data))
        await self._write_snapshot_chunks(name, snap_id, parts)
        await self._commit_snapshot(make_manifest(name, snap_id, seq, data, len(parts), self.log_id))

    async def load_snapshot(self, name: str) -> tuple[int, bytes] | None:
        manifest = self._snap_manifests.get(name)
        if manifest is None:
            return None
        parts = self._snap_chunks.get((name, manifest.id), {})
        try:
            data = assemble(manifest, list(parts.items()), name=name, log_id=self.log_id)
        except SnapshotInvalid as exc:
            log.warning("%s: ignoring its snapshot at seq %d: %s", name, manifest.seq, exc)
            return None
        return manifest.seq, data

    async def _write_snapshot_chunks(self, name: str, snap_id: str, parts: list[bytes]) -> int:
        """Step 1 of a save (public to the contract tests, which simulate a writer dying after it)."""
        self._snap_chunks[(name, snap_id)] = dict(enumerate(parts))
        return 0

    async def _commit_snapshot(self, manifest: Manifest) -> None:
        """Step 2: the manifest makes the snapshot the latest; other chunk sets of the name are pruned."""
        self._snap_manifests[manifest.name] = manifest
        for key in [k for k in self._snap_chunks if k[0] == manifest.name and k[1] != manifest.id]:
            del self._snap_chunks[key]

    async def _snapshot_manifest(self, name: str) -> Manifest | None:
        return self._snap_manifests.get(name)

    async def close(self) -> None:
        return None
