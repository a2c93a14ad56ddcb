"""The whole published contract: ``events/asyncapi.py``'s document with the subjects served outside
the log, as the modules that serve them define them (``horizon schema --asyncapi``).

``events`` imports nothing of ours, so what only the upper layers know comes from here: the query
views of the read models (``projections/jobs.py``, ``projections/standing.py``,
``projections/scheduling.py``), submission's validation and intake, the agents' output files
(``services/nodes/agent/logs.py``) and the dead letters (``services/runtime/log.py``). Each is read from
its module's own constants: a view's request fields from its query method's signature or its filter
table, its rows from the SQLite table that holds them (the column types of its ``CREATE TABLE``),
queue groups and limits from where they are used. What only the code's control flow says (which
columns come back as booleans, as JSON) is written here once, and tests/contract/test_asyncapi.py asks every
view of a running ``horizon up`` and validates its answers against this.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from importlib import metadata
from typing import Any

import msgspec

from events import subjects
from events import catalogue as c
from events.asyncapi import document
from events.vocabulary import UNKNOWN_PARTITION
from events.transport import NODE, TENANT, Param, Served, Sent
from events.payloads import TOKEN_PATTERN
from projections import job_queries, job_rows
from projections import jobs as jobs_view
from projections import scheduling as scheduling_view
from projections import scheduling_reports
from projections import standing
from projections.paging import Listing
from services.nodes.agent import logs
from services.domain.protocol import MSG_ID
from services.front.client.accounts import TENANT_VIEWS  # what a tenant's account imports as horizon.query.<view>
from services.domain.steps import STEP_STATES
from services.runtime.log import DLQ_ERROR, DLQ_SEQ, DLQ_SUBJECT
from services.submission import intake
from services.submission import validator_pool as validation
from services.submission.intake_rules import KEPT_HEADERS

__all__ = ["asyncapi_document", "served", "view_reply_schemas"]

Schema = dict[str, Any]
_SCHEMAS = "#/components/schemas/"
_SQL_TYPES = {"TEXT": "string", "INTEGER": "integer", "REAL": "number", "BLOB": "string"}
_QUEUE_GROUP = "projections"  # the read models' responders (projections/jobs.py, scheduling.py)


def _version() -> str:
    try:
        return metadata.version("horizon-scheduler")
    except metadata.PackageNotFoundError:  # run from a checkout that was not installed
        return "0.0.0"


def asyncapi_document() -> Schema:
    """The AsyncAPI 3.0.0 document of this Horizon."""
    return document(_version(), served=served(), sent=[_dead_letters()], input_header_names=KEPT_HEADERS)


# --------------------------------------------------------------------------
# Rows, from the tables that hold them
# --------------------------------------------------------------------------


def _table(sql: str, table: str) -> dict[str, tuple[str, bool]]:
    """``CREATE TABLE table (...)`` of ``sql``: column -> (JSON type, nullable)."""
    match = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n?\);", sql, re.S)
    if match is None:
        raise KeyError(f"no table {table!r}")
    out: dict[str, tuple[str, bool]] = {}
    for part in re.split(r",(?![^(]*\))", match.group(1)):
        words = part.split()
        if len(words) >= 2 and words[1] in _SQL_TYPES:
            out[words[0]] = (_SQL_TYPES[words[1]], "NOT NULL" not in part and "PRIMARY KEY" not in part)
    return out


def _row(sql: str, table: str, columns: list[str], *, json: dict[str, Schema] | None = None,
         booleans: tuple[str, ...] = (), extra: dict[str, Schema] | None = None) -> Schema:
    """One row of ``table`` as a view answers it: ``columns`` typed by the table, ``json`` columns
    decoded (with their schema), ``booleans`` as true/false, ``extra`` fields the view adds."""
    types = _table(sql, table)
    props: Schema = {}
    for col in columns:
        if json and col in json:
            props[col] = json[col]
            continue
        json_type, nullable = types[col]
        if col in booleans:
            json_type = "boolean"
        props[col] = {"type": [json_type, "null"] if nullable else json_type}
        if col.endswith("_ts"):
            props[col]["description"] = "Seconds since the Unix epoch."
        elif col.endswith("_s"):
            props[col]["description"] = "Seconds."
        elif col.endswith("_bytes"):
            props[col]["description"] = "Bytes."
        elif col.endswith("_milli"):
            props[col]["description"] = "Thousandths of a core."
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": [c for c in columns if c in props]}


def _any(description: str) -> Schema:
    return {"description": description}


_NEXT: Schema = {"type": ["object", "null"], "description": (
    "The fields to merge into the same request for the next page (`offset`, and `after` for a listing paged by "
    "a key that never changes); `null` on the last page."), "properties": {
        "offset": {"type": "integer", "minimum": 0}, "after": {"type": ["integer", "null"]}}}


def _paging(listing: Listing) -> Schema:
    """The paging fields of a listing (``projections/paging.py``); an answer is cut to fit one message."""
    return {
        listing.total: {"type": "integer", "minimum": 0, "description": "How many rows the listing holds."},
        listing.offset: {"type": "integer", "minimum": 0, "description": "The position of this page's first row."},
        listing.next_offset: {"type": ["integer", "null"], "minimum": 0,
                              "description": "Where the next page starts; `null` when this page ends the listing."},
    }


def _listing(key: str, row: Schema, *, extra: dict[str, Schema] | None = None) -> Schema:
    listing = Listing(key)
    props: Schema = {
        key: {"type": "array", "items": row},
        **_paging(listing),
        "next": _NEXT,
        "last_seq": {"type": "integer", "minimum": 0, "description": "The log position the answer shows."},
    }
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": [key, listing.total, "last_seq"]}


_ERROR: Schema = {"type": "object", "required": ["error"], "properties": {
    "error": {"type": "string", "description": "Why the request was not answered (a bad field, an unknown "
                                               "filter, an answer too large for one message)."}}}


def _or_error(schema: Schema) -> Schema:
    return {"anyOf": [schema, _ERROR]}


# A job row and its attempts name the same things alike: the job by its id (for a tenant, the id it
# gave), `node` the nodes comma-separated, `nodes` a count (projections/job_rows.py attempt_answer).
_JOB_ID: Schema = {"type": "string", "description": "The job's id: for a tenant's query the id it gave (`g-1`), "
                   "for an operator's the log's key (`acme:g-1` under accounts)."}


# A job row's number (services/domain/job_numbers.py), as Slurm's commands show it too.
_NUMBERS: dict[str, Schema] = {
    "number": {"type": ["integer", "null"], "minimum": 1, "description": "Its number, Slurm's job id (`4213`; an "
               "array task's own); `null` for a job from before numbers."},
    "slurm_id": {"type": ["string", "null"], "description": "The id Slurm's commands show: `4213`, or `4213_7` for "
                 "task 7 of array 4213 (an operator's view: `acme:4213` for a tenant's); `null` without a number."},
}


def _attempt_row(jobs_sql: str, allocation: Schema) -> Schema:
    """One of ``horizon.query.job``'s ``attempts``: the table's row in its job row's words."""
    columns = [c for c in job_rows.ATTEMPT_COLUMNS if c not in ("updated_seq", "nodes")]
    row = _row(jobs_sql, "attempts", columns, json={"allocation": allocation}, booleans=("backfilled", "borrowed"),
               extra={"job_id": {**_JOB_ID, "description": _JOB_ID["description"] + " As its job row's."},
                      "node": {"type": ["string", "null"], "description": "The nodes this attempt ran on, "
                               "comma-separated (as the job row's `node`); `null` before it was placed."},
                      "nodes": {"type": "integer", "minimum": 0, "description": "How many nodes this attempt "
                                "held (its `allocation`'s length)."}})
    row["required"] = ["job_id", "attempt", "node", "nodes", *row["required"][2:]]
    return row


