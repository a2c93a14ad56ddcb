"""Predicted run times for backfilling (EASY++): what placement expects a job to run, from its user's history. Pure.

A placement profile chooses where backfilling's run times come from (``ProfileConfigured.runtime_estimate``):

``limit`` (the default)
    the job's time limit, what the user asked for: a running job is expected to hold its nodes until
    its start plus its limit, and a job that would start now until now plus its limit.
``predicted``
    Tsafrir, Etsion and Feitelson's EASY++ prediction ("Backfilling using system-generated predictions
    rather than user runtime estimates", IEEE TPDS 18(6), 2007): the mean of the run times of the
    user's two most recently ended jobs, never more than the job's own time limit; a user with one
    ended job, that run time; with none yet, the limit. Reservations and backfill windows use it; the
    time limit is still what the node agent enforces (``JobScheduled.time_limit_s`` is unchanged), so a
    prediction only moves *when* placement expects nodes to free, never how long a job may run.

**A prediction that proves short** (the job is still running at its start plus its prediction) is
corrected the next time placement looks: its expected run grows to the first of ``CORRECTION_STEPS``
(measured from its start) that lies in the future, and to its limit once none below it does, so a
reservation computed at any later instant never counts on nodes a running job still holds.
Worked through: a job predicted at 400 s with a limit of 3 h, still running 420 s after its start, is
expected to run 900 s (15 min); at 1000 s, 1800 s; at 10 000 s, its limit (10 800 s).

The history is folded from the log (``RuntimeHistory.record`` on each ended run), so a replay from
the same events predicts the same run times; a run counts when it ended by itself after starting
(succeeded, failed, out of memory: a job killed at its limit ran its limit), not when it was preempted
or cancelled (its run time says nothing about how long it needed). Jobs are keyed by their user, or by
their account when they name no user (a trace without users, such as Lublin-1, is one history).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RuntimeHistory", "CORRECTION_STEPS", "expected_run", "history_key"]

# Durations from a job's start (seconds) that a too-short prediction grows to, one after another
# (1, 5, 15 and 30 minutes, then 1, 2, 5, 10, 20, 50 and 100 hours), capped by the job's limit.
CORRECTION_STEPS: tuple[float, ...] = (60, 300, 900, 1800, 3600, 7200, 18000, 36000, 72000, 180000, 360000)


def history_key(user: str, account: str) -> str:
    """Whose history predicts a job: its user, else its account."""
    return user or f"account:{account}"


@dataclass
class RuntimeHistory:
    """Each user's last two run times (seconds), most recent last."""

    last: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def record(self, key: str, run_s: float) -> None:
        """A run of ``run_s`` seconds by ``key`` has ended."""
        self.last[key] = (*self.last.get(key, ())[-1:], max(0.0, run_s))

    def predict(self, key: str, limit_s: float) -> float:
        """The mean of ``key``'s last two run times (or its one), at most ``limit_s``; with none, ``limit_s``.
        Never below one second: a job is expected to hold its nodes for a while at least."""
        runs = self.last.get(key)
        if not runs:
            return limit_s
        return max(1.0, min(limit_s, sum(runs) / len(runs)))


def expected_run(predicted_s: float, limit_s: float, elapsed_s: float) -> float:
    """How long a job that has run ``elapsed_s`` is expected to run in all: its prediction while that is
    still ahead, else the first correction step ahead of it, else its limit (see the module docstring)."""
    if predicted_s >= limit_s or elapsed_s < predicted_s:
        return min(predicted_s, limit_s)
    for step in CORRECTION_STEPS:
        if step > elapsed_s and step > predicted_s:
            return min(step, limit_s)
    return limit_s
