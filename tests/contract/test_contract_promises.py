"""The published contract as a client written from it alone reads it (issue 30, part 4).

A client written from ``horizon schema --asyncapi`` and the docs (in Go) found the two disagreeing
with what Horizon did. Each promise here is checked where a client meets it: as a tenant's own
connection to a real ``horizon up --auth --executor sim`` (one for the module), and in the words of
the document and of docs/events.md, which must say what that connection saw.

1. A cancel's answers carry ``causation_id`` ``seq:<n>``: submission's verdict, and the agent's
   ``JobCancelled`` that carries out a cancel of a started job.
2. A verdict's id names a tenant's job by its key (``submission/JobCancelled/acme:g-2/<n>``), never
   ``_invalid-<digest>`` for a valid job.
3. ``horizon.query.job`` names the job and its nodes in its attempts as its row does.
4. ``InputRejected.path`` of a missing field is its JSON path; the ``seq-<n>`` and ``_`` aggregate
   tokens are in the document.
5. An array's ``JobAccepted`` say how many tasks there are (``array_tasks``).
6. A client's own ``id`` is not echoed: the verdict carries ``seq:<n>``; a second submission is
   answered ``RequestRejected``, a malformed one ``InputRejected`` (docs/events.md says so).
7. The document states how a tenant authenticates and how long to wait for a verdict.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from events import catalogue as c
from events.asyncapi import VERDICTS
from events.codec import encode
from events.transport import VERDICT_WAIT_S
from tests.contract.test_asyncapi import doc, validator
from tests.front.test_tenant_boundary import AuthUp, Tenant

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthUp]:
    stack = AuthUp(tmp_path_factory.mktemp("contract") / "data")
    try:
        yield stack
    finally:
        stack.stop()


class Client(Tenant):
    """A tenant's connection that also keeps the subject each event of its feed came on."""

    @classmethod
    async def connect(cls, up: AuthUp, name: str) -> Client:
        client = cls(name, await nats.connect(up.urls[name]))

        async def keep(msg: Any) -> None:
            client.events.append({**json.loads(msg.data), "__subject": msg.subject})

        client.sub = await client.nc.subscribe("horizon.evt.>", cb=keep)
        await client.nc.flush()
        return client

    async def ask(self, verb: str, event: c.Event, msg_id: str) -> int:
        ack = await self.send(verb, encode(event), {"Nats-Msg-Id": msg_id})
        assert "error" not in ack, ack
        return int(ack["seq"])

    async def verdict(self, seq: int, timeout: float = 20) -> dict[str, Any]:
        return await self.wait(lambda e: e.get("causation_id") == f"seq:{seq}" and e.get("source") == "submission",
                               timeout, f"the verdict on seq {seq}")


def schema_errors(event: dict[str, Any]) -> list[str]:
    body = {k: v for k, v in event.items() if k != "__subject"}
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator(f"#/components/schemas/{body['type']}").iter_errors(body)]


# ----------------------------------------------------------------------------- 1 and 2: a cancel's answers