# A row of ``horizon.query.licenses`` (``Licenses.report``, services/domain/licenses.py).
_LICENSE_ROW: Schema = {"type": "object", "required": ["name", "total", "used", "free"], "properties": {
    "name": {"type": "string"}, "total": {"type": "integer", "minimum": 0, "description": "How many there are."},
    "used": {"type": "integer", "minimum": 0, "description": "Held by jobs holding resources."},
    "free": {"type": "integer", "minimum": 0}, "reserved": {"type": "integer", "minimum": 0},
    "remote": {"type": "boolean"},
    "defined": {"type": "boolean", "description": "False for one removed while jobs still hold it."}}}


def view_reply_schemas() -> dict[str, Schema]:
    """Each query view's answer (without the ``{"error": ...}`` alternative)."""
    jobs_sql, st_sql = job_rows.SCHEMA, standing.SCHEMA
    allocation = {"type": "array", "items": {"$ref": _SCHEMAS + "NodeAllocation"},
                  "description": "Per node, what the current attempt holds."}
    step_row = _row(jobs_sql, "steps", [c for c in job_rows.STEP_COLUMNS if c not in ("job_id", "updated_seq")],
                    json={"nodes": {"type": "array", "items": {"type": "string"}},
                          "tasks_per_node": {"type": "array", "items": {"type": "integer"}}})
    step_row["properties"]["state"]["enum"] = list(STEP_STATES)
    steps = {"type": "array", "items": step_row, "description": "Its job steps (srun inside the job): "
             "JobStepStarted and JobStepEnded, by attempt and step."}
    job_row = _row(jobs_sql, "jobs", [c for c in job_rows.COLUMNS if c not in ("spec", "class_rank", "number_key")],
                   json={"allocation": allocation},
                   extra={"job_id": _JOB_ID, **_NUMBERS,
                          "node": {"type": ["string", "null"], "description": "The nodes the current attempt holds "
                                   "or last held, comma-separated; `null` before it was placed."},
                          "nodes": {"type": ["integer", "null"], "minimum": 1, "description": "How many nodes it "
                                    "asks for (its gang's, the most of an elastic one)."},
                          "min_nodes": {"type": ["integer", "null"], "minimum": 0, "description": "An elastic "
                                        "gang's least number of nodes (`nodes` its most); 0 for a rigid job."},
                          "steps": {**steps, "description": "With `steps`: the current attempt's job steps."},
                          "spec": {"anyOf": [{"$ref": _SCHEMAS + "JobSpec"}, {"type": "null"}], "description":
                                   "With `specs`: the job's spec (its ids, to a tenant, the ids it gave)."},
                          "qos": {"type": ["string", "null"], "enum": ["guaranteed", "burstable", "best-effort", None],
                                  "description": "Its QoS class, from its requests and limits (docs/jobs.md)."},
                          "cpu_limit_milli": {"type": ["integer", "null"], "description": "Per task, the CPUs (thousandths "
                                              "of a core) it may use beyond its request; 0: the request is the limit."},
                          "memory_limit_bytes": {"type": ["integer", "null"], "description": "Per task, the memory "
                                                 "(bytes) it may use beyond its request; 0: the request is the limit."},
                          "checkpoint_signal": {"type": ["string", "null"], "description": "The signal the job "
                                                "checkpoints on before it is preempted or migrated (`SIGUSR1`); null: "
                                                "none (docs/jobs.md, Checkpoints)."},
                          "limit_signal": {"type": ["object", "null"], "description": "A signal sent before its time "
                                           "limit: `signal`, `before_s`, `batch_only` (Slurm's --signal)."}})
    attempt_row = _attempt_row(jobs_sql, allocation)
    event_row = {"type": "object", "required": ["seq", "type"], "properties": {
        "seq": {"type": "integer"}, "type": {"type": "string"}, "ts": {"type": ["number", "null"]},
        "source": {"type": ["string", "null"]}, "detail": _any("The event's own fields.")}}
    decision_row = _row(jobs_sql, "decisions", list(_table(jobs_sql, "decisions")))
    factors = {"type": ["object", "null"], "additionalProperties": {"type": "object", "properties": {
        "value": {"type": "number"}, "weight": {"type": "number"}, "weighted": {"type": "number"}}},
        "description": "Multifactor priority, factor by factor."}
    reasons = {"type": ["array", "null"], "description": "Placement's latest verdict, filter by filter.",
               "items": {"type": "object", "properties": {"filter": {"type": "string"}, "nodes": {"type": "integer"},
                                                          "reason": {"type": "string"}}}}
    strings = {"type": ["array", "null"], "items": {"type": "string"}}
    queue_row = _row(st_sql, "queue", standing.QUEUE_COLUMNS,
                     json={"factors": factors, "reasons": reasons, "reserved_nodes": strings})
    node_row = _row(st_sql, "nodes", standing.NODE_COLUMNS, booleans=("simulated", "drain_migrate"),
                    json={"gpu_types": strings, "labels": {"type": ["object", "null"]},
                          "taints": {"type": ["array", "null"], "items": {"$ref": _SCHEMAS + "Taint"}},
                          "unhealthy": _any("The node's unhealthy GPUs and why.")},
                    extra={"jobs": {"type": "array", "items": {"type": "string"}, "description": "Jobs on it."}})
    allocation_row = _row(st_sql, "allocations", standing.ALLOCATION_COLUMNS, json={"device_ids": strings})
    usage_row = _row(st_sql, "usage", [c for c in standing.USAGE_COLUMNS if c != "rank"], booleans=("borrowing",),
                     json={"quota": _any("The account's quota (`null` fields: unlimited)."), "tenants": strings})
    history_row = _row(st_sql, "usage_history", list(_table(st_sql, "usage_history")))
    configured = msgspec.json.schema_components([c.PartitionConfigured])[1]["PartitionConfigured"]["properties"]
    partition_row = {"type": "object", "required": ["name", "default", "members", "total_nodes"], "properties": {
        "name": {"type": "string"}, "default": {"type": "boolean", "description": "The default partition."},
        **{name: configured[name] for name in scheduling_reports.PARTITION_FIELDS},
        "members": {**strings, "type": "array", "description": "Its registered nodes, by name."},
        "total_nodes": {"type": "integer", "minimum": 0}}}
    gpu_row = {"type": "object", "required": ["id", "state"], "properties": {
        "id": {"type": "string"}, "type": {"type": "string"}, "numa": {"type": "integer", "description": "Its NUMA node."},
        "interconnect": {"type": "string"},
        "state": {"type": "string", "enum": list(scheduling_reports.GPU_STATES)},
        "job_id": {"type": ["string", "null"], "description": "The job on it (busy), reserving it (reserved) or "
                   "it is held for (held)."},
        "tenant": {"type": ["string", "null"]}, "why": {"type": "string", "description": "Why it is unhealthy."}}}
    gpu_node_row = {"type": "object", "required": ["node", "state", "gpus"], "properties": {
        "node": {"type": "string"}, "state": {"type": "string"}, "simulated": {"type": "boolean"},
        "backend": {"type": "string", "description": "The backend that offers it: agent, slurm or kubernetes."},
        "cpus_milli": {"type": "integer"}, "cpus_used_milli": {"type": "integer"},
        "memory_bytes": {"type": "integer"}, "memory_used_bytes": {"type": "integer"},
        "held_for": strings, "gpus": {"type": "array", "items": gpu_row}}}
    return {
        "jobs": _listing("jobs", job_row),
        "job": {"type": "object", "required": ["job", "events", "attempts", "last_seq"], "properties": {
            "job": {"anyOf": [job_row, {"type": "null"}], "description": "`null`: no such job (for a tenant: "
                    "none of its own)."},
            "events": {"type": "array", "items": event_row, "description": "Its history, in log order."},
            "attempts": {"type": "array", "items": attempt_row}, "steps": steps, "last_seq": {"type": "integer"},
            **_paging(job_queries.EVENTS), "next": _NEXT}},
        "decisions": _listing("decisions", decision_row),
        "queue": _listing("jobs", queue_row, extra={"now": {"type": ["number", "null"]},
                                                    "policy": {"type": ["string", "null"]}}),
        "nodes": _listing("nodes", node_row),
        "allocations": _listing("allocations", allocation_row),
        "usage": _listing("rows", usage_row, extra={
            "now": {"type": ["number", "null"]}, "half_life_s": {"type": ["number", "null"]},
            "weights": {"type": "object"},
            "history": {"type": "array", "items": history_row, "description": "With `history`: each account's "
                        "standing at each hour boundary of log time."},
            **_paging(scheduling_view._USAGE_HISTORY)}),
        "priority": {"type": "object", "required": ["policy", "now", "last_seq"], "properties": {
            "policy": {"type": "string"}, "now": {"type": "number"}, "last_seq": {"type": "integer"},
            "queued": {"type": "integer"}, "jobs": {"type": "array", "items": {"type": "object"}},
            "job_id": {"type": "string"}, "position": {"type": ["integer", "null"]},
            "factors": {"type": "array", "items": {"type": "object"}}}},
        "preempt": {"type": "object", "properties": {
            "job_id": {"type": "string"}, "victims": {"type": "array", "items": {"type": "object"}},
            "shrinks": {"type": "array", "items": {"type": "object"},
                        "description": "Elastic jobs that would give back nodes instead of anyone being stopped "
                                       "(job_id, account, nodes, gives_back, why); then `victims` is empty."},
            "nodes": {"type": "array"}, "cost": {"type": "object"}}},
        "partitions": _listing("partitions", partition_row, extra={
            "default": {"type": ["string", "null"], "description": "The default partition, if any."},
            "unknown": {"type": "string", "enum": list(UNKNOWN_PARTITION),
                        "description": "What a submission naming a partition not defined gets."}}),
        "gpus": _listing("nodes", gpu_node_row, extra={
            "counts": {"type": "object", "additionalProperties": {"type": "integer"},
                       "description": "GPUs by state over the cluster (horizon.gpus.state)."},
            "queued": {"type": "integer", "description": "Pending jobs."}, "now": {"type": ["number", "null"]}}),
        "licenses": _listing("licenses", _LICENSE_ROW),
        "config": {"type": "object", "required": ["seen", "rejected", "last_seq"], "properties": {
            "seen": {"type": "boolean", "description": "Whether the input at `seq` has been folded."},
            "rejected": {"type": ["string", "null"], "description": "Why it was not applied, or `null`."},
            "last_seq": {"type": "integer"}}},
    }


