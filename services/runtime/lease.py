"""Leader leases: one deciding instance per service, in the JetStream KV bucket ``HORIZON_LEASES``.

Any number of instances of a service may run; each folds the log (a hot
standby), and only the holder of the service's lease decides. The lease is one
key per service (``scheduling``, ``placement``, …) whose value names the holder.

**The server's clock decides expiry.** Every write of the key carries a
per-message TTL (``Nats-TTL``, nats-server 2.11+; the bucket allows it), so a
lease that is not renewed disappears from the bucket ``ttl_s`` after its last
write, whoever's clock is wrong. The TTL is in whole seconds: the server
truncates anything finer (measured: ``1500ms`` expired after ~1.0 s), and it
removed expired keys 0.05-0.2 s after their time on this machine.

**Every write is revision-checked** (``Nats-Expected-Last-Subject-Sequence``):

* *acquire*: only if the key is absent (expected sequence 0), or its last
  entry is a delete marker (expected: the marker's revision), or it is this
  holder's own entry (a renewal that came too late for us but not for the
  server);
* *renew*, every ``ttl_s / 3``: only if the key is still at the revision we
  wrote last. Anything else means someone else took it: the lease is lost;
* *release* (a graceful stop): a delete marker, again only on our revision,
  so a lapsed holder can never delete its successor's lease.

**A standby also counts.** Should the server be late removing a lapsed lease,
a standby that has seen one revision of it unchanged for the holder's whole
TTL (by its own monotonic clock, from when it first saw it) takes it over
with a write conditional on that revision: it saw the revision after it was
written, so the holder's own deadline (below) has passed by then.

**The holder's own view is conservative.** It counts itself the holder until
``sent + ttl_s - margin`` by its monotonic clock, where ``sent`` is when it
*sent* its last successful write: the server stored that write later, so its
expiry comes later still. A renewal that fails for want of an answer is
retried until then; past it, or on a wrong revision, the lease is lost. The
lease is I/O, not a decision: it reads wall time (``time.monotonic``,
injectable for tests) and never enters the log.

A lease alone cannot stop a holder that was paused (a long GC, SIGSTOP, a VM
migration) between checking ``held`` and publishing: nothing can, from the
outside. That is what fencing is for: ``ServiceRunner`` publishes every
decision round only if the log's last record on the service's own subjects is
the one it has applied (``EventLog.publish_fenced``), so a deposed holder's
round, decided on a state without its successor's decisions, is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.js import api

from services.runtime.log import EXPECTED_LAST_SUBJECT_SEQ

__all__ = ["LEASE_BUCKET", "Lease", "LeaseRecord", "LeaseUnavailable", "holder_id"]

log = logging.getLogger("horizon.lease")

LEASE_BUCKET = "HORIZON_LEASES"
_STREAM = f"KV_{LEASE_BUCKET}"
_KV_OPERATION = "KV-Operation"
_MSG_TTL = "Nats-TTL"
_WRONG_LAST_SEQUENCE = (10071, 10164)  # JetStream's "wrong last sequence" error codes
_TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,  # a 503 while a cluster elects the bucket's leader
    asyncio.TimeoutError,
)


class LeaseUnavailable(Exception):
    """The lease bucket did not answer; the caller retries (a held lease stays held until its deadline)."""


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The value of a lease key: who holds it, for people and tools (``nats kv get HORIZON_LEASES scheduling``)."""

    service: str
    holder: str
    ttl_s: int
    acquired_ts: float  # wall time of the holder when it took the lease
    renewed_ts: float  # wall time of its latest renewal
    term: int = 1  # how many times this holder has taken this lease (a new term after each loss)


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(LeaseRecord).decode


