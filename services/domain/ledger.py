"""Fair share as of the ledger: usage published as events, folded into the factors. Pure.

A scheduling leader of some partitions (docs/scaling.md) folds only its own partitions' jobs, so it
cannot charge every job of the cluster itself. Instead each leader is the **owner** of its
partitions' usage: it charges its own jobs exactly as ``FairShare`` does (``OwnUsage``, per
association: decayed usage ``U`` at a time ``t`` and the summed billing rate ``R`` of its jobs
running under it), and publishes, on a cadence of log time, a ``UsageCharged`` entry: for every
association whose figures changed since its previous entry (a job of it started, ended, was
resized, or was first seen), ``(U, R)`` as of the entry's ``as_of_ts``. Associations that did not
change need no row: their trajectory is still the one the previous row gave.

Every leader (the owner too) folds every owner's entries into one ``FairShare`` tree
(``UsageLedger.tree``) whose factors order its queue. Usage decays linearly
(``dU/dt = R - lambda*U``), so the cluster's usage of an association is the sum of the owners'
trajectories, and a row moves the tree by the difference between the owner's new trajectory and
its previous one, evaluated at the node's own time ``tn = max(T, t_node)``:

    dU = decayed(U, R, tn - T) - decayed(U0, R0, tn - t0)        dR = R - R0

applied to the association and every account above it. Folding the entries thus gives, at any
time after them, exactly what the owners' own figures give when each owner's jobs keep running as
they did at its last entry ("as of the ledger"): a job that started or ended since is counted from
its owner's next entry. An association no entry named yet has factor 1 (it has used nothing the
ledger knows), as a newcomer has in the exact tree. Worked through in ``tests/domain/test_ledger.py``.

The tree's accounts and settings mirror the configuration (``AccountConfigured``,
``FairShareConfigured``) the scheduling fold applied, so shares, boosts and decay are the same as
the exact tree's; only the usage comes from the entries. Decisions stay deterministic: the entries
are events in the log, and ``horizon audit`` replays them as the owner's decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgspec

from events import catalogue as c
from services.domain.fairshare import ROOT, Account, FairShare, decayed

__all__ = ["OwnUsage", "UsageLedger", "DEFAULT_EVERY_S"]

DEFAULT_EVERY_S = 60.0  # a leader's entries at most this often, in seconds of log time


@dataclass(slots=True)
class _Own:
    usage: float = 0.0  # at ts
    rate: float = 0.0
    ts: float = 0.0
    running: int = 0


@dataclass
class OwnUsage:
    """The owner's side: its own jobs' usage per association, exactly as ``FairShare`` charges a leaf,
    and which associations changed since its last entry (association -> seq of the change)."""

    leaves: dict[str, _Own] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    entries: int = 0  # the owner's entries folded so far (the next is entries + 1)
    last_ts: float = -math.inf  # as_of_ts of its last entry

    def touch(self, leaf: str, now: float, seq: int) -> None:
        """An association first seen (a job of it waits): named in the next entry, with no usage."""
        if leaf not in self.leaves:
            self.leaves[leaf] = _Own(ts=now)
            self.changed[leaf] = seq

    def start(self, leaf: str, rate: float, now: float, seq: int, lam: float) -> None:
        own = self._at(leaf, now, lam)
        own.rate += rate
        own.running += 1
        self.changed[leaf] = seq

    def stop(self, leaf: str, rate: float, now: float, seq: int, lam: float) -> None:
        own = self._at(leaf, now, lam)
        own.running -= 1
        own.rate = own.rate - rate if own.running > 0 else 0.0  # no float dust once idle
        self.changed[leaf] = seq

    def advance_all(self, now: float, lam: float) -> None:
        """Bring every association to ``now`` (before the half-life changes)."""
        for leaf in self.leaves:
            self._at(leaf, now, lam)

    def due(self, now: float, every_s: float) -> bool:
        return bool(self.changed) and now - self.last_ts >= every_s

    def rows(self, now: float, lam: float) -> list[c.UsageRow]:
        """The changed associations' figures as of ``now``, by name."""
        out = []
        for leaf in sorted(self.changed):
            own = self.leaves[leaf]
            out.append(c.UsageRow(association=leaf, usage=decayed(own.usage, own.rate, now - own.ts, lam),
                                  rate=own.rate))
        return out

    def published(self, entry: c.UsageCharged) -> None:
        """Its own entry came back through the log: what changed up to the entry's basis is in it."""
        self.entries = max(self.entries, entry.entry)
        self.last_ts = max(self.last_ts, entry.as_of_ts)
        named = {row.association for row in entry.rows}
        for leaf in [k for k, seq in self.changed.items() if seq <= entry.basis_seq and k in named]:
            del self.changed[leaf]

    def _at(self, leaf: str, now: float, lam: float) -> _Own:
        own = self.leaves.get(leaf)
        if own is None:
            own = self.leaves[leaf] = _Own(ts=now)
        elif now > own.ts:
            own.usage = decayed(own.usage, own.rate, now - own.ts, lam)
            own.ts = now
        return own