async def test_a_cancels_answers_carry_its_seq_and_name_the_tenants_job(up):
    acme = await Client.connect(up, "acme")
    try:
        await acme.ask("submit", c.JobSubmitted(job_id="g-002", tenant="acme", sim_runtime_s=600), "g-002")
        await acme.wait(lambda e: e.get("type") == "JobStarted" and e.get("job_id") == "acme:g-002", 30,
                        "g-002 starting")
        await acme.ask("submit", c.JobSubmitted(job_id="g-003", tenant="acme", sim_runtime_s=1, hold=True), "g-003")
        await acme.wait(lambda e: e.get("type") == "JobAccepted" and e.get("job_id") == "acme:g-003", 20,
                        "g-003 accepted")

        # a started job: submission's verdict JobStopRequested, then the agent's JobCancelled, both seq:N
        seq = await acme.ask("cancel", c.JobCancelRequested(job_id="g-002", tenant="acme"), "g-002/cancel/1")
        verdict = await acme.verdict(seq)
        assert verdict["type"] == "JobStopRequested", verdict
        assert verdict["id"] == f"submission/JobStopRequested/acme:g-002/{seq}"
        ended = await acme.wait(lambda e: e.get("type") == "JobCancelled" and e.get("job_id") == "acme:g-002", 30,
                                "g-002 cancelled")
        assert ended["source"].startswith("agent") and ended["causation_id"] == f"seq:{seq}", ended

        # a held job: its other requests and its cancel are answered by submission, named by its key
        answers = {}
        for verb, event in (("update", c.JobUpdateRequested(job_id="g-003", tenant="acme", priority_class="low")),
                            ("hold", c.JobHoldRequested(job_id="g-003", tenant="acme")),  # held already
                            ("cancel", c.JobCancelRequested(job_id="g-003", tenant="acme"))):
            seq = await acme.ask(verb, event, f"g-003/{verb}/1")
            answers[verb] = (seq, await acme.verdict(seq))
        for verb, kind in (("update", "JobPriorityChanged"), ("hold", "RequestRejected"), ("cancel", "JobCancelled")):
            seq, answer = answers[verb]
            assert answer["type"] == kind and kind in VERDICTS[verb], (verb, answer)
            assert answer["id"] == f"submission/{kind}/acme:g-003/{seq}", answer
            assert answer["__subject"] == f"horizon.evt.submission.{kind}.acme:g-003"

        # the same job id submitted again (another Msg-Id): RequestRejected, named alike
        seq = await acme.ask("submit", c.JobSubmitted(job_id="g-002", tenant="acme", sim_runtime_s=1), "g-002-again")
        again = await acme.verdict(seq)
        assert again["type"] == "RequestRejected" and again["verb"] == "submit", again
        assert again["id"] == f"submission/RequestRejected/acme:g-002/{seq}"

        assert not [e["id"] for e in acme.events if "_invalid-" in (e.get("id") or "")]
        for event in acme.events:
            assert not schema_errors(event), (event, schema_errors(event))
    finally:
        await acme.close()
    # ... and the document says the same of the agent's JobCancelled
    d = doc()
    assert "`seq:<n>`" in d["operations"]["evt.agent.JobCancelled"]["description"]
    assert "same `causation_id`" in d["operations"]["in.cancel"]["description"]
    assert d["components"]["messages"]["JobCancelled"]["correlationId"]["location"] == "$message.payload#/causation_id"


# ----------------------------------------------------------------------------- 3: query.job


async def test_query_job_names_the_job_and_its_nodes_in_its_attempts_as_its_row_does(up):
    acme = await Client.connect(up, "acme")
    try:
        await acme.ask("submit", c.JobSubmitted(job_id="g-005", tenant="acme", sim_runtime_s=0.2), "g-005")
        await acme.wait(lambda e: e.get("type") == "JobSucceeded" and e.get("job_id") == "acme:g-005", 30,
                        "g-005 succeeding")
        for _ in range(100):  # until the read model has its end
            reply = await acme.nc.request("horizon.query.job", json.dumps({"job_id": "g-005"}).encode(), timeout=10)
            body = json.loads(reply.data)
            if body["job"] and body["job"]["state"] == "SUCCEEDED" and body["attempts"][0]["ended_ts"]:
                break
            await asyncio.sleep(0.1)
    finally:
        await acme.close()
    row, attempts = body["job"], body["attempts"]
    assert row["job_id"] == "g-005" and [a["job_id"] for a in attempts] == ["g-005"]
    (first,) = attempts
    assert isinstance(row["nodes"], int) and isinstance(first["nodes"], int)
    assert first["nodes"] == len(first["allocation"]) == row["nodes"] == 1
    assert first["node"] == row["node"] == first["allocation"][0]["node"], (row, first)
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator("#/components/messages/query.job.reply/payload").iter_errors(body)]
    assert not problems, problems
    answer = doc()["components"]["messages"]["query.job.reply"]["payload"]["anyOf"][0]  # or {"error": ...}
    attempt = answer["properties"]["attempts"]["items"]
    assert attempt["properties"]["nodes"]["type"] == "integer" and "description" in attempt["properties"]["node"]
    # the tools' keys of `horizon jobs --json` stay as they were; `horizon show` says the attempt's nodes
    rows = {r["job_id"]: r for r in json.loads(up.cli("jobs", "--json", tenant="acme", ok=True).stdout)}
    assert {"job_id", "state", "reason"} <= set(rows["g-005"]) and rows["g-005"]["state"] == "SUCCEEDED"
    shown = up.cli("show", "g-005", tenant="acme", ok=True).stdout
    assert f"attempt 1: SUCCEEDED on {row['node']} from" in shown, shown


# ----------------------------------------------------------------------------- 4: InputRejected's path


