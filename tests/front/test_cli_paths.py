"""Issue 30: every documented path works as written, through the real CLI against a running ``horizon up``.

One development cluster (4 nodes of 8 GPUs, jobs run for real) started as a person starts it, in a
folder of its own with ``--port 0``; every command runs from that folder as typed, with no ``--nats``
(they find the server through ``.horizon/server.json``). Each test leaves the cluster idle.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.e2e import HorizonUp

pytestmark = pytest.mark.timeout(300)

EPOCH = re.compile(r"(?<![\d.])1\d{9}(?![\d])")  # a raw epoch time in text meant for people


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HorizonUp]:
    running = HorizonUp(tmp_path_factory.mktemp("issue30"), "--nodes", "4", "--gpus-per-node", "8")
    try:
        yield running
    finally:
        running.stop()


def submit(up: HorizonUp, *args: str) -> str:
    return str(up.json("submit", *args)["job_id"])


def ended(up: HorizonUp, job_id: str, timeout: float = 60) -> str:
    live = ("SUBMITTED", "PENDING", "HELD", "SCHEDULED", "RUNNING")
    return up.until(f"{job_id} ended", lambda: (s := up.state(job_id)) not in live and s, timeout=timeout)


def running(up: HorizonUp, *job_ids: str) -> None:
    up.until(f"{', '.join(job_ids)} running", lambda: all(up.state(j) == "RUNNING" for j in job_ids))


# ------------------------------------------------------------------ 11: the folder's horizon up


def test_client_commands_find_the_horizon_up_of_their_folder_or_of_data_dir(up, tmp_path):
    job = submit(up, "--name", "found", "--", "true")  # submit, from the folder
    assert ended(up, job) == "SUCCEEDED"
    for command in (("jobs",), ("nodes",), ("queue",), ("squeue",), ("check", "--no-audit")):
        done = up.run(*command)
        assert "Traceback" not in done.stderr, command
    assert "node-00" in up.run("nodes").stdout and job in up.run("jobs").stdout
    assert up.run("check", "--no-audit").stdout.strip().endswith("ok")
    # from another folder: --data-dir names it (horizon check too, which had no such option)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert job in up.run("jobs", "--data-dir", str(up.data_dir), cwd=elsewhere).stdout
    assert up.run("check", "--no-audit", "--data-dir", str(up.data_dir), cwd=elsewhere).stdout.strip().endswith("ok")
    batch = up.run("sbatch", "--data-dir", str(up.data_dir), "--parsable", "--wrap", "true", cwd=elsewhere)
    assert ended(up, batch.stdout.strip()) == "SUCCEEDED"  # sbatch's own option parser takes it too
    nothing = up.run("jobs", "--data-dir", str(tmp_path / "none"), ok=False)
    assert nothing.returncode == 1 and "Traceback" not in nothing.stderr
    assert f"no `horizon up` is running on {tmp_path / 'none'}" in nothing.stderr


# ------------------------------------------------------------------ 4: a reader that goes away


def test_a_reader_that_goes_away_ends_every_command_quietly(up):
    job = submit(up, "--name", "chatty", "--", "seq", "1", "300000")  # ~2 MB of output
    assert ended(up, job) == "SUCCEEDED"
    for command in (("show", job), ("jobs",), ("logs", job), ("squeue", "-t", "all"), ("queue",)):
        # the reader closes its end before the command writes: every write is a broken pipe
        proc = subprocess.Popen([*up.command, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=up.root, env=up.env())
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141, (command, err)  # as a Unix tool killed by SIGPIPE
        assert err == "", (command, err)
    # and as a person types it
    done = subprocess.run(["bash", "-o", "pipefail", "-c", f"{' '.join(up.command)} logs {job} | head -2"],
                          capture_output=True, text=True, cwd=up.root, env=up.env(), timeout=60)
    assert done.stdout == "1\n2\n" and done.stderr == "" and done.returncode == 141


# ------------------------------------------------------------------ 1: one line in tables


TRACEBACK = """Traceback (most recent call last):
  File "/opt/train.py", line 12, in <module>
    main()
    ^^^^^^
