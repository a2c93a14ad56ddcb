"""User runtime estimates for a trace that has none: Tsafrir, Etsion and Feitelson's model.

Lublin-1 (``../shared/traces/lublin_256.swf``) has no requested times (field 9 is -1 everywhere), so
every job's estimate is its run time: a perfect estimate, which no user gives. This module gives the
jobs the estimates users would have written, with the model of D. Tsafrir, Y. Etsion and
D. G. Feitelson, "Modeling User Runtime Estimates", JSSPP 2005, LNCS 3834, pp. 1-35
(https://www.cs.huji.ac.il/labs/parallel/workload/m_tsafrir05/Est05JSSPP.pdf). The facts of the
model used here (the paper, and the authors' reference implementation of it):

* **Estimates are modal.** Users pick a few round values; about 20 of them (the *head*) carry 89% of
  the jobs, and the most popular is the maximum the system allows (the value a user gives when the
  estimate is an afterthought). The number of distinct values grows with the number of jobs, read off
  a piecewise-linear curve through (jobs, values) = (0, 0), (20, 10), (200, 20), (1000, 35),
  (10 000, 90), (70 000, 340), (250 000, 565).
* **The head's values**: the maximum; the 15 values common to the top 20 of all four logs studied
  (5, 10, 15, 20, 30 minutes; 1, 2, 3, 4, 5, 6, 8, 10, 12, 18 hours) below it; then round multiples
  below the maximum (of 200, 100, 50, 10, 5, 2, 1 hours, 20, 10, 5 minutes, largest unit first) until
  there are 20.
* **The head's shares**: the popularity rank ``r`` = 2..20 holds ``14.0491·e^(−0.177531·r) + 0.462513``
  percent of the jobs, and rank 1 (the maximum) the rest of the 89%.
* **Which value has which rank**: the paper's table of the four logs (SDSC, CTC, KTH, Blue) gives, for
  each head value in time order, the popularity rank it had in each log. Walking the values from the
  shortest, each takes a rank drawn from those the logs gave it or a shorter value (the better of two
  draws); a rank whose last appearance in the table has passed is taken at once; the maximum is
  rank 1.
* **The tail**: the other ``K − 20`` values lie at ``max·(a−1)x/(a−x)`` for ``x = i/(K−20)``, with
  ``a = 1 + 12.1039·K^−0.6026``, whole minutes; their shares follow ``795.6·r^−2.267`` for ranks
  ``r = 21..K``, scaled to the remaining 11%, and are matched to the values at random.
* **Jobs get estimates** no shorter than their run times: the estimates, as many as there are jobs
  (shares times the job count, by largest remainders), sorted longest first, are dealt to the jobs
  sorted longest first, each job drawing at random among the estimates left that are not shorter than
  its run time.

Horizon's choices (not the paper's): the maximum estimate is the trace's longest run time rounded up
to a whole hour (Lublin-1, with RLScheduler's parsing: 124 707 s, so 35 h), and all randomness comes
from one ``random.Random`` seeded by the caller: the same seed gives the same estimates, byte for byte. The estimates are drawn
once for the whole trace, in file order, so a window holds the same estimates whichever runs it.
"""

from __future__ import annotations

import dataclasses
import math
import random

from services.front.sim.traces import SimJob, Trace

__all__ = ["MODEL", "estimate_distribution", "assign_estimates", "with_user_estimates", "bin_count"]

MODEL = "tsafrir05"
_MIN, _HOUR = 60, 3600
TOP = 20
HEAD_SHARE = 89.0  # percent of the jobs whose estimate is one of the 20 most popular values
_HEAD_EXP = (14.0491, -0.177531, 0.462513)  # share(rank) = a·e^(b·rank) + c, ranks 2..20
_TAIL_POW = (795.6, -2.267)  # share(rank) = a·rank^b, ranks 21..K
_SHAPE = (12.1039, -0.6026)  # the tail's times: a = 1 + p·K^q
_BINS = ((0, 0), (20, 10), (200, 20), (1000, 35), (10_000, 90), (70_000, 340), (250_000, 565))
_COMMON = tuple(m * _MIN for m in (5, 10, 15, 20, 30)) + tuple(h * _HOUR for h in (1, 2, 3, 4, 5, 6, 8, 10, 12, 18))
_ROUND_UNITS = tuple(h * _HOUR for h in (200, 100, 50, 10, 5, 2, 1)) + tuple(m * _MIN for m in (20, 10, 5))
# The paper's four logs (SDSC, CTC, KTH, Blue): for the head values in time order (row 0 the maximum,
# then the shortest to the longest), the popularity rank each value had in each log.
_RANKS_SEEN = (
    (3, 1, 1, 1), (1, 3, 4, 6), (4, 4, 10, 5), (17, 2, 14, 3), (13, 12, 20, 7), (7, 9, 2, 2), (8, 8, 3, 18),
    (18, 18, 7, 19), (2, 6, 12, 4), (6, 7, 6, 11), (16, 11, 19, 20), (10, 20, 5, 9), (5, 16, 18, 10),
    (15, 5, 16, 14), (14, 14, 9, 13), (19, 13, 17, 16), (11, 10, 15, 15), (12, 15, 13, 17), (9, 17, 8, 8),
    (20, 19, 11, 12),
)


def bin_count(jobs: int) -> int:
    """How many distinct estimates ``jobs`` jobs use (the paper's piecewise-linear curve)."""
    for (x0, y0), (x1, y1) in zip(_BINS, _BINS[1:]):
        if jobs <= x1:
            return y0 + round((jobs - x0) * (y1 - y0) / (x1 - x0))
    return _BINS[-1][1]


