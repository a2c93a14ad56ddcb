"""The environment as Slurm's sbatch exports it (issue 34, item 2): ``--export`` (ALL by default, NONE,
ALL,VAR=x, VAR1,VAR2), ``--export-file``, the ``SBATCH_*`` variables read as options (the script <
the environment < the command line), what a job carries and starts from on its node, and srun
inheriting it. Pure tables first; then jobs that really run: ``horizon sbatch`` in a shell of the
test's making against a real nats-server and a real agent running the script."""

from __future__ import annotations

import asyncio
import copy
import os
import pickle
import pwd
import sys
from pathlib import Path
from typing import Any

import pytest

from events import catalogue as c
from services.domain.jobs import compact
from services.front.slurm.sbatch import SbatchDefaults, parse_sbatch
from services.front.slurm.sbatch_environment import captured, environment_options, read_export_file
from services.front.slurm.sbatch_options import SbatchError
from services.front.slurm.srun_options import parse_srun
from services.nodes.backends.process.identity import own_identity, submitted_environment
from services.front.client.client import query_all
from services.nodes.spec import local_nodes
from services.submission.normalise import Rejection, admit
from tests.e2e import assert_replays, events_of, wait_until

SHELL = {"FOO": "bar", "PATH": "/opt/tool/bin:/usr/bin:/bin", "HOME": "/home/ann", "USER": "ann", "LANG": "C.UTF-8",
         "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_JWT": "secret-token",
         # sbatch run inside another job: that job's own variables
         "SLURM_JOB_ID": "41", "SLURM_ARRAY_TASK_ID": "3", "SLURM_PROCID": "0", "CUDA_VISIBLE_DEVICES": "0,1",
         "HORIZON_JOB_ID": "parent", "HORIZON_STEP_SOCKET": "/run/x.sock",
         "HORIZON_NATS_URL": "nats://acme:pw@h:4222", "HORIZON_TENANT": "acme"}


def fields(directives: str = "", *command_line: str, environ: dict[str, str] | None = None,
           read_file: Any = None) -> dict[str, Any]:
    text = "#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives.splitlines() if d.strip()) + "true\n"
    defaults = SbatchDefaults(user="ann", workdir="/w", script_path="/w/j.sh",
                              environ=SHELL if environ is None else environ, read_file=read_file)
    return parse_sbatch(text, defaults=defaults, command_line=command_line)[0]


# ------------------------------------------------------------------ --export