@dataclass
class UsageLedger:
    """Every owner's entries, folded into a tree whose factors are "fair share as of the ledger"."""

    tree: FairShare = field(default_factory=FairShare)
    last: dict[tuple[str, str], tuple[float, float, float]] = field(default_factory=dict)  # (owner, leaf) -> U, R, T

    def configure_account(self, ev: c.AccountConfigured, now: float) -> None:
        """Mirror an ``AccountConfigured`` the scheduling fold applied (its check passed there). A parent
        the fold created implicitly (a job's account) and no entry named yet is created here alike."""
        parent = ev.parent or ROOT
        if parent not in self.tree.accounts:
            self.tree._create(parent, ROOT, leaf=False, now=now)
        self.tree.configure_account(ev, now)

    def configure(self, ev: c.FairShareConfigured, now: float) -> None:
        self.tree.configure(ev, now)

    def touch(self, association: str, now: float) -> None:
        """An association one of this leader's jobs waits under: in the tree at once, with no usage (as the
        exact tree creates it), so the factors rank it among the others before any entry names it."""
        self._leaf(association, now)

    def apply(self, owner: str, entry: c.UsageCharged) -> None:
        """Fold one owner's entry: each row replaces the owner's previous trajectory of its association."""
        tree, when = self.tree, entry.as_of_ts
        lam = tree.lam
        for row in entry.rows:
            key = (owner, row.association)
            u0, r0, t0 = self.last.get(key, (0.0, 0.0, when))
            d_rate = row.rate - r0
            d_running = int(row.rate > 0) - int(r0 > 0)
            for node in tree.path(self._leaf(row.association, when)):
                tn = max(when, node.usage_ts)
                if tn > node.usage_ts:
                    node.usage = decayed(node.usage, node.rate, tn - node.usage_ts, lam)
                    node.usage_ts = tn
                d_usage = decayed(row.usage, row.rate, tn - when, lam) - decayed(u0, r0, tn - t0, lam)
                node.usage = max(0.0, node.usage + d_usage)
                node.running += d_running  # rows with a rate under the node: none left means no rate
                node.rate = max(0.0, node.rate + d_rate) if node.running > 0 else 0.0
            self.last[key] = (row.usage, row.rate, when)

    def _leaf(self, association: str, now: float) -> str:
        tree = self.tree
        if association not in tree.accounts:
            account = association.partition("/")[0]
            if account not in tree.accounts:
                tree._create(account, ROOT, leaf=False, now=now)
            tree._create(association, account, leaf=True, now=now)
        return association

    # ------------------------------------------------------------------ snapshots

    def dump(self) -> dict[str, object]:
        fs = self.tree
        return {"settings": [fs.half_life_s, fs.gpu_weight, fs.cpu_weight, fs.memory_weight, fs.dominant_share],
                "accounts": list(fs.accounts.values()),
                "last": [[o, a, *v] for (o, a), v in sorted(self.last.items())]}

    @classmethod
    def load(cls, data: dict[str, object]) -> UsageLedger:
        out = cls()
        fs = out.tree
        half, gpu, cpu, mem, dominant = data["settings"]  # type: ignore[misc]
        fs.half_life_s, fs.gpu_weight, fs.cpu_weight, fs.memory_weight = half, gpu, cpu, mem
        fs.dominant_share = bool(dominant)
        accounts = msgspec.convert(data["accounts"], list[Account])
        fs.accounts = {a.name: a for a in accounts}
        out.last = {(o, a): (u, r, t) for o, a, u, r, t in data["last"]}  # type: ignore[attr-defined]
        return out


def dump_own(own: OwnUsage) -> dict[str, object]:
    return {"leaves": [[k, v.usage, v.rate, v.ts, v.running] for k, v in sorted(own.leaves.items())],
            "changed": sorted(own.changed.items()), "entries": own.entries,
            "last_ts": None if math.isinf(own.last_ts) else own.last_ts}


def load_own(data: dict[str, object]) -> OwnUsage:
    own = OwnUsage()
    own.leaves = {k: _Own(u, r, t, n) for k, u, r, t, n in data["leaves"]}  # type: ignore[attr-defined]
    own.changed = {k: s for k, s in data["changed"]}  # type: ignore[attr-defined]
    own.entries = int(data["entries"])  # type: ignore[call-overload]
    last = data["last_ts"]
    own.last_ts = -math.inf if last is None else float(last)  # type: ignore[arg-type]
    return own
