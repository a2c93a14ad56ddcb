"""Horizon's published contract as an AsyncAPI 3.0.0 document (``horizon schema --asyncapi``).

Pure: the document is a function of the catalogue (``events/catalogue/``,
the payloads' JSON Schema in ``events/payloads.py``), the subjects and who
publishes what (``events/subjects.py``), and of what the caller adds about the
subjects served outside the log (the query views, validation, job output,
dead letters: ``Served`` and ``Sent`` of ``events/transport.py``, which
``services/front/host/contract.py`` builds from the modules that serve them, since
``events`` imports nothing of ours). Nothing is written twice by hand: a new
event type, verb or publisher appears in the document by itself.

The operations are Horizon's, as AsyncAPI 3 asks (the document describes one
application): Horizon *receives* inputs and requests and *sends* decisions,
replies and heartbeats. A client does the opposite of what an operation says.

The verdict contract, which every client relies on, is stated where a client
reads it: in the operations on ``horizon.in.<tenant>.<verb>`` and in
``VERDICTS`` (tests/contract/test_asyncapi.py holds ``VERDICTS`` against the
submission core).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from events import catalogue as c
from events import subjects
from events.catalogue import EVENT_TYPES
from events.payloads import payload_schemas
from events.transport import (AGGREGATE, EVENT_HEADERS, NODE, PUB_ERROR, PUBACK, SECURITY_SCHEMES, TENANT, VERDICT_WAIT_S,
                         Param, Served, Sent, input_headers)

__all__ = ["document", "VERDICTS", "TENANT_FEED_TYPES", "ASYNCAPI_VERSION"]

ASYNCAPI_VERSION = "3.0.0"
Schema = dict[str, Any]
_SCHEMAS = "#/components/schemas/"
_MESSAGES = "#/components/messages/"

# verb -> the event types that may be the verdict on an input on horizon.in.<tenant>.<verb>: exactly one
# of them per job the input names (a submitted array: one JobAccepted per task), causation_id "seq:<n>",
# all published by submission. InputRejected answers a malformed input on any verb; RequestRejected also
# answers a submit of a job id already taken.
VERDICTS: dict[str, tuple[str, ...]] = {
    "submit": ("JobAccepted", "JobRejected", "RequestRejected", "InputRejected"),
    "cancel": ("JobCancelled", "JobStopRequested", "RequestRejected", "InputRejected"),
    "hold": ("JobHeld", "RequestRejected", "InputRejected"),
    "release": ("JobReleased", "RequestRejected", "InputRejected"),
    "update": ("JobPriorityChanged", "RequestRejected", "InputRejected"),
}

# The events a tenant's feed carries: those about a job (projections/tenants.py feed_tenant), and the
# verdicts on its inputs.
TENANT_FEED_TYPES: tuple[str, ...] = tuple(
    name for name in subjects.PUBLISHERS
    if "job_id" in EVENT_TYPES[name].__struct_fields__ or name == "InputRejected"
)


# --------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------


def _ref(path: str) -> Schema:
    return {"$ref": path}


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) if cls.__doc__ else ""
    first = (doc or "").split("\n\n")[0].replace("``", "`").replace("\n", " ")
    return first


def _event_message(name: str, verdict_of: Mapping[str, list[str]]) -> Schema:
    cls = EVENT_TYPES[name]
    is_input = name not in subjects.PUBLISHERS
    who = ("a client or an operator" if is_input else ", ".join(subjects.PUBLISHERS[name]))
    summary = _summary(cls) or f"{name}, published by {who}."
    message: Schema = {
        "name": name, "title": name, "summary": summary, "contentType": "application/json",
        "payload": _ref(_SCHEMAS + name),
        "headers": _ref(_SCHEMAS + ("InputHeaders" if is_input else "EventHeaders")),
    }
    if name in verdict_of:
        message["correlationId"] = {"location": "$message.payload#/causation_id", "description": (
            f"A verdict on a client's input ({', '.join(verdict_of[name])}): `seq:<n>`, n the input's PubAck seq."
            + _FOLLOWS_VERDICT_NOTE.get(name, ""))}
    elif not is_input:
        message["correlationId"] = {"location": "$message.payload#/correlation_id",
                                    "description": "The job or node the event is about."}
    example = _EXAMPLES.get(name)
    if example is not None:
        message["examples"] = [{"name": example[0], "summary": example[1], "payload": _builtins(example[2])}]
    return message


def _builtins(event: c.Event) -> Schema:
    return msgspec.json.decode(msgspec.json.encode(event))  # type: ignore[no-any-return]


_EXAMPLES: dict[str, tuple[str, str, c.Event]] = {
    "JobSubmitted": ("two-a100s", "A command on two A100s, everything else defaulted.", c.JobSubmitted(
        job_id="train-001", tenant="acme", command=["python", "train.py"],
        resources=c.ResourceRequest(cpus=8, memory="64Gi", gpus=2, gpu_type="a100"))),
    "JobCancelRequested": ("cancel", "Cancel a job.", c.JobCancelRequested(job_id="train-001", tenant="acme",
                                                                           reason="not needed")),
    "JobAccepted": ("accepted", "The verdict on the submission stored at seq 42.", c.JobAccepted(
        id="submission/JobAccepted/train-001", ts=1767225600.5, causation_id="seq:42", correlation_id="train-001",
        source="submission", job_id="train-001", submitted_seq=42, submitted_ts=1767225600.5, basis_seq=42,
        spec=c.JobSpec(tenant="acme", name="train-001", command=("python", "train.py"), cpus_milli=8000,
                       memory_bytes=64 << 30, gpus=2, gpu_type="a100"))),
    "JobRejected": ("rejected", "A well-typed but wrong submission.", c.JobRejected(
        id="submission/JobRejected/train-002", causation_id="seq:43", correlation_id="train-002",
        source="submission", job_id="train-002", tenant="acme", field="resources.memory",
        reason="resources.memory: '8 GiB' has an unknown unit 'GiB'", submitted_seq=43, basis_seq=43)),
    "InputRejected": ("type-error", "A malformed input: a string where an integer belongs.", c.InputRejected(
        id="submission/InputRejected/44", causation_id="seq:44", correlation_id="train-003", source="submission",
        tenant="acme", input_seq=44, subject="horizon.in.acme.submit", verb="submit", msg_id="train-003",
        job_id="train-003", path="$.resources.gpus", reason="JobSubmitted: Expected `int`, got `str`",
        basis_seq=44)),
    "JobScheduled": ("scheduled", "Placed on one node with two GPUs.", c.JobScheduled(
        id="placement/JobScheduled/train-001/1", causation_id="scheduling/SchedulingCycleCompleted/7",
        correlation_id="train-001", source="placement", job_id="train-001", attempt=1, cycle=7, basis_seq=50,
        time_limit_s=3600.0, allocations=[c.NodeAllocation(node="n1", device_ids=["n1-gpu0", "n1-gpu1"],
                                                           cpus_milli=8000, memory_bytes=64 << 30)])),
}


def _channel_messages(names: Iterable[str]) -> Schema:
    return {name: _ref(_MESSAGES + name) for name in names}


def _op(action: str, channel: str, messages: Iterable[str], summary: str, description: str = "",
        tags: Iterable[str] = (), reply: Schema | None = None, queue: str = "") -> Schema:
    op: Schema = {"action": action, "channel": _ref(f"#/channels/{channel}"), "summary": summary,
                  "messages": [_ref(f"#/channels/{channel}/messages/{m}") for m in messages]}
    if description:
        op["description"] = description
    if tags:
        op["tags"] = [{"name": t} for t in tags]
    if reply is not None:
        op["reply"] = reply
    if queue:
        op["bindings"] = {"nats": {"queue": queue, "bindingVersion": "0.1.0"}}
    return op


_VERB_NOTES = {
    "submit": " RequestRejected answers a job id already taken (a retry after the duplicate window). An array's "
              "JobAccepted each carry `array_tasks`, how many tasks (so how many JobAccepted) there are.",
    "cancel": " JobStopRequested answers a job that had started: its agent stops it, then reports "
              "JobCancelled for the job with the same `causation_id` `seq:N` (the cancel carried out, not a "
              "second verdict).",
}

# An event a publisher other than submission sends as the effect of a verdict: (publisher, type) -> what it is.
_AFTER_VERDICT = {
    ("agent", "JobCancelled"): "Not a verdict: the end of a job a cancel stopped, after submission's "
                               "JobStopRequested (the verdict), with its `causation_id`: `seq:<n>` of the cancel "
                               "(the PubAck's seq), so a client sees its cancel carried out by the same id.",
}
_FOLLOWS_VERDICT_NOTE = {"JobCancelled": " The agent's JobCancelled, after a JobStopRequested, carries the same."}


def _verdict_text(verb: str) -> str:
    kinds = VERDICTS[verb]
    return (
        "**The answer.** The publish is a request: JetStream (under accounts, the intake in front of it) replies "
        "with a PubAck `{\"stream\": \"HORIZON\", \"seq\": N}` once the input is stored, or with an error (then send "
        "it again, same Nats-Msg-Id). Then exactly one verdict per job the input names arrives on the sender's "
        f"feed (`horizon.evt.>`), published by submission, with `causation_id` `\"seq:N\"`: {', '.join(kinds)} "
        f"(for an array, one per task).{_VERB_NOTES.get(verb, '')} "
        "InputRejected is the "
        "verdict on a malformed input: not JSON, not this verb's event type (`path` `$.type`), a field of the "
        "wrong JSON type or a required field missing (its `path` is the field's JSON path, e.g. "
        "`$.resources.gpus`, `$.job_id`), a header the client may not send, or a body naming another tenant. "
        "Subscribe before publishing, and match on `causation_id` (a verdict may arrive before the PubAck is "
        "read). A verdict's `id` (its Nats-Msg-Id) is deterministic: `submission/JobAccepted/<job_id>`, "
        "`submission/JobRejected/<job_id>`, `submission/<Type>/<job_id>/<N>` for the others (a request's "
        "answer, a job id already taken), `submission/InputRejected/<N>`; `<job_id>` is the event's `job_id` "
        "(`acme:g-1` under accounts), or `_invalid-<digest>` for one unfit for a subject.\n\n"
        f"**How long to wait.** A verdict normally follows the PubAck within milliseconds (one decision round). "
        "Horizon sets no deadline: submission answers every stored input in log order whenever it reads it, "
        f"after a restart too. A client waits `x-verdict-wait-s` ({VERDICT_WAIT_S:g} s, as `horizon submit`), "
        "then asks `horizon.query.job` about the job: the feed is core NATS (at most once), so a verdict "
        "published while the client was not subscribed is not sent again; the log and the queries keep it.\n\n"
        "**Under accounts** (`horizon up --auth`, `deploy/nats/auth.conf`) a tenant publishes on its own "
        "`horizon.in.<tenant>.<verb>` as here; the intake stores the input with its Nats-Msg-Id namespaced as "
        "`in/<tenant>/<id>`, and the job ids it names appear in events as `<tenant>:<id>`."
    )


class _Parts:
    """The document's channels, operations and messages, filled step by step in the order they are listed."""

    def __init__(self) -> None:
        self.channels: Schema = {}
        self.operations: Schema = {}
        self.messages: Schema = {}