def test_all_is_the_default_and_copies_the_shell_less_what_describes_another_job():
    env = fields()["submit_env"]
    assert env == {"FOO": "bar", "PATH": "/opt/tool/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                   "SLURM_CONF": "/etc/slurm/slurm.conf", "HORIZON_TENANT": "acme"}
    assert fields("--export=ALL")["submit_env"] == env
    # the shell's SLURM_EXPORT_ENV is never overwritten; ALL sets none
    assert "SLURM_EXPORT_ENV" not in fields("--export=ALL")["env"]
    # a NATS URL without a password is the client's setting, kept
    assert captured({"HORIZON_NATS_URL": "nats://h:4222"}) == {"HORIZON_NATS_URL": "nats://h:4222"}


def test_none_keeps_only_the_shells_slurm_variables_and_srun_follows():
    made = fields("--export=NONE")
    assert made["submit_env"] == {"SLURM_CONF": "/etc/slurm/slurm.conf"}
    assert made["env"]["SLURM_EXPORT_ENV"] == "NONE"  # srun's default inside the job, as Slurm's sbatch sets it
    assert fields("--export=NIL")["submit_env"] == {"SLURM_CONF": "/etc/slurm/slurm.conf"}
    assert "SLURM_EXPORT_ENV" not in fields("--export=NONE", environ={**SHELL, "SLURM_EXPORT_ENV": "ALL"})["env"]


def test_all_with_values_the_callers_own_wins():
    env = fields("--export=ALL,FOO=other,MODE=fast")["submit_env"]
    assert (env["FOO"], env["MODE"]) == ("bar", "fast")
    assert fields("--export=ALL,MODE=fast")["env"]["SLURM_EXPORT_ENV"] == "ALL,MODE=fast"


def test_a_list_names_what_is_copied():
    made = fields("--export=FOO,HOME,MODE=fast,UNSET")
    # named: as the shell has them (HOME too, which ALL leaves to the node); the shell's SLURM_* always
    assert made["submit_env"] == {"FOO": "bar", "HOME": "/home/ann", "MODE": "fast",
                                  "SLURM_CONF": "/etc/slurm/slurm.conf"}
    assert made["env"]["SLURM_EXPORT_ENV"] == "FOO,HOME,MODE=fast,UNSET"
    assert "comes first" in _problems("--export=MODE=x,ALL")


def test_a_value_with_commas_is_quoted_as_slurm_reads_it():
    # Slurm's find_quote_token: commas inside quotes do not cut; a token quoted whole loses its quotes
    assert fields("", "--export=ALL,'LIST=a,b',Q=\"x,y\"")["submit_env"]["LIST"] == "a,b"
    assert fields("", "--export=ALL,'LIST=a,b',Q=\"x,y\"")["submit_env"]["Q"] == '"x,y"'
    assert "'2' is not a variable name" in _problems("", "--export=LIST=1,2")  # unquoted: two items


def test_export_file_takes_the_place_of_the_shell():
    data = b"A=1\0B=two words\nand a line\0HOSTNAME=x\0DISPLAY=:0\0\0C=after the end\0"
    read = {"vars.env": data, "lines.env": b"A=1\nB=2\n"}.get
    env = fields("--export-file=vars.env", read_file=lambda name: read(name))["submit_env"]
    assert env == {"A": "1", "B": "two words\nand a line"}  # Slurm leaves HOSTNAME and DISPLAY, stops at an empty one
    assert fields("--export-file=vars.env\n--export=NONE", read_file=read)["submit_env"] == {}
    assert fields("--export-file=vars.env\n--export=FOO,M=1", read_file=read)["submit_env"] == {
        "A": "1", "B": "two words\nand a line", "M": "1"}  # the file's, and FOO from it (none there)
    assert "separate the variables with NUL characters" in _problems("--export-file=lines.env", read_file=read)

    def missing(name: str) -> bytes:
        raise FileNotFoundError(2, "No such file or directory", name)

    assert "line 2: --export-file: cannot read 'nope': No such file or directory" in _problems(
        "--export-file=nope", read_file=missing)
    assert read_export_file(b"X=1", "f") == {"X": "1"}  # one entry, no terminator


def _problems(directives: str, *command_line: str, **kw: Any) -> str:
    with pytest.raises(SbatchError) as info:
        fields(directives, *command_line, **kw)
    return str(info.value)


# ------------------------------------------------------------------ SBATCH_* input variables


def test_sbatch_variables_override_the_script_and_the_command_line_overrides_them():
    shell = {"SBATCH_PARTITION": "gpu", "SBATCH_ACCOUNT": "ml", "SBATCH_TIMELIMIT": "10", "SBATCH_JOB_NAME": "env"}
    made = fields("-p cpu\n-A other\n-t 5\n-J script", environ=shell)
    assert (made["partitions"], made["account"], made["time_limit_s"], made["name"]) == (["gpu"], "ml", 600.0, "env")
    made = fields("-p cpu\n-A other", "-p", "big", "--account=cli", environ=shell)
    assert (made["partitions"], made["account"]) == (["big"], "cli")
    assert fields("", environ={"SBATCH_EXPORT": "NONE", "FOO": "x"})["submit_env"] == {}
    assert fields("", environ={"SBATCH_OUTPUT": "o-%j.txt", "SBATCH_ERROR": ""})["stdout"] == "o-%j.txt"  # empty: unset


def test_a_flags_variable_sets_it_or_unsets_the_scripts():
    assert fields("", environ={"SBATCH_NO_REQUEUE": ""}).get("requeue") is False
    assert fields("", environ={"SBATCH_NO_REQUEUE": "yes"}).get("requeue") is False
    assert fields("--no-requeue", environ={"SBATCH_NO_REQUEUE": "no"}).get("requeue", True) is True  # unset
    assert fields("", "--no-requeue", environ={"SBATCH_NO_REQUEUE": "0"}).get("requeue") is False  # the command line
    assert fields("", environ={"SBATCH_EXCLUSIVE": ""}).get("exclusive") is True
    options, unset = environment_options({"SBATCH_WAIT": "1", "SBATCH_DEBUG": "2", "SBATCH_HOLD": "x", "PATH": "/"})
    assert [(d.option, d.given) for d in options] == [("verbose", "SBATCH_DEBUG"), ("wait", "SBATCH_WAIT")]
    assert unset == set()
    flags: set[str] = set()
    parse_sbatch("#!/bin/sh\ntrue\n", defaults=SbatchDefaults(user="a", workdir="/w", environ={"SBATCH_WAIT": "yes"}),
                 flags=flags)
    assert flags == {"wait"}


def test_a_bad_or_unsupported_variable_is_named():
    assert "environment: SBATCH_PARTITION: 'a b' is not a partition name" in _problems(
        "", environ={"SBATCH_PARTITION": "a b"})
    assert "environment: SLURM_CLUSTERS: not supported: Horizon schedules one cluster" in _problems(
        "", environ={"SLURM_CLUSTERS": "c2"})
    warnings: list[str] = []
    parse_sbatch("#!/bin/sh\ntrue\n", defaults=SbatchDefaults(user="a", workdir="/w", environ={"SLURM_HINT": "x"}),
                 warnings=warnings)
    assert warnings and warnings[0].startswith("environment: SLURM_HINT: no effect here")


def test_slurm_exit_error_is_sbatchs_exit_code_when_it_fails():
    from click.testing import CliRunner

    from services.front.cli.main import cli

    failed = CliRunner().invoke(cli, ["sbatch", "--dry-run", "--clusters=c2", "--wrap", "true"],
                                env={"SLURM_EXIT_ERROR": "7"})
    assert failed.exit_code == 7 and "--clusters: not supported" in failed.stderr
    assert CliRunner().invoke(cli, ["sbatch", "--dry-run", "--clusters=c2", "--wrap", "true"],
                              env={"SLURM_EXIT_ERROR": "x"}).exit_code == 1


def test_srun_takes_its_export_from_the_job():
    assert parse_srun(["x"], {"SLURM_EXPORT_ENV": "NONE"}).request == {"export": "NONE"}
    assert parse_srun(["x"], {"SLURM_EXPORT_ENV": "NONE", "SRUN_EXPORT_ENV": "ALL"}).request == {"export": "ALL"}
    assert parse_srun(["--export=ALL", "x"], {"SLURM_EXPORT_ENV": "NONE"}).request == {"export": "ALL"}


# ------------------------------------------------------------------ what the job carries


def test_the_spec_carries_it_and_equal_ones_are_held_once():
    made = fields()
    jobs = dict(admit(c.JobSubmitted(job_id="j", tenant="acme", **made), subject_tenant="acme", gpu_models=set()))
    first = compact(jobs["j"])
    again = compact(dict(admit(c.JobSubmitted(job_id="k", tenant="acme", **fields()), subject_tenant="acme",
                               gpu_models=set()))["k"])
    assert first.submit_env == made["submit_env"] and first.submit_env is again.submit_env
    assert copy.deepcopy(first).submit_env == first.submit_env  # read-only, yet copied and pickled as a map
    assert pickle.loads(pickle.dumps(first)).submit_env == first.submit_env
    # horizon submit carries none: its job starts from the node agent's environment, as before
    assert compact(dict(admit(c.JobSubmitted(job_id="s", tenant="acme", command=["true"]), subject_tenant="acme",
                              gpu_models=set()))["s"]).submit_env is None


def test_an_environment_too_large_to_carry_is_refused_saying_so():
    big = {f"V{i}": "x" * 300 for i in range(1000)}
    with pytest.raises(Rejection) as info:
        admit(c.JobSubmitted(job_id="j", tenant="acme", **fields(environ=big)), subject_tenant="acme",
              gpu_models=set())
    assert "sbatch --export=NONE, or --export=VAR,..., carries less" in str(info.value)
    many = {f"V{i}": "x" for i in range(1100)}
    with pytest.raises(Rejection, match="the submitting environment has 1100 variables; at most 1024"):
        admit(c.JobSubmitted(job_id="j", tenant="acme", **fields(environ=many)), subject_tenant="acme",
              gpu_models=set())


def test_a_job_starts_from_its_submitting_environment_over_the_nodes_path_and_its_users_identity():
    me = own_identity()
    node = {"PATH": "/node/bin", "LC_ALL": "C", "AGENT_SECRET": "x", "HOME": "/agent"}
    assert submitted_environment(None, node, {"FOO": "bar"}) == {
        "PATH": "/node/bin", "LC_ALL": "C", "HOME": me.home, "USER": me.user, "LOGNAME": me.user, "SHELL": me.shell,
        "FOO": "bar"}
    # what the submitter named wins (the captured shell has no HOME: it is the running user's)
    assert submitted_environment(None, node, {"PATH": "/mine", "HOME": "/h"})["PATH"] == "/mine"


# ------------------------------------------------------------------ jobs that really run


def _job_number(line: str) -> str:
    return line.split("JOB=", 1)[1].split()[0]


def _shell(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    """A submitting shell: a PATH with a program only it has, FOO=bar, and what a shell inside another
    job would have (its SLURM_JOB_ID), a password in its NATS URL; nothing of the test session's."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "only-here").write_text("#!/bin/sh\necho only-here ran\n")
    (tools / "only-here").chmod(0o755)
    return {"PATH": f"{tools}:{Path(sys.executable).parent}:/usr/bin:/bin", "FOO": "bar", "LANG": "C.UTF-8",
            "HOME": str(tmp_path / "submitter-home"), "SLURM_JOB_ID": "999", "HORIZON_NATS_URL": url, **extra}


async def _sbatch(shell: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.front.cli.main", "sbatch", *args,
                                                cwd=cwd, env=shell, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


REPORT = r"""#!/bin/bash
#SBATCH -o %x.out
#SBATCH -A from-script
echo "FOO=${FOO-unset} BAR=${BAR-unset} MODE=${MODE-unset} A=${A-unset} AGENT_ONLY=${AGENT_ONLY-unset}"
echo "TOOL=$(only-here 2>/dev/null || echo missing)"
echo "HOME=$HOME USER=$USER JOB=$SLURM_JOB_ID ACCOUNT=$SLURM_JOB_ACCOUNT URL=${HORIZON_NATS_URL-unset}"
export LATER=1
srun bash -c 'echo "STEP FOO=${FOO-unset} LATER=${LATER-unset}"'
srun --export=ALL bash -c 'echo "STEP-ALL FOO=${FOO-unset} LATER=${LATER-unset}"'
"""


async def test_jobs_see_the_environment_sbatch_exported(running_horizon, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_ONLY", "the agent's own")  # the node agent's environment: no job of sbatch's sees it
    h = await running_horizon(nodes=local_nodes(1, cpus=4), executor="process")
    work = tmp_path / "work"
    work.mkdir()
    (work / "report.sh").write_text(REPORT)
    (work / "vars.env").write_bytes(b"A=from-file\0FOO=file-foo\0")
    shell = _shell(tmp_path, h.url)
    runs = {  # job name: sbatch's options
        "default": [],
        "none": ["--export=NONE"],
        "allvalues": ["--export=ALL,FOO=other,MODE=fast"],
        "list": ["--export=FOO,BAR=x"],
        "file": ["--export-file=vars.env"],
        "envaccount": [],  # SBATCH_ACCOUNT over the script's -A
        "cliaccount": ["-A", "from-cli"],  # the command line over SBATCH_ACCOUNT
    }
    for name, options in runs.items():
        env = {**shell, "SBATCH_ACCOUNT": "from-env"} if name.endswith("account") else shell
        code, out, err = await _sbatch(env, work, "--job-id", f"env-{name}", "-J", name, *options, "report.sh")
        assert code == 0, err
    await wait_until(lambda: all(h.tally.has("JobSucceeded", f"env-{n}") or h.tally.has("JobFailed", f"env-{n}")
                                 for n in runs), 60, "every job to end")
    out = {n: (work / f"{n}.out").read_text() for n in runs}
    assert all(h.tally.has("JobSucceeded", f"env-{n}") for n in runs), out
    me = pwd.getpwuid(os.geteuid())
    default = out["default"].splitlines()
    assert default[:3] == [
        "FOO=bar BAR=unset MODE=unset A=unset AGENT_ONLY=unset", "TOOL=only-here ran",
        f"HOME={me.pw_dir} USER={me.pw_name} JOB={_job_number(default[2])} ACCOUNT=from-script URL={h.url}"], default
    assert _job_number(default[2]) != "999"  # the job's own id, not the one of the shell's job    # srun inside inherits the batch script's environment, what it exported since included
    assert sorted(default[3:]) == ["STEP FOO=bar LATER=1", "STEP-ALL FOO=bar LATER=1"], out["default"]
    none = out["none"].splitlines()
    assert none[:2] == ["FOO=unset BAR=unset MODE=unset A=unset AGENT_ONLY=unset", "TOOL=missing"], out["none"]
    # SLURM_EXPORT_ENV=NONE: the steps take NONE too, as in Slurm, unless srun says --export=ALL
    assert sorted(none[3:]) == ["STEP FOO=unset LATER=unset", "STEP-ALL FOO=unset LATER=1"], out["none"]
    assert out["allvalues"].startswith("FOO=bar BAR=unset MODE=fast "), out["allvalues"]
    assert out["list"].splitlines()[:2] == ["FOO=bar BAR=x MODE=unset A=unset AGENT_ONLY=unset", "TOOL=missing"]
    assert out["file"].startswith("FOO=file-foo BAR=unset MODE=unset A=from-file "), out["file"]
    assert "ACCOUNT=from-env " in out["envaccount"] and "ACCOUNT=from-cli " in out["cliaccount"], out
    # the log keeps what the job carried; the read model answers no one with it (squeue asks for specs)
    rows = await query_all(h.nc, "jobs", {"job_ids": ["env-default"], "specs": True}, "jobs")
    [row] = [r for r in rows["jobs"] if r["job_id"] == "env-default"]
    assert row["spec"]["submit_env"] is None and row["spec"]["command"], row["spec"]
    accepted = [e for e in events_of(await h.records()) if isinstance(e, c.JobAccepted) and e.job_id == "env-default"]
    assert accepted[0].spec.submit_env is not None and accepted[0].spec.submit_env["FOO"] == "bar"
    await h.stop()
    assert_replays(await h.records())
