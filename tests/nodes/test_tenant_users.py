"""Jobs run as the person who submitted them (issue 31; docs/tenants.md, "The data plane").

A real ``horizon up --auth`` on real process nodes with real cgroups, two tenants, and a user of
each mapped to a real Unix user this module creates (and removes). Each attack of the issue's table
is run as written there, from inside a real job of acme's user, against globex's user's files and
jobs; afterwards ``horizon check`` and ``horizon audit`` pass and globex's job is as it was.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.nodes.backends.process.executors import ProcessExecutor, kill_attempts
from services.nodes.backends.process.job_files import default_spool
from tests.nodes.test_containers import image  # noqa: F401 - the busybox image, built once per session
from tests.front.test_up_auth import HORIZON, Up, clean_env, horizon, start_up, stop_up

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="creates Unix users and runs jobs as them: needs root")]


@dataclass
class Person:
    """A tenant's user: its login URL, its Unix user and a folder of its own to submit from."""

    name: str
    tenant: str
    unix: str
    uid: int
    url: str
    work: Path

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(HORIZON_NATS_URL=self.url, **extra)

    def horizon(self, *args: str) -> subprocess.CompletedProcess[str]:
        return horizon(*args, env=self.env())

    def submit(self, *args: str) -> str:
        done = self.horizon("submit", "--json", "--chdir", str(self.work), *args)
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["job_id"])

    def job(self, job_id: str) -> dict[str, Any]:
        done = self.horizon("jobs", "--json")
        assert done.returncode == 0, done.stderr
        return {r["job_id"]: r for r in json.loads(done.stdout)}.get(job_id, {})

    def wait(self, job_id: str, states: tuple[str, ...] = ("SUCCEEDED", "FAILED"), timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            row = self.job(job_id)
            if row.get("state") in states:
                return row
            assert time.monotonic() < deadline, (job_id, row)
            time.sleep(0.3)

    def logs(self, job_id: str, *args: str) -> str:
        done = self.horizon("logs", *args, job_id)
        assert done.returncode == 0, done.stderr
        return done.stdout


@dataclass
class Cluster:
    up: Up
    acme: Person
    globex: Person

    @property
    def executor(self) -> ProcessExecutor:
        return ProcessExecutor(self.up.data_dir / "jobs")

    def files(self, person: Person, job_id: str) -> Path:
        """The attempt's own folder (its output, its checkpoint)."""
        return self.executor.job_dir(f"{person.tenant}:{job_id}", 1)

    def plan(self, person: Person, job_id: str) -> dict[str, Any]:
        return json.loads((self.executor.attempt_dir(f"{person.tenant}:{job_id}", 1) / "plan.json").read_text())


def _add_unix_user(name: str) -> int:
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", "--user-group", name], check=True,
                   capture_output=True)
    return pwd.getpwnam(name).pw_uid


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tag = f"hz{os.getpid() % 100000}"
    made: list[str] = []
    works: list[Path] = []
    up = start_up(tmp_path_factory.mktemp("users"), "--auth")
    try:
        people = {}
        for tenant, user in (("acme", "alice"), ("globex", "bob")):
            unix = f"{tag}{user[0]}"
            uid = _add_unix_user(unix)
            made.append(unix)
            added = horizon("tenant", "add", tenant, "--json", "--data-dir", str(up.data_dir))
            assert added.returncode == 0, added.stderr
            done = horizon("user", "add", user, "--tenant", tenant, "--unix-user", unix, "--json",
                           "--data-dir", str(up.data_dir))
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            assert answer == {"user": user, "tenant": tenant, "uid": uid, "nats_url": answer["nats_url"]}
            work = Path(f"/tmp/{unix}-work")  # the user's own folder, where it submits from
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(mode=0o700)
            os.chown(work, uid, uid)
            works.append(work)
            people[tenant] = Person(user, tenant, unix, uid, answer["nats_url"], work)
        yield Cluster(up, people["acme"], people["globex"])
    finally:
        stop_up(up)
        kill_attempts(up.data_dir / "jobs")  # jobs outlive their agent: these end with the test
        shutil.rmtree(default_spool(up.data_dir / "jobs"), ignore_errors=True)
        for work in works:
            shutil.rmtree(work, ignore_errors=True)
        for name in made:
            deadline = time.monotonic() + 10
            while subprocess.run(["userdel", name], capture_output=True).returncode == 8 and time.monotonic() < deadline:
                time.sleep(0.2)  # 8: a process of the user's is still going (a killed job's last moments)


