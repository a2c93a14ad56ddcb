"""The lean receive path (services/runtime/receive.py): the protocol as the server writes it, split anywhere.

The parser is fed by hand here (a stand-in for the connection records what it
is asked to do), then used against a real nats-server, where a fast
subscription and an ordinary one on the same connection each get their own
messages.
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from nats.protocol.parser import Parser

from services.runtime import receive


class _Conn:
    def __init__(self) -> None:
        self.slow: list[tuple[int, bytes, bytes, bytes, bytes | None]] = []
        self.ops: list[Any] = []
        self._ps = Parser(self)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.slow.append((sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.ops.append("PING")

    async def _process_pong(self) -> None:
        self.ops.append("PONG")

    async def _process_err(self, err: str) -> None:
        self.ops.append(("ERR", err))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.ops.append(("INFO", info))


def _hmsg(subject: str, sid: int, reply: str, headers: bytes, data: bytes) -> bytes:
    line = f"HMSG {subject} {sid} {reply + ' ' if reply else ''}{len(headers)} {len(headers) + len(data)}\r\n"
    return line.encode() + headers + data + b"\r\n"


STREAM = (
    b'INFO {"server_id":"x","max_payload":1048576}\r\n'
    b"+OK\r\n"
    b"MSG a.b 7 5\r\nhello\r\n"
    + _hmsg("$JS.inbox.1", 3, "$JS.ACK.S.C.1.42.1.17000.9", b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n", b"{x}")
    + b"PING\r\n"
    + _hmsg("inbox.1", 3, "", b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 7\r\n\r\n", b"")
    + b"MSG c.d 9 reply.to 0\r\n\r\n"
    b"-ERR 'Slow Consumer'\r\n"
    b"PONG\r\n"
)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, len(STREAM)])
async def test_the_lean_parser_reads_every_op_however_the_bytes_are_split(chunk: int) -> None:
    conn = _Conn()
    receive.install(conn)
    fast: list[tuple[str, str, dict[str, str] | None, bytes]] = []
    conn._ps.fast[3] = lambda s, r, h, d: fast.append((s, r, h, d))
    for i in range(0, len(STREAM), chunk):
        await conn._ps.parse(STREAM[i : i + chunk])
    assert fast == [
        ("$JS.inbox.1", "$JS.ACK.S.C.1.42.1.17000.9", {"Nats-Msg-Id": "m1"}, b"{x}"),
        ("inbox.1", "", {"Status": "408", "Description": "Request Timeout", "Nats-Pending-Messages": "7"}, b""),
    ]
    assert conn.slow == [(7, b"a.b", b"", b"hello", None), (9, b"c.d", b"reply.to", b"", None)]
    assert conn.ops == [("INFO", {"server_id": "x", "max_payload": 1048576}), "PING", ("ERR", "'slow consumer'"),
                        "PONG"]
    assert not conn._ps.buf


async def test_a_failing_fast_handler_costs_its_message_only(caplog: pytest.LogCaptureFixture) -> None:
    conn = _Conn()
    receive.install(conn)

    def broken(*_: object) -> None:
        raise RuntimeError("bug")

    conn._ps.fast[3] = broken
    await conn._ps.parse(STREAM)
    assert len(conn.slow) == 2 and "fast handler failed" in caplog.text


def test_headers_both_ways() -> None:
    block = receive.header_block({"Nats-Msg-Id": "a/b/c", "X": "line\r\nbreak"})
    assert block == b"NATS/1.0\r\nNats-Msg-Id: a/b/c\r\nX: line  break\r\n\r\n"
    assert receive.parse_headers(block) == {"Nats-Msg-Id": "a/b/c", "X": "line  break"}
    assert receive.parse_headers(b"NATS/1.0 503\r\n\r\n") == {"Status": "503"}


async def test_fast_and_ordinary_subscriptions_share_a_real_connection(nats_server: Any) -> None:
    nc = receive.install(await nats.connect(nats_server.url))
    try:
        got: list[tuple[str, str, dict[str, str] | None, bytes]] = []
        ordinary: list[bytes] = []
        sub = await receive.subscribe_fast(nc, "fast.>", lambda s, r, h, d: got.append((s, r, h, d)))

        async def cb(msg: Any) -> None:
            ordinary.append(msg.data)

        await nc.subscribe("slow.>", cb=cb)
        payload = bytes(range(256)) * 300  # larger than one read of the socket
        await receive.publish(nc, "fast.a", payload, reply="r.1", headers={"Nats-Msg-Id": "x"})
        await receive.publish(nc, "fast.b", b"")
        await nc.publish("slow.a", b"s")
        reply = await nc.request("$JS.API.INFO", b"", timeout=5)  # nats-py's own request path still works
        assert b"memory" in reply.data
        for _ in range(200):
            if len(got) == 2 and ordinary:
                break
            await asyncio.sleep(0.01)
        assert got == [("fast.a", "r.1", {"Nats-Msg-Id": "x"}, payload), ("fast.b", "", None, b"")]
        assert ordinary == [b"s"]
        await receive.unsubscribe_fast(nc, sub)
        await receive.publish(nc, "fast.c", b"after")
        await nc.flush()
        await asyncio.sleep(0.05)
        assert len(got) == 2
        with pytest.raises(nats.errors.BadSubjectError):
            await receive.publish(nc, "has space", b"")
    finally:
        await nc.close()
