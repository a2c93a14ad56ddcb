"""docs/whatif.md on a real log: a development cluster's, with two accounts, an array, a
cancelled job and a rejected one, then every command the doc shows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.journeys.conftest import Up, running, submitted_id, wait_state
from tests.journeys.docblocks import block
from tests.journeys.person import Person


@pytest.fixture(scope="module")
def cluster(someone: Person) -> Iterator[Up]:
    with running(someone, "horizon up --nodes 4 --gpus-per-node 8") as up:
        yield up


def test_whatif_as_documented(cluster: Up, someone: Person) -> None:
    for account, shares in (("nlp", 1), ("vision", 3)):
        someone.run(f"horizon account set {account} --shares {shares}")
    ids = [submitted_id(someone.run(f"horizon submit --account {a} --gpus 8 -- sleep {t}"))
           for a, t in (("nlp", 3), ("vision", 2), ("nlp", 2), ("vision", 3), ("nlp", 1), ("vision", 1))]
    array = submitted_id(someone.run("horizon submit --account nlp --gpus 4 --array 0-5 -- sleep 1"))
    cancelled = submitted_id(someone.run("horizon submit --account vision --gpus 8 -- sleep 300"))
    rejected = someone.run("horizon submit --account nlp --gpus 99 -- true", ok=None)
    assert rejected.rc != 0 or "REJECTED" in someone.run("horizon jobs").out, rejected
    wait_state(someone, cancelled, "RUNNING", timeout=120)
    someone.run(f"horizon cancel {cancelled}")
    for job in [*ids, *(f"{array}_{i}" for i in range(6))]:
        assert wait_state(someone, job, "SUCCEEDED", "FAILED", timeout=120) == "SUCCEEDED"

    for command in block("whatif-commands").commands:
        text = command.text
        if "--from 2026-11-16" in text:  # a fixed week of the doc's own cluster: a clear answer here
            result = someone.run(command, ok=None)
            assert "Traceback" not in result.err and (result.out + result.err).strip(), result
            continue
        result = someone.run(command, timeout=300)
        if "--json" in text:
            report = json.loads(result.out)
            fidelity = report["baseline"]["fidelity"]
            # every recorded start, but those the live services' latency put on other nodes at their time
            assert fidelity["compared"] >= 12 and fidelity["unexplained"] == 0, fidelity
            assert fidelity["reproduced"] + fidelity["on_time_elsewhere"] == fidelity["compared"], fidelity
            assert "mean_wait_s" in report["baseline"] and "mean_wait_s" in report["changed"], report
        else:
            found = re.search(r"baseline reproduces (\d+) of (\d+) recorded starts \(.*?\)"
                              r"(?:; (\d+) more started on time on other nodes .*?)?; 0 differ without", result.out)
            assert found and int(found.group(1)) + int(found.group(3) or 0) == int(found.group(2)), result
            waits = re.search(r"mean wait \(s\)\s+([\d.]+)\s+([\d.]+)", result.out)
            assert waits, result
            baseline, changed = float(waits.group(1)), float(waits.group(2))
            if "--remove-nodes" in text:  # half the nodes: a loss, never shown as a win
                assert changed >= baseline and "jobs never started" in result.out, result
            elif "--add-nodes" in text:
                assert changed <= baseline, result