def test_user_add_refuses_root_and_unknown_users(cluster: Cluster):
    where = ["--data-dir", str(cluster.up.data_dir)]
    root = horizon("user", "add", "boss", "--tenant", "acme", "--unix-user", "root", *where)
    assert root.returncode == 1 and "uid 0 (root)" in root.stderr and "--allow-root" in root.stderr
    unknown = horizon("user", "add", "nosuchperson", "--tenant", "acme", *where)
    assert unknown.returncode == 1 and "no Unix user 'nosuchperson'" in unknown.stderr
    no_tenant = horizon("user", "add", "carol", "--tenant", "initech", "--uid", "4242", *where)
    assert no_tenant.returncode == 1 and "no tenant 'initech'" in no_tenant.stderr
    assert "Traceback" not in root.stderr + unknown.stderr + no_tenant.stderr


def test_each_users_job_runs_as_its_uid_and_owns_its_files(cluster: Cluster):
    jobs = {p.tenant: (p, p.submit("--", "sh", "-c", 'id -u; id -g; echo "$USER $HOME $SLURM_JOB_USER"; pwd'))
            for p in (cluster.acme, cluster.globex)}
    for person, job_id in jobs.values():
        assert person.wait(job_id)["state"] == "SUCCEEDED"
        uid, gid, names, cwd = person.logs(job_id).splitlines()
        assert (int(uid), int(gid)) == (person.uid, pwd.getpwnam(person.unix).pw_gid)
        assert names.split()[0] == person.unix and names.split()[-1] == person.name  # SLURM_JOB_USER: the Horizon user
        assert cwd == str(person.work)
        folder = cluster.files(person, job_id)
        st = folder.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (person.uid, 0o700)
        for name in ("stdout", "stderr"):
            st = (folder / name).stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (person.uid, 0o600), name
        supervisor = cluster.executor.attempt_dir(f"{person.tenant}:{job_id}", 1)
        assert all(stat.S_IMODE(f.stat().st_mode) & 0o077 == 0 for f in supervisor.glob("*.json"))  # root's alone
        assert str(cluster.up.data_dir) not in json.dumps(cluster.plan(person, job_id)["env"])  # no data dir path
    assert stat.S_IMODE(cluster.up.data_dir.stat().st_mode) == 0o700


