"""Licenses through the commands (issue 34 item 3: ``-L/--licenses`` was refused): an operator defines
one (``horizon license set``), two jobs of a public-style script (``#SBATCH --licenses=matlab:1``)
compete for it, the second waits with Slurm's reason ``Licenses`` while the first holds it, then runs;
``scontrol show lic``, ``squeue %W``/``-L`` and ``scontrol show job`` say so, and a job naming a license
not defined is refused. A real nats-server, the services in process, an agent running real processes;
every decision replays. The pure rules: tests/domain/test_licenses.py; the parsing of -L:
tests/front/test_sbatch.py."""

from __future__ import annotations

import asyncio

import pytest

from events import catalogue as c
from services.front.host.check import check_log
from services.front.slurm.sbatch_values import license_list
from services.front.slurm.scontrol_show import show_licenses_text
from services.front.slurm.squeue_format import squeue_lines
from services.front.slurm.srun_options import parse_srun
from services.scheduling.core import SchedulingCore
from services.nodes.spec import local_nodes
from tests.e2e import assert_replays
from tests.front.test_job_numbers import _cli, _ended
from tests.front.test_sbatch import parse
from tests.helpers import Feed, accepted, node, ready, spec

pytestmark = pytest.mark.timeout(240)

# The directive lines of a public-style solver script (a license-bound commercial code), its body stubbed:
# it runs until the test lets it end.
SCRIPT = """#!/bin/bash
#SBATCH --job-name=fluent-run
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --licenses=matlab:1
#SBATCH --output={out}/solver-%j.out

echo "solver $SLURM_JOB_ID started"
while [ ! -f {out}/go ]; do sleep 0.2; done
echo "solver $SLURM_JOB_ID done"
"""


# ------------------------------------------------------------------ the texts, without a server


@pytest.mark.parametrize("text, licenses", [
    ("matlab", {"matlab": 1}),
    ("matlab:2,abaqus", {"abaqus": 1, "matlab": 2}),
    ("matlab*2;matlab:1", {"matlab": 3}),  # Slurm before 2.5 wrote '*' and ';'; one named twice is summed
    ("nastran@slurmdb:12", {"nastran@slurmdb": 12}),  # a remote license's name, counted here
])
def test_licenses_are_read_as_slurms_build_license_list_reads_them(text, licenses):
    assert license_list(text) == licenses


def test_the_directive_of_a_script_becomes_the_jobs_licenses():
    assert parse("--job-name=fluent\n--licenses=matlab:2,abaqus")["licenses"] == {"abaqus": 1, "matlab": 2}
    assert parse("-L matlab")["licenses"] == {"matlab": 1}
    assert "licenses" not in parse("--job-name=plain")  # none: the field left at its default


def test_scontrol_show_lic_prints_as_slurms_info_lics():
    rows = [{"name": "matlab", "total": 3, "used": 2, "free": 1, "reserved": 0, "remote": False},
            {"name": "abaqus", "total": 1, "used": 0, "free": 1}]
    assert show_licenses_text(rows) == ("LicenseName=abaqus\n    Total=1 Used=0 Free=1 Reserved=0 Remote=no\n"
                                        "LicenseName=matlab\n    Total=3 Used=2 Free=1 Reserved=0 Remote=no")
    assert show_licenses_text(rows, "matlab", oneliner=True) == (
        "LicenseName=matlab Total=3 Used=2 Free=1 Reserved=0 Remote=no")
    assert show_licenses_text([]) == "No licenses configured in Slurm."


def test_squeue_shows_a_jobs_licenses_and_srun_takes_L_without_effect():
    row = {"job_id": "j", "state": "PENDING", "why_kind": "licenses", "why_code": "Licenses"}
    lines = squeue_lines([row], "%W %r", now=0.0, specs={"j": spec(licenses={"matlab": 2, "abaqus": 1})})
    assert lines == ["LICENSES REASON", "abaqus:1,matlab:2 Licenses"]
    assert squeue_lines([row], "%W", header=False, now=0.0, specs={"j": spec()}) == ["(null)"]
    step = parse_srun(["-L", "matlab:1", "hostname"], {})
    assert any("a step runs on its job's licenses" in note for note in step.notes)


def test_the_whole_log_check_finds_a_license_held_beyond_its_total():
    f = Feed(SchedulingCore())
    ready(f, node("n1"))
    f.admin("license", c.LicenseConfigured(name="matlab", count=1))
    for job_id in ("a", "b"):
        f.evt("submission", accepted(job_id, licenses={"matlab": 1}))
    f.evt("placement", c.JobScheduled(job_id="a", attempt=1, allocations=[c.NodeAllocation(node="n1")],
                                      basis_seq=f.seq))
    assert check_log(f.records).ok
    f.evt("placement", c.JobScheduled(job_id="b", attempt=1, allocations=[c.NodeAllocation(node="n1")],
                                      basis_seq=f.seq))
    assert check_log(f.records).problems == [f"seq {f.seq}: license matlab: 2 held, more than its 1 (b)"]


