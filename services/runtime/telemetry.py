"""OpenTelemetry across services: one trace per job, carried in NATS headers (W3C ``traceparent``).

``TracedLog`` wraps a part's ``EventLog``; the cores and the runner do not
know it is there (tracing is I/O, never an input to a decision):

* **learning**: every record a part reads (catch-up or follow) that carries
  a ``traceparent`` header teaches it the trace of the record's *aggregate*
  (the job or node id: the last token of ``horizon.evt.<svc>.<Type>.<id>``;
  for a submission, its ``Nats-Msg-Id``, which is the job id);
* **publishing**: every event the part publishes about an aggregate gets a
  span named ``<part> <Type>`` (a child of the latest span of that
  aggregate's trace) and carries that span's ``traceparent``, so the next
  part continues the same trace. An aggregate with no trace yet (a client
  that sent none) gets one derived from its id (``sha256`` of it), so the
  parts agree on it without talking;
* a scheduling cycle (``SchedulingCycleCompleted``) is a span of its own
  trace, **linked** to its candidates' traces; each job also gets one
  ``scheduling candidate`` span in its own trace the first time it is a
  candidate, so submission, scheduling, placement and the agent all appear
  in the job's trace.

A decision round that published (the runner's ``decide`` and the publication
of what it decided; ``decision_round``) is timed: ``horizon.decide.duration``
per part (every batch a part reads ends in a round, and most decide nothing:
those are not timed), and a scheduling cycle's span starts when its round
started, so it covers the cycle's computation, not only its publication.

With tracing off (no tracer provider), no span is made and nothing is decoded
for one; the ``traceparent`` is carried on all the same, and a part parses the
header of a record it read only when it publishes about that aggregate.

Metrics (the part's meter): ``horizon.events.published`` and
``horizon.events.applied`` (per part and event type), ``horizon.rejections``
(``JobRejected`` per field, ``RequestRejected`` per verb),
``horizon.scheduled`` (per ``backfilled`` / ``borrowed``),
``horizon.preemptions``, ``horizon.decide.duration`` and
``horizon.consumer.lag`` (records stored in the stream that the part has not
applied yet: the stream's end is probed every ``lag_probe_s`` while the part
follows the log, so the lag also counts what other parts published). Queue
depth, utilisation and fragmentation are gauges of the read models
(``projections.scheduling``).

``configure(exporter)``: ``console``, ``otlp`` (needs the
``opentelemetry-exporter-otlp`` package; ``OTEL_EXPORTER_OTLP_ENDPOINT``), or
``none``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from events.codec import decode_json
from services.domain.protocol import MSG_ID, Record
from services.runtime.cancel import cancel_and_wait
from services.runtime.log import BatchHandler, EventLog, Fence, Follower, Outgoing, PublishAck

__all__ = ["TracedLog", "TRACEPARENT", "traceparent", "parse_traceparent", "configure", "root_context"]

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
# a meter -> the traced logs its lag gauge observes
_LAGGING: weakref.WeakKeyDictionary[Any, weakref.WeakSet[TracedLog]] = weakref.WeakKeyDictionary()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class _ScheduledFlags(msgspec.Struct):
    """What ``horizon.scheduled`` counts of a ``JobScheduled`` (the rest of its body is skipped unread)."""

    backfilled: bool = False
    borrowed: bool = False


_SCHEDULED_FLAGS = msgspec.json.Decoder(_ScheduledFlags).decode


def traceparent(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(value: str | None) -> SpanContext | None:
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def root_context(aggregate: str) -> SpanContext:
    """The trace of an aggregate that arrived without one: the same in every part."""
    digest = hashlib.sha256(aggregate.encode()).digest()
    return SpanContext(int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1,
                       is_remote=True, trace_flags=_SAMPLED)


def _aggregate(parts: Sequence[str], headers: Mapping[str, str] | None) -> str | None:
    """The aggregate of a record whose subject's tokens are ``parts``."""
    if len(parts) == 5 and parts[1] == "evt":
        return parts[4]
    if len(parts) == 4 and parts[1] == "in" and parts[3] == "submit" and headers:
        return headers.get(MSG_ID)
    return None