def _head_times(max_est: int) -> list[int]:
    """The maximum, then the other head values in time order."""
    chosen = [max_est] + [t for t in _COMMON if t < max_est]
    for unit in _ROUND_UNITS:
        value = (max_est // unit) * unit
        while value > 0 and len(chosen) < TOP:
            if value not in chosen:
                chosen.append(value)
            value -= unit
        if len(chosen) >= TOP:
            break
    return [max_est] + sorted(chosen[1:])


def _head_shares(count: int) -> list[float]:
    """Percent of the jobs for popularity ranks 1..count (rank 1: what the head's 89% leaves)."""
    a, b, c = _HEAD_EXP
    rest = [a * math.exp(b * rank) + c for rank in range(2, count + 1)]
    return [HEAD_SHARE - sum(rest)] + rest


def _ranks(count: int, rng: random.Random) -> list[int]:
    """A popularity rank (1..count) for each head value (index 0 the maximum, then in time order)."""
    last_seen: dict[int, int] = {}
    for row, ranks in enumerate(_RANKS_SEEN[:count]):
        for rank in ranks:
            if rank <= count:
                last_seen[rank] = row
    taken: set[int] = set()
    pool: list[int] = []
    out: list[int] = []
    for row in range(count):
        pool.extend(r for r in _RANKS_SEEN[row] if r <= count and r not in taken)
        if row == 0:
            pick = 1
        else:
            due = [r for r in range(1, count + 1) if r not in taken and last_seen.get(r, count) <= row]
            if due:
                pick = min(due)
            else:
                free = [r for r in pool if r not in taken] or [r for r in range(1, count + 1) if r not in taken]
                pick = min(rng.choice(free), rng.choice(free))
        taken.add(pick)
        out.append(pick)
    return out


def estimate_distribution(jobs: int, max_est: int, rng: random.Random) -> dict[int, int]:
    """Estimate (seconds) -> how many of ``jobs`` jobs use it, by the model (see the module docstring)."""
    if max_est < _HOUR:
        raise ValueError("the model needs a maximum estimate of at least one hour")
    total_bins = max(TOP, bin_count(jobs))
    head = _head_times(max_est)
    shares = _head_shares(len(head))
    share_of = {time: shares[rank - 1] for time, rank in zip(head, _ranks(len(head), rng))}
    # the tail: values spread toward the maximum by the model's curve, shares by its power law
    tail_n = total_bins - len(head)
    shape = 1 + _SHAPE[0] * total_bins ** _SHAPE[1]
    tail_times: list[int] = []
    for i in range(1, tail_n + 1):
        x = i / tail_n
        sec = round(max_est * (shape - 1) * x / (shape - x) / _MIN) * _MIN
        for nudge in (0, 30, -30, 20, -20, 10, -10):  # keep the values distinct
            t = sec + nudge
            if 0 < t < max_est and t not in share_of and t not in tail_times:
                tail_times.append(t)
                break
    a, b = _TAIL_POW
    raw = [a * (TOP + 1 + k) ** b for k in range(len(tail_times))]
    scale = (100.0 - HEAD_SHARE) / sum(raw) if raw else 0.0
    tail_shares = [r * scale for r in raw]
    rng.shuffle(tail_times)
    share_of.update(zip(tail_times, tail_shares))
    # shares to whole jobs: floors, then the largest remainders (ties: the shorter value)
    exact = {t: p * jobs / 100.0 for t, p in share_of.items()}
    counts = {t: math.floor(v) for t, v in exact.items()}
    short = jobs - sum(counts.values())
    for t in sorted(exact, key=lambda t: (-(exact[t] - counts[t]), t))[:max(0, short)]:
        counts[t] += 1
    return {t: n for t, n in sorted(counts.items()) if n > 0}


def assign_estimates(runtimes: list[float], distribution: dict[int, int], rng: random.Random) -> list[float]:
    """Deal the distribution's estimates to jobs with ``runtimes``, none shorter than its job's run
    time, each job (longest first) drawing among those left that are long enough."""
    estimates = sorted((t for t, n in distribution.items() for _ in range(n)), reverse=True)
    if len(estimates) != len(runtimes):
        raise ValueError(f"{len(estimates)} estimates for {len(runtimes)} jobs")
    order = sorted(range(len(runtimes)), key=lambda i: (-runtimes[i], i))
    out = [0.0] * len(runtimes)
    hi = 0
    for j, i in enumerate(order):
        if estimates[j] < runtimes[i]:
            raise ValueError(f"a run time of {runtimes[i]:.0f} s is longer than the estimates left "
                             f"({estimates[j]} s): raise the maximum estimate")
        hi = max(hi, j)
        while hi + 1 < len(estimates) and estimates[hi + 1] >= runtimes[i]:
            hi += 1
        k = rng.randint(j, hi)
        out[i] = float(estimates[k])
        estimates[j], estimates[k] = estimates[k], estimates[j]
    return out


def with_user_estimates(trace: Trace, seed: int, max_est: int | None = None) -> Trace:
    """The trace with every job's estimate (its time limit) drawn by the model, seeded."""
    jobs = trace.jobs
    longest = max((j.runtime_s for j in jobs), default=0.0)
    cap = max_est or max(_HOUR, math.ceil(longest / _HOUR) * _HOUR)
    if longest > cap:
        raise ValueError(f"the maximum estimate {cap} s is shorter than the longest run time {longest:.0f} s")
    rng = random.Random(f"{MODEL}:{seed}")
    distribution = estimate_distribution(len(jobs), cap, rng)
    estimates = assign_estimates([j.runtime_s for j in jobs], distribution, rng)
    out: list[SimJob] = [dataclasses.replace(j, estimate_s=e) for j, e in zip(jobs, estimates)]
    return dataclasses.replace(trace, jobs=out)
