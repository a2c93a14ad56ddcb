"""Job numbers through the commands (issue 34 item 1): what the tools that drive Slurm read and type.
``sbatch`` prints ``Submitted batch job <number>``; squeue, sacct, scontrol, horizon show and the
requests take and show it; a job sees it as SLURM_JOB_ID, an array task as NUMBER_INDEX with
SLURM_ARRAY_JOB_ID; its steps are NUMBER.N; dependencies name it. A real nats-server, the services in
process and an agent running real processes; under --auth each tenant numbers its own jobs. The pure
rules and the core's numbering: tests/services/test_job_numbers.py."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from services.front.host.stack import Stack
from services.nodes.spec import local_nodes
from tests.e2e import assert_replays, read_log
from tests.front.test_sbatch import _invoke
from tests.front.test_tenant_boundary import AuthUp

pytestmark = pytest.mark.timeout(240)


async def _cli(*args: str) -> tuple[int, str, str]:
    return await asyncio.to_thread(_invoke, *args)


async def _sacct(url: str, *args: str) -> list[str]:
    code, out, err = await _cli("sacct", "--nats", url, "-P", "-n", *args)
    assert code == 0, err
    return out.splitlines()


async def _ended(url: str, ref: str, timeout: float = 60) -> str:
    """The state sacct gives the job ``ref`` once it has ended."""
    state = ""

    async def done() -> bool:
        nonlocal state
        lines = await _sacct(url, "-X", "-j", ref, "-o", "State")
        state = lines[0] if lines else ""
        return state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")

    deadline = asyncio.get_running_loop().time() + timeout
    while not await done():
        assert asyncio.get_running_loop().time() < deadline, f"{ref} is {state!r}"
        await asyncio.sleep(0.3)
    return state


async def test_the_number_is_printed_shown_and_taken_by_every_command(nats_server, tmp_path, monkeypatch):
    monkeypatch.setenv("HORIZON_NATS_URL", nats_server.url)  # scontrol's (it takes no --nats)
    monkeypatch.chdir(tmp_path)  # sbatch's default slurm-%j.out goes where it runs
    stack = Stack(nats_server.url, tmp_path / "stack", nodes=local_nodes(1, gpus_per_node=2), executor="process")
    await stack.start()
    url = nats_server.url
    (tmp_path / "one.sh").write_text(
        f"#!/bin/bash\n#SBATCH -J one -t 5 -o {tmp_path}/one-%j.out\n"
        'echo "ID $SLURM_JOB_ID $SLURM_JOBID $HORIZON_JOB_ID"\n'
        "srun bash -c 'echo STEP $SLURM_JOB_ID $SLURM_STEP_ID'\n"
        "scontrol show job $SLURM_JOB_ID | grep -o 'JobId=[^ ]*'\n")
    (tmp_path / "sleep.sh").write_text("#!/bin/bash\n#SBATCH -J sleeper -t 5\nsleep 300\n")
    (tmp_path / "arr.sh").write_text(
        f"#!/bin/bash\n#SBATCH -J arr -t 5 --array=0-2 -o {tmp_path}/arr-%A_%a-%j.out\n"
        'echo "ARR $SLURM_JOB_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID"\n')
    try:
        # 1. sbatch prints the number, as Slurm's job id (the first job of this log is 1)
        code, out, err = await _cli("sbatch", "--nats", url, str(tmp_path / "one.sh"))
        assert (code, out) == (0, "Submitted batch job 1\n"), err
        assert await _ended(url, "1") == "COMPLETED"
        # 2. inside it: SLURM_JOB_ID is the number (HORIZON_JOB_ID the id), its step 1.0, scontrol by number
        lines = (tmp_path / "one-1.out").read_text().splitlines()
        ident = lines[0].split()
        assert ident[:3] == ["ID", "1", "1"] and not ident[3].isdigit(), lines
        one = ident[3]
        assert "STEP 1 0" in lines and "JobId=1" in lines, lines
        # 3. sacct: the job, its batch script and its step by number, -j by number, id or step
        assert await _sacct(url, "-j", "1", "-o", "JobID,JobName,State") == [
            "1|one|COMPLETED", "1.batch|batch|COMPLETED", "1.0|bash|COMPLETED"]
        assert await _sacct(url, "-j", one, "-o", "JobID") == ["1", "1.batch", "1.0"]
        assert await _sacct(url, "-j", "1.0", "-o", "JobID,State") == ["1.0|COMPLETED"]
        code, out, err = await _cli("scontrol", "show", "step", "1.0")  # outside the job: the read model
        assert code == 0 and out.startswith("StepId=1.0 ") and "State=COMPLETED" in out, (out, err)
        # 4. --parsable, squeue -j, scontrol show job, horizon show, cancel by number
        code, out, err = await _cli("sbatch", "--nats", url, "--parsable", str(tmp_path / "sleep.sh"))
        assert (code, out) == (0, "2\n"), err
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            code, out, err = await _cli("squeue", "--nats", url, "-h", "-o", "%i %A %t %j", "-j", "2")
            if out.split()[2:3] == ["R"]:
                break
            assert asyncio.get_running_loop().time() < deadline, (out, err)
            await asyncio.sleep(0.3)
        assert out.split() == ["2", "2", "R", "sleeper"], out
        code, out, err = await _cli("show", "--nats", url, "2")
        assert code == 0 and "state RUNNING  number 2" in out.splitlines()[0], (out, err)
        code, out, err = await _cli("jobs", "--nats", url, "--json")
        rows = {r["slurm_id"]: r for r in json.loads(out)}
        assert rows["1"]["job_id"] == one and rows["1"]["number"] == 1 and rows["2"]["state"] == "RUNNING"
        code, out, err = await _cli("cancel", "--nats", url, "2")
        assert (code, out) == (0, "2: stopping\n"), err
        assert await _ended(url, "2") == "CANCELLED"
        code, out, err = await _cli("cancel", "--nats", url, "99")
        assert code == 1 and "no job '99'" in err, err  # a number naming no job: said as given
        # 5. a dependency on a number: the log's is on the id; it runs once 1 has succeeded
        code, out, err = await _cli("sbatch", "--nats", url, "--parsable", "--dependency=afterok:1",
                                    "--wrap", "true", "-t", "1")
        assert (code, out) == (0, "3\n"), err
        assert await _ended(url, "3") == "COMPLETED"
        code, out, err = await _cli("show", "--nats", url, "--json", "3")
        assert json.loads(out)["job"]["job"]["job_id"] != "3"
        dependencies = [json.loads(r.data)["spec"]["dependencies"] for r in await read_log(url)
                        if r.subject.startswith("horizon.evt.submission.JobAccepted.")
                        and json.loads(r.data)["spec"]["number"] == 3]
        assert dependencies == [[{"kind": "after-ok", "job_id": one}]]
        code, out, err = await _cli("sbatch", "--nats", url, "--dependency=afterok:99", "--wrap", "true")
        assert code == 1 and "no job 99" in err and out == "", (out, err)  # Slurm's "Job dependency problem"
        # 6. an array: its number is its first task's; a task is NUMBER_INDEX; each sees its own numbers
        code, out, err = await _cli("sbatch", "--nats", url, str(tmp_path / "arr.sh"))
        assert (code, out) == (0, "Submitted batch job 4\n"), err
        for i in range(3):
            assert await _ended(url, f"4_{i}") == "COMPLETED"
        for i in range(3):  # %A_%a-%j: the array's number, the index, the task's own number (4, 5, 6)
            text = (tmp_path / f"arr-4_{i}-{4 + i}.out").read_text()
            assert text == f"ARR {4 + i} 4 {i}\n", text
        assert await _sacct(url, "-X", "-j", "4", "-o", "JobID,JobIDRaw,State") == [
            "4_0|4|COMPLETED", "4_1|5|COMPLETED", "4_2|6|COMPLETED"]
        assert await _sacct(url, "-X", "-j", "4_2", "-o", "JobID") == ["4_2"]
        code, out, err = await _cli("scontrol", "show", "job", "4_1")
        assert code == 0 and out.startswith("JobId=5 ArrayJobId=4 ArrayTaskId=1 JobName=arr"), (out, err)
        # 7. held by number, released by number
        code, out, err = await _cli("sbatch", "--nats", url, "--parsable", "--hold", "--wrap", "true", "-t", "1")
        assert (code, out) == (0, "7\n"), err
        code, out, err = await _cli("release", "--nats", url, "7")
        assert (code, out) == (0, "7: released\n"), err
        assert await _ended(url, "7") == "COMPLETED"
        assert_replays(await read_log(url))  # the numbers are the log's: replay decides them again
    finally:
        await stack.stop()


def test_under_accounts_each_tenant_numbers_its_own_jobs(tmp_path):
    """acme and globex each get 1, 2, ...: a tenant's numbers say nothing of the others'. Each names its
    jobs by its own numbers; another tenant's number is no job of its."""
    up = AuthUp(tmp_path / "data")
    try:
        def sbatch(tenant: str) -> str:
            done = up.cli("sbatch", "--parsable", "--sim-runtime", "300", "-t", "10", "--wrap", "true",
                          tenant=tenant, ok=True)
            return done.stdout.strip()

        assert [sbatch("acme"), sbatch("acme"), sbatch("globex"), sbatch("acme")] == ["1", "2", "1", "3"]

        def squeue(tenant: str) -> list[str]:
            return sorted(up.cli("squeue", "-h", "-o", "%i", tenant=tenant, ok=True).stdout.split())

        assert squeue("acme") == ["1", "2", "3"] and squeue("globex") == ["1"]
        shown = up.cli("show", "--json", "2", tenant="acme", ok=True)
        assert json.loads(shown.stdout)["job"]["job"]["slurm_id"] == "2"
        missing = up.cli("show", "2", tenant="globex")  # globex has no job 2 (acme's 2 is acme's)
        assert missing.returncode != 0 and "no job or array '2'" in missing.stderr
        done = up.cli("scancel", "1", tenant="globex")
        assert (done.returncode, done.stderr) == (0, "")
        deadline = time.monotonic() + 30
        while squeue("globex"):  # globex's 1 is cancelled, not acme's
            assert time.monotonic() < deadline, squeue("globex")
            time.sleep(0.3)
        assert squeue("acme") == ["1", "2", "3"]
    finally:
        up.stop()
