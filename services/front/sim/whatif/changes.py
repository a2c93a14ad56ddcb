"""The changes a what-if asks for, as operator configuration events: ``--set KEY=VALUE`` (``parse_sets``,
``change_events``), nodes added like recorded ones (``parse_add_nodes``, ``added_nodes``) or removed
(``remove_nodes``)."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import event_subject
from services.domain.envelope import decision_id
from services.front.sim.whatif.times import WhatIfError, parse_duration
from services.front.sim.whatif.workload import Workload

__all__ = ["SET_KEYS", "Changes", "parse_sets", "change_events", "parse_add_nodes", "added_nodes", "remove_nodes"]


def _number(text: str, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise WhatIfError(f"--set {key}={text}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise WhatIfError(f"--set {key}={text}: not a finite number")
    return value


def _count(text: str, key: str) -> int:
    if not text.strip().isdigit():
        raise WhatIfError(f"--set {key}={text}: {text!r} is not a whole number >= 0")
    return int(text)


def _bool(text: str, key: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise WhatIfError(f"--set {key}={text}: {text!r} is not true or false")


def _choice(text: str, key: str, choices: Iterable[str]) -> str:
    options = list(choices)
    if text not in options:
        raise WhatIfError(f"--set {key}={text}: {text!r} is not one of {', '.join(options)}")
    return text


# key pattern -> what it sets (for --help and the errors)
SET_KEYS = {
    "policy.policy": "queue policy: fcfs, sjf, f1, multifactor",
    "policy.weight.<factor>": "multifactor weight (class, fairshare, age, estimate, size, qos)",
    "policy.max_age": "age factor's saturation (duration)",
    "policy.estimate_ref": "estimate factor's reference (duration)",
    "policy.qos_boost.<qos>": "a QOS's factor in [0, 1]",
    "policy.backoff_base / policy.backoff_max": "restart backoff (duration)",
    "fairshare.half_life": "usage decay half-life (duration)",
    "fairshare.gpu_weight / cpu_weight / memory_weight": "billing weights",
    "fairshare.dominant_share": "true/false",
    "profile.<name>.backfill": "none, easy, shadow, greedy, conservative, short",
    "profile.<name>.reservation_depth": "conservative backfill's reservations",
    "profile.<name>.runtime_estimate": "limit or predicted",
    "profile.<name>.weight.<plugin>": "placement score weight",
    "backfill": "the default profile's backfill mode (profile.default.backfill)",
    "preemption.victims": "cheapest or lowest-priority-youngest",
    "preemption.rules.<class>": "the classes it may preempt, comma-separated ('' none)",
    "preemption.grace_period": "duration",
    "preemption.max_preemptions / per_minute / per_account_per_minute": "whole numbers",
    "account.<name>.shares": "fair-share shares",
    "account.<name>.parent": "parent account ('' the root)",
    "account.<name>.priority_boost": "number",
    "account.<name>.borrowing": "true/false",
    "account.<name>.quota.<gpus|cpus|memory|running_jobs>": "a limit ('none' unlimited)",
    "account.<name>.quota.gpus.<type>": "a per-GPU-type limit",
}


@dataclass
class Changes:
    policy: dict[str, Any] = field(default_factory=dict)
    fairshare: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    preemption: dict[str, Any] = field(default_factory=dict)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.keys


def parse_sets(items: Sequence[str]) -> Changes:
    """``KEY=VALUE`` strings (``--set``) -> the changes they ask for; a ``WhatIfError`` naming the key
    for anything unknown or malformed."""
    from events.vocabulary import BACKFILL_MODES
    from services.preemption.core import VICTIM_ORDERS

    out = Changes()
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise WhatIfError(f"--set {item!r}: use KEY=VALUE, e.g. policy.weight.fairshare=20000")
        path = key.split(".")
        head = path[0]
        if key == "backfill":
            path, head = ["profile", "default", "backfill"], "profile"
        if head == "policy" and len(path) >= 2:
            name = path[1]
            if name == "policy" and len(path) == 2:
                out.policy["policy"] = _choice(value, key, ("fcfs", "sjf", "f1", "multifactor"))
            elif name == "weight" and len(path) == 3:
                if path[2] not in ("class", "fairshare", "age", "estimate", "size", "qos"):
                    raise WhatIfError(f"--set {key}: no weight {path[2]!r}; weights: class, fairshare, age, "
                                      f"estimate, size, qos")
                w = _number(value, key)
                if w < 0:
                    raise WhatIfError(f"--set {key}={value}: a weight is 0 or more")
                out.policy.setdefault("weights", {})[path[2]] = w
            elif name in ("max_age", "estimate_ref", "backoff_base", "backoff_max") and len(path) == 2:
                out.policy[f"{name}_s"] = parse_duration(value, f"--set {key}")
            elif name == "qos_boost" and len(path) == 3:
                f = _number(value, key)
                if not 0 <= f <= 1:
                    raise WhatIfError(f"--set {key}={value}: a QOS factor is in [0, 1]")
                out.policy.setdefault("qos_boost", {})[path[2]] = f
            else:
                raise _unknown(key)
        elif head == "fairshare" and len(path) == 2:
            name = path[1]
            if name == "half_life":
                out.fairshare["half_life_s"] = parse_duration(value, f"--set {key}")
                if out.fairshare["half_life_s"] <= 0:
                    raise WhatIfError(f"--set {key}={value}: the half-life is more than 0")
            elif name in ("gpu_weight", "cpu_weight", "memory_weight"):
                w = _number(value, key)
                if w < 0:
                    raise WhatIfError(f"--set {key}={value}: a weight is 0 or more")
                out.fairshare[name] = w
            elif name == "dominant_share":
                out.fairshare[name] = _bool(value, key)
            else:
                raise _unknown(key)
        elif head == "profile" and len(path) >= 3:
            prof = out.profiles.setdefault(path[1], {})
            name = path[2]
            if name == "backfill" and len(path) == 3:
                prof["backfill"] = _choice(value, key, BACKFILL_MODES)
            elif name == "reservation_depth" and len(path) == 3:
                prof["reservation_depth"] = _count(value, key)
            elif name == "runtime_estimate" and len(path) == 3:
                prof["runtime_estimate"] = _choice(value, key, ("limit", "predicted"))
            elif name == "weight" and len(path) == 4:
                prof.setdefault("weights", {})[path[3]] = _number(value, key)
            else:
                raise _unknown(key)
        elif head == "preemption" and len(path) >= 2:
            name = path[1]
            if name == "victims" and len(path) == 2:
                out.preemption["victims"] = _choice(value, key, VICTIM_ORDERS)
            elif name == "rules" and len(path) == 3:
                classes = [v.strip() for v in value.split(",") if v.strip()]
                for v in classes + [path[2]]:
                    if v not in c.PRIORITY_CLASSES:
                        raise WhatIfError(f"--set {key}={value}: {v!r} is not a priority class "
                                          f"({', '.join(c.PRIORITY_CLASSES)})")
                out.preemption.setdefault("rules", {})[path[2]] = classes
            elif name == "grace_period" and len(path) == 2:
                out.preemption["grace_period_s"] = parse_duration(value, f"--set {key}")
            elif name in ("max_preemptions", "per_minute", "per_account_per_minute") and len(path) == 2:
                out.preemption[name] = _count(value, key)
            else:
                raise _unknown(key)
        elif head == "account" and len(path) >= 3:
            acc = out.accounts.setdefault(path[1], {})
            name = path[2]
            if name == "shares" and len(path) == 3:
                s = _number(value, key)
                if s <= 0:
                    raise WhatIfError(f"--set {key}={value}: shares are more than 0")
                acc["shares"] = s
            elif name == "parent" and len(path) == 3:
                acc["parent"] = value or None
            elif name == "priority_boost" and len(path) == 3:
                acc["priority_boost"] = _number(value, key)
            elif name == "borrowing" and len(path) == 3:
                acc["borrowing"] = _bool(value, key)
            elif name == "quota" and len(path) in (4, 5):
                acc.setdefault("quota", {}).update(_quota(path[3:], value, key))
            else:
                raise _unknown(key)
        else:
            raise _unknown(key)
        out.keys.append(f"{key}={value}")
    return out


def _quota(path: list[str], value: str, key: str) -> dict[str, Any]:
    from events.resources import ResourceError, parse_memory

    unlimited = value.lower() in ("none", "unlimited", "")
    dim = path[0]
    if dim == "gpus" and len(path) == 2:
        return {"gpus_by_type": {path[1]: None if unlimited else _count(value, key)}}
    if len(path) != 1:
        raise _unknown(key)
    if dim in ("gpus", "running_jobs"):
        return {dim: None if unlimited else _count(value, key)}
    if dim == "cpus":
        return {"cpus_milli": None if unlimited else int(_number(value, key) * 1000)}
    if dim == "memory":
        if unlimited:
            return {"memory_bytes": None}
        try:
            return {"memory_bytes": parse_memory(value)}
        except (ResourceError, ValueError):
            raise WhatIfError(f"--set {key}={value}: {value!r} is not an amount of memory (e.g. 512Gi)") from None
    raise _unknown(key)


def _unknown(key: str) -> WhatIfError:
    return WhatIfError(f"--set {key}: unknown key; keys: {', '.join(SET_KEYS)}")


def change_events(changes: Changes, base: Sequence[Event], backfill: str) -> list[Event]:
    """The operator configuration events the changes are, on top of the configuration in force (``base``,
    in log order): events that replace a whole configuration (fair share, a profile, an account) start
    from the one in force; the others (policy, preemption) change only what they name."""
    out: list[Event] = []
    if changes.policy:
        out.append(c.PolicyConfigured(**changes.policy, user="whatif"))
    if changes.fairshare:
        last = next((e for e in reversed(base) if isinstance(e, c.FairShareConfigured)), None)
        fields = ({"half_life_s": last.half_life_s, "gpu_weight": last.gpu_weight, "cpu_weight": last.cpu_weight,
                   "memory_weight": last.memory_weight, "dominant_share": last.dominant_share} if last is not None
                  else {"cpu_weight": 1 / 16})  # the billing of a log without any FairShareConfigured
        out.append(c.FairShareConfigured(**{**fields, **changes.fairshare}, user="whatif"))
    for name, prof in changes.profiles.items():
        last_p = next((e for e in reversed(base) if isinstance(e, c.ProfileConfigured) and e.name == name), None)
        fields = (msgspec.structs.asdict(last_p) if last_p is not None else {"name": name, "backfill": backfill})
        fields = {k: v for k, v in fields.items() if k in ("name", "weights", "backfill", "reservation_depth",
                                                            "runtime_estimate")}
        if "weights" in prof:
            prof = {**prof, "weights": {**fields.get("weights", {}), **prof["weights"]}}
        out.append(c.ProfileConfigured(**{**fields, **prof}, user="whatif"))
    if changes.preemption:
        out.append(c.PreemptionConfigured(**changes.preemption, user="whatif"))
    for name, acc in changes.accounts.items():
        last_a = next((e for e in reversed(base) if isinstance(e, c.AccountConfigured) and e.account == name), None)
        fields = msgspec.structs.asdict(last_a) if last_a is not None else {"account": name}
        fields = {k: v for k, v in fields.items() if k in ("account", "parent", "shares", "quota", "borrowing",
                                                            "priority_boost", "max_priority_class", "tenants")}
        if "quota" in acc:
            quota = fields.get("quota") or c.Quota()
            q = msgspec.structs.asdict(quota)
            extra = dict(acc["quota"])
            if "gpus_by_type" in extra:
                merged = {**q.get("gpus_by_type", {}), **extra.pop("gpus_by_type")}
                q["gpus_by_type"] = {k: v for k, v in merged.items() if v is not None}
            q.update(extra)
            acc = {**acc, "quota": c.Quota(**q)}
        out.append(c.AccountConfigured(**{**fields, **acc}, user="whatif"))
    return out


_ADD = re.compile(r"^(\d+)x(\d+)([a-z][a-z0-9-]*)?$", re.IGNORECASE)


def parse_add_nodes(spec: str) -> tuple[int, int, str | None]:
    """``4x8a100`` -> 4 nodes of 8 GPUs of type a100; ``10x0`` -> 10 CPU nodes like the others."""
    m = _ADD.match(spec.strip())
    if not m or int(m.group(1)) < 1:
        raise WhatIfError(f"--add-nodes {spec!r}: use COUNTxGPUS[TYPE], e.g. 4x8a100 (4 nodes of 8 a100 GPUs) "
                          f"or 10x0 (10 nodes without GPUs)")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def added_nodes(specs: Sequence[str], workload: Workload) -> list[tuple[str, Event]]:
    """Registrations of the nodes ``--add-nodes`` asks for, shaped like a recorded node of the same GPU
    type (its cores, memory, labels), else 64 cores and 1 TiB; named ``whatif-<n>``."""
    from events.resources import parse_memory

    regs = [e for _, e in workload.timed if isinstance(e, c.NodeRegistered)]
    out: list[tuple[str, Event]] = []
    n = 0
    for spec in specs:
        count, gpus, gpu_type = parse_add_nodes(spec)
        like = next((r for r in regs if (len(r.gpus) > 0) == (gpus > 0)
                     and (gpu_type is None or any(g.type == gpu_type for g in r.gpus))), None)
        kind = gpu_type or (like.gpus[0].type if like is not None and like.gpus else "a100")
        for _ in range(count):
            name = f"whatif-{n:03d}"
            n += 1
            reg = c.NodeRegistered(
                id=decision_id("whatif", c.NodeRegistered, name), ts=workload.start_s, source=f"agent/{name}",
                correlation_id=name, node=name, cpus_milli=like.cpus_milli if like is not None else 64_000,
                memory_bytes=like.memory_bytes if like is not None else parse_memory("1Ti"),
                gpus=[c.GpuDevice(id=str(i), type=kind, memory_bytes=like.gpus[0].memory_bytes
                                  if like is not None and like.gpus else 0) for i in range(gpus)],
                labels=dict(like.labels) if like is not None else {}, agent=name, simulated=True)
            out.append((event_subject("agent", reg), reg))
    return out


def remove_nodes(workload: Workload, patterns: Sequence[str]) -> tuple[list[tuple[str, Event]], list[str]]:
    """The timed events without any that concern a node matching a pattern (shell glob); the nodes removed."""
    if not patterns:
        return list(workload.timed), []
    names = sorted({e.node for _, e in workload.timed if isinstance(e, c.NodeRegistered)})
    gone = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not gone:
        raise WhatIfError(f"--remove-nodes {' '.join(patterns)}: no recorded node matches (nodes: "
                          f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''})")
    if len(gone) == len(names):
        raise WhatIfError("--remove-nodes would remove every node: nothing could run")
    drop = set(gone)
    return [(s, e) for s, e in workload.timed if getattr(e, "node", None) not in drop], gone