def _pub_ack_reply() -> Schema:
    """An input operation's reply: the PubAck, or the error it got instead."""
    return {"channel": _ref("#/channels/pubAck"),
            "messages": [_ref("#/channels/pubAck/messages/PubAck"), _ref("#/channels/pubAck/messages/PubError")]}


def _verdict_index() -> dict[str, list[str]]:
    """Event type -> the verbs whose verdict it may be (``VERDICTS`` turned round)."""
    verdict_of: dict[str, list[str]] = {}
    for verb, kinds in VERDICTS.items():
        for kind in kinds:
            verdict_of.setdefault(kind, []).append(verb)
    return verdict_of


def _client_inputs(parts: _Parts) -> None:
    """horizon.in.<tenant>.<verb>: one event type each, answered by a PubAck and then a verdict."""
    for verb, cls in subjects.VERBS.items():
        name = cls.__struct_config__.tag  # type: ignore[attr-defined]
        key = f"in.{verb}"
        parts.channels[key] = {
            "address": f"{subjects.INPUT_PREFIX}.{{tenant}}.{verb}", "title": f"{verb} (a tenant's input)",
            "description": f"A tenant's `{verb}`: only {name} is taken here (stored in the HORIZON stream).",
            "parameters": {"tenant": TENANT.render()}, "messages": _channel_messages([name]),
        }
        parts.operations[key] = _op(
            "receive", key, [name], f"Horizon takes a tenant's {name}", _verdict_text(verb), ["inputs"],
            reply=_pub_ack_reply())
        parts.operations[key]["x-verdicts"] = list(VERDICTS[verb])
        parts.operations[key]["x-verdict-wait-s"] = VERDICT_WAIT_S


