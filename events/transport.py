"""What the AsyncAPI document says besides the events (``events/asyncapi.py``): the channel
parameters, the headers of inputs and of decisions, JetStream's PubAck and its error, and how a
caller describes a subject served outside the log (``Served``, ``Sent``). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from events import subjects
from events.payloads import JOB_KEY_PATTERN, TENANT_PATTERN, TOKEN_PATTERN

__all__ = ["Param", "Served", "Sent", "TENANT", "NODE", "AGGREGATE", "input_headers", "EVENT_HEADERS", "PUBACK",
           "PUB_ERROR", "VERDICT_WAIT_S", "SECURITY_SCHEMES"]

Schema = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """A ``{name}`` in a channel's address. AsyncAPI 3 parameters carry no schema, so the pattern a
    value must match goes in ``x-pattern`` and in the description."""

    description: str
    pattern: str = ""
    enum: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    def render(self) -> Schema:
        out: Schema = {"description": self.description + (f" Pattern: `{self.pattern}`." if self.pattern else "")}
        if self.enum:
            out["enum"] = list(self.enum)
        if self.examples:
            out["examples"] = list(self.examples)
        if self.pattern:
            out["x-pattern"] = self.pattern
        return out


@dataclass(frozen=True)
class Served:
    """A request/reply subject that Horizon answers outside the log: ``address`` (with ``{params}``),
    the request's and the reply's JSON Schema, and the NATS queue group its responders share."""

    key: str  # channel, operation and message id stem, e.g. "query.jobs"
    address: str
    summary: str
    description: str
    request: Schema
    reply: Schema
    parameters: Mapping[str, Param] = field(default_factory=dict)
    queue: str = ""
    tags: tuple[str, ...] = ("queries",)


@dataclass(frozen=True)
class Sent:
    """A subject Horizon publishes on outside the tenants' view of the log (dead letters)."""

    key: str
    address: str
    summary: str
    description: str
    payload: Schema
    headers: Schema | None = None
    content_type: str = "application/json"
    parameters: Mapping[str, Param] = field(default_factory=dict)
    tags: tuple[str, ...] = ("operators",)


# --------------------------------------------------------------------------
# Parameters and headers
# --------------------------------------------------------------------------

TENANT = Param("The tenant: 1 to 128 letters, digits, `_` or `-`, not starting with `_` (`_admin` is the "
               "operators').", TENANT_PATTERN, examples=("acme",))
NODE = Param("A node's name, a subject token: 1 to 128 letters, digits, `_` or `-`.", TOKEN_PATTERN,
             examples=("gpu-node-01",))
AGGREGATE = Param(
    "What the event is about, its `correlation_id`: a job (the client's id, or `<tenant>:<id>` for a tenant's "
    "job under accounts), a node, or a cycle number. Three tokens are not ids: `_` when the event names nothing "
    "(an empty `correlation_id`); `seq-<n>` for an InputRejected whose input names no readable job id (n is "
    "the input's seq, as its `causation_id` `seq:<n>`); `_invalid-<digest>` (16 hex digits of the id's SHA-1) "
    "for an id unfit for a subject (a rejected `a.b`), the event's own fields naming it as written.",
    JOB_KEY_PATTERN, examples=("train-001", "acme:train-001", "n1", "_", "seq-27", "_invalid-0123456789abcdef"))

# How long a client waits for its verdict before it asks the read model instead (`horizon submit`'s).
# Not a deadline of Horizon's: submission answers every stored input, in log order, whenever it reads it
# (after a restart too); but the feed is core NATS, at most once, so a verdict can be missed.
VERDICT_WAIT_S = 30.0