def _victim(cluster: Cluster) -> str:
    """globex's job, running, with a secret in its output."""
    job_id = cluster.globex.submit("--job-id", "g-victim-1", "--", "sh", "-c", "echo globex-secret; sleep 120")
    cluster.globex.wait(job_id, ("RUNNING",))
    out = cluster.files(cluster.globex, job_id) / "stdout"
    deadline = time.monotonic() + 20
    while not (out.exists() and out.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return job_id


ATTACKS = r"""
try() {{ what=$1; shift; if "$@" >/dev/null 2>&1; then echo "$what: DONE"; else echo "$what: refused"; fi; }}
id -u
try read-users cat {data}/auth/users.json
try read-tenants cat {data}/auth/tenants.json
try read-dashboard-token cat {data}/auth/dashboard-token
try read-server-config cat {data}/auth/nats.conf
try list-data ls {data}
try read-victim-output cat {victim_out}
try write-victim-output sh -c 'echo acme-text >> {victim_out}'
try read-victim-plan cat {victim_plan}
try hostname hostname {tag}-evil
try write-etc sh -c 'echo x > /etc/{tag}-probe'
try list-root ls /root
echo "credentials in env: $(env | grep -c '://[^/ ]*@')"
echo "data dir in env: $(env | grep -c '{data}')"
"""


def test_a_hostile_job_reaches_nothing_that_is_not_its_own(cluster: Cluster):
    """The issue's table, run from inside acme's user's job: each row refused."""
    victim = _victim(cluster)
    data = cluster.up.data_dir
    script = ATTACKS.format(data=data, victim_out=cluster.files(cluster.globex, victim) / "stdout",
                            victim_plan=cluster.executor.attempt_dir(f"globex:{victim}", 1) / "plan.json",
                            tag=cluster.acme.unix)
    job_id = cluster.acme.submit("--", "sh", "-c", script)
    assert cluster.acme.wait(job_id)["state"] == "SUCCEEDED"
    lines = cluster.acme.logs(job_id).splitlines()
    assert lines[0] == str(cluster.acme.uid)  # not 0
    tried = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    assert {what: result for what, result in tried.items() if result == "DONE"} == {}, lines
    assert tried["credentials in env"] == "0" and tried["data dir in env"] == "0"
    assert socket.gethostname() != f"{cluster.acme.unix}-evil" and not Path(f"/etc/{cluster.acme.unix}-probe").exists()
    # globex's job and output are as they were
    assert cluster.globex.logs(victim) == "globex-secret\n"
    assert cluster.globex.job(victim)["state"] == "RUNNING"


def test_output_and_working_folders_resolve_as_the_user(cluster: Cluster):
    victim = cluster.files(cluster.globex, "g-victim-1") / "stdout" if cluster.globex.job("g-victim-1") else None
    victim = victim or cluster.files(cluster.globex, _victim(cluster)) / "stdout"
    tag = cluster.acme.unix
    cases = {
        "etc": (["--output", f"/etc/{tag}_%j.txt"], "cannot open output file /etc/"),
        "up": (["--output", "../../x"], "cannot open output file"),
        "victim": (["--output", str(victim)], "cannot open output file"),
        "root": (["--chdir", "/root"], "cannot enter working directory /root as"),
        "missing": (["--chdir", f"/tmp/{tag}-nowhere"], "does not exist"),
    }
    ids = {name: cluster.acme.submit(*options, "--", "true") for name, (options, _) in cases.items()}
    for name, (_options, reason) in cases.items():
        row = cluster.acme.wait(ids[name])
        assert row["state"] == "FAILED" and reason in row["reason"], (name, row)
        if name != "missing":
            assert "Permission denied" in row["reason"], row
        assert str(cluster.up.data_dir) not in row["reason"]
    assert not list(Path("/etc").glob(f"{tag}_*")) and not Path("/x").exists()
    assert cluster.globex.logs("g-victim-1") == "globex-secret\n"


def test_the_user_is_the_authenticated_one(cluster: Cluster):
    claimed = cluster.acme.horizon("submit", "--user", "root", "--chdir", str(cluster.acme.work), "--", "true")
    assert claimed.returncode == 1 and "'root' is not who sent this: you are 'alice'" in claimed.stderr
    job_id = cluster.acme.submit("--", "true")
    assert cluster.acme.job(job_id)["user"] == "alice"
    # the tenant's own login runs as the Unix user tenant add mapped it to (nobody: no user named acme)
    login = json.loads(horizon("tenant", "add", "acme", "--json", "--data-dir", str(cluster.up.data_dir)).stdout)
    tenant = Person("acme", "acme", "nobody", pwd.getpwnam("nobody").pw_uid, login["nats_url"], Path("/tmp"))
    mine = tenant.submit("--", "id", "-un")
    assert tenant.wait(mine)["state"] == "SUCCEEDED" and tenant.logs(mine) == "nobody\n"


PROBE = """
import json, socket, sys
for what, path in (("globex", sys.argv[1]), ("other attempt", sys.argv[2]), ("own", sys.argv[3])):
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)
            sock.sendall(json.dumps({"op": "job"}).encode() + b"\\n")
            answer = json.loads(sock.makefile().readline())
        print(what + ":", answer.get("error") or "served " + str(answer.get("JobId") or answer.get("job_id") or "?"))
    except OSError as exc:
        print(what + ":", "refused", exc.strerror)
"""


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="the probe runs the system's python3")
def test_a_step_socket_serves_its_own_attempt_only(cluster: Cluster):
    """A job's processes speak to their agent through their attempt's socket: another tenant's socket is
    not theirs to open, and another attempt's of the same user refuses them (its cgroup is not theirs).
    The probe speaks srun's protocol from the system's python3 (this machine's Horizon lives under /root,
    which a job's user cannot run: docs/tenants.md says where to install it)."""
    victim = "g-victim-1" if cluster.globex.job("g-victim-1").get("state") == "RUNNING" else _victim(cluster)
    theirs = cluster.plan(cluster.globex, victim)["env"]["HORIZON_STEP_SOCKET"]
    first = cluster.acme.submit("--job-id", "a-first", "--", "sleep", "120")
    cluster.acme.wait(first, ("RUNNING",))
    own_other = cluster.plan(cluster.acme, first)["env"]["HORIZON_STEP_SOCKET"]
    probe = cluster.acme.work / "probe.py"
    probe.write_text(PROBE)
    os.chown(probe, cluster.acme.uid, -1)
    job_id = cluster.acme.submit("--", "sh", "-c", f'/usr/bin/python3 {probe} {theirs} {own_other} "$HORIZON_STEP_SOCKET"')
    assert cluster.acme.wait(job_id)["state"] == "SUCCEEDED", cluster.acme.logs(job_id, "--err")
    said = dict(line.split(": ", 1) for line in cluster.acme.logs(job_id).splitlines())
    assert said["globex"] == "refused Permission denied", said
    assert said["other attempt"].startswith("this socket is another job's: process "), said
    assert said["own"].startswith("served"), said
    shown = cluster.globex.horizon("show", victim)
    assert "JobStepStarted" not in shown.stdout  # globex's job lists no step it never ran
    cluster.acme.horizon("cancel", first)