def _operator_inputs(parts: _Parts) -> None:
    """horizon.in._admin.<verb>, and the reply inbox where every input's PubAck arrives."""
    for verb, cls in subjects.ADMIN_VERBS.items():
        name = cls.__struct_config__.tag  # type: ignore[attr-defined]
        key = f"in._admin.{verb}"
        parts.channels[key] = {
            "address": f"{subjects.INPUT_PREFIX}.{subjects.ADMIN_TENANT}.{verb}", "title": f"{verb} (an operator's)",
            "description": f"An operator's `{verb}`: only {name} is taken here.",
            "messages": _channel_messages([name]),
        }
        parts.operations[key] = _op(
            "receive", key, [name], f"Horizon takes an operator's {name}",
            "Acknowledged with a PubAck like a tenant's input; the answer (applied, ConfigRejected or "
            "RequestRejected, a node command's Node* event) carries `causation_id` `seq:<n>`. Requests about a "
            "job here are about any tenant's.", ["operators"],
            reply=_pub_ack_reply())
    parts.channels["pubAck"] = {
        "address": None, "title": "the publisher's reply inbox",
        "description": "Where JetStream (or the intake) answers a publish sent as a request: the requester's "
                       "own inbox subject.",
        "messages": {"PubAck": _ref(_MESSAGES + "PubAck"), "PubError": _ref(_MESSAGES + "PubError")},
    }
    parts.messages["PubAck"] = {"name": "PubAck", "title": "PubAck", "summary": "The input is stored at seq.",
                                "contentType": "application/json", "payload": _ref(_SCHEMAS + "PubAck")}
    parts.messages["PubError"] = {"name": "PubError", "title": "PubError", "summary": "The input was not stored.",
                                  "contentType": "application/json", "payload": _ref(_SCHEMAS + "PubError")}