# --------------------------------------------------------------------------
# Requests, from the methods and filter tables that read them
# --------------------------------------------------------------------------


def _from_signature(method: Callable[..., Any], *, skip: tuple[str, ...] = (), required: tuple[str, ...] = ()
                    ) -> Schema:
    """A request object whose fields are ``method``'s keyword parameters, with their types and defaults."""
    hints = typing.get_type_hints(method)
    fields: list[Any] = []
    for name, param in inspect.signature(method).parameters.items():
        if name == "self" or name in skip:
            continue
        if param.default is inspect.Parameter.empty or name in required:
            fields.append((name, hints[name]))
        else:
            fields.append((name, hints[name], param.default))
    struct = msgspec.defstruct("Request", fields, kw_only=True)
    schema = msgspec.json.schema(struct)
    body: Schema = schema["$defs"]["Request"]
    body.pop("title", None)
    return body


def _filters(table: dict[str, str], *, extra: Schema | None = None) -> Schema:
    one = {"type": ["string", "number"]}
    props: Schema = {key: {"anyOf": [one, {"type": "array", "items": one}],
                           "description": "A value, or a list of values (any of them)."} for key in table}
    for key in standing.PAGING:
        props[key] = {"type": "integer", "minimum": 0}
    props["limit"]["maximum"] = standing.MAX_LIMIT
    props.update(extra or {})
    return {"type": "object", "properties": props, "additionalProperties": False}