ENV_REPORT = """#!/bin/sh
#SBATCH -o env-report.out
echo "FOO=$FOO TOOL=$(only-here) HOME=$HOME USER=$USER LOGNAME=$LOGNAME SHELL=$SHELL uid=$(id -u)"
echo "credentials in env: $(env | grep -c '://[^/ ]*@')"
env -0 > env-report.env
"""


def test_sbatch_gives_the_job_its_submitters_environment_and_its_users_identity(cluster: Cluster):
    """issue 34: the job gets the environment of the shell that ran sbatch (FOO=bar, a PATH with a
    program only that shell has), nothing of the agent's own; HOME, USER, LOGNAME and SHELL are those
    of the Unix user it runs as (the shell's were root's); the tenant's password in the shell's
    HORIZON_NATS_URL stays out of the log and the job."""
    alice = cluster.acme
    tools = alice.work / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "only-here").write_text("#!/bin/sh\necho found\n")
    (tools / "only-here").chmod(0o755)
    (alice.work / "env.sh").write_text(ENV_REPORT)
    shell = {"PATH": f"{tools}:/usr/bin:/bin", "FOO": "bar", "HOME": "/root", "USER": "root", "LOGNAME": "root",
             "SHELL": "/bin/bash", "LANG": "C.UTF-8", "HORIZON_NATS_URL": alice.url}
    done = subprocess.run([*HORIZON, "sbatch", "--job-id", "env-sb", "env.sh"], cwd=alice.work, env=shell,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert alice.wait("env-sb")["state"] == "SUCCEEDED"
    who = pwd.getpwnam(alice.unix)
    lines = (alice.work / "env-report.out").read_text().splitlines()
    assert lines == [f"FOO=bar TOOL=found HOME={who.pw_dir} USER={alice.unix} LOGNAME={alice.unix} "
                     f"SHELL={who.pw_shell} uid={alice.uid}", "credentials in env: 0"], lines
    job_env = dict(entry.split("=", 1) for entry in
                   (alice.work / "env-report.env").read_text().split("\0") if "=" in entry)
    # nothing of the agent's (horizon up's, the test session's environment) but the node's locale and
    # terminal where the shell gave none: the shell's, the job's own, the user's identity, what sh sets
    others = {k for k in job_env if k not in shell and not k.startswith(("SLURM", "HORIZON_", "LC_"))
              and k not in ("HOME", "USER", "LOGNAME", "SHELL", "CUDA_VISIBLE_DEVICES", "PWD", "SHLVL", "OLDPWD", "_",
                            "TERM", "TZ", "LANGUAGE")}
    assert others == set(), others
    assert alice.url.split("@")[0].split(":")[-1] not in json.dumps(cluster.plan(alice, "env-sb"))  # the password


def test_check_and_audit_pass_after_the_attacks(cluster: Cluster):
    admin = clean_env(HORIZON_NATS_URL=cluster.up.admin_url)
    for command in (("check",), ("audit",)):
        done = horizon(*command, env=admin)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_tenants_container_job_runs_as_its_user(cluster: Cluster, image: str):
    """A tenant's --image job (its folder once held the job key's ':', which Podman splits volumes at):
    it runs as the user's uid inside the container, and writes its own folder."""
    job_id = cluster.acme.submit("--image", image, "--", "sh", "-c", 'id -u; echo ref > "$HORIZON_CHECKPOINT_FILE"; echo wrote')
    row = cluster.acme.wait(job_id, timeout_s=120)
    assert row["state"] == "SUCCEEDED", (row, cluster.acme.logs(job_id, "--err"))
    assert cluster.acme.logs(job_id).split() == [str(cluster.acme.uid), "wrote"]
    assert (cluster.files(cluster.acme, job_id) / "checkpoint").stat().st_uid == cluster.acme.uid
