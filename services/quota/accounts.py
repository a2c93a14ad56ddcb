"""What a quota provider wants of Horizon's accounts, and the configurations that make the log match.
Pure: shared by the providers (services/quota/slurm.py, services/quota/kubernetes.py).

A provider reads its system into ``Wanted`` accounts, each limit gathered with ``Limits`` (where two
places set the same limit the smaller holds, and remembers where it came from: ``Quota.sources``,
which the reason of a held-back job names). ``plan`` compares them with every account's last
``AccountConfigured`` in the log and says which configurations to publish, with ids that make a
retried sync a duplicate the log drops.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import msgspec

from events import catalogue as c

__all__ = ["Provider", "Limits", "Wanted", "Planned", "plan"]


@dataclass(frozen=True, slots=True)
class Provider:
    """Who publishes: the ``source`` of its events, its system's name in a change's words, and whether
    that system has an account tree (parents and shares) of its own. One without keeps Horizon's."""

    source: str  # "slurm-quota"
    system: str  # "Slurm"
    owns_tree: bool = True


@dataclass(slots=True)
class Limits:
    """One account's limits as read from several places: per dimension the smallest, and its source."""

    values: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def take(self, dim: str, value: int | None, source: str) -> None:
        if value is None:
            return
        if dim not in self.values or value < self.values[dim]:
            self.values[dim], self.sources[dim] = value, source

    def quota(self) -> c.Quota:
        v = self.values
        by_type = {dim[5:]: n for dim, n in sorted(v.items()) if dim.startswith("type:")}
        return c.Quota(gpus=v.get("gpus"), cpus_milli=v.get("cpus_milli"), memory_bytes=v.get("memory_bytes"),
                       running_jobs=v.get("running_jobs"), gpus_by_type=by_type, sources=dict(sorted(self.sources.items())))


@dataclass(frozen=True, slots=True)
class Wanted:
    """One account as its provider has it: where it sits, its shares and its quota."""

    account: str
    parent: str | None
    shares: float
    quota: c.Quota


@dataclass(frozen=True, slots=True)
class Planned:
    """An account configuration to publish, the ``Nats-Msg-Id`` that makes a retry a duplicate, and why."""

    event: c.AccountConfigured
    msg_id: str
    change: str


def _digest(w: Wanted) -> str:
    """A stable digest of an account as wanted (the quota's canonical JSON: its dicts are built sorted)."""
    text = f"{w.account}|{w.parent}|{w.shares!r}|".encode() + msgspec.json.encode(w.quota)
    return hashlib.sha256(text).hexdigest()[:16]


def _configured(provider: Provider, w: Wanted, keep: c.AccountConfigured | None, now: float,
                user: str) -> c.AccountConfigured:
    """``w`` as an account configuration, with what the provider has no notion of kept from ``keep``."""
    keep = keep or c.AccountConfigured(ts=now, account=w.account)
    return c.AccountConfigured(
        ts=now, source=provider.source, correlation_id=w.account, account=w.account, parent=w.parent,
        shares=w.shares, quota=w.quota, borrowing=keep.borrowing, priority_boost=keep.priority_boost, user=user,
        max_priority_class=keep.max_priority_class, tenants=list(keep.tenants))


def plan(provider: Provider, wanted: list[Wanted], current: dict[str, tuple[int, c.AccountConfigured]],
         now: float, user: str = "") -> list[Planned]:
    """The configurations that make Horizon's accounts match ``wanted``.

    ``current``: account -> (log seq, its last ``AccountConfigured``). What the provider has no notion
    of (tenants, borrowing, priority boost, class limit; parent and shares unless it ``owns_tree``)
    is kept as Horizon has it. An account this provider configured before that its system no longer
    has keeps its place and loses the provider's limits. Ids name the provider, the account, the
    content and the configuration they follow, so the same sync done twice publishes once, and a
    later change back to an old value is still published.
    """
    out: list[Planned] = []
    names = set()
    for w in wanted:
        names.add(w.account)
        seq, now_cfg = current.get(w.account, (0, None))
        if now_cfg is not None and not provider.owns_tree:
            w = Wanted(w.account, now_cfg.parent, now_cfg.shares, w.quota)
        if now_cfg is not None and (now_cfg.parent, now_cfg.shares, now_cfg.quota) == (w.parent, w.shares, w.quota):
            continue
        change = "new" if now_cfg is None else _what_changed(now_cfg, w)
        out.append(Planned(_configured(provider, w, now_cfg, now, user),
                           f"account/{provider.source}/{w.account}/{_digest(w)}/after-{seq}", change))
    for name in sorted(set(current) - names):
        seq, now_cfg = current[name]
        if now_cfg.source != provider.source or not now_cfg.quota.sources:
            continue
        gone = Wanted(name, now_cfg.parent, now_cfg.shares, c.Quota())
        out.append(Planned(_configured(provider, gone, now_cfg, now, user),
                           f"account/{provider.source}/{name}/{_digest(gone)}/after-{seq}",
                           f"no longer in {provider.system}: its {provider.system} limits are removed"))
    return out


def _what_changed(now_cfg: c.AccountConfigured, w: Wanted) -> str:
    parts = []
    if now_cfg.parent != w.parent:
        parts.append(f"parent {now_cfg.parent or 'root'} -> {w.parent or 'root'}")
    if now_cfg.shares != w.shares:
        parts.append(f"shares {now_cfg.shares:g} -> {w.shares:g}")
    if now_cfg.quota != w.quota:
        parts.append("quota")
    return ", ".join(parts)