def _request_schemas() -> dict[str, Schema]:
    jobs = _from_signature(jobs_view.JobsProjection.query_jobs)
    jobs["properties"]["states"]["description"] = "Job states, e.g. PENDING, RUNNING (any case)."
    jobs["properties"]["order"]["enum"] = ["submit", "queue"]
    jobs["additionalProperties"] = False
    job = _from_signature(jobs_view.JobsProjection.query_job, skip=("tenant",))
    decisions = _from_signature(jobs_view.JobsProjection.query_decisions)
    decisions["additionalProperties"] = False
    history = {"history": {"type": "boolean"}, "from_ts": {"type": "number"}, "to_ts": {"type": "number"}}
    assert tuple(history) == standing.HISTORY_KEYS
    return {
        "jobs": jobs,
        "job": job,
        "decisions": decisions,
        "queue": _filters(standing.QUEUE_FILTERS),
        "nodes": _filters(standing.NODE_FILTERS, extra={"gpu_type": {"type": "string", "description": "One GPU "
                                                                                                       "model."}}),
        "allocations": _filters(standing.ALLOCATION_FILTERS),
        "usage": _filters(standing.USAGE_FILTERS, extra={"tenant": {"type": "string"}, **history}),
        "priority": {"type": "object", "properties": {"job_id": {"type": "string"}, "limit": {"type": "integer"},
                                                      "offset": {"type": "integer"}}},
        "preempt": {"type": "object", "required": ["job_id"], "properties": {"job_id": {"type": "string"}}},
        "partitions": {"type": "object", "additionalProperties": False, "properties": {
            "name": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                     "description": "One partition, or a list of them."},
            "limit": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0}}},
        "licenses": {"type": "object", "additionalProperties": False, "properties": {
            "name": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                     "description": "One license, or a list of them."},
            "limit": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0}}},
        "config": {"type": "object", "required": ["seq"], "properties": {"seq": {"type": "integer", "minimum": 1}}},
        "gpus": {"type": "object", "additionalProperties": False, "properties": {
            "node": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                     "description": "One node, or a list of them."},
            "limit": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0}}},
    }


