"""Numbering the jobs submission accepts (``JobSpec.number``: Slurm's numeric job id). Pure.

The rule (``services/domain/job_numbers.py`` says why and what the scopes are): a job accepted in a
scope gets the highest number its scope has given so far, plus one. The highest is folded from the
log (``Numbering.seen`` on every ``JobAccepted``), and a decision round counts the numbers it gives
before they are folded (``Numbering.give`` with the round's own ``given``), so the numbers are a
function of the log alone: replay and ``horizon audit`` give the same ones, and a round decided
again after a crash gives them again.

An array's tasks are numbered together, consecutively in index order; the array's number is its first
task's. A round cut short by a crash (some tasks accepted, the rest not yet) finishes with the
numbers that follow: the accepted tasks were the first ones in index order, and every later
submission of the round is decided again after them, in the same order.

A heterogeneous job takes one number per component, consecutive: its own is component 0's, and
component k is ``number + k`` (Slurm gives each component a job id, ``SLURM_JOB_ID_HET_GROUP_k``); the
next job is numbered after the last of them.

Jobs from a log written before numbers existed carry 0 and count for nothing, so a log that goes on
numbers its new jobs from 1.
"""

from __future__ import annotations

import msgspec

from events import catalogue as c
from services.domain.job_numbers import number_scope

__all__ = ["Numbering"]


class Numbering:
    """The highest number given in each scope (``""``: the cluster's; else a tenant's)."""

    __slots__ = ("highest",)

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}

    def seen(self, event: c.JobAccepted) -> None:
        """Fold a ``JobAccepted``: its number is taken in its scope."""
        number = event.spec.number + len(event.spec.components)  # a heterogeneous job's components' too
        if number:
            scope = number_scope(event.job_id)
            if number > self.highest.get(scope, 0):
                self.highest[scope] = number

    def give(self, jobs: list[tuple[str, c.JobSpec]], given: dict[str, int],
             array_number: int = 0) -> list[tuple[str, c.JobSpec]]:
        """``jobs`` (one submission's: a job, or an array's tasks in index order) with their numbers,
        after the highest of their scope and after those ``given`` earlier in this round (updated).
        ``array_number``: the array's number when its first tasks were accepted in a round cut short."""
        if not jobs:
            return jobs
        scope = number_scope(jobs[0][0])
        last = max(self.highest.get(scope, 0), given.get(scope, 0))
        out = []
        for job_id, spec in jobs:
            last += 1
            if spec.array is not None:
                array_number = array_number or last
            out.append((job_id, msgspec.structs.replace(spec, number=last, array_number=array_number
                                                          if spec.array is not None else 0)))
            last += len(spec.components)  # a heterogeneous job's components are number + 1, ... (Slurm's ids)
        given[scope] = last
        return out
