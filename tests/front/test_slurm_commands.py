"""Slurm's commands under their own names (issue 18): ``horizon slurm-shims DIR`` writes ``sbatch``,
``squeue``, ``scancel``, ``sinfo``, ``sacct``, ``srun``, ``scontrol``; each runs ``horizon NAME`` with
Slurm's options; they never shadow a real Slurm (refused unless --force; a guarded shim steps aside
for a real command of its name on PATH; a file that is not a shim is never replaced).

The commands are run by their plain names through PATH, against one `horizon up --executor sim`
for the module (a real nats-server, the real services).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import catalogue as c
from services.front.client.client import default_user
from services.front.client.problems import BadValue, UsageProblem
from services.front.cli.main import cli
from services.front.slurm.scancel_jobs import scancel_targets
from services.front.slurm.squeue_view import (
    SQUEUE_DEFAULT,
    SQUEUE_LONG,
    array_ranges,
    group_arrays,
    long_format,
    squeue_format,
)
from services.runtime.command_shims import SLURM_COMMANDS, ShimError, is_shim, real_slurm, remove_shims, write_shims
from tests.front.test_cli_up import free_port, interrupt

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(300)


def fake_program(folder: Path, name: str, says: str) -> Path:
    """An executable that is not a shim (a stand-in for a real Slurm command)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {says} \"$@\"\n")
    path.chmod(0o755)
    return path


def _without_slurm(path: str, farm: Path) -> str:
    """``path`` with Slurm's commands taken out: a folder holding any of them is replaced by ``farm``,
    links to everything else in it (these tests play the machine without Slurm; Slurm is installed
    here and in CI for the Slurm backend's tests, docs/backends.md)."""
    out = []
    for folder in path.split(os.pathsep):
        if not folder or not any(os.access(os.path.join(folder, name), os.X_OK) for name in SLURM_COMMANDS):
            out.append(folder)
            continue
        stand_in = farm / str(len(out))
        stand_in.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(folder):
            if entry.name not in SLURM_COMMANDS and not (stand_in / entry.name).exists():
                (stand_in / entry.name).symlink_to(entry.path)
        out.append(str(stand_in))
    return os.pathsep.join(out)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> str:
    """This machine's PATH, without a Slurm."""
    return _without_slurm(os.environ["PATH"], tmp_path_factory.mktemp("no-slurm"))


def shell(*args: str, path: str, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A command by its plain name, looked up along ``path``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HORIZON_", "SQUEUE_", "SACCT_"))}
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**base, **(env or {}), "PATH": path})


# ------------------------------------------------------------------ the pure parts


def test_squeue_formats_as_squeue_chooses_them():
    # JobID: a task's own number (%A), JobArrayID: 4213_7 (%i), as squeue's -O names them
    assert long_format("jobid,name:30,state:.10,reasonlist:12|") == "%20A%30j%.10T%12R|"
    assert long_format("JobArrayID,UserName") == "%20i%20u"
    with pytest.raises(BadValue, match="'gres' is not a field"):
        long_format("jobid,gres")
    assert squeue_format(None, None, False, {}) == SQUEUE_DEFAULT == "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    assert squeue_format(None, None, True, {"SQUEUE_FORMAT": "%i"}) == SQUEUE_LONG
    assert squeue_format(None, None, False, {"SQUEUE_FORMAT": "%i %t"}) == "%i %t"
    assert squeue_format(None, None, False, {"SQUEUE_FORMAT2": "jobid:8"}) == "%8A"
    assert squeue_format("%j", None, False, {"SQUEUE_FORMAT": "%i"}) == "%j"
    with pytest.raises(UsageProblem, match="exclude each other"):
        squeue_format("%i", "jobid", False, {})
    with pytest.raises(UsageProblem, match="exclude each other"):
        squeue_format("%i", None, True, {})


def _spec(array: str | None, index: int | None) -> c.JobSpec:
    return c.JobSpec(tenant="default", array=array, array_index=index)


def test_an_arrays_pending_tasks_share_a_line_unless_r():
    rows = [{"job_id": f"a_{i}", "state": "PENDING", "reason": "Resources"} for i in (0, 1, 2, 3, 5)]
    rows.insert(0, {"job_id": "a_4", "state": "RUNNING", "reason": None})
    rows.append({"job_id": "lone_1", "state": "PENDING", "reason": "Resources"})  # no array: its own line
    rows.append({"job_id": "a_7", "state": "PENDING", "reason": "held back"})  # another reason: its own group
    specs = {r["job_id"]: _spec(*r["job_id"].split("_")[:1], int(r["job_id"].split("_")[1]))
             for r in rows if r["job_id"].startswith("a_")}
    grouped = group_arrays(rows, specs)
    assert [r["job_id"] for r in grouped] == ["a_4", "a_[0-3,5]", "lone_1", "a_7"]
    assert grouped[1]["array_tasks"] == "0-3,5" and grouped[1]["tasks"] == ["a_0", "a_1", "a_2", "a_3", "a_5"]


