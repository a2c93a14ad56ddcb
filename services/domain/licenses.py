"""Licenses: counts the whole cluster shares, as Slurm's local licenses. Pure.

An operator defines each one (``LicenseConfigured`` on ``horizon.in._admin.license``, ``horizon license
set matlab 3``: a name and its total); a job names how many of which it needs (``JobSpec.licenses``,
Slurm's ``sbatch -L matlab:2,abaqus``). The rules, each where it is kept:

1. **Submission refuses what could never start** (``Licenses.problem``): a license that is not
   defined, or more of one than the cluster's total.
2. **Scheduling admits a candidate only if its licenses are free** (``Licenses.judge``), as it does
   a quota (``services/domain/quotas.py``): for every license the job names,

       used + taken by the candidates ahead of it in this cycle + needed  <=  total.

   Placement places a subset of the candidates, so what jobs hold never passes the total (only an
   operator lowering it can leave more in use than there are: the jobs keep theirs and nothing
   more starts until enough are back). A job whose licenses are not free is no candidate and waits
   with the reason ``Licenses`` (``services/domain/queue/waiting.py``).
3. **Held with the resources** (``Licenses.charge``): from the attempt's ``JobScheduled`` until it
   stops holding resources (it ended, was preempted, its node was lost). A requeued job asks again.

Worked through: ``matlab`` has 3, a running job holds 2. A job needing 2 waits: "license matlab: 2
of 3 in use, needs 2"; one needing 1 is admitted, and a second needing 1 behind it in the same
cycle waits for the next (2 + 1 taken ahead + 1 > 3).

Every part that decides or explains folds the same ``Licenses`` from the log: submission (the
totals, to refuse), the scheduler's ``QueueFold`` (totals and use; it answers an input it cannot
apply with ``ConfigRejected``), and through it preemption and the projections
(``horizon.query.licenses``, ``scontrol show lic``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from events import catalogue as c
from events.subjects import parse_subject
from events.vocabulary import LICENSE_PATTERN, MAX_LICENSE_COUNT, MAX_LICENSES

__all__ = ["Licenses", "SLURM_CODE", "check_license", "request_problem", "licenses_text"]

SLURM_CODE = "Licenses"  # squeue's reason for a job waiting for licenses (Slurm's WAIT_LICENSES)
_NAME = re.compile(LICENSE_PATTERN)


def check_license(event: c.LicenseConfigured, subject: str) -> str | None:
    """Why an operator's ``LicenseConfigured`` cannot be applied (every fold refuses it alike), or None."""
    parsed = parse_subject(subject)
    if parsed is None or parsed.kind != "admin":
        return f"LicenseConfigured is accepted only on horizon.in._admin.license, not {subject}"
    if not isinstance(event.name, str) or not _NAME.match(event.name):
        return (f"name: {str(event.name)[:200]!r} is not a license name: 1-64 letters, digits, '_', '.', '+' or "
                "'-' (and @SERVER, Slurm's remote form)")
    if event.removed:
        return None
    if isinstance(event.count, bool) or not 0 <= event.count <= MAX_LICENSE_COUNT:
        return f"count: {event.count!r} must be between 0 and {MAX_LICENSE_COUNT}"
    return None


def request_problem(requested: Mapping[str, int]) -> str | None:
    """Why a job's ``licenses`` are not well formed (names, counts, how many), or None. Whether they
    are defined is ``Licenses.problem``'s question."""
    if len(requested) > MAX_LICENSES:
        return f"{len(requested)} licenses; at most {MAX_LICENSES} different ones"
    for name, count in requested.items():
        if not isinstance(name, str) or not _NAME.match(name):
            return (f"{str(name)[:200]!r} is not a license name: 1-64 letters, digits, '_', '.', '+' or '-' "
                    "(and @SERVER)")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_LICENSE_COUNT:
            return f"{name}: {count!r} must be a count between 1 and {MAX_LICENSE_COUNT}"
    return None


