"""The README, as a newcomer follows it: a fresh clone, the two commands exactly as written (the
first in the background), then the first jobs from another folder, with every default (relative
``.horizon`` in the clone, port 4222 where free)."""

from __future__ import annotations

import re
import socket
import time

from tests.journeys.conftest import Clone, job_state, readme_install, start_up, wait_state
from tests.journeys.docblocks import ROOT, block
from tests.journeys.person import Person


def test_the_test_command_is_what_ci_runs(clone: Clone) -> None:
    """The README's second command is the last line of .ci/run, and it works in the fresh clone."""
    command = block("readme-test-command").commands[0].text
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.strip().startswith("#")]
    assert ci[-1] == command, f".ci/run ends with {ci[-1]!r}, the README says {command!r}"
    someone = Person(clone.root.parent / "tester", clone.bin, cwd=clone.root)
    collected = someone.run(f"{command} --collect-only tests/journeys/test_doc_blocks.py", timeout=300)
    assert re.search(r"\d+ tests? collected", collected.out), collected


def test_first_command_then_first_jobs_from_another_folder(clone: Clone, person: Person) -> None:
    first, _ = readme_install()
    # 1. the first command exactly, from the clone, in the background (install is done: pip says so)
    up = start_up(person, first, cwd=clone.root)
    assert (clone.root / ".horizon").is_dir(), "the default data dir is ./.horizon in the clone"
    machine_line = up.bg.wait_for(r"Horizon is up: (.*)").group(1)
    has_gpu = "no GPU found" not in machine_line
    if up.port_changed:  # every suggested command carries the changed port
        assert all("--nats " in line for line in up.bg.err.splitlines() if line.strip().startswith("horizon "))

    # 2. the quick start's commands, from a project folder of the person's
    person.cwd = person.folder("project")
    commands = block("readme-first-jobs").commands
    texts = [c.text.split("#")[0].strip() for c in commands]
    submitted = person.run(commands[0])
    job = submitted.out.strip().splitlines()[-1]
    person.subs["JOB_ID"] = job
    assert re.fullmatch(r"[A-Za-z0-9_.:-]+", job), submitted
    for command, text in zip(commands[1:], texts[1:]):
        if "nvidia-smi" in text and not has_gpu:
            continue  # "where up found a GPU": up said it found none
        if text == "horizon watch":  # runs until Ctrl-C
            watch = person.start(command)
            time.sleep(2)
            assert watch.proc.poll() is None, watch.err
            assert watch.interrupt() in (0, 130, -2), watch.err
            assert "Traceback" not in watch.err, watch.err
            continue
        if text.startswith("horizon logs"):
            wait_state(person, job, "SUCCEEDED", "FAILED", "CANCELLED")
            assert job_state(person, job) == "SUCCEEDED", person.run("horizon show JOB_ID", ok=None)
            logs = person.run(command)
            assert f"running on {socket.gethostname()}" in logs.out, logs
            continue
        if text.startswith("horizon cancel"):
            ended = person.run(command, ok=None)  # the job has ended: a clear word, no traceback
            assert "Traceback" not in ended.err and (ended.out + ended.err).strip(), ended
            person.subs["JOB_ID"] = person.run("horizon submit -- sleep 300").out.strip().splitlines()[-1]
            wait_state(person, person.subs["JOB_ID"], "RUNNING")
            person.run(command)
            wait_state(person, person.subs["JOB_ID"], "CANCELLED")
            person.subs["JOB_ID"] = job
            continue
        result = person.run(command)
        if text.startswith("horizon show"):
            assert "SUCCEEDED" in result.out and job in result.out, result
    # 3. the table's reason column holds one line per job
    table = person.run("horizon jobs").out
    assert len([line for line in table.splitlines() if job in line]) == 1, table

    # 4. a second up on the same folder is refused, naming the first
    second = person.run(".venv/bin/horizon up", cwd=clone.root, ok=False, timeout=60)
    said = second.out + second.err
    assert re.search(r"is in use by horizon up, pid \d+ on host", said), second
    assert "Traceback" not in said, second

    # 5. a running job survives Ctrl-C of up and a restart
    long_job = person.run("horizon submit -- bash -c 'sleep 8; echo survived'").out.strip().splitlines()[-1]
    wait_state(person, long_job, "RUNNING")
    assert up.bg.interrupt() == 0, up.bg.err
    again = start_up(person, ".venv/bin/horizon up", cwd=clone.root)
    wait_state(person, long_job, "SUCCEEDED", "FAILED", "CANCELLED", timeout=120)
    assert job_state(person, long_job) == "SUCCEEDED", person.run(f"horizon show {long_job}", ok=None)
    assert person.run(f"horizon logs {long_job}").out == "survived\n"
    shown = person.run(f"horizon show {long_job}").out
    assert shown.count("JobSucceeded") == 1 and "attempt 2" not in shown, shown  # one attempt, one ending
    check = person.run("horizon check", cwd=clone.root)  # the whole log's invariants and its audit
    assert check.out.strip().endswith("ok"), check
    again.bg.interrupt()
