"""horizon sbatch: #SBATCH scripts read as Slurm's sbatch reads them (pure table tests), the job's
wrapper run for real by /bin/sh, and every script of tests/data/sbatch submitted to a running Horizon."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from events import catalogue as c
from events.codec import decode
from services.nodes.spec import local_nodes
from services.front.cli.main import cli
from services.front.slurm.sbatch import SbatchDefaults, parse_sbatch, script_warnings
from services.front.slurm.sbatch_options import SbatchError, read_directives
from services.front.slurm.slurm_values import Problem, slurm_memory, slurm_time  # Problem: the error of one value
from services.front.host.stack import Stack
from tests.e2e import assert_replays, read_log

DATA = Path(__file__).parents[1] / "data" / "sbatch"
GiB, MiB = 1 << 30, 1 << 20
NOW = datetime(2026, 3, 10, 14, 30, tzinfo=timezone(timedelta(hours=1)))  # the submitter's clock, for --begin
DEFAULTS = SbatchDefaults(user="ann", workdir="/home/ann/project", script_path="/home/ann/project/job.sh", now=NOW)


def parse(directives: str, *command_line: str, shebang: str = "#!/bin/bash") -> dict[str, Any]:
    text = shebang + "\n" + "".join(f"#SBATCH {d}\n" for d in directives.splitlines() if d.strip()) + "srun x\n"
    fields, _ = parse_sbatch(text, defaults=DEFAULTS, command_line=command_line)
    return fields


def problems(directives: str, *command_line: str) -> str:
    with pytest.raises(SbatchError) as info:
        parse(directives, *command_line)
    return str(info.value)


# ------------------------------------------------------------------ values


@pytest.mark.parametrize("text, seconds", [
    ("30", 30 * 60),                      # minutes
    ("90:30", 91 * 60),                   # minutes:seconds, rounded up to whole minutes as Slurm does
    ("0:05", 60),                         # 5 seconds: one minute, not 5 s
    ("0:90", 2 * 60),                     # 90 seconds: 1 minute 30, rounded up
    ("1:00:01", 61 * 60),                 # hours:minutes:seconds, rounded up
    ("0", 0), ("0:00", 0), ("UNLIMITED", 0), ("infinite", 0), ("-1", 0),  # no limit (NO_LIMIT)
    ("02:30:00", 2.5 * 3600),             # hours:minutes:seconds
    ("1-12", 36 * 3600),                  # days-hours
    ("2-06:30", 2 * 86400 + 6 * 3600 + 30 * 60),  # days-hours:minutes
    ("7-00:00:00", 7 * 86400),            # days-hours:minutes:seconds
    (" 5 ", 300),
])
def test_slurm_time_formats(text, seconds):
    assert slurm_time(text) == seconds


@pytest.mark.parametrize("text, why", [
    ("1h", "not a time"),
    ("-5", "not a time"),
    ("1:2:3:4", "not a time"),
])
def test_slurm_time_errors(text, why):
    with pytest.raises(Problem, match=why):
        slurm_time(text)


@pytest.mark.parametrize("text, size", [
    ("4000", 4000 * MiB),  # megabytes by default, as Slurm
    ("16G", 16 * GiB), ("16g", 16 * GiB), ("512M", 512 * MiB), ("1T", 1 << 40), ("2048K", 2 * MiB),
    # a B after the unit changes nothing: Slurm's units are binary (str_to_mbytes)
    ("16GB", 16 * GiB), ("16gb", 16 * GiB), ("8000MB", 8000 * MiB), ("1TB", 1 << 40), ("2048KB", 2 * MiB),
    ("100K", 1 * MiB), ("1025K", 2 * MiB),  # kibibytes are rounded up to whole mebibytes, as Slurm counts
    ("0", 0),  # --mem=0: all of each node's memory
])
def test_slurm_memory_units(text, size):
    assert slurm_memory(text) == size


@pytest.mark.parametrize("text", ["16Gi", "16GiB", "1.5G", "-1", "lots", "16GBB", "16B"])
def test_slurm_memory_rejects_other_forms(text):
    with pytest.raises(Problem, match="not a memory size"):
        slurm_memory(text)


# ------------------------------------------------------------------ reading directives


def test_directives_only_in_the_leading_comment_block():
    text = "\n".join([
        "#!/bin/bash",
        "#SBATCH --job-name=a   # trailing comment",
        "",
        "# a comment, then an indented directive (a comment, as in Slurm)",
        "  #SBATCH --nodes=9",
        "# SBATCH --nodes=8",
        "#SBATCH -N 2 --ntasks-per-node=4",
        "echo start",
        "#SBATCH --exclusive",
    ])
    directives, body, bad = read_directives(text)
    assert bad == []
    assert [(d.option, d.value, d.where) for d in directives] == [
        ("job-name", "a", "line 2"), ("nodes", "2", "line 7"), ("ntasks-per-node", "4", "line 7")]
    assert body == "echo start\n#SBATCH --exclusive"


def test_quotes_escapes_short_forms_and_prefixes():
    directives, _, bad = read_directives("\n".join([
        "#!/bin/bash",
        '#SBATCH --job-name="two words"',
        "#SBATCH -J'it''s' -N3",
        r"#SBATCH --comment=a\#b",
        "#SBATCH --ntasks-per-n 2",   # a unique prefix of --ntasks-per-node (getopt_long)
        "#SLURM --time 10",           # the old prefix still counts
    ]))
    assert bad == []
    assert [(d.option, d.value) for d in directives] == [
        ("job-name", "two words"), ("job-name", "its"), ("nodes", "3"), ("comment", "a#b"),
        ("ntasks-per-node", "2"), ("time", "10")]


@pytest.mark.parametrize("line, why", [
    ("--mem", "line 2: --mem: needs a value"),
    ("--nt=3", "ambiguous"),
    ("--frobnicate", "--frobnicate: not an sbatch option"),
    ("-Z", "-Z: not an sbatch option"),
    ('--job-name="open', "line 2: unmatched \""),
    ("--parsable=yes", "--parsable: takes no value"),
    ("train.py", "'train.py' is not an option"),
    ("hetjob", "heterogeneous jobs are not supported"),
])
def test_bad_directive_syntax(line, why):
    _, _, bad = read_directives(f"#!/bin/bash\n#SBATCH {line}\n")
    assert any(why in b for b in bad), bad


# ------------------------------------------------------------------ mapping to a job


@pytest.mark.parametrize("directives, expected", [
    # shape: nodes x tasks per node
    ("", dict(nodes=1, tasks_per_node=1)),
    ("-N 4\n--ntasks-per-node=2", dict(nodes=4, tasks_per_node=2)),
    ("-n 8", dict(ntasks=8, spread_tasks=True)),  # over as many nodes as they need: submission's to choose
    ("-N 3\n-n 7", dict(nodes=3, tasks_per_node=3, ntasks=7)),  # 3, 3 and 1 tasks (Slurm lays out 4, 2, 1)
    ("-N 2\n-n 8", dict(nodes=2, tasks_per_node=4)),
    ("-n 6\n--ntasks-per-node=4", dict(nodes=2, tasks_per_node=3)),  # --ntasks-per-node is a maximum with -n
    ("--nodes=3-3", dict(nodes=3)),
    ("--nodes=2-4", dict(nodes=4, min_nodes=2)),  # a range: an elastic gang of 2 to 4 nodes
    ("--nodes=2-4\n--use-min-nodes", dict(nodes=2, min_nodes=None)),  # the least, rigid (a warning says so)
    ("--tasks-per-node=4", dict(nodes=1, tasks_per_node=4)),  # Slurm's deprecated spelling
    ("--tasks=4\n-N 2", dict(nodes=2, tasks_per_node=4)),  # getopt_long: a prefix of --tasks-per-node
    ("-w node[1-3]", dict(nodes=3, nodelist=["node[1-3]"])),  # the listed nodes make the node count
    ("-w n1,n2\n-n 8", dict(nodes=2, tasks_per_node=4)),
    ("-x n7 --exclude=gpu-[1-2]", dict(exclude_nodes=["gpu-[1-2]"])),  # the later one wins, as for every option
    # GPUs: one task per node, or --gpus-per-task: per task; else the node's GPUs, shared by its tasks
    ("--gres=gpu:a100:8\n-N 4", dict(gpus=8, gpu_type="a100", nodes=4, gpus_per_node=0)),
    ("--gres=gpu:8\n--ntasks-per-node=8", dict(gpus=0, gpus_per_node=8, gpu_type=None, tasks_per_node=8)),
    ("--ntasks=4\n--gres=gpu:1", dict(gpus=0, gpus_per_node=1, ntasks=4, spread_tasks=True)),  # share a node's GPU
    ("--ntasks-per-node=3\n--gres=gpu:4", dict(gpus=0, gpus_per_node=4)),
    ("--gres=gpu", dict(gpus=1)),
    ("--gres=gpu:h100-80gb:4", dict(gpus=4, gpu_type="h100-80gb")),
    ("--gres=gpu:v100", dict(gpus=1, gpu_type="v100")),
    ("--gres=none", dict(gpus=0, gpus_per_node=0)),
    ("--gpus=16\n-N 2\n--ntasks-per-node=8", dict(gpus=0, gpus_per_node=8, nodes=2)),
    ("--gpus=4\n-N 2", dict(gpus=2, nodes=2)),
    ("-G a100:4", dict(gpus=4, gpu_type="a100")),
    ("--gpus-per-node=h100:4\n--ntasks-per-node=2", dict(gpus=0, gpus_per_node=4, gpu_type="h100")),
    ("--gpus-per-task=2\n-n 4", dict(gpus=2, ntasks=4, spread_tasks=True, gpus_per_node=0)),
    ("--gres=gpu:4\n--gpus-per-task=1\n-n 4", dict(gpus=1, gpus_per_node=0, tasks_per_node=4)),  # 4 per node
    ("--gres=gpu:4\n--gpus-per-task=1\n-n 8", dict(gpus=1, nodes=2, tasks_per_node=4)),
    ("--gres=gpu:a100:4\n--gpus=4", dict(gpus=4, gpu_type="a100")),  # two forms that agree
    # CPUs per task
    ("-c 8", dict(cpus="8")),
    ("--cpus-per-gpu=6\n--gpus-per-task=2", dict(cpus="12")),
    ("--cpus-per-gpu=4\n--gres=gpu:2\n--ntasks-per-node=4", dict(cpus="2", gpus_per_node=2)),
    # memory: Horizon counts per task, --mem is per node
    ("--mem=64G\n--ntasks-per-node=4", dict(memory=16 * GiB)),
    ("--mem=1000", dict(memory=1000 * MiB)),
    ("--mem=10G\n--ntasks-per-node=3", dict(memory=-(-10 * GiB // 3))),  # rounded up to a byte
    ("--mem-per-cpu=2G\n-c 4", dict(memory=8 * GiB)),
    ("--mem-per-gpu=10G\n--gpus-per-task=2", dict(memory=20 * GiB)),
    ("--mem-per-gpu=10G\n--gres=gpu:1\n-N 1\n-n 4", dict(memory=-(-10 * GiB // 4))),  # a shared GPU's, per task
    ("--mem-per-gpu=10G\n--gres=gpu:1\n-n 4", dict(memory=None, memory_per_node=10 * GiB)),  # spread: a node's
    ("--mem=16GB", dict(memory=16 * GiB)),  # Slurm's GB is GiB
    ("--mem=0", dict(memory=0, whole_node_memory=True)),  # all of each node's memory
    ("", dict(memory=None, cpus="1", gpus=0)),  # not given: the partition's default applies (else 1 GiB)
    # the rest
    ("-t 1-12", dict(time_limit_s=36 * 3600.0)),
    ("", dict(time_limit_s=None)),  # submission's default applies
    ("-p gpu\n-q high\n-A ml\n-J train", dict(partitions=["gpu"], qos="high", account="ml", name="train")),
    ("-p gpu_a100,batch,gpu_a100", dict(partitions=["gpu_a100", "batch"])),
    ("", dict(partitions=[], qos="", account="default", name="job.sh", user="ann")),
    ("--array=0-99%10", dict(array="0-99%10")),
    ("--nice", dict(nice=100)),
    ("--nice=-5", dict(nice=-5)),
    ("--comment='nightly run'", dict(labels={"comment": "nightly run"})),
    ("-d afterok:a:b,afterany:c,afternotok:d,after:e", dict(dependencies=[
        c.Dependency(kind="after-ok", job_id="a"), c.Dependency(kind="after-ok", job_id="b"),
        c.Dependency(kind="after-any", job_id="c"), c.Dependency(kind="after-not-ok", job_id="d"),
        c.Dependency(kind="after", job_id="e")])),
    ("--kill-on-invalid-dep=yes", dict(dependencies=[])),
    ("--kill-on-invalid-dep=no", dict(dependencies=[])),  # a warning: Horizon ends such a job
    # Slurm's directives, honoured
    ("--exclusive", dict(exclusive=True)),
    ("--exclusive=user", dict(exclusive=True)),  # whole nodes all the same (a warning says so)
    ("--exclusive=oversubscribe", dict(exclusive=False)),
    ("-C a100", dict(constraint="a100")),
    ("--constraint='v100|a100|h100'", dict(constraint="v100|a100|h100")),
    ("--constraint=[V100]", dict(constraint="[v100]")),
    ("--constraint='intel,ib'", dict(constraint="intel&ib")),  # Slurm reads ',' as '&'
    ("--requeue", dict(requeue=True)),
    ("--no-requeue", dict(requeue=False)),
    ("--no-requeue\n--requeue", dict(requeue=True)),  # the later one
    ("--requeue\n--no-requeue", dict(requeue=False)),
    ("--time=2:00:00\n--time-min=30", dict(time_limit_s=7200.0, time_min_s=1800.0)),
    ("--signal=B:USR1@120", dict(limit_signal=c.LimitSignal(signal="USR1", before_s=120.0, batch_only=True))),
    ("--signal=SIGTERM", dict(limit_signal=c.LimitSignal(signal="TERM", before_s=60.0))),
    ("--signal=10@30", dict(limit_signal=c.LimitSignal(signal="USR1", before_s=30.0))),
    ("--dependency=singleton", dict(singleton=True, dependencies=[])),
    ("-d afterok:a,singleton", dict(singleton=True, dependencies=[c.Dependency(kind="after-ok", job_id="a")])),
    ("--hold", dict(hold=True)),
    ("-H", dict(hold=True)),
    ("--immediate", dict(scheduling_timeout_s=1.0)),
    ("--immediate=30", dict(scheduling_timeout_s=30.0)),
    ("--wait-all-nodes=1\n--ignore-pbs", dict(nodes=1)),
    ("--begin=now+1hour", dict(begin_ts=NOW.timestamp() + 3600)),
    ("-b 16:00", dict(begin_ts=NOW.replace(hour=16, minute=0).timestamp())),  # later today
    ("--begin=10:00", dict(begin_ts=NOW.replace(hour=10, minute=0).timestamp() + 86400)),  # past: tomorrow
    ("--begin=2030-01-02T03:04:05", dict(begin_ts=NOW.replace(year=2030, month=1, day=2, hour=3, minute=4,
                                                               second=5).timestamp())),
])
def test_directives_map_to_the_job(directives, expected):
    fields = parse(directives)
    resources = msgspec_dict(fields["resources"])
    unset = c.JobSubmitted(job_id="x", tenant="x")
    for key, value in expected.items():
        actual = resources[key] if key in ("gpus", "gpu_type", "cpus", "memory") else fields.get(key, getattr(unset, key))
        assert actual == value, (key, actual, value)
    # what sbatch makes is a submission Horizon decodes
    c.JobSubmitted(job_id="x", tenant="x", **fields)


def msgspec_dict(struct: Any) -> dict[str, Any]:
    return {name: getattr(struct, name) for name in struct.__struct_fields__}


def test_the_command_line_overrides_the_script():
    fields = parse("--time=10\n--array=0-9\n-J a", "--time=2:00:00", "-a", "0-3", "--dependency=afterok:x")
    assert fields["time_limit_s"] == 7200 and fields["array"] == "0-3" and fields["name"] == "a"
    assert fields["dependencies"] == [c.Dependency(kind="after-ok", job_id="x")]


def test_slurm_variables_known_at_submission():
    env = parse("-N 2\n--ntasks-per-node=4\n-c 3\n--gres=gpu:a100:4\n-p gpu\n-q high\n-A ml\n--array=1,3,5-7")["env"]
    assert env == {
        "SLURM_SUBMIT_DIR": "/home/ann/project", "SLURM_JOB_USER": "ann", "SLURM_JOB_ACCOUNT": "ml",
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8",
        "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "3",  # SLURM_GPUS_ON_NODE: the node's
        "SLURM_JOB_QOS": "high", "SLURM_ARRAY_TASK_COUNT": "5",
        "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "7"}
    # the memory options, in MiB, as Slurm sets them
    assert parse("--mem=16GB")["env"]["SLURM_MEM_PER_NODE"] == "16384"
    assert parse("--mem-per-cpu=2000")["env"]["SLURM_MEM_PER_CPU"] == "2000"
    assert parse("--mem-per-gpu=10G\n--gres=gpu:1")["env"]["SLURM_MEM_PER_GPU"] == "10240"


def test_export_names_variables():  # the rest of --export: tests/front/test_sbatch_environment.py
    defaults = SbatchDefaults(user="ann", workdir="/w", script_path="/w/j.sh", environ={"HOME": "/h", "SECRET": "s"})
    fields, _ = parse_sbatch("#!/bin/sh\n#SBATCH --export=HOME,MODE=fast,UNSET\n", defaults=defaults)
    assert fields["submit_env"] == {"HOME": "/h", "MODE": "fast"}
    fields, _ = parse_sbatch("#!/bin/sh\n#SBATCH --export=NONE\n", defaults=defaults)
    assert fields["submit_env"] == {}
    # a variable given with ALL takes the caller's own value when it has one, as Slurm's manual says
    warnings: list[str] = []
    fields, _ = parse_sbatch("#!/bin/sh\n#SBATCH --export=ALL,HOME=/elsewhere,MODE=x\n", defaults=defaults,
                             warnings=warnings)
    assert fields["submit_env"] == {"HOME": "/h", "MODE": "x", "SECRET": "s"} and warnings == []
    assert "comes first" in problems("--export=MODE=x,ALL")


def test_directives_without_effect_here_are_accepted_with_one_warning_each():
    warnings: list[str] = []
    flags: set[str] = set()
    text = ("#!/bin/bash\n#SBATCH --mail-type=END,FAIL\n#SBATCH --mail-user=ann@example.org\n"
            "#SBATCH --hint=nomultithread --distribution=block:cyclic\n#SBATCH --gpu-bind=closest -m cyclic\n"
            "#SBATCH --tmp=100G --cpu-bind=cores\n#SBATCH --parsable -N 2-4 --use-min-nodes --exclusive=user\n#SBATCH --signal=R:USR1\n"
            "#SBATCH --reservation=r1 --requeue=expedite --kill-on-invalid-dep=no\n")
    with pytest.raises(SbatchError, match="--cpu-bind: not an sbatch option"):  # srun's, not sbatch's
        parse_sbatch(text, defaults=DEFAULTS)
    fields, _ = parse_sbatch(text.replace(" --cpu-bind=cores", ""), defaults=DEFAULTS, warnings=warnings, flags=flags)
    assert [w.split(": ", 2)[:2] for w in warnings] == [
        ["line 2", "--mail-type"], ["line 3", "--mail-user"], ["line 4", "--hint"], ["line 4", "--distribution"],
        ["line 5", "--gpu-bind"], ["line 5", "-m"], ["line 6", "--tmp"], ["line 7", "--use-min-nodes"], ["line 7", "--exclusive"],
        ["line 8", "--signal"], ["line 9", "--reservation"], ["line 9", "--requeue"],
        ["line 9", "--kill-on-invalid-dep"]]
    assert all("\n" not in w for w in warnings)  # one line each
    assert "Horizon sends no mail" in warnings[0] and "does not schedule local disk" in warnings[6]
    assert flags == {"parsable"}  # #SBATCH --parsable is the command's output, as on its command line
    assert fields["nodes"] == 2 and fields["exclusive"] is True


def test_every_option_of_the_table_is_honoured_warned_or_refused_with_a_reason():
    from services.front.slurm.sbatch_options import OPTIONS

    for name, opt in OPTIONS.items():
        kinds = [bool(opt.unsupported), bool(opt.warn), bool(opt.horizon), opt.alias is not None]
        assert sum(kinds) <= 1, name
        if opt.alias is not None:
            assert opt.alias in OPTIONS and OPTIONS[opt.alias].alias is None


@pytest.mark.parametrize("directives, why", [
    ("--exclusive=everyone", "line 2: --exclusive: 'everyone' is not one of exclusive, allocation, user"),
    ("--constraint=a100*2", "node counts (FEATURE*N) are not supported"),
    ("-C '[a*2&b*4]'", "-C: '[a*2&b*4]': node counts"),
    ("-C '[a&b]'", "'&' inside [...] asks for counted node sets"),
    ("-C 'a|'", "ends where a feature was expected"),
    ("-C '((a))'", "parentheses cannot be nested"),
    ("-w 'n[1-'", "line 2: -w: 'n[1-': '[' is not closed"),
    ("-w n[1-4]\n-N 2", "names 4 node(s) and --nodes asks for 2: Horizon runs a job on exactly the nodes listed"),
    ("--signal=B:FOO@60", "--signal: 'FOO' is not a signal"),
    ("--signal=USR1@99999", "is not a number of seconds from 0 to 65535"),
    ("--time=10\n--time-min=20", "--time-min: 1200 s is more than the time limit"),
    ("--requeue=later", "'later' is not one of , expedite"),
    ("--immediate=soon", "is not a number of seconds"),
    ("--mem-per-cpu=0", "0 is not a memory size here"),
    ("--begin=now+1fortnight", "'fortnight' is not a unit of time"),
    ("--begin=25:00", "is not a time of day"),
    ("--bb=capacity=1G", "--bb: not supported"),
    ("--licenses=matlab|abaqus", "--licenses: 'matlab|abaqus': the OR form (a|b, any one of them) is not supported"),
    ("--licenses=matlab:0", "--licenses: '0' is not a count of matlab licenses"),
    ('--licenses="mat lab"', "--licenses: 'mat lab' is not a license name"),
    ("--wrap=x", "--wrap: only allowed on the command line"),
    ("--job-id=x", "--job-id: a horizon sbatch option: give it on the command line"),
    ("--dependency=aftercorr:1", "aftercorr (array task by array task) is not supported"),
    ("--dependency=afterok:1?afterok:2", "'?' (any one of them) is not supported"),
    ("--dependency=after:1+10", "a delay after the job starts (+minutes) is not supported"),
    ("--dependency=afterwards:1", "is not KIND:JOB"),
    ("--gpus=6\n-N 4", "6 GPUs in all do not divide evenly over 4 node(s)"),
    ("--gres=gpu:a100:4\n--gpus-per-node=h100:4", "--gres: asks for GPU type a100 where --gpus-per-node asks for h100"),
    ("--gres=gpu:4\n--gpus-per-task=2", "--gres: asks for 4 GPU(s) per node where --gpus-per-task asks for 2"),
    ("--cpus-per-gpu=3\n--gres=gpu:1\n-n 2", "3 CPUs per node do not divide evenly over 2 task(s)"),
    ("--gres=shard:2", "only the gpu resource is supported"),
    ("--gpus=a100:2,v100:2", "GPUs of several types in one job are not supported"),
    ('--gres="gpu:A 100:2"', "not a GPU model"),
    ("--mem=4G\n--mem-per-cpu=1G", "--mem-per-cpu: and --mem exclude each other"),
    ("--mem-per-gpu=4G", "needs GPUs"),
    ("--cpus-per-gpu=4", "needs GPUs"),
    ("-c 4\n--cpus-per-gpu=4\n--gres=gpu:1", "and --cpus-per-task exclude each other"),
    ("-c 0", "is not a number of CPUs"),
    ("-N 4-2", "the most nodes is fewer than the least"),
    ("-n 9\n-N 2\n--ntasks-per-node=4", "9 tasks over 2 node(s) is more than --ntasks-per-node=4"),
    ("-p a,,b", "an empty partition name in the list"),
    ("-p a/b", "'a/b' is not a partition name"),  # test.q is one, as in Slurm
    ("--array=5-1", "ends before it starts"),
    ("--open-mode=overwrite", "is not one of append, truncate"),
    ("--kill-on-invalid-dep=maybe", "is not one of yes, no"),
    ("--output=%z.out", "%z is not a filename pattern Horizon knows"),
    ("--output=%5x.out", "zero padding only applies to %a, %n, %t, %j and %A"),
])
def test_what_cannot_be_honoured_is_an_error_naming_the_directive(directives, why):
    assert why in problems(directives)


def test_every_problem_is_reported_with_its_line():
    message = problems("--licenses=x|y\n-N 2\n--mail-type=END\n--time=forever\n-C a*2")
    assert message.startswith("3 problems:")
    assert "line 2: --licenses" in message and "line 5: --time" in message and "line 6: -C" in message
    assert "--mail-type" not in message  # a warning, not a problem


def test_a_script_must_start_with_a_shebang():
    with pytest.raises(SbatchError, match="line 1: a batch script must begin with #!"):
        parse_sbatch("#SBATCH -N 1\necho hi\n", defaults=DEFAULTS)


def test_warnings_about_what_slurm_would_launch():
    """srun and scontrol are Horizon's inside a job: no warning; an MPI launcher in a multi-node job is."""
    text = ("#!/bin/bash\nsrun hostname   # srun in a comment is fine\n# mpirun\nmpirun ./a\n"
            "x=$(scontrol show hostnames)\nmpiexec -n 4 ./b # mpirun\n")
    assert [w.split(":")[0] for w in script_warnings(text, nodes=2)] == ["line 4", "line 6"]
    assert "no PMI/PMIx server" in script_warnings(text, nodes=2)[0]
    assert script_warnings(text, nodes=1) == []


