"""The clients the docs print, pasted into a file and run as they are (README.md's and
docs/events.md's nats-py programs), and the schema commands of docs/events.md."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.journeys.conftest import Up, running
from tests.journeys.docblocks import block
from tests.journeys.person import Person


def test_schema_commands(someone: Person) -> None:
    for command in [*block("events-schema").commands, *block("events-asyncapi").commands]:
        text = command.text.split("#")[0].strip()
        out = someone.run(command).out
        if text.endswith("--list"):
            names = out.split()
            assert "JobSubmitted" in names and "JobScheduled" in names, out
        elif text.endswith("--asyncapi"):
            document = json.loads(out)
            assert document["asyncapi"] == "3.0.0" and document["channels"], out[:300]
        else:
            schema = json.loads(out)
            assert "JobSubmitted" in json.dumps(schema)[:100000], out[:300]


@pytest.fixture(scope="module")
def cluster(someone: Person) -> Iterator[Up]:
    with running(someone, "horizon up --nodes 4 --gpus-per-node 8", then="client") as up:
        yield up


def _paste_and_run(someone: Person, name: str, file: str) -> str:
    """The block, pasted into ``file`` as printed (its URL changed only if the port was), then run."""
    (someone.cwd / file).write_text(someone.typed(block(name).body))
    return someone.run(f"python {file}", timeout=90).out


def test_the_readme_client_follows_its_job_to_the_end(cluster: Up, someone: Person) -> None:
    out = _paste_and_run(someone, "readme-python-client", "client.py").split()
    assert out[0] == "JobAccepted", out  # 8 CPUs, 64Gi, 2 a100: a node of the dev cluster holds it
    # its decisions, to an end (train.py is not there: the job fails, and the client says so)
    assert "JobScheduled" in out and "JobStarted" in out and out[-1] in ("JobSucceeded", "JobFailed"), out


def test_the_events_client_gets_its_verdict_and_a_retry_is_a_duplicate(cluster: Up, someone: Person) -> None:
    first = _paste_and_run(someone, "events-python-client", "submit.py").splitlines()
    assert first[0].startswith("stored at ") and "(duplicate)" not in first[0] and first[1] == "accepted", first
    again = _paste_and_run(someone, "events-python-client", "submit.py").splitlines()
    assert again[0].split()[:3] == first[0].split()[:3] and "(duplicate)" in again[0], (first, again)
