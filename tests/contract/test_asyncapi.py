"""The published contract (``horizon schema --asyncapi``): a valid AsyncAPI 3 document, and one that
tells the truth about the code.

1. The AsyncAPI project's own parser (``@asyncapi/parser``, Node.js, ``tests/asyncapi/``) validates
   the document as ``horizon schema --asyncapi`` prints it. Without Node it is skipped, except in CI
   (``CI=true``), where it fails.
2. Every event type, verb and publisher has its channel; every reference resolves.
3. The schemas hold real events: every event of a simulated run (arrays, dependencies, failures,
   requeues), the golden inputs, the document's own examples, and every answer the cores give to
   fuzzed inputs; a submission the core accepts is valid, and what it refuses for a value the
   schema can state is invalid.
4. The patterns are the parsers: memory, CPU, GPU model and array strings, string by string.
5. ``VERDICTS`` is what the submission core answers: per verb, with ``causation_id`` ``seq:<n>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from events import subjects
from events.arrays import ARRAY_PATTERN, parse_array
from events.asyncapi import TENANT_FEED_TYPES, VERDICTS
from events.codec import decode, encode
from events.resources import (GPU_MODEL_PATTERN, ResourceError, cpus_pattern, memory_pattern, parse_cpus,
                              parse_gpu_model, parse_memory)
from services.domain.protocol import Record
from services.front.host.contract import asyncapi_document
from services.runtime.service import fold_record
from services.submission.core import SubmissionCore
from tests.helpers import node

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tests" / "asyncapi"
GOLDEN = ROOT / "tests" / "data" / "golden"


@lru_cache(maxsize=1)
def doc() -> dict[str, Any]:
    return asyncapi_document()


def validator(ref: str) -> jsonschema.Draft7Validator:
    """A validator of ``ref`` (``#/components/...``) within the document (AsyncAPI schemas are draft 7)."""
    return jsonschema.Draft7Validator({"$ref": ref, "components": doc()["components"]})


def errors(name: str, instance: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator(f"#/components/schemas/{name}").iter_errors(instance)]


def assert_valid(event: c.Event) -> None:
    body = json.loads(encode(event))
    problems = errors(event.event_type, body)
    assert not problems, (event.event_type, problems, body)


# ----------------------------------------------------------------------------- 1. the AsyncAPI parser


def node_checker() -> str:
    """``node``, with the parser installed (``npm ci`` from the lock when it is not); skip without Node."""
    node_bin, npm = shutil.which("node"), shutil.which("npm")
    if node_bin is None or npm is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must validate the AsyncAPI document: install Node.js 20 and npm")
        pytest.skip("Node.js is not installed: the AsyncAPI document is validated by @asyncapi/parser "
                    "(tests/asyncapi); install Node.js 20 and npm to run this test")
    if not (CHECKER / "node_modules" / "@asyncapi" / "parser").is_dir():
        subprocess.run([npm, "ci", "--prefix", str(CHECKER), "--no-audit", "--no-fund"], check=True,
                       capture_output=True, timeout=600)
    return node_bin


@pytest.mark.timeout(300)
def test_the_document_horizon_prints_is_valid_asyncapi_3(tmp_path):
    node_bin = node_checker()
    out = subprocess.run([sys.executable, "-m", "services.front.cli.main", "schema", "--asyncapi"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "horizon.asyncapi.json"
    path.write_text(out.stdout)
    assert json.loads(out.stdout)["asyncapi"] == "3.0.0"
    check = subprocess.run([node_bin, str(CHECKER / "validate.mjs"), str(path)], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "valid AsyncAPI 3.0.0" in check.stdout


def test_the_checker_refuses_a_broken_document(tmp_path):
    """The parser is a real check: a dangling reference and a bad schema are errors, exit 1."""
    node_bin = node_checker()
    broken = json.loads(json.dumps(doc()))
    broken["operations"]["in.submit"]["channel"] = {"$ref": "#/channels/nowhere"}
    broken["components"]["schemas"]["JobSpec"]["properties"]["nodes"]["minimum"] = "one"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    check = subprocess.run([node_bin, str(CHECKER / "validate.mjs"), str(path)], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 1
    assert "#/channels/nowhere" in check.stdout and "minimum" in check.stdout


# ----------------------------------------------------------------------------- 2. everything has its place


def test_every_event_verb_and_publisher_has_its_channel_and_operation():
    d = doc()
    addresses = {ch["address"] for ch in d["channels"].values() if ch["address"]}
    for verb in subjects.VERBS:
        assert f"horizon.in.{{tenant}}.{verb}" in addresses
        assert d["operations"][f"in.{verb}"]["reply"]["channel"] == {"$ref": "#/channels/pubAck"}
    for verb in subjects.ADMIN_VERBS:
        assert f"horizon.in._admin.{verb}" in addresses
    for name, services in subjects.PUBLISHERS.items():
        for service in services:
            assert f"horizon.evt.{service}.{name}.{{aggregate}}" in addresses
            assert d["operations"][f"evt.{service}.{name}"]["action"] == "send"
    in_a_channel = {m["$ref"].rsplit("/", 1)[1] for ch in d["channels"].values() for m in ch["messages"].values()}
    assert set(c.EVENT_TYPES) <= in_a_channel
    for view in ("jobs", "job", "queue", "nodes", "allocations", "usage", "decisions", "priority", "preempt",
                 "config"):
        assert f"horizon.query.{view}" in addresses
        assert "reply" in d["operations"][f"query.{view}"]
    assert {"horizon.validate.{tenant}", "horizon.logs.{node}", "horizon.logs.{node}.{tenant}", "horizon.hb.{node}",
            "horizon.dlq.{service}", "horizon.intake.{tenant}.{verb}",
            "horizon.tenant.{tenant}.evt.{service}.{eventType}.{aggregate}"} <= addresses
    assert {"JobAccepted", "JobRejected", "InputRejected", "JobScheduled", "JobSucceeded"} <= set(TENANT_FEED_TYPES)


def test_every_parameter_is_declared_and_every_reference_resolves():
    d = doc()
    for key, ch in d["channels"].items():
        named = set(re.findall(r"\{(\w+)\}", ch["address"] or ""))
        assert named == set(ch.get("parameters", {})), key
    text = json.dumps(d)
    for ref in set(re.findall(r'"\$ref": "#/([^"]+)"', text)):
        target: Any = d
        for part in ref.split("/"):
            target = target[part]


def test_the_facts_msgspec_cannot_see_are_in_the_schemas():
    schemas = doc()["components"]["schemas"]
    sub, res = schemas["JobSubmitted"]["properties"], schemas["ResourceRequest"]["properties"]
    assert sub["priority_class"]["enum"] == list(c.PRIORITY_CLASSES)
    assert sub["restart_policy"]["enum"] == list(c.RESTART_POLICIES)
    assert schemas["Dependency"]["properties"]["kind"]["enum"] == list(c.DEPENDENCY_KINDS)
    assert schemas["Taint"]["properties"]["effect"]["enum"] == ["", *c.TAINT_EFFECTS]
    assert schemas["NodeCommandIssued"]["properties"]["action"]["enum"][0] == "cordon"
    assert sub["job_id"]["pattern"] == "^[A-Za-z0-9_-]{1,128}$"
    # time_limit_s 0: no limit (Slurm's --time=0): the partition's MaxTime, else the cluster's most
    assert sub["nodes"]["minimum"] == 1 and sub["time_limit_s"]["anyOf"][0]["minimum"] == 0
    assert "GiB" in res["memory"]["description"] and "seconds" in sub["min_runtime_s"]["description"].lower()
    assert set(schemas["JobSubmitted"]["required"]) == {"type", "job_id", "tenant"}
    assert "Nats-Msg-Id" in schemas["InputHeaders"]["properties"]


# ----------------------------------------------------------------------------- 3. the schemas hold real events


def test_the_documents_examples_match_their_schemas():
    examples = [(name, ex) for name, m in doc()["components"]["messages"].items() for ex in m.get("examples", [])]
    assert len(examples) >= 5
    for name, example in examples:
        assert not errors(name, example["payload"]), name


def test_the_golden_inputs_match_the_schema():
    for path in sorted(GOLDEN.glob("*.json")):
        body = json.loads(path.read_text())
        assert not errors(body["type"], body), path.name


def test_every_event_of_a_simulated_run_matches_its_schema():
    from events.resources import parse_memory as mem
    from services.nodes.spec import local_nodes
    from services.front.sim.buses import InProcessBus
    from services.front.sim.driver import SimSettings, make_cores, simulate
    from services.front.sim.traces import SimJob

    settings = SimSettings(gpus_per_node=4, backfill="easy")
    specs = local_nodes(3, gpus_per_node=4, cpus=64, memory_bytes=mem("1Ti"), prefix="n")
    jobs = [SimJob("big", 0, 50, 60, gpus=8), SimJob("small", 1, 5, 10, gpus=1),
            SimJob("sweep", 2, 3, 5, gpus=1, array="0-5%2"),
            SimJob("after", 3, 2, 5, gpus=1, dependencies=(("after-ok", "small"),)),
            SimJob("flaky", 4, 2, 5, gpus=1, fail_attempts=1, restart_policy="on-failure", max_retries=2),
            SimJob("doomed", 5, 2, 5, gpus=1, dependencies=(("after-ok", "broken"),)),
            SimJob("broken", 5, 1, 5, gpus=1, exit_code=3),
            SimJob("high", 6, 5, 10, gpus=4, priority_class="high")]
    bus = InProcessBus(make_cores(settings), keep_records=True)
    asyncio.run(simulate(jobs, specs, settings, bus))
    seen: set[str] = set()
    for record in bus.records:
        event = decode(record.data)
        assert_valid(event)
        seen.add(event.event_type)
    assert {"JobSubmitted", "JobAccepted", "JobScheduled", "JobStarted", "JobSucceeded", "JobFailed", "JobRequeued",
            "JobDependencyNeverSatisfied", "NodeRegistered", "SchedulingCycleCompleted"} <= seen, seen


def test_a_submission_refused_for_a_value_the_schema_states_is_invalid():
    ok = {"type": "JobSubmitted", "job_id": "j-1", "tenant": "acme", "command": ["true"]}
    assert not errors("JobSubmitted", ok)
    bad = [
        {"priority_class": "urgent"}, {"restart_policy": "sometimes"}, {"job_id": "a.b"}, {"job_id": ""},
        {"tenant": "_acme"}, {"nodes": 0}, {"nice": 10001}, {"max_retries": 101}, {"time_limit_s": -1},
        {"time_limit_s": 31 * 86400}, {"scheduling_timeout_s": -1}, {"open_mode": "w"}, {"array": "0-9%x"},
        {"image": "-rm"}, {"cwd": "relative/dir"}, {"account": "a b"}, {"dependencies": [{"kind": "before"}]},
        {"tolerations": [{"operator": "Matches"}]}, {"tolerations": [{"effect": "NoRun"}]},
        {"resources": {"memory": "8 GiB"}}, {"resources": {"memory": "16Zi"}}, {"resources": {"memory": 0}},
        {"resources": {"memory": "1.5"}}, {"resources": {"memory": -1}}, {"resources": {"cpus": 0}},
        {"resources": {"cpus": "500M"}}, {"resources": {"cpus": "-1"}}, {"resources": {"gpus": "two"}},
        {"resources": {"gpus": 513}}, {"resources": {"gpu_type": "a100-sxm4-80gb"}},
        {"resources": {"gpu_memory": "40 GiB"}}, {"tasks_per_node": 4097},
        {"resources": {"cpus": 0, "memory": 0, "gpus": 1}}, {"resources": {"cpus": "0m", "memory": "1k"}},
    ]
    for change in bad:
        assert errors("JobSubmitted", {**ok, **change}), change
    for change in ({"resources": {"memory": "8 Gi", "cpus": "500m", "gpu_type": "H100-80GB", "gpu_memory": "40GB"}},
                   {"resources": {"memory": "16GB", "cpus": 0.5}}, {"array": "1,3,5-7", "v": 1},
                   {"tolerations": [{"operator": "Exists"}]}, {"cwd": "/home/ana"}, {"image": "localhost/a:1"},
                   {"time_limit_s": 0}, {"resources": {"cpus": 0, "memory": "0"}},  # best-effort
                   {"resources": {"memory": 0}, "whole_node_memory": True}):  # Slurm's --mem=0
        assert not errors("JobSubmitted", {**ok, **change}), change


# The cores' answers to fuzzed input (tests/fuzz_inputs.py), checked against the document.
def _fuzz_world() -> Any:
    from tests.property.test_fuzz_inputs import fresh_world

    return fresh_world()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(message=st.deferred(lambda: __import__("tests.fuzz_inputs", fromlist=["messages"]).messages()))
def test_the_answers_to_fuzzed_inputs_match_the_document(message):
    subject, data = message
    world = _fuzz_world()
    error = world.fold(subject, data, "fuzz-1")
    seq = len(world.records)
    answers = world.settle()
    parsed = subjects.parse_subject(subject)
    for event in answers:
        assert_valid(event)
        if event.causation_id == f"seq:{seq}" and parsed is not None and parsed.kind == "input":
            assert event.event_type in VERDICTS.get(parsed.name, ("InputRejected",)), (subject, event)
    accepted = [e for e in answers if isinstance(e, c.JobAccepted) and e.causation_id == f"seq:{seq}"]
    if error is None and accepted:  # what the core accepts, the schema accepts
        body = json.loads(data)
        assert not errors("JobSubmitted", body), (body, errors("JobSubmitted", body))


# Plausible submissions: each field drawn from forms a person writes, right and wrong.
def _field_values() -> dict[str, st.SearchStrategy[Any]]:
    words = st.sampled_from(["", "a", "A-b_9", "a.b", " x", "x\n", "_x", "é", "a" * 129])
    return {
        "account": words, "user": words, "name": st.text(max_size=3) | st.just("n" * 257),
        "command": st.sampled_from([["true"], [], [""], ["sh", "-c", "echo\nhi"]]),
        "nodes": st.integers(-1, 3), "tasks_per_node": st.integers(0, 3),
        "time_limit_s": st.sampled_from([None, 0, 0.5, 60, 3600.0, 30 * 86400, 30 * 86400 + 1, -5]),
        "scheduling_timeout_s": st.sampled_from([None, 0, 1e-9, 10, -1]),
        "priority_class": st.sampled_from([*c.PRIORITY_CLASSES, "urgent", "HIGH", ""]),
        "nice": st.sampled_from([0, 1, -1, 10000, 10001, -10001]),
        "restart_policy": st.sampled_from([*c.RESTART_POLICIES, "on_failure"]),
        "max_retries": st.integers(-1, 101), "min_runtime_s": st.sampled_from([0, 1.5, -1]),
        "array": st.sampled_from([None, "0-3", "0-3%2", " 1, 3,5-7 ", "0-15:4%1", "3-1", "0-3%0", "a", "", "0-9% 2"]),
        "dependencies": st.lists(st.fixed_dictionaries({"kind": st.sampled_from([*c.DEPENDENCY_KINDS, "before"]),
                                                        "job_id": words}), max_size=2),
        "tolerations": st.lists(st.fixed_dictionaries({
            "operator": st.sampled_from(["Equal", "Exists", "equal"]),
            "effect": st.sampled_from(["", *c.TAINT_EFFECTS, "NoRun"])}), max_size=2),
        "affinity": st.sampled_from([None, {"node_required": [{"key": "zone", "operator": "Near"}]}]),
        "open_mode": st.sampled_from(["truncate", "append", "w"]),
        "cwd": st.sampled_from(["", "/home/a", "/a\nb", "rel", "/" + "x" * 4096]),
        "image": st.sampled_from(["", "localhost/busybox:latest", "-rm", "a b"]),
        "sim_runtime_s": st.sampled_from([None, 0, 5, -1]),
        "resources": st.fixed_dictionaries({}, optional={
            "cpus": st.sampled_from([1, 0, 0.0001, 2.5, "2", "500m", "500M", " 1.5 ", "-0", "1e3", 1e6, 1e6 + 1]),
            "memory": st.sampled_from([1, 0, "8g", "8 Gi", "16GB", "8 GiB", "1.5", "1.5k", "1.0", "+2m", "-0",
                                       2**60, 2**60 + 1, "1Zi", "512 b"]),
            "gpus": st.integers(0, 2) | st.just(513),
            "gpu_type": st.sampled_from([None, "", "a100", "A100", " a100 ", "h100", "a100-80gb", "a100-x-y"]),
            "gpu_memory": st.sampled_from([None, 0, "40Gi", "40 GiB", -1, "1.5"]),
        }),
    }


@st.composite
def submissions(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "JobSubmitted", "job_id": draw(st.sampled_from(["j-1", "J_2", "j.1"])),
                            "tenant": "acme", "command": ["true"]}
    for key, values in _field_values().items():
        if draw(st.integers(0, 4)) == 0:  # a few fields at a time, so that some submissions are accepted
            body[key] = draw(values)
    return body


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=submissions())
def test_what_submission_accepts_the_schema_accepts(body):
    """One direction, exactly: the schema is never stricter than the core. (It cannot say everything the
    core refuses: a total over the job's tasks, an empty command unless simulated, a cycle.)"""
    core = SubmissionCore()
    state = core.initial()
    state, _, _ = fold_record(core, state, Record(1, "horizon.evt.agent.NodeRegistered.n1", encode(node("n1")), 1.0))
    state, _, error = fold_record(core, state, Record(2, "horizon.in.acme.submit", json.dumps(body).encode(), 2.0,
                                                      {"Nats-Msg-Id": "m2"}))
    verdicts = core.decide(state)
    for event in verdicts:
        assert_valid(event)
    if error is None and any(isinstance(e, c.JobAccepted) for e in verdicts):
        assert not errors("JobSubmitted", body), errors("JobSubmitted", body)


# ----------------------------------------------------------------------------- 4. the patterns are the parsers


def _accepts(parse: Any, text: str) -> bool:
    try:
        parse(text)
    except ResourceError as exc:
        return "larger than" in str(exc) or "million cores" in str(exc)  # bounds no pattern states
    return True


quantity = st.text(alphabet="0123456789.+- \tkKmMgGtTpPiIbBeE_x", max_size=8)


@settings(max_examples=3000, deadline=None)
@given(quantity)
def test_the_memory_pattern_is_the_parser(text):
    assert bool(re.match(memory_pattern(), text)) == _accepts(parse_memory, text)
    try:
        positive = parse_memory(text) > 0
    except ResourceError as exc:
        positive = "larger than" in str(exc)
    assert bool(re.match(memory_pattern(positive=True), text)) == positive


@settings(max_examples=3000, deadline=None)
@given(quantity)
def test_the_cpu_pattern_is_the_parser(text):
    accepted = _accepts(parse_cpus, text)
    assert bool(re.match(cpus_pattern(positive=False), text)) == accepted
    try:
        positive = parse_cpus(text) > 0
    except ResourceError as exc:
        positive = "million cores" in str(exc)
    assert bool(re.match(cpus_pattern(), text)) == positive


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.text(alphabet="aZ09_-. \t", max_size=10), st.text(alphabet="a", min_size=60, max_size=70)))
def test_the_gpu_model_pattern_is_the_parser(text):
    assert bool(re.match(GPU_MODEL_PATTERN, text)) == _accepts(parse_gpu_model, text)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123-:,% 9", max_size=10))
def test_every_array_the_parser_accepts_matches_the_pattern(text):
    if _accepts(parse_array, text):
        assert re.match(ARRAY_PATTERN, text)


# ----------------------------------------------------------------------------- 5. the verdicts


def test_verdicts_are_what_the_submission_core_answers_each_verb_with():
    """Each verb's possible answers, caused by the input's sequence, as VERDICTS lists them; and
    a malformed input on any verb is answered with InputRejected."""
    core = SubmissionCore()
    state = core.initial()
    seq = 0
    seen: dict[str, set[str]] = {verb: set() for verb in VERDICTS}

    def fold(subject: str, data: bytes) -> int:
        nonlocal state, seq
        seq += 1
        state, _, _ = fold_record(core, state, Record(seq, subject, data, 1000.0 + seq, {"Nats-Msg-Id": f"m{seq}"}))
        return seq

    def answer(subject: str, data: bytes) -> list[c.Event]:
        at = fold(subject, data)
        out = core.decide(state)
        for event in out:
            assert event.causation_id == f"seq:{at}", event
            verb = subject.rsplit(".", 1)[1]
            assert event.event_type in VERDICTS[verb], (verb, event)
            seen[verb].add(event.event_type)
            assert_valid(event)
            fold(subjects.event_subject(core.name, event), encode(event))
        return out

    fold("horizon.evt.agent.NodeRegistered.n1", encode(node("n1")))
    job = {"type": "JobSubmitted", "job_id": "j1", "tenant": "acme", "command": ["true"]}
    answer("horizon.in.acme.submit", json.dumps(job).encode())
    answer("horizon.in.acme.submit", json.dumps(job).encode())  # the id is taken
    answer("horizon.in.acme.submit", json.dumps({**job, "job_id": "j2", "priority_class": "urgent"}).encode())
    for verb, event in (("hold", c.JobHoldRequested), ("release", c.JobReleaseRequested),
                        ("update", c.JobUpdateRequested), ("cancel", c.JobCancelRequested)):
        answer(f"horizon.in.acme.{verb}", encode(event(job_id="j1", tenant="acme")))
        answer(f"horizon.in.acme.{verb}", encode(event(job_id="nope", tenant="acme")))
    for verb in VERDICTS:
        out = answer(f"horizon.in.acme.{verb}", b'{"type": "JobSubmitted", "job_id": 7}')
        assert [e.event_type for e in out] == ["InputRejected"], (verb, out)
    assert seen["submit"] >= {"JobAccepted", "RequestRejected", "JobRejected", "InputRejected"}
    for verb in ("hold", "release", "update", "cancel"):
        assert "RequestRejected" in seen[verb] and len(seen[verb]) == 3, (verb, seen[verb])