_VIEWS: dict[str, str] = {
    "jobs": "Every job (filters, pages): state, resources, node and devices, times, exit code.",
    "job": "One job: its row, its events in log order, its attempts, its job steps.",
    "decisions": "Every decision recorded in the log, with its service and basis (the audit table).",
    "queue": "Pending jobs in scheduling order, then held ones: priority, why each waits, reservations.",
    "nodes": "The nodes (like sinfo): state, capacity and use, GPU models, labels, taints, jobs.",
    "allocations": "Every running attempt's share of each node: devices, CPUs, memory.",
    "usage": "Fair-share standing (like sshare): shares, decayed usage, factor, quota; optionally by hour.",
    "priority": "One job's priority factor by factor and why it waits, or the first pending jobs in order.",
    "preempt": "What preempting for a job would do now: the victims and why.",
    "partitions": "The partitions (like sinfo's): configuration, default, registered nodes; the unknown-name rule.",
    "licenses": "The licenses (like scontrol show lic): each one's total, what jobs hold, what is free.",
    "config": "Whether the operator input at a sequence was applied, or why not.",
    "gpus": "Every node's GPUs one by one: model, NUMA node, state, and the job and tenant on each (the dashboard).",
}


def served() -> list[Served]:
    """Every request/reply subject Horizon answers, as the document describes it."""
    requests, replies = _request_schemas(), view_reply_schemas()
    assert set(requests) == set(replies) == set(_VIEWS)
    out: list[Served] = []
    for view, summary in _VIEWS.items():
        address = subjects.query_subject(view)
        out.append(Served(f"query.{view}", address, summary, (
            f"Request/reply on `{address}` (queue group `{_QUEUE_GROUP}`, not stored). The answer is JSON, or "
            "`{\"error\": ...}`." + (f" Under accounts a tenant asks `{address}` and is answered about its own "
                                     "jobs only (its account imports the scoped subject under this name)."
                                     if view in TENANT_VIEWS else " An operator's.")),
            requests[view], _or_error(replies[view]), queue=_QUEUE_GROUP))
        if view in TENANT_VIEWS:
            out.append(Served(
                f"query.{view}.tenant", f"{address}.{{tenant}}", f"{summary} About one tenant's jobs.",
                f"`{address}` about the tenant's jobs only; what a tenant's account imports as `{address}`.",
                requests[view], _or_error(replies[view]), parameters={"tenant": TENANT}, queue=_QUEUE_GROUP))
    out.append(_validate())
    out.extend(_logs())
    out.append(_steps())
    out.append(_intake())
    return out