def licenses_text(requested: Mapping[str, int]) -> str:
    """A job's licenses as Slurm writes them (``matlab:2,abaqus:1``; "" for none)."""
    return ",".join(f"{name}:{count}" for name, count in sorted(requested.items()))


class Licenses:
    """The licenses defined (``totals``) and what jobs holding resources hold of them (``used``)."""

    def __init__(self, totals: Mapping[str, int] | None = None) -> None:
        self.totals: dict[str, int] = dict(totals or {})
        self.used: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self.totals) or bool(self.used)

    # ------------------------------------------------------------------ folding

    def apply(self, event: c.LicenseConfigured, subject: str) -> str | None:
        """Fold an operator's configuration: the reason it cannot be applied (nothing changes), or None."""
        why = check_license(event, subject)
        if why is not None:
            return why
        if event.removed:
            self.totals.pop(event.name, None)
        else:
            self.totals[event.name] = event.count
        return None

    def charge(self, requested: Mapping[str, int], sign: int) -> None:
        """A job starts holding (+1) or gives back (-1) its licenses."""
        for name, count in requested.items():
            left = self.used.get(name, 0) + sign * count
            if left > 0:
                self.used[name] = left
            else:
                self.used.pop(name, None)

    def copy(self) -> Licenses:
        out = Licenses(self.totals)
        out.used = dict(self.used)
        return out

    # ------------------------------------------------------------------ deciding

    def problem(self, requested: Mapping[str, int]) -> str | None:
        """Why submission refuses a job asking for ``requested``: a license not defined, or more than
        the cluster has (it could never start); None when it may wait for them."""
        for name, count in sorted(requested.items()):
            total = self.totals.get(name)
            if total is None:
                defined = (f"licenses here: {', '.join(sorted(self.totals))}" if self.totals else
                           "this cluster defines no licenses; an operator adds one with horizon license set NAME COUNT")
                return f"license {name!r} is not defined ({defined})"
            if count > total:
                return (f"{count} {name} licenses is more than the cluster's {total}: the job could never start; ask "
                        f"for {total} or fewer")
        return None

    def judge(self, requested: Mapping[str, int], cycle: Mapping[str, int] | None = None) -> str:
        """"" when every license the job asks for is free, counting ``cycle`` (what candidates ahead of it
        in this cycle take) as in use; else why not, naming the first license short (by name)."""
        for name, count in sorted(requested.items()):
            total = self.totals.get(name)
            if total is None:
                return (f"license {name} is not defined (it was removed): waits until an operator defines it "
                        f"(horizon license set {name} COUNT)")
            held = self.used.get(name, 0)
            taken = cycle.get(name, 0) if cycle else 0
            if held + taken + count <= total:
                continue
            if count > total:
                return (f"license {name}: needs {count}, the cluster has {total}: waits until an operator raises "
                        "it")
            ahead = f" and {taken} taken by jobs ahead of it" if taken else ""
            return f"license {name}: {held} of {total} in use{ahead}, needs {count}"
        return ""

    @staticmethod
    def add_cycle(requested: Mapping[str, int], cycle: dict[str, int]) -> None:
        """A candidate admitted in this cycle takes its licenses from those the jobs behind it see."""
        for name, count in requested.items():
            cycle[name] = cycle.get(name, 0) + count

    # ------------------------------------------------------------------ reading

    def report(self) -> list[dict[str, object]]:
        """Every license defined, by name, as ``scontrol show lic`` prints it (a license removed while
        jobs still hold it is listed with a total of 0 until they give it back)."""
        rows = []
        for name in sorted(set(self.totals) | set(self.used)):
            total, used = self.totals.get(name, 0), self.used.get(name, 0)
            rows.append({"name": name, "total": total, "used": used, "free": max(0, total - used), "reserved": 0,
                         "remote": False, "defined": name in self.totals})
        return rows

    def data(self) -> dict[str, int]:
        """What a snapshot keeps: the totals (the use is rebuilt from the jobs holding resources)."""
        return dict(sorted(self.totals.items()))
