"""docs/jobs.md as a person follows it, on a development cluster started as the README says
(`horizon up --nodes 4 --gpus-per-node 8`, relative data dir), submitting from a project folder."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.journeys.conftest import Up, running, submitted_id, wait_state
from tests.journeys.docblocks import block
from tests.journeys.person import Person


@pytest.fixture(scope="module")
def cluster(someone: Person) -> Iterator[Up]:
    with running(someone, "horizon up --nodes 4 --gpus-per-node 8", then="project") as up:
        yield up


def test_reading_a_job_logs_and_show(cluster: Up, someone: Person) -> None:
    job = submitted_id(someone.run("horizon submit -- bash -c 'echo to-stdout; echo to-stderr >&2'"))
    someone.subs["JOB"] = job
    assert wait_state(someone, job, "SUCCEEDED", "FAILED") == "SUCCEEDED"
    for command in block("jobs-logs").commands:
        result = someone.run(command)
        text = command.text.split("#")[0]
        if "--err" in text:
            assert "to-stderr" in result.out and "to-stdout" not in result.out, result
        elif text.startswith("horizon logs"):
            assert "to-stdout" in result.out and "to-stderr" not in result.out, result
        else:  # show: where it wrote
            assert "SUCCEEDED" in result.out and "stdout" in result.out, result


def test_elastic_gangs_as_documented(cluster: Up, someone: Person) -> None:
    """The doc's three ways to ask for a range of nodes are accepted; job.sh is the person's script."""
    (someone.cwd / "job.sh").write_text("#!/bin/bash\n#SBATCH -N 2-4\n#SBATCH --gpus-per-node=8\n#SBATCH --time=1\n"
                                        "srun hostname\n")
    ids = []
    for command in block("jobs-elastic").commands:
        ids.append(submitted_id(someone.run(command)))
    for job in ids:  # accepted: each reaches a state past PENDING's verdict (none REJECTED)
        shown = someone.run(f"horizon show {job}").out
        assert "REJECTED" not in shown, shown
    for job in ids:
        someone.run(f"horizon cancel {job}", ok=None)
    for job in ids:
        wait_state(someone, job, "CANCELLED", "FAILED", "SUCCEEDED")


def test_an_elastic_shell_job_hears_its_resize(cluster: Up, someone: Person) -> None:
    """The doc's trap line, in a script that waits to be grown from 2 nodes to 4."""
    trap = block("jobs-elastic-trap").commands[0].text
    blocker = submitted_id(someone.run("horizon submit --gpus 8 --nodes 2 --name blocker -- sleep 300"))
    wait_state(someone, blocker, "RUNNING")
    script = someone.cwd / "grow.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2-4\n#SBATCH --gpus-per-node=8\n#SBATCH --time=2\n"
                      f"{trap}\n"
                      "echo \"started on $HORIZON_WORLD_SIZE nodes\"\n"
                      "until [ \"$HORIZON_WORLD_SIZE\" = 4 ]; do sleep 0.2; done\necho grown\n")
    job = submitted_id(someone.run("horizon sbatch grow.sh"))
    wait_state(someone, job, "RUNNING")
    someone.run(f"horizon cancel {blocker}")
    assert wait_state(someone, job, "SUCCEEDED", "FAILED", timeout=120) == "SUCCEEDED"
    out = (someone.cwd / f"slurm-{job}.out").read_text() if (someone.cwd / f"slurm-{job}.out").exists() \
        else someone.run(f"horizon logs {job}").out
    assert "started on 2 nodes" in out, out
    assert re.search(r"now 4 nodes: node-\[?0", out), out
    assert "grown" in out, out
