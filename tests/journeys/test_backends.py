"""docs/backends.md as a site with Slurm tries it: ``horizon up --backend slurm`` over a real Slurm
cluster (tests/slurm_cluster.py: slurmctld and three slurmd on this host), a job submitted from a
project folder that Slurm runs on the node Horizon chose; and the Slurm quota provider against a
real accounting database (tests/slurm_accounting.py: MariaDB, slurmdbd, slurmctld), whose QOS limit,
synced with `horizon quota sync`, holds a third job back with the reason the doc prints.

Where the doc says ``/etc/slurm/slurm.conf`` (the site's), the person has the test cluster's, and
``SLURM_CONF`` names it for Slurm's own commands, as the site's default place would."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import slurm_accounting
from tests.journeys.conftest import start_up, submitted_id, wait_state
from tests.journeys.docblocks import ROOT, block, read_blocks
from tests.journeys.person import Person
from tests.slurm_cluster import SlurmCluster, SlurmNode, slurm_installed

SITE_CONF = "/etc/slurm/slurm.conf"


def _needs(what: str, missing: list[str]) -> None:
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run docs/backends.md's {what}: install {', '.join(missing)} (.ci/run does)")
        pytest.skip(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm slurmdbd mariadb-server)")


def _at_the_site(person: Person, conf: Path) -> None:
    person.env["SLURM_CONF"] = str(conf)
    person.subs[SITE_CONF] = str(conf)


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[SlurmCluster]:
    _needs("Slurm backend", [] if slurm_installed() else ["slurm-wlm"])
    nodes = [SlurmNode("s1"), SlurmNode("s2"), SlurmNode("s3", gpus=0)]
    with SlurmCluster(tmp_path / "slurm", nodes) as running:
        yield running


@pytest.fixture
def accounting(tmp_path: Path) -> Iterator[slurm_accounting.Accounting]:
    _needs("Slurm quota provider", slurm_accounting.missing())
    with slurm_accounting.accounting(tmp_path / "slurmdb") as acc:
        yield acc


def test_horizon_decides_slurm_runs(slurm: SlurmCluster, person: Person) -> None:
    _at_the_site(person, slurm.conf)
    up = start_up(person, block("backends-slurm-up").commands[0].text, cwd=person.folder("shared"))
    assert "Slurm partition" in up.bg.err, up.bg.err
    person.cwd = person.folder("project")
    job = slurm_id = node = ""
    for command in block("backends-slurm-jobs").commands:
        text = person.typed(command).split("#")[0].strip()
        result = person.run(command)
        if text == "horizon nodes":
            rows = [line.split() for line in result.out.splitlines()]
            assert "BACKEND" in rows[0], result
            assert {row[0]: row[-1] for row in rows[1:]} == {"s1": "slurm", "s2": "slurm", "s3": "slurm"}, result
        elif text.startswith("horizon submit"):
            person.subs["JOB_ID"] = job = submitted_id(result)
            assert wait_state(person, job, "SUCCEEDED", "FAILED", "CANCELLED") == "SUCCEEDED", \
                person.run(f"horizon logs {job} --err", ok=None)
        elif text == "horizon jobs":
            [row] = [r for r in json.loads(person.run("horizon jobs --json").out) if r["job_id"] == job]
            node = row["allocation"][0]["node"]
            assert re.search(rf"{re.escape(job)}\s.*SUCCEEDED\s.*{node}", result.out), result
        elif text.startswith("horizon logs"):
            said = re.fullmatch(r"Slurm job (\d+) on (\S+)", result.out.strip())
            assert said and said.group(2) == node, result  # Slurm's node name is Horizon's
            slurm_id = said.group(1)
        elif text.startswith("squeue"):  # Slurm's own squeue, from /usr/bin, with the site's slurm.conf
            record = [line.split() for line in result.out.splitlines() if line.split()[:1] == [slurm_id]]
            assert record == [[slurm_id, "COMPLETED", node, f"horizon-{job}"]], result
        else:
            raise AssertionError(f"the journey does not know what to expect of {text!r}")
    assert slurm_id, "the job's output named no Slurm job"
    assert up.bg.interrupt() == 0, up.bg.err


def test_a_slurm_qos_limit_holds_a_job_back(accounting: slurm_accounting.Accounting, person: Person) -> None:
    _at_the_site(person, accounting.conf)
    start_up(person, block("backends-quota-up").commands[0].text, cwd=person.folder("cluster"))
    person.cwd = person.folder("project")
    # the doc's words for a job held back by the limit (fenced as text under "Where each limit comes from")
    [reason] = [b.body for b in read_blocks(ROOT / "docs" / "backends.md")
                if b.lang == "text" and "quota (Slurm " in b.body]
    jobs: list[str] = []
    for command in block("backends-quota-sync").commands:
        text = person.typed(command).split("#")[0].strip()
        result = person.run(command)
        if text.startswith("sacctmgr"):
            continue
        if text.startswith("horizon quota sync"):
            assert "account ml (new): 2 GPUs (Slurm QOS gpuq GrpTRES)" in result.out, result
        elif text.startswith("horizon usage"):
            assert re.search(r"^\s*ml\s.*gpus=2 \(Slurm QOS gpuq GrpTRES\)", result.out, re.M), result
        elif text.startswith("for "):
            jobs = result.out.split()
            assert len(jobs) == 3, result
            for job in jobs[:2]:
                wait_state(person, job, "RUNNING")
        elif text == "horizon queue":
            shown = person.until(command, lambda r: reason in r.out, timeout=30)
            assert jobs[2] in shown.out and jobs[0] not in shown.out, shown
            # and squeue gives Slurm's code for it, as the doc promises
            assert "(QOSGrpGRES)" in person.run(f"horizon squeue -j {jobs[2]}").out
        else:
            raise AssertionError(f"the journey does not know what to expect of {text!r}")
    assert len(jobs) == 3
    again = person.run(block("backends-quota-sync").commands[2])  # nothing changed: nothing published
    assert "all as in Horizon" in again.out, again
    person.run(f"horizon cancel {' '.join(jobs)}")
    for job in jobs:
        wait_state(person, job, "CANCELLED")
