"""Quotas and borrowing: which jobs their accounts' limits let start. Pure.

A ``Quota`` on an account limits what the jobs under it (its own, its users'
and its sub-accounts') hold at once: GPUs, CPUs, memory, running jobs, and
GPUs per requested type (``gpus_by_type``: a job that names a GPU type counts
against that type's limit, and, with a variant, against ``type-variant``'s
too; a job that names no type counts against ``gpus`` only). ``None`` is
unlimited. A job is charged from the ``JobScheduled`` of an attempt until
the attempt ends, to every account on its path.

The scheduler admits a candidate only if, counting the jobs already holding
resources and the candidates ahead of it in the same cycle, no account on
its path would go over a limit. Placement places a subset of the candidates,
so what is actually held never exceeds what was admitted.

**Borrowing** (Kueue's cohorts): an account with ``borrowing`` on may go over
its GPU, CPU and memory limits (never ``running_jobs``) on the unused quota
of its **idle** siblings, those with no job waiting. For each exceeded
resource, the excess of all the siblings together after admission must fit
in what the idle siblings leave unused:

    sum over siblings c of max(0, used_c - quota_c)  <=  sum over idle siblings s of max(0, quota_s - used_s)

(a sibling without a limit on that resource neither lends nor owes any). A
job admitted so is marked ``borrowed``: when the lender wants its quota back,
those are the jobs reclaim preempts. A lender that has jobs waiting lends
nothing, so no new borrowing starts while it waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import catalogue as c
from events.resources import format_cpus, format_memory
from services.domain.fairshare import ROOT, Account, FairShare
from services.domain.hetjob import component_specs

__all__ = ["Amount", "Quotas", "amount_of", "describe_quota", "limited_account", "slurm_code", "OK", "BORROW", "BLOCKED"]

OK, BORROW, BLOCKED = "ok", "borrow", "blocked"
_DIMS = ("gpus", "cpus_milli", "memory_bytes")


@dataclass(slots=True)
class Amount:
    gpus: int = 0
    cpus_milli: int = 0
    memory_bytes: int = 0
    running_jobs: int = 0
    gpus_by_type: dict[str, int] = field(default_factory=dict)

    def add(self, other: Amount, sign: int = 1) -> None:
        self.gpus += sign * other.gpus
        self.cpus_milli += sign * other.cpus_milli
        self.memory_bytes += sign * other.memory_bytes
        self.running_jobs += sign * other.running_jobs
        for key, n in other.gpus_by_type.items():
            left = self.gpus_by_type.get(key, 0) + sign * n
            if left:
                self.gpus_by_type[key] = left
            else:
                self.gpus_by_type.pop(key, None)

    def get(self, dim: str) -> int:
        if dim.startswith("type:"):
            return self.gpus_by_type.get(dim[5:], 0)
        return int(getattr(self, dim))


def amount_of(spec: c.JobSpec) -> Amount:
    """What the job holds while it runs (a heterogeneous job: all its components, one running job)."""
    if spec.components:
        total = Amount(running_jobs=1)
        for shape in component_specs(spec):
            one = amount_of(shape)
            one.running_jobs = 0
            total.add(one)
        return total
    tasks = spec.nodes * spec.tasks_per_node
    gpus = spec.total_gpus  # a node's tasks may share its GPUs (gpus_per_node)
    by_type: dict[str, int] = {}
    if gpus and spec.gpu_type:
        by_type[spec.gpu_type] = gpus
        if spec.gpu_variant:
            by_type[f"{spec.gpu_type}-{spec.gpu_variant}"] = gpus
    return Amount(gpus, spec.cpus_milli * tasks, spec.memory_bytes * tasks, 1, by_type)


def limited_account(fs: FairShare, account: str) -> bool:
    """Whether a job charged to ``account`` counts against a limit: it, or an account above it, is
    configured with a quota (an account no event created yet has none)."""
    acc = fs.accounts.get(account)
    while acc is not None and acc.parent is not None:
        if acc.configured and _dims(acc.quota):
            return True
        acc = fs.accounts.get(acc.parent)
    return False


def _limit(quota: c.Quota, dim: str) -> int | None:
    if dim.startswith("type:"):
        return quota.gpus_by_type.get(dim[5:])
    return getattr(quota, dim)  # type: ignore[no-any-return]


def _dims(quota: c.Quota) -> list[str]:
    dims = [d for d in (*_DIMS, "running_jobs") if getattr(quota, d) is not None]
    return dims + [f"type:{t}" for t in sorted(quota.gpus_by_type)]


def _unit(dim: str, value: int) -> str:
    if dim == "cpus_milli":
        return f"{format_cpus(value)} CPUs"
    if dim == "memory_bytes":
        return f"{format_memory(value)} memory"
    if dim == "running_jobs":
        return f"{value} running jobs"
    if dim.startswith("type:"):
        return f"{value} {dim[5:]} GPUs"
    return f"{value} GPUs"


_SLURM_LIMITS = {"gpus": "GRES", "cpus_milli": "CpuLimit", "memory_bytes": "MemLimit", "running_jobs": "JobsLimit"}


def slurm_code(dim: str, source: str) -> str:
    """Slurm's reason code (squeue's REASON) for a job held back by the limit on ``dim``: an
    association's group limit (``AssocGrpCpuLimit``, ``AssocGrpMemLimit``, ``AssocGrpGRES`` for GPUs of
    any or one type, ``AssocGrpJobsLimit`` for running jobs), or a QOS's (``QOSGrp...``) when the limit
    came from a Slurm QOS (its ``Quota.sources`` entry, as the Slurm quota provider writes it)."""
    kind = "GRES" if dim.startswith("type:") else _SLURM_LIMITS.get(dim, "CpuLimit")
    return f"{'QOS' if source.startswith('Slurm QOS') else 'Assoc'}Grp{kind}"


def describe_quota(quota: c.Quota) -> str:
    """``2 GPUs (Slurm QOS gpuq GrpTRES), 5 running jobs``: each limit, with where it comes from."""
    parts = []
    for dim in _dims(quota):
        source = quota.sources.get(dim)
        text = _unit(dim, _limit(quota, dim) or 0)
        parts.append(f"{text} ({source})" if source else text)
    return ", ".join(parts) or "no limits"


class Quotas:
    """What every account holds now, and the admission check of one cycle."""

    def __init__(self) -> None:
        self.in_use: dict[str, Amount] = {}  # account (not leaf) -> held by jobs under it
        self.waiting: dict[str, int] = {}  # account -> pending jobs under it

    @staticmethod
    def _accounts(fs: FairShare, leaf: str) -> tuple[Account, ...]:
        path = fs.path(leaf)
        return path[1:] if path and path[0].leaf else path

    def charge(self, fs: FairShare, leaf: str, amount: Amount, sign: int) -> None:
        for acc in self._accounts(fs, leaf):
            self.in_use.setdefault(acc.name, Amount()).add(amount, sign)

    def wait(self, fs: FairShare, leaf: str, sign: int) -> None:
        for acc in self._accounts(fs, leaf):
            self.waiting[acc.name] = self.waiting.get(acc.name, 0) + sign

    def limited(self, fs: FairShare) -> bool:
        """Whether any account has a limit (else the check can be skipped)."""
        return any(_dims(a.quota) for a in fs.accounts.values() if a.configured and not a.leaf)

    def charges(self, fs: FairShare, leaf: str) -> bool:
        """Whether a job of ``leaf`` counts against any limit (an account on its path has one)."""
        return any(_dims(acc.quota) for acc in self._accounts(fs, leaf) if acc.configured)

    def copy(self) -> Quotas:
        """An independent copy (what is held and waiting), to charge hypothetical jobs on."""
        out = Quotas()
        out.in_use = {name: Amount(a.gpus, a.cpus_milli, a.memory_bytes, a.running_jobs, dict(a.gpus_by_type))
                      for name, a in self.in_use.items()}
        out.waiting = dict(self.waiting)
        return out

    def admit(self, fs: FairShare, leaf: str, x: Amount, cycle: dict[str, Amount]) -> tuple[str, str]:
        """(OK | BORROW | BLOCKED, why) for a job of ``leaf`` needing ``x``, given ``cycle``: what the
        candidates admitted earlier in this cycle hold under each account."""
        verdict, why, _code = self.judge(fs, leaf, x, cycle)
        return verdict, why

    def judge(self, fs: FairShare, leaf: str, x: Amount, cycle: dict[str, Amount]) -> tuple[str, str, str]:
        """``admit``'s (verdict, why) and, for BLOCKED, Slurm's reason code of the limit it names
        (``slurm_code``: ``AssocGrpGRES``, ``QOSGrpJobsLimit``, ...; "" otherwise)."""
        verdict = OK
        for acc in self._accounts(fs, leaf):
            over = [d for d in _dims(acc.quota) if self._used(acc.name, d, cycle) + x.get(d) > _limit(acc.quota, d)]  # type: ignore[operator]
            if not over:
                continue
            first = over[0]
            held = self._used(acc.name, first, cycle)
            source = acc.quota.sources.get(first)
            why = (f"account {acc.name} quota{f' ({source})' if source else ''}: {_unit(first, held)} in use + "
                   f"{_unit(first, x.get(first))} > limit {_unit(first, _limit(acc.quota, first) or 0)}")
            code = slurm_code(first, source or "")
            if "running_jobs" in over or not acc.borrowing:
                return BLOCKED, why, code
            short = self._cannot_borrow(fs, acc, x, over, cycle)
            if short:
                return BLOCKED, f"{why}; {short}", code
            verdict = BORROW
        return verdict, "", ""

    def _used(self, account: str, dim: str, cycle: dict[str, Amount]) -> int:
        held = self.in_use.get(account)
        extra = cycle.get(account)
        return (held.get(dim) if held else 0) + (extra.get(dim) if extra else 0)

    def _cannot_borrow(self, fs: FairShare, acc: Account, x: Amount, over: list[str],
                       cycle: dict[str, Amount]) -> str:
        siblings = [fs.accounts[s] for s in fs.accounts[acc.parent or ROOT].children]
        siblings = [s for s in siblings if not s.leaf]
        for dim in over:
            excess = lendable = 0
            for sib in siblings:
                limit = _limit(sib.quota, dim)
                if limit is None:
                    continue
                used = self._used(sib.name, dim, cycle) + (x.get(dim) if sib is acc else 0)
                excess += max(0, used - limit)
                if sib is not acc and not self.waiting.get(sib.name, 0):
                    lendable += max(0, limit - used)
            if excess > lendable:
                return f"idle sibling accounts lend only {_unit(dim, lendable)}, borrowing needs {_unit(dim, excess)}"
        return ""

    @staticmethod
    def add_cycle(fs: FairShare, leaf: str, x: Amount, cycle: dict[str, Amount]) -> None:
        for acc in Quotas._accounts(fs, leaf):
            cycle.setdefault(acc.name, Amount()).add(x)
