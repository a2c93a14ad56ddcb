"""The Slurm backend tells Slurm's truth (issue 33, item 6), each finding against a real Slurm cluster
(``tests/slurm_cluster.py``) under ``horizon up --backend slurm``:

* work submitted straight to Slurm is *used* capacity on its node, never smaller totals: a Horizon
  job that needs the whole node waits for it, and is not refused as one that could never fit;
* GPUs by Slurm's own indices: the GPUs Slurm's own jobs hold are marked busy by the ``IDX`` Slurm
  gave them, and a Horizon job's GPUs are the ones Slurm really gave it (``JobStarted.devices``), in
  the ledger, the job's record and ``horizon check``;
* an array task's ``SLURM_ARRAY_TASK_ID`` is its Horizon index (``horizon submit --array``,
  ``horizon sbatch --array``), not empty and not Slurm's job id;
* a job that ended and was purged by the controller (``MinJobAge``) while Horizon was down ends as
  Slurm's job completion record says, not as lost;
* Slurm runs a job under its account, and its QOS where Slurm has one of that name (against a real
  slurmdbd);
* a slurmctld restart, which shows every node UNKNOWN for seconds, drains nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import catalogue as c
from services.domain.cluster import Cluster, fold_cluster
from services.domain.jobs import JobTable
from services.nodes.backends.slurm import core
from tests.nodes.test_slurm_backend import FINAL, SlurmUp, _check_against_slurm, _node_rows, needs_slurm
from tests import slurm_accounting
from tests.slurm_cluster import SlurmCluster, SlurmNode


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    nodes = [SlurmNode("s1"), SlurmNode("s2"), SlurmNode("s3", gpus=0, features=("solo",))]
    with SlurmCluster(tmp_path / "slurm", nodes) as running:
        yield running


def test_the_ledger_counts_slurm_s_own_work_and_follows_the_gpus_slurm_gave() -> None:
    """The pure fold: a node of 4 CPUs and gpu0-gpu3 whose Slurm job 7 holds 1 CPU and gpu0 keeps its
    totals and has 3 CPUs free; Horizon's job, placed on gpu1, reports Slurm gave it gpu2: the ledger
    holds gpu2 for it, so gpu1 and gpu3 are free (4 - Slurm's gpu0 - Horizon's gpu2), 2 CPUs are."""
    cluster, jobs = Cluster(), JobTable()
    gpus = [c.GpuDevice(id=f"gpu{i}", type="a100") for i in range(4)]
    events = [
        c.NodeRegistered(node="s1", cpus_milli=4000, memory_bytes=4 << 30, gpus=gpus, backend="slurm",
                         foreign=c.ForeignUse(cpus_milli=1000, devices=["gpu0"], jobs=["7"])),
        c.NodeReady(node="s1"),
        c.JobAccepted(job_id="j", spec=c.JobSpec(tenant="t", command=("true",), cpus_milli=1000, gpus=1)),
        c.JobScheduled(job_id="j", attempt=1, allocations=[
            c.NodeAllocation(node="s1", device_ids=["gpu1"], cpus_milli=1000, memory_bytes=1 << 30)]),
    ]
    for seq, event in enumerate(events, 1):
        fold_cluster(cluster, jobs, event, seq, 0.0)
    node = cluster.nodes["s1"]
    assert (node.cpus_milli, len(node.gpus), node.unhealthy_gpus) == (4000, 4, 0)  # Slurm's totals
    assert node.free_cpus_milli == 2000 and [d.id for d in node.free_devices()] == ["gpu2", "gpu3"]
    started = c.JobStarted(job_id="j", attempt=1, node="s1", devices={"s1": ["gpu2"]})
    assert fold_cluster(cluster, jobs, started, 5, 0.0) is not None  # SCHEDULED -> RUNNING
    assert node.used_devices == {"gpu2": "j"} and [d.id for d in node.free_devices()] == ["gpu1", "gpu3"]
    assert jobs.jobs["j"].allocations[0].device_ids == ["gpu2"] and cluster.check(jobs) == []
    assert node.status == "mixed"


def _sbatch(cluster: SlurmCluster, *args: str) -> str:
    """A job submitted straight to Slurm, outside Horizon."""
    return cluster.run("sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 300").strip()


@needs_slurm
@pytest.mark.timeout(120)
def test_slurm_s_own_work_is_used_capacity_not_smaller_nodes(tmp_path: Path, cluster: SlurmCluster) -> None:
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    try:
        # Slurm's own jobs take all of s3 (4 CPUs, 4 GiB) and both GPUs of s1
        whole = _sbatch(cluster, "--nodelist=s3", "--cpus-per-task=4", "--mem=4096")
        gpus = _sbatch(cluster, "--nodelist=s1", "--gres=gpu:2", "--mem=10")
        rows = up.until(lambda: (r := _node_rows(up))["s3"]["cpus_used_milli"] == 4000
                        and r["s1"]["gpus_used"] == 2 and r)
        # the totals are Slurm's totals; the use is used, and a busy GPU is not an unhealthy one
        assert (rows["s3"]["cpus_milli"], rows["s3"]["memory_bytes"]) == (4000, 4096 << 20)
        assert rows["s3"]["memory_used_bytes"] == 4096 << 20 and rows["s3"]["state"] != "idle"
        assert (rows["s1"]["gpus"], rows["s1"]["gpus_used"], rows["s1"]["unhealthy"]) == (2, 2, {})
        # a job that needs all of s3 waits for Slurm's job, rather than being refused as never fitting;
        # one that needs two GPUs goes to s2, whose GPUs Slurm's job does not hold
        job = up.submit("--node-selector", "slurm.feature/solo=true", "--cpus", "4", "--", "true")
        two = up.submit("--gpus", "2", "--", "true")
        up.until(lambda: up.jobs()[two]["state"] == "SUCCEEDED")
        time.sleep(2)
        assert up.jobs()[job]["state"] == "PENDING", up.jobs()[job]
        [placed] = [e for e in up.log_events() if isinstance(e, c.JobScheduled) and e.job_id == two]
        assert [a.node for a in placed.allocations] == ["s2"]
        cluster.run("scancel", whole, gpus)
        up.until(lambda: all(j["state"] in FINAL for j in up.jobs().values()))
        assert {j["state"] for j in up.jobs().values()} == {"SUCCEEDED"}
        rows = up.until(lambda: (r := _node_rows(up))["s3"]["cpus_used_milli"] == 0 and r)
        assert rows["s3"]["state"] == "idle" and rows["s1"]["gpus_used"] == 0
        _check_against_slurm(up, up.jobs())
        done = up.cli("check")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        up.stop()


def _registered(up: SlurmUp, node: str) -> c.NodeRegistered:
    return [e for e in up.log_events() if isinstance(e, c.NodeRegistered) and e.node == node][-1]


@needs_slurm
@pytest.mark.timeout(120)
def test_gpus_are_the_ones_slurm_gave(tmp_path: Path) -> None:
    nodes = [SlurmNode("s1", gpus=4)]
    with SlurmCluster(tmp_path / "slurm", nodes, others=("side",)) as cluster:
        up = SlurmUp(tmp_path / "data", cluster)
        up.start()
        try:
            # Slurm's own jobs: a takes IDX 0-1, b IDX 2; a ends: Slurm's b holds gpu2, and only gpu2
            a = _sbatch(cluster, "--gres=gpu:2", "--mem=10")
            up.until(lambda: "IDX:0-1" in cluster.run("scontrol", "show", "job", "-o", "-d", a))
            b = _sbatch(cluster, "--gres=gpu:1", "--mem=10")
            up.until(lambda: "IDX:2" in cluster.run("scontrol", "show", "job", "-o", "-d", b))
            cluster.run("scancel", a)
            use = up.until(lambda: (f := _registered(up, "s1").foreign) is not None and f.jobs == [b] and f)
            assert use.devices == ["gpu2"]  # not gpu3, the highest-numbered
            # Horizon places a job on gpu0 while Slurm keeps it waiting (its partition is down); meanwhile
            # a job of Slurm's own (another partition) takes IDX 0: Slurm gives Horizon's job another GPU
            cluster.run("scontrol", "update", f"PartitionName={cluster.partition}", "State=DOWN")
            job = up.submit("--gpus", "1", "--", "sleep", "2")
            up.until(lambda: up.slurm_jobs().get((job, 1), {}).get("JobState") == "PENDING")
            [placed] = [e for e in up.log_events() if isinstance(e, c.JobScheduled) and e.job_id == job]
            assert placed.allocations[0].device_ids == ["gpu0"]
            side = _sbatch(cluster, "--partition=side", "--gres=gpu:1", "--mem=10")
            up.until(lambda: "IDX:0" in cluster.run("scontrol", "show", "job", "-o", "-d", side))
            cluster.run("scontrol", "update", f"PartitionName={cluster.partition}", "State=UP")
            up.until(lambda: up.jobs()[job]["state"] in ("RUNNING", *FINAL))
            record = cluster.run("scontrol", "show", "job", "-o", "-d", up.slurm_jobs()[(job, 1)]["JobId"])
            real = core.devices_of(core.parse_records(record)[0])["s1"]
            assert real != ["gpu0"] and len(real) == 1, record
            [started] = [e for e in up.log_events() if isinstance(e, c.JobStarted) and e.job_id == job]
            assert started.devices == {"s1": real}  # what the job really got, recorded
            shown = json.loads(up.cli("show", job, "--json").stdout)
            assert [x["device_ids"] for x in shown["job"]["job"]["allocation"]] == [real], shown
            up.until(lambda: up.jobs()[job]["state"] == "SUCCEEDED")
            cluster.run("scancel", b, side)
            done = up.cli("check")
            assert done.returncode == 0, done.stdout + done.stderr
        finally:
            up.stop()


@needs_slurm
@pytest.mark.timeout(120)
def test_array_tasks_see_horizon_s_task_index(tmp_path: Path, cluster: SlurmCluster) -> None:
    """A Horizon array is no Slurm array: each task's SLURM_ARRAY_TASK_ID is its Horizon index, with
    `horizon submit --array` and with `horizon sbatch --array` alike (not empty, not Slurm's job id)."""
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    out = tmp_path / "out"
    out.mkdir()
    try:
        up.submit("--array", "0-2", "--", "sh", "-c",
                  f'echo "$SLURM_ARRAY_TASK_ID $SLURM_ARRAY_JOB_ID" > {out}/submit.$HORIZON_ARRAY_INDEX')
        script = tmp_path / "task.sh"
        script.write_text(f'#!/bin/sh\n#SBATCH --array=0-2\necho "$SLURM_ARRAY_TASK_ID $SLURM_ARRAY_JOB_ID" '
                          f'> {out}/sbatch.$HORIZON_ARRAY_INDEX\n')
        done = up.cli("sbatch", str(script), cwd=tmp_path)  # its slurm-%j.out there
        assert done.returncode == 0, done.stdout + done.stderr
        up.until(lambda: len(up.jobs()) == 6 and all(j["state"] in FINAL for j in up.jobs().values()))
        assert {j["state"] for j in up.jobs().values()} == {"SUCCEEDED"}
        for kind in ("submit", "sbatch"):
            seen = {i: (out / f"{kind}.{i}").read_text().split() for i in range(3)}
            assert [seen[i][0] for i in range(3)] == ["0", "1", "2"], (kind, seen)
            assert len({seen[i][1] for i in range(3)}) == 1, (kind, seen)  # one array id for its tasks
        _check_against_slurm(up, up.jobs())
    finally:
        up.stop()


@needs_slurm
@pytest.mark.timeout(180)
def test_jobs_slurm_purged_while_horizon_was_down_end_as_slurm_recorded(tmp_path: Path) -> None:
    """Jobs that end while Horizon is down and that the controller purges (MinJobAge) before it is back
    end as Slurm's job completion record says (sacct -c), not as lost."""
    with SlurmCluster(tmp_path / "slurm", [SlurmNode("s1", gpus=0)], completion=True, min_job_age=2) as cluster:
        up = SlurmUp(tmp_path / "data", cluster)
        up.start()
        try:
            ok = up.submit("--", "sleep", "3")
            bad = up.submit("--", "sh", "-c", "sleep 3; exit 3")
            up.until(lambda: all(up.jobs()[j]["state"] == "RUNNING" for j in (ok, bad)))
            ids = {key[0]: record["JobId"] for key, record in up.slurm_jobs().items()}
            assert up.stop() == 0
            deadline = time.monotonic() + 60  # they end, and the controller forgets them
            while any("JobState" in cluster.run("scontrol", "show", "job", "-o", ids[j], check=False)
                      for j in (ok, bad)):
                assert time.monotonic() < deadline, "Slurm did not purge the jobs"
                time.sleep(0.5)
            up.start()
            up.until(lambda: all(up.jobs()[j]["state"] in FINAL for j in (ok, bad)))
            jobs = up.jobs()
            assert jobs[ok]["state"] == "SUCCEEDED", jobs[ok]
            assert jobs[bad]["state"] == "FAILED" and "exit code 3" in jobs[bad]["reason"], jobs[bad]
            done = up.cli("check")
            assert done.returncode == 0, done.stdout + done.stderr
        finally:
            up.stop()


class _AccountingCluster:
    """The accounting database's Slurm (``tests/slurm_accounting.py`` with its slurmd) as SlurmUp drives it."""

    def __init__(self, acc: slurm_accounting.Accounting) -> None:
        self.conf, self.partition, self.env = acc.conf, "main", acc.env()

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run([f"/usr/bin/{argv[0]}", *argv[1:]], capture_output=True, text=True, env=self.env,
                              timeout=30)
        assert done.returncode == 0 or not check, done.stderr
        return done.stdout


@needs_slurm
@pytest.mark.timeout(180)
@pytest.mark.skipif(bool(slurm_accounting.missing()), reason="needs slurmdbd and MariaDB")
def test_jobs_run_in_slurm_under_their_account_and_qos(tmp_path: Path) -> None:
    """Slurm runs a job under the account Horizon charges it to, and its QOS where Slurm has that QOS
    (one Slurm does not know is left to Slurm's default, rather than sbatch refusing the job)."""
    with slurm_accounting.accounting(tmp_path / "slurmdb", slurmd=True) as acc:
        acc.sacctmgr("add", "account", "ml")
        acc.sacctmgr("add", "qos", "high")
        acc.sacctmgr("add", "user", "root", "account=ml")  # the job's user is in the account, as on a site
        acc.sacctmgr("modify", "user", "root", "set", "qos+=high")
        cluster = _AccountingCluster(acc)
        up = SlurmUp(tmp_path / "data", cluster)  # type: ignore[arg-type]
        up.start()
        try:
            jobs = {}
            for qos in ("high", "nosuch"):
                script = tmp_path / f"{qos}.sh"
                script.write_text(f"#!/bin/sh\n#SBATCH --account=ml --qos={qos} --mem=100M\ntrue\n")
                done = up.cli("sbatch", "--parsable", str(script), cwd=tmp_path)
                assert done.returncode == 0, done.stdout + done.stderr
                jobs[qos] = done.stdout.strip().split(";")[0]
            plain = up.submit("--mem", "100M", "--", "true")
            up.until(lambda: len(up.jobs()) == 3 and all(j["state"] in FINAL for j in up.jobs().values()))
            assert {j["state"] for j in up.jobs().values()} == {"SUCCEEDED"}, up.jobs()
            by_job = {key[0]: record for key, record in up.slurm_jobs().items()}
            ids = {j["slurm_id"]: job_id for job_id, j in up.jobs().items()}  # sbatch printed the job's number
            high, nosuch = by_job[ids[jobs["high"]]], by_job[ids[jobs["nosuch"]]]
            assert (high["Account"], high["QOS"]) == ("ml", "high"), high
            assert (nosuch["Account"], nosuch["QOS"]) == ("ml", "normal"), nosuch
            assert by_job[plain]["Account"] != "ml"  # Horizon's default account: Slurm's default for the user
        finally:
            up.stop()


@needs_slurm
@pytest.mark.timeout(120)
def test_a_slurmctld_restart_drains_nothing(tmp_path: Path, cluster: SlurmCluster) -> None:
    """After slurmctld restarts, Slurm shows its nodes UNKNOWN for a few seconds (until each slurmd
    registers again): no news of them, not a drain; Horizon's nodes stay as they were."""
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    try:
        cluster.restart_controller()
        states: set[str] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = {r["State"] for r in core.parse_records(cluster.run("scontrol", "show", "node", "-o", check=False))}
            states |= now
            if now == {"IDLE"}:
                break
            time.sleep(0.2)
        assert "UNKNOWN" in states and states <= {"UNKNOWN", "IDLE"}, states  # what the backend saw meanwhile
        time.sleep(2.5)  # a sync of the backend's after
        drains = [e for e in up.log_events() if isinstance(e, c.NodeCommandIssued)]
        assert drains == [], drains
        assert {r["state"] for r in _node_rows(up).values()} == {"idle"}
        job = up.submit("--", "true")
        up.until(lambda: up.jobs()[job]["state"] == "SUCCEEDED")
    finally:
        up.stop()