# ------------------------------------------------------------------ through the commands


async def _until(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


async def test_two_jobs_compete_for_one_license_the_second_waits_with_reason_licenses(
        running_horizon, tmp_path, monkeypatch):
    monkeypatch.setenv("HORIZON_NATS_URL", "")  # set below, once the server is known (scontrol takes no --nats)
    monkeypatch.chdir(tmp_path)
    running = await running_horizon(nodes=local_nodes(1, gpus_per_node=0, cpus=4), executor="process")
    url = running.url
    monkeypatch.setenv("HORIZON_NATS_URL", url)
    (tmp_path / "solver.sh").write_text(SCRIPT.format(out=tmp_path))

    # 1. the operator defines one matlab license; scontrol and horizon license list show it free
    code, out, err = await _cli("license", "set", "--nats", url, "matlab", "1")
    assert code == 0 and out.startswith("license matlab (1) applied"), (out, err)
    code, out, err = await _cli("scontrol", "show", "lic")
    assert (code, out) == (0, "LicenseName=matlab\n    Total=1 Used=0 Free=1 Reserved=0 Remote=no\n"), err

    # 2. a license not defined, or more than there are, is refused at submission, as Slurm's
    code, out, err = await _cli("sbatch", "--nats", url, "-L", "ansys", str(tmp_path / "solver.sh"))
    assert code == 1 and out == "" and "license 'ansys' is not defined (licenses here: matlab)" in err, err
    code, out, err = await _cli("sbatch", "--nats", url, "-L", "matlab:2", str(tmp_path / "solver.sh"))
    assert code == 1 and "2 matlab licenses is more than the cluster's 1" in err, err

    # 3. two jobs of the script: the first runs holding the license, the second waits for it
    code, out, err = await _cli("sbatch", "--nats", url, "--parsable", str(tmp_path / "solver.sh"))
    assert code == 0, err
    first = out.strip()

    async def running_first() -> bool:
        _, shown, _ = await _cli("squeue", "--nats", url, "-h", "-o", "%i %t", "-j", first)
        return shown.split() == [first, "R"]

    await _until("the first job to run", running_first)
    code, out, err = await _cli("sbatch", "--nats", url, "--parsable", str(tmp_path / "solver.sh"))
    assert code == 0, err
    second = out.strip()

    async def waiting_second() -> str:
        _, shown, _ = await _cli("squeue", "--nats", url, "-h", "-o", "%i %t %W %r", "-j", second)
        return shown if shown.split()[1:] == ["PD", "matlab:1", "Licenses"] else ""

    await _until("the second job to wait for Licenses", waiting_second)
    code, out, err = await _cli("scontrol", "show", "lic", "matlab")
    assert out == "LicenseName=matlab\n    Total=1 Used=1 Free=0 Reserved=0 Remote=no\n", (out, err)
    code, out, err = await _cli("scontrol", "show", "-o", "licenses")
    assert out == "LicenseName=matlab Total=1 Used=1 Free=0 Reserved=0 Remote=no\n", (out, err)
    code, out, err = await _cli("scontrol", "show", "job", second)
    assert code == 0 and "Reason=Licenses" in out and "Why=license_matlab:_1_of_1_in_use,_needs_1" in out, out
    assert "Licenses=matlab:1" in out, out
    code, out, err = await _cli("squeue", "--nats", url, "-h", "-L", "matlab", "-o", "%i")
    assert sorted(out.split()) == sorted([first, second]), (out, err)
    code, out, err = await _cli("license", "list", "--nats", url)
    assert out.splitlines() == ["LICENSE  TOTAL  USED  FREE", "matlab       1     1     0"], out

    # 4. the first ends and gives the license back: the second runs, then ends too
    (tmp_path / "go").write_text("")
    assert await _ended(url, first) == "COMPLETED"
    assert await _ended(url, second) == "COMPLETED"
    assert (tmp_path / f"solver-{second}.out").read_text() == f"solver {second} started\nsolver {second} done\n"
    code, out, err = await _cli("scontrol", "show", "lic")
    assert "Total=1 Used=0 Free=1" in out, out

    # 5. a bad configuration is answered with the reason; nothing changes
    code, out, err = await _cli("license", "set", "--nats", url, "matlab@", "2")
    assert code == 2 and "is not a license name" in err, err

    records = await running.records()
    await running.stop()
    assert_replays(records)
    report = check_log(records)
    assert report.ok and report.licenses.totals == {"matlab": 1} and report.licenses.used == {}, report.problems