async def test_a_malformed_input_names_the_json_path_of_its_fault(up):
    acme = await Client.connect(up, "acme")
    try:
        cases = [
            ("submit", {"type": "JobSubmitted", "tenant": "acme", "command": ["true"]}, "$.job_id", None),
            ("cancel", {"type": "JobCancelRequested", "tenant": "acme"}, "$.job_id", None),
            ("hold", {"type": "JobSubmitted", "job_id": "p-1", "tenant": "acme"}, "$.type", "acme:p-1"),
            ("submit", {"type": "JobSubmitted", "job_id": "p-2", "tenant": "acme", "command": ["true"],
                        "affinity": {"node_required": [{"operator": "In"}]}},
             "$.affinity.node_required[0].key", "acme:p-2"),
            ("submit", {"type": "JobSubmitted", "job_id": "p-3", "tenant": "acme", "resources": {"gpus": "two"}},
             "$.resources.gpus", "acme:p-3"),
        ]
        for i, (verb, body, path, key) in enumerate(cases):
            ack = await acme.send(verb, json.dumps(body).encode(), {"Nats-Msg-Id": f"bad-{i}"})
            verdict = await acme.verdict(ack["seq"])
            assert verdict["type"] == "InputRejected" and verdict["path"] == path, (body, verdict)
            token = key or f"seq-{ack['seq']}"  # no readable job id: the aggregate is the input's seq
            assert verdict["correlation_id"] == token and verdict["__subject"].endswith(f".InputRejected.{token}")
            assert not schema_errors(verdict)
    finally:
        await acme.close()
    aggregate = doc()["channels"]["evt.submission.InputRejected"]["parameters"]["aggregate"]
    assert "`seq-<n>`" in aggregate["description"] and "`_`" in aggregate["description"]
    assert {"_", "seq-27"} <= set(aggregate["examples"])
    path = doc()["components"]["schemas"]["InputRejected"]["properties"]["path"]["description"]
    assert "`$.job_id`" in path


# ----------------------------------------------------------------------------- 5: an array's verdicts


async def test_an_arrays_verdicts_say_how_many_tasks_it_has(up):
    acme = await Client.connect(up, "acme")
    try:
        seq = await acme.ask("submit", c.JobSubmitted(job_id="sweep", tenant="acme", sim_runtime_s=0.1,
                                                      array="0-4%2"), "sweep")
        for _ in range(200):
            accepted = [e for e in acme.caused_by(seq) if e["type"] == "JobAccepted"]
            if len(accepted) == 5:
                break
            await asyncio.sleep(0.05)
        assert sorted(e["job_id"] for e in accepted) == [f"acme:sweep_{i}" for i in range(5)]
        assert {e["array_tasks"] for e in accepted} == {5}
        one = await acme.ask("submit", c.JobSubmitted(job_id="single", tenant="acme", sim_runtime_s=0.1), "single")
        assert (await acme.verdict(one))["array_tasks"] == 0
    finally:
        await acme.close()
    prop = doc()["components"]["schemas"]["JobAccepted"]["properties"]["array_tasks"]
    assert prop["type"] == "integer" and "how many tasks" in prop["description"]
    assert "array_tasks" in doc()["operations"]["in.submit"]["description"]


# ----------------------------------------------------------------------------- 6: the client's own id


async def test_a_clients_own_id_is_not_the_verdicts_causation(up):
    acme = await Client.connect(up, "acme")
    try:
        event = c.JobSubmitted(id="my-own-id", job_id="g-own", tenant="acme", sim_runtime_s=0.1)
        seq = await acme.ask("submit", event, "g-own")
        verdict = await acme.verdict(seq)
        assert verdict["type"] == "JobAccepted" and verdict["causation_id"] == f"seq:{seq}"
        assert verdict["id"] == "submission/JobAccepted/acme:g-own"
        assert not [e for e in acme.events if e.get("causation_id") == "my-own-id"]
    finally:
        await acme.close()


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n### ", start + len(heading))
    return text[start:end if end > 0 else None]


def test_docs_events_md_says_what_the_code_answers():
    text = (ROOT / "docs" / "events.md").read_text()
    inputs = _section(text, "### 1.2 Client inputs")
    for verb, kinds in VERDICTS.items():
        row = next(line for line in inputs.splitlines() if line.startswith(f"| `{verb}` |"))
        answers = row.rsplit("|", 2)[-2]
        assert all(f"`{kind}`" in answers for kind in kinds), (verb, answers)
    assert "no second answer" not in inputs and "RequestRejected" in inputs
    envelope = _section(text, "## 3. The envelope")
    id_row = next(line for line in envelope.splitlines() if line.startswith("| `id` |"))
    assert "points to it" not in id_row and "`seq:<n>`" in id_row, id_row
    bad = _section(text, "### 5.5 Where a bad submission ends up")
    malformed = next(line for line in bad.splitlines() if line.startswith("| not JSON"))
    assert "`InputRejected`" in malformed and "No event is published" not in malformed, malformed
    refused = _section(text, "### 1.10 What a reader refuses")
    assert "`InputRejected`" in refused
    for phrase in ("is dead-lettered.", "a type\nerror and is dead-lettered", "fails decoding and is dead-lettered"):
        assert phrase not in text, phrase
    readme = (ROOT / "README.md").read_text()
    client = readme[readme.index("## Publishing a job from any language"):readme.index("## Commands")]
    assert "array_tasks" in client and "InputRejected" in client and "RequestRejected" in client


