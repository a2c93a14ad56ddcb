"""The Slurm execution backend (docs/backends.md): Horizon decides, a real Slurm cluster runs.

The pure core is tested on Slurm 22.05's own output lines (parsing, nodes, drains, what jobs outside
Horizon hold, a placement's sbatch line, outcomes). The rest runs a real local Slurm cluster
(``tests/slurm_cluster.py``: ``slurmctld`` and one ``slurmd`` per node on this host, started and
stopped by PID) under ``horizon up --backend slurm``: jobs of each kind, and, in the slow suite, the
issue's mixed workload, each job's state compared with Slurm's record and where it ran with where
Horizon placed it, then ``horizon check`` and ``horizon audit``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from events import catalogue as c
from services.nodes.backends.slurm import core
from services.runtime.consume import readable
from services.runtime.jetstream import JetStreamLog
from tests.helpers import job_file
from tests.slurm_cluster import SlurmCluster, SlurmNode, slurm_installed
from tests.nodes.test_real_nodes import HORIZON, Up

needs_slurm = pytest.mark.skipif(not slurm_installed(), reason="Slurm (slurm-wlm) is not installed")

# Lines as Slurm 22.05.8 prints them (scontrol show node -o; scontrol show job -o -d).
NODE_LINE = ("NodeName=s1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 CPUEfctv=4 CPUTot=4 CPULoad=0.59 "
             "AvailableFeatures=fast,ib ActiveFeatures=fast,ib Gres=gpu:a100:2(S:0) NodeAddr=vm NodeHostName=vm "
             "Port=17821 Version=22.05.8 OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=4000 "
             "AllocMem=100 FreeMem=22695 Sockets=4 Boards=1 State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 "
             "Owner=N/A MCS_label=N/A Partitions=main,gpu  BootTime=2026-11-26T14:10:43 "
             "SlurmdStartTime=2026-11-26T20:35:07 LastBusyTime=Unknown CfgTRES=cpu=4,mem=4000M,billing=4 "
             "AllocTRES=cpu=2,mem=100M CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
             "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=disk swap [root@2026-11-26T20:40:07]")
FOREIGN_JOB = ("JobId=7 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
               "Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) ExitCode=0:0 "
               "StartTime=2026-11-26T20:35:40 NodeList=s1 BatchHost=s1 NumNodes=1 NumCPUs=2 NumTasks=1 "
               "CPUs/Task=2 TRES=cpu=2,mem=100M,node=1,billing=2 JOB_GRES=gpu:1   Nodes=s1 CPU_IDs=0-1 Mem=100 "
               "GRES= MinCPUsNode=2 Features=(null) Command=(null) WorkDir=/tmp Comment=(null)  "
               "StdErr=/tmp/out StdOut=/tmp/out Power= TresPerNode=gres:gpu:1 ")
HORIZON_JOB = ("JobId=8 JobName=horizon-acme:j1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 "
               "StartTime=2026-11-26T20:35:40 NodeList=s2 Nodes=s2 CPU_IDs=0 Mem=1024 GRES= "
               "Comment=horizon:ab12:2:acme:j1  StdErr=/tmp/e")
OTHER_HORIZON = FOREIGN_JOB.replace("JobId=7", "JobId=9").replace("Comment=(null)", "Comment=horizon:ffff:1:x")


# ---------------------------------------------------------------------- the pure core


def test_records_keep_values_with_spaces_and_repeated_keys() -> None:
    [node] = core.parse_records(NODE_LINE)
    assert node["OS"] == "Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0"
    assert node["Reason"] == "disk swap [root@2026-11-26T20:40:07]"
    assert node["Partitions"] == "main,gpu" and node["Gres"] == "gpu:a100:2(S:0)"
    two = core.parse_records("JobId=1 Nodes=s1 CPU_IDs=0-1 Mem=10 GRES= Nodes=s[2-3] CPU_IDs=0 Mem=5 GRES=\n\n"
                             "No jobs in the system\n")
    assert len(two) == 1 and two[0]["Nodes*"] == "s1\ns[2-3]" and two[0]["Mem*"] == "10\n5"


def test_a_slurm_node_as_horizon_registers_it() -> None:
    [record] = core.parse_records(NODE_LINE)
    spec = core.node_spec(record, "main")
    assert (spec.name, spec.cpus_milli, spec.memory_bytes, spec.backend) == ("s1", 4000, 4000 << 20, "slurm")
    assert [(g.id, g.type, g.health) for g in spec.gpus] == [("gpu0", "a100", ""), ("gpu1", "a100", "")]
    assert spec.labels == {"slurm.partition": "main", "slurm.feature/fast": "true", "slurm.feature/ib": "true"}
    assert spec.registration("slurm").backend == "slurm"
    assert core.node_drained(record) == "Slurm: MIXED+DRAIN (disk swap [root@2026-11-26T20:40:07])"
    assert core.node_drained({"State": "IDLE"}) is None and core.node_drained({"State": "ALLOCATED"}) is None
    assert core.node_drained({"State": "DOWN*", "Reason": "Not responding"}) == "Slurm: DOWN* (Not responding)"
    assert core.node_drained({"State": "IDLE*"}) is not None  # not responding
    # slurmctld restarted: the node's state is not known yet, which is no drain (nor a return)
    assert core.node_unknown({"State": "UNKNOWN"}) and core.node_drained({"State": "UNKNOWN"}) is None
    assert not core.node_unknown({"State": "UNKNOWN+DRAIN"}) and core.node_drained({"State": "UNKNOWN+DRAIN"})


def test_what_slurm_runs_on_its_own_is_busy_capacity() -> None:
    jobs = core.parse_records(FOREIGN_JOB + "\n" + HORIZON_JOB)
    use = core.foreign_use(jobs, "ab12")
    assert use == {"s1": core.Use(cpus=2, memory_mib=100, gpus=1, jobs=("7",))}  # Horizon's own job 8 is not
    # another Horizon installation's job over the same Slurm is Slurm's own to this one
    assert core.foreign_use(core.parse_records(OTHER_HORIZON), "ab12")["s1"].jobs == ("9",)
    [record] = core.parse_records(NODE_LINE)
    # the node's totals stay (4 CPUs, 4000 MiB, 2 GPUs, all healthy); Slurm's job 7 *uses* 2 CPUs,
    # 100 MiB and one GPU: of gpu0 and gpu1 the highest one no Horizon job holds
    spec = core.node_spec(record, "", use["s1"], held_devices=())
    assert (spec.cpus_milli, spec.memory_bytes, len(spec.gpus)) == (4000, 4000 << 20, 2)
    assert not any(g.health for g in spec.gpus)
    assert spec.foreign == c.ForeignUse(cpus_milli=2000, memory_bytes=100 << 20, devices=["gpu1"], jobs=["7"])
    assert spec.registration("slurm").foreign == spec.foreign
    held = core.node_spec(record, "", use["s1"], held_devices=("gpu1",))  # gpu1 is a Horizon job's
    assert held.foreign is not None and held.foreign.devices == ["gpu0"]
    # where Slurm names the GPUs it gave (IDX), those are the busy ones, and a job's own are its
    indexed = core.parse_records(FOREIGN_JOB.replace("GRES= ", "GRES=gpu:1(IDX:0) "))
    assert core.foreign_use(indexed, "ab12")["s1"].devices == ("gpu0",)
    assert core.node_spec(record, "", core.foreign_use(indexed, "ab12")["s1"]).foreign.devices == ["gpu0"]
    assert core.devices_of(core.parse_records("JobId=3 Nodes=s[1-2] CPU_IDs=0 Mem=1 GRES=gpu:2(IDX:1,3) "
                                              "Nodes=s3 CPU_IDs=0 Mem=1 GRES=gpu:a100:2(IDX:0-1)")[0]) == {
        "s1": ["gpu1", "gpu3"], "s2": ["gpu1", "gpu3"], "s3": ["gpu0", "gpu1"]}


def test_a_placement_as_its_sbatch_line() -> None:
    spec = c.JobSpec(tenant="acme", command=("python", "train.py"), cpus_milli=1500, memory_bytes=3 << 29,
                     gpus=1, nodes=2, tasks_per_node=2, time_limit_s=90)
    allocs = [c.NodeAllocation(node=n, device_ids=["gpu0", "gpu1"], cpus_milli=3000, memory_bytes=3 << 30, tasks=2)
              for n in ("s2", "s1")]
    devices = {n: {f"gpu{i}": c.GpuDevice(id=f"gpu{i}", type="a100") for i in range(2)} for n in ("s1", "s2")}
    argv = core.sbatch_argv("ab12", "acme:j1", 3, spec, allocs, devices, "/d/batch.sh", "/d/out%j", "/d/err", "/w", 90, "main")
    # 3000 milli-CPUs over 2 tasks: 2 whole CPUs each (Slurm counts no fractions); 3 GiB = 3072 MiB per
    # node; 90 s is 2 minutes, plus one: the backend's own limit ends it first
    assert argv == ["sbatch", "--parsable", "--job-name=horizon-acme:j1", "--comment=horizon:ab12:3:acme:j1",
                    "--nodes=2", "--nodelist=s2,s1", "--ntasks-per-node=2", "--cpus-per-task=2", "--mem=3072",
                    "--time=3", "--chdir=/w", "--output=/d/out%%j", "--error=/d/err", "--no-requeue",
                    "--open-mode=truncate", "--partition=main", "--gres=gpu:a100:2", "/d/batch.sh"]
    # the account Horizon charges, and its QOS where Slurm has one of that name
    ml = msgspec.structs.replace(spec, account="ml", qos="high")
    assert core.sbatch_argv("ab12", "acme:j1", 3, ml, allocs, devices, "/d/b.sh", "o", "e", "/w", 90,
                            qos={"high", "normal"})[-4:-1] == ["--account=ml", "--qos=high", "--gres=gpu:a100:2"]
    assert "--qos=high" not in core.sbatch_argv("ab12", "acme:j1", 3, ml, allocs, devices, "/d/b.sh", "o", "e", "/w", 90)
    # fewer tasks than the gang's slots (sbatch -N 2 -n 3): Slurm is told the tasks, the slots a maximum
    three = msgspec.structs.replace(spec, ntasks=3)
    assert "--ntasks=3" in core.sbatch_argv("ab12", "acme:j1", 3, three, allocs, devices, "/d/b.sh", "o", "e", "/w", 90)
    assert core.attempt_of({"Comment": "horizon:ab12:3:acme:j1"}, "ab12") == ("acme:j1", 3)
    assert core.attempt_of({"Comment": "horizon:ffff:3:acme:j1"}, "ab12") is None  # another installation's
    assert core.attempt_of({"Comment": "(null)"}, "ab12") is None
    script = core.batch_script({"HORIZON_JOB_ID": "j1", "A": "it's"}, ["sh", "-c", "echo $A"])
    assert script.splitlines()[2:] == ["export A='it'\"'\"'s'", "export HORIZON_JOB_ID=j1",
                                       'export HORIZON_NODE="${SLURMD_NODENAME:-$HORIZON_NODE}"',
                                       '[ -n "${SLURM_JOB_GPUS:-}" ] && export HORIZON_GPU_IDS="gpu$(echo '
                                       '"$SLURM_JOB_GPUS" | sed \'s/,/,gpu/g\')"', "exec sh -c 'echo $A'"]
    assert core.expand_nodes("s[1-3,07],gpu9") == ["s1", "s2", "s3", "s07", "gpu9"]


def test_how_slurm_jobs_end() -> None:
    [failed] = core.parse_records(HORIZON_JOB)
    assert core.outcome(failed) == core.Outcome(exit_code=3)
    assert core.outcome({"JobState": "COMPLETED", "ExitCode": "0:0"}).exit_code == 0
    assert core.outcome({"JobState": "CANCELLED", "ExitCode": "0:15"}) == core.Outcome(exit_code=-15, signalled=True)
    assert core.outcome({"JobState": "OUT_OF_MEMORY", "ExitCode": "0:125"}).out_of_memory
    assert core.outcome({"JobState": "NODE_FAIL", "ExitCode": "0:0"}).lost
    assert core.outcome(None).lost  # purged from Slurm while no backend watched, and in no record
    # sacct's lines of a purged job (accounting, or the job completion record): as outcome() reads them
    lines = "12|RUNNING|0:0\n13|CANCELLED by 0|0:15\n14|FAILED|3:0\n"
    assert core.sacct_record(lines, "12") is None and core.sacct_record(lines, "99") is None
    assert core.outcome(core.sacct_record(lines, "13")) == core.Outcome(exit_code=-15, signalled=True)
    assert core.outcome(core.sacct_record(lines, "14")) == core.Outcome(exit_code=3)
    assert core.time_limit_minutes(60) == 2 and core.time_limit_minutes(61) == 3


# ---------------------------------------------------------------------- a real cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    nodes = [SlurmNode("s1"), SlurmNode("s2"), SlurmNode("s3", gpus=0, features=("solo",))]
    with SlurmCluster(tmp_path / "slurm", nodes) as running:
        yield running


class SlurmUp(Up):
    """`horizon up --backend slurm`; with ``service``, the distributed shape instead: `horizon up
    --nodes 0` (no agent) and the backend as `horizon service slurm` beside it, with a data dir of its own."""

    def __init__(self, data_dir: Path, cluster: SlurmCluster, service: bool = False) -> None:
        slurm = ["--slurm-conf", str(cluster.conf), "--slurm-partition", cluster.partition]
        super().__init__(data_dir, *(["--nodes", "0"] if service else ["--backend", "slurm", *slurm]))
        self.cluster = cluster
        self.backend_dir = data_dir.parent / "backend" if service else data_dir
        self.service: subprocess.Popen[str] | None = None
        self.service_argv = [*HORIZON, "service", "slurm", "--data-dir", str(self.backend_dir), *slurm] if service else []

    def start(self) -> None:
        super().start()
        if self.service_argv:
            self.service = subprocess.Popen([*self.service_argv, "--nats", self.url], stderr=subprocess.PIPE, text=True)
            assert self.service.stderr is not None
            for line in self.service.stderr:  # "slurm running against ...": registered and caught up
                if "slurm running against" in line:
                    break
            # the rest of its log is read on, so that a full pipe never blocks it
            threading.Thread(target=self.service.stderr.read, daemon=True).start()

    def stop(self, sig: int = signal.SIGINT) -> int:
        if self.service is not None:
            self.service.send_signal(signal.SIGINT)
            assert self.service.wait(timeout=60) == 0
            self.service = None
        return super().stop(sig)

    def submit(self, *args: str) -> str:
        done = self.cli("submit", "--json", *args)
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["job_id"])

    def jobs(self) -> dict[str, dict]:
        done = self.cli("jobs", "--json")
        return {j["job_id"]: j for j in json.loads(done.stdout)}

    def until(self, check, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"timed out; jobs: {self.jobs()}\n{self.log()[-3000:]}")

    def install(self) -> str:
        return (self.backend_dir / "jobs" / "slurm-installation").read_text().strip()

    def slurm_jobs(self) -> dict[tuple[str, int], dict[str, str]]:
        """Slurm's record of every attempt Horizon submitted, by (job id, attempt)."""
        out = {}
        for record in core.parse_records(self.cluster.run("scontrol", "show", "job", "-o")):
            key = core.attempt_of(record, self.install())
            if key is not None:
                out[key] = record
        return out

    def publish(self, subject: str, body: dict) -> None:
        async def send() -> None:
            log = await JetStreamLog.open(self.url, name="test-publish", create=False)
            try:
                await log.publish(subject, json.dumps(body).encode(), msg_id=f"test/{body['job_id']}")
            finally:
                await log.close()

        asyncio.run(send())

    def log_events(self) -> list[c.Event]:
        async def read() -> list[c.Event]:
            log = await JetStreamLog.open(self.url, name="test-read", create=False)
            try:
                events = []
                async for batch in log.read(1):
                    events += [e for _, e in readable(batch, 0) if e is not None]
                return events
            finally:
                await log.close()

        return asyncio.run(read())


FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
SLURM_STATE = {"SUCCEEDED": "COMPLETED", "FAILED": "FAILED", "CANCELLED": "CANCELLED"}


def _check_against_slurm(up: SlurmUp, jobs: dict[str, dict]) -> dict[tuple[str, int], dict[str, str]]:
    """Every attempt Horizon scheduled ran in Slurm once, on the nodes Horizon chose, and ended as
    Horizon says (a preempted attempt: CANCELLED in Slurm). Returns Slurm's records."""
    events = up.log_events()
    scheduled = {(e.job_id, e.attempt): [a.node for a in e.allocations] for e in events if isinstance(e, c.JobScheduled)}
    # a job the backend stops at its time limit: FAILED in Horizon, CANCELLED in Slurm (docs/backends.md)
    endings = {(e.job_id, e.attempt): "stopped" if isinstance(e, c.JobFailed) and "time limit" in e.reason
               else type(e).__name__ for e in events
               if isinstance(e, (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted))}
    slurm = {key: record for key, record in up.slurm_jobs().items() if key[0] != "ghost"}
    assert set(slurm) == set(scheduled), (sorted(slurm), sorted(scheduled))  # each placement submitted once
    for key, nodes in scheduled.items():
        record = slurm[key]
        assert sorted(core.expand_nodes(record["ReqNodeList"])) == sorted(nodes), (key, record["ReqNodeList"], nodes)
        ran = core.expand_nodes(record["NodeList"])  # none: it never ran (cancelled while Slurm kept it pending)
        assert sorted(ran) in ([], sorted(nodes)), (key, record["NodeList"], nodes)
        ending = endings[key]
        expected = {"JobSucceeded": "COMPLETED", "JobFailed": "FAILED", "JobCancelled": "CANCELLED",
                    "JobPreempted": "CANCELLED", "stopped": "CANCELLED"}[ending]
        assert record["JobState"] == expected, (key, ending, record["JobState"])
    for job_id, job in jobs.items():
        attempt = max(a for j, a in scheduled if j == job_id)
        expected = "CANCELLED" if endings[(job_id, attempt)] == "stopped" else SLURM_STATE[job["state"]]
        assert expected == slurm[(job_id, attempt)]["JobState"], (job_id, job["state"])
    return slurm