def test_scancel_job_id_forms():
    assert scancel_targets(["12,13", "arr_[1-3,7]", "big_*", "j.0", "12"]) == [
        "12", "13", "arr_1", "arr_2", "arr_3", "arr_7", "big", "j"]
    with pytest.raises(BadValue):
        scancel_targets(["a b"])


# ------------------------------------------------------------------ writing, refusing, removing


def test_shims_are_written_whole_found_by_their_marker_and_never_replace_a_program(tmp_path):
    shims = tmp_path / "bin"
    written = write_shims(shims, ["squeue", "sbatch"], python="/opt/py/bin/python3",
                          env={"HORIZON_NATS_URL": "nats://h:4222"})
    assert [p.name for p in written] == ["squeue", "sbatch"]
    text = (shims / "squeue").read_text()
    assert text.startswith("#!/bin/sh\n# horizon-slurm-shim") and os.access(shims / "squeue", os.X_OK)
    assert ": \"${HORIZON_NATS_URL:=nats://h:4222}\"; export HORIZON_NATS_URL" in text
    assert text.rstrip().endswith("squeue \"$@\"") and "/opt/py/bin/python3 -P -c" in text
    assert all(is_shim(p) for p in written) and sorted(p.name for p in shims.iterdir()) == ["sbatch", "squeue"]
    with pytest.raises(ShimError, match="is not one of Slurm's commands"):
        write_shims(shims, ["sstat"])
    mine = fake_program(tmp_path / "bin", "scancel", "mine")
    with pytest.raises(ShimError, match="not written by Horizon"):
        write_shims(shims, ["squeue", "scancel"])
    assert mine.read_text().endswith("echo mine \"$@\"\n") and not is_shim(mine)
    assert sorted(p.name for p in remove_shims(shims)) == ["sbatch", "squeue"]
    assert sorted(p.name for p in shims.iterdir()) == ["scancel"]  # the program that is not a shim stays


def test_real_slurm_is_found_along_path_and_shims_are_not_slurm(tmp_path):
    write_shims(tmp_path / "shims", ["sbatch", "sinfo"])
    real = fake_program(tmp_path / "slurm", "sbatch", "slurm")
    assert real_slurm(f"{tmp_path / 'shims'}:{tmp_path / 'empty'}") == {}
    assert real_slurm(f"{tmp_path / 'shims'}:{tmp_path / 'slurm'}") == {"sbatch": real}
    (tmp_path / "slurm" / "sinfo").write_text("not executable")
    assert "sinfo" not in real_slurm(str(tmp_path / "slurm"))


def test_slurm_shims_writes_refuses_over_a_real_slurm_and_removes(tmp_path, system):
    shims = tmp_path / "shims"
    done = shell(*HORIZON, "slurm-shims", str(shims), path=system)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"export PATH={shims}:\"$PATH\"\n"  # what `eval "$(horizon slurm-shims DIR)"` runs
    names = sorted(p.name for p in shims.iterdir())
    assert names == sorted(n for n in SLURM_COMMANDS if n in cli.commands)
    assert "exec \"$_horizon_real\"" in (shims / "squeue").read_text()  # guarded: steps aside for Slurm's
    # a real Slurm on PATH: refused, naming it; nothing written
    slurm = tmp_path / "slurm" / "bin"
    fake_program(slurm, "sbatch", "slurm-sbatch")
    other = tmp_path / "other"
    refused = shell(*HORIZON, "slurm-shims", str(other), path=f"{system}:{slurm}")
    assert refused.returncode == 1 and f"sbatch at {slurm / 'sbatch'}" in refused.stderr, refused.stderr
    assert "would shadow it" in refused.stderr and not other.exists()
    # --force writes them unguarded, and says what they shadow
    forced = shell(*HORIZON, "slurm-shims", str(other), "--force", "--only", "sbatch", "--only", "squeue",
                   path=f"{system}:{slurm}")
    assert forced.returncode == 0 and "shadow Slurm's commands" in forced.stderr, forced.stderr
    assert sorted(p.name for p in other.iterdir()) == ["sbatch", "squeue"]
    assert "_horizon_real" not in (other / "sbatch").read_text()
    ran = shell("sbatch", "--help", path=f"{other}:{slurm}:{system}")
    assert ran.returncode == 0 and ran.stdout.startswith("Usage: sbatch")  # forced: Horizon's, though Slurm's is there
    # the directory's own shims do not count as a Slurm when they are written again
    again = shell(*HORIZON, "slurm-shims", str(shims), path=f"{shims}:{system}")
    assert again.returncode == 0, again.stderr
    gone = shell(*HORIZON, "slurm-shims", "--remove", str(shims), path=system)
    assert gone.returncode == 0 and f"removed {len(names)} shim(s)" in gone.stderr
    assert list(shims.iterdir()) == []