def _decisions(parts: _Parts, verdict_of: Mapping[str, list[str]]) -> None:
    """horizon.evt.<service>.<Type>.<aggregate>: the decisions and reports, per publisher."""
    for name, services in subjects.PUBLISHERS.items():
        for service in services:
            key = f"evt.{service}.{name}"
            parts.channels[key] = {
                "address": f"{subjects.EVENT_PREFIX}.{service}.{name}.{{aggregate}}", "title": f"{name} by {service}",
                "description": f"{name} as {service} publishes it, stored in the HORIZON stream.",
                "parameters": {"aggregate": AGGREGATE.render()}, "messages": _channel_messages([name]),
            }
            text = _AFTER_VERDICT.get((service, name), "")
            if name in verdict_of and service == "submission":
                text = (f"A verdict on a tenant's {' / '.join(verdict_of[name])}: `causation_id` is `seq:<n>`, the "
                        "sequence of the input it answers (its PubAck's `seq`).")
            parts.operations[key] = _op("send", key, [name], f"{service} publishes {name}", text,
                                        ["decisions" if service in subjects.DECISION_SERVICES else "reports"])


def _partition_leaders(parts: _Parts) -> None:
    """A partition leader's decisions (docs/scaling.md): horizon.evt.<service>-<partitions>.<Type>.<aggregate>."""
    partitions = Param("The partitions the leader decides for, sorted and joined by `-` (`gpu`, `a-b`).",
                       "^[A-Za-z0-9_-]{1,128}$", examples=("gpu", "a-b"))
    for name, services in subjects.PUBLISHERS.items():
        for service in services:
            if service not in subjects.PARTITIONED_SERVICES:
                continue
            key = f"evt.{service}-partitions.{name}"
            parts.channels[key] = {
                "address": f"{subjects.EVENT_PREFIX}.{service}-{{partitions}}.{name}.{{aggregate}}",
                "title": f"{name} by a {service} partition leader",
                "description": f"{name} as the {service} leader of some partitions publishes it "
                               f"(`horizon service {service} --partition P`), stored in the HORIZON stream.",
                "parameters": {"partitions": partitions.render(), "aggregate": AGGREGATE.render()},
                "messages": _channel_messages([name]),
            }
            parts.operations[key] = _op("send", key, [name], f"a {service} partition leader publishes {name}", "",
                                        ["decisions"])


