"""OpenTelemetry: one trace id connects a job's spans across submission, scheduling, placement and the
agent (W3C traceparent in NATS headers), cycles are spans linked to their jobs, and the parts count."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.nodes.spec import local_nodes
from services.runtime.telemetry import parse_traceparent, root_context, traceparent
from tests.e2e import assert_replays, job_json, wait_until

pytestmark = pytest.mark.timeout(90)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_one_trace_connects_a_job_across_the_services(running_horizon):
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=4), executor="sim", tracer_provider=tracing,
                              meter_provider=MeterProvider(metric_readers=[reader]))
    tally, js = h.tally, h.js
    await js.publish("horizon.in.acme.submit", job_json("traced", resources={"gpus": 1}, sim_runtime_s=0.2),
                     headers={"Nats-Msg-Id": "traced", "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})
    await js.publish("horizon.in.acme.submit", job_json("untraced", resources={"gpus": 1}, sim_runtime_s=0.2),
                     headers={"Nats-Msg-Id": "untraced"})
    await wait_until(lambda: tally.has("JobSucceeded", "traced") and tally.has("JobSucceeded", "untraced"),
                     30, "both jobs to end")
    await h.stop()
    spans = exporter.get_finished_spans()
    ours = [s for s in spans if f"{s.context.trace_id:032x}" == TRACE]
    names = {s.name for s in ours}
    assert {"submission JobAccepted", "scheduling candidate", "placement JobScheduled", "agent JobStarted",
            "agent JobSucceeded"} <= names, names
    assert all(s.parent is not None for s in ours)  # each continues the one before it
    # a job whose client sent no trace still has one, derived from its id, the same in every part
    derived = root_context("untraced").trace_id
    assert {"submission JobAccepted", "placement JobScheduled", "agent JobSucceeded"} <= {
        s.name for s in spans if s.context.trace_id == derived}
    # the cycle is a span of its own, linked to its candidates' traces
    cycles = [s for s in spans if s.name == "scheduling SchedulingCycleCompleted"]
    assert cycles and any(int(TRACE, 16) in {link.context.trace_id for link in c.links} for c in cycles)
    # the headers in the log carry the trace on
    records = await h.records()
    scheduled = next(r for r in records if r.subject == "horizon.evt.placement.JobScheduled.traced")
    ctx = parse_traceparent(scheduled.headers["traceparent"])
    assert ctx is not None and f"{ctx.trace_id:032x}" == TRACE and traceparent(ctx).startswith(f"00-{TRACE}-")
    # counters by part and type
    metrics = reader.get_metrics_data()
    names = {m.name for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"horizon.events.published", "horizon.events.applied", "horizon.scheduled", "horizon.consumer.lag",
            "horizon.queue.depth", "horizon.gpus", "horizon.cycle.latency", "horizon.decide.duration"} <= names
    # a cycle's span covers the round that computed it, not only its publication
    assert all(c.end_time > c.start_time for c in cycles)
    assert_replays(records)  # tracing never changes a decision


def _points(reader: InMemoryMetricReader, name: str) -> list:
    data = reader.get_metrics_data()
    return [p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics if m.name == name
            for p in m.data.data_points]


async def test_consumer_lag_counts_what_other_parts_published(nats_server):
    """A part that only reads (projections, a standby) sees the stream's end by probing it, so its
    lag is what is stored and not yet applied; it falls back to 0 once it has caught up."""
    from services.runtime.jetstream import JetStreamLog
    from services.runtime.log import Outgoing
    from services.runtime.telemetry import TracedLog

    writer = await JetStreamLog.open(nats_server.url, name="writer")
    reader = InMemoryMetricReader()
    traced = TracedLog(await JetStreamLog.open(nats_server.url, name="reader", create=False), "projections",
                       TracerProvider(), MeterProvider(metric_readers=[reader]), lag_probe_s=0.05)
    release, applied = asyncio.Event(), []
    follower = None

    async def slow(batch):
        applied.extend(batch)
        await release.wait()  # a part busy with its first batch

    def lag() -> int:
        return sum(p.value for p in _points(reader, "horizon.consumer.lag"))

    # Each wait is for a condition, bounded generously (a loaded 2-core machine is slow, never wrong);
    # whatever happens, the follower is stopped before the logs close, so a failed wait fails at once
    # with its message instead of leaving a follower blocked in `slow` under a closing connection.
    try:
        await writer.publish_many([Outgoing("horizon.in.acme.submit", b"{}", "first")])
        follower = await traced.follow(slow)
        await wait_until(lambda: applied, 30, "the first batch")
        await writer.publish_many([Outgoing("horizon.in.acme.submit", b"{}", f"j{i}") for i in range(100)])
        await wait_until(lambda: lag() == 100, 30, "the lag to count the 100 records published by another part")
        release.set()
        await wait_until(lambda: len(applied) == 101 and lag() == 0, 30, "the lag to fall back to 0")
    finally:
        release.set()
        if follower is not None:
            await asyncio.wait_for(follower.stop(), 30)
        await traced.close()
        await writer.close()


async def test_closing_ends_a_lag_probe_whose_cancellation_was_swallowed(nats_server):
    """``horizon up`` once hung at Ctrl-C under load (CI at 2d90c07): the lag probe's stream-info
    request answered in the same loop iteration as its cancellation, nats-py's ``asyncio.wait_for``
    returned the answer and dropped the cancel (CPython gh-86296), and ``close`` awaited a probe that
    went back to sleep for good. Here the request drops every cancellation as that race does."""
    from services.runtime.jetstream import JetStreamLog
    from services.runtime.telemetry import TracedLog

    inner = await JetStreamLog.open(nats_server.url, name="probed")
    asked, dropped = asyncio.Event(), []

    async def last_seq_that_drops_a_cancel(subject=None):
        asked.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            dropped.append(1)  # the answer "arrived" with the cancel: returned, the cancel lost
        return 0

    inner.last_seq = last_seq_that_drops_a_cancel
    traced = TracedLog(inner, "inventory", TracerProvider(), MeterProvider(), lag_probe_s=3600.0)
    follower = await traced.follow(lambda batch: asyncio.sleep(0))
    await asyncio.wait_for(asked.wait(), 30)
    await follower.stop()
    closing = asyncio.ensure_future(traced.close())
    done, _ = await asyncio.wait({closing}, timeout=30)  # before: for ever, the probe asleep for an hour
    if not done:
        closing.cancel()
        await inner.close()
    assert done and dropped == [1]
