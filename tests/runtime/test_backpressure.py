"""Backpressure: a part never reads ahead of what it folds. However long the backlog in the stream,
a pull reader that is not drained holds at most its buffer limit plus the credit of its two
outstanding requests; once drained it reads on, every record once and in order. (This bound is
why a service's memory does not follow the backlog in the overload runs, docs/reliability.md.)"""

from __future__ import annotations

import asyncio

from events.subjects import STREAM
from services.runtime.log import Outgoing
from services.runtime.pullreader import PullReader

BACKLOG = 20_000


async def test_an_undrained_reader_holds_at_most_its_limit_and_then_reads_everything_once(js_log):
    for start in range(0, BACKLOG, 5_000):
        await js_log.publish_many([Outgoing("horizon.in.acme.submit", b"{}", f"j{i}")
                                   for i in range(start, start + 5_000)])
    reader = PullReader(js_log.nc, js_log.js, STREAM, 1, ["horizon.>"], batch=500, max_buffer=3_000)
    await reader.start()
    try:
        # Nobody takes: the reader fills up to its limit and stops asking.
        held, quiet_since = 0, asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - quiet_since < 1.0:
            await asyncio.sleep(0.05)
            if len(reader.buffer) != held:
                held, quiet_since = len(reader.buffer), asyncio.get_running_loop().time()
        assert 3_000 <= held <= 3_000 + 2 * 500, held
        # Drained, it reads on to the end.
        seqs: list[int] = []
        deadline = asyncio.get_running_loop().time() + 30
        while len(seqs) < BACKLOG:
            assert asyncio.get_running_loop().time() < deadline, len(seqs)
            batch = reader.take()
            assert len(batch) <= 3_000 + 2 * 500
            seqs += [r.seq for r in batch]
            if len(seqs) < BACKLOG:
                await asyncio.wait_for(reader.arrived.wait(), 10)
        assert seqs == list(range(1, BACKLOG + 1))
    finally:
        await reader.stop()
