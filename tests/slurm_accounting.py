"""A real Slurm accounting database for tests: MariaDB, ``slurmdbd`` and a ``slurmctld`` (which
registers the cluster and its ``gres/gpu`` TRES with slurmdbd), all in one temporary folder, on
free loopback ports, started and stopped by PID. ``sacctmgr`` with ``SLURM_CONF`` set to
``conf`` then manages accounts and QOS as on a real site. With ``slurmd``, this host is also the
cluster's one node (2 CPUs, 2 GiB), so that jobs run and Slurm records their account and QOS.

Debian packages: ``slurm-wlm`` (slurmctld, sacctmgr), ``slurmdbd`` and ``mariadb-server``
(``.ci/run`` installs them). Measured here: the whole thing is up in about 6 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NEEDED = ("mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "slurmctld", "sacctmgr", "slurmd")


def missing() -> list[str]:
    return [tool for tool in NEEDED if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Accounting:
    folder: Path
    conf: Path
    cluster: str
    procs: list[subprocess.Popen] = field(default_factory=list)  # type: ignore[type-arg]

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def sacctmgr(self, *args: str) -> str:
        done = subprocess.run([_tool("sacctmgr"), "-i", *args], env=self.env(), capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, f"sacctmgr {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout


def _wait(what: str, ok, log: Path, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.1)
    text = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise AssertionError(f"{what} did not come up in {timeout_s:g} s:\n{text}")


def _stop(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def accounting(folder: Path, cluster: str = "hz", slurmd: bool = False) -> Iterator[Accounting]:
    folder.mkdir(parents=True, exist_ok=True)
    db, db_port, dbd_port = folder / "db", free_port(), free_port()
    ctld_port, slurmd_port = free_port(), free_port()
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    acc = Accounting(folder, conf, cluster)
    try:
        subprocess.run([_tool("mariadb-install-db"), "--no-defaults", f"--datadir={db}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, timeout=120)
        sock = folder / "mysql.sock"
        with open(folder / "mariadb.log", "wb") as log:
            acc.procs.append(subprocess.Popen(
                [_tool("mariadbd"), "--no-defaults", f"--datadir={db}", "--user=root", f"--port={db_port}",
                 "--bind-address=127.0.0.1", f"--socket={sock}", f"--pid-file={folder / 'mysql.pid'}",
                 "--skip-log-bin", "--innodb-buffer-pool-size=32M"], stdout=log, stderr=subprocess.STDOUT))

        def db_up() -> bool:
            return subprocess.run([_tool("mariadb"), "--no-defaults", "-S", str(sock), "-u", "root", "-e",
                                   "select 1"], capture_output=True).returncode == 0

        _wait("MariaDB", db_up, folder / "mariadb.log")
        subprocess.run([_tool("mariadb"), "--no-defaults", "-S", str(sock), "-u", "root", "-e",
                        "create user 'slurm'@'127.0.0.1' identified by 'slurm-test'; "
                        "grant all on slurm_acct_db.* to 'slurm'@'127.0.0.1';"], check=True, timeout=30)
        dbd_conf = folder / "slurmdbd.conf"
        dbd_conf.write_text("\n".join([
            "AuthType=auth/none", "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}",
            "SlurmUser=root", f"LogFile={folder / 'slurmdbd.log'}", f"PidFile={folder / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=slurm", "StoragePass=slurm-test", "StorageLoc=slurm_acct_db", ""]))
        dbd_conf.chmod(0o600)
        (folder / "state").mkdir(exist_ok=True)
        conf.write_text("\n".join([
            f"ClusterName={cluster}", f"SlurmctldHost={host}", "AuthType=auth/none", "CredType=cred/none",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={dbd_port}", "AccountingStorageTRES=gres/gpu", "GresTypes=gpu",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}", f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={folder / 'spool'}", f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SelectType=select/cons_tres",
            *([f"SlurmdPidFile={folder / 'slurmd.pid'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
               "SlurmdParameters=config_overrides", "SelectTypeParameters=CR_Core_Memory", "ReturnToService=2",
               "SchedulerParameters=sched_interval=1", f"NodeName={host} CPUs=2 RealMemory=2048 State=UNKNOWN"]
              if slurmd else [f"NodeName={host} CPUs=2 State=UNKNOWN"]),
            "PartitionName=main Nodes=ALL Default=YES", ""]))
        env = acc.env()
        with open(folder / "slurmdbd.out", "wb") as log:
            acc.procs.append(subprocess.Popen([_tool("slurmdbd"), "-D"], env=env, stdout=log,
                                              stderr=subprocess.STDOUT))

        def dbd_up() -> bool:
            return subprocess.run([_tool("sacctmgr"), "-P", "show", "tres"], env=env,
                                  capture_output=True).returncode == 0

        _wait("slurmdbd", dbd_up, folder / "slurmdbd.log")
        acc.sacctmgr("add", "cluster", cluster)
        with open(folder / "slurmctld.out", "wb") as log:
            acc.procs.append(subprocess.Popen([_tool("slurmctld"), "-D", "-i", "-f", str(conf)], env=env,
                                              stdout=log, stderr=subprocess.STDOUT))

        def gpu_tres() -> bool:  # slurmctld registered the cluster and its TRES
            out = subprocess.run([_tool("sacctmgr"), "-P", "-n", "show", "tres", "format=Type,Name"], env=env,
                                 capture_output=True, text=True).stdout
            return "gres|gpu" in out

        _wait("slurmctld's registration with slurmdbd", gpu_tres, folder / "slurmctld.log")
        if slurmd:
            with open(folder / "slurmd.out", "wb") as log:
                acc.procs.append(subprocess.Popen([_tool("slurmd"), "-D", "-f", str(conf)], env=env, stdout=log,
                                                  stderr=subprocess.STDOUT, start_new_session=True))

            def idle() -> bool:
                out = subprocess.run(["/usr/bin/sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
                return out.stdout.strip() == "idle"

            _wait("slurmd", idle, folder / "slurmd.log")
        yield acc
    finally:
        for proc in reversed(acc.procs):
            _stop(proc)
