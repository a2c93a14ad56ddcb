"""docs/scheduling-policy.md, docs/preemption.md and docs/audit.md as an operator follows them, on
one development cluster (`horizon up --nodes 4 --gpus-per-node 8` from a folder of the person's):
configure, fill the cluster, look at why a job waits, preempt for a high-class job, then audit
every decision that made."""

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
    # the person stays beside up: operator commands find the up of ./.horizon
    with running(someone, "horizon up --nodes 4 --gpus-per-node 8") as up:
        yield up


def test_a_configuration_that_cannot_apply_is_refused_as_shown(cluster: Up, someone: Person) -> None:
    (command,) = block("policy-rejected-config").commands
    result = someone.run(command, ok=False)
    shown = [line for line in command.shown if line.strip()]
    assert [line.strip() for line in result.err.strip().splitlines()] == shown, result


def test_why_a_job_waits_and_its_priority(cluster: Up, someone: Person) -> None:
    commands = block("policy-try-it").commands
    for command in commands:
        text = command.text.split("#")[0].strip()
        result = someone.run(command)
        if text.startswith("horizon account set") or text.startswith("horizon policy set"):
            assert "applied" in result.out + result.err, result
        elif text.startswith("horizon submit"):
            array = submitted_id(result)
            someone.subs["JOB_4"] = f"{array}_4"  # the doc: "the array's id that submit prints, with _4"
            for i in range(4):
                wait_state(someone, f"{array}_{i}", "RUNNING")
        elif text.startswith("horizon queue"):
            assert f"{array}_4" in result.out, result
        elif text.startswith("horizon show"):
            for factor in ("fairshare", "age", "size"):
                assert re.search(rf"\b{factor}\b", result.out, re.I), result
            assert "2000" in result.out.replace(",", ""), result  # the age weight set above


def test_preempting_for_a_high_class_job(cluster: Up, someone: Person) -> None:
    """The rules set as the doc shows; the dry run for the waiting normal task (normal may preempt
    nobody: it says why); then a high job takes a normal task's node, which goes back to wait."""
    configure, dry_run = block("preemption-configure").commands
    assert "applied" in (lambda r: r.out + r.err)(someone.run(configure))
    someone.subs["JOB"] = someone.subs["JOB_4"]
    said = someone.run(dry_run)
    assert someone.subs["JOB_4"] in said.out and "Traceback" not in said.err, said
    array = someone.subs["JOB_4"].rsplit("_", 1)[0]
    job = submitted_id(someone.run("horizon submit --priority-class high --gpus 8 -- sleep 20"))
    assert wait_state(someone, job, "RUNNING", timeout=60) == "RUNNING"
    rows = {r["job_id"]: r["state"] for r in json.loads(someone.run("horizon jobs --json").out)}
    assert sum(rows[f"{array}_{i}"] == "RUNNING" for i in range(5)) == 3, rows  # one of four gave way
    story = someone.run(f"horizon audit --job {array}_4").out + "".join(
        someone.run(f"horizon audit --job {array}_{i}").out for i in range(4))
    assert re.search(r"preempt", story, re.I), story


def test_the_audit_reproduces_what_happened(cluster: Up, someone: Person) -> None:
    someone.run("horizon submit --job-id train-042 -- true")
    wait_state(someone, "train-042", "SUCCEEDED")
    for command in block("audit-commands").commands:
        text = command.text.split("#")[0].strip()
        if "--policy fcfs" in text or "--virtual-time" in text:
            # other settings than these services ran with: a clear verdict either way, no traceback
            result = someone.run(command, ok=None)
            assert "Traceback" not in result.err and (result.out + result.err).strip(), result
            continue
        result = someone.run(command)
        if text == "horizon audit --json":
            verdict = json.loads(result.out)
            assert verdict["decisions"] > 0 and verdict["reproduced"] == verdict["decisions"], verdict
        elif "--job" in text:
            assert "train-042" in result.out, result
