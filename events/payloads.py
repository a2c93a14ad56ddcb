"""The JSON Schema of every event as published: msgspec's, plus what the annotations cannot carry.

``msgspec.json.schema`` reads the Structs, so it knows the fields, their JSON
types, defaults and which are required. It cannot know what the services
check beyond the type, because the catalogue keeps those fields plain on
purpose (a wrong value decodes and earns a rejection that names it, and old
logs decode forever): the accepted words, the id patterns, the bounds and the
units. Those facts live in the code that checks them (``events/vocabulary.py``,
the catalogue's enumerations, ``events/resources.py``, ``events/arrays.py``,
``events/subjects.py``); this module reads them from there and adds them to
msgspec's schema. Nothing here changes what decodes.

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

_TL = vocab.TenantLimits()  # the defaults, as the schema states them

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


def _facts() -> dict[tuple[str, str], Callable[[Schema], None]]:
    limits = vocab.Limits()
    nice = vocab.NICE_LIMIT
    memory_forms = (
        "Memory: an integer number of bytes, or a string: a number then a unit in any case, blanks allowed "
        "around and between them: `b` bytes; `k m g t p` binary as in Slurm (`8g` = 8 GiB); `Ki Mi Gi Ti Pi` "
        "binary (`16Gi`); `KB MB GB TB PB` decimal (`16GB` = 16e9 bytes). No other unit (`8 GiB` is refused: "
        "`GiB` is not one). A fraction is rounded up to whole bytes, but a fraction of a byte without a unit "
        f"(`1.5`) is refused. At most {MAX_MEMORY_BYTES} bytes (1 EiB)."
    )

    def memory(positive: bool) -> Callable[[Schema], None]:
        def apply(prop: Schema) -> None:
            _bounds(prop, "integer", minimum=1 if positive else 0, maximum=MAX_MEMORY_BYTES)
            _pattern(prop, memory_pattern(positive=positive))
            _describe(prop, memory_forms + (" More than 0." if positive else ""))
        return apply

    def cpus(prop: Schema) -> None:
        _bounds(prop, "number", above=0, maximum=MAX_CPUS_MILLI // 1000)
        _pattern(prop, cpus_pattern(positive=True))
        _describe(prop, "CPU cores per task: a number (`2`, `0.5`) or a string of cores (`\"2\"`) or millicores "
                  f"(`\"500m\"`, lower-case `m`), more than 0 and at most {MAX_CPUS_MILLI // 1000:,} cores; finer "
                  "than a millicore is rounded up.")

    def choice(words: tuple[str, ...], text: str = "") -> Callable[[Schema], None]:
        def apply(prop: Schema) -> None:
            _choice(prop, words)
            if text:
                _describe(prop, text)
        return apply

    def count(low: int, high: int, text: str = "") -> Callable[[Schema], None]:
        def apply(prop: Schema) -> None:
            _bounds(prop, "integer", minimum=low, maximum=high)
            if text:
                _describe(prop, text)
        return apply

    def number(*, above: float | None = None, minimum: float | None = None, maximum: float | None = None,
                text: str = "") -> Callable[[Schema], None]:
        def apply(prop: Schema) -> None:
            bounds = {k: v for k, v in (("above", above), ("minimum", minimum), ("maximum", maximum)) if v is not None}
            _bounds(prop, "number", **bounds)
            if text:
                _describe(prop, text)
        return apply

    def keys(words: tuple[str, ...], text: str, *, value_min: float | None = 0, value_max: float | None = None
             ) -> Callable[[Schema], None]:
        def apply(prop: Schema) -> None:
            prop["propertyNames"] = {"enum": list(words)}
            values = prop.get("additionalProperties")
            if isinstance(values, dict) and values.get("type") == "number":
                if value_min is not None:
                    values["minimum"] = value_min
                if value_max is not None:
                    values["maximum"] = value_max
            _describe(prop, text)
        return apply

    def pattern(regex: str, text: str = "", *, max_length: int | None = None) -> Callable[[Schema], None]:
        def apply(prop: Schema) -> None:
            _pattern(prop, regex)
            if max_length is not None:
                _branch(prop, "string")["maxLength"] = max_length
            if text:
                _describe(prop, text)
        return apply

    def text(words: str) -> Callable[[Schema], None]:
        return lambda prop: _describe(prop, words)

    classes = c.PRIORITY_CLASSES
    effects_or_any = ("", *c.TAINT_EFFECTS)
    return {
        # what a client submits
        ("JobSubmitted", "account"): text("The fair-share and quota account charged (a token); empty means "
                                          "`default`. Under accounts it must be open to the tenant."),
        ("JobSubmitted", "name"): lambda p: (_branch(p, "string").__setitem__("maxLength", limits.max_name_length),
                                             _describe(p, "A name for people; empty means the job id.")),
        ("JobSubmitted", "command"): text(
            f"The argv to run, one element per argument (no shell); at most {limits.max_command_bytes:,} "
            "characters in all. Required unless the job is simulated (`sim_runtime_s`) or carries a `payload`."),
        ("JobSubmitted", "env"): lambda p: (p.__setitem__("maxProperties", limits.max_env_entries),
                                            _describe(p, "Environment variables of the job's process.")),
        ("JobSubmitted", "payload"): text("Opaque JSON for an external executor; Horizon passes it through."),
        ("JobSubmitted", "nodes"): count(1, limits.max_nodes_per_job, "Nodes of the gang."),
        ("JobSubmitted", "min_nodes"): count(1, limits.max_nodes_per_job, "The least nodes of an elastic gang "
                                             "(Slurm's --nodes MIN-MAX): `nodes` is then its most; it starts at the "
                                             "largest size that fits and grows or shrinks between them."),
        ("JobSubmitted", "min_available"): count(1, limits.max_nodes_per_job * vocab.MAX_TASKS_PER_NODE,
                                                 "The least tasks of an elastic gang (Volcano's minAvailable), "
                                                 "rounded up to whole nodes of tasks_per_node."),
        ("JobSubmitted", "assembly_timeout_s"): number(
            above=0, text="A gang that has not assembled its least size this long after it became pending ends "
                          "JobUnschedulable (reason `assembly timeout: ...`); `null` waits."),
        ("JobSubmitted", "tasks_per_node"): count(1, vocab.MAX_TASKS_PER_NODE, "Tasks on each node; the job "
                                                  "needs nodes x tasks_per_node tasks, placed all at once."),
        ("JobSubmitted", "time_limit_s"): number(
            above=0, maximum=limits.max_time_limit_s,
            text=f"Its run-time limit, also the estimate backfill uses; `null`: the cluster's default "
                 f"({limits.default_time_limit_s:g} s unless configured otherwise)."),
        ("JobSubmitted", "scheduling_timeout_s"): number(
            above=0, text="How long it may wait to start before it ends JobUnschedulable; `null` waits for ever."),
        ("JobSubmitted", "priority_class"): choice(classes, "Its priority class, highest first."),
        ("JobSubmitted", "nice"): count(-nice, nice, "Lowers its priority within the class; only an operator "
                                        "(horizon.in._admin.update) may set it below 0."),
        ("JobSubmitted", "restart_policy"): choice(c.RESTART_POLICIES, "Whether a job that ended is run again."),
        ("JobSubmitted", "max_retries"): count(0, vocab.MAX_RETRIES, "How often its restart policy may requeue it."),
        ("JobSubmitted", "min_runtime_s"): number(minimum=0, text="It is not preempted before it ran this long."),
        ("JobSubmitted", "sim_runtime_s"): number(minimum=0, text="The simulated executor's run time."),
        ("JobSubmitted", "array"): pattern(ARRAY_PATTERN, (
            "Makes it a job array (Slurm's --array): indices and ranges, a range optionally with a step, then "
            f"optionally %N, at most N running at once: `0-99`, `0-99%10`, `1,3,5-7`, `0-15:4`. Indices 0 to "
            f"{MAX_INDEX}, at most {limits.max_array_tasks:,} tasks; task i is the job `<job_id>_<i>`.")),
        ("JobSubmitted", "cwd"): pattern(r"^(?:/[^\x00]*)?$", "Its working directory: an absolute path (or empty: the "
                                         "agent's).", max_length=vocab.MAX_CWD_LENGTH),
        ("JobSubmitted", "stdout"): text("Where its standard output goes: a path relative to cwd, with Slurm's "
                                         "%j %A %a %x %u %N %% patterns; empty: the agent's own file."),
        ("JobSubmitted", "stderr"): text("Where its standard error goes, as stdout; empty with stdout set: into "
                                         "stdout."),
        ("JobSubmitted", "open_mode"): choice(vocab.OPEN_MODES, "What a new attempt does to existing output."),
        ("JobSubmitted", "image"): pattern(f"^(?:{vocab.IMAGE_PATTERN})?$", "A container image to run the "
                                           "command in (Podman on the node); empty: none."),
        ("JobSubmitted", "partitions"): text("Slurm's `-p a,b`: the partitions it may run in; the first that can "
                                             "run it is taken. Empty: the default partition. A name the cluster "
                                             "does not define runs in the default one with a warning, or is "
                                             "refused (PartitionPolicyConfigured)."),
        ("JobSubmitted", "checkpoint_signal"): text("The signal asking the job to checkpoint before a "
                                                    "preemption, e.g. `SIGUSR1`; `null`: it does not."),
        # Slurm's option forms and directives (docs/slurm.md, 'Directives Horizon honours')
        ("JobSubmitted", "gpus_per_node"): count(0, limits.max_gpus_per_job, (
            "GPUs each node holds for all its tasks to share, each task seeing them all (Slurm's `--gres=gpu:N` "
            "with several tasks per node); 0: `resources.gpus` per task, which it excludes.")),
        ("JobSubmitted", "exclusive"): text("Whole nodes (Slurm's `--exclusive`): it starts only on nodes nothing "
                                            "runs on and holds all their CPUs and GPUs."),
        ("JobSubmitted", "whole_node_memory"): text("All the memory of each node (Slurm's `--mem=0`); "
                                                    "`resources.memory` is then not read."),
        ("JobSubmitted", "constraint"): text("Node features (Slurm's `--constraint`): names joined by `&` and `|`, "
                                             "one level of parentheses, one `[a|b]` (one alternative for all "
                                             "nodes). A node's features: its GPU models, the names in its "
                                             "`features` label, its labels set to `true`."),
        ("JobSubmitted", "nodelist"): text("Slurm host lists (`node[01-04]`): it runs on exactly these nodes, as "
                                           "many as `nodes`."),
        ("JobSubmitted", "exclude_nodes"): text("Slurm host lists of nodes it never runs on."),
        ("JobSubmitted", "requeue"): text("Requeued when its node is lost or it is preempted (Slurm's "
                                          "`--requeue`); `false`: it ends then (`--no-requeue`)."),
        ("JobSubmitted", "time_min_s"): number(above=0, text=(
            "Slurm's `--time-min`: backfill may start it with a shorter limit, down to this, when its own would "
            "delay a reservation (at most `time_limit_s`).")),
        ("JobSubmitted", "limit_signal"): text("Slurm's `--signal`: a signal sent `before_s` seconds before its "
                                               "time limit; `null`: none."),
        ("LimitSignal", "signal"): text("A signal name (`USR1`, `SIGUSR1`) or number (`10`)."),
        ("LimitSignal", "before_s"): number(minimum=0, maximum=65535, text="How long before the time limit."),
        ("LimitSignal", "batch_only"): text("To the job's main process (its batch shell) alone, Slurm's `B:`; "
                                            "else to every other process of the job."),
        ("JobSubmitted", "singleton"): text("Slurm's `--dependency=singleton`: it starts only when no other job "
                                            "of its tenant, user and name runs, nor waits ahead of it."),
        ("JobSubmitted", "hold"): text("Accepted held (Slurm's `--hold`): it waits for a release."),
        ("JobSubmitted", "begin_ts"): number(minimum=0, text="Slurm's `--begin`: it starts no earlier than this."),
        ("ResourceRequest", "cpus"): cpus,
        ("ResourceRequest", "memory"): lambda p: (memory(positive=True)(p), _describe(
            p, "`null`: not given; the partition's default memory per CPU or GPU, else 1 GiB. Left out: 1 GiB.")),
        ("ResourceRequest", "gpu_memory"): memory(positive=False),
        ("ResourceRequest", "gpus"): count(0, limits.max_gpus_per_job, "Whole GPUs per task (a JSON integer); "
                                           f"at most {limits.max_gpus_per_job} in the whole job."),
        ("ResourceRequest", "gpu_type"): pattern(f"^$|{GPU_MODEL_PATTERN}", (
            "A GPU model the cluster has: `type` or `type-variant` (`a100`, `h100-80gb`), any case, at most 64 "
            "characters; `null` (or empty): any model.")),
        ("Dependency", "kind"): choice(c.DEPENDENCY_KINDS, "after-ok: it succeeded; after-not-ok: it ended "
                                       "without success; after-any: it ended; after: it started."),
        ("Dependency", "job_id"): pattern(JOB_KEY_PATTERN, "The job (or array, or one task `<array>_<i>`) "
                                          "waited for; it may be submitted later. A client writes its own id; "
                                          "under accounts events carry it as `<tenant>:<id>`."),
        ("Toleration", "operator"): choice(vocab.TOLERATION_OPS),
        ("Toleration", "effect"): choice(effects_or_any, "Empty tolerates every effect."),
        ("Toleration", "key"): text("The taint's key; empty with `Exists` tolerates every taint."),
        # not an enum: placement does not refuse another operator, it matches no node with it
        ("NodeSelectorRequirement", "operator"): text(f"One of {', '.join(vocab.SELECTOR_OPS)} (Gt and Lt compare "
                                                      "numbers, the first value); any other matches no node."),
        # a client's requests
        ("JobUpdateRequested", "priority_class"): choice(classes, "The new class; `null`: unchanged."),
        ("JobUpdateRequested", "nice"): count(-nice, nice, "The new nice (below 0: operators only); `null`: "
                                              "unchanged."),
        # operators
        ("NodeCommandIssued", "action"): choice(vocab.NODE_ACTIONS),
        ("NodeCommandIssued", "taint"): text("For taint and untaint (untaint matches by key, and by value and "
                                             "effect where they are not empty)."),
        ("NodeCommandIssued", "migrate"): text("For drain: checkpoint the node's checkpointable jobs now and "
                                               "requeue them to resume elsewhere."),
        ("NodeCommandIssued", "deadline_s"): number(minimum=0, text="For drain: stop what still runs on the node "
                                                    "this long after the command (requeued, or ended if it may not "
                                                    "be); `null`: the jobs run to their end."),
        ("NodeCommandIssued", "grace_s"): number(minimum=0, maximum=vocab.GRACE_PERIOD_MAX_S, text="For drain: "
                                                 "the time each stopped job gets to checkpoint and exit; `null`: "
                                                 "inventory's eviction grace, 30 s."),
        ("Taint", "key"): pattern(vocab.TAINT_KEY_PATTERN, "Letters, digits, `_ . / -`, starting and ending "
                                  "with a letter or digit.", max_length=vocab.TAINT_KEY_MAX),
        ("Taint", "value"): pattern(vocab.TAINT_VALUE_PATTERN, "Letters, digits, `_ . -`, starting and ending "
                                    "with a letter or digit; may be empty.", max_length=vocab.TAINT_VALUE_MAX),
        ("Taint", "effect"): choice(effects_or_any, "Empty only in an untaint (every effect)."),
        ("AccountConfigured", "account"): lambda p: (_branch(p, "string").update(minLength=1, pattern="^[^/]+$"),
                                                     _describe(p, "The account's name (no `/`); a job names it "
                                                               "in `account`, so a subject token is best.")),
        ("AccountConfigured", "parent"): pattern("^[^/]+$", "`null`: under the root."),
        ("Quota", "gpus"): count(0, 2**31 - 1, "`null`: unlimited."),
        ("Quota", "running_jobs"): count(0, 2**31 - 1, "`null`: unlimited."),
        ("Quota", "gpus_by_type"): lambda p: p["additionalProperties"].__setitem__("minimum", 0),
        ("FairShareConfigured", "gpu_weight"): number(minimum=0, text="Usage billed per GPU-second."),
        ("FairShareConfigured", "cpu_weight"): number(minimum=0, text="Usage billed per core-second."),
        ("FairShareConfigured", "memory_weight"): number(minimum=0, text="Usage billed per GiB-second."),
        ("TenantConfigured", "tenant"): pattern(TENANT_PATTERN, "The tenant (`horizon tenant add NAME`)."),
        ("TenantConfigured", "max_inputs_per_s"): number(minimum=0, text=f"Inputs a second the intake stores "
                                                         f"for it, on average; `null`: {_TL.max_inputs_per_s:g}; "
                                                         "0: no limit."),
        ("TenantConfigured", "burst"): count(0, 2**31 - 1, f"Inputs it may send at once before the rate "
                                             f"applies; `null`: {_TL.burst}; 0: one second's worth."),
        ("TenantConfigured", "max_pending_jobs"): count(0, 2**31 - 1, f"Its jobs waiting in the queue, each "
                                                        f"array task one; `null`: {_TL.max_pending_jobs}; 0: no "
                                                        "limit."),
        ("TenantConfigured", "max_array_tasks"): count(0, 2**31 - 1, f"Tasks of one array; `null`: "
                                                       f"{_TL.max_array_tasks}; 0: the cluster's own bound only."),
        ("TenantConfigured", "max_pending_array_tasks"): count(0, 2**31 - 1, f"Its arrays' tasks waiting in the "
                                                               f"queue, all together; `null`: "
                                                               f"{_TL.max_pending_array_tasks}; 0: no limit."),
        ("JobRejected", "limit"): text("The tenant limit it would pass (`max_pending_jobs`, `max_array_tasks`, "
                                       "`max_pending_array_tasks`; `horizon tenant set`), or empty."),
        ("AccountConfigured", "shares"): number(above=0, text="Its fair-share weight among its siblings."),
        ("AccountConfigured", "tenants"): lambda p: (p["items"].__setitem__("pattern", TENANT_PATTERN), _describe(
            p, "The tenants whose jobs may charge it; empty: any tenant's.")),
        ("PartitionConfigured", "name"): pattern(TOKEN_PATTERN, "The partition's name (a token), as jobs name it."),
        ("PartitionConfigured", "nodes"): text("Slurm host lists (`node[01-04,07]`) and shell globs (`gpu-*`); "
                                               "`ALL` or `*`: every node. Empty with `node_labels`: every node "
                                               "that has those labels."),
        ("PartitionConfigured", "state"): choice(vocab.PARTITION_STATES, "up; down: jobs are accepted and wait; "
                                                 "drain: no new jobs, those accepted run."),
        ("PartitionConfigured", "priority_tier"): count(0, vocab.PRIORITY_TIER_MAX, "A higher tier's pending jobs "
                                                        "are considered first (Slurm's PriorityTier)."),
        ("PartitionConfigured", "max_nodes"): count(1, 2**31 - 1, "`null`: no limit."),
        ("PartitionConfigured", "default_mem_per_cpu"): count(1, MAX_MEMORY_BYTES, "Bytes per CPU of a task that "
                                                              "gives no memory; `null`: none."),
        ("PartitionConfigured", "default_mem_per_gpu"): count(1, MAX_MEMORY_BYTES, "Bytes per GPU of a task with "
                                                              "GPUs that gives no memory; `null`: none."),
        ("PartitionConfigured", "max_time_s"): number(above=0, text="`null`: no limit."),
        ("PartitionConfigured", "default_time_s"): number(above=0, text="`null`: `max_time_s`, else the "
                                                          "cluster's default."),
        ("PartitionConfigured", "profile"): text("The placement profile of its jobs (one configured already); "
                                                 "empty: `default`."),
        ("PartitionPolicyConfigured", "unknown"): choice(vocab.UNKNOWN_PARTITION, "What a submission naming a "
                                                         "partition the cluster does not define gets."),
        ("ProfileConfigured", "name"): lambda p: (_branch(p, "string").update(minLength=1, maxLength=128)),
        ("ProfileConfigured", "backfill"): choice(vocab.BACKFILL_MODES),
        ("ProfileConfigured", "runtime_estimate"): choice(vocab.RUNTIME_ESTIMATES, "Backfilling's run times: the "
                                                          "jobs' time limits, or predicted from each user's "
                                                          "last two run times (EASY++)."),
        ("ProfileConfigured", "weights"): keys(vocab.SCORE_WEIGHTS, "Score plugin -> weight; unset ones keep "
                                               "their defaults."),
        ("ProfileConfigured", "reservation_depth"): count(*vocab.RESERVATION_DEPTH),
        ("PreemptionConfigured", "victims"): choice(vocab.VICTIM_ORDERS, "`null`: unchanged."),
        ("PreemptionConfigured", "rules"): lambda p: (
            p.__setitem__("propertyNames", {"enum": list(classes)}),
            p["additionalProperties"]["items"].__setitem__("enum", list(classes)),
            _describe(p, "Priority class -> the lower classes it may preempt.")),
        ("PreemptionConfigured", "grace_period_s"): number(minimum=0, maximum=vocab.GRACE_PERIOD_MAX_S),
        ("PreemptionConfigured", "max_preemptions"): count(0, 2**31 - 1),
        ("PreemptionConfigured", "per_minute"): count(0, 2**31 - 1),
        ("PreemptionConfigured", "per_account_per_minute"): count(0, 2**31 - 1),
        ("PolicyConfigured", "policy"): choice(vocab.QUEUE_POLICIES, "`null`: unchanged."),
        ("PolicyConfigured", "weights"): keys(vocab.POLICY_WEIGHTS, "Multifactor factor -> weight; unset ones "
                                              "keep their value."),
        ("PolicyConfigured", "qos_boost"): lambda p: (p["additionalProperties"].update(minimum=0, maximum=1),
                                                      _describe(p, "QOS name -> factor in [0, 1].")),
        ("FairShareConfigured", "half_life_s"): number(above=0),
        # the validated job every service reads
        ("JobSpec", "gpu_type"): text("The GPU model's type in lower case (`h100`); `null`: any."),
        ("JobSpec", "gpu_variant"): text("The variant (`80gb`); `null`: any."),
        ("JobSpec", "array"): pattern(JOB_KEY_PATTERN, "The array's job id when this job is one of its tasks."),
        ("JobSpec", "array_index"): count(0, MAX_INDEX),
        # verdicts
        ("JobAccepted", "array_tasks"): count(0, MAX_INDEX + 1, "A task of an array: how many tasks the array "
                                              "has, which is how many JobAccepted its submission gets (one per "
                                              "task, each with the submission's `causation_id`); 0: the job is "
                                              "not an array's task."),
        ("InputRejected", "path"): text("The JSON path of the field at fault, e.g. `$.resources.gpus`, a missing "
                                        "field's own (`$.job_id`), `$.type` for an event type the subject does "
                                        "not take; `headers` for a refused header; empty when the problem is not "
                                        "one field's (not JSON, not an object)."),
        ("InputRejected", "input_seq"): count(1, 2**63 - 1, "The input's sequence, as its PubAck said."),
        ("InputRejected", "msg_id"): text("The Nats-Msg-Id the client sent, as sent."),
        ("JobRejected", "field"): text("The field at fault (`resources.memory`), or empty."),
        ("JobRejected", "reason"): text("Why, in words a person can act on: the value and what is accepted."),
        ("RequestRejected", "verb"): text("The verb of the request answered (`cancel`, `submit`, ...)."),
    }


def payload_schemas(ref: str = "#/components/schemas/{name}") -> dict[str, Schema]:
    """Every event type's schema and the value objects' they use, by name, with the facts above."""
    _, schemas = msgspec.json.schema_components(list(EVENT_TYPES.values()), ref_template=ref)
    facts = _facts()
    for name, schema in schemas.items():
        if schema.get("description"):
            schema["description"] = _clean(schema["description"])
        is_input = name in INPUT_TYPES
        for field, prop in schema.get("properties", {}).items():
            if "$ref" in prop:
                continue
            _by_name(name, field, prop, is_input=is_input)
            fact = facts.pop((name, field), None)
            if fact is not None:
                fact(prop)
    if facts:  # a fact about a field the catalogue no longer has
        raise KeyError(f"no such fields in the catalogue: {sorted(facts)}")
    return schemas
