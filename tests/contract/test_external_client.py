"""A client that does not import Horizon publishes JobSubmitted with plain nats-py and hand-built JSON."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import nats

from events import decode
from events.catalogue import JobSubmitted
from services.domain.protocol import Record


async def test_plain_nats_client_submits_and_a_retry_is_a_duplicate(nats_server, js_log):
    # What another language would do: read the schema, build JSON by hand.
    schema = json.loads(
        subprocess.run([sys.executable, "-m", "services.front.cli.main", "schema", "--event", "JobSubmitted"],
                       check=True, capture_output=True, text=True).stdout
    )
    required = schema["$defs"]["JobSubmitted"]["required"]
    body = {"type": "JobSubmitted", "job_id": "ext-0001", "tenant": "acme",
            "resources": {"cpus": 4, "memory": "16Gi", "gpus": 2, "gpu_type": "a100"},
            "command": ["python", "train.py"]}
    assert set(required) <= set(body)

    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    first = await js.publish("horizon.in.acme.submit", json.dumps(body).encode(), headers={"Nats-Msg-Id": "ext-0001"})
    again = await js.publish("horizon.in.acme.submit", json.dumps(body).encode(), headers={"Nats-Msg-Id": "ext-0001"})
    await nc.close()

    assert first.stream == "HORIZON" and not first.duplicate
    assert again.duplicate and again.seq == first.seq
    records: list[Record] = []
    async for batch in js_log.read(1):
        records.extend(batch)
    assert len(records) == 1
    event = decode(records[0].data)
    assert isinstance(event, JobSubmitted)
    assert event.job_id == "ext-0001" and event.resources.gpus == 2
    assert records[0].msg_id == "ext-0001"


async def test_stream_creation_is_idempotent(js_log):
    await js_log.ensure_streams()
    await asyncio.gather(js_log.ensure_streams(), js_log.ensure_streams())
    info = await js_log.js.stream_info("HORIZON")
    assert sorted(info.config.subjects) == ["horizon.evt.>", "horizon.in.>"]
    assert info.config.duplicate_window == 120.0