RuntimeError: CUDA error: out of memory"""


def test_a_long_reason_is_one_line_in_tables_and_whole_in_show_and_json(up):
    job = submit(up, "--name", "long-reason", "--", "sleep", "300")
    running(up, job)
    up.run("cancel", job, "--reason", TRACEBACK)
    assert ended(up, job) == "CANCELLED"
    [line] = [line for line in up.run("jobs").stdout.splitlines() if line.split()[:1] == [job]]
    assert "… RuntimeError: CUDA error: out of memory" in line and "File" not in line
    [row] = [row for row in up.json("jobs") if row["job_id"] == job]
    [sacct] = [line for line in up.run("sacct", "-j", job, "--format", "JobID,State,Reason").stdout.splitlines()
               if line.split()[:1] == [row["slurm_id"]]]  # sacct's JobID is the job's number
    assert sacct.rstrip().endswith("… RuntimeError: CUDA error: out of memory")
    assert {"job_id", "state", "reason"} <= set(row) and row["state"] == "CANCELLED"
    assert "RuntimeError: CUDA error: out of memory" in row["reason"] and "\n" in row["reason"]  # whole
    shown = up.run("show", job).stdout
    assert 'File "/opt/train.py", line 12, in <module>' in shown and "RuntimeError: CUDA error" in shown


# ------------------------------------------------------------------ 3: several ids


def test_cancel_hold_and_release_take_several_job_ids(up):
    # pending for good: each waits for a job that is never submitted
    jobs = [submit(up, "--name", f"many-{i}", "--dependency", "afterok:never-submitted", "--", "true")
            for i in range(3)]
    held = up.run("hold", *jobs).stdout
    assert [line.split(": ")[1] for line in held.splitlines()] == ["held"] * 3
    up.until("all held", lambda: all(up.state(j) == "HELD" for j in jobs))
    released = up.run("release", jobs[0], jobs[1]).stdout
    assert released.splitlines() == [f"{jobs[0]}: released", f"{jobs[1]}: released"]
    refused = up.run("release", jobs[0], jobs[2], ok=False)  # the first is no longer held
    assert refused.returncode == 1 and f"{jobs[2]}: released" in refused.stdout
    assert f"release {jobs[0]}: only a held job can be released" in refused.stderr
    done = up.run("cancel", *jobs, "no-such-job", ok=False)
    assert [line.split(": ")[1] for line in done.stdout.splitlines()] == ["cancelled"] * 3
    assert done.returncode == 1 and "no job 'no-such-job'" in done.stderr
    # the filters still work, and not with ids
    other = submit(up, "--name", "by-filter", "--dependency", "afterok:never-submitted", "--", "true")
    assert f"{other}: cancelled" in up.run("cancel", "--name", "by-filter").stdout
    both = up.run("cancel", other, "--name", "x", ok=False)
    assert both.returncode == 2 and "not both" in both.stderr


# ------------------------------------------------------------------ 2: an array's id


def test_show_and_logs_take_an_array_id(up):
    array = submit(up, "--name", "sweep", "--array", "0-2", "--", "sh", "-c", "echo task $SLURM_ARRAY_TASK_ID")
    for index in range(3):
        assert ended(up, f"{array}_{index}") == "SUCCEEDED"
    shown = up.run("show", array).stdout.splitlines()
    assert shown[0] == f"Array {array} (sweep)  3 task(s): 3 SUCCEEDED"
    assert [line.split()[:2] for line in shown if line.startswith(f"    {array}_")] == [
        [f"{array}_{i}", "SUCCEEDED"] for i in range(3)]
    assert [t["job_id"] for t in up.json("show", array)["tasks"]] == [f"{array}_{i}" for i in range(3)]
    logs = up.run("logs", array).stdout
    assert logs == "".join(f"{chr(10) if i else ''}==> {array}_{i} <==\ntask {i}\n" for i in range(3))
    assert up.run("logs", f"{array}_1").stdout == "task 1\n"  # a task is a job as before
    follow = up.run("logs", "-f", array, ok=False)
    assert follow.returncode == 2 and f"give a task of {array}" in follow.stderr
    unknown = up.run("show", "no-such-array", ok=False)
    assert unknown.returncode == 1 and "no job or array 'no-such-array'" in unknown.stderr


# ------------------------------------------------------------------ 5: rejected rows


def test_a_rejected_job_keeps_its_name_user_and_class(up):
    done = up.run("submit", "--json", "--name", "wrong-gpu", "--user", "ada", "--priority-class", "high",
                  "--account", "default", "--gpus", "1", "--gpu-type", "h100", "--", "true", ok=False)
    job = json.loads(done.stdout)["job_id"]
    assert done.returncode == 1 and "not a GPU model of this cluster" in done.stderr
    row = up.until("the rejected row", lambda: next((r for r in up.json("jobs") if r["job_id"] == job), None))
    assert (row["state"], row["name"], row["user"], row["priority_class"], row["account"]) == (
        "REJECTED", "wrong-gpu", "ada", "high", "default")
    [line] = [line for line in up.run("jobs").stdout.splitlines() if line.split()[:1] == [job]]
    assert line.split()[:5] == [job, "wrong-gpu", "ada", "REJECTED", "high"]


# ------------------------------------------------------------------ 7: an elastic gang


def test_an_elastic_job_shows_the_nodes_and_gpus_it_holds(up):
    blocker = submit(up, "--name", "blocker", "--nodes", "2", "--gpus", "8", "--", "sleep", "300")
    running(up, blocker)
    elastic = submit(up, "--name", "elastic", "--nodes", "2-4", "--gpus", "8", "--", "sleep", "300")
    running(up, elastic)
    [line] = [line for line in up.run("jobs").stdout.splitlines() if line.split()[:1] == [elastic]]
    assert line.split()[5] == "16"  # GPUS: what it holds on 2 nodes, not its most (32)
    resources = next(line for line in up.run("show", elastic).stdout.splitlines() if "resources:" in line)
    assert "2 node(s) now (elastic 2-4 node(s))" in resources and "16 GPU(s) now (16-32)" in resources
    up.run("cancel", blocker, elastic)
    ended(up, blocker), ended(up, elastic)


# ------------------------------------------------------------------ 8: a predicted run time


def test_show_prints_the_run_time_placement_predicted(up):
    up.run("profile", "set", "default", "--runtime-estimate", "predicted")
    try:
        for seconds in ("1", "2"):  # the user's last two runs: about 1.5 s on average
            assert ended(up, submit(up, "--user", "grace", "--", "sleep", seconds)) == "SUCCEEDED"
        job = submit(up, "--user", "grace", "--time", "1h", "--", "sleep", "300")
        running(up, job)
        line = next(line for line in up.run("show", job).stdout.splitlines() if "predicted run time" in line)
        assert re.search(r"predicted run time \d s of its 1:00:00 limit \(its user's last runs\); ", line), line
        assert "expected to end about" in line
        up.run("cancel", job)
        ended(up, job)
    finally:
        up.run("profile", "set", "default", "--runtime-estimate", "limit")


# ------------------------------------------------------------------ 9 and 10: reservations, dates


def test_a_reservation_reads_as_dates_and_its_end_lets_the_job_start(up):
    up.run("account", "set", "ml", "--shares", "1")
    nodes = "node-00,node-01,node-02,node-03"
    up.run("reservation", "create", "maint", "--account", "ml", "--nodes", nodes, "--start", "+0s", "--end", "+8s")
    job = submit(up, "--name", "after-maint", "--gpus", "1", "--", "true")
    reason = up.until("the reservation's verdict", lambda: next(
        (r["reason"] for r in up.json("queue") if r["job_id"] == job and r.get("reason")), None))
    assert re.search(r"reserved for account ml \(maint\) from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC to "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", reason), reason
    assert not EPOCH.search(up.run("queue").stdout + up.run("show", job).stdout)
    # nothing else happens on the cluster: the window's end alone lets it start
    assert ended(up, job, timeout=60) == "SUCCEEDED"


def test_a_backfill_reason_names_the_reservation_s_time_as_a_date(up):
    # half the cluster busy for 10 minutes; the head needs all of it then; a small job could start on
    # the free half now, but would still run when the head's reservation starts
    wide = submit(up, "--name", "wide", "--nodes", "2", "--gpus", "8", "--time", "10m", "--", "sleep", "300")
    running(up, wide)
    head = submit(up, "--name", "head", "--nodes", "4", "--gpus", "8", "--time", "10m", "--", "true")
    small = submit(up, "--name", "small", "--gpus", "1", "--time", "30m", "--", "true")
    why = up.until("the backfill verdict", lambda: next(
        (r["reason"] for r in up.json("queue") if r["job_id"] == small and "reservation of" in (r["reason"] or "")),
        None))
    assert re.search(rf"would delay the reservation of {head} at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC", why), why
    for text in (up.run("queue").stdout, up.run("queue", "--why").stdout, up.run("show", small).stdout,
                 up.run("squeue").stdout):
        assert not EPOCH.search(text), text
    up.run("cancel", wide, head, small)
    for job in (wide, head, small):
        ended(up, job)


# ------------------------------------------------------------------ 6: a checkpoint signal


CHECKPOINTING = """
echo "resumed from: ${HORIZON_CHECKPOINT_REF:-nothing}"
trap 'echo /ckpt/step-7 > "$HORIZON_CHECKPOINT_FILE.tmp"; mv "$HORIZON_CHECKPOINT_FILE.tmp" "$HORIZON_CHECKPOINT_FILE"; exit 0' USR1
while true; do sleep 0.2; done
"""


def test_a_checkpoint_signal_from_submit_moves_the_job_off_a_draining_node(up):
    assert "--checkpoint-signal SIG[@SECONDS]" in up.run("submit", "--help").stdout
    job = submit(up, "--name", "ckpt", "--checkpoint-signal", "USR1", "--", "bash", "-c", CHECKPOINTING)
    running(up, job)
    first = up.json("show", job)["job"]["job"]["node"]
    drained = up.run("node", "drain", first, "--migrate", "--grace", "20s").stdout
    assert re.search(rf"{job}\s+attempt 1\s+migrate .*checkpoint signal SIGUSR1", drained), drained
    try:
        up.until("the second attempt running elsewhere", lambda: (
            (row := up.json("show", job)["job"]["job"])["attempt"] == 2 and row["state"] == "RUNNING"
            and row["node"] != first))
        assert up.run("logs", "--attempt", "1", job).stdout == "resumed from: nothing\n"
        assert up.until("the resumed attempt's output", lambda: up.run("logs", job).stdout) == \
            "resumed from: /ckpt/step-7\n"
        shown = up.run("show", job).stdout
        assert "JobCheckpointed" in shown and "JobPreempted" in shown
    finally:
        up.run("node", "uncordon", first)
        up.run("cancel", job, ok=False)
    ended(up, job)


def test_sbatch_signal_b_is_the_checkpoint_signal_too(up, tmp_path):
    script = tmp_path / "ckpt.sh"
    script.write_text("#!/bin/bash\n#SBATCH --signal=B:USR1@120\nsleep 1\n")
    event = json.loads(up.run("sbatch", "--dry-run", str(script)).stdout)
    assert event["checkpoint_signal"] == "SIGUSR1"
    assert event["limit_signal"] == {"signal": "USR1", "before_s": 120.0, "batch_only": True}
    script.write_text("#!/bin/bash\n#SBATCH --signal=USR1@120\nsleep 1\n")  # the steps', not the shell's
    assert json.loads(up.run("sbatch", "--dry-run", str(script)).stdout)["checkpoint_signal"] is None
    assert ended(up, submit(up, "--checkpoint-signal", "USR2@60", "--", "true")) == "SUCCEEDED"  # accepted
    bad = up.run("submit", "--checkpoint-signal", "USR9", "--", "true", ok=False)
    assert bad.returncode == 2 and "'USR9' is not a signal" in bad.stderr



def test_a_supervisor_traceback_is_summed_up_in_one_line():
    """What the agent reports when a job's supervisor dies (services/nodes/backends/process/executors.py: the end of
    its log), as a table shows it: the first line, an ellipsis, the exception; at most 100 characters."""
    from services.front.client.reasons import summary

    reason = ("could not start: the job's supervisor exited (Traceback (most recent call last):\n"
              '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
              '  File "/srv/horizon/services/agent/shim.py", line 40, in <module>\n'
              "    import resource\n"
              "    ^^^^^^^^^^^^^^^\n"
              "ModuleNotFoundError: No module named 'resource')")
    assert summary(reason) == ("could not start: the job's supervisor exited ( … ModuleNotFoundError: No module "
                               "named 'resource')")
    assert summary("x" * 150) == "x" * 99 + "…" and len(summary(reason, 40)) == 40
    assert summary("exit code 1") == "exit code 1" and summary(None) == summary("") == ""
