"""A lean receive path for Horizon's hot subscriptions: the log reader's deliveries and the PubAcks.

nats-py hands every message through its protocol parser (a regular
expression per control line), ``_process_msg`` (its header parser, a ``Msg``
object, a subscription queue) and a task that awaits the callback: about half
of a service's time when it reads the log (``docs/benchmarks.md`` §2, "Where
the time goes"). Horizon's hot subscriptions need none of that: the pull
reader wants the subject, the ack subject, the body and one or two headers;
the publish pipeline wants the ack subject's token and the body.

``install(nc)`` gives a connection this module's parser: it reads the same
protocol (``MSG``/``HMSG``, ``PING``/``PONG``, ``+OK``/``-ERR``, ``INFO``)
with plain byte searches, and delivers the messages of the subscriptions
registered with ``subscribe_fast`` to a *synchronous* handler,
``handler(subject, reply, headers, data)``, straight from the parser. Every
other subscription goes through nats-py as before. A handler must not block
and must not raise; what it needs to await it schedules as a task.

A connection this module did not install (a test's own ``nats.connect``)
still works: ``subscribe_fast`` then subscribes with an ordinary callback
that calls the handler the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from nats import errors
from nats.protocol.parser import AWAITING_CONTROL_LINE, AWAITING_MSG_PAYLOAD, Parser

__all__ = ["install", "installed", "subscribe_fast", "unsubscribe_fast", "parse_headers", "header_block", "publish", "FastHandler"]

log = logging.getLogger("horizon.wire")

FastHandler = Callable[[str, str, "dict[str, str] | None", bytes], None]

_CRLF = b"\r\n"
_MAX_CONTROL_LINE = 4096  # the server's default max control line


_ONLY_MSG_ID = b"NATS/1.0\r\nNats-Msg-Id: "


def parse_headers(raw: bytes) -> dict[str, str]:
    """A NATS header block (``NATS/1.0[ status[ description]]\\r\\nKey: Value\\r\\n...\\r\\n\\r\\n``) as
    a dict; an inline status becomes ``Status`` and ``Description``, as nats-py names them."""
    if raw.startswith(_ONLY_MSG_ID) and raw.count(b"\r\n") == 3:  # most records: their msg id alone
        return {"Nats-Msg-Id": raw[len(_ONLY_MSG_ID) : -4].decode("utf-8", "replace").strip()}
    lines = raw.decode("utf-8", "replace").split("\r\n")
    out: dict[str, str] = {}
    first = lines[0]
    if len(first) > 9 and first[8] == " ":  # "NATS/1.0 408 Request Timeout"
        status, _, description = first[9:].partition(" ")
        if status.isdigit():
            out["Status"] = status
        if description:
            out["Description"] = description
    for line in lines[1:]:
        if line:
            key, sep, value = line.partition(":")
            if sep:
                out[key.strip()] = value.strip()
    return out


class _LeanParser(Parser):
    """nats-py's parser, re-implemented with byte searches and a fast lane for registered sids.

    The state (``buf``, ``state``, the pending message's arguments) lives in the same attributes
    as nats-py's, so ``reset()`` on a reconnect works unchanged.
    """

    fast: dict[int, FastHandler]
    _pending_msg: tuple[bytes, int, bytes]

    async def parse(self, data: bytes = b"") -> None:  # noqa: C901 - one loop over the protocol's ops
        buf = self.buf
        buf.extend(data)
        pos = 0
        fast = self.fast
        size = len(buf)
        while True:
            if self.state == AWAITING_MSG_PAYLOAD:  # a message whose body had not all arrived
                subject, sid, reply = self._pending_msg
                hsize, total = self.header_needed, self.needed
                if size - pos < total + 2:
                    break
                self.state = AWAITING_CONTROL_LINE
            else:
                end = buf.find(_CRLF, pos)
                if end < 0:
                    if size - pos > _MAX_CONTROL_LINE:
                        raise _protocol_error("control line too long")
                    break
                first = buf[pos]
                if first != 0x48 and first != 0x4D:  # neither HMSG nor MSG
                    line = bytes(buf[pos:end])
                    pos = end + 2
                    if line.startswith(b"+OK"):
                        continue
                    del buf[:pos]
                    pos = 0
                    await self._control(line)
                    buf = self.buf  # a reconnect during the await may have reset it
                    size = len(buf)
                    continue
                parts = buf[pos:end].split()
                n = len(parts)
                try:
                    if first == 0x48 and parts[0] == b"HMSG" and (n == 5 or n == 6):
                        hsize, total = int(parts[-2]), int(parts[-1])
                        reply = parts[3] if n == 6 else b""
                    elif parts[0] == b"MSG" and (n == 4 or n == 5):
                        hsize, total = 0, int(parts[-1])
                        reply = parts[3] if n == 5 else b""
                    else:
                        raise ValueError
                    subject, sid = parts[1], int(parts[2])
                except (ValueError, IndexError):
                    raise _protocol_error("malformed MSG") from None
                pos = end + 2
                if size - pos < total + 2:  # the body is still on its way
                    self._pending_msg = (subject, sid, reply)
                    self.header_needed, self.needed = hsize, total
                    self.state = AWAITING_MSG_PAYLOAD
                    break
            body = pos + total
            raw_headers = bytes(buf[pos : pos + hsize]) if hsize else None
            payload = bytes(buf[pos + hsize : body])
            pos = body + 2
            handler = fast.get(sid)
            if handler is not None:
                try:
                    handler(subject.decode(), reply.decode(), parse_headers(raw_headers) if raw_headers else None,
                            payload)
                except Exception:  # noqa: BLE001 - a handler's bug must not cut the connection
                    log.exception("nats: a fast handler failed on %s", subject)
                continue
            del buf[:pos]
            pos = 0
            await self.nc._process_msg(sid, bytes(subject), bytes(reply), payload, raw_headers)
            buf = self.buf
            size = len(buf)
        if pos:
            del buf[:pos]

    async def _control(self, line: bytes) -> None:
        if line.startswith(b"PING"):
            await self.nc._process_ping()
        elif line.startswith(b"PONG"):
            await self.nc._process_pong()
        elif line.startswith(b"-ERR"):
            await self.nc._process_err(line[4:].strip().decode(errors="replace").lower())
        elif line.startswith(b"INFO"):
            await self.nc._process_info(json.loads(line[4:].strip().decode()))
        else:
            raise _protocol_error("unknown protocol")


def _protocol_error(why: str) -> Exception:
    log.warning("nats: %s", why)
    return errors.ProtocolError()


def install(nc: Any) -> Any:
    """Give ``nc`` (a connected nats-py client) the lean parser; returns ``nc``. Idempotent."""
    ps = getattr(nc, "_ps", None)
    if isinstance(ps, Parser) and not isinstance(ps, _LeanParser):
        ps.__class__ = _LeanParser
        ps.fast = {}
    return nc


def installed(nc: Any) -> bool:
    return isinstance(getattr(nc, "_ps", None), _LeanParser)


async def subscribe_fast(nc: Any, subject: str, handler: FastHandler) -> Any:
    """Subscribe ``handler`` to ``subject``: on the lean path if ``nc`` has it, else by a callback."""
    if installed(nc):
        sub = await nc.subscribe(subject)  # no callback: nats-py keeps the sid, the lean parser delivers
        nc._ps.fast[sub._id] = handler
        return sub

    async def relay(msg: Any) -> None:
        handler(msg.subject, msg.reply, msg.headers, msg.data)

    return await nc.subscribe(subject, cb=relay)


async def unsubscribe_fast(nc: Any, sub: Any) -> None:
    if installed(nc):
        nc._ps.fast.pop(sub._id, None)
    await sub.unsubscribe()


def header_block(headers: dict[str, str]) -> bytes:
    """``headers`` as a NATS header block (values on one line, as nats-py sends them)."""
    parts = ["NATS/1.0\r\n"]
    for key, value in headers.items():
        if "\r" in value or "\n" in value:
            value = value.replace("\r", " ").replace("\n", " ")
        parts.append(f"{key}: {value.strip()}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode()


def _bad_subject(subject: str) -> bool:
    return not subject or " " in subject or "\t" in subject or "\r" in subject or "\n" in subject


async def publish(nc: Any, subject: str, data: bytes, *, reply: str = "", headers: dict[str, str] | None = None) -> None:
    """``nc.publish`` without its per-message overheads (header validation by regular expression, a
    byte array grown piece by piece) on a connection with the lean path; the same checks otherwise."""
    if not installed(nc):
        await nc.publish(subject, data, reply=reply, headers=headers)
        return
    if _bad_subject(subject) or (reply and _bad_subject(reply)):
        raise errors.BadSubjectError
    if nc.is_closed:
        raise errors.ConnectionClosedError
    if nc.is_draining_pubs:
        raise errors.ConnectionDrainingError
    size = len(data)
    if not nc.is_connected and (nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size):
        raise errors.OutboundBufferLimitError
    if size > nc._max_payload:
        raise errors.MaxPayloadError
    if headers:
        hdr = header_block(headers)
        head = f"HPUB {subject} {reply} {len(hdr)} {len(hdr) + size}\r\n" if reply else \
            f"HPUB {subject} {len(hdr)} {len(hdr) + size}\r\n"
        cmd = b"".join((head.encode(), hdr, data, _CRLF))
    else:
        head = f"PUB {subject} {reply} {size}\r\n" if reply else f"PUB {subject} {size}\r\n"
        cmd = b"".join((head.encode(), data, _CRLF))
    nc.stats["out_msgs"] += 1
    nc.stats["out_bytes"] += size
    await nc._send_command(cmd)
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()
