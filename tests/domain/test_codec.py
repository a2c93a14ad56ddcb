"""The codec: every event round-trips; unknown fields are tolerated; old versions are upcast forever."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import DecodeError, decode, encode
from events.catalogue import EVENT_TYPES, JobSubmitted, ResourceRequest
from events.schema import catalogue_schema, event_schema

GOLDEN = Path(__file__).parents[1] / "data" / "golden"

_text = st.text(max_size=12)


def strategy_for(t: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for any type msgspec can describe (the annotations are the schema)."""
    mi = msgspec.inspect
    if isinstance(t, mi.Metadata):  # a field's description: the type is inside
        return strategy_for(t.type)
    if isinstance(t, mi.IntType):
        return st.integers(min_value=-(2**53), max_value=2**53)
    if isinstance(t, mi.FloatType):
        return st.floats(allow_nan=False, allow_infinity=False)
    if isinstance(t, mi.StrType):
        return _text
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.AnyType):
        return st.one_of(st.none(), st.integers(), _text, st.dictionaries(_text, _text, max_size=2))
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, mi.UnionType):
        return st.one_of(*[strategy_for(x) for x in t.types])
    if isinstance(t, mi.ListType):
        return st.lists(strategy_for(t.item_type), max_size=3)
    if isinstance(t, mi.VarTupleType):
        return st.lists(strategy_for(t.item_type), max_size=3).map(tuple)
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy_for(t.key_type), strategy_for(t.value_type), max_size=3)
    if isinstance(t, mi.StructType):
        return st.fixed_dictionaries({f.name: strategy_for(f.type) for f in t.fields}).map(lambda kw: t.cls(**kw))
    if isinstance(t, mi.RawType):  # JSON embedded as it is (InputRelayed.input)
        return st.sampled_from([b"null", b'{"type": "PolicyConfigured", "policy": "fcfs"}', b"[1, 2]"]).map(msgspec.Raw)
    raise NotImplementedError(t)


def event_strategy(cls: type) -> st.SearchStrategy[Any]:
    info = msgspec.inspect.type_info(cls)
    fields = {f.name: strategy_for(f.type) for f in info.fields if f.name != "v"}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


any_event = st.one_of(*[event_strategy(cls) for cls in EVENT_TYPES.values()])


@settings(max_examples=400)
@given(any_event)
def test_every_event_round_trips(event):
    assert decode(encode(event)) == event


def test_catalogue_covers_the_spec():
    required = """JobSubmitted JobAccepted JobRejected JobCancelRequested JobCancelled JobHeld JobReleased
    JobPriorityChanged JobScheduled JobStarted JobSucceeded JobFailed JobRequeued PreemptionRequested JobPreempted
    JobCheckpointed JobUnschedulable JobDependencyNeverSatisfied NodeRegistered NodeReady NodeCordoned NodeDraining
    NodeLost NodeRemoved AccountConfigured FairShareConfigured SchedulingCycleCompleted PlacementBlocked""".split()
    assert set(required) <= set(EVENT_TYPES)


def test_unknown_fields_from_newer_producers_are_tolerated():
    payload = {"type": "JobSubmitted", "job_id": "j1", "tenant": "acme", "from_the_future": {"x": 1}}
    event = decode(json.dumps(payload).encode())
    assert isinstance(event, JobSubmitted) and event.job_id == "j1"


def test_missing_v_means_the_current_version():
    event = decode(b'{"type":"JobSubmitted","job_id":"j1","tenant":"acme","resources":{"gpus":1}}')
    assert event.v == JobSubmitted.VERSION and event.resources.gpus == 1


def test_golden_v1_payload_is_upcast_forever():
    event = decode((GOLDEN / "JobSubmitted.v1.json").read_bytes())
    assert isinstance(event, JobSubmitted)
    assert event.v == 2
    assert event.resources == ResourceRequest(cpus=16, memory="64g", gpus=4, gpu_type="a100-80gb")
    assert event.time_limit_s == 720 * 60
    assert (event.job_id, event.tenant, event.account, event.priority_class) == (
        "train-resnet-0001", "acme", "vision", "high")
    assert event.labels == {"team": "vision"}


def test_golden_v2_payload_decodes():
    event = decode((GOLDEN / "JobSubmitted.v2.json").read_bytes())
    assert isinstance(event, JobSubmitted)
    assert (event.nodes, event.tasks_per_node, event.resources.gpu_type) == (2, 4, "h100-80gb")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\xffgarbage", "not a JSON object"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"job_id": "x"}', 'missing or non-string "type"'),
        (b'{"type": "JobTeleported"}', "unknown event type 'JobTeleported'"),
        (b'{"type": "JobSubmitted", "v": 7, "job_id": "x", "tenant": "a"}', "newer than this Horizon"),
        (b'{"type": "JobSubmitted", "tenant": "a"}', "missing required field `job_id`"),
        (b'{"type": "JobSubmitted", "job_id": "x", "tenant": "a", "nodes": "two"}', "Expected `int`"),
    ],
)
def test_decode_errors_say_why(data, message):
    with pytest.raises(DecodeError) as info:
        decode(data)
    assert message in str(info.value)


def test_schema_covers_every_event_and_one_event():
    schema = catalogue_schema()
    names = set(schema["$defs"])
    assert set(EVENT_TYPES) <= names
    one = event_schema("JobSubmitted")
    props = one["$defs"]["JobSubmitted"]["properties"]
    assert {"job_id", "tenant", "resources", "type"} <= set(props)
    assert set(one["$defs"]["JobSubmitted"]["required"]) == {"job_id", "tenant", "type"}
    with pytest.raises(KeyError, match="known:"):
        event_schema("Nope")


def test_a_flat_submission_without_v_is_read_as_v1_and_keeps_its_resources():
    """A client that writes v1's flat fields and no "v" asked for 2 GPUs: it gets 2, not the default 0."""
    event = decode(b'{"type": "JobSubmitted", "job_id": "a", "tenant": "t", "gpus": 2, "memory": "4g", '
                   b'"time_limit_min": 3}')
    assert event.v == 2 and event.resources.gpus == 2 and event.resources.memory == "4g"
    assert event.time_limit_s == 180
    assert decode(b'{"type": "JobSubmitted", "job_id": "a", "tenant": "t"}').resources.gpus == 0


def test_a_number_out_of_range_in_an_older_body_is_a_decode_error() -> None:
    """Found by the AsyncAPI fuzz test: a body without ``v`` is decoded whole to find its version, and a
    number msgspec cannot hold (``1e9308``) must be bad input with its reason, not a crash."""
    from events.codec import DecodeError, decode

    for body in (b'{"type": "JobSubmitted", "job_id": "", "tenant": null, "__proto__": [[], [], [[1e9308]]]}',
                 b'{"type": "JobSubmitted", "job_id": "a", "tenant": "t", "v": 1, "x": 1e9308}'):
        with pytest.raises(DecodeError, match="JobSubmitted: Number out of range"):
            decode(body)