# ----------------------------------------------------------------------------- 7: security, the wait


async def test_the_document_says_how_a_tenant_connects_and_how_long_to_wait(up):
    d = doc()
    schemes = d["components"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"userPassword", "X509"}
    by_server = {name: [ref["$ref"].rsplit("/", 1)[1] for ref in server.get("security", [])]
                 for name, server in d["servers"].items()}
    assert by_server == {"local": [], "accounts": ["tenantPassword"], "tls": ["mutualTls"]}
    from services.front.client.submitter import send_submission

    assert inspect.signature(send_submission).parameters["timeout_s"].default == VERDICT_WAIT_S
    for verb in VERDICTS:
        op = d["operations"][f"in.{verb}"]
        assert op["x-verdict-wait-s"] == VERDICT_WAIT_S and op["x-verdicts"] == list(VERDICTS[verb])
        assert "How long to wait" in op["description"]
    # as the scheme says: without the tenant's user and password the server refuses the connection
    refused: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        refused.append(exc)

    with pytest.raises(Exception):  # noqa: B017 - nats-py raises its own per version: any refusal will do
        await nats.connect(f"nats://127.0.0.1:{up.port}", allow_reconnect=False, max_reconnect_attempts=0,
                           connect_timeout=3, error_cb=on_error)
    assert re.search(r"[Aa]uthorization", " ".join(map(str, refused))), refused
    acme = await Client.connect(up, "acme")  # the URL `horizon tenant add --json` printed
    await acme.close()


# ----------------------------------------------------------------------------- the Node.js client, as a tenant


def test_the_node_client_does_every_operation_a_tenant_may(up, tmp_path):
    """docs/examples/node-client/operations.mjs with acme's URL: every operation a tenant's account
    reaches, from the document alone (the operators' are skipped, and the logs: the sim executor keeps
    no output); what it saw, held against the document as tests/nodes/test_node_client.py does."""
    from tests.nodes.test_node_client import CLIENT, _problems, node_client

    node_bin = node_client()
    document = tmp_path / "horizon.asyncapi.json"
    document.write_text(json.dumps(doc()))
    run = subprocess.run(
        [node_bin, str(CLIENT / "operations.mjs"), up.urls["acme"], str(document), "--timeout", "60",
         "--skip", "logs.tenant"], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    summary, done = lines[-1], lines[:-1]
    assert summary["missing"] == [] and summary["failures"] == [], summary
    operations = set(doc()["operations"])
    tenants = ({f"in.{verb}" for verb in VERDICTS} | {"tenantFeed", "validate"}
               | {op for op in operations if op.startswith("evt.")}
               | {op for op in operations if op.startswith("query.") and op.endswith(".tenant")})
    assert set(summary["covered"]) == tenants and set(summary["skipped"]) == operations - tenants
    for line in done:
        for verdict in line.get("verdicts", []):
            assert "_invalid-" not in verdict["id"] and verdict["causation_id"] == f"seq:{line['answer']['seq']}"
            assert not _problems(f"#/components/schemas/{verdict['type']}", verdict), verdict
        if isinstance(line.get("received"), dict):
            assert not _problems(f"#/components/schemas/{line['received']['type']}", line["received"]), line
        elif "answer" in line and not line["op"].startswith("in."):
            assert not _problems(f"#/components/messages/{line['op']}.reply/payload", line["answer"]), line
    stop = next(line for line in done if line["op"] == "in.cancel" and line.get("verdicts")
                and line["verdicts"][0]["type"] == "JobStopRequested")
    assert stop["verdicts"][0]["id"].startswith("submission/JobStopRequested/acme:")
    carried_out = next(line["received"] for line in done if line["op"] == "in.cancel" and "received" in line)
    assert carried_out["causation_id"] == stop["verdicts"][0]["causation_id"]