def holder_id() -> str:
    """A holder id unique to one lease object: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Lease:
    """The lease of one service, held (or sought) by one instance.

    ``keep()`` runs the whole life: campaign until acquired, renew every
    ``ttl_s / 3``, notice the loss, campaign again. ``on_change(held)`` is
    called (synchronously: it must not block) whenever the holder's view
    changes. ``held`` is the view itself and is evaluated on every access,
    so it turns False at the deadline even if the loop that renews is stuck.
    """

    def __init__(
        self,
        nc: Any,
        service: str,
        *,
        ttl_s: int = 10,
        holder: str | None = None,
        replicas: int = 1,
        poll_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(ttl_s, int) or ttl_s < 1:
            raise ValueError(f"lease ttl must be a whole number of seconds >= 1 (the server's unit), not {ttl_s!r}")
        self.nc = nc
        self.js = nc.jetstream(timeout=min(5.0, ttl_s / 3))
        self.service = service
        self.ttl_s = ttl_s
        self.holder = holder or holder_id()
        self.replicas = replicas
        # A standby probes this often; a takeover comes at most this long after the lease lapsed.
        self.poll_s = poll_s if poll_s is not None else min(1.0, max(0.1, ttl_s / 10))
        self.renew_every_s = ttl_s / 3
        # The part of the TTL the holder does not count on: its own last write reached the server
        # later than it was sent, so this only absorbs the two clocks running at different rates.
        self.margin_s = min(1.0, ttl_s * 0.1)
        self._clock = clock
        self.subject = f"$KV.{LEASE_BUCKET}.{service}"
        self.revision = 0  # the revision of our last write (0: not holding)
        self._sent = 0.0  # monotonic time our last successful write was sent
        self._acquired_ts = 0.0
        self.terms = 0
        self.on_change: Callable[[bool], None] | None = None
        self._bucket_ready = False
        self._was_held = False
        self._observed: tuple[int, float] = (0, 0.0)  # another holder's revision, and when we first saw it
        self._abandoned = False

    # ---------------------------------------------------------------- the holder's view

    @property
    def deadline(self) -> float:
        """Monotonic time until which we count ourselves the holder (0: not holding)."""
        return self._sent + self.ttl_s - self.margin_s if self.revision else 0.0

    @property
    def held(self) -> bool:
        return self.revision > 0 and self._clock() < self.deadline

    def _notify(self) -> None:
        now_held = self.held
        if now_held != self._was_held:
            self._was_held = now_held
            if self.on_change is not None:
                self.on_change(now_held)

    def _lose(self, why: str) -> None:
        if self.revision:
            log.warning("%s: lease lost by %s: %s", self.service, self.holder, why)
        self.revision = 0
        self._notify()

    # ---------------------------------------------------------------- the bucket

    async def ensure_bucket(self) -> None:
        """Create the lease bucket if it is not there (idempotent; racing creators are fine)."""
        if self._bucket_ready:
            return
        try:
            await self.js.stream_info(_STREAM)
        except nats.js.errors.NotFoundError:
            config = api.KeyValueConfig(bucket=LEASE_BUCKET, history=1, storage=api.StorageType.FILE,
                                        replicas=self.replicas, description="Horizon leader leases")
            try:
                await self.js.create_key_value(config=config)
            except nats.js.errors.BadRequestError as exc:
                if "already in use" not in str(exc):
                    raise
        except _TRANSIENT as exc:
            raise LeaseUnavailable(f"lease bucket: {type(exc).__name__}") from None
        self._bucket_ready = True

    async def current(self) -> tuple[int, LeaseRecord | None, bool]:
        """The key's last revision, its record (None if absent or unreadable) and whether it is a delete marker."""
        try:
            msg = await self.js.get_last_msg(_STREAM, self.subject)
        except nats.js.errors.NotFoundError:
            return 0, None, False
        except nats.js.errors.APIError as exc:
            raise LeaseUnavailable(f"lease {self.service}: {exc.description}") from None
        except _TRANSIENT as exc:
            raise LeaseUnavailable(f"lease {self.service}: {type(exc).__name__}") from None
        if msg.headers and msg.headers.get(_KV_OPERATION) in ("DEL", "PURGE"):
            return int(msg.seq or 0), None, True
        try:
            return int(msg.seq or 0), _decode(msg.data or b""), False
        except msgspec.DecodeError:
            return int(msg.seq or 0), None, False

    async def _write(self, data: bytes, expected: int, *, operation: str | None = None) -> int | None:
        """Write the key if its last revision is ``expected``: the new revision, or None if it was not."""
        headers = {EXPECTED_LAST_SUBJECT_SEQ: str(expected), _MSG_TTL: f"{self.ttl_s}s"}
        if operation:
            headers[_KV_OPERATION] = operation
        try:
            ack = await self.js.publish(self.subject, data, headers=headers)
        except nats.js.errors.APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                return None
            raise LeaseUnavailable(f"lease {self.service}: {exc.description}") from None
        except _TRANSIENT as exc:
            raise LeaseUnavailable(f"lease {self.service}: {type(exc).__name__}") from None
        return int(ack.seq)

    def _record(self, acquired_ts: float, renewed_ts: float, term: int) -> bytes:
        return _encode(LeaseRecord(service=self.service, holder=self.holder, ttl_s=self.ttl_s,
                                   acquired_ts=acquired_ts, renewed_ts=renewed_ts, term=term))

    # ---------------------------------------------------------------- the three writes

    async def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True if we hold it now."""
        await self.ensure_bucket()
        revision, record, deleted = await self.current()
        if revision and not deleted and (record is None or record.holder != self.holder):
            # Someone else's (or a value we cannot read). The server removes it ttl after its last
            # write; should it be late, we also count: a revision that we have seen unchanged for
            # the holder's whole TTL was not renewed in time, so its holder has stopped counting
            # itself the holder (we first saw it after it was written, i.e. after it was sent).
            seen_revision, seen_at = self._observed
            if revision != seen_revision:
                self._observed = (revision, self._clock())
                return False
            ttl = record.ttl_s if record is not None else self.ttl_s
            if self._clock() - seen_at < ttl:
                return False
            log.warning("%s: revision %d of the lease (%s) unchanged for %d s: taking it over", self.service,
                        revision, record.holder if record else "unreadable", ttl)
        sent = self._clock()
        wall = time.time()
        new = await self._write(self._record(wall, wall, self.terms + 1), revision)
        if new is None:
            return False  # somebody was quicker
        self.terms += 1
        self._acquired_ts = wall
        self.revision, self._sent = new, sent
        log.info("%s: lease taken by %s (revision %d, ttl %d s)", self.service, self.holder, new, self.ttl_s)
        self._notify()
        return True

    async def renew(self) -> bool:
        """Extend the lease; False (and the lease is lost) if the key is no longer at our revision.

        A renewal answered after our deadline still counts: the write was conditional on our
        revision, so nobody else wrote the key meanwhile, hence nobody else led. But the holder
        stopped counting itself the holder for a moment, so the change is reported as a loss and
        a new term (the runner then takes over afresh and decides what it skipped).
        """
        if not self.revision:
            return False
        sent = self._clock()
        new = await self._write(self._record(self._acquired_ts, time.time(), self.terms), self.revision)
        if new is None:
            self._lose("the key moved on: another instance holds it, or it lapsed")
            return False
        lapsed = self._clock() >= self.deadline
        self.revision, self._sent = new, sent
        if lapsed and self._was_held:
            log.warning("%s: lease renewed only after its deadline; taking it over afresh", self.service)
            self._was_held = False
            if self.on_change is not None:
                self.on_change(False)
        self._notify()
        return True

    async def release(self) -> None:
        """Give the lease up at once (graceful stop), so a standby takes over without waiting for the TTL."""
        if not self.revision:
            return
        revision, self.revision = self.revision, 0
        self._notify()
        with contextlib.suppress(LeaseUnavailable):
            if await self._write(b"", revision, operation="DEL") is not None:
                log.info("%s: lease released by %s", self.service, self.holder)

    # ---------------------------------------------------------------- the loop

    def abandon(self) -> None:
        """Stop ``keep`` at its next step without releasing anything (what a crash does).

        Cancelling the task that runs ``keep`` is not enough on its own: on Python 3.11 an
        ``asyncio.wait_for`` inside nats-py can swallow a cancellation that arrives as its reply
        does, and the loop would go on renewing (seen in this module's tests).
        """
        self._abandoned = True

    async def keep(self) -> None:
        """Campaign, hold, renew, notice a loss, campaign again; until abandoned or cancelled.

        Neither releases the lease: a graceful stop calls ``release`` after.
        """
        self._abandoned = False
        while not self._abandoned:
            if not self.revision:
                try:
                    if not await self.try_acquire():
                        await asyncio.sleep(self.poll_s)
                        continue
                except LeaseUnavailable as exc:
                    log.debug("%s: lease bucket unavailable: %s", self.service, exc)
                    await asyncio.sleep(self.poll_s)
                    continue
            # Holding: sleep until the next renewal is due, or until the deadline if that comes first.
            due = min(self._sent + self.renew_every_s, self.deadline)
            await asyncio.sleep(max(0.0, due - self._clock()))
            if self._clock() >= self.deadline:
                self._lose(f"not renewed within {self.ttl_s - self.margin_s:g} s")
                continue
            try:
                await self.renew()
            except LeaseUnavailable as exc:
                # Keep trying while the lease is still ours; past the deadline it is lost (checked above).
                log.warning("%s: lease renewal failed (%s); retrying", self.service, exc)
                await asyncio.sleep(min(self.poll_s, max(0.0, self.deadline - self._clock())))
            self._notify()