def _tenant_feed(parts: _Parts) -> None:
    """What a tenant sees on horizon.evt.> under accounts: its jobs' events and its verdicts."""
    feed_services = sorted({s for name in TENANT_FEED_TYPES for s in subjects.PUBLISHERS[name]})
    parts.channels["tenantFeed"] = {
        "address": "horizon.tenant.{tenant}.evt.{service}.{eventType}.{aggregate}",
        "title": "a tenant's feed",
        "description": (
            "The live events about a tenant's jobs, and the verdicts on its inputs, copied from the log by the "
            "projections (core NATS, not stored; the log and the queries stay the truth). A tenant's account "
            "imports this as `horizon.evt.{service}.{eventType}.{aggregate}`: a tenant subscribes to "
            "`horizon.evt.>` and sees its own jobs' events and nothing else. Without accounts (plain "
            "`horizon up`) `horizon.evt.>` carries every event directly."),
        "parameters": {"tenant": TENANT.render(),
                       "service": Param("The publishing service.", enum=tuple(feed_services)).render(),
                       "eventType": Param("The event type.", enum=TENANT_FEED_TYPES).render(),
                       "aggregate": AGGREGATE.render()},
        "messages": _channel_messages(TENANT_FEED_TYPES),
    }
    parts.operations["tenantFeed"] = _op(
        "send", "tenantFeed", TENANT_FEED_TYPES, "Horizon tells a tenant about its jobs",
        "Subscribe before you publish. A job's story: JobAccepted, then (per attempt) JobScheduled, JobStarted, "
        "and one of JobSucceeded, JobFailed (JobRequeued may follow), JobPreempted (requeued), JobCancelled; or "
        "JobUnschedulable, JobDependencyNeverSatisfied, JobRejected. Under accounts the job ids are "
        "`<tenant>:<id>`.", ["inputs"])


def _heartbeats(parts: _Parts) -> None:
    """horizon.hb.<node>: an agent's heartbeat, core NATS."""
    parts.channels["hb"] = {"address": "horizon.hb.{node}", "title": "heartbeats",
                            "description": "An agent's heartbeat for its node, core NATS, not stored: inventory "
                                           "records only NodeLost when they stop and NodeReady when they come back.",
                            "parameters": {"node": NODE.render()},
                            "messages": {"Heartbeat": _ref(_MESSAGES + "Heartbeat")}}
    parts.messages["Heartbeat"] = {"name": "Heartbeat", "title": "Heartbeat",
                                   "summary": "An empty message, every second.",
                                   "payload": {"type": "string", "maxLength": 0, "description": "Empty."}}
    parts.operations["hb"] = _op("send", "hb", ["Heartbeat"], "A node's agent says it is alive", tags=["reports"])