def _validate() -> Served:
    verdict = {"type": "object", "required": ["ok"], "properties": {
        "ok": {"type": "boolean"}, "jobs": {"type": "integer", "description": "How many jobs it would make."},
        "partition": {"type": "string", "description": "The partition it would run in (empty: none is defined)."},
        "warnings": {"type": "array", "items": {"type": "string"},
                     "description": "What its JobAccepted would warn of (a partition name replaced by the "
                                    "default one)."},
        "field": {"type": "string"}, "reason": {"type": "string"},
        "basis_seq": {"type": "integer", "description": "The log position the instance judged at."},
        "by": {"type": "string", "description": "Which submission instance answered."}}}
    return Served(
        "validate", f"{validation.VALIDATE_PREFIX}.{{tenant}}", "Would this JobSubmitted be accepted?",
        "Advice, not a decision: a submission instance judges the body with the rules and limits it decides "
        "with, against what it has folded; nothing is stored (`horizon submit --check`). "
        "The answer: `{\"ok\": true, \"jobs\": N, \"partition\", \"warnings\"}` or `{\"ok\": false, \"field\", \"reason\"}`.",
        {"$ref": _SCHEMAS + "JobSubmitted"}, verdict, parameters={"tenant": TENANT}, queue=validation.QUEUE_GROUP,
        tags=("inputs",))


