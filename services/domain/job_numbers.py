"""Job numbers: Slurm's numeric job ids beside Horizon's string ids. Pure.

Every job gets a number when the submission core accepts it (``JobSpec.number``,
``services/submission/numbering.py``), so that the tools that drive Slurm (submitit, dask-jobqueue,
Parsl, Snakemake, Nextflow) find what they parse: ``Submitted batch job 4213``, ``squeue -j 4213``,
``SLURM_JOB_ID=4213``. The number is decided in the log, so replay and ``horizon audit`` give the
same numbers.

**Scopes.** Numbers count up from 1 in a *numbering scope*: the scope of a job is the tenant of its
key when it came through the intake under accounts (``acme:eval-7`` is in ``acme``'s scope), else
the cluster's (``""``: every job of a Horizon without accounts, and the operator's own). So a
tenant's numbers say nothing about how many jobs other tenants submit. A number is named in its
scope as a job is: ``number_key`` is ``acme:12`` for acme's job 12, ``12`` for the cluster's, and
a tenant's ``12`` is read as its own (``projections/tenants.py`` ``tenant_keys``).

**Arrays.** An array's tasks are accepted together, with consecutive numbers; the array's number
is its first task's (``array_number``), and a task is shown ``<array_number>_<index>`` (``4213_7``),
as Slurm shows it. The array's number names the whole array (``scancel 4213``, ``afterok:4213``),
as in Slurm.

**References** (``parse_reference``): ``4213``, ``4213_7`` (a task by its array's number and its
index), ``4213.0`` / ``4213.batch`` (a step), ``4213_7.0``. The front resolves them to string ids
through the jobs read model (``services/front/client/job_numbers.py``).

A job accepted before numbers existed has number 0 and is shown and named by its id alone.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from events import catalogue as c
from events.subjects import KEY_SEPARATOR

__all__ = ["number_scope", "number_key", "slurm_id", "scoped_slurm_id", "spec_slurm_id", "Reference",
           "parse_reference", "MAX_NUMBER_DIGITS"]

MAX_NUMBER_DIGITS = 15  # more digits than any number a log could reach: such a text is an id, not a number
_REFERENCE = re.compile(r"^([0-9]{1,15})(?:_([0-9]{1,9}))?(?:\.([0-9]{1,9}|batch|extern))?$")


def number_scope(job_id: str) -> str:
    """The numbering scope of a job by its key: its tenant for a key ``<tenant>:<id>``, else ``""``."""
    scope, sep, _ = job_id.partition(KEY_SEPARATOR)
    return scope if sep else ""


def number_key(job_id: str, number: int) -> str:
    """How ``number`` is named in the scope of ``job_id``: ``acme:12`` or ``12``."""
    scope = number_scope(job_id)
    return f"{scope}{KEY_SEPARATOR}{number}" if scope else str(number)


def slurm_id(number: int, array_number: int = 0, array_index: int | None = None) -> str:
    """The id Slurm's commands show: ``4213``, or ``4213_7`` for task 7 of array 4213; ``""`` for a job
    without a number."""
    if not number:
        return ""
    if array_number and array_index is not None:
        return f"{array_number}_{array_index}"
    return str(number)


def scoped_slurm_id(job_id: str, number: int, array_number: int = 0, array_index: int | None = None) -> str:
    """``slurm_id`` named in the scope of ``job_id`` (its key): ``acme:12_3`` for acme's task, as an
    operator sees it (the tenant sees ``12_3``: ``projections/tenants.py`` ``as_tenant_sees``)."""
    shown = slurm_id(number, array_number, array_index)
    scope = number_scope(job_id)
    return f"{scope}{KEY_SEPARATOR}{shown}" if shown and scope else shown


def spec_slurm_id(job_id: str, spec: c.JobSpec | None) -> str:
    """``scoped_slurm_id`` of the job ``job_id`` from its accepted spec."""
    if spec is None:
        return ""
    return scoped_slurm_id(job_id, spec.number, spec.array_number, spec.array_index)


class Reference(NamedTuple):
    """A job named by number: ``number``, a task ``index`` (``4213_7``), a ``step`` (``4213.0``)."""

    number: int
    index: int | None = None
    step: str | None = None


def parse_reference(text: str) -> Reference | None:
    """``text`` as a reference by number, or None (it is not one: a string id)."""
    m = _REFERENCE.match(text)
    if m is None or int(m[1]) == 0:
        return None
    return Reference(int(m[1]), int(m[2]) if m[2] is not None else None, m[3])