def test_a_guarded_shim_steps_aside_for_a_real_slurm_installed_later(tmp_path, system):
    shims = tmp_path / "shims"
    write_shims(shims, ["squeue", "scancel"])
    slurm = tmp_path / "usr" / "bin"
    fake_program(slurm, "squeue", "slurm-squeue")
    path = f"{shims}:{slurm}:{system}"
    done = shell("squeue", "-u", "ann", "--me", path=path)
    assert (done.returncode, done.stdout) == (0, "slurm-squeue -u ann --me\n")  # Slurm's, untouched
    # scancel has no real counterpart here: Horizon's runs (and says what is missing)
    done = shell("scancel", path=path)
    assert done.returncode == 1 and "scancel: error: No job identification provided" in done.stderr


def test_every_name_dispatches_to_its_horizon_command(tmp_path, system):
    shims = tmp_path / "shims"
    write_shims(shims)  # all of them, whether this Horizon has the command yet or not
    path = f"{shims}:{system}"
    for name in SLURM_COMMANDS:
        done = shell(name, "--help", path=path)
        if name in cli.commands:  # the command itself answers, under its Slurm name
            assert (done.returncode == 0 and done.stdout.startswith(f"Usage: {name} ")) or (
                done.stderr.startswith(f"{name}: ") and "Traceback" not in done.stderr), (name, done.stdout, done.stderr)
        else:
            assert done.returncode == 1 and f"{name}: error: this Horizon has no 'horizon {name}'" in done.stderr
    # a link named like the command works too (argv[0])
    link = tmp_path / "links" / "squeue"
    link.parent.mkdir()
    link.write_text(f"#!{sys.executable}\nfrom services.front.cli.slurm_dispatch import main\nmain()\n")
    link.chmod(0o755)
    done = shell(str(link), "--bogus", path=os.environ["PATH"], env={"PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 1 and done.stderr.startswith("squeue: error: No such option '--bogus'"), done.stderr


# ------------------------------------------------------------------ against horizon up


class SimUp:
    """`horizon up --executor sim` (one node, 4 GPUs), and the shims pointing at it."""

    def __init__(self, root: Path, system: str) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.err = open(root / "up.err", "a")
        self.proc = subprocess.Popen([*HORIZON, "up", "--executor", "sim", "--nodes", "1", "--gpus-per-node", "4",
                                      "--port", str(self.port), "--data-dir", str(root / "h")],
                                     stdout=subprocess.PIPE, stderr=self.err, text=True)
        try:  # a failure from here on must not leave the stack running (the fixture never gets it)
            assert self.proc.stdout is not None
            first = self.proc.stdout.readline().strip()
            assert first == self.url, (first, (root / "up.err").read_text())
            self.shims = root / "shims"
            done = shell(*HORIZON, "slurm-shims", str(self.shims), "--nats", self.url, path=system)
            assert done.returncode == 0, done.stderr
            self.path = f"{self.shims}:{system}"
            self.work = root / "work"
            self.work.mkdir()
        except BaseException:
            self.stop()
            raise

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command by its name (the URL comes from the shim, as for a user with no HORIZON_*)."""
        done = shell(*args, path=self.path, cwd=self.work)
        if ok:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def script(self, name: str, body: str) -> str:
        (self.work / name).write_text(body)
        return name

    def until(self, what: str, check: object, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"not {what} within {timeout} s"
            time.sleep(0.3)

    def stop(self) -> None:
        interrupt(self.proc)
        self.err.close()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, system: str) -> Iterator[SimUp]:
    running = SimUp(tmp_path_factory.mktemp("slurm-commands"), system)
    try:
        yield running
    finally:
        running.stop()


def test_sbatch_squeue_scancel_sacct_by_their_names(up):
    me = default_user()
    script = up.script("train.sh", "#!/bin/bash\n#SBATCH -J train\n#SBATCH --gres=gpu:4\n#SBATCH -t 10\necho hi\n")
    # sbatch --parsable: the job's number alone (Slurm's job id), exit 0 once accepted
    done = up.run("sbatch", "--parsable", "--sim-runtime", "600", script)
    job = done.stdout.strip().split(";")[0]
    assert re.fullmatch(r"[0-9]+", job) and done.stdout.count("\n") == 1, done.stdout
    plain = up.run("sbatch", "--sim-runtime", "600", "-J", "queued", script)
    waiting = plain.stdout.strip().removeprefix("Submitted batch job ")
    assert plain.stdout.startswith("Submitted batch job ") and waiting != job and waiting.isdigit()

    def states() -> dict[str, str]:
        return dict(line.split() for line in up.run("squeue", "-h", "-o", "%i %t").stdout.splitlines())

    up.until(f"{job} running and {waiting} pending", lambda: states() == {job: "R", waiting: "PD"})
    # the default columns, every live job
    lines = up.run("squeue").stdout.splitlines()
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
    assert lines[0].startswith(" " * 13 + "JOBID PARTITION ")  # %.18i right-aligns in 18 columns
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[job][2:5] == ["train", me[:8], "R"] and rows[job][-2:] == ["1", "node-00"], lines
    assert rows[waiting][4] == "PD" and rows[waiting][7].startswith("(") and lines[1].endswith(")"), lines
    # filters, as squeue's
    assert up.run("squeue", "-h", "-o", "%i", "-j", job).stdout.split() == [job]
    # the waiting jobs first, in the scheduler's order, then the others
    assert up.run("squeue", "-h", "-o", "%i", "--jobs", f"{job},{waiting}").stdout.split() == [waiting, job]
    assert up.run("squeue", "-h", "-o", "%i", "-t", "PD").stdout.split() == [waiting]
    assert up.run("squeue", "-h", "-o", "%i", "--states=RUNNING").stdout.split() == [job]
    assert up.run("squeue", "-h", "-o", "%i", "-n", "queued").stdout.split() == [waiting]
    assert up.run("squeue", "-h", "-o", "%i", "-u", "nobody-here").stdout == ""
    assert sorted(up.run("squeue", "-h", "-o", "%i", "--me").stdout.split()) == sorted([job, waiting])
    assert up.run("squeue", "-h", "-o", "%i", "-A", "default", "-w", "node-00").stdout.split() == [job]
    partition = up.run("squeue", "-h", "-o", "%P", "-j", job).stdout.strip()
    assert partition and partition != "N/A"  # a stock up has partitions of its own nodes
    assert up.run("squeue", "-h", "-o", "%i", "-p", f"nowhere,{partition}", "-t", "R").stdout.split() == [job]
    assert up.run("squeue", "-h", "-o", "%i", "-p", "nowhere").stdout == ""
    assert up.run("sacct", "-j", job, "-X", "-r", partition, "-n", "-P", "-o", "JobID,Partition").stdout == \
        f"{job}|{partition}\n"
    by_id = up.run("squeue", "-h", "-o", "%i", "-S", "i").stdout.split()
    assert sorted(by_id) == sorted([job, waiting]) and up.run("squeue", "-h", "-o", "%i", "-S", "-i").stdout.split() \
        == by_id[::-1]
    # -l: a date line, then the long columns; -O: fields by name, 20 wide
    long_lines = up.run("squeue", "-l", "-j", job).stdout.splitlines()
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$", long_lines[0]), long_lines
    assert long_lines[1].split() == ["JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "TIME_LIMI", "NODES",
                                     "NODELIST(REASON)"]
    assert long_lines[2].split()[4] == "RUNNING" and long_lines[2].split()[6] == "10:00"
    assert up.run("squeue", "-O", "jobid,state", "-j", job).stdout.splitlines() == [
        "JOBID               STATE", f"{job:<20}RUNNING" if len(job) < 20 else f"{job} RUNNING"]  # ids are never cut
    shown = json.loads(up.run("squeue", "--json").stdout)
    assert {r["slurm"]["JOBID"]: r["slurm"]["ST"] for r in shown["jobs"]} == {job: "R", waiting: "PD"}
    assert all(r["slurm_id"] == r["slurm"]["JOBID"] != r["job_id"] for r in shown["jobs"])  # numbers, not the ids
    bad = up.run("squeue", "-o", "%z", ok=False)
    assert bad.returncode == 1 and bad.stderr.startswith("squeue: error:") and "%z" in bad.stderr
    # scancel: silent when it works; the job leaves squeue; sacct shows it cancelled
    done = up.run("scancel", waiting)
    assert (done.stdout, done.stderr) == ("", "")
    up.until(f"{waiting} gone", lambda: waiting not in states())
    assert up.run("sacct", "-j", waiting, "-X", "-P", "-n", "-o", "JobID,State").stdout == f"{waiting}|CANCELLED\n"
    assert up.run("sacct", "-j", waiting, "-X", "-b", "-p").stdout.splitlines() == [
        "JobID|State|ExitCode|", f"{waiting}|CANCELLED|0:0|"]
    again = up.run("scancel", waiting, ok=False)
    assert again.returncode == 1 and again.stderr.startswith(f"scancel: error: Kill job error on job id {waiting}: ")
    assert up.run("scancel", "-Q", waiting, ok=False).stderr == ""
    # scancel by filters: your own matching jobs
    done = up.run("scancel", "--name", "train", "-t", "RUNNING", "-v")
    assert f"scancel: Terminating job {job}" in done.stderr or f"scancel: Cancelled job {job}" in done.stderr
    up.until(f"{job} cancelled", lambda: up.run("sacct", "-j", job, "-X", "-P", "-n", "-o", "State").stdout.strip()
             == "CANCELLED")
    assert up.run("squeue", "-h").stdout == ""
    signalled = up.run("scancel", "--signal=USR1", job, ok=False)
    assert signalled.returncode == 1 and "--signal" in signalled.stderr and "not supported" in signalled.stderr


def test_an_array_in_squeue_and_scancel(up):
    script = up.script("sweep.sh", "#!/bin/bash\n#SBATCH --array=0-4\n#SBATCH --gres=gpu:4\necho $SLURM_ARRAY_TASK_ID\n")
    arr = up.run("sbatch", "--parsable", "--sim-runtime", "600", script).stdout.strip()

    def ids(*extra: str) -> list[str]:
        return up.run("squeue", "-h", "-o", "%i", "-j", arr, *extra).stdout.split()

    up.until("one task running, the rest pending",
             lambda: len(ids("-t", "R")) == 1 and len(ids("-t", "PD", "-r")) == 4)
    running = ids("-t", "R")[0]
    rest = sorted({f"{arr}_{i}" for i in range(5)} - {running})
    assert sorted(ids("-r")) == sorted([running, *rest])  # -r: a line per task
    grouped = ids()
    assert running in grouped and len(grouped) == 2, grouped  # the pending ones share a line
    pending_line = next(i for i in grouped if i != running)
    assert pending_line == f"{arr}_[{array_ranges(sorted(int(t.rsplit('_', 1)[1]) for t in rest))}]"
    assert up.run("squeue", "-h", "-o", "%K", "-j", arr, "-t", "PD").stdout.strip() == pending_line.split("_", 1)[1][1:-1]
    # scancel ID_[a-b]: those tasks; ID: the rest of the array
    first_two = rest[:2]
    a, b = (t.rsplit("_", 1)[1] for t in first_two)
    assert up.run("scancel", f"{arr}_[{a},{b}]").stdout == ""
    up.until("two tasks cancelled", lambda: sorted(ids("-r")) == sorted([running, *rest[2:]]))
    up.run("scancel", arr)
    up.until("the array cancelled", lambda: ids("-r") == [])
    states = dict(line.split("|") for line in up.run("sacct", "-j", arr, "-X", "-P", "-n", "-o", "JobID,State")
                  .stdout.splitlines())
    assert sorted(states) == sorted(f"{arr}_{i}" for i in range(5)) and set(states.values()) == {"CANCELLED"}


def test_sinfo_srun_scontrol_by_their_names(up):
    shown = up.run("sinfo").stdout.splitlines()
    assert shown[0].split()[0] == "PARTITION" and any("*" in line.split()[0] for line in shown[1:]), shown
    assert up.run("sinfo", "-h").stdout.splitlines() == shown[1:]  # sinfo's -h is --noheader too
    assert up.run("scontrol", "show", "hostnames", "node-[01-02],gpu7").stdout.split() == ["node-01", "node-02",
                                                                                         "gpu7"]
    outside = up.run("srun", "hostname", ok=False)  # a job step needs a job
    assert outside.returncode != 0 and outside.stderr.startswith("srun: error: ")