@needs_slurm
@pytest.mark.timeout(120)
def test_jobs_run_in_slurm_where_horizon_placed_them(tmp_path: Path, cluster: SlurmCluster) -> None:
    wrong = subprocess.run([*HORIZON, "up", "--backend", "slurm", "--slurm-conf", str(cluster.conf), "--slurm-partition",
                            "nope", "--data-dir", str(tmp_path / "other")], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 1 and "Slurm has no nodes in partition 'nope'" in wrong.stderr, wrong.stderr
    up = SlurmUp(tmp_path / "data", cluster)
    t0 = time.monotonic()
    up.start()
    started_s = time.monotonic() - t0
    try:
        nodes = json.loads(up.cli("nodes", "--json").stdout)
        assert {n["node"]: (n["backend"], n["gpus"], n["cpus_milli"]) for n in nodes} == {
            "s1": ("slurm", 2, 4000), "s2": ("slurm", 2, 4000), "s3": ("slurm", 0, 4000)}
        table = up.cli("nodes").stdout
        assert "BACKEND" in table and "slurm" in table
        out = tmp_path / "out"
        out.mkdir()
        t1 = time.monotonic()
        ok = up.submit("--gpus", "1", "-o", f"{out}/%j.out", "--", "sh", "-c", "echo $SLURMD_NODENAME $HORIZON_NODE")
        bad = up.submit("--", "sh", "-c", "echo oops >&2; exit 3")
        late = up.submit("--time", "2", "--", "sleep", "60")
        up.until(lambda: {j["state"] for j in up.jobs().values()} <= FINAL and len(up.jobs()) == 3)
        latency_s = time.monotonic() - t1
        jobs = up.jobs()
        assert jobs[ok]["state"] == "SUCCEEDED" and jobs[bad]["state"] == "FAILED"
        assert jobs[late]["state"] == "FAILED" and "time limit" in jobs[late]["reason"]
        slurm = _check_against_slurm(up, jobs)
        node = slurm[(ok, 1)]["NodeList"]
        # %j is the job's number (issue 34); Slurm's node name is Horizon's
        assert (out / f"{jobs[ok]['number']}.out").read_text().split() == [node, node]
        shown = up.cli("show", bad, "--json").stdout
        assert "exit code 3" in shown and "oops" in shown  # the reason and the stderr tail
        logs = up.cli("logs", bad, "--err")  # the file Slurm wrote, served as the agent serves its own
        assert logs.returncode == 0 and logs.stdout.strip() == "oops", logs.stdout + logs.stderr
        done = up.cli("check")
        assert done.returncode == 0, done.stdout + done.stderr
        print(f"up over Slurm in {started_s:.2f} s; three jobs submitted to ended in Horizon in {latency_s:.2f} s")
    finally:
        up.stop()


@needs_slurm
@pytest.mark.timeout(120)
def test_sbatch_exports_the_submitting_environment_through_slurm(tmp_path: Path, cluster: SlurmCluster) -> None:
    """issue 34: a job of `horizon sbatch` run by Slurm gets the submitting shell's environment (FOO, a
    PATH with a program only that shell has), and Slurm's own view of the allocation beside it."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "only-here").write_text("#!/bin/sh\necho found\n")
    (tools / "only-here").chmod(0o755)
    script = tmp_path / "env.sh"
    script.write_text('#!/bin/sh\n#SBATCH -o env.out\necho "FOO=$FOO TOOL=$(only-here) NODE=$SLURMD_NODENAME"\n')
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    try:
        shell = {k: v for k, v in os.environ.items() if not k.startswith(("HORIZON_", "SLURM"))}
        shell.update(FOO="bar", PATH=f"{tools}:{os.environ['PATH']}", HORIZON_NATS_URL=up.url)
        done = subprocess.run([*HORIZON, "sbatch", "--job-id", "sb-env", str(script)], cwd=tmp_path, env=shell,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        up.until(lambda: up.jobs().get("sb-env", {}).get("state") in FINAL)
        assert up.jobs()["sb-env"]["state"] == "SUCCEEDED", up.cli("show", "sb-env").stdout
        node = up.slurm_jobs()[("sb-env", 1)]["NodeList"]
        assert (tmp_path / "env.out").read_text() == f"FOO=bar TOOL=found NODE={node}\n"
    finally:
        up.stop()


@needs_slurm
@pytest.mark.timeout(120)
def test_slurm_jobs_of_attempts_horizon_does_not_hold_are_cancelled(tmp_path: Path, cluster: SlurmCluster) -> None:
    """Horizon's log decides what runs: a Slurm job of an attempt that ended in Horizon is cancelled,
    as is one Slurm still keeps pending when Horizon cancels it. (The backend runs as `horizon service
    slurm` here, the distributed shape.)"""
    up = SlurmUp(tmp_path / "data", cluster, service=True)
    up.start()
    try:
        # a Slurm job of an attempt Horizon does not hold (as one whose attempt ended while no backend
        # ran) is cancelled; another Horizon installation's is left alone
        def sbatch(comment: str) -> str:
            return cluster.run("sbatch", "--parsable", f"--comment={comment}", "--mem=10", "--output=/dev/null",
                               "--wrap", "sleep 300").strip()

        ghost, other = sbatch(f"horizon:{up.install()}:1:ghost"), sbatch("horizon:0ther:1:ghost")
        up.until(lambda: "JobState=CANCELLED" in cluster.run("scontrol", "show", "job", "-o", ghost), timeout_s=10)
        assert "JobState=RUNNING" in cluster.run("scontrol", "show", "job", "-o", other)
        cluster.run("scancel", other)
        up.until(lambda: all(n["cpus_used_milli"] == 0 for n in json.loads(up.cli("nodes", "--json").stdout)))

        # Slurm reserves every node for someone else: Horizon's placement waits in Slurm, PENDING, and
        # Horizon says SCHEDULED (not running); a cancel reaches the pending Slurm job
        cluster.run("scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now", "Duration=10",
                    "Nodes=s1,s2,s3", "Users=nobody")
        held = up.submit("--", "true")
        up.until(lambda: up.slurm_jobs().get((held, 1), {}).get("JobState") == "PENDING")
        time.sleep(1.5)
        assert up.jobs()[held]["state"] == "SCHEDULED"
        assert up.cli("cancel", held).returncode == 0
        up.until(lambda: up.jobs()[held]["state"] == "CANCELLED")
        up.until(lambda: up.slurm_jobs()[(held, 1)]["JobState"] == "CANCELLED", timeout_s=10)

        # a node taken out of the partition is drained in Horizon, and back when it is back
        cluster.run("scontrol", "update", f"PartitionName={cluster.partition}", "Nodes=s1,s2")
        up.until(lambda: _node_rows(up)["s3"]["state"] == "drained")
        cluster.run("scontrol", "update", f"PartitionName={cluster.partition}", "Nodes=s1,s2,s3")
        up.until(lambda: _node_rows(up)["s3"]["state"] == "idle")
        _check_against_slurm(up, up.jobs())
        done = up.cli("check")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        up.stop()


def _node_rows(up: SlurmUp) -> dict[str, dict]:
    return {n["node"]: n for n in json.loads(up.cli("nodes", "--json").stdout)}


@needs_slurm
@pytest.mark.timeout(120)
def test_what_slurm_decides_on_its_own_shows_in_horizon(tmp_path: Path, cluster: SlurmCluster) -> None:
    """A node Slurm drains shows drained (and comes back when Slurm resumes it); a job started in
    Slurm outside Horizon is busy capacity: Horizon's job for that node waits until it ends."""
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    try:
        cluster.run("scontrol", "update", "NodeName=s2", "State=DRAIN", "Reason=bad fan")
        row = up.until(lambda: (r := _node_rows(up)["s2"])["state"] in ("drained", "draining") and r)
        assert row["state"] == "drained"
        shown = up.cli("nodes").stdout
        assert "s2" in shown and "drained" in shown
        cluster.run("scontrol", "update", "NodeName=s2", "State=RESUME")
        up.until(lambda: _node_rows(up)["s2"]["state"] == "idle")

        # Slurm's own job takes 3 of s3's 4 CPUs and 2 GiB of its 4
        foreign = cluster.run("sbatch", "--parsable", "--nodelist=s3", "--cpus-per-task=3", "--mem=2048",
                              "--output=/dev/null", "--wrap", "sleep 300").strip()
        row = up.until(lambda: (r := _node_rows(up)["s3"])["cpus_used_milli"] == 3000 and r)
        assert (row["cpus_milli"], row["memory_bytes"], row["memory_used_bytes"]) == (4000, 4096 << 20, 2048 << 20)
        job = up.submit("--node-selector", "slurm.feature/solo=true", "--cpus", "2", "--", "true")
        time.sleep(3)
        assert up.jobs()[job]["state"] == "PENDING"  # 2 CPUs do not fit in the 1 Slurm leaves
        cluster.run("scancel", foreign)
        up.until(lambda: up.jobs()[job]["state"] == "SUCCEEDED")
        assert _node_rows(up)["s3"]["cpus_used_milli"] == 0
        _check_against_slurm(up, up.jobs())
        done = up.cli("check")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        up.stop()


@needs_slurm
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_mixed_workload_over_slurm(tmp_path: Path, cluster: SlurmCluster) -> None:
    """The issue's acceptance: single jobs, a 2-node job, an array, a job that fails, one cancelled,
    one preempted by a higher class, and a restart of the backend while jobs run: every job's state
    in Horizon is Slurm's, every attempt ran (once) on the nodes Horizon chose, `horizon check` passes
    and `horizon audit` reproduces every decision."""
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    out = tmp_path / "out"
    out.mkdir()
    mark = f'echo $SLURMD_NODENAME > {out}/"$HORIZON_JOB_ID.$HORIZON_ATTEMPT"'
    try:
        # the victim first, so that s3 (its node: the only one with the feature) is its own; it writes a
        # checkpoint on SIGUSR1 (Slurm signals its batch script), and its next attempt resumes from it.
        # Its class is normal, as the other jobs': a low one is preempted by whichever of them finds
        # s1 and s2 full, before the high-class boss comes
        victim = "victim"
        checkpoint = ('echo ckpt-1 > "$HORIZON_CHECKPOINT_FILE.tmp"; '
                      'mv "$HORIZON_CHECKPOINT_FILE.tmp" "$HORIZON_CHECKPOINT_FILE"')
        script = (f'{mark}; if [ "$HORIZON_ATTEMPT" = 1 ]; then trap \'{checkpoint}\' USR1; sleep 300 & wait; wait; '
                  f'else echo "$HORIZON_CHECKPOINT_REF" > {out}/resumed; fi')
        up.publish("horizon.in.default.submit", {
            "type": "JobSubmitted", "job_id": victim, "tenant": "default", "command": ["sh", "-c", script],
            "priority_class": "normal", "node_selector": {"slurm.feature/solo": "true"}, "resources": {"cpus": 4},
            "checkpoint_signal": "SIGUSR1"})
        up.until(lambda: victim in (jobs := up.jobs()) and jobs[victim]["state"] == "RUNNING")
        singles = [up.submit("--gpus", "1", "--", "sh", "-c", f"{mark}; sleep 1") for _ in range(3)]
        gang = up.submit("-N", "2", "--gpus", "1", "--", "sh", "-c", mark)
        up.submit("--array", "0-3", "--", "sh", "-c", mark)
        failing = up.submit("--", "sh", "-c", f"{mark}; exit 3")
        cancelled = up.submit("--", "sh", "-c", f"{mark}; sleep 300")
        slow = up.submit("--", "sh", "-c", f"{mark}; sleep 8")
        up.until(lambda: all(up.jobs()[j]["state"] == "RUNNING" for j in (cancelled, victim, slow)))
        # the backend restarts while jobs run in Slurm: it adopts them, submits none twice
        assert up.stop() == 0
        up.start()
        assert up.cli("cancel", cancelled).returncode == 0
        boss = up.submit("--priority-class", "high", "--node-selector", "slurm.feature/solo=true", "--cpus", "4",
                         "--", "sh", "-c", mark)
        up.until(lambda: (jobs := up.jobs()) and all(j["state"] in FINAL for j in jobs.values())
                 and victim in jobs and jobs[victim]["attempt"] == 2, timeout_s=150)
        jobs = up.jobs()
        assert len(jobs) == 3 + 1 + 4 + 1 + 1 + 1 + 1 + 1
        assert all(jobs[j]["state"] == "SUCCEEDED" for j in (*singles, gang, boss, slow, victim))
        assert jobs[failing]["state"] == "FAILED" and jobs[cancelled]["state"] == "CANCELLED"
        slurm = _check_against_slurm(up, jobs)
        assert slurm[(victim, 1)]["JobState"] == "CANCELLED"  # preempted: stopped in Slurm, requeued in Horizon
        events = up.log_events()
        assert any(isinstance(e, c.JobPreempted) and e.job_id == victim and e.for_job == boss
                   and e.checkpoint_ref == "ckpt-1" for e in events)
        assert (out / "resumed").read_text().strip() == "ckpt-1"  # attempt 2 started from attempt 1's checkpoint
        # where each attempt ran, as the job itself saw it: the node Horizon chose (a gang's script runs
        # on the first node of Slurm's sorted list, one of those Horizon chose)
        for e in events:
            if isinstance(e, c.JobScheduled):
                ran = (out / f"{e.job_id}.{e.attempt}").read_text().strip()
                chosen = sorted(a.node for a in e.allocations)
                assert ran == chosen[0], (e.job_id, e.attempt, ran, chosen)
        assert {a.node for e in events if isinstance(e, c.JobScheduled) and e.job_id == gang
                for a in e.allocations} == set(core.expand_nodes(slurm[(gang, 1)]["NodeList"]))
        done = up.cli("check")
        assert done.returncode == 0, done.stdout + done.stderr
        done = up.cli("audit")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        up.stop()


def test_up_over_slurm_says_what_is_wrong(tmp_path: Path) -> None:
    """Options that cannot go with --backend slurm, and a Slurm that does not answer: an error, no traceback."""
    bad = tmp_path / "slurm.conf"
    bad.write_text("ClusterName=x\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n")  # no 9 s of retries
    from click.testing import CliRunner

    from services.front.cli.main import cli  # through the group: the command's problems become click's

    for args, said in ((["--backend", "slurm", "--nodes", "2"], "no --nodes"),
                       (["--backend", "slurm", "--executor", "sim"], "no --executor sim"),
                       (["--backend", "slurm", "--slurm-conf", str(tmp_path / "none.conf")], "does not exist"),
                       (["--slurm-partition", "p"], "go with --backend slurm")):
        done = CliRunner().invoke(cli, ["up", "--data-dir", str(tmp_path / "d"), *args])
        assert done.exit_code == 2 and said in done.output, done.output
    if slurm_installed():
        done = subprocess.run([*HORIZON, "up", "--backend", "slurm", "--slurm-conf", str(bad), "--port", "0",
                               "--ui-port", "0", "--data-dir", str(tmp_path / "d")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "cannot reach Slurm" in done.stderr and "Traceback" not in done.stderr, \
            done.stderr


@needs_slurm
@pytest.mark.timeout(180)
@pytest.mark.skipif(os.geteuid() != 0, reason="creates a Unix user: needs root")
def test_slurm_runs_a_job_as_its_user(tmp_path: Path) -> None:
    """A root backend submits for the job's user (sbatch --uid/--gid): Slurm runs it as that uid, its
    files are that user's, outside the data dir, and `horizon logs` serves them. (The cluster's folder,
    which holds slurmd's spool, must be one the user may traverse: not pytest's 0700 tmp_path.)"""
    name = f"hzs{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", name], check=True, capture_output=True)
    folder = Path(tempfile.mkdtemp(prefix="horizon-slurm-"))
    folder.chmod(0o711)
    cluster = SlurmCluster(folder / "slurm", [SlurmNode("s1", gpus=0)]).__enter__()
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    try:
        job = up.submit("--user", name, "--chdir", "/tmp", "--", "sh", "-c", "id -un; echo $HOME")
        up.until(lambda: up.jobs().get(job, {}).get("state") in FINAL)
        assert up.jobs()[job]["state"] == "SUCCEEDED", (up.jobs()[job].get("reason"), up.cli("show", job).stdout)
        out = up.cli("logs", job)
        assert out.returncode == 0 and out.stdout.split()[0] == name, out.stdout + out.stderr
        path = job_file(up.data_dir / "jobs", job, 1, "stdout")
        assert path.stat().st_uid == pwd.getpwnam(name).pw_uid and str(up.data_dir) not in str(path)
        assert (path.parent.stat().st_uid, path.parent.stat().st_mode & 0o777) == (pwd.getpwnam(name).pw_uid, 0o700)
    finally:
        up.stop()
        cluster.__exit__(None, None, None)
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True)
