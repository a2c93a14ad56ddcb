"""Garbage and wrong-typed events on input subjects are dead-lettered with the error; consuming goes on."""

from __future__ import annotations

import asyncio

from events import encode
from events.catalogue import JobScheduled, JobSubmitted
from services.runtime.follow import dead_letter_to, each, follow_durable


async def test_bad_messages_are_dead_lettered_and_the_consumer_keeps_going(js_log):
    good = [JobSubmitted(job_id=f"j{i}", tenant="acme") for i in range(3)]
    await js_log.publish("horizon.in.acme.submit", encode(good[0]), msg_id="j0")
    await js_log.publish("horizon.in.acme.submit", b"\x00\x01 not json", msg_id="garbage")
    await js_log.publish("horizon.in.acme.submit", b'{"type": "JobTeleported", "job_id": "x"}', msg_id="unknown")
    await js_log.publish("horizon.in.acme.submit", encode(JobScheduled(job_id="forged")), msg_id="wrong-type")
    await js_log.publish("horizon.in.acme.submit", encode(good[1]), msg_id="j1")
    await js_log.publish("horizon.in.acme.frobnicate", encode(good[2]), msg_id="bad-verb")
    await js_log.publish("horizon.in.acme.submit", encode(good[2]), msg_id="j2")

    handled: list[str] = []
    stop = asyncio.Event()

    async def handle(record, event):
        handled.append(event.job_id)
        if len(handled) == 3:
            stop.set()

    last = await asyncio.wait_for(
        follow_durable(js_log, each(handle, undecodable=dead_letter_to(js_log, "submission")),
                       name="submission", subjects=("horizon.in.>",), stop=stop),
        timeout=20,
    )
    assert handled == ["j0", "j1", "j2"]
    assert last == 7
    letters = {d.seq: d for d in await js_log.dead_letters("submission")}
    assert sorted(letters) == [2, 3, 4, 6]
    assert "not a JSON object" in letters[2].error
    assert "unknown event type 'JobTeleported'" in letters[3].error
    assert "JobScheduled is not accepted on horizon.in.acme.submit" in letters[4].error
    assert "unknown verb 'frobnicate'" in letters[6].error
    assert letters[2].data == b"\x00\x01 not json"
