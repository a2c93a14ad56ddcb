"""Slurm's ``--dependency=singleton``: a job of a tenant, user and name starts only when no other job of
the same three runs, nor waits ahead of it. Pure; part of the scheduler's fold (derived: rebuilt from
the job table after a snapshot is loaded).

Slurm's rule (``_find_singleton_job``): a singleton job waits while another job of its user and name
is running or suspended, or is pending and was submitted before it; whether that other job is a
singleton itself does not matter. Horizon reads "submitted before" as accepted earlier in the log
(``Job.accepted_seq``), "running" as holding resources (scheduled or running) and "pending" as
pending or held (a held job is a pending one in Slurm). The owner is the tenant and user: two
tenants' users of the same name are different people.

``Singletons`` keeps, for each (tenant, user, name) that some live singleton job has, the live jobs
of that key; keys no live singleton job has are not watched, so a queue without singleton jobs pays
a dictionary lookup per transition. The first singleton job of a key scans the job table once for
the live jobs of its key.

A partition leader (docs/scaling.md) does not hold other partitions' jobs, but they count: its
``foreign`` jobs (``services/domain/foreign.py``) keep the key and acceptance of each one not ended, so
the members of a watched key include the live foreign jobs of that key, as bare ``Job``s (no spec) the
leader moves as their records go by (``foreign_moved``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.domain.jobs import HOLDS_RESOURCES, LIVE, Job, JobState, JobTable, Transition

if TYPE_CHECKING:
    from services.domain.foreign import ForeignJobs

__all__ = ["Singletons", "key_of"]

Key = tuple[str, str, str]


def key_of(job: Job) -> Key | None:
    spec = job.spec
    return None if spec is None else (spec.tenant, spec.user, spec.name)


class Singletons:
    def __init__(self) -> None:
        self.live: dict[Key, dict[str, Job]] = {}  # watched key -> its live jobs
        self.singles: dict[Key, int] = {}  # watched key -> how many of its live jobs are singleton jobs
        self.foreign: ForeignJobs | None = None  # a partition leader's jobs of other partitions

    def track(self, jobs: JobTable, tr: Transition) -> None:
        """Follow one transition of the job table."""
        job = tr.job
        key = key_of(job)
        if key is None:
            return
        alive = tr.after in LIVE
        single = job.spec is not None and job.spec.singleton
        if key not in self.live:
            if not (alive and single):
                return
            self.live[key] = {j.job_id: j for j in jobs.jobs.values() if j.state in LIVE and key_of(j) == key}
            self.singles[key] = sum(1 for j in self.live[key].values() if j.spec is not None and j.spec.singleton)
            if self.foreign is not None:
                self.live[key].update(self.foreign.members({key}).get(key, {}))
            return
        members = self.live[key]
        was = job.job_id in members
        if alive and not was:
            members[job.job_id] = job
            self.singles[key] += int(single)
        elif not alive and was:
            del members[job.job_id]
            self.singles[key] -= int(single)
            if not self.singles[key]:
                del self.live[key], self.singles[key]

    def rebuild(self, jobs: JobTable) -> None:
        """From the job table alone (after a snapshot is loaded): the keys of live singleton jobs
        first, then the live jobs of those keys (a backlog without singletons costs one pass)."""
        self.live, self.singles = {}, {}
        for job in jobs.jobs.values():
            spec = job.spec
            if spec is not None and spec.singleton and job.state in LIVE:
                key = (spec.tenant, spec.user, spec.name)
                self.singles[key] = self.singles.get(key, 0) + 1
        if not self.singles:
            return
        for job in jobs.jobs.values():
            key = key_of(job)
            if key in self.singles and job.state in LIVE:
                self.live.setdefault(key, {})[job.job_id] = job  # type: ignore[index]
        if self.foreign is not None:
            for key, members in self.foreign.members(self.singles).items():
                self.live[key].update(members)

    def foreign_moved(self, job_id: str, key: Key, state: JobState, accepted_seq: int) -> bool:
        """A foreign job of ``key`` is in ``state`` now: follow it if the key is watched (True then)."""
        members = self.live.get(key)
        if members is None:
            return False
        if state in LIVE:
            member = members.get(job_id)
            if member is None:
                members[job_id] = Job(job_id, None, state, accepted_seq=accepted_seq)
            else:
                member.state = state
        else:
            members.pop(job_id, None)
        return True

    def blocker(self, job: Job) -> Job | None:
        """For a singleton job: the job of its key that keeps it waiting (the first in the log), or None."""
        spec = job.spec
        if spec is None or not spec.singleton:
            return None
        key = key_of(job)
        found: Job | None = None
        for other in self.live.get(key, {}).values():  # type: ignore[arg-type]
            if other is job:
                continue
            ahead = other.state in HOLDS_RESOURCES or (
                other.state in (JobState.PENDING, JobState.HELD) and other.accepted_seq < job.accepted_seq)
            if ahead and (found is None or other.accepted_seq < found.accepted_seq):
                found = other
        return found
