"""The common shape's path through ``normalise`` (services/submission/common_shape.py) answers every
submission byte for byte as the general path does.

Generated submissions (random fields, valid and not, most of them of the common shape, the others
setting one to three rarely set fields) go through the whole core twice, as encoded records on a
tenant's input subject: once as it runs, once with ``is_common`` answering False (every submission
then takes the general path). The encoded verdicts (``JobAccepted``, ``JobRejected``,
``InputRejected``, ...) must be the same bytes, in the same order.
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from events import catalogue as c
from events.codec import decode, encode
from services.domain.protocol import Record
from services.runtime.service import fold_record
from services.submission import normalise as normalise_module
from services.submission.common_shape import FREE_FIELDS, RARE_FIELDS, is_common
from services.submission.core import SubmissionCore
from tests.helpers import Feed, node

# Values each field may take: its default first, then valid ones, then invalid ones (a value that does not
# decode makes the record undecodable: answered InputRejected, on both paths alike).
_RESOURCES: dict[str, list[Any]] = {
    "cpus": [1, 2.5, "500m", "2", 64, 0.0001, 4, 0, -1, "abc", 0.0, -0.0, 65, "1e3"],
    "memory": ["1Gi", "512m", 1024, None, "1.5k", "16Gi", 0, "-1", "xx", 2**61, 0.5, "600Gi"],
    "gpus": [0, 1, 8, 2, 9, 99, -1],
    "gpu_type": [None, "a100", "A100-80GB", "", "a100-40gb", "zzz", "h100"],
    "gpu_memory": [None, "40Gi", "1", "100Gi", 0],
    "cpu_limit": [None, 4, 2, 0, "100m"],
    "memory_limit": [None, "2Gi", 0, "512m"],
}
_FREE: dict[str, list[Any]] = {
    "account": ["", "default", "acct1", "bad acct"],
    "user": ["", "alice", "bad user!"],
    "name": ["", "n", "x" * 300, "a name"],
    "command": [["true"], ["echo", "hi"], [], [""], ["x" * 70_000]],
    "env": [{}, {"A": "1"}, {f"K{i}": "v" for i in range(300)}],
    "nodes": [1, 2, 3, 0, 5000],
    "tasks_per_node": [1, 2, 0, 1000],
    "ntasks": [None, 1, 2, 0, 5],
    "spread_tasks": [False, True],
    "memory_per_node": [None, None, 2**30, 0],
    "min_nodes": [None, 1, 3],
    "min_available": [None, 1, 2, 100],
    "assembly_timeout_s": [None, 60, 0],
    "gpus_per_node": [0, 2, -1],
    "time_limit_s": [None, 60, 0, -5, 1e12, 3600.5, -0.0],
    "scheduling_timeout_s": [None, 10, 0, -1],
    "dependency_timeout_s": [None, 10, 0],
    "min_runtime_s": [0.0, -0.0, 5, -1, 0],
    "max_retries": [0, 3, -1, 1000],
    "priority_class": ["normal", "high", "low", "bogus", "critical", "scavenger"],
    "nice": [0, 5, -5, 100_000],
    "qos": ["", "gold"],
    "profile": ["default", "", "pack", "spread"],
    "partitions": [[], ["cpu"], ["nope"], ["bad name!"], ["gpu", "cpu"], [" "]],
    "preemptible": [True, False],
    "labels": [{}, {"k": "v"}],
    "sim_runtime_s": [None, 0.0, 10, -1],
    "sim_exit_code": [0, 1],
    "cwd": ["", "/tmp", "rel", "/a\x00b", "/" + "d" * 5000],
}
_RARE: dict[str, list[Any]] = {
    "payload": [None, {"a": [1]}, 0, [[[[]]]]],
    "submit_env": [None, {}, {"A": "B"}],
    "array": [None, "0-3", "0-3%2", "bad", "0-200000"],
    "dependencies": [[], [{"kind": "after-ok", "job_id": "x1"}], [{"kind": "bogus", "job_id": "x"}]],
    "after_datasets": [[], ["ds1"], ["bad name!"]],
    "restart_policy": ["never", "on-failure", "bogus"],
    "node_selector": [{}, {"a": "b"}],
    "affinity": [None],
    "tolerations": [[], [{"key": "k", "operator": "Exists"}], [{"key": "k", "operator": "Bad"}]],
    "checkpoint_signal": [None, "SIGUSR1"],
    "stdout": ["", "out-%j.txt", "%q"],
    "stderr": ["", "err-%j.txt", "%"],
    "open_mode": ["truncate", "append", "bad"],
    "image": ["", "localhost/busybox:latest", "BAD IMAGE"],
    "exclusive": [False, True],
    "whole_node_memory": [False, True],
    "constraint": ["", "a100", "(("],
    "nodelist": [[], ["n[1-2]"], ["zz1"]],
    "exclude_nodes": [[], ["n2"]],
    "requeue": [True, False],
    "time_min_s": [None, 30, 0],
    "limit_signal": [None, {"signal": "USR1", "before_s": 60}, {"signal": "NOPE", "before_s": 1}],
    "singleton": [False, True],
    "hold": [False, True],
    "begin_ts": [None, 0, 1e9],
    "deadline_ts": [None, 0, 2e9],
    "datasets": [[], ["ds"], ["bad name!"]],
    "licenses": [{}, {"matlab": 1}, {"nope": 1}, {"matlab": 99}],
    "components": [[], [{"resources": {"cpus": 1}}]],
}


def _pick(rng: random.Random, values: list[Any]) -> Any:
    """Mostly one of the first half (the default and valid values), now and then any."""
    return rng.choice(values if rng.random() < 0.15 else values[:max(1, (len(values) + 1) // 2)])


def _submission(rng: random.Random, i: int) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "JobSubmitted", "v": 2, "job_id": f"j-{i}", "tenant": "acme"}
    if rng.random() < 0.05:
        body["job_id"] = rng.choice(["bad id!", "x" * 200, "j-0", ""])
    if rng.random() < 0.03:
        body["tenant"] = rng.choice(["other", "_x"])
    if rng.random() < 0.9:
        body["resources"] = {k: _pick(rng, v) for k, v in _RESOURCES.items() if rng.random() < 0.4}
    for key, values in _FREE.items():
        if rng.random() < 0.15:
            body[key] = _pick(rng, values)
    if "command" not in body and "sim_runtime_s" not in body and rng.random() < 0.8:
        body["command"] = ["true"]
    if rng.random() < 0.35:  # the others leave every rare field at its default
        for key in rng.sample(sorted(_RARE), rng.randint(1, 3)):
            body[key] = _pick(rng, _RARE[key])
    return body


def _cluster(feed: Feed, with_partitions: bool) -> None:
    feed.evt("agent", node("n1", gpu_type="a100", variant="80gb"))
    feed.evt("agent", node("n2", gpus=0, cpus=16, memory=64 * 2**30))
    feed.admin("license", c.LicenseConfigured(name="matlab", count=3))
    if with_partitions:
        feed.admin("partition", c.PartitionConfigured(name="cpu", nodes=["n2"], default=True, max_time_s=7200,
                                                      default_mem_per_cpu=2**30))
        feed.admin("partition", c.PartitionConfigured(name="gpu", nodes=["n1"], max_nodes=1,
                                                      default_mem_per_gpu=8 * 2**30, profile="pack"))


def _verdicts(bodies: list[bytes], with_partitions: bool) -> list[bytes]:
    feed = Feed(SubmissionCore())
    _cluster(feed, with_partitions)
    out: list[bytes] = []
    for start in range(0, len(bodies), 50):  # decided in rounds, as the runner does
        for data in bodies[start:start + 50]:
            feed.seq += 1
            feed.time += 0.5
            feed.state, _event, _error = fold_record(feed.core, feed.state, Record(
                feed.seq, "horizon.in.acme.submit", data, feed.time, {"Nats-Msg-Id": f"m{feed.seq}"}))
        for event in feed.settle():
            out.append(encode(event))
    return out


@pytest.mark.parametrize("with_partitions", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_common_shape_answers_as_the_general_path_byte_for_byte(monkeypatch, seed, with_partitions):
    rng = random.Random(seed)
    bodies = [json.dumps(_submission(rng, i)).encode() for i in range(1500)]
    common = 0
    for data in bodies:
        try:
            common += is_common(decode(data))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - an undecodable body: answered InputRejected on both paths
            pass
    assert common > 500  # the fast path is taken often enough to be tested
    fast = _verdicts(bodies, with_partitions)
    monkeypatch.setattr(normalise_module, "is_common", lambda sub: False)
    general = _verdicts(bodies, with_partitions)
    assert len(fast) == len(general)
    kinds: dict[str, int] = {}
    for a, b in zip(fast, general, strict=True):
        assert a == b
        kind = msgspec.json.decode(a)["type"]
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds.get("JobAccepted", 0) > 100 and kinds.get("JobRejected", 0) > 100, kinds


def test_a_rare_field_set_is_not_the_common_shape():
    base = c.JobSubmitted(job_id="j", tenant="acme")
    assert is_common(base)
    for key, values in _RARE.items():
        assert key in RARE_FIELDS
        for value in values[1:]:
            body = {"type": "JobSubmitted", "v": 2, "job_id": "j", "tenant": "acme", key: value}
            try:
                sub = decode(json.dumps(body).encode())
            except Exception:  # noqa: BLE001 - does not decode: never reaches normalise
                continue
            assert not is_common(sub), (key, value)  # type: ignore[arg-type]


def test_every_field_is_free_or_rare_and_the_generator_knows_it():
    fields = set(c.JobSubmitted.__struct_fields__)
    assert set(RARE_FIELDS) | FREE_FIELDS == fields
    assert set(_RARE) == set(RARE_FIELDS)
    envelope = {"id", "v", "ts", "causation_id", "correlation_id", "source", "job_id", "tenant", "resources"}
    assert set(_FREE) | envelope == FREE_FIELDS
