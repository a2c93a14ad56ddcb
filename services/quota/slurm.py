"""Slurm as a quota provider: its accounts, their association limits and their QOS limits, as
Horizon accounts. Pure: text from ``sacctmgr -P`` in, ``AccountConfigured`` events out.

What maps (docs/backends.md, "Quota providers"):

* every account association of the cluster (a row with no user; ``root`` is Horizon's root)
  becomes a Horizon account: its parent and its ``Share`` (``fairshare=``) as shares;
* its limits on what runs at once, from the association's ``GrpTRES`` and ``GrpJobs`` and from
  the same two limits of the QOS its jobs run in (its default QOS; its only QOS when it has no
  default): ``cpu`` -> CPUs, ``mem`` -> memory, ``gres/gpu`` -> GPUs, ``gres/gpu:TYPE`` -> GPUs of
  that type, ``GrpJobs`` -> running jobs. Where both set a limit, the smaller holds, and each limit
  remembers where it came from (``Quota.sources``), which the reason of a held-back job names.

What does not map, and is reported: per-user and per-job limits (``MaxTRES``, ``MaxJobs``,
``MaxTRESPerUser``...), time-based ones (``GrpTRESMins``, ``GrpWall``), TRES Horizon does not
schedule (``node``, ``billing``, licenses, other GRES). A QOS with group limits that several
unrelated accounts use limits all their jobs together in Slurm; here each account gets the limit
on its own, which is looser, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import catalogue as c
from services.quota import accounts
from services.quota.accounts import Limits, Planned, Provider, Wanted

__all__ = ["SlurmAccount", "SlurmQos", "SlurmLimits", "parse_table", "read_limits", "desired", "plan",
           "Planned", "Wanted", "TresError", "PROVIDER", "SLURM"]

PROVIDER = "slurm-quota"  # the ``source`` of the events this provider publishes
SLURM = Provider(PROVIDER, "Slurm")
ROOT = "root"
_MEMORY_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


class TresError(ValueError):
    """A TRES string sacctmgr should not have printed."""


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of ``sacctmgr show ... -P`` (a header line, then ``|``-separated values)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    rows = []
    for line in lines[1:]:
        values = line.split("|")
        rows.append(dict(zip(header, values + [""] * (len(header) - len(values)))))
    return rows


def _tres(text: str) -> dict[str, str]:
    """``cpu=8,gres/gpu=2,mem=64G`` -> {"cpu": "8", "gres/gpu": "2", "mem": "64G"}."""
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise TresError(f"{part!r} is not NAME=VALUE")
        out[name] = value
    return out


def _count(value: str, what: str) -> int | None:
    value = value.strip()
    if value in ("", "-1"):
        return None  # unset, or cleared with -1
    try:
        n = int(value)
    except ValueError:
        raise TresError(f"{what}: {value!r} is not a whole number") from None
    if n < 0:
        raise TresError(f"{what}: {value!r} is negative")
    return n


def _memory(value: str) -> int | None:
    """Slurm memory: a number of MiB, or with a K/M/G/T/P suffix (powers of 1024)."""
    value = value.strip()
    if value in ("", "-1"):
        return None
    unit = _MEMORY_UNITS["M"]
    if value[-1:].upper() in _MEMORY_UNITS:
        unit, value = _MEMORY_UNITS[value[-1].upper()], value[:-1]
    try:
        return int(float(value) * unit)
    except ValueError:
        raise TresError(f"mem: {value!r} is not an amount of memory") from None


@dataclass(frozen=True, slots=True)
class SlurmQos:
    name: str
    grp_tres: dict[str, str] = field(default_factory=dict)
    grp_jobs: int | None = None


@dataclass(frozen=True, slots=True)
class SlurmAccount:
    name: str
    parent: str  # "root" for a top-level account
    shares: float
    grp_tres: dict[str, str] = field(default_factory=dict)
    grp_jobs: int | None = None
    qos: tuple[str, ...] = ()
    default_qos: str = ""

    @property
    def job_qos(self) -> str:
        """The QOS this account's jobs run in unless they ask for another."""
        return self.default_qos or (self.qos[0] if len(self.qos) == 1 else "")


@dataclass(frozen=True, slots=True)
class SlurmLimits:
    cluster: str
    accounts: tuple[SlurmAccount, ...]  # parents before children
    qos: dict[str, SlurmQos]


def _shares(value: str) -> float:
    value = value.strip()
    if value.lower() == "parent" or not value:
        return 1.0  # fairshare=parent: the account competes as its parent; Horizon has no such share
    try:
        shares = float(value)
    except ValueError:
        raise TresError(f"Share: {value!r} is not a number") from None
    return shares if shares > 0 else 1.0