class TracedLog:
    """An ``EventLog`` that traces what its part reads and publishes (see the module doc)."""

    def __init__(self, inner: EventLog, part: str, tracer_provider: Any = None, meter_provider: Any = None,
                 max_contexts: int = 200_000, lag_probe_s: float = 2.0) -> None:
        self.inner = inner
        self.part = part
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("horizon", schema_url=None)
        self.contexts: dict[str, SpanContext | str] = {}  # aggregate -> its latest span (a traceparent as read)
        self.candidates_seen: set[str] = set()
        self.max_contexts = max_contexts
        self.applied_seq = 0
        self.known_end = 0
        self.lag_probe_s = lag_probe_s
        self._probe: asyncio.Task[None] | None = None
        self._round_started_ns: int | None = None
        self.applied_counts: dict[str, int] = {}  # records read, by type (horizon.events.applied)
        self.published_counts: dict[str, int] = {}  # events published, by type (horizon.events.published)
        self.scheduled_counts: dict[tuple[bool, bool], int] = {}  # JobScheduled: (backfilled, borrowed)
        self._round_published = False  # the round under way published (decision_round)
        self._meters(meter_provider)

    def _meters(self, meter_provider: Any) -> None:
        from opentelemetry import metrics

        meter = (meter_provider or metrics.get_meter_provider()).get_meter("horizon")
        self.rejections = meter.create_counter("horizon.rejections", description="JobRejected by field")
        self.preemptions = meter.create_counter("horizon.preemptions", description="PreemptionRequested")
        self.preemptions.add(0, {"part": self.part})  # a series from the start: rate() needs its zero
        self.decide_ms = meter.create_histogram("horizon.decide.duration", unit="ms",
                                                description="one decision round that published: decide and publish")
        # One gauge per meter, observing every traced log on it: a meter keeps the first callbacks
        # registered under a name, so the parts sharing a provider (``horizon up``) share the gauge.
        logs = _LAGGING.get(meter)
        if logs is None:
            from opentelemetry.metrics import Observation

            logs = _LAGGING[meter] = weakref.WeakSet()

            def lag(_options: Any, logs: weakref.WeakSet[TracedLog] = logs) -> list[Observation]:
                return [Observation(max(0, t.known_end - t.applied_seq), {"part": t.part})
                        for t in sorted(logs, key=lambda t: t.part)]

            meter.create_observable_gauge("horizon.consumer.lag", callbacks=[lag],
                                          description="records in the stream this part has not applied yet")

            def summed(counts_of: Callable[[TracedLog], Iterable[tuple[Any, int]]]) -> list[tuple[Any, int]]:
                """Each key's count over every traced log on this meter, in key order."""
                totals: dict[Any, int] = {}
                for t in list(logs):
                    for key, n in counts_of(t):
                        totals[key] = totals.get(key, 0) + n
                return sorted(totals.items())

            def by_type(counts: Callable[[TracedLog], dict[str, int]]) -> Callable[[Any], list[Observation]]:
                def observe(_options: Any) -> list[Observation]:
                    per_part = summed(lambda t: (((t.part, kind), n) for kind, n in counts(t).items()))
                    return [Observation(n, {"part": part, "type": kind}) for (part, kind), n in per_part]
                return observe

            def scheduled(_options: Any) -> list[Observation]:
                return [Observation(n, {"backfilled": backfilled, "borrowed": borrowed})
                        for (backfilled, borrowed), n in summed(lambda t: t.scheduled_counts.items())]

            # Counted by the log itself and observed at collection: an add() per record and part
            # cost ~10 us of the SDK's each, a tenth of an idle stack's time per job (issue 22); so
            # did one per event published, a ~20th (issue 35).
            meter.create_observable_counter("horizon.events.applied", description="records a part read",
                                            callbacks=[by_type(lambda t: t.applied_counts)])
            meter.create_observable_counter("horizon.events.published", description="events a part published",
                                            callbacks=[by_type(lambda t: t.published_counts)])
            meter.create_observable_counter("horizon.scheduled", callbacks=[scheduled],
                                            description="JobScheduled, backfilled or not")
        logs.add(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ reading

    def _learn(self, batch: Sequence[Record]) -> None:
        counts = self.applied_counts
        contexts = self.contexts
        for record in batch:
            subject = record.subject
            tokens = subject.split(".")
            kind = tokens[3] if len(tokens) > 3 else subject
            counts[kind] = counts.get(kind, 0) + 1
            headers = record.headers
            if not headers:
                continue
            value = headers.get(TRACEPARENT)
            if value is None:
                continue
            aggregate = _aggregate(tokens, headers)
            if aggregate:
                if len(contexts) >= self.max_contexts and aggregate not in contexts:
                    contexts.pop(next(iter(contexts)))  # forget the oldest trace first
                # As read: parsed only if this part publishes about the aggregate (``_parent``); most
                # parts never do, and a parse per record and part was a twentieth of an idle stack's time.
                contexts[aggregate] = value
        if batch:
            self.applied_seq = max(self.applied_seq, batch[-1].seq)
            self.known_end = max(self.known_end, self.applied_seq)

    def learn(self, batch: Sequence[Record]) -> None:
        """What ``follow`` notes of each batch, for a reader the part shares with others
        (services/runtime/fanout.py): the records' counts and traces, and the lag probe."""
        self._learn(batch)
        if self._probe is None and self.lag_probe_s > 0:
            self._probe = asyncio.create_task(self._probe_end(), name=f"lag-probe-{self.part}")

    async def read(self, from_seq: int = 1, **kw: Any) -> AsyncIterator[list[Record]]:
        async for batch in self.inner.read(from_seq, **kw):
            self._learn(batch)
            yield batch

    async def follow(self, handler: BatchHandler, **kw: Any) -> Follower:
        async def traced(batch: list[Record]) -> None:
            self._learn(batch)
            await handler(batch)

        follower = await self.inner.follow(traced, **kw)
        if self._probe is None and self.lag_probe_s > 0:
            self._probe = asyncio.create_task(self._probe_end(), name=f"lag-probe-{self.part}")
        return follower

    async def _probe_end(self) -> None:
        """Learn the stream's end now and then: what other parts publish is lag too."""
        while True:
            try:
                self.known_end = max(self.known_end, await self.inner.last_seq())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a metric; the server may be away for a while
                log.debug("%s: lag probe: %s", self.part, exc)
            await asyncio.sleep(self.lag_probe_s)

    async def close(self) -> None:
        if self._probe is not None:
            await cancel_and_wait(self._probe)
            self._probe = None
        await self.inner.close()

    # ------------------------------------------------------------------ deciding

    @contextlib.contextmanager
    def decision_round(self) -> Iterator[None]:
        """Around one round of the runner's ``decide`` and its publication (the runner's hook)."""
        started = time.perf_counter()
        self._round_started_ns = time.time_ns()
        self._round_published = False
        try:
            yield
        finally:
            self._round_started_ns = None
            # Only a round that published: most rounds decide nothing (every batch ends in one), and
            # recording each cost the SDK ~17 us, more than such a round's ``decide``.
            if self._round_published:
                self.decide_ms.record((time.perf_counter() - started) * 1000.0, {"part": self.part})

    # ------------------------------------------------------------------ publishing

    def _parent(self, aggregate: str) -> SpanContext:
        ctx = self.contexts.get(aggregate)
        if isinstance(ctx, str):  # as read: parsed once, when first needed
            ctx = parse_traceparent(ctx)
            if ctx is None:  # a client's malformed header: the trace its id derives
                del self.contexts[aggregate]
            else:
                self.contexts[aggregate] = ctx
        return ctx or root_context(aggregate)

    def _recording(self) -> bool:
        """True if spans go anywhere: a tracer provider was given, or one was installed globally since
        (the global tracer, a proxy, delegates to a no-op one until then)."""
        return not isinstance(getattr(self.tracer, "_tracer", self.tracer), trace.NoOpTracer)

    def _count(self, event_type: str, data: bytes) -> None:
        """The metrics of one event published."""
        self.published_counts[event_type] = self.published_counts.get(event_type, 0) + 1
        if event_type == "JobScheduled":
            try:
                flags = _SCHEDULED_FLAGS(data)
            except msgspec.DecodeError:
                return
            key = (bool(flags.backfilled), bool(flags.borrowed))
            self.scheduled_counts[key] = self.scheduled_counts.get(key, 0) + 1
        elif event_type in ("JobRejected", "RequestRejected"):
            try:
                body = decode_json(data)
            except ValueError:  # too deep included (events.codec.decode_json)
                return
            if event_type == "JobRejected":
                self.rejections.add(1, {"event": "JobRejected", "field": body.get("field") or "other"})
            else:
                self.rejections.add(1, {"event": "RequestRejected", "verb": body.get("verb") or "other"})
        elif event_type == "PreemptionRequested":
            self.preemptions.add(1, {"part": self.part})

    def _traced(self, subject: str, data: bytes, headers: Mapping[str, str] | None) -> dict[str, str]:
        out = dict(headers or {})
        parts = subject.split(".")
        if len(parts) != 5 or parts[1] != "evt":
            return out
        event_type, aggregate = parts[3], parts[4]
        self._count(event_type, data)
        cycle = event_type == "SchedulingCycleCompleted"
        parent = root_context(f"cycle-{aggregate}") if cycle else self._parent(aggregate)
        if not self._recording():  # tracing off: no spans, but the trace is carried on all the same
            out[TRACEPARENT] = traceparent(parent)
            return out
        attributes: dict[str, Any] = {"horizon.part": self.part, "horizon.aggregate": aggregate,
                                      "messaging.destination": subject}
        links: list[Link] = []
        if cycle:
            try:
                body = decode_json(data)
            except ValueError:  # too deep included (events.codec.decode_json)
                body = {}
            candidates = body.get("candidates") or []
            attributes["horizon.candidates"] = len(candidates)
            links = [Link(self._parent(j)) for j in candidates[:64]]
            for job_id in candidates:
                if job_id not in self.candidates_seen:
                    self.candidates_seen.add(job_id)
                    span = self.tracer.start_span("scheduling candidate", context=trace.set_span_in_context(
                        NonRecordingSpan(self._parent(job_id))), attributes={"horizon.job": job_id,
                                                                            "horizon.cycle": body.get("cycle", 0)})
                    span.end()
                    self.contexts[job_id] = span.get_span_context()
        # A cycle's span runs from the start of the round that decided it (its computation).
        start = self._round_started_ns if cycle else None
        span = self.tracer.start_span(f"{self.part} {event_type}",
                                      context=trace.set_span_in_context(NonRecordingSpan(parent)),
                                      attributes=attributes, links=links, start_time=start)
        span.end()
        ctx = span.get_span_context()
        if ctx.is_valid:
            self.contexts[aggregate] = ctx
            out[TRACEPARENT] = traceparent(ctx)
        else:  # a provider that samples this trace out: still carry the trace on
            out[TRACEPARENT] = traceparent(parent)
        return out

    async def publish(self, subject: str, data: bytes, *, msg_id: str,
                      expected_last_subject_seq: int | None = None,
                      headers: Mapping[str, str] | None = None) -> PublishAck:
        ack = await self.inner.publish(subject, data, msg_id=msg_id,
                                       expected_last_subject_seq=expected_last_subject_seq,
                                       headers=self._traced(subject, data, headers))
        self.known_end = max(self.known_end, ack.seq)
        self._round_published = True
        return ack

    async def publish_many(self, items: Sequence[Outgoing]) -> list[PublishAck]:
        traced = [item._replace(headers=self._traced(item.subject, item.data, item.headers)) for item in items]
        acks = await self.inner.publish_many(traced)
        if acks:
            self.known_end = max(self.known_end, max(a.seq for a in acks))
            self._round_published = True
        return acks

    async def publish_fenced(self, items: Sequence[Outgoing], fence: Fence) -> list[PublishAck]:
        traced = [item._replace(headers=self._traced(item.subject, item.data, item.headers)) for item in items]
        acks = await self.inner.publish_fenced(traced, fence)
        if acks:
            self.known_end = max(self.known_end, max(a.seq for a in acks))
            self._round_published = True
        return acks


def configure(exporter: str = "none", service_name: str = "horizon") -> Any:
    """A tracer provider exporting to ``console`` or ``otlp`` (``none``: tracing off)."""
    if exporter == "none":
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # type: ignore
        except ImportError:
            raise ValueError("--otel otlp needs the opentelemetry-exporter-otlp package "
                             "(pip install opentelemetry-exporter-otlp)") from None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        raise ValueError(f"unknown exporter {exporter!r}: console, otlp or none")
    return provider
