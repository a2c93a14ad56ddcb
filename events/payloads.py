"""The JSON Schema of every event as published: msgspec's, plus what the annotations cannot carry.

``msgspec.json.schema`` reads the Structs, so it knows the fields, their JSON
types, defaults and which are required. It cannot know what the services
check beyond the type, because the catalogue keeps those fields plain on
purpose (a wrong value decodes and earns a rejection that names it, and old
logs decode forever): the accepted words, the id patterns, the bounds and the
units. Those facts live in the code that checks them (``events/vocabulary.py``,
the catalogue's enumerations, ``events/resources.py``, ``events/arrays.py``,
``events/subjects.py``); this module reads them from there and adds them to
msgspec's schema. Nothing here changes what decodes (msgspec's ``Meta``
constraints would: a value out of bounds would no longer decode into a
rejection that names it, hence a table of checks here, not ``Meta(ge=...)``).

A field's words are not here: they are beside the field in the catalogue
(``Annotated[T, Meta(description=...)]``), and msgspec's schema carries them.
This module puts them after what the field's name says by convention.

``payload_schemas(ref)`` returns every schema by name (the event types and the
value objects inside them), each ``$ref`` written with ``ref`` (e.g.
``"#/components/schemas/{name}"`` for an AsyncAPI document).

The conventions every field follows, stated once in each field's description:
``*_s`` is seconds, ``*_ts`` seconds since the Unix epoch, ``*_bytes`` bytes,
``*_milli`` thousandths of a core, ``*_seq`` a sequence of the ``HORIZON``
stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import msgspec

from events import catalogue as c
from events import subjects
from events import vocabulary as vocab
from events.arrays import ARRAY_PATTERN, MAX_INDEX
from events.catalogue import EVENT_TYPES
from events.resources import GPU_MODEL_PATTERN, MAX_CPUS_MILLI, MAX_MEMORY_BYTES, cpus_pattern, memory_pattern

__all__ = ["payload_schemas", "TOKEN_PATTERN", "TENANT_PATTERN", "JOB_KEY_PATTERN", "INPUT_TYPES", "JOB_ID_FIELDS"]


Schema = dict[str, Any]

# A subject token (a node, a job id as the client writes it): events.subjects' rule, as is.
TOKEN_PATTERN = subjects._TOKEN_RE.pattern
# A tenant: a token that does not start with "_" (reserved for _admin).
TENANT_PATTERN = r"^[A-Za-z0-9-][A-Za-z0-9_-]{0,127}$"
# A job id as events carry it: the client's id, or "<tenant>:<id>" for a tenant's job that came
# through the intake (events.subjects.valid_job_key).
_BARE_TOKEN = TOKEN_PATTERN.removeprefix("^").removesuffix("$")
_BARE_KEY = subjects._KEY_RE.pattern.removeprefix("^").removesuffix("$")
JOB_KEY_PATTERN = f"^(?:{_BARE_TOKEN}|{_BARE_KEY})$"
_TOKEN_OR_EMPTY = r"^(?:[A-Za-z0-9_-]{1,128})?$"

# The event types a client or an operator publishes (horizon.in.<tenant|_admin>.<verb>).
INPUT_TYPES: frozenset[str] = frozenset(
    cls.__struct_config__.tag for cls in (*subjects.VERBS.values(), *subjects.ADMIN_VERBS.values())  # type: ignore[misc]
)
# Outputs whose job_id may be anything the sender wrote (they answer malformed or unknown ids).
_ANY_JOB_ID = frozenset({"JobRejected", "InputRejected", "RequestRejected"})
# Every struct with a job id, and whether it is a client's (a token) or the log's (token or key).
JOB_ID_FIELDS = ("job_id", "for_job")


def _clean(doc: str) -> str:
    """A docstring as Markdown: dedented, ``literal`` -> `literal`."""
    return inspect.cleandoc(doc).replace("``", "`")


def _describe(prop: Schema, text: str) -> None:
    prop["description"] = f"{prop['description']} {text}" if prop.get("description") else text


def _branch(prop: Schema, json_type: str) -> Schema:
    """The branch of ``prop`` (a plain schema or an ``anyOf``) that has ``json_type``."""
    for option in prop.get("anyOf", [prop]):
        if option.get("type") == json_type:
            return option  # type: ignore[no-any-return]
    raise KeyError(f"no {json_type} branch in {prop}")


def _choice(prop: Schema, words: tuple[str, ...] | list[str]) -> None:
    _branch(prop, "string")["enum"] = list(words)


def _pattern(prop: Schema, pattern: str) -> None:
    _branch(prop, "string")["pattern"] = pattern if pattern.startswith("^") else f"^(?:{pattern})$"


def _bounds(prop: Schema, json_type: str, **bounds: float) -> None:
    branch = _branch(prop, json_type)
    for key, value in bounds.items():
        branch[{"minimum": "minimum", "maximum": "maximum", "above": "exclusiveMinimum"}[key]] = value


# --------------------------------------------------------------------------
# By convention: what a field's name says about every event that has it
# --------------------------------------------------------------------------


def _by_name(struct: str, name: str, prop: Schema, *, is_input: bool) -> None:
    if name == "type" and struct in EVENT_TYPES:
        _describe(prop, "The event type: selects the schema (the tagged union's tag).")
    elif name == "v" and struct in EVENT_TYPES:
        version = EVENT_TYPES[struct].VERSION
        _bounds(prop, "integer", minimum=1, maximum=version)
        _describe(prop, f"Schema version of this type; leave it out to mean the current one ({version}). Older "
                  "versions are upgraded on read; a newer one is refused.")
    elif name == "id" and struct in EVENT_TYPES:
        _describe(prop, "This event's id. A service's decision has a deterministic id, also its Nats-Msg-Id; a "
                  "client may leave it empty.")
    elif name == "causation_id":
        _describe(prop, "What caused this event: the triggering decision's id, or `seq:<n>` for an input (its "
                  "sequence in the HORIZON stream). A verdict on a client's input always carries `seq:<n>`, n "
                  "being the seq of the PubAck the client got, whatever `id` the input had (an input's `id` is "
                  "not echoed); so does the agent's JobCancelled that carries out a cancel. `null` on inputs.")
    elif name == "correlation_id":
        _describe(prop, "The job or node this event is about (on outputs also the subject's last token).")
    elif name == "source":
        _describe(prop, "Who published it: a service, `agent/<node>`, or a name the client chooses.")
    elif name in JOB_ID_FIELDS and struct in EVENT_TYPES:
        if is_input:
            _pattern(prop, TOKEN_PATTERN)
            _describe(prop, "The job's id, chosen by the client: 1 to 128 letters, digits, `_` or `-`. Under "
                      "accounts, events carry it as `<tenant>:<id>`.")
        elif struct not in _ANY_JOB_ID:
            _pattern(prop, JOB_KEY_PATTERN)
            _describe(prop, "The job's id as the log knows it: the client's id, or `<tenant>:<id>` for a "
                      "tenant's job that came through the intake (under accounts).")
            if name == "for_job":  # empty for an eviction
                prop["pattern"] = f"^(?:{_BARE_TOKEN}|{_BARE_KEY})?$"
                _describe(prop, "Empty for an eviction.")
        else:
            _describe(prop, "The job id the input named, as written (it may be malformed: this answers it).")
    elif name == "tenant" and struct not in _ANY_JOB_ID:
        _pattern(prop, TENANT_PATTERN)
        _describe(prop, "The tenant: 1 to 128 letters, digits, `_` or `-`, not starting with `_`. In an input "
                  "it must equal the subject's `<tenant>` token.")
    elif name == "node" and prop.get("type") == "string":
        _pattern(prop, _TOKEN_OR_EMPTY if prop.get("default") == "" else TOKEN_PATTERN)
        _describe(prop, "A node name (a subject token)." + (" Empty: none." if prop.get("default") == "" else ""))
    elif name in ("account", "user") and struct in ("JobSubmitted", "JobSpec"):
        _pattern(prop, _TOKEN_OR_EMPTY if name == "user" or struct == "JobSubmitted" else TOKEN_PATTERN)
    elif name.endswith("_ts"):
        _describe(prop, "Seconds since the Unix epoch (UTC), a fraction allowed.")
    elif name.endswith("_s"):
        _describe(prop, "A duration in seconds (a JSON number; no units, no strings such as `2h`).")
    elif name.endswith("_bytes"):
        for option in prop.get("anyOf", [prop]):
            if option.get("type") == "integer":
                option["minimum"] = 0
        _describe(prop, "Bytes.")
    elif name.endswith("_milli"):
        for option in prop.get("anyOf", [prop]):
            if option.get("type") == "integer":
                option["minimum"] = 0
        _describe(prop, "Thousandths of a CPU core (1000 = one core).")
    elif name.endswith("_seq"):
        _bounds(prop, "integer", minimum=0)
        _describe(prop, "A sequence number of the HORIZON stream (0: none).")
    elif name == "attempt":
        _bounds(prop, "integer", minimum=0)
        _describe(prop, "Which run of the job: 1 for the first, one more after each requeue (0: never scheduled).")


# --------------------------------------------------------------------------
# Field by field: what the services check, from the constants they check with
# --------------------------------------------------------------------------

Check = Callable[[Schema], None]
_INT32_MAX = 2**31 - 1


def _enum(words: tuple[str, ...]) -> Check:
    return lambda prop: _choice(prop, words)


def _count(low: int, high: int) -> Check:
    return lambda prop: _bounds(prop, "integer", minimum=low, maximum=high)


def _number(*, above: float | None = None, minimum: float | None = None, maximum: float | None = None) -> Check:
    bounds = {k: v for k, v in (("above", above), ("minimum", minimum), ("maximum", maximum)) if v is not None}
    return lambda prop: _bounds(prop, "number", **bounds)


def _keys(words: tuple[str, ...], *, value_min: float | None = 0, value_max: float | None = None) -> Check:
    """A map whose keys are ``words`` (and whose numbers, if its values are numbers, are within bounds)."""
    def apply(prop: Schema) -> None:
        prop["propertyNames"] = {"enum": list(words)}
        values = prop.get("additionalProperties")
        if isinstance(values, dict) and values.get("type") == "number":
            if value_min is not None:
                values["minimum"] = value_min
            if value_max is not None:
                values["maximum"] = value_max
    return apply


def _licenses(prop: Schema) -> None:
    """A job's licenses: name -> how many (services/domain/licenses.py checks the same)."""
    prop["propertyNames"] = {"pattern": vocab.LICENSE_PATTERN}
    prop["maxProperties"] = vocab.MAX_LICENSES
    prop["additionalProperties"].update(minimum=1, maximum=vocab.MAX_LICENSE_COUNT)