# How a client proves who it is (`horizon up --auth`, `--tls`; deploy/nats/auth.conf): AsyncAPI
# security schemes, which the document's servers name.
SECURITY_SCHEMES: dict[str, Schema] = {
    "tenantPassword": {"type": "userPassword", "description": (
        "Under accounts (`horizon up --auth`, or `deploy/nats/auth.conf`): each tenant is a NATS account of its "
        "own with one user named like the tenant. `horizon tenant add NAME --json` prints its URL with the "
        "password, `nats://NAME:PASSWORD@host:port` (`tls://...` under `--tls`): connect with that user and "
        "password. The account reaches only `horizon.in.<tenant>.<verb>` (through the intake), "
        "`horizon.validate.<tenant>`, `horizon.query.{jobs,job,queue,allocations}` (its own jobs), "
        "`horizon.logs.<node>` (its own jobs' output) and its feed `horizon.evt.>` (its own jobs' events); "
        "the job ids it names are read as its own (`<tenant>:<id>` in events). docs/tenants.md.")},
    "mutualTls": {"type": "X509", "description": (
        "Under `--tls` (with or without `--auth`): the server requires TLS (`tls://host:port`) and a client "
        "certificate signed by the cluster's CA (`verify: true`); a client without one is refused during the "
        "handshake. Under `--auth --tls`, `horizon tenant add NAME --json` also prints the tenant's `tls.ca`, "
        "`tls.cert` and `tls.key`, and the tenant needs both: this certificate and its user and password "
        "(`tenantPassword`). deploy/nats/TLS.md.")},
}

_MSG_ID_TEXT = (
    "JetStream stores a message once per Nats-Msg-Id within the stream's duplicate window (120 s by "
    "default); a retry with the same id is acknowledged with `duplicate: true` and the first copy's seq. "
    "For `submit` use the job id; for the other verbs an id naming the request (`j-42/cancel/1`), the same "
    "on every retry. Under accounts the intake keeps it in the tenant's own namespace (`in/<tenant>/<id>`), "
    "so it can collide with nothing of another tenant's or of a service's."
)
TRACEPARENT = {"type": "string", "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
               "description": "W3C trace context: the trace the decisions about this input join."}


def input_headers(kept: Iterable[str]) -> Schema:
    """The headers a client may send with an input: Nats-Msg-Id and ``kept`` (the trace context)."""
    props: Schema = {"Nats-Msg-Id": {"type": "string", "minLength": 1, "description": _MSG_ID_TEXT}}
    for name in kept:
        props[name] = dict(TRACEPARENT) if name == "traceparent" else {
            "type": "string", "description": "W3C trace context, vendor part."}
    return {"type": "object", "properties": props, "description": (
        "Headers of a client's input. Under accounts any other `Nats-*` header (rollup, TTL, atomic batch, "
        "expected sequence, ...) or `Horizon-*` header is refused: the input is stored without it and answered "
        "with InputRejected naming it.")}


EVENT_HEADERS: Schema = {"type": "object", "properties": {
    "Nats-Msg-Id": {"type": "string", "description": "Equal to the event's `id`: deterministic for a decision, "
                    "so a decision made twice is stored once."},
    "traceparent": TRACEPARENT,
}}

PUBACK: Schema = {
    "type": "object", "required": ["stream", "seq"], "description": (
        "JetStream's acknowledgement: the input is stored in the log at `seq`. The verdict on it will carry "
        "`causation_id` `seq:<seq>`."),
    "properties": {
        "stream": {"type": "string", "const": subjects.STREAM},
        "seq": {"type": "integer", "minimum": 1, "description": "The input's sequence in the HORIZON stream."},
        "duplicate": {"type": "boolean", "description": "A retry of a Nats-Msg-Id already stored: nothing "
                      "new was stored, `seq` is the first copy's (whose verdict the client may already have)."},
        "domain": {"type": "string"},
    },
}
PUB_ERROR: Schema = {
    "type": "object", "required": ["error"], "description": (
        "The input was not stored (the server's or the intake's error, e.g. 503 when the log does not answer): "
        "send it again with the same Nats-Msg-Id."),
    "properties": {"error": {"type": "object", "required": ["code"], "properties": {
        "code": {"type": "integer"}, "err_code": {"type": "integer"}, "description": {"type": "string"}}}},
}