def _served(parts: _Parts, served: Iterable[Served]) -> None:
    """What the caller serves by request/reply: the queries, validation, job output."""
    for s in served:
        req, rep = f"{s.key}.request", f"{s.key}.reply"
        parts.channels[s.key] = {"address": s.address, "title": s.summary, "description": s.description,
                                 "messages": {req: _ref(_MESSAGES + req)}}
        if s.parameters:
            parts.channels[s.key]["parameters"] = {n: p.render() for n, p in s.parameters.items()}
        parts.channels[rep] = {"address": None, "title": f"reply to {s.address}",
                               "description": "The requester's own inbox subject.",
                               "messages": {rep: _ref(_MESSAGES + rep)}}
        parts.messages[req] = {"name": req, "title": f"{s.key} request", "contentType": "application/json",
                               "payload": s.request}
        parts.messages[rep] = {"name": rep, "title": f"{s.key} reply", "contentType": "application/json",
                               "payload": s.reply}
        parts.operations[s.key] = _op("receive", s.key, [req], s.summary, s.description, s.tags, queue=s.queue,
                                      reply={"channel": _ref(f"#/channels/{rep}"),
                                             "messages": [_ref(f"#/channels/{rep}/messages/{rep}")]})


def _sent(parts: _Parts, sent: Iterable[Sent]) -> None:
    """What the caller sends outside the log: the dead letters."""
    for t in sent:
        parts.channels[t.key] = {"address": t.address, "title": t.summary, "description": t.description,
                                 "messages": {t.key: _ref(_MESSAGES + t.key)}}
        if t.parameters:
            parts.channels[t.key]["parameters"] = {n: p.render() for n, p in t.parameters.items()}
        parts.messages[t.key] = {"name": t.key, "title": t.summary, "contentType": t.content_type,
                                 "payload": t.payload}
        if t.headers is not None:
            parts.messages[t.key]["headers"] = t.headers
        parts.operations[t.key] = _op("send", t.key, [t.key], t.summary, tags=t.tags)


def document(
    version: str,
    *,
    served: Iterable[Served] = (),
    sent: Iterable[Sent] = (),
    input_header_names: Iterable[str] = ("traceparent", "tracestate"),
    server_host: str = "127.0.0.1:4222",
) -> Schema:
    """The AsyncAPI 3.0.0 document, as JSON-ready builtins."""
    parts = _Parts()
    verdict_of = _verdict_index()
    # 1. client inputs, 2. operator inputs (and the PubAck inbox), 3. decisions and reports, 3b. a partition
    # leader's, 4. the tenant feed, 5. heartbeats, 6. what the caller serves and sends
    _client_inputs(parts)
    _operator_inputs(parts)
    _decisions(parts, verdict_of)
    _partition_leaders(parts)
    _tenant_feed(parts)
    _heartbeats(parts)
    _served(parts, served)
    _sent(parts, sent)
    # 7. the payloads' schemas and the event messages
    schemas = payload_schemas(_SCHEMAS + "{name}")
    schemas.update({"InputHeaders": input_headers(input_header_names), "EventHeaders": EVENT_HEADERS,
                    "PubAck": PUBACK, "PubError": PUB_ERROR})
    for name in EVENT_TYPES:
        parts.messages[name] = _event_message(name, verdict_of)
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {"title": "Horizon", "version": version, "description": _INFO,
                 "license": {"name": "Apache-2.0"},
                 "tags": [{"name": n, "description": d} for n, d in _TAGS.items()]},
        "defaultContentType": "application/json",
        "servers": _servers(server_host),
        "channels": parts.channels,
        "operations": parts.operations,
        "components": {"schemas": schemas, "messages": parts.messages, "securitySchemes": dict(SECURITY_SCHEMES)},
    }


