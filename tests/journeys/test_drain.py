"""docs/jobs.md's checkpoints and drain with migration, as an operator and a user follow them on
a development cluster of eight nodes: the doc's train.py, submitted as the doc shows, then four
jobs on node-07 and the doc's drain, whose plan is compared job by job with the doc's."""

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
    with running(someone, "horizon up --nodes 8 --gpus-per-node 8", then="project") as up:
        (someone.cwd / "train.py").write_text(block("jobs-checkpoint-train-py").body + "\n")
        yield up


def _plans(text: str) -> dict[str, tuple[str, str, str]]:
    """name -> (attempt, plan, reason) of a drain's answer, one job a line."""
    found = {}
    for line in text.splitlines()[1:]:
        parts = re.match(r"\s*(\S+)\s+attempt (\d+)\s+(\S+)\s+(.*)$", line)
        if parts:
            found[parts.group(1)] = (parts.group(2), parts.group(3), parts.group(4))
    return found


def test_checkpoint_signal_as_documented(cluster: Up, someone: Person) -> None:
    (someone.cwd / "job.sh").write_text("#!/bin/bash\n#SBATCH --signal=B:USR1@300\n#SBATCH --time=10\n"
                                        "python train.py\n")
    ids = [submitted_id(someone.run(command)) for command in block("jobs-checkpoint").commands]
    for job in ids:
        wait_state(someone, job, "RUNNING")
        shown = someone.run(f"horizon show {job}").out
        assert re.search(r"checkpoint.*SIGUSR1|SIGUSR1.*checkpoint", shown, re.I), shown
        someone.run(f"horizon cancel {job}")


def test_drain_with_migration_as_documented(cluster: Up, someone: Person) -> None:
    names = ("quick", "long", "stuck", "ckpt")  # as submitted: the doc's rows are in this order
    jobs = dict(zip(names, (submitted_id(someone.run(c)) for c in block("jobs-drain-jobs").commands)))
    for job in jobs.values():
        wait_state(someone, job, "RUNNING")
    someone.until(f"horizon logs {jobs['ckpt']}", lambda r: "resuming from the start" in r.out)
    assert "node-07" in someone.run(f"horizon show {jobs['ckpt']}").out  # packed beside the pinned three
    (drain,) = block("jobs-drain-migrate").commands
    result = someone.run(drain)
    doc_head, *doc_rows = [line for line in drain.shown if line.strip()]
    head = result.out.splitlines()[0]
    assert re.sub(r"deadline [^)]*", "deadline", head) == re.sub(r"deadline [^)]*", "deadline", doc_head), result
    # the doc's rows are the four jobs by their ids, in the order submitted; sbatch printed each
    # one's number (Slurm's job id), the drain names the job id: horizon jobs --json pairs them
    ids = {row.get("slurm_id"): row["job_id"] for row in json.loads(someone.run("horizon jobs --json").out)}
    named = {ids.get(job, job): name for name, job in jobs.items()}
    real = {named.get(job, job): plan for job, plan in _plans(result.out).items()}
    shown = dict(zip(names, _plans("\n".join([doc_head, *doc_rows])).values(), strict=True))
    assert set(real) == set(shown), result
    for name, (attempt, plan, reason) in shown.items():
        assert real[name][:2] == (attempt, plan), (name, result.out)
        # the doc's reason up to its "...", with the figures left to the real clock
        words = lambda text: re.sub(r"\d+", "N", text.split("...")[0].rstrip(" ,"))  # noqa: E731
        assert words(real[name][2]).startswith(words(reason)), (name, reason, real[name][2])
    # the checkpointing job moved: a second attempt on another node, resumed from its checkpoint
    someone.until(f"horizon logs {jobs['ckpt']}", lambda r: re.search(r"resuming from \S+\.ckpt at step [1-9]", r.out)
                  is not None, timeout=90)
    shown = someone.run(f"horizon show {jobs['ckpt']}").out
    assert re.search(r"attempt 2: RUNNING on node-0[0-6]", shown), shown
