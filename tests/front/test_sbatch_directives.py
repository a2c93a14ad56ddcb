"""Scripts with the option forms and directives of real sites, submitted by ``horizon sbatch`` to a running
Horizon whose agent runs them as real processes (issue 18): each ends SUCCEEDED and its output shows the
directive was honoured (the GPUs a node's tasks share, whole nodes, the signal before the time limit, one
singleton at a time, a job submitted held)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest

from services.nodes.spec import local_nodes
from services.front.host.stack import Stack
from tests.e2e import Tally, assert_replays, read_log, wait_until
from tests.front.test_sbatch import _invoke

pytestmark = pytest.mark.timeout(180)

SCRIPTS = {
    # four tasks share the node's one GPU; Slurm's GB is binary
    "shared.sh": """#!/bin/bash
#SBATCH --job-name=shared --ntasks=4 --gres=gpu:1 --mem=2GB --time=5
#SBATCH --mail-type=END --mail-user=ann@example.org --hint=nomultithread
echo "gpus=$CUDA_VISIBLE_DEVICES on_node=$SLURM_GPUS_ON_NODE ntasks=$SLURM_NTASKS"
""",
    # the whole node: all its GPUs and CPUs; all its memory
    "whole.sh": """#!/bin/bash
#SBATCH --job-name=whole --exclusive --mem=0 --gres=gpu:1 --constraint='[a100|h100]' --time=5
echo "gpus=$CUDA_VISIBLE_DEVICES cpus=$HORIZON_CPUS node=$SLURMD_NODENAME"
""",
    # the batch shell gets USR1 58 s before its 1-minute limit: it checkpoints and ends well
    "signal.sh": """#!/bin/bash
#SBATCH --job-name=ckpt --time=1 --signal=B:USR1@58 --requeue --export=ALL
trap 'echo "USR1 after $SECONDS s"; exit 0' USR1
while :; do sleep 0.2; done
""",
    # one at a time: the second starts when the first has ended
    "single.sh": """#!/bin/bash
#SBATCH --job-name=nightly --dependency=singleton --time=5 --tasks-per-node=1
echo "start $(date +%s.%N)"; sleep 1; echo "end $(date +%s.%N)"
""",
}


async def test_scripts_with_slurm_directives_run_as_slurm_would(nats_server, tmp_path):
    nodes = local_nodes(2, gpus_per_node=2, cpus=4, memory_bytes=8 << 30)
    stack = Stack(nats_server.url, tmp_path / "stack", nodes=nodes, executor="process")
    await stack.start()
    nc = await nats.connect(nats_server.url)
    tally = Tally()
    await nc.subscribe("horizon.evt.>", cb=tally.on_msg)
    url = nats_server.url
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)

    def sbatch(job_id: str, script: str, *options: str) -> tuple[int, str, str]:
        return _invoke("sbatch", "--nats", url, "--job-id", job_id, *options, f"--output={tmp_path}/{job_id}.out",
                       str(tmp_path / script))

    try:
        code, out, err = await asyncio.to_thread(sbatch, "shared-1", "shared.sh")
        assert code == 0 and out == "Submitted batch job 1\n", err  # its number (Slurm's job id)
        assert "line 3: --mail-type: no effect here" in err and "line 3: --hint: no effect here" in err
        for job_id, script, options in [("whole-1", "whole.sh", ()), ("ckpt-1", "signal.sh", ()),
                                        ("nightly-1", "single.sh", ()), ("nightly-2", "single.sh", ()),
                                        ("held-1", "shared.sh", ("--hold",))]:
            code, out, err = await asyncio.to_thread(sbatch, job_id, script, *options)
            assert code == 0, (job_id, err)
        await wait_until(lambda: all(tally.has("JobSucceeded", j) for j in (
            "shared-1", "whole-1", "ckpt-1", "nightly-1", "nightly-2")), 90, "the jobs to succeed")
        assert not tally.has("JobScheduled", "held-1")  # held since it was accepted
        code, out, err = await asyncio.to_thread(_invoke, "release", "--nats", url, "held-1")
        assert code == 0, err
        await wait_until(lambda: tally.has("JobSucceeded", "held-1"), 30, "the released job to succeed")
    finally:
        await nc.close()
        await stack.stop()

    def output(job_id: str) -> str:
        return Path(tmp_path / f"{job_id}.out").read_text()

    assert output("shared-1") == "gpus=0 on_node=1 ntasks=4\n"  # one device for the node's four tasks
    gpus, cpus, node = (part.split("=")[1] for part in output("whole-1").split())
    assert gpus == "0,1" and cpus == "4"  # the whole node: both GPUs, all 4 CPUs
    whole = next(json.loads(r.data) for r in await read_log(url)
                 if r.subject == "horizon.evt.placement.JobScheduled.whole-1")
    assert whole["allocations"][0]["memory_bytes"] == 8 << 30  # --mem=0: all of the node's memory
    seconds = int(output("ckpt-1").split()[2])
    assert 1 <= seconds <= 5  # 60 s limit, signal 58 s before it
    starts = {j: [float(line.split()[1]) for line in output(j).splitlines()] for j in ("nightly-1", "nightly-2")}
    assert starts["nightly-2"][0] >= starts["nightly-1"][1]  # the second began after the first ended
    assert_replays(await read_log(url))


async def test_wait_returns_when_the_job_has_ended_with_its_exit_code(nats_server, tmp_path):
    stack = Stack(nats_server.url, tmp_path / "stack", nodes=local_nodes(1, gpus_per_node=0), executor="process")
    await stack.start()
    (tmp_path / "fails.sh").write_text("#!/bin/bash\n#SBATCH --time=5\nsleep 1; exit 3\n")
    (tmp_path / "waits.sh").write_text("#!/bin/bash\n#SBATCH --wait --time=5 --array=0-2\nsleep 0.5\n")
    url = nats_server.url
    try:
        code, out, err = await asyncio.to_thread(_invoke, "sbatch", "--nats", url, "--job-id", "w-fail", "-W",
                                                 f"--output={tmp_path}/w.out", str(tmp_path / "fails.sh"))
        assert (code, out) == (3, "Submitted batch job 1\n"), err  # sbatch --wait exits as the job did
        code, out, err = await asyncio.to_thread(_invoke, "sbatch", "--nats", url, "--job-id", "w-array",
                                                 f"--output={tmp_path}/a-%a.out", str(tmp_path / "waits.sh"))
        assert code == 0, err  # #SBATCH --wait: every task of the array ended well
        rows = await _rows(url, ["w-array_0", "w-array_1", "w-array_2"])
        assert [r["state"] for r in rows] == ["SUCCEEDED"] * 3
    finally:
        await stack.stop()


async def _rows(url: str, job_ids: list[str]) -> list[dict]:
    from services.front.client.client import query

    nc = await nats.connect(url)
    try:
        body = await query(nc, "jobs", {"job_ids": job_ids, "limit": len(job_ids)})
    finally:
        await nc.close()
    return sorted(body["jobs"], key=lambda r: r["job_id"])
