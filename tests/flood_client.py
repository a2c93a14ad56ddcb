"""A flooding tenant, as a process of its own (tests/front/test_tenant_flood.py): it sends every input at
once, each with a reply inbox and none awaited, and prints one JSON line: how long the sending took
and each input's answer (the PubAck, or the intake's error), in the order sent.

A process of its own so that the test's own measurements (another tenant's submit -> scheduled)
are not held up by this loop, as a flood from another machine would not hold them up.

    python tests/flood_client.py URL TENANT [PREFIX] < inputs.jsonl   # lines: [verb, body as text, msg id]

PREFIX is where the tenant publishes, ``horizon.in`` (under accounts, the import of the intake);
``horizon.intake`` reaches an intake on a server without accounts.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

import nats


async def flood(url: str, tenant: str, inputs: list[tuple[str, str, str]], prefix: str = "horizon.in") -> dict[str, Any]:
    nc = await nats.connect(url, max_reconnect_attempts=0)
    answers: list[Any] = [None] * len(inputs)
    left = [len(inputs)]
    done = asyncio.Event()

    async def answered(msg: Any) -> None:
        i = int(msg.subject.rsplit(".", 1)[1])
        if answers[i] is None:
            left[0] -= 1
        # the intake's answer; a status of the server's (no responders: 503, no body) as an error
        answers[i] = json.loads(msg.data) if msg.data else {"error": {"code": int((msg.headers or {}).get(
            "Status", 0) or 0), "description": (msg.headers or {}).get("Description", "")}}
        if not left[0]:
            done.set()

    inbox = nc.new_inbox()
    await nc.subscribe(inbox + ".*", cb=answered, pending_msgs_limit=len(inputs) + 1, pending_bytes_limit=2**30)
    start = time.monotonic()
    for i, (verb, body, msg_id) in enumerate(inputs):
        await nc.publish(f"{prefix}.{tenant}.{verb}", body.encode(), reply=f"{inbox}.{i}",
                         headers={"Nats-Msg-Id": msg_id})
        if i % 500 == 0:
            await asyncio.sleep(0)  # let the reader take the answers coming back meanwhile
    await nc.flush()
    sent = time.monotonic() - start
    try:
        await asyncio.wait_for(done.wait(), 120)
    except TimeoutError:
        pass
    answered_s = time.monotonic() - start
    await nc.close()
    used = resource.getrusage(resource.RUSAGE_SELF)
    return {"sent_s": sent, "answered_s": answered_s, "cpu_s": used.ru_utime + used.ru_stime, "answers": answers}


def main() -> None:
    url, tenant, *prefix = sys.argv[1:]
    inputs = [tuple(json.loads(line)) for line in sys.stdin if line.strip()]
    print(json.dumps(asyncio.run(flood(url, tenant, inputs, *prefix))))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
