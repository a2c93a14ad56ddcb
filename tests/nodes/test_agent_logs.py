"""``horizon.logs.<node>[.<tenant>]`` (services/nodes/agent/logs.py): a tenant reads its own jobs' output and
learns nothing of anyone else's (issue 31, item 2).

It was an existence oracle: acme asking for globex's real job ``globex:g-secret-1`` got ``node
node-00 has no output of job globex:g-secret-1``, and for a job that does not exist ``... attempt
1``. A tenant asking about a job not its own now gets exactly the answer for one that does not
exist. The agent's LogServer answers on a real nats-server; the attempts are directories as the
process executor keeps them (``<state dir>/<log key>/<attempt>/plan.json``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from services.nodes.agent.logs import LogServer, read_chunk

pytestmark = pytest.mark.timeout(60)
NODE = "node-00"


def attempt(state_dir: Path, key: str, number: int, tenant: str, text: bytes, node: str = NODE) -> None:
    directory = state_dir / key / str(number)
    directory.mkdir(parents=True)
    (directory / "stdout").write_bytes(text)
    (directory / "stderr").write_bytes(b"")
    (directory / "plan.json").write_text(json.dumps({
        "job_id": key, "attempt": number, "node": node, "tenant": tenant,
        "stdout": str(directory / "stdout"), "stderr": str(directory / "stderr")}))


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """acme's job a-1 (through the intake: key acme:a-1), globex's g-secret-1 (two attempts), a job
    of globex's from before the intake (raw id old-1), and globex's job on another node."""
    attempt(tmp_path, "acme:a-1", 1, "acme", b"hello from acme\n")
    attempt(tmp_path, "globex:g-secret-1", 1, "globex", b"globex's secret\n")
    attempt(tmp_path, "globex:g-secret-1", 2, "globex", b"globex's secret again\n")
    attempt(tmp_path, "old-1", 1, "globex", b"old\n")
    attempt(tmp_path, "globex:elsewhere", 1, "globex", b"x\n", node="node-01")
    return tmp_path


def same_as_missing(state_dir: Path, job_id: str, tenant: str, **asked: Any) -> None:
    """acme's answer about ``job_id`` is, word for word, its answer about a job that does not exist."""
    theirs = read_chunk(state_dir, NODE, {"job_id": job_id, **asked}, tenant)
    missing = read_chunk(state_dir, NODE, {"job_id": "nope-404", **asked}, tenant)
    assert json.dumps(theirs).replace(job_id, "ID") == json.dumps(missing).replace("nope-404", "ID"), (theirs, missing)


@pytest.mark.parametrize("job_id", ["globex:g-secret-1", "g-secret-1", "old-1", "globex:elsewhere", "acme:a-1x"])
@pytest.mark.parametrize("asked", [{}, {"attempt": 1}, {"attempt": 2}, {"attempt": 7, "stream": "stderr"},
                                   {"offset": -10, "limit": 5}, {"offset": "x"}])
def test_a_tenant_asking_about_a_job_not_its_own_gets_the_answer_for_no_job(state_dir, job_id, asked):
    same_as_missing(state_dir, job_id, "acme", **asked)


def test_a_tenant_reads_its_own_job_and_the_operator_any(state_dir):
    own = read_chunk(state_dir, NODE, {"job_id": "a-1"}, "acme")
    assert base64.b64decode(own["data"]) == b"hello from acme\n" and own["job_id"] == "a-1" and own["attempt"] == 1
    theirs = read_chunk(state_dir, NODE, {"job_id": "globex:g-secret-1"}, None)
    assert base64.b64decode(theirs["data"]) == b"globex's secret again\n" and theirs["attempt"] == 2
    assert read_chunk(state_dir, NODE, {"job_id": "old-1"}, "globex")["data"]  # a job from before the intake
    assert "error" in read_chunk(state_dir, NODE, {"job_id": "globex:elsewhere"}, None)  # another node's


async def test_on_the_bus_the_same_answer_for_another_tenants_job_and_for_none(nats_server, state_dir):
    nc = await nats.connect(nats_server.url)
    server = LogServer(nc, state_dir, [NODE])
    await server.start()
    try:
        async def ask(job_id: str, **extra: Any) -> str:
            msg = await nc.request(f"horizon.logs.{NODE}.acme", json.dumps({"job_id": job_id, **extra}).encode(),
                                   timeout=5)
            return msg.data.decode()

        for extra in ({}, {"attempt": 1}):
            assert (await ask("globex:g-secret-1", **extra)).replace("globex:g-secret-1", "ID") == \
                (await ask("nope-404", **extra)).replace("nope-404", "ID")
        own = json.loads(await ask("a-1"))
        assert base64.b64decode(own["data"]) == b"hello from acme\n"
        deep = await nc.request(f"horizon.logs.{NODE}.acme", b"[" * 100_000 + b"]" * 100_000, timeout=5)
        assert "bad request" in json.loads(deep.data)["error"]  # answered, not dropped
    finally:
        await server.stop()
        await nc.close()