def _matching(regex: str, *, max_length: int | None = None) -> Check:
    def apply(prop: Schema) -> None:
        _pattern(prop, regex)
        if max_length is not None:
            _branch(prop, "string")["maxLength"] = max_length
    return apply


def _memory(*, positive: bool) -> Check:
    """Bytes, or a memory string (``events/resources.py``)."""
    def apply(prop: Schema) -> None:
        _bounds(prop, "integer", minimum=1 if positive else 0, maximum=MAX_MEMORY_BYTES)
        _pattern(prop, memory_pattern(positive=positive))
    return apply


def _cpus(prop: Schema) -> None:
    """Cores, or a string of cores or millicores (``events/resources.py``); 0 only with memory 0 (below)."""
    _bounds(prop, "number", minimum=0, maximum=MAX_CPUS_MILLI // 1000)
    _pattern(prop, cpus_pattern(positive=False))


def _zero(json_type: str, any_pattern: str, positive_pattern: str) -> Schema:
    """A value that is 0: a number at most 0, or a string the parser reads as 0 (one its pattern accepts,
    its positive pattern does not)."""
    return {"anyOf": [{"type": json_type, "maximum": 0},
                      {"type": "string", "pattern": any_pattern, "not": {"pattern": positive_pattern}}]}


def _best_effort_rules() -> dict[str, Schema]:
    """Rules across fields, by struct: a request of no CPUs or no memory is a best-effort job, which requests
    neither (``cpus`` 0 and ``memory`` 0, no GPUs: services/submission/asked.py); ``memory`` 0 alone is
    also Slurm's ``--mem=0`` (``whole_node_memory``)."""
    no_cpus = _zero("number", cpus_pattern(positive=False), cpus_pattern(positive=True))
    no_memory = _zero("integer", memory_pattern(), memory_pattern(positive=True))
    return {
        "ResourceRequest": {"if": {"properties": {"cpus": no_cpus}, "required": ["cpus"]},
                            "then": {"properties": {"memory": no_memory, "gpus": {"maximum": 0}},
                                     "required": ["memory"]}},
        "JobSubmitted": {"if": {"properties": {"resources": {"properties": {"memory": no_memory},
                                                             "required": ["memory"]},
                                               "whole_node_memory": {"const": False}},
                                "required": ["resources"]},
                         "then": {"properties": {"resources": {"properties": {"cpus": no_cpus},
                                                               "required": ["cpus"]}}}},
    }


def _checks() -> dict[tuple[str, str], Check]:
    """(struct, field) -> what the services check of it beyond its JSON type."""
    limits = vocab.Limits()
    nice = vocab.NICE_LIMIT
    classes = c.PRIORITY_CLASSES
    effects_or_any = ("", *c.TAINT_EFFECTS)
    return {
        # what a client submits
        ("JobSubmitted", "name"): lambda p: _branch(p, "string").__setitem__("maxLength", limits.max_name_length),
        ("JobSubmitted", "env"): lambda p: p.__setitem__("maxProperties", limits.max_env_entries),
        ("JobSubmitted", "submit_env"): lambda p: _branch(p, "object").__setitem__("maxProperties",
                                                                                   limits.max_env_entries),
        ("JobSubmitted", "nodes"): _count(1, limits.max_nodes_per_job),
        ("JobSubmitted", "min_nodes"): _count(1, limits.max_nodes_per_job),
        ("JobSubmitted", "min_available"): _count(1, limits.max_nodes_per_job * vocab.MAX_TASKS_PER_NODE),
        ("JobSubmitted", "assembly_timeout_s"): _number(above=0),
        ("JobSubmitted", "tasks_per_node"): _count(1, vocab.MAX_TASKS_PER_NODE),
        ("JobSubmitted", "ntasks"): _count(1, limits.max_nodes_per_job * vocab.MAX_TASKS_PER_NODE),
        ("JobSubmitted", "memory_per_node"): _count(1, MAX_MEMORY_BYTES),
        ("JobSubmitted", "time_limit_s"): _number(minimum=0, maximum=limits.max_time_limit_s),  # 0: none
        ("JobSubmitted", "scheduling_timeout_s"): _number(above=0),
        ("JobSubmitted", "priority_class"): _enum(classes),
        ("JobSubmitted", "nice"): _count(-nice, nice),
        ("JobSubmitted", "restart_policy"): _enum(c.RESTART_POLICIES),
        ("JobSubmitted", "max_retries"): _count(0, vocab.MAX_RETRIES),
        ("JobSubmitted", "min_runtime_s"): _number(minimum=0),
        ("JobSubmitted", "sim_runtime_s"): _number(minimum=0),
        ("JobSubmitted", "array"): _matching(ARRAY_PATTERN),
        ("JobSubmitted", "cwd"): _matching(r"^(?:/[^\x00]*)?$", max_length=vocab.MAX_CWD_LENGTH),
        ("JobSubmitted", "open_mode"): _enum(vocab.OPEN_MODES),
        ("JobSubmitted", "image"): _matching(f"^(?:{vocab.IMAGE_PATTERN})?$"),
        # Slurm's option forms and directives (docs/slurm.md, 'Directives Horizon honours')
        ("JobSubmitted", "gpus_per_node"): _count(0, limits.max_gpus_per_job),
        ("JobSubmitted", "time_min_s"): _number(above=0),
        ("LimitSignal", "before_s"): _number(minimum=0, maximum=65535),
        ("JobSubmitted", "begin_ts"): _number(minimum=0),
        ("JobSubmitted", "licenses"): _licenses,
        ("ResourceRequest", "cpus"): _cpus,
        ("ResourceRequest", "memory"): _memory(positive=False),  # 0 only with cpus 0, or --mem=0 (below)
        ("ResourceRequest", "gpu_memory"): _memory(positive=False),
        ("ResourceRequest", "gpus"): _count(0, limits.max_gpus_per_job),
        ("ResourceRequest", "gpu_type"): _matching(f"^$|{GPU_MODEL_PATTERN}"),
        ("Dependency", "kind"): _enum(c.DEPENDENCY_KINDS),
        ("Dependency", "job_id"): _matching(JOB_KEY_PATTERN),
        ("Toleration", "operator"): _enum(vocab.TOLERATION_OPS),
        ("Toleration", "effect"): _enum(effects_or_any),
        # a client's requests
        ("JobUpdateRequested", "priority_class"): _enum(classes),
        ("JobUpdateRequested", "nice"): _count(-nice, nice),
        # operators
        ("NodeCommandIssued", "action"): _enum(vocab.NODE_ACTIONS),
        ("NodeCommandIssued", "deadline_s"): _number(minimum=0),
        ("NodeCommandIssued", "grace_s"): _number(minimum=0, maximum=vocab.GRACE_PERIOD_MAX_S),
        ("Taint", "key"): _matching(vocab.TAINT_KEY_PATTERN, max_length=vocab.TAINT_KEY_MAX),
        ("Taint", "value"): _matching(vocab.TAINT_VALUE_PATTERN, max_length=vocab.TAINT_VALUE_MAX),
        ("Taint", "effect"): _enum(effects_or_any),
        ("AccountConfigured", "account"): lambda p: _branch(p, "string").update(minLength=1, pattern="^[^/]+$"),
        ("AccountConfigured", "parent"): _matching("^[^/]+$"),
        ("AccountConfigured", "shares"): _number(above=0),
        ("AccountConfigured", "tenants"): lambda p: p["items"].__setitem__("pattern", TENANT_PATTERN),
        ("Quota", "gpus"): _count(0, _INT32_MAX),
        ("Quota", "running_jobs"): _count(0, _INT32_MAX),
        ("Quota", "gpus_by_type"): lambda p: p["additionalProperties"].__setitem__("minimum", 0),
        ("FairShareConfigured", "gpu_weight"): _number(minimum=0),
        ("FairShareConfigured", "cpu_weight"): _number(minimum=0),
        ("FairShareConfigured", "memory_weight"): _number(minimum=0),
        ("FairShareConfigured", "half_life_s"): _number(above=0),
        ("TenantConfigured", "tenant"): _matching(TENANT_PATTERN),
        ("TenantConfigured", "max_inputs_per_s"): _number(minimum=0),
        ("TenantConfigured", "burst"): _count(0, _INT32_MAX),
        ("TenantConfigured", "max_pending_jobs"): _count(0, _INT32_MAX),
        ("TenantConfigured", "max_array_tasks"): _count(0, _INT32_MAX),
        ("TenantConfigured", "max_pending_array_tasks"): _count(0, _INT32_MAX),
        ("PartitionConfigured", "name"): _matching(subjects._PARTITION_RE.pattern),  # test.q too
        ("PartitionConfigured", "state"): _enum(vocab.PARTITION_STATES),
        ("PartitionConfigured", "priority_tier"): _count(0, vocab.PRIORITY_TIER_MAX),
        ("PartitionConfigured", "max_nodes"): _count(1, _INT32_MAX),
        ("PartitionConfigured", "default_mem_per_cpu"): _count(1, MAX_MEMORY_BYTES),
        ("PartitionConfigured", "default_mem_per_gpu"): _count(1, MAX_MEMORY_BYTES),
        ("PartitionConfigured", "max_time_s"): _number(above=0),
        ("PartitionConfigured", "default_time_s"): _number(above=0),
        ("PartitionPolicyConfigured", "unknown"): _enum(vocab.UNKNOWN_PARTITION),
        ("LicenseConfigured", "name"): _matching(vocab.LICENSE_PATTERN),
        ("LicenseConfigured", "count"): _count(0, vocab.MAX_LICENSE_COUNT),
        ("ProfileConfigured", "name"): lambda p: _branch(p, "string").update(minLength=1, maxLength=128),
        ("ProfileConfigured", "backfill"): _enum(vocab.BACKFILL_MODES),
        ("ProfileConfigured", "runtime_estimate"): _enum(vocab.RUNTIME_ESTIMATES),
        ("ProfileConfigured", "weights"): _keys(vocab.SCORE_WEIGHTS),
        ("ProfileConfigured", "reservation_depth"): _count(*vocab.RESERVATION_DEPTH),
        ("PreemptionConfigured", "victims"): _enum(vocab.VICTIM_ORDERS),
        ("PreemptionConfigured", "rules"): lambda p: (
            p.__setitem__("propertyNames", {"enum": list(classes)}),
            p["additionalProperties"]["items"].__setitem__("enum", list(classes))),
        ("PreemptionConfigured", "grace_period_s"): _number(minimum=0, maximum=vocab.GRACE_PERIOD_MAX_S),
        ("PreemptionConfigured", "max_preemptions"): _count(0, _INT32_MAX),
        ("PreemptionConfigured", "per_minute"): _count(0, _INT32_MAX),
        ("PreemptionConfigured", "per_account_per_minute"): _count(0, _INT32_MAX),
        ("PolicyConfigured", "policy"): _enum(vocab.QUEUE_POLICIES),
        ("PolicyConfigured", "weights"): _keys(vocab.POLICY_WEIGHTS),
        ("PolicyConfigured", "qos_boost"): lambda p: p["additionalProperties"].update(minimum=0, maximum=1),
        # the validated job every service reads
        ("JobSpec", "array"): _matching(JOB_KEY_PATTERN),
        ("JobSpec", "array_index"): _count(0, MAX_INDEX),
        ("JobSpec", "licenses"): _licenses,
        # verdicts
        ("JobAccepted", "array_tasks"): _count(0, MAX_INDEX + 1),
        ("InputRejected", "input_seq"): _count(1, 2**63 - 1),
    }


def payload_schemas(ref: str = "#/components/schemas/{name}") -> dict[str, Schema]:
    """Every event type's schema and the value objects' they use, by name, with the conventions and checks above.

    A field's own words (its ``Meta(description=...)`` in the catalogue) come last, after what its name
    says by convention."""
    _, schemas = msgspec.json.schema_components(list(EVENT_TYPES.values()), ref_template=ref)
    checks = _checks()
    for name, schema in schemas.items():
        if schema.get("description"):
            schema["description"] = _clean(schema["description"])
        is_input = name in INPUT_TYPES
        for field, prop in schema.get("properties", {}).items():
            if "$ref" in prop:
                continue
            words = prop.pop("description", "")
            _by_name(name, field, prop, is_input=is_input)
            check = checks.pop((name, field), None)
            if check is not None:
                check(prop)
            if words:
                _describe(prop, words)
    if checks:  # a check of a field the catalogue no longer has
        raise KeyError(f"no such fields in the catalogue: {sorted(checks)}")
    for name, rule in _best_effort_rules().items():
        schemas[name].update(rule)
    return schemas
