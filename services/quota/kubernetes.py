"""Kubernetes ResourceQuota as a quota provider: each namespace's quotas as a Horizon account. Pure:
the API server's ResourceQuota objects (as JSON) in, ``AccountConfigured`` events out.

What maps (docs/backends.md, "Quota providers"):

* a namespace with a ResourceQuota becomes the Horizon account of the same name (a job charges it
  with ``--account NAMESPACE``). Kubernetes has no account tree: a new account sits under the root
  with one share, and where Horizon has it already its parent and shares stay as Horizon has them;
* of each quota's ``spec.hard`` (what the operator set; what is in use is Horizon's own count):
  ``requests.cpu`` (and ``cpu``, the same) -> CPUs, ``requests.memory`` (and ``memory``) -> memory,
  ``requests.nvidia.com/gpu`` -> GPUs, ``pods`` (and ``count/pods``) -> running jobs. Horizon's pods
  request what they are limited to, so ``limits.cpu``, ``limits.memory`` limit them the same way and
  map too. Where several keys or several quotas of a namespace set a limit, the smallest holds (as
  Kubernetes, which checks each), and each limit remembers its quota and key (``Quota.sources``:
  ``Kubernetes ResourceQuota team-a/compute requests.cpu``), which the reason of a held-back job names.

What does not map, and is reported: keys Horizon does not schedule (storage, object counts other
than pods, other extended resources, hugepages), and quotas with ``scopes`` or a ``scopeSelector``
(they hold for some pods only; on the whole namespace they would be stricter than Kubernetes).
``pods`` counts pods, Horizon's limit counts jobs: a job of N nodes is N pods in Kubernetes and one
running job here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import catalogue as c
from services.quota import accounts
from services.quota.accounts import Limits, Planned, Provider, Wanted
from services.runtime.kubeapi import quantity

__all__ = ["PROVIDER", "KUBERNETES", "QuantityError", "desired", "plan"]

PROVIDER = "kubernetes-quota"  # the ``source`` of the events this provider publishes
KUBERNETES = Provider(PROVIDER, "Kubernetes", owns_tree=False)

# spec.hard key -> (Horizon's quota dimension, how many of its units one of the key's makes)
_KEYS: dict[str, tuple[str, int]] = {
    "requests.cpu": ("cpus_milli", 1000), "cpu": ("cpus_milli", 1000), "limits.cpu": ("cpus_milli", 1000),
    "requests.memory": ("memory_bytes", 1), "memory": ("memory_bytes", 1), "limits.memory": ("memory_bytes", 1),
    "requests.nvidia.com/gpu": ("gpus", 1),
    "pods": ("running_jobs", 1), "count/pods": ("running_jobs", 1),
}


class QuantityError(ValueError):
    """A ``spec.hard`` value that is no Kubernetes quantity (the API server does not store one)."""


def _hard(rq: Mapping[str, Any], name: str, lim: Limits) -> None:
    """One ResourceQuota's ``spec.hard`` into ``lim``; what does not map goes to ``lim.notes``."""
    spec = rq.get("spec") or {}
    if spec.get("scopes") or spec.get("scopeSelector"):
        lim.notes.append(f"ResourceQuota {name} holds for some pods only (scopes); not mapped")
        return
    # requests.* first: on a tie with the same limit under another key, the reason names the requests key
    for key, value in sorted((spec.get("hard") or {}).items(), key=lambda kv: (not kv[0].startswith("requests."), kv[0])):
        known = _KEYS.get(key)
        if known is None:
            lim.notes.append(f"ResourceQuota {name} {key}={value}: Horizon does not schedule {key}; not mapped")
            continue
        dim, scale = known
        try:
            amount = quantity(str(value), scale)  # whole units, rounded up as Kubernetes does
        except ValueError as exc:
            raise QuantityError(f"ResourceQuota {name} {key}: {exc}") from None
        lim.take(dim, max(0, amount), f"Kubernetes ResourceQuota {name} {key}")


def desired(quotas: list[Mapping[str, Any]]) -> tuple[list[Wanted], list[str]]:
    """Every namespace with a quota that maps, as an account (by name), and the notes on what did not.

    ``quotas``: the ``items`` of the API server's ``ResourceQuotaList`` (of every namespace, or of
    some), in any order: quotas are read by namespace and by name, so the answer does not depend on it.
    """
    by_namespace: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for rq in quotas:
        meta = rq.get("metadata") or {}
        by_namespace.setdefault(meta.get("namespace", "default"), []).append((meta.get("name", ""), rq))
    wanted: list[Wanted] = []
    notes: list[str] = []
    for namespace, items in sorted(by_namespace.items()):
        lim = Limits()
        for name, rq in sorted(items, key=lambda item: item[0]):
            _hard(rq, f"{namespace}/{name}", lim)
        notes.extend(f"namespace {namespace}: {note}" for note in lim.notes)
        if lim.values:
            wanted.append(Wanted(namespace, None, 1.0, lim.quota()))
    return wanted, notes


def plan(wanted: list[Wanted], current: dict[str, tuple[int, c.AccountConfigured]], now: float,
         user: str = "") -> list[Planned]:
    """The configurations that make Horizon's accounts' quotas match the namespaces' (services/quota/
    accounts.py, ``plan``); their parents and shares stay Horizon's."""
    return accounts.plan(KUBERNETES, wanted, current, now, user)