def _logs() -> list[Served]:
    request = {"type": "object", "required": ["job_id"], "properties": {
        "job_id": {"type": "string"}, "attempt": {"type": "integer", "minimum": 0,
                                                  "description": "0 or absent: the latest this node ran."},
        "stream": {"type": "string", "enum": list(logs.STREAMS), "default": "stdout"},
        "offset": {"type": "integer", "description": "Bytes from the start; negative: from the end."},
        "limit": {"type": "integer", "minimum": 0, "maximum": logs.MAX_CHUNK}}}
    chunk = {"type": "object", "required": ["job_id", "attempt", "size", "offset", "data"], "properties": {
        "job_id": {"type": "string"}, "attempt": {"type": "integer"}, "path": {"type": "string"},
        "size": {"type": "integer", "description": "The file's size when read, bytes."},
        "offset": {"type": "integer", "description": "Where `data` starts."},
        "data": {"type": "string", "contentEncoding": "base64", "description": "The bytes read, base64."}}}
    text = ("A chunk of an attempt's output file, served by the agent of the node that ran it (core NATS, "
            f"not stored); at most {logs.MAX_CHUNK:,} bytes a reply: ask again from `offset` + the bytes read. "
            "`horizon logs` reads this.")
    node = {"node": NODE}
    return [
        Served("logs", "horizon.logs.{node}", "A job's output, from its node (an operator's)", text, request,
               _or_error(chunk), parameters=node, tags=("operators",)),
        Served("logs.tenant", "horizon.logs.{node}.{tenant}", "A job's output, for its tenant",
               text + " Answered only about the tenant's own jobs.", request, _or_error(chunk),
               parameters={**node, "tenant": TENANT}, tags=("inputs",)),
    ]