# ------------------------------------------------------------------ how the job runs


async def _run_on_a_node(tmp_path: Path, fields: dict[str, Any], job_id: str, index: int | None = None):
    """Run what sbatch made the way an agent runs it: validated by submission, started by the
    process executor (its supervisor, working directory and output files); the attempt's outcome."""
    from services.nodes.backends.process.executors import ProcessExecutor
    from services.submission.normalise import admit

    jobs = dict(admit(c.JobSubmitted(job_id=job_id, tenant="acme", **fields), subject_tenant="acme", gpu_models=set()))
    name = job_id if index is None else f"{job_id}_{index}"
    spec = jobs[name]
    executor = ProcessExecutor(tmp_path / "state")
    attempt = len(list((tmp_path / "state" / name).glob("*"))) + 1 if (tmp_path / "state" / name).exists() else 1
    try:
        execution = await executor.start(name, attempt, spec, c.NodeAllocation(node="n-01", cpus_milli=1000,
                                                                                memory_bytes=1 << 30))
    except RuntimeError as exc:
        return str(exc)
    return await execution.wait()


async def test_the_script_runs_like_slurm(tmp_path):
    """Working directory, array variables, output files named by Slurm's patterns, the interpreter of
    the #! line, the script's arguments: as the agent runs it."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh -e\n#SBATCH --array=0-7 -o out/%x_%A_%3a.txt -e out/%x.err -J demo\n"
                      'echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID on $SLURMD_NODENAME in $(pwd) '
                      'args $1 $2"\necho oops >&2\n')
    (tmp_path / "out").mkdir()
    defaults = SbatchDefaults(user="ann", workdir=str(tmp_path), script_path=str(script), script_args=("a", "b c"))
    fields, body = parse_sbatch(script.read_text(), defaults=defaults)
    assert body.startswith("echo")
    outcome = await _run_on_a_node(tmp_path, fields, "sweep", 7)
    assert outcome.exit_code == 0, outcome
    assert (tmp_path / "out" / "demo_sweep_007.txt").read_text() == \
        f"task 7 of sweep on n-01 in {tmp_path} args a b c\n"
    assert (tmp_path / "out" / "demo.err").read_text() == "oops\n"


async def test_output_without_error_takes_both_streams_and_a_missing_directory_fails_the_job(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --output=%j.log --open-mode=append\necho out; echo err >&2\n")
    fields, _ = parse_sbatch(script.read_text(), defaults=SbatchDefaults(user="ann", workdir=str(tmp_path),
                                                                         script_path=str(script)))
    for _ in range(2):
        assert (await _run_on_a_node(tmp_path, fields, "j1")).exit_code == 0
    assert (tmp_path / "j1.log").read_text() == "out\nerr\nout\nerr\n"
    fields, _ = parse_sbatch(script.read_text(), defaults=SbatchDefaults(
        user="ann", workdir=str(tmp_path / "missing"), script_path=str(script)))
    problem = await _run_on_a_node(tmp_path, fields, "j2")
    assert problem == f"working directory {tmp_path / 'missing'} does not exist on node n-01"


def test_slurm_writes_to_slurm_jobid_out_by_default(tmp_path):
    fields, _ = parse_sbatch("#!/bin/sh\necho hi\n", defaults=SbatchDefaults(user="ann", workdir=str(tmp_path)))
    assert (fields["cwd"], fields["stdout"], fields["stderr"]) == (str(tmp_path), "slurm-%j.out", "")
    fields, _ = parse_sbatch("#!/bin/sh\n#SBATCH --array=1-2 --container-image=localhost/busybox\necho hi\n",
                             defaults=SbatchDefaults(user="ann", workdir=str(tmp_path)))
    assert (fields["stdout"], fields["image"]) == ("slurm-%A_%a.out", "localhost/busybox")


# ------------------------------------------------------------------ the command, without a server


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("script, lines", [
    ("bad_unsupported.sh", ["3 problems:", "line 3: --licenses: 'matlab:1|abaqus:1': the OR form",
                            "line 6: --bb: not supported",
                            "line 7: --constraint: 'skylake*2': node counts"]),
    ("bad_dependency_any.sh", ["line 3: --dependency: '?' (any one of them) is not supported"]),
    ("bad_no_shebang.sh", ["line 1: a batch script must begin with #!"]),
    ("bad_gpu_split.sh", ["line 3: --gpus: 6 GPUs in all do not divide evenly over 4 node(s)"]),
    ("bad_unknown.sh", ["line 2: --frobnicate: not an sbatch option"]),
])
def test_bad_scripts_are_refused_with_the_line(script, lines):
    code, out, err = _invoke("sbatch", "--dry-run", str(DATA / script))
    assert code == 1 and out == ""
    assert err.startswith(f"Error: {DATA / script}: ")
    for line in lines:
        assert line in err


def test_the_real_command_refuses_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "services.front.cli.main", "sbatch", str(DATA / "bad_unsupported.sh")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "line 3: --licenses: 'matlab:1|abaqus:1': the OR form" in done.stderr


def test_usage_errors():
    code, _, err = _invoke("sbatch")
    assert code == 2 and "give the batch script" in err
    code, _, err = _invoke("sbatch", "--dry-run", "--wrap", "hostname", str(DATA / "pipeline_prep.sh"))
    assert code == 2 and "--wrap takes the place of a script" in err
    code, _, err = _invoke("sbatch", "--dry-run", "--priority-class", "urgent", str(DATA / "pipeline_prep.sh"))
    assert code == 2 and "'urgent' is not one of critical" in err
    code, _, err = _invoke("sbatch", "--dry-run", "--bb=x", str(DATA / "pipeline_prep.sh"))
    assert code == 1 and "command line: --bb: not supported" in err


def test_warnings_go_to_stderr_one_line_each_and_a_parsable_directive_prints_the_id(tmp_path):
    script = tmp_path / "warned.sh"
    script.write_text("#!/bin/bash\n#SBATCH --mail-type=END --mail-user=ann@example.org\n#SBATCH --parsable\n"
                      "#SBATCH --export=ALL --hint=nomultithread --gpu-bind=closest\necho hi\n")
    code, out, err = _invoke("sbatch", "--dry-run", "--job-id", "w-1", str(script))
    assert code == 0, err
    lines = err.splitlines()
    assert lines[:4] == [f"horizon sbatch: warning: {w}" for w in (
        "line 2: --mail-type: no effect here: Horizon sends no mail; follow the job with horizon watch --job JOB",
        "line 2: --mail-user: no effect here: Horizon sends no mail; follow the job with horizon watch --job JOB",
        "line 4: --hint: no effect here: Horizon does not lay out threads (compute_bound, nomultithread, ...): its "
        "tasks get CPUs, memory and GPUs, with no socket, core or binding layout",
        "line 4: --gpu-bind: no effect here: Horizon does not bind tasks to GPUs: each task sees its node's GPUs "
        "of the job (srun --gpus-per-task gives each task its own)")]
    code, out, err = _invoke("sbatch", "--dry-run", "-Q", "--job-id", "w-1", str(script))
    assert code == 0 and err == ""  # -Q: nothing on success, warnings neither


def test_dry_run_prints_the_submission_with_command_line_overrides():
    code, out, err = _invoke("sbatch", "--dry-run", "--job-id", "p1", "--time=5", "-N", "1", "--priority-class",
                             "high", str(DATA / "pipeline_prep.sh"), "--fast")
    assert code == 0, err
    body = json.loads(out)
    assert body["job_id"] == "p1" and body["time_limit_s"] == 300 and body["priority_class"] == "high"
    # the job runs its copy of the script (the command's last argument), as Slurm runs its spool copy
    assert body["command"][2].endswith("exec /bin/bash /dev/fd/9 --fast\n")
    assert body["command"][-1] == (DATA / "pipeline_prep.sh").read_text()
    code, out, err = _invoke("sbatch", "--dry-run", "--job-id", "w1", "--wrap", "echo hi; hostname")
    assert code == 0, err
    body = json.loads(out)
    assert body["name"] == "wrap" and "exec /bin/sh -c 'echo hi; hostname'" in body["command"][2]


# ------------------------------------------------------------------ end to end


GOOD: dict[str, tuple[str, dict[str, Any]]] = {
    # script: (job id, what the accepted JobSpec says)
    "ddp_torchrun.sh": ("ddp-001", dict(name="llama-ddp", nodes=4, tasks_per_node=1, gpus=8, gpu_type="a100",
                                        cpus_milli=48000, memory_bytes=480 * GiB, time_limit_s=12 * 3600.0,
                                        profile="default", partition="", account="ml")),
    "array_sweep.sh": ("sweep-001", dict(name="lr-sweep", nodes=1, tasks_per_node=1, gpus=1, cpus_milli=4000,
                                         memory_bytes=16 * GiB, time_limit_s=90 * 60.0, array_max_running=4)),
    "pipeline_prep.sh": ("prep-001", dict(name="prep", cpus_milli=16000, memory_bytes=64000 * MiB,
                                          time_limit_s=45 * 60.0)),
    "pipeline_train.sh": ("train-001", dict(name="train", gpus=2, gpu_type=None, memory_bytes=128 * GiB,
                                            time_limit_s=86400.0,
                                            dependencies=(c.Dependency(kind="after-ok", job_id="prep-001"),))),
    "pipeline_eval.sh": ("eval-001", dict(name="eval", gpus=1, time_limit_s=2 * 3600.0, dependencies=(
        c.Dependency(kind="after-any", job_id="train-001"), c.Dependency(kind="after-ok", job_id="prep-001")))),
    # four tasks share the node's four GPUs (each sees them all), as Slurm gives --gres to a node's tasks
    "h100_finetune.sh": ("sft-001", dict(name="sft-70b", nodes=1, tasks_per_node=4, gpus=0, gpus_per_node=4,
                                         gpu_type="h100",
                                         gpu_variant="80gb", cpus_milli=8000, memory_bytes=100 * GiB,
                                         time_limit_s=2 * 86400 + 12 * 3600.0, qos="high", nice=10)),
    "cpu_mpi.sh": ("cfd-001", dict(name="cfd", nodes=2, tasks_per_node=32, gpus=0, cpus_milli=1000,
                                   memory_bytes=2000 * MiB, time_limit_s=8 * 3600.0, account="hpc")),
    "gpus_total.sh": ("megatron-001", dict(nodes=2, tasks_per_node=8, gpus=0, gpus_per_node=8, cpus_milli=6000,
                                           memory_bytes=50 * GiB, time_limit_s=7 * 86400.0)),
    "notebook_export.sh": ("nightly-001", dict(name="nightly eval", cpus_milli=2000, memory_bytes=8 * GiB,
                                               time_limit_s=1800.0, labels={"comment": "nightly regression run"})),
    "short_forms.sh": ("quick-001", dict(name="quick-final", nodes=1, tasks_per_node=4, gpus=0, gpus_per_node=4,
                                         gpu_type="a100",
                                         cpus_milli=2000, memory_bytes=4 * GiB, time_limit_s=300.0, qos="low")),
}


async def test_every_good_script_is_accepted_with_its_resources(nats_server, tmp_path):
    nodes = local_nodes(4, gpus_per_node=8) + local_nodes(1, gpus_per_node=4, gpu_type="h100-80gb", prefix="h100")
    stack = Stack(nats_server.url, tmp_path, nodes=nodes, executor="sim")
    await stack.start()
    url = nats_server.url
    try:
        last = 0
        for script, (job_id, _) in GOOD.items():
            code, out, err = await asyncio.to_thread(
                _invoke, "sbatch", "--nats", url, "--job-id", job_id, "--sim-runtime", "600", str(DATA / script))
            assert code == 0, (script, err)
            # its number, as Slurm's job id (an array's is its first task's; its tasks take one each)
            number = int(re.fullmatch(r"Submitted batch job ([0-9]+)\n", out)[1])  # type: ignore[index]
            assert number > last, (script, out, err)
            last = number
        code, out, err = await asyncio.to_thread(_invoke, "sbatch", "--nats", url, "--parsable", "--job-id", "w1",
                                                 "--wrap", "true")
        assert code == 0 and int(out) > last and out == f"{int(out)}\n", err
        code, out, err = await asyncio.to_thread(_invoke, "sbatch", "--nats", url, "--json", "--job-id", "w2",
                                                 "--gres=gpu:tpu:1", "--wrap", "true")
        assert code == 1 and json.loads(out.splitlines()[0])["state"] == "REJECTED"
        assert "job w2 rejected: resources.gpu_type: 'tpu' is not a GPU model of this cluster" in err
    finally:
        await stack.stop()
    records = await read_log(url)
    accepted: dict[str, c.JobSpec] = {}
    for record in records:
        if record.subject.startswith("horizon.evt.submission.JobAccepted."):
            event = decode(record.data)
            accepted[event.job_id] = event.spec
    for script, (job_id, expected) in GOOD.items():
        spec = accepted[f"{job_id}_0" if script == "array_sweep.sh" else job_id]
        for key, value in expected.items():
            assert getattr(spec, key) == value, (script, key, getattr(spec, key), value)
        assert spec.command[:2] == ("/bin/sh", "-c") and spec.command[-1] == (DATA / script).read_text()
    assert sorted(j for j in accepted if j.startswith("sweep-001_")) == sorted(f"sweep-001_{i}" for i in range(16))
    assert accepted["nightly-001"].submit_env["DATASET"] == "imagenet"
    # --chdir=results: relative to where horizon sbatch ran, as in Slurm
    assert accepted["nightly-001"].cwd == str(Path.cwd() / "results")
    assert_replays(records)


@pytest.mark.parametrize("text, why", [
    ("afterok:a?afterok:b", "'?' (any one of them) is not supported"),
    ("after:a+10", "a delay after the job starts (+minutes) is not supported"),
    ("afterok:bad/id", "'bad/id' is not a job id"),
    ("afterok:a,frobnicate", "'frobnicate' is not KIND:JOB"),
    ("after-ok:a", "is not KIND:JOB"),
])
def test_submit_reads_dependency_with_the_same_strict_parser_as_sbatch(text, why):
    """One Slurm --dependency parser: horizon submit refuses what horizon sbatch refuses, before any NATS."""
    result = CliRunner().invoke(cli, ["submit", "--nats", "nats://127.0.0.1:1", "--dependency", text, "--", "true"])
    assert result.exit_code == 2, result.output
    assert "--dependency" in result.output and why in " ".join(result.output.split())
    script = CliRunner().invoke(cli, ["sbatch", "--dry-run", f"--dependency={text}", "--wrap", "true"])
    assert script.exit_code == 1 and why in " ".join(script.output.split())


def test_submit_and_sbatch_make_the_same_dependencies():
    from services.front.slurm.slurm_values import parse_dependencies

    assert parse_dependencies("afterok:a:b,afterany:c") == [
        c.Dependency(kind="after-ok", job_id="a"), c.Dependency(kind="after-ok", job_id="b"),
        c.Dependency(kind="after-any", job_id="c")]
