"""Slurm's reason codes where tools read them (issue 34): squeue's REASON and ``scontrol show job``'s
``Reason=`` are Slurm's codes (``Resources``, ``Priority``, ``Dependency``, ``JobHeldUser``,
``BeginTime``, ``JobArrayTaskLimit``, ...), the sentence stays for ``horizon queue --why``, ``horizon
show`` and scontrol's ``Why=``; ``scontrol show job ARRAY`` lists the array's tasks as Slurm does.

Pure formatting first, then a running Horizon (the real services, the sim executor) with the jobs of
public scripts waiting for each reason.
"""

from __future__ import annotations

import asyncio
import io
from contextlib import redirect_stderr, redirect_stdout

import nats
import pytest

from services.front.cli.scontrol import run_scontrol
from services.front.host.stack import Stack
from services.front.slurm.scontrol_show import show_array_text, show_job_text, slurm_job_reason
from services.nodes.spec import local_nodes
from tests.e2e import Tally, wait_until
from tests.front.test_sbatch import _invoke

pytestmark = pytest.mark.timeout(180)

ROW = {"job_id": "train", "name": "train", "user": "ann", "account": "ml", "nodes": 1, "tasks_per_node": 1,
       "cpus_milli": 1000, "memory_bytes": 1 << 30, "time_limit_s": 600.0, "submitted_ts": 1000.0}


# ----------------------------------------------------------------------------- pure


def test_scontrol_says_slurms_reason_then_the_sentence():
    pending = {**ROW, "state": "PENDING", "why_kind": "resources", "why": "1 nodes: too few free GPUs (needs 4)"}
    text = show_job_text(pending, {}, 2000.0)
    assert "   JobState=PENDING Reason=Resources Dependency=(null) Why=1_nodes:_too_few_free_GPUs_(needs_4)\n" in text
    assert "Reason=JobHeldUser" in show_job_text({**ROW, "state": "HELD", "why_kind": "held"}, {}, 2000.0)
    quota = {**pending, "why_kind": "quota", "why_code": "AssocGrpGRES", "why": "account ml quota: 2 GPUs in use"}
    assert "Reason=AssocGrpGRES" in show_job_text(quota, {}, 2000.0)
    # an ended job's reason, as Slurm's
    assert slurm_job_reason({"state": "FAILED", "exit_code": 3}, "FAILED") == "NonZeroExitCode"
    assert slurm_job_reason({"state": "FAILED", "exit_code": None}, "TIMEOUT") == "TimeLimit"
    assert slurm_job_reason({"state": "DEPENDENCY_NEVER_SATISFIED"}, "CANCELLED") == "DependencyNeverSatisfied"
    assert slurm_job_reason({"state": "RUNNING"}, "RUNNING") == slurm_job_reason({"state": "SUCCEEDED"},
                                                                                 "COMPLETED") == "None"


def test_an_array_is_its_started_tasks_and_one_record_of_the_pending_ones():
    def task(i: int, state: str) -> tuple[dict, dict]:
        return ({**ROW, "job_id": f"sweep_{i}", "state": state, "why_kind": "array-limit" if i > 2 else ""},
                {"array": "sweep", "array_index": i, "array_max_running": 2})

    tasks = [task(0, "SUCCEEDED"), task(1, "RUNNING"), task(2, "PENDING"), task(3, "PENDING"), task(5, "PENDING")]
    records = show_array_text(tasks, 2000.0).split("\n\n")
    heads = [r.splitlines()[0] for r in records]
    assert heads == ["JobId=sweep_0 ArrayJobId=sweep ArrayTaskId=0 JobName=train",
                     "JobId=sweep_1 ArrayJobId=sweep ArrayTaskId=1 JobName=train",
                     "JobId=sweep_2 ArrayJobId=sweep ArrayTaskId=2-3,5%2 JobName=train"]
    assert len(show_array_text(tasks, 2000.0, oneliner=True).splitlines()) == 3


# ----------------------------------------------------------------------------- a running Horizon


def scontrol(url: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = run_scontrol(["show", "job", *args], {"HORIZON_NATS_URL": url})
    return code, out.getvalue()


async def test_waiting_jobs_show_slurms_reasons_and_an_array_its_tasks(nats_server, tmp_path, monkeypatch):
    stack = Stack(nats_server.url, tmp_path / "stack", nodes=local_nodes(1, gpus_per_node=4, cpus=16),
                  executor="sim")
    await stack.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    url = nats_server.url
    monkeypatch.setenv("HORIZON_NATS_URL", url)  # scontrol reads it from the environment, as the shim's
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\npython train.py\n")

    def sbatch(job_id: str, *directives: str) -> None:
        code, _out, err = _invoke("sbatch", "--nats", url, "--job-id", job_id, "--sim-runtime", "3600",
                                  "--time=120", f"--output={tmp_path}/%j.out", *directives, str(script))
        assert code == 0, (job_id, err)

    def squeue() -> dict[str, str]:
        code, out, err = _invoke("squeue", "--nats", url, "-h", "-r", "-t", "PD", "-o", "%j %r")
        assert code == 0, err
        return dict(line.split() for line in out.splitlines())

    try:
        await asyncio.to_thread(sbatch, "hog", "-J", "hog", "--gres=gpu:4")
        await wait_until(lambda: tally.has("JobStarted", "hog"), 30, "hog to start")
        for job_id, directives in [("big", ("-J", "big", "--gres=gpu:4")),
                                   ("after", ("-J", "after", "-d", "afterok:hog")),
                                   ("kept", ("-J", "kept", "-H")),
                                   ("later", ("-J", "later", "--begin=now+1hour"))]:
            await asyncio.to_thread(sbatch, job_id, *directives)
        await asyncio.to_thread(sbatch, "sweep", "-J", "sweep", "--array=0-2%1", "--gres=gpu:1")
        want = {"big": "Resources", "after": "Dependency", "kept": "JobHeldUser", "later": "BeginTime"}
        for _ in range(60):  # each reason as soon as the scheduler (and placement) has seen the job
            shown = await asyncio.to_thread(squeue)
            if all(shown.get(name) == code for name, code in want.items()):
                break
            await asyncio.sleep(0.5)
        assert {name: shown.get(name) for name in want} == want, shown
        for _ in range(40):  # the array: its pending tasks in one record, once the read model has all three
            code, text = await asyncio.to_thread(scontrol, url, "sweep")
            if "ArrayTaskId=0-2%1" in text:
                break
            await asyncio.sleep(0.25)
        assert code == 0 and "ArrayTaskId=0-2%1" in text and "JobState=PENDING" in text, text
        assert sum(line.startswith("JobId=") for line in text.splitlines()) == 1  # one record
        code, text = await asyncio.to_thread(scontrol, url, "kept")
        assert code == 0 and "Reason=JobHeldUser" in text and "Why=held:_not_a_candidate_until_released" in text
        code, text = await asyncio.to_thread(scontrol, url, "no-such-job")
        assert code == 1
    finally:
        await nc.close()
        await stack.stop()
