"""The environment as ``sbatch`` exports it, and the ``SBATCH_*`` variables it reads as options. Pure.

What a job starts from (``JobSubmitted.submit_env``), as Slurm's ``--export`` says:

* ``ALL`` (the default): the submitting shell's whole environment (``captured``: less what Horizon
  does not copy, below); ``ALL,VAR=value`` adds ``VAR`` where the shell has none (the shell's own
  value wins, as Slurm's manual says);
* ``NONE`` (``NIL`` alike): only the shell's ``SLURM_*`` variables. Slurm then loads the user's login
  environment on the node (``--get-user-env``); Horizon runs no login shell: the job starts from the
  node's ``PATH`` and locale and the running user's ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL``
  (``services/nodes/backends/process/identity.py``), as every job that carries a submitting environment;
* ``VAR1,VAR2=value``: those (``VAR1`` as the shell has it, whatever ``captured`` would leave: it was
  asked for) and the shell's ``SLURM_*``; with ``--export-file``, the file's variables too (Slurm's);
* ``--export-file=FILE`` (or a descriptor number from 3 on): ``NAME=value`` entries separated by NUL
  characters (``env -0``) take the place of the shell's environment; with ``NONE`` nothing of them.

Not copied from the shell (``captured``): ``SLURM_JWT`` (Slurm drops it too: a credential); the
variables that describe the job the shell runs in, when ``sbatch`` runs inside one (``SLURM_JOB_ID``,
``SLURM_PROCID``, ``CUDA_VISIBLE_DEVICES`` is the node's to set ...: ``JOB_VARIABLES``; Slurm copies
them and overwrites those it sets again, leaving the others stale); ``HOME``, ``USER``, ``LOGNAME``,
``SHELL`` (the running user's, from the node's passwd, unless named in ``--export``); every ``HORIZON_*``
variable but the client's own settings without a secret (``KEPT_HORIZON``: a ``HORIZON_NATS_URL``
carrying a password is not copied).

``environment_options``: the ``SBATCH_*`` (and ``SLURM_HINT``, ``SLURM_CLUSTERS``) variables of the
submitting environment, read as the options they stand for. They override the script's ``#SBATCH``
lines and the command line overrides them (Slurm's order). A flag's variable sets it when empty,
``yes`` or a non-zero number, and unsets it otherwise; a value's variable that is empty is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from services.front.slurm.sbatch_options import NONE, OPTIONS, OPTIONAL, Directive

__all__ = ["INPUT_VARIABLES", "JOB_VARIABLES", "KEPT_HORIZON", "environment_options", "captured",
           "read_export_file", "submitted_environment"]

# Slurm's sbatch reads these as options (its manual's INPUT ENVIRONMENT VARIABLES; the options Horizon's
# table does not know, such as --segment, are left out).
INPUT_VARIABLES: dict[str, str] = {
    "SBATCH_ACCOUNT": "account", "SBATCH_ARRAY_INX": "array", "SBATCH_ACCTG_FREQ": "acctg-freq",
    "SBATCH_BATCH": "batch", "SBATCH_BURST_BUFFER": "bb", "SBATCH_CLUSTER_CONSTRAINT": "cluster-constraint",
    "SBATCH_CLUSTERS": "clusters", "SLURM_CLUSTERS": "clusters", "SBATCH_CONTAINER": "container",
    "SBATCH_CONTAINER_ID": "container-id", "SBATCH_CONSTRAINT": "constraint", "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_CPU_FREQ_REQ": "cpu-freq", "SBATCH_CPUS_PER_GPU": "cpus-per-gpu", "SBATCH_DEBUG": "verbose",
    "SBATCH_DELAY_BOOT": "delay-boot", "SBATCH_DISTRIBUTION": "distribution", "SBATCH_ERROR": "error",
    "SBATCH_EXCLUSIVE": "exclusive", "SBATCH_EXPORT": "export", "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_GPU_BIND": "gpu-bind", "SBATCH_GPU_FREQ": "gpu-freq", "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node", "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task", "SBATCH_GRES": "gres", "SBATCH_GRES_FLAGS": "gres-flags",
    "SLURM_HINT": "hint", "SBATCH_HINT": "hint", "SBATCH_IGNORE_PBS": "ignore-pbs", "SBATCH_INPUT": "input",
    "SBATCH_JOB_NAME": "job-name", "SBATCH_MEM_BIND": "mem-bind", "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu", "SBATCH_MEM_PER_NODE": "mem", "SBATCH_NETWORK": "network",
    "SBATCH_NO_KILL": "no-kill", "SBATCH_NO_REQUEUE": "no-requeue", "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OUTPUT": "output", "SBATCH_OVERCOMMIT": "overcommit", "SBATCH_PARTITION": "partition",
    "SBATCH_POWER": "power", "SBATCH_PROFILE": "profile", "SBATCH_QOS": "qos", "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue", "SBATCH_RESERVATION": "reservation", "SBATCH_SIGNAL": "signal",
    "SBATCH_SPREAD_JOB": "spread-job", "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_THREADS_PER_CORE": "threads-per-core", "SBATCH_TIMELIMIT": "time",
    "SBATCH_TRES_PER_TASK": "tres-per-task", "SBATCH_USE_MIN_NODES": "use-min-nodes", "SBATCH_WAIT": "wait",
    "SBATCH_WAIT_ALL_NODES": "wait-all-nodes", "SBATCH_WCKEY": "wckey",
}

# The variables that describe a job, a step or a task (what Slurm, or Horizon's agent and sbatch, set in
# one): from a shell inside a job they would describe that job, not the new one.
JOB_VARIABLES = frozenset({
    "SLURM_JOBID", "SLURM_NODELIST", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
    "SLURM_NTASKS_PER_CORE", "SLURM_NTASKS_PER_GPU", "SLURM_NTASKS_PER_SOCKET", "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_ON_NODE", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_PER_GPU", "SLURM_GPUS", "SLURM_GPUS_ON_NODE",
    "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_SOCKET", "SLURM_GPUS_PER_TASK", "SLURM_SHARDS_ON_NODE",
    "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID",
    "SLURM_NODEID", "SLURM_GTIDS", "SLURM_TASK_PID", "SLURM_STEPID", "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST", "SLURM_RESTART_COUNT", "SLURM_PRIO_PROCESS", "SLURM_UMASK", "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_TRES_PER_TASK", "SLURM_THREADS_PER_CORE", "SLURM_DIST_PLANESIZE", "SLURM_OVERCOMMIT",
    "SLURM_CONTAINER", "SLURM_CONTAINER_ID", "SLURM_OOMKILLSTEP", "SLURMD_NODENAME", "SLURM_JWT",
    "CUDA_VISIBLE_DEVICES",
})
_JOB_PREFIXES = ("SLURM_JOB_", "SLURM_ARRAY_", "SLURM_STEP_", "SLURM_HET_", "SLURM_TOPOLOGY_ADDR",
                 "SLURM_SRUN_COMM_", "SLURM_CPU_BIND_", "SLURM_MEM_BIND_")
_IDENTITY = ("HOME", "USER", "LOGNAME", "SHELL")  # the running user's, set on the node
# The Horizon client's settings a job may use to submit jobs itself (its URL only without a password).
KEPT_HORIZON = ("HORIZON_NATS_URL", "HORIZON_TENANT", "HORIZON_ACCOUNT", "HORIZON_TLS_CA", "HORIZON_TLS_CERT",
                "HORIZON_TLS_KEY")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _copied(name: str, value: str) -> bool:
    if name in JOB_VARIABLES or name.startswith(_JOB_PREFIXES) or name in _IDENTITY:
        return False
    if name.startswith("HORIZON_"):
        # a NATS URL with a user or password: the tenant's credential stays out of the log
        return name in KEPT_HORIZON and not (name == "HORIZON_NATS_URL" and any(
            "@" in part.split("://", 1)[-1] for part in value.split(",")))
    return True


def captured(environ: Mapping[str, str]) -> dict[str, str]:
    """What a job copies of the submitting environment (see the module doc for what it leaves)."""
    return {k: v for k, v in environ.items() if _copied(k, v)}


def read_export_file(data: bytes, where: str) -> dict[str, str]:
    """``--export-file``'s content: ``NAME=value`` entries separated by NUL (``env -0``), read as Slurm
    reads them (up to the first empty entry; ``DISPLAY``, ``ENVIRONMENT`` and ``HOSTNAME`` left out).
    Raises ``ValueError`` naming the problem: a file of lines and no NUL would be one variable in Slurm."""
    if b"\0" not in data and data.strip().count(b"\n") > 0:
        raise ValueError(f"{where}: separate the variables with NUL characters (env -0 > FILE), not new lines, "
                         "as Slurm reads them")
    out: dict[str, str] = {}
    for entry in data.split(b"\0"):
        if not entry:
            break
        name, eq, value = entry.decode(errors="surrogateescape").partition("=")
        if eq and name and name not in ("DISPLAY", "ENVIRONMENT", "HOSTNAME"):
            out[name] = value
    return out


def environment_options(environ: Mapping[str, str]) -> tuple[list[Directive], set[str]]:
    """The options the ``SBATCH_*`` variables of ``environ`` give (``where`` ``environment``, given as the
    variable's name), and the flags a variable unsets (``SBATCH_NO_REQUEUE=no``), in Slurm's order."""
    given: list[Directive] = []
    unset: set[str] = set()
    for var, option in INPUT_VARIABLES.items():
        value = environ.get(var)
        if value is None:
            continue
        kind = OPTIONS[option].arg
        if kind == NONE:
            if value == "" or value.lower() == "yes" or re.fullmatch(r"[+-]?0*[1-9][0-9]*", value):
                given.append(Directive(option, None, "environment", var))
            else:
                unset.add(option)
        elif kind == OPTIONAL:
            given.append(Directive(option, value or None, "environment", var))
        elif value != "":
            given.append(Directive(option, value, "environment", var))
    return given, unset


def submitted_environment(export: Sequence[tuple[str, str | None]] | None, environ: Mapping[str, str],
                          file: Mapping[str, str] | None) -> dict[str, str]:
    """What the job starts from (``JobSubmitted.submit_env``) for ``--export`` (``export_list``'s reading;
    None: not given, ALL), the submitting environment ``environ`` and an ``--export-file``'s variables
    (None: none given), as the module doc says. A variable named in ``--export`` is taken as the
    caller has it, whatever ``captured`` would leave out: it was asked for."""
    caller = dict(file) if file is not None else dict(environ)
    if export is None or (export and export[0][0] == "ALL"):
        env = captured(caller)
        for var, value in (export or [])[1:]:
            if var in caller:  # with ALL the caller's own value wins (Slurm's manual)
                env[var] = caller[var]
            elif value is not None:
                env[var] = value
        return env
    # NONE or a list: the SLURM_* the caller has (from a file: none, Slurm having cleared its own)
    env = {} if file is not None else {k: v for k, v in captured(environ).items() if k.startswith("SLURM")}
    if not export:
        return env
    env.update(captured(file or {}))  # a list with a file: the file's variables too (Slurm keeps them)
    for var, value in export:
        if value is not None:
            env[var] = value
        elif var in caller:
            env[var] = caller[var]
    return env
