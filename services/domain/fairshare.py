"""Accounts, decayed usage and the Fair Tree fair-share factor. Pure.

The tree
--------
Accounts form a tree under an implicit ``root``: ``AccountConfigured(account,
parent, shares)`` places an account (organisation, project, ...) under its
parent. Every job is charged to its **association**, the leaf
``<account>/<user>`` (``<account>/-`` for a job without a user), created
with 1 share the first time a job of that user is seen; an account that no
event configured is created under the root with 1 share when its first job
arrives. Names are tokens without ``/``, so a leaf never collides with an
account.

Usage: decayed resource-time
----------------------------
A running job consumes at its **billing rate** ``r`` (per second):

* weighted (default): ``r = w_gpu*gpus + w_cpu*cores + w_mem*GiB``;
* dominant (``FairShareConfigured.dominant_share``): ``r = max(w_gpu*gpus,
  w_cpu*cores, w_mem*GiB)`` (Slurm's ``MAX_TRES`` billing).

Usage decays exponentially with half-life ``H`` (default 7 days):
``lambda = ln 2 / H``. Every node of the tree holds ``U`` (its usage at time
``t0``) and ``R`` (the summed rate of the jobs running under it). Between two
events ``R`` is constant, so the usage is exactly

    dU/dt = R - lambda*U   =>   U(t) = U(t0)*e^(-lambda*(t-t0)) + R*(1 - e^(-lambda*(t-t0)))/lambda

A node is advanced to "now" only when its rate changes (a job under it
starts or ends: an event of the log), and read at any "now" by the same
formula without being changed, so a replay advances at exactly the same
instants and gets bit-identical floats. Worked through in
``tests/domain/test_fairshare.py``: 8 GPUs for one half-life H leave
``8*(1-1/2)*H/ln2 = 5.771*H`` GPU-seconds of usage, half of which is gone
after another H.

The factor: Fair Tree
---------------------
As Slurm's Fair Tree algorithm. Among siblings (children of one parent):

    S = shares / sum(sibling shares)        U = usage / sum(sibling usage)
    LF = S / U    (infinite when U = 0: a sibling that has used nothing comes first)

Leaves are ranked depth first, siblings visited in descending ``LF``: a
leaf's sort key is its path of ``-LF`` from the root, compared
lexicographically, so an under-served branch ranks all its users above an
over-served branch, whatever the users' own standings. With ``n`` leaves,
the leaf at rank ``k`` (0 first) gets factor ``(n - k)/n``: 1 for the most
under-served, ``1/n`` for the most over-served. Leaves with equal keys tie
and share the higher factor. Siblings with equal ``LF`` are ordered by name
only for display; their factors are equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from events import catalogue as c
from services.domain.hetjob import component_specs

__all__ = ["Account", "FairShare", "ROOT", "association", "decayed"]

ROOT = "root"
GIB = float(1 << 30)


def association(spec: c.JobSpec) -> str:
    """The leaf a job is charged to."""
    return f"{spec.account}/{spec.user or '-'}"


def decayed(usage: float, rate: float, dt: float, lam: float) -> float:
    """Usage ``dt`` seconds after holding ``usage`` while consuming ``rate``, with decay ``lam``."""
    if dt <= 0:
        return usage
    keep = math.exp(-lam * dt)
    return usage * keep + rate * (1.0 - keep) / lam


@dataclass(slots=True)
class Account:
    name: str
    parent: str | None  # None only for the root
    shares: float = 1.0
    quota: c.Quota = field(default_factory=c.Quota)
    borrowing: bool = False
    priority_boost: float = 0.0
    configured: bool = False  # set by an AccountConfigured (else created implicitly)
    leaf: bool = False  # a user association
    children: list[str] = field(default_factory=list)  # in creation order
    usage: float = 0.0  # at usage_ts
    usage_ts: float = 0.0
    rate: float = 0.0
    running: int = 0  # jobs charging this node now


@dataclass(slots=True)
class FairShare:
    """The tree, the decay settings and the usage ledger."""

    half_life_s: float = 7 * 86400.0
    gpu_weight: float = 1.0
    cpu_weight: float = 0.0625  # per core: a core bills 1/16 of a GPU
    memory_weight: float = 0.0  # per GiB
    dominant_share: bool = False
    accounts: dict[str, Account] = field(default_factory=lambda: {ROOT: Account(ROOT, None, configured=True)})
    # node -> its path up to the root (derived; dropped whenever an account is configured)
    _paths: dict[str, tuple[Account, ...]] = field(default_factory=dict, repr=False)

    @property
    def lam(self) -> float:
        return math.log(2.0) / self.half_life_s

    # ------------------------------------------------------------------ configuration

    def check_account(self, ev: c.AccountConfigured) -> str | None:
        """Why this configuration cannot be applied, or None."""
        name = ev.account
        if not name or "/" in name or name == ROOT:
            return f"account: {name!r} is not a usable account name"
        if not (ev.shares > 0 and math.isfinite(ev.shares)):
            return f"shares: {ev.shares!r} must be a positive number"
        if not math.isfinite(ev.priority_boost):
            return f"priority_boost: {ev.priority_boost!r} must be a number"
        q = ev.quota
        for label in ("gpus", "cpus_milli", "memory_bytes", "running_jobs"):
            value = getattr(q, label)
            if value is not None and value < 0:
                return f"quota.{label}: {value} must be 0 or more"
        if any(v < 0 for v in q.gpus_by_type.values()):
            return "quota.gpus_by_type: limits must be 0 or more"
        parent = ev.parent or ROOT
        if parent != ROOT and (parent not in self.accounts or self.accounts[parent].leaf):
            return f"parent: account {parent!r} is not configured; configure it first"
        node: str | None = parent
        while node is not None:  # the new parent may not be the account itself or below it
            if node == name:
                return f"parent: {parent!r} is {name!r} or below it; accounts form a tree"
            node = self.accounts[node].parent
        return None

    def configure_account(self, ev: c.AccountConfigured, now: float) -> None:
        """Apply a checked ``AccountConfigured`` (``check_account`` returned None)."""
        parent = ev.parent or ROOT
        self._paths.clear()
        acc = self.accounts.get(ev.account)
        if acc is None:
            acc = self._create(ev.account, parent, leaf=False, now=now)
        elif acc.parent != parent:
            self._move(acc, parent, now)
        acc.shares = ev.shares
        acc.quota = ev.quota
        acc.borrowing = ev.borrowing
        acc.priority_boost = ev.priority_boost
        acc.configured = True

    def check_settings(self, ev: c.FairShareConfigured) -> str | None:
        if not (ev.half_life_s > 0 and math.isfinite(ev.half_life_s)):
            return f"half_life_s: {ev.half_life_s!r} must be a positive number of seconds"
        for label in ("gpu_weight", "cpu_weight", "memory_weight"):
            value = getattr(ev, label)
            if not (value >= 0 and math.isfinite(value)):
                return f"{label}: {value!r} must be 0 or more"
        if ev.gpu_weight == ev.cpu_weight == ev.memory_weight == 0:
            return "weights: at least one of gpu_weight, cpu_weight, memory_weight must be more than 0"
        return None

    def configure(self, ev: c.FairShareConfigured, now: float) -> None:
        """New decay and weights: usage so far is kept (advanced with the old half-life to now);
        the rates of running jobs stay as billed at their start."""
        for acc in self.accounts.values():
            self._advance(acc, now)
        self.half_life_s = ev.half_life_s
        self.gpu_weight, self.cpu_weight, self.memory_weight = ev.gpu_weight, ev.cpu_weight, ev.memory_weight
        self.dominant_share = ev.dominant_share

    # ------------------------------------------------------------------ charging

    def rate_of(self, spec: c.JobSpec) -> float:
        """The billing rate of the job's resources; a heterogeneous job's, of all its components together."""
        if spec.components:
            shapes = component_specs(spec)
            gpus = sum(s.total_gpus for s in shapes)
            cpus = sum(s.cpus_milli * s.nodes * s.tasks_per_node for s in shapes)
            memory = sum(s.memory_bytes * s.nodes * s.tasks_per_node for s in shapes)
            parts = (self.gpu_weight * gpus, self.cpu_weight * cpus / 1000.0, self.memory_weight * memory / GIB)
            return max(parts) if self.dominant_share else sum(parts)
        tasks = spec.nodes * spec.tasks_per_node
        parts = (self.gpu_weight * spec.total_gpus, self.cpu_weight * spec.cpus_milli * tasks / 1000.0,
                 self.memory_weight * spec.memory_bytes * tasks / GIB)
        return max(parts) if self.dominant_share else sum(parts)

    def leaf_for(self, spec: c.JobSpec, now: float) -> Account:
        """The job's association, created (with its account) on first sight."""
        key = association(spec)
        acc = self.accounts.get(key)
        if acc is None:
            if spec.account not in self.accounts:
                self._create(spec.account, ROOT, leaf=False, now=now)
            acc = self._create(key, spec.account, leaf=True, now=now)
        return acc

    def path(self, name: str) -> tuple[Account, ...]:
        """From the node up to (excluding) the root."""
        found = self._paths.get(name)
        if found is not None:
            return found
        out = []
        acc = self.accounts[name]
        while acc.parent is not None:
            out.append(acc)
            acc = self.accounts[acc.parent]
        self._paths[name] = path = tuple(out)
        return path

    def start(self, leaf: str, rate: float, now: float) -> None:
        for acc in self.path(leaf):
            self._advance(acc, now)
            acc.rate += rate
            acc.running += 1

    def stop(self, leaf: str, rate: float, now: float) -> None:
        for acc in self.path(leaf):
            self._advance(acc, now)
            acc.running -= 1
            acc.rate = acc.rate - rate if acc.running > 0 else 0.0  # no float dust once idle

    def usage_at(self, acc: Account, now: float) -> float:
        return decayed(acc.usage, acc.rate, now - acc.usage_ts, self.lam)

    # ------------------------------------------------------------------ Fair Tree

    def level_fairshare(self, now: float) -> dict[str, float]:
        """``LF = S/U`` of every node but the root, among its siblings (``inf`` for no usage)."""
        out: dict[str, float] = {}
        for parent in self.accounts.values():
            kids = [self.accounts[k] for k in parent.children]
            if not kids:
                continue
            total_shares = sum(k.shares for k in kids)
            usage = [self.usage_at(k, now) for k in kids]
            total_usage = sum(usage)
            for kid, u in zip(kids, usage, strict=True):
                if u <= 0.0 or total_usage <= 0.0:
                    out[kid.name] = math.inf
                else:
                    out[kid.name] = (kid.shares / total_shares) / (u / total_usage)
        return out

    def factors(self, now: float) -> dict[str, float]:
        """The fair-share factor of every leaf (association), in (0, 1]."""
        lf = self.level_fairshare(now)
        keys: list[tuple[tuple[float, ...], str]] = []
        for name, acc in self.accounts.items():
            if acc.leaf:
                path = self.path(name)
                keys.append((tuple(-lf[a.name] for a in reversed(path)), name))
        keys.sort()
        n = len(keys)
        out: dict[str, float] = {}
        rank = 0
        for i, (key, name) in enumerate(keys):
            if i == 0 or key != keys[i - 1][0]:
                rank = i
            out[name] = (n - rank) / n
        return out

    def report(self, now: float) -> list[dict[str, object]]:
        """One row per node, depth first (as ``sshare``): shares, usage and standing."""
        lf = self.level_fairshare(now)
        fs = self.factors(now)
        rows: list[dict[str, object]] = []

        def walk(name: str, depth: int) -> None:
            acc = self.accounts[name]
            siblings = self.accounts[acc.parent].children if acc.parent else [name]
            total_shares = sum(self.accounts[s].shares for s in siblings)
            total_usage = sum(self.usage_at(self.accounts[s], now) for s in siblings)
            usage = self.usage_at(acc, now)
            account, _, user = name.partition("/") if acc.leaf else (name, "", "")
            rows.append({
                "account": account, "user": user if acc.leaf else "", "depth": depth, "parent": acc.parent,
                "raw_shares": acc.shares, "norm_shares": acc.shares / total_shares if total_shares else 0.0,
                "raw_usage": usage, "norm_usage": usage / total_usage if total_usage else 0.0,
                "level_fs": None if math.isinf(lf[name]) else lf[name], "fairshare": fs.get(name), "running": acc.running,
                "quota": _quota_dict(acc.quota), "borrowing": acc.borrowing,
            })
            for kid in sorted(acc.children, key=lambda k: (-lf[k], k)):
                walk(kid, depth + 1)

        for top in sorted(self.accounts[ROOT].children, key=lambda k: (-lf[k], k)):
            walk(top, 0)
        return rows

    # ------------------------------------------------------------------ internals

    def _create(self, name: str, parent: str, *, leaf: bool, now: float) -> Account:
        acc = Account(name, parent, leaf=leaf, usage_ts=now)
        self.accounts[name] = acc
        self.accounts[parent].children.append(name)
        return acc

    def _move(self, acc: Account, parent: str, now: float) -> None:
        """Re-parent an account: its usage and running jobs move with it."""
        old = self.path(acc.parent) if acc.parent and acc.parent != ROOT else ()
        new = self.path(parent) if parent != ROOT else ()
        usage, rate, running = self.usage_at(acc, now), acc.rate, acc.running
        for node in old:
            self._advance(node, now)
            node.usage = max(0.0, node.usage - usage)
            node.running -= running
            node.rate = node.rate - rate if node.running > 0 else 0.0
        for node in new:
            self._advance(node, now)
            node.usage += usage
            node.rate += rate
            node.running += running
        self.accounts[acc.parent].children.remove(acc.name)  # type: ignore[index]
        self.accounts[parent].children.append(acc.name)
        acc.parent = parent

    def _advance(self, acc: Account, now: float) -> None:
        if now > acc.usage_ts:
            acc.usage = decayed(acc.usage, acc.rate, now - acc.usage_ts, self.lam)
            acc.usage_ts = now


def _quota_dict(q: c.Quota) -> dict[str, object]:
    out: dict[str, object] = {k: getattr(q, k) for k in ("gpus", "cpus_milli", "memory_bytes", "running_jobs")
                              if getattr(q, k) is not None}
    if q.gpus_by_type:
        out["gpus_by_type"] = dict(sorted(q.gpus_by_type.items()))
    if q.sources:
        out["sources"] = dict(sorted(q.sources.items()))
    return out
