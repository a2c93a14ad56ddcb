"""What ``scancel`` cancels: the jobs its JOBID arguments name (an array's tasks among them), and those
its filters match.

The command (its options, messages and exit code) is ``services/front/cli/slurm_commands.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from events.arrays import parse_array, task_id
from events.resources import ResourceError
from events.subjects import valid_job_key, valid_token
from services.front.client.problems import BadValue

__all__ = ["SCANCEL_STATES", "scancel_targets"]

SCANCEL_STATES = {"PENDING": ["PENDING", "HELD"], "PD": ["PENDING", "HELD"], "RUNNING": ["SCHEDULED", "RUNNING"],
                   "R": ["SCHEDULED", "RUNNING"], "SUSPENDED": [], "S": []}  # Horizon suspends no job


def scancel_targets(args: Iterable[str]) -> list[str]:
    """scancel's JOBID arguments, each possibly a comma-separated list (commas inside ``[...]`` are the
    array's), as job ids: ``ID``, ``ID_N``, ``ID_[1-3,7]`` (those tasks), ``ID_*`` (the array: all its
    tasks), ``ID.STEP`` (the job)."""
    out: list[str] = []
    for arg in args:
        for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", arg):
            out.extend(_job_targets(item))
    return list(dict.fromkeys(out))


def _job_targets(text: str) -> list[str]:
    base = text.split(".", 1)[0]
    if base.endswith("_*"):
        base = base[:-2]
    m = re.fullmatch(r"(.+)_\[(.+)\]", base)
    if m:
        try:
            spec = parse_array(m[2], "JOBID")
        except ResourceError as exc:
            raise BadValue(f"{text!r}: {exc.problem}", "JOBID") from None
        return [task_id(m[1], i) for i in spec.indices]
    if not valid_token(base) and not valid_job_key(base):  # acme:12: an operator's name of a tenant's job
        raise BadValue(f"{text!r} is not a job id", "JOBID")
    return [base]
