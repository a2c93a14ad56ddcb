"""Hypothesis strategies for bad input: what a careless or hostile client can publish on an input subject.

A message is ``(subject, body)``. Bodies are JSON documents built field by field from the
``JobSubmitted`` / request / operator catalogue, each field drawn from plausible values, wrong
types, huge numbers, long strings (up to ~1 MB), odd unicode (NUL, lone surrogates written raw
or escaped, emoji), NaN and infinities, negative and zero resources, long dependency lists and
unknown fields, with required fields sometimes missing; then serialised in one of several ways
(ASCII escapes, raw UTF-8 with surrogates let through, truncated, a byte flipped). Random bytes
go to every input subject too. Used by ``tests/property/test_fuzz_inputs.py`` at two levels: the pure
cores directly, and a batch through the real services on a real nats-server.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from hypothesis import strategies as st

from events import catalogue as c
from events.subjects import ADMIN_TENANT, ADMIN_VERBS, VERBS

__all__ = ["MAX_BODY", "messages", "SEED_JOBS", "SEED_NODES", "TYPED", "MIXED"]

# Room under the server's 1 MiB max_payload for the subject and headers; a body the fuzzer makes
# longer is cut to this (it then is garbage, which is also fine input).
MAX_BODY = (1 << 20) - 8 * 1024

SEED_NODES = ("node-00", "node-01")
SEED_JOBS = ("seed-pending", "seed-big", "seed-array")  # seed-array has tasks seed-array_0.._2

# -- leaves ---------------------------------------------------------------------------------

odd_chars = st.characters(exclude_categories=())  # every code point, lone surrogates included
odd_text = st.text(alphabet=odd_chars, max_size=24)
BIG_UNITS = ("x", "\x00", "é", "\U0001f600", "\ud800", "9", ".", "\r\n", "\\", '"', "\x7f")
big_text = st.builds(lambda unit, n: unit * n, st.sampled_from(BIG_UNITS),
                     st.sampled_from([129, 4_500, 70_000, 300_000, 1_000_000]))
numbers = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -0.0, 5e-324, 0.5, -2.5]),
)
leaf = st.one_of(st.none(), st.booleans(), numbers, odd_text, big_text)
any_json = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, odd_text),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=8,
)
wrong = st.one_of(leaf, any_json)


unknown = st.dictionaries(st.sampled_from(["zzz", "__proto__", "type ", "extra", "spec", "resources2"]) | odd_text,
                          any_json, max_size=3)


class Fields(NamedTuple):
    tokens: st.SearchStrategy[Any]
    tenants: st.SearchStrategy[Any]
    submit: dict[str, st.SearchStrategy[Any]]
    request: dict[str, st.SearchStrategy[Any]]
    admin: dict[str, st.SearchStrategy[Any]]


def _fields(typed: bool) -> Fields:
    """Every field's strategy. ``typed``: only values of the right JSON type (bad values, not bad
    types), so that most messages decode and reach validation; else sometimes anything at all."""

    def of(*plausible: Any) -> st.SearchStrategy[Any]:
        """Mostly one of ``plausible`` (strategies or values), sometimes (unless typed) anything."""
        options = st.one_of(*[p if isinstance(p, st.SearchStrategy) else st.just(p) for p in plausible])
        return options if typed else st.one_of(options, options, options, options, options, wrong)

    digits = st.builds(lambda n: "9" * n, st.sampled_from([20, 4_400, 5_000, 100_000]))
    tokens = of(st.sampled_from(["j1", "j2", "a.b", "", "x" * 128, "x" * 129, "a*", "a>", "seed-array_0",
                                  *SEED_JOBS]), odd_text, big_text)
    tenants = of(st.sampled_from(["acme", "acme", "globex", ADMIN_TENANT, ""]), odd_text, big_text)
    cpus = of(st.sampled_from(["1", "0", "-1", "500m", "0m", "1e3", "2.5", "Infinity", "NaN", "\u0663", "\u00b2",
                               " 4 ", "1m"]), digits, numbers)
    memory = of(st.sampled_from(["1Gi", "0", "-5", "16Gi", "1.5k", "0.5", "8Q", "1EB", "2Pi", "\u0663g", "1e9"]),
                st.builds(lambda d: d + "Gi", digits), numbers)
    durations = of(numbers, st.none(), st.sampled_from([0, 60, 1e12, -5]))
    counts = of(numbers, st.sampled_from([0, 1, 2, 513, 4097, -3]))
    names = of(st.sampled_from(["normal", "critical", "scavenger", "urgent", "", "on-failure", "always"]), odd_text)
    string_maps = of(st.dictionaries(odd_text, odd_text, max_size=5),
                     st.builds(lambda n: {f"K{i}": "v" for i in range(n)}, st.sampled_from([1024, 1025, 30_000])),
                     st.builds(lambda s: {"k": s}, big_text))
    arrays = of(st.sampled_from(["0-9", "0-2%1", "0-99999999", "1,3,5-7", "0-15:4%0", "5-1", "0-10:0", "%", "", "0-9%",
                                 "0-9999", "0-10000", "1,1,1", "999999999", "1000000000"]),
                st.builds(lambda d: "0-" + d, digits), st.builds(lambda d: "0-3%" + d, digits),
                st.builds(lambda d: "0-3:" + d, digits))
    dependency = st.fixed_dictionaries({}, optional={
        "kind": of(st.sampled_from(list(c.DEPENDENCY_KINDS) + ["before", ""])),
        "job_id": tokens,
    })
    dependencies = of(
        st.lists(dependency, max_size=5),
        st.builds(lambda n, kind: [{"kind": kind, "job_id": f"dep-{i}"} for i in range(n)],
                  st.sampled_from([100, 5_000, 40_000]), st.sampled_from(["after-ok", "after-any"])),
        st.builds(lambda n: [{"job_id": "seed-pending"}] * n, st.sampled_from([2, 10_000])),
    )
    requirement = st.fixed_dictionaries({}, optional={
        "key": odd_text, "operator": of(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "bogus"])),
        "values": of(st.lists(odd_text, max_size=3)),
    })
    term = st.fixed_dictionaries({}, optional={"match_labels": string_maps, "topology_key": of("node", "rack", "")})
    affinity = of(st.none(), st.fixed_dictionaries({}, optional={
        "node_required": of(st.lists(requirement, max_size=3)), "node_preferred": of(st.lists(requirement, max_size=3)),
        "job_affinity": of(st.lists(term, max_size=2)), "job_anti_affinity": of(st.lists(term, max_size=2)),
    }))
    toleration = st.fixed_dictionaries({}, optional={
        "key": odd_text, "operator": of("Equal", "Exists", "Sometimes"), "value": of(odd_text),
        "effect": of(st.sampled_from(list(c.TAINT_EFFECTS) + ["", "Maybe"])),
    })
    resources = of(st.fixed_dictionaries({}, optional={
        "cpus": cpus, "memory": memory, "gpus": counts,
        "gpu_type": of(st.sampled_from(["a100", "A100", "h100-80gb", "a100-80gb", "tpu", "", "-", "a" * 65, None])),
        "gpu_memory": of(memory, st.none()),
    }))

    SUBMIT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
        "account": tokens, "user": tokens, "name": of(odd_text, big_text),
        "command": of(st.lists(odd_text, max_size=4), st.builds(lambda s: ["sh", "-c", s], big_text),
                      st.builds(lambda n: ["x"] * n, st.sampled_from([1000, 200_000]))),
        "env": string_maps, "labels": string_maps, "node_selector": string_maps, "payload": of(any_json, big_text),
        "resources": resources, "nodes": counts, "tasks_per_node": counts, "time_limit_s": durations,
        "scheduling_timeout_s": durations, "priority_class": names, "nice": counts, "qos": names, "profile": names,
        "dependencies": dependencies, "array": arrays, "affinity": affinity,
        "tolerations": of(st.lists(toleration, max_size=3)), "restart_policy": names, "max_retries": counts,
        "preemptible": of(True, False), "min_runtime_s": durations, "checkpoint_signal": of("SIGUSR1", "SIGBOGUS", None),
        "sim_runtime_s": durations, "sim_exit_code": counts, "v": of(st.sampled_from([1, 2, 3, 0, -1, "2", True])),
        "id": tokens, "ts": numbers, "causation_id": of(odd_text), "correlation_id": tokens, "source": of(odd_text),
        # v1 fields (flat resources, minutes): the upcaster must cope with them too
        "cpus": cpus, "memory": memory, "gpus": counts, "time_limit_min": durations,
    }

    REQUEST_FIELDS: dict[str, st.SearchStrategy[Any]] = {
        "reason": of(odd_text, big_text), "user": tokens, "priority_class": names, "nice": counts,
        "v": of(1, 2), "id": tokens,
    }

    ADMIN_FIELDS: dict[str, st.SearchStrategy[Any]] = {
        "node": of(st.sampled_from([*SEED_NODES, "ghost"]), odd_text, big_text),
        "action": of(st.sampled_from(["cordon", "uncordon", "drain", "remove", "taint", "untaint", "add-datasets",
                                                "remove-datasets", "explode"])),
        "datasets": of(st.lists(of(tokens, odd_text), max_size=3)),
        "taint": of(st.none(), st.fixed_dictionaries({"key": of(odd_text, big_text)}, optional={
            "value": of(odd_text), "effect": of(st.sampled_from(list(c.TAINT_EFFECTS) + ["Maybe"]))})),
        "account": tokens, "parent": of(st.none(), tokens), "shares": numbers,
        "quota": of(st.fixed_dictionaries({}, optional={
            "gpus": of(numbers, None), "cpus_milli": of(numbers, None), "memory_bytes": of(numbers, None),
            "running_jobs": of(numbers, None), "gpus_by_type": of(st.dictionaries(odd_text, numbers, max_size=3))})),
        "borrowing": of(True, False), "priority_boost": numbers,
        "half_life_s": numbers, "gpu_weight": numbers, "cpu_weight": numbers, "memory_weight": numbers,
        "dominant_share": of(True, False), "policy": of(st.sampled_from(["fifo", "multifactor", "priority", "nope"])),
        "weights": of(st.dictionaries(st.sampled_from(["class", "fairshare", "age", "binpack", "spread", "numa"]) | odd_text,
                                      numbers, max_size=4), st.builds(lambda s: {s: 1.0}, big_text)),
        "max_age_s": numbers, "estimate_ref_s": numbers, "qos_boost": of(st.dictionaries(odd_text, numbers, max_size=3)),
        "backoff_base_s": numbers, "backoff_max_s": numbers,
        "name": of(st.sampled_from(["default", "gpu", ""]), odd_text, big_text),
        "backfill": of(st.sampled_from(["none", "easy", "shadow", "greedy", "conservative", "lazy"])),
        "reservation_depth": counts,
        "nodes": of(st.lists(st.sampled_from([*SEED_NODES, "ghost"]) | odd_text, max_size=4)),
        "start_ts": numbers, "end_ts": numbers, "cancelled": of(True, False),
        "rules": of(st.dictionaries(names, st.lists(names, max_size=3), max_size=3)),
        "victims": of(st.sampled_from(["cheapest", "lowest-priority-youngest", "random"])),
        "grace_period_s": numbers, "max_preemptions": counts, "per_minute": counts, "per_account_per_minute": counts,
        "user": tokens, "v": of(1, 2),
    }
    return Fields(tokens, tenants, SUBMIT_FIELDS, REQUEST_FIELDS, ADMIN_FIELDS)


TYPED, MIXED = _fields(True), _fields(False)


GOOD_IDS = st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True)


def _tag(cls: type[c.Event]) -> str:
    return cls.__struct_config__.tag  # type: ignore[return-value]


ALL_TYPES = sorted(c.EVENT_TYPES)


@st.composite
def _body(draw: st.DrawFn, typed: bool, own_type: str, base: dict[str, st.SearchStrategy[Any]],
          fields: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"type": own_type}
    if not typed and draw(st.integers(0, 4)) == 0:
        body["type"] = draw(st.sampled_from(ALL_TYPES) | wrong)
    for key, strategy in base.items():
        body[key] = draw(strategy)
    for key in draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=6)):
        body[key] = draw(fields[key])
    if not typed and draw(st.integers(0, 9)) == 0:
        body.pop(draw(st.sampled_from(["type", *base])), None)  # a required field missing
    body.update(draw(unknown))
    return body


@st.composite
def _serialised(draw: st.DrawFn, body: Any, typed: bool) -> bytes:
    ways = ["ascii", "utf8"] if typed else ["ascii"] * 4 + ["utf8"] * 4 + ["truncated", "flipped", "deep"]
    how = draw(st.sampled_from(ways))
    text = json.dumps(body, ensure_ascii=how == "ascii", allow_nan=True)
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate goes out as the (invalid) UTF-8 it would be
    if how == "truncated" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "flipped" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    elif how == "deep" and isinstance(body, dict):
        depth = draw(st.sampled_from([100, 10_000, 200_000]))
        inner = "[" * depth + "]" * depth
        data = (text[:-1] + (", " if len(body) else "") + f'"payload": {inner}}}').encode("utf-8", "surrogatepass")
    return data[:MAX_BODY]


def _verbs() -> st.SearchStrategy[tuple[str, str]]:
    tenant = st.sampled_from(["acme", "acme", "acme", "globex", "t\u00e9nant", "x" * 200])
    submit = st.tuples(tenant, st.just("submit"))
    return st.one_of(submit, submit, submit, st.tuples(tenant, st.sampled_from(sorted(VERBS))),
                     st.tuples(st.just(ADMIN_TENANT), st.sampled_from(sorted(ADMIN_VERBS))))


@st.composite
def messages(draw: st.DrawFn, typed: bool | None = None) -> tuple[str, bytes]:
    """One fuzzed input: ``(subject, body)`` on ``horizon.in.<tenant>.<verb>`` or ``horizon.in._admin.<verb>``.

    ``typed``: True for well-typed JSON with bad values (most reach validation), False for anything
    (wrong types, missing fields, broken JSON, random bytes), None for either, half and half.
    """
    if typed is None:
        typed = draw(st.booleans())
    f = TYPED if typed else MIXED
    tenant, verb = draw(_verbs())
    subject = f"horizon.in.{tenant}.{verb}"
    if not typed and draw(st.integers(0, 4)) == 0:
        return subject, draw(st.binary(max_size=2_000))
    cls = (ADMIN_VERBS if tenant == ADMIN_TENANT else VERBS)[verb]
    own_tenant = st.one_of(st.just(tenant), st.just(tenant), f.tenants)
    if cls is c.JobSubmitted:
        # Typed submissions mostly have a good id and tenant, so that many are accepted and the
        # odd values they carry (huge env, deep dependency lists, odd selectors) reach every core.
        job_id = st.one_of(GOOD_IDS, GOOD_IDS, GOOD_IDS, f.tokens) if typed else f.tokens
        body = draw(_body(typed, _tag(cls), {"job_id": job_id, "tenant": own_tenant}, f.submit))
    elif verb in ("cancel", "hold", "release", "update"):
        body = draw(_body(typed, _tag(cls), {"job_id": f.tokens, "tenant": own_tenant}, f.request))
    else:
        fields = {k: v for k, v in f.admin.items() if k in cls.__struct_fields__}
        base = {k: fields.pop(k) for k in ("node", "action", "account", "name") if k in fields}
        body = draw(_body(typed, _tag(cls), base, fields))
    return subject, draw(_serialised(body, typed))