def _servers(host: str) -> Schema:
    """The three ways a client meets the server: plain, under accounts, under TLS (``SECURITY_SCHEMES``)."""
    return {
        "local": {"host": host, "protocol": "nats", "description": (
            "`horizon up`'s bundled nats-server (`--port` changes the port), without accounts: every client "
            "is trusted, connects with no credentials and may publish and subscribe anything.")},
        "accounts": {"host": host, "protocol": "nats", "description": (
            "`horizon up --auth` (or `deploy/nats/auth.conf`): a tenant connects with the URL `horizon tenant "
            "add NAME --json` prints, its user and password (`tenantPassword`); under `--auth --tls` with its "
            "certificate too (`mutualTls`: AsyncAPI lists alternatives, and there both are required)."),
            "security": [_ref("#/components/securitySchemes/tenantPassword")]},
        "tls": {"host": host, "protocol": "nats", "description": (
            "`horizon up --tls`: TLS required (`tls://host:port`), with a client certificate of the cluster's "
            "CA; under `--auth --tls` also the tenant's user and password."),
            "security": [_ref("#/components/securitySchemes/mutualTls")]},
    }


_TAGS = {
    "inputs": "What a tenant publishes, and what it sees of the answers.",
    "operators": "Operators' inputs and signals.",
    "decisions": "The services' decisions: each a pure function of the log up to its basis_seq.",
    "reports": "Observations: agents' reports, heartbeats, the clock.",
    "queries": "Request/reply over the read models and the services, not stored.",
}

_INFO = """\
Horizon is a cluster job scheduler on a NATS JetStream log. Every fact is an event: JSON on the \
subjects below, one JSON Schema per event type (the `type` field selects it; unknown fields are \
ignored; a field left out takes its default). This document is generated from the code \
(`horizon schema --asyncapi`); the operations are Horizon's, so a client does the opposite: it \
*sends* where Horizon receives.

**Submitting and waiting for the verdict.** Subscribe to your feed (`horizon.evt.>`), then publish a \
JobSubmitted on `horizon.in.<tenant>.submit` as a request (a JetStream publish) with the header \
`Nats-Msg-Id: <job_id>`. The reply is a PubAck `{"stream": "HORIZON", "seq": N}`. Exactly one verdict \
follows whose `causation_id` is `"seq:N"`: JobAccepted (one per task of an array, each with `array_tasks`, \
how many) or JobRejected (`field` and `reason`), RequestRejected (the job id is taken), or InputRejected \
for a malformed input (its `path` names the JSON path). Wait for it `x-verdict-wait-s` seconds (each \
input operation says), then ask `horizon.query.job`. Then the job's decisions follow on the same feed, \
with `job_id` (under accounts `<tenant>:<job_id>`): JobScheduled, JobStarted, JobSucceeded or JobFailed, \
and so on. Requests (cancel, hold, release, update) work the same way; a cancel of a started job is \
answered JobStopRequested, and the agent's JobCancelled that ends the job carries the same `causation_id`. \
A verdict's own `id` is deterministic, and never the `id` the client wrote: the client's `id`, if any, \
is not echoed; match on `causation_id`.

**Connecting.** Without accounts (server `local`) anyone connects. Under accounts (server `accounts`, \
`horizon up --auth`) a tenant is a user and password of its own (`tenantPassword`), and sees only its own \
jobs; under `--tls` (server `tls`) the client also presents a certificate of the cluster's CA \
(`mutualTls`). Reference: docs/tenants.md.

**Conventions.** Ids and tenants are subject tokens: 1 to 128 of `[A-Za-z0-9_-]` (a tenant does not \
start with `_`). `*_s` fields are seconds, `*_ts` seconds since the Unix epoch, `*_bytes` bytes, \
`cpus_milli` thousandths of a core, `*_seq` sequences of the `HORIZON` stream. Memory strings: `512m`, \
`8g` (binary, as Slurm), `16Gi` (binary), `16GB` (decimal). The trusted time of an input is the one \
JetStream stored, not its `ts`.

**Versions.** `v` is the schema version of a type (absent: the current one). Older versions are \
upgraded on read, a newer one is refused; new fields always have defaults. \
Reference: docs/events.md.
"""