def read_limits(cluster: str, assoc_rows: list[dict[str, str]], qos_rows: list[dict[str, str]]) -> SlurmLimits:
    """The accounts of ``cluster`` (parents first) and every QOS, from ``sacctmgr -P`` rows."""
    qos = {}
    for row in qos_rows:
        name = row.get("Name", "")
        if name:
            qos[name] = SlurmQos(name, _tres(row.get("GrpTRES", "")), _count(row.get("GrpJobs", ""), f"QOS {name} GrpJobs"))
    found: dict[str, SlurmAccount] = {}
    for row in assoc_rows:
        if row.get("Cluster", cluster) != cluster or row.get("User", ""):
            continue
        name = row.get("Account", "")
        if not name or name == ROOT:
            continue
        listed = tuple(q for q in row.get("QOS", "").split(",") if q)
        found[name] = SlurmAccount(
            name, row.get("ParentName", "") or ROOT, _shares(row.get("Share", "")),
            _tres(row.get("GrpTRES", "")), _count(row.get("GrpJobs", ""), f"account {name} GrpJobs"),
            listed, row.get("Def QOS", row.get("DefaultQOS", "")))
    ordered: list[SlurmAccount] = []
    placed: set[str] = {ROOT}
    pending = sorted(found)  # by name, so the order is the same however sacctmgr sorts
    while pending:
        ready = [n for n in pending if found[n].parent in placed or found[n].parent not in found]
        if not ready:  # a cycle cannot come out of sacctmgr; break it rather than loop
            ready = pending[:1]
        for name in ready:
            ordered.append(found[name])
            placed.add(name)
        pending = [n for n in pending if n not in placed]
    return SlurmLimits(cluster, tuple(ordered), qos)


def _add_tres(lim: Limits, tres: dict[str, str], grp_jobs: int | None, source: str) -> None:
    """A ``GrpTRES`` and a ``GrpJobs`` (of an association or a QOS) into ``lim``."""
    for name, value in sorted(tres.items()):
        if name == "cpu":
            n = _count(value, f"{source} cpu")
            lim.take("cpus_milli", None if n is None else n * 1000, f"{source} GrpTRES")
        elif name == "mem":
            lim.take("memory_bytes", _memory(value), f"{source} GrpTRES")
        elif name == "gres/gpu":
            lim.take("gpus", _count(value, f"{source} gres/gpu"), f"{source} GrpTRES")
        elif name.startswith("gres/gpu:"):
            lim.take(f"type:{name[9:]}", _count(value, f"{source} {name}"), f"{source} GrpTRES")
        elif value not in ("", "-1"):
            lim.notes.append(f"{source} GrpTRES {name}={value}: Horizon does not schedule {name}; not mapped")
    lim.take("running_jobs", grp_jobs, f"{source} GrpJobs")


def desired(limits: SlurmLimits) -> tuple[list[Wanted], list[str]]:
    """Every account as Slurm has it, parents first, and the notes on what did not map."""
    notes: list[str] = []
    qos_users: dict[str, list[str]] = {}
    out = []
    for acc in limits.accounts:
        lim = Limits()
        _add_tres(lim, acc.grp_tres, acc.grp_jobs, f"Slurm association {limits.cluster}/{acc.name}")
        job_qos = acc.job_qos
        if job_qos:
            qos = limits.qos.get(job_qos)
            if qos is None:
                notes.append(f"account {acc.name}: its QOS {job_qos!r} is not in sacctmgr's QOS list; not mapped")
            elif qos.grp_tres or qos.grp_jobs is not None:
                _add_tres(lim, qos.grp_tres, qos.grp_jobs, f"Slurm QOS {job_qos}")
                qos_users.setdefault(job_qos, []).append(acc.name)
        elif len(acc.qos) > 1:
            notes.append(f"account {acc.name}: several QOS ({','.join(acc.qos)}) and no default QOS; no QOS limit "
                         f"applied")
        notes.extend(f"account {acc.name}: {note}" for note in lim.notes)
        out.append(Wanted(acc.name, None if acc.parent == ROOT else acc.parent, acc.shares, lim.quota()))
    parents = {w.account: w.parent for w in out}
    for qos_name, users in sorted(qos_users.items()):
        # accounts under another user of the same QOS are limited together already, by that ancestor
        tops = [a for a in users if not _below_any(a, set(users) - {a}, parents)]
        if len(tops) > 1:
            notes.append(f"QOS {qos_name}'s group limits apply to each of {', '.join(sorted(tops))} on its own "
                         f"(in Slurm, to all their jobs together)")
    return out, notes


def _below_any(account: str, others: set[str], parents: dict[str, str | None]) -> bool:
    node = parents.get(account)
    while node is not None:
        if node in others:
            return True
        node = parents.get(node)
    return False


def plan(wanted: list[Wanted], current: dict[str, tuple[int, c.AccountConfigured]], now: float,
         user: str = "") -> list[Planned]:
    """The configurations that make Horizon's accounts match Slurm's (services/quota/accounts.py, ``plan``):
    Slurm has a tree, so its parents and shares are taken too."""
    return accounts.plan(SLURM, wanted, current, now, user)
