"""Every reader survives any body the intake stores (issue 31, item 1).

The intake stores a tenant's input with its body exactly as sent, so the log can hold arrays nested
100,000 deep. Python's ``json`` raises ``RecursionError`` on them (msgspec likewise, even skipping
an unknown field), and ``RecursionError`` is no ``ValueError``: a reader that caught only that died
on it (the dashboard's follower: ``tests/front/test_dashboard.py``). ``events.codec.decode_json`` makes it
a ``DecodeError``; here the projections' queries, which a tenant's request reaches as sent, and the
whole-log readers of the CLI (``horizon check``, ``horizon audit``) over a log holding such bodies.
"""

from __future__ import annotations

import asyncio
import json

import nats
import nats.errors
import pytest

from events.codec import DecodeError, decode_json
from projections.job_server import QueryServer
from projections.jobs import JobsProjection
from projections.scheduling import SchedulerView
from projections.standing import StandingStore
from services.domain.queue.fold import QueueFold
from tests.front.test_cli_slurm import horizon  # a CLI command in a thread, against the server at a URL

pytestmark = pytest.mark.timeout(120)

DEEP = b"[" * 100_000 + b"]" * 100_000
BODIES = (DEEP, b'{"type": "JobSubmitted", "job_id": "d1", "tenant": "default", "x": ' + DEEP + b"}",
          b'{"job_id": ' + DEEP + b"}", b'{"type": "JobCancelRequested", "job_id": "d1", "reason": ' + DEEP + b"}")


def test_decode_json_reads_json_and_says_too_deep_as_a_value_error():
    assert decode_json(b'{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(DecodeError, match="nested too deeply") as raised:
        decode_json(DEEP)
    assert isinstance(raised.value, ValueError)


async def test_the_queries_answer_a_request_nested_100000_deep_with_an_error(js_log, tmp_path):
    """A tenant's request reaches the projections as sent: before, such a request got no answer at
    all (the handler raised), and the asker waited its whole timeout."""
    projection = JobsProjection(js_log, tmp_path / "jobs.sqlite")
    await projection.open()
    server = QueryServer(js_log.nc, projection)
    view = SchedulerView(js_log, js_log.nc, QueueFold(), store=StandingStore(tmp_path / "standing.sqlite"))
    await server.start()
    await projection.start()
    await view.start()
    nc = await nats.connect(js_log.nc.connected_url.geturl())
    try:
        for subject in ("horizon.query.jobs", "horizon.query.job", "horizon.query.jobs.acme", "horizon.query.decisions",
                        "horizon.query.queue", "horizon.query.queue.acme", "horizon.query.gpus",
                        "horizon.query.usage"):
            answer = json.loads((await nc.request(subject, DEEP, timeout=3)).data)
            assert "nested too deeply" in answer["error"], (subject, answer)
    finally:
        await nc.close()
        await view.stop()
        await server.stop()
        await projection.stop()


async def test_check_and_audit_read_a_log_holding_bodies_nested_100000_deep(js_log):
    for n, body in enumerate(BODIES):
        await js_log.publish("horizon.in.default.submit" if n < 3 else "horizon.in.default.cancel", body,
                             msg_id=f"deep-{n}")
    url = js_log.nc.connected_url.geturl()
    for command in (("check",), ("audit",)):
        code, out, err = await horizon(url, *command)
        assert code == 0 and "Traceback" not in err, (command, out, err)
