"""docs/containers.md as a person follows it, as root on a node set up as the doc's operators'
section says: a development node with two simulated GPUs (``horizon up`` in a folder of the
person's), an image built from Debian's busybox-static with ``podman import`` (no registry), a job
and a batch job in it, and the page's first example, whose image the node does not have: it fails
at once saying so, and nothing is pulled.

The one substitution: the image's tag, ``localhost/hello:1`` in the doc, is made this run's own
(two sessions on one machine share root's Podman storage); it is removed at the end."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.journeys.conftest import start_up, submitted_id, wait_state
from tests.journeys.docblocks import ROOT, block, read_blocks
from tests.journeys.person import Person

pytestmark = pytest.mark.timeout(300)

BUSYBOX = Path("/bin/busybox")
DOC_TAG = "localhost/hello:1"


def _missing() -> str | None:
    from services.nodes.backends.process import containers
    from services.nodes.backends.process.cgroups import probe

    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc catatonit busybox-static)"
    if not BUSYBOX.exists():
        return f"{BUSYBOX} is missing (apt-get install busybox-static)"
    if not probe().usable:  # a container joins its job's cgroups (as in tests/nodes/test_real_nodes.py)
        return f"no writable cgroups: {probe().describe()}"
    return containers.available()


@pytest.fixture
def tag() -> Iterator[str]:
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the containers journey runs in CI: {missing}")
        pytest.skip(missing)
    own = f"localhost/hello:journey-{os.getpid()}"
    yield own
    subprocess.run(["podman", "image", "rm", "--force", own], capture_output=True, timeout=60)


def test_the_operators_packages_are_what_ci_installs() -> None:
    """The doc's install line (illustrative: it is root's apt) names packages .ci/run installs."""
    install = next(b for b in read_blocks(ROOT / "docs" / "containers.md") if "apt-get install" in b.body)
    packages = install.commands[0].text.split("#")[0].split("install", 1)[1].split()
    found = re.search(r"for package in ([^;]+); do", (ROOT / ".ci" / "run").read_text())
    assert found, "the package loop of .ci/run"
    assert {p for p in packages if not p.startswith("-")} <= set(found.group(1).split()), packages


def test_try_it_then_the_first_example(person: Person, tag: str) -> None:
    commands = block("containers-try-it").commands
    headline = block("containers-submit").commands[0]
    texts = [c.text.split("  #")[0].strip() for c in commands]
    assert headline.text in texts, "the try-it block ends with the page's first example, as written"
    person.subs[DOC_TAG] = tag
    person.cwd = person.folder("work")

    # 1. up, in a terminal of its own, in the folder the rest runs in
    assert texts[0].startswith("horizon up"), texts[0]
    up = start_up(person, commands[0].text, cwd=person.cwd)
    assert "2 a100 GPUs (simulated" in up.bg.err, up.bg.err
    job = batch = failed = ""
    for command, text in zip(commands[1:], texts[1:]):
        if text.startswith("horizon logs"):
            person.subs["JOB_ID"] = job
            assert wait_state(person, job, "SUCCEEDED", "FAILED", "OUT_OF_MEMORY") == "SUCCEEDED", \
                person.run(f"horizon show {job}", ok=None)
            logs = person.run(command).out
            # its working directory is the folder it was submitted from, mounted at the same path;
            # the job's variables are set inside (its GPU of the two)
            assert logs.strip() == f"hello from {person.cwd}, GPU 0", logs
            continue
        if text == headline.text:
            failed = submitted_id(person.run(command))
            continue
        if text == "horizon jobs":
            assert wait_state(person, failed, "FAILED", "SUCCEEDED", "RUNNING", timeout=60) == "FAILED"
            table = person.run(command).out
            row = next(line for line in table.splitlines() if failed in line)
            assert "FAILED" in row and "localhost/train:3 is not on this node" in row, table
            continue
        result = person.run(command)
        if text.startswith("horizon submit"):
            job = submitted_id(result)
        elif text.startswith("horizon sbatch"):
            batch = submitted_id(result)
        elif text.startswith("tar "):
            images = person.run(f"podman image exists {tag}", ok=None)
            assert images.rc == 0, images
    # 2. the batch job ran in the image too, its output where sbatch puts it and in `horizon logs`
    assert batch and wait_state(person, batch, "SUCCEEDED", "FAILED") == "SUCCEEDED"
    assert (person.cwd / f"slurm-{batch}.out").read_text().strip() == "hello from a batch job"
    assert person.run(f"horizon logs {batch}").out.strip() == "hello from a batch job"
    # 3. the missing image: failed at once, the whole reason says what to do, nothing was pulled
    row = next(r for r in json.loads(person.run("horizon jobs --json").out) if r["job_id"] == failed)
    assert "Horizon never pulls" in row["reason"], row
    assert person.run("podman image exists localhost/train:3", ok=None).rc != 0
    # 4. no container of these jobs is left behind
    left = person.run("podman ps -a --format '{{.Names}}'").out.split()
    assert not [name for name in left if any(j in name for j in (job, batch, failed))], left
    assert up.bg.interrupt() == 0, up.bg.err
