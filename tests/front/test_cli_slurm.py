"""The Slurm-style views against running services: horizon sacct (= jobs --history), queue --format
(squeue's), and cancel by filters (scancel's); plus the pure formatting helpers."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats
import pytest
from click.testing import CliRunner

from services.nodes.spec import local_nodes
from services.front.client.client import default_user
from services.front.cli.main import cli
from services.front.slurm.job_rows import hostlist, slurm_state, squeue_duration
from services.front.slurm.sacct_format import sacct_duration, slurm_datetime
from services.front.slurm.squeue_format import squeue_lines
from services.front.host.stack import Stack
from tests.e2e import assert_replays, job_json, read_log

pytestmark = pytest.mark.timeout(120)


async def publish_in_order(url: str, items: list[tuple[str, bytes, str]]) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for subject, data, msg_id in items:
        await js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
    await nc.close()


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


async def horizon(url: str, *args: str) -> tuple[int, str, str]:
    """A command in this process (a thread: the stack runs on this loop), against the stack at ``url``."""
    return await asyncio.to_thread(_invoke, *args, "--nats", url)


# ------------------------------------------------------------------ pure helpers


@pytest.mark.parametrize("names, text", [
    (["node-01", "node-02", "node-03"], "node-[01-03]"),
    (["node-01"], "node-01"),
    (["n1", "n3", "n2", "n7", "gpu-a"], "gpu-a,n[1-3,7]"),
    (["a-009", "a-010", "b"], "a-[009-010],b"),
    ([], ""),
])
def test_hostlist(names, text):
    assert hostlist(names) == text


def test_durations_as_squeue_and_sacct_write_them():
    assert [squeue_duration(s) for s in (0, 65, 3600, 90061, None)] == ["0:00", "1:05", "1:00:00", "1-01:01:01",
                                                                       "UNLIMITED"]
    assert [sacct_duration(s) for s in (0, 65, 90061)] == ["00:00:00", "00:01:05", "1-01:01:01"]


def test_times_as_sacct_reads_them():
    now = time.mktime((2024, 3, 10, 15, 30, 0, 0, 0, -1))
    assert slurm_datetime("now-2hours", now) == now - 7200
    assert slurm_datetime("now", now) == now
    assert slurm_datetime("midnight", now) == time.mktime((2024, 3, 10, 0, 0, 0, 0, 0, -1))
    assert slurm_datetime("2024-03-01T08:15", now) == time.mktime((2024, 3, 1, 8, 15, 0, 0, 0, -1))
    assert slurm_datetime("03/02", now) == time.mktime((2024, 3, 2, 0, 0, 0, 0, 0, -1))
    assert slurm_datetime("09:00", now) == time.mktime((2024, 3, 10, 9, 0, 0, 0, 0, -1))


def test_states_and_squeue_format():
    assert slurm_state({"state": "FAILED", "reason": "time limit of 60 s exceeded"}) == "TIMEOUT"
    assert slurm_state({"state": "FAILED", "reason": "node node-01 lost"}) == "NODE_FAIL"
    assert slurm_state({"state": "FAILED", "reason": "exit code 2"}) == "FAILED"
    assert slurm_state({"state": "SUCCEEDED"}) == "COMPLETED"
    row = {"job_id": "a-very-long-job-id", "name": "train", "user": "ann", "account": "ml", "state": "RUNNING",
           "nodes": 2, "tasks_per_node": 4, "cpus_milli": 2000, "memory_bytes": 1 << 30, "gpus": 16,
           "gpu_type": "a100", "time_limit_s": 7200.0, "started_ts": 1000.0, "reason": None,
           "allocation": [{"node": "node-01", "device_ids": []}, {"node": "node-02", "device_ids": []}]}
    assert squeue_lines([row], "%.8i %5j %t %M %L %D %C %m %b %R%%", now=1065.0) == [
        "   JOBID NAME  ST TIME TIME_LEFT NODES CPUS MIN_MEMORY TRES_PER_NODE NODELIST(REASON)%",
        "a-very-long-job-id train R 1:05 1:58:55 2 16 4Gi gres/gpu:a100:8 node-[01-02]%"]  # an id is never cut
    assert squeue_lines([row], "%5i%5j%t", header=False, now=1065.0) == ["a-very-long-job-id trainR"]  # -O style
    # a waiting job's REASON is Slurm's code, as tools that drive Slurm read it (the sentence: queue --why)
    pending = {**row, "state": "PENDING", "reason": "2 nodes: too few free GPUs", "why_kind": "resources",
               "why": "2 nodes: too few free GPUs", "started_ts": None, "allocation": []}
    assert squeue_lines([pending], "%T %M %R", header=False) == ["PENDING 0:00 (Resources)"]
    held_back = {**pending, "why_kind": "quota", "why_code": "QOSGrpGRES",
                 "why": "account ml quota (Slurm QOS gpuq GrpTRES): 2 GPUs in use"}
    assert squeue_lines([held_back], "%t %R|%r", header=False) == ["PD (QOSGrpGRES)|QOSGrpGRES"]
    held = {**pending, "state": "HELD", "why_kind": "held"}
    assert squeue_lines([held, {**pending, "why_kind": "dependency"}, {**pending, "why_kind": None}], "%R",
                        header=False) == ["(JobHeldUser)", "(Dependency)", "(None)"]


# ------------------------------------------------------------------ against the services


async def test_sacct_squeue_format_and_scancel_filters(nats_server, tmp_path):
    stack = Stack(nats_server.url, tmp_path, nodes=local_nodes(1, gpus_per_node=4), executor="sim")
    await stack.start()
    url = nats_server.url
    me = default_user()
    try:
        mine: dict[str, Any] = {"tenant": "default", "user": me, "account": "ml"}
        await publish_in_order(url, [
            ("horizon.in.default.submit", job_json("ok1", **mine, resources={"gpus": 1}, sim_runtime_s=0.1), "ok1"),
            ("horizon.in.default.submit", job_json("bad1", tenant="default", user="bob", sim_runtime_s=0.1,
                                                   sim_exit_code=3), "bad1"),
            ("horizon.in.default.submit", job_json("slow1", **mine, name="train", resources={"gpus": 2},
                                                   sim_runtime_s=600), "slow1"),
        ])

        async def rows() -> dict[str, dict[str, Any]]:
            code, out, err = await horizon(url, "jobs", "--json")
            assert code == 0, err
            return {r["job_id"]: r for r in json.loads(out)}

        deadline = asyncio.get_running_loop().time() + 30
        while True:
            states = {j: r["state"] for j, r in (await rows()).items()}
            if states == {"ok1": "SUCCEEDED", "bad1": "FAILED", "slow1": "RUNNING"}:
                break
            assert asyncio.get_running_loop().time() < deadline, states
            await asyncio.sleep(0.2)
        # queued behind slow1 (3 GPUs do not fit beside its 2): three sweeps of mine, one of bob's
        await publish_in_order(url, [
            *[("horizon.in.default.submit", job_json(f"sweep-{x}", **mine, name="sweep", resources={"gpus": 3},
                                                      command=["true"]),
               f"sweep-{x}") for x in "abc"],
            ("horizon.in.default.submit", job_json("sweep-bob", tenant="default", user="bob", name="sweep",
                                                   resources={"gpus": 3}, command=["true"]), "sweep-bob"),
        ])
        while len(await rows()) < 7:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)

        # sacct: what ran or ended; mine unless --allusers (-S: not only since midnight, should this run span it)
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "--json")
        assert code == 0, err
        assert sorted(r["job_id"] for r in json.loads(out)) == ["ok1", "slow1"]
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "--allusers", "--json")
        got = {r["job_id"]: r["slurm"] for r in json.loads(out)}
        assert sorted(got) == ["bad1", "ok1", "slow1"]
        assert (got["ok1"]["State"], got["ok1"]["ExitCode"], got["ok1"]["AllocGPUs"]) == ("COMPLETED", "0:0", "1")
        assert (got["bad1"]["State"], got["bad1"]["ExitCode"]) == ("FAILED", "3:0")
        assert (got["slow1"]["State"], got["slow1"]["End"], got["slow1"]["NodeList"]) == ("RUNNING", "Unknown",
                                                                                           "node-00")
        code, out, err = await horizon(url, "jobs", "--history", "--starttime", "now-1day", "--json")
        assert code == 0 and sorted(r["job_id"] for r in json.loads(out)) == ["bad1", "ok1", "slow1"], err
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "-a", "--state", "F", "--json")
        assert [r["job_id"] for r in json.loads(out)] == ["bad1"]
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "-a", "-s", "CD,R", "--json")
        assert sorted(r["job_id"] for r in json.loads(out)) == ["ok1", "slow1"]
        code, out, err = await horizon(url, "sacct", "-a", "--starttime", "now+1hour", "--json")
        assert [r["job_id"] for r in json.loads(out)] == ["slow1"]  # the ended ones ended before
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "-a", "-P", "--format", "JobID,State,ExitCode")
        assert code == 0, err
        # each job that started has its batch script's line, JOBID.batch, as sacct shows it; a job is shown
        # by its number (ok1 is 1, bad1 2, slow1 3: services/domain/job_numbers.py)
        assert out.splitlines() == ["JobID|State|ExitCode", "1|COMPLETED|0:0", "1.batch|COMPLETED|0:0",
                                    "2|FAILED|3:0", "2.batch|FAILED|3:0", "3|RUNNING|0:0",
                                    "3.batch|RUNNING|0:0"]  # -P: no | at the end (that is -p)
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "-a", "-p", "-n", "-o", "JobID,State")
        assert out.splitlines() == ["1|COMPLETED|", "1.batch|COMPLETED|", "2|FAILED|", "2.batch|FAILED|",
                                    "3|RUNNING|", "3.batch|RUNNING|"], err
        code, out, err = await horizon(url, "sacct", "-j", "bad1,ok1", "-P", "-n", "-b", "--delimiter", ";")
        assert out.splitlines() == ["1;COMPLETED;0:0", "1.batch;COMPLETED;0:0", "2;FAILED;3:0",
                                    "2.batch;FAILED;3:0"], err  # -j: anyone's, since ever (by id or number)
        code, out2, err = await horizon(url, "sacct", "-j", "2,1", "-P", "-n", "-b", "--delimiter", ";")
        assert out2 == out, err
        code, out, err = await horizon(url, "sacct", "-j", "bad1.batch", "-P", "-n", "-b")
        assert out.splitlines() == ["2.batch|FAILED|3:0"], err  # a step's id: that line alone
        code, out, err = await horizon(url, "sacct", "-j", "2.batch", "-P", "-n", "-o", "JobID,JobIDRaw,State")
        assert out.splitlines() == ["2.batch|2.batch|FAILED"], err
        code, out, err = await horizon(url, "sacct", "-j", "bad1,ok1", "-X", "-P", "-n", "-b")
        assert out.splitlines() == ["1|COMPLETED|0:0", "2|FAILED|3:0"], err  # -X: the jobs alone
        code, out, err = await horizon(url, "sacct", "-a", "-s", "R", "-n", "-P", "-o", "JobID%-10,State")
        assert out.splitlines() == ["3|RUNNING", "3.batch|RUNNING"], err  # -s without -S: in that state now
        code, out, err = await horizon(url, "sacct", "-a", "-S", "now-1day", "-o", "JobID%-6,State%4", "-n")
        assert out.splitlines()[0] == "1      COM+", out  # cut to the width, + marking the cut
        code, out, err = await horizon(url, "sacct", "-S", "now-1day")
        lines = out.splitlines()
        assert lines[0].split() == ["JobID", "JobName", "Account", "State", "ExitCode", "Elapsed", "Start", "End",
                                    "NodeList", "AllocGPUs"]
        assert set(lines[1]) == {"-", " "} and "COMPLETED" in lines[2]
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "--state", "DONE")
        assert code == 2 and "'DONE' is not a job state" in err

        # queue --format: squeue's fields; the default views are as they were
        code, out, err = await horizon(url, "queue", "-t", "R", "--noheader", "--format", "%i %t %P %q %D %b %R")
        assert code == 0, err
        assert out.splitlines() == ["3 R N/A normal 1 gres/gpu:2 node-00"]  # no partition is defined here
        code, out, err = await horizon(url, "queue", "--format", "%.9i|%4j|%T|%u")
        # in scheduling order: bob's account has no usage, ml's has slow1 running (fair share)
        assert out.splitlines() == ["    JOBID|NAME|STATE|USER", "        7|swee|PENDING|bob",
                                    "        4|swee|PENDING|" + me, "        5|swee|PENDING|" + me,
                                    "        6|swee|PENDING|" + me]
        code, out, err = await horizon(url, "queue")
        assert out.split()[:3] == ["POS", "JOBID", "NAME"] and "4 queued" in out
        # paging: the same order, a window at a time, in every listing
        code, out, err = await horizon(url, "queue", "--limit", "2", "--offset", "1", "--json")
        assert code == 0, err
        assert [r["job_id"] for r in json.loads(out)] == ["sweep-a", "sweep-b"]
        code, out, err = await horizon(url, "queue", "--limit", "2", "--offset", "3", "--states", "all", "--json")
        assert code == 0, err  # past the 4 waiting jobs the page goes on into the others
        assert [r["job_id"] for r in json.loads(out)][:1] == ["sweep-c"] and len(json.loads(out)) == 2
        code, out, err = await horizon(url, "jobs", "--json")
        everyone = [r["job_id"] for r in json.loads(out)]
        code, out, err = await horizon(url, "jobs", "--limit", "3", "--offset", "2", "--json")
        assert [r["job_id"] for r in json.loads(out)] == everyone[2:5]
        code, out, err = await horizon(url, "jobs", "--limit", "3", "--offset", "2")
        assert code == 0 and f"rows 3-5 of {len(everyone)}; next page: --offset 5" in out, out
        code, out, err = await horizon(url, "sacct", "-S", "now-1day", "-a", "--limit", "1", "--offset", "1",
                                       "--json")
        assert [r["job_id"] for r in json.loads(out)] == ["bad1"]
        code, out, err = await horizon(url, "jobs", "--offset", "-1")
        assert code == 2 and "must not be negative" in err
        code, out, err = await horizon(url, "queue", "--format", "%z")
        assert code == 2 and "%z is not a field Horizon knows" in err

        # cancel by filters
        code, out, err = await horizon(url, "cancel")
        assert code == 2 and "give a JOB, or filters" in err
        code, out, err = await horizon(url, "cancel", "slow1", "--name", "train")
        assert code == 2 and "not both" in err
        code, out, err = await horizon(url, "cancel", "--name", "nothing-like-it")
        assert code == 0 and "no live job matches" in err
        code, out, err = await horizon(url, "cancel", "--name", "sweep", "--state", "PENDING", "--me")
        assert code == 0, err
        assert out.splitlines() == ["sweep-a: cancelled", "sweep-b: cancelled", "sweep-c: cancelled",
                                    "3 job(s): 3 cancelled"]
        code, out, err = await horizon(url, "cancel", "--state", "RUNNING", "--account", "ml", "--json")
        assert code == 0, err
        assert [(a["job_id"], a["type"]) for a in json.loads(out)] == [("slow1", "JobStopRequested")]
        while (states := {j: r["state"] for j, r in (await rows()).items()})["slow1"] != "CANCELLED":
            assert asyncio.get_running_loop().time() < deadline, states
            await asyncio.sleep(0.2)
        assert states["sweep-bob"] in ("PENDING", "RUNNING", "SCHEDULED")  # bob's: not named by the filters
        assert [states[f"sweep-{x}"] for x in "abc"] == ["CANCELLED"] * 3
        code, out, err = await horizon(url, "cancel", "sweep-bob")  # by id, as before
        assert code == 0 and out.startswith("sweep-bob: "), err
    finally:
        await stack.stop()
    assert_replays(await read_log(url))