def _steps() -> Served:
    request = {"type": "object", "required": ["op", "job_id", "attempt", "step"], "properties": {
        "op": {"type": "string", "enum": ["launch", "signal", "stop"]},
        "job_id": {"type": "string"}, "attempt": {"type": "integer"}, "step": {"type": "integer"},
        "node": {"type": "string"}, "node_index": {"type": "integer"},
        "layout": _any("The step's layout (services/domain/steps.py StepLayout.to_json)."),
        "argv": {"type": "array", "items": {"type": "string"}}, "env": {"type": "object"}, "cwd": {"type": "string"},
        "io": {"type": "string", "description": "`horizon.step.io.<token>`: where the share's output and ends go, "
                                                "as requests `{\"out\": [[rank, fd, base64]], \"exited\": "
                                                "[[rank, code, error]]}` answered `{\"ok\": true}` or "
                                                "`{\"stop\": true}`."},
        "signal": {"type": "integer"}, "grace_s": {"type": "number"}}}
    reply = {"type": "object", "properties": {"ok": {"type": "boolean"}, "error": {"type": "string"}}}
    return Served(
        "step", "horizon.step.{node}", "A node's share of a job step, between agents",
        "The batch node's agent asks the agent of another node of the job to run, signal or stop that node's "
        "tasks of a job step (srun inside the job); the node's agent checks in its own view of the log that the "
        "attempt holds the node. Agents only (services/nodes/agent/steps.py).",
        request, reply, parameters={"node": NODE}, tags=("operators",))


def _intake() -> Served:
    events = [{"$ref": _SCHEMAS + cls.__struct_config__.tag} for cls in subjects.VERBS.values()]  # type: ignore[attr-defined]
    return Served(
        "intake", f"{subjects.INTAKE_PREFIX}.{{tenant}}.{{verb}}", "The intake: a tenant's input under accounts",
        "Under accounts a tenant's `horizon.in.<tenant>.<verb>` is this subject (its account imports it under that "
        "name): any submission instance stores the body as sent on `horizon.in.<tenant>.<verb>`, keeping only "
        "Nats-Msg-Id (as `in/<tenant>/<id>`) and the trace context, and replies with the stream's PubAck, or an "
        "error (send again, same Nats-Msg-Id). A tenant never addresses it by this name.",
        {"anyOf": events}, {"anyOf": [{"$ref": _SCHEMAS + "PubAck"}, {"$ref": _SCHEMAS + "PubError"}]},
        parameters={"tenant": TENANT, "verb": Param("The verb.", enum=tuple(subjects.VERBS))},
        queue=intake.QUEUE_GROUP, tags=("operators",))


def _dead_letters() -> Sent:
    headers = {"type": "object", "required": [DLQ_ERROR, DLQ_SUBJECT, DLQ_SEQ], "properties": {
        DLQ_ERROR: {"type": "string", "maxLength": 1024, "description": "Why it could not be read, one line."},
        DLQ_SUBJECT: {"type": "string", "description": "The subject it was published on."},
        DLQ_SEQ: {"type": "string", "pattern": "^[0-9]+$",
                  "description": "Its sequence in the HORIZON stream (0: never in it)."},
        MSG_ID: {"type": "string", "description": "`dlq/<service>/<original seq>`: dead-lettered once."}}}
    return Sent(
        "dlq", "horizon.dlq.{service}", "Dead letters: messages a service could not read",
        f"Stored in the `{subjects.DLQ_STREAM}` stream, for operators (a tenant cannot read it; a tenant's "
        "malformed input is answered with InputRejected instead). The original stays in the log.",
        {"description": "The original message's bytes, unchanged (not necessarily JSON)."}, headers,
        content_type="application/octet-stream",
        parameters={"service": Param("The service that could not read it.", TOKEN_PATTERN)})
