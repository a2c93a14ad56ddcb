"""The published contract against a running ``horizon up``: the Node.js example client written from
the AsyncAPI document alone (``docs/examples/node-client``) submits, reads its PubAck, gets its verdict
by ``causation_id`` and follows its job; a malformed input gets InputRejected. Its ``operations.mjs``
does every operation of the document from a client's side (every input verb, a tenant's and an
operator's, every request/reply subject, the feeds, heartbeats, dead letters), and everything it got
is held against the document's schemas. And every request/reply subject the document lists answers
as its reply schema says, asked from Python too.

The client's test needs Node.js (skipped without it, except in CI, where it fails)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from events.asyncapi import VERDICTS
from tests.contract.test_asyncapi import doc, validator
from tests.front.test_cli_up import free_port, interrupt

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "docs" / "examples" / "node-client"
HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``horizon up`` (this machine as its node, jobs run for real) on a free port, stopped by its PID
    (Ctrl-C) afterwards."""
    port = free_port()
    data = tmp_path_factory.mktemp("up") / "h"
    proc = subprocess.Popen([*HORIZON, "up", "--data-dir", str(data), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    url = f"nats://127.0.0.1:{port}"
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == url
        yield url
    finally:
        interrupt(proc)


def node_client() -> str:
    node_bin, npm = shutil.which("node"), shutil.which("npm")
    if node_bin is None or npm is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Node.js example client: install Node.js 20 and npm")
        pytest.skip("Node.js is not installed: the example client (docs/examples/node-client) needs it")
    if not (CLIENT / "node_modules" / "nats").is_dir():
        subprocess.run([npm, "ci", "--prefix", str(CLIENT), "--no-audit", "--no-fund"], check=True,
                       capture_output=True, timeout=600)
    return node_bin


def test_the_node_client_gets_its_verdict_follows_its_job_and_sees_input_rejected(up):
    node_bin = node_client()
    run = subprocess.run([node_bin, str(CLIENT / "client.mjs"), up, "--job-id", "from-node", "--timeout", "60"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    ack = next(line for line in lines if line.startswith("PubAck: stream HORIZON seq "))
    seq = int(ack.rsplit(" ", 1)[1])
    assert f'verdict (causation_id seq:{seq}): JobAccepted job_id="from-node"' in run.stdout
    order = [word for line in lines for word in ("JobScheduled", "JobStarted", "JobSucceeded") if f": {word} " in line]
    assert order == ["JobScheduled", "JobStarted", "JobSucceeded"], run.stdout
    assert "InputRejected" in lines[-1] and 'path="$.resources.gpus"' in lines[-1], run.stdout


def test_a_rejected_job_makes_the_node_client_exit_1(up):
    node_bin = node_client()
    run = subprocess.run([node_bin, str(CLIENT / "client.mjs"), up, "--gpus", "1", "--no-malformed"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "JobRejected" in run.stdout and 'field="resources.gpus"' in run.stdout, run.stdout


def _problems(ref: str, instance: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(ref).iter_errors(instance)]


def test_the_node_client_does_every_operation_of_the_document(up, tmp_path):
    node_bin = node_client()
    printed = subprocess.run([*HORIZON, "schema", "--asyncapi"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert printed.returncode == 0, printed.stderr
    document = tmp_path / "horizon.asyncapi.json"
    document.write_text(printed.stdout)
    run = subprocess.run([node_bin, str(CLIENT / "operations.mjs"), up, str(document), "--timeout", "60"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    summary, done = lines[-1], lines[:-1]
    d = json.loads(printed.stdout)
    assert summary["missing"] == [] and summary["failures"] == [] and summary["skipped"] == [], summary
    assert set(summary["covered"]) == set(d["operations"]) == {line["op"] for line in done}

    # everything it got, against the document
    for line in done:
        op = line["op"]
        if op.startswith("in.") and "answer" in line:
            assert not _problems("#/components/schemas/PubAck", line["answer"]), line
            for verdict in line["verdicts"]:
                assert verdict["causation_id"] == f"seq:{line['answer']['seq']}", (op, verdict)
                assert not _problems(f"#/components/schemas/{verdict['type']}", verdict), (op, verdict)
                if not op.startswith("in._admin."):
                    assert verdict["type"] in VERDICTS[op.removeprefix("in.")], (op, verdict)
            if "config" in line:
                assert line["config"]["seen"] is True, line
                assert not _problems("#/components/messages/query.config.reply/payload", line["config"]), line
        elif isinstance(line.get("received"), dict):
            event = line["received"]
            assert not _problems(f"#/components/schemas/{event['type']}", event), (op, event)
        elif op == "dlq":
            assert not _problems("#/components/messages/dlq/headers", line["headers"]), line
            assert line["headers"]["Horizon-Original-Subject"] == "horizon.in.default.submit"
        elif "answer" in line:
            assert not _problems(f"#/components/messages/{op}.reply/payload", line["answer"]), (op, line["answer"])
    # the promises a client relies on, as it saw them
    cancels = [line for line in done if line["op"] == "in.cancel"]
    stop = next(line for line in cancels if line.get("verdicts") and line["verdicts"][0]["type"] == "JobStopRequested")
    carried_out = next(line["received"] for line in cancels if "received" in line)
    assert carried_out["type"] == "JobCancelled" and carried_out["source"].startswith("agent")
    assert carried_out["causation_id"] == stop["verdicts"][0]["causation_id"]
    array = next(line for line in done if line["op"] == "in.submit" and len(line.get("verdicts", [])) == 3)
    assert {v["array_tasks"] for v in array["verdicts"]} == {3}
    paths = [line["verdicts"][0]["path"] for line in done
             if line.get("verdicts") and line["verdicts"][0]["type"] == "InputRejected"]
    assert sorted(paths) == ["$.job_id", "$.resources.gpus"]
    received = {line["op"] for line in done if "received" in line}
    assert {"evt.submission.JobAccepted", "evt.placement.JobScheduled", "evt.agent.JobStarted",
            "evt.agent.JobSucceeded", "evt.agent.JobCancelled", "evt.submission.JobStopRequested",
            "evt.submission.InputRejected", "evt.inventory.RequestRejected", "tenantFeed", "hb"} <= received


async def _ask_every_view(url: str) -> dict[str, tuple[str, Any]]:
    """Each request/reply subject of the document asked once with a request its schema allows."""
    nc = await nats.connect(url)
    try:
        nodes = json.loads((await nc.request("horizon.query.nodes", b"{}", timeout=10)).data)
        node = nodes["nodes"][0]["node"]
        job = "from-python"
        sub = {"type": "JobSubmitted", "job_id": job, "tenant": "default", "command": ["true"], "sim_runtime_s": 1}
        js = nc.jetstream()
        ack = await js.publish("horizon.in.default.submit", json.dumps(sub).encode(), headers={"Nats-Msg-Id": job})
        for _ in range(100):  # until the read model has it
            if json.loads((await nc.request("horizon.query.job", json.dumps({"job_id": job}).encode(),
                                            timeout=10)).data)["job"]:
                break
            await asyncio.sleep(0.1)
        asks = {
            "query.jobs": ("horizon.query.jobs", {"states": ["SUCCEEDED", "PENDING"], "limit": 5}),
            "query.jobs.tenant": ("horizon.query.jobs.default", {}),
            "query.job": ("horizon.query.job", {"job_id": job}),
            "query.job.tenant": ("horizon.query.job.default", {"job_id": job}),
            "query.decisions": ("horizon.query.decisions", {"job_id": job}),
            "query.queue": ("horizon.query.queue", {}),
            "query.queue.tenant": ("horizon.query.queue.default", {}),
            "query.nodes": ("horizon.query.nodes", {}),
            "query.gpus": ("horizon.query.gpus", {"limit": 10}),
            "query.allocations": ("horizon.query.allocations", {}),
            "query.allocations.tenant": ("horizon.query.allocations.default", {}),
            "query.usage": ("horizon.query.usage", {"history": True}),
            "query.priority": ("horizon.query.priority", {}),
            "query.preempt": ("horizon.query.preempt", {"job_id": job}),
            "query.config": ("horizon.query.config", {"seq": ack.seq}),
            "query.partitions": ("horizon.query.partitions", {}),
            "query.licenses": ("horizon.query.licenses", {}),
            "validate": ("horizon.validate.default", sub),
            "logs": (f"horizon.logs.{node}", {"job_id": job}),
            "logs.tenant": (f"horizon.logs.{node}.default", {"job_id": job, "stream": "stderr"}),
        }
        answers = {}
        for key, (subject, request) in asks.items():
            reply = await nc.request(subject, json.dumps(request).encode(), timeout=10)
            answers[key] = (subject, json.loads(reply.data))
        answers["query.jobs.bad"] = ("horizon.query.jobs", json.loads(
            (await nc.request("horizon.query.jobs", b'{"colour": "red"}', timeout=10)).data))
        return answers
    finally:
        await nc.close()


def test_every_request_reply_subject_answers_as_the_document_says(up):
    d = doc()
    answers = asyncio.run(_ask_every_view(up))
    # the intake and the agents' step launches (agent to agent) are not a client's to ask here
    served = {key for key, op in d["operations"].items() if "reply" in op and key not in ("intake", "step")
              and not key.startswith("in.")}
    assert served == {k for k in answers if not k.endswith(".bad")}, served ^ set(answers)
    for key, (subject, answer) in answers.items():
        ref = f"#/components/messages/{key.removesuffix('.bad')}.reply/payload"
        problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(ref).iter_errors(answer)]
        assert not problems, (subject, problems, answer)
    assert "error" in answers["query.jobs.bad"][1]
    assert answers["query.job"][1]["job"]["job_id"] == "from-python"
    assert answers["validate"][1]["ok"] is True
