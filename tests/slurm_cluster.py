"""A real Slurm cluster in a temporary folder, for the Slurm backend's tests (docs/backends.md).

``SlurmCluster(folder, nodes=[...])`` writes a ``slurm.conf`` (this host as the controller, each node
a ``slurmd`` of its own on this host with ``-N name`` and a port of its own, ``select/cons_tres``,
``proctrack/linuxproc``, ``task/none``, ``auth/none`` + ``cred/none``, accounting off, every state and
spool file in the folder; with ``completion``, a job completion record, ``jobcomp/filetxt``, and
``min_job_age``: how long the controller keeps an ended job) and a ``gres.conf`` (GPUs as plain files: Slurm 22.05 counts them and
complains they are no devices, which is harmless here), starts ``slurmctld -D -i`` and the
``slurmd -D``, waits until every node is IDLE, and stops them all by PID (SIGTERM, then SIGKILL).
Slurm's commands run with ``env`` (``SLURM_CONF``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SlurmCluster", "SlurmNode", "slurm_installed"]

BIN = "/usr/bin"


def slurm_installed() -> bool:
    return all(os.path.exists(p) for p in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", f"{BIN}/sbatch"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int = 4
    memory_mib: int = 4096
    gpus: int = 2
    features: tuple[str, ...] = ()


class SlurmCluster:
    def __init__(self, folder: Path, nodes: list[SlurmNode], partition: str = "batch",
                 others: tuple[str, ...] = (), completion: bool = False, min_job_age: int = 600) -> None:
        self.folder = folder
        self.nodes = nodes
        self.partition = partition
        self.others = others  # more partitions over the same nodes (not the default one)
        self.completion = completion
        self.min_job_age = min_job_age
        self.host = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM")}, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started_s = 0.0  # from starting the daemons to every node IDLE

    def write(self) -> None:
        f = self.folder
        for sub in ("state", "dev", *(f"spool/{n.name}" for n in self.nodes)):
            (f / sub).mkdir(parents=True, exist_ok=True)
        user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
        lines = [
            "ClusterName=horizontest", f"SlurmctldHost={self.host}", f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}", "AuthType=auth/none", "CredType=cred/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "GresTypes=gpu", "MpiDefault=none",
            "SlurmdParameters=config_overrides", f"StateSaveLocation={f}/state", f"SlurmdSpoolDir={f}/spool/%n",
            f"SlurmctldPidFile={f}/slurmctld.pid", f"SlurmdPidFile={f}/slurmd-%n.pid",
            f"SlurmctldLogFile={f}/slurmctld.log", f"SlurmdLogFile={f}/slurmd-%n.log",
            f"SlurmUser={user}", f"SlurmdUser={user}", "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            *(["JobCompType=jobcomp/filetxt", f"JobCompLoc={f}/jobcomp.txt"] if self.completion
              else ["JobCompType=jobcomp/none"]),
            "ReturnToService=2", "KillWait=2", f"MinJobAge={self.min_job_age}", "InactiveLimit=0", "SchedulerParameters=sched_interval=1",
        ]
        gres = ["AutoDetect=off"]
        for n in self.nodes:
            features = f" Feature={','.join(n.features)}" if n.features else ""
            lines.append(f"NodeName={n.name} NodeHostname={self.host} Port={_free_port()} CPUs={n.cpus} "
                         f"RealMemory={n.memory_mib}{f' Gres=gpu:{n.gpus}' if n.gpus else ''}{features} State=UNKNOWN")
            if n.gpus:
                for i in range(n.gpus):
                    (f / "dev" / f"{n.name}-gpu{i}").touch()
                gres.append(f"NodeName={n.name} Name=gpu File={f}/dev/{n.name}-gpu[0-{n.gpus - 1}]")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(n.name for n in self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        for other in self.others:
            lines.append(f"PartitionName={other} Nodes={','.join(n.name for n in self.nodes)} MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (f / "gres.conf").write_text("\n".join(gres) + "\n")

    def start(self, timeout_s: float = 30.0) -> None:
        self.write()
        t0 = time.monotonic()
        self._spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        for n in self.nodes:
            self._spawn(["/usr/sbin/slurmd", "-D", "-N", n.name, "-f", str(self.conf)], f"slurmd-{n.name}.out")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                self.started_s = time.monotonic() - t0
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm cluster did not come up: {out!r}\n{self.logs()}")

    def _spawn(self, argv: list[str], out: str) -> subprocess.Popen[bytes]:
        with open(self.folder / out, "ab") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=self.env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def restart_controller(self) -> None:
        """Stop slurmctld (SIGTERM, by its PID) and start it again on its saved state, as an operator's
        ``systemctl restart slurmctld``; returns once it answers."""
        ctld = self.procs[0]
        ctld.send_signal(signal.SIGTERM)
        ctld.wait(timeout=30)
        self.procs.remove(ctld)
        self._spawn(["/usr/sbin/slurmctld", "-D", "-f", str(self.conf)], "slurmctld.out")
        self.procs.insert(0, self.procs.pop())  # the controller first: stop() ends it last
        deadline = time.monotonic() + 30
        while self.run("sinfo", "-h", check=False) == "" and time.monotonic() < deadline:
            time.sleep(0.1)

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run([f"{BIN}/{argv[0]}", *argv[1:]], capture_output=True, text=True, env=self.env,
                              timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"{argv} failed: {done.stderr}")
        return done.stdout

    def logs(self) -> str:
        out = []
        for p in sorted(self.folder.glob("*.log")):
            out.append(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Every daemon by its PID: SIGTERM, then SIGKILL; then whatever job steps they left (their
        own sessions' process groups are gone with them: slurmstepd runs in the slurmd's session)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
