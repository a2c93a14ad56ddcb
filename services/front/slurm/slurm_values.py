"""Values in Slurm's syntax, read exactly as Slurm reads them: times, memory sizes, counts, ``--dependency``,
``--gres``/``--gpus`` (output filename patterns: ``services/domain/output.py``).

Pure functions of their text, shared by ``horizon sbatch`` (``services/front/slurm/sbatch.py``) and ``horizon submit``
(its ``--dependency``). A value Horizon cannot honour raises ``Problem`` with an actionable message; the
caller says where the value came from (a script's line, an option).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from events import catalogue as c
from events.resources import ResourceError, parse_gpu_model
from events.subjects import valid_token
from services.domain.hostlist import HostlistError, expand
from services.domain.signals import MAX_SIGNAL_LEAD_S, signal_name

__all__ = ["Problem", "NO_LIMIT", "slurm_time", "slurm_memory", "whole_number", "parse_dependencies",
           "parse_dependency_list", "gpu_spec", "gres", "slurm_signal", "host_list", "slurm_begin",
           "split_datasets", "checkpoint_signal", "parse_checkpoint_signal"]


class Problem(Exception):
    """A problem with one value (located by the caller)."""


_TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 90, 1:30:00, 2-00:00:00), or UNLIMITED"
# (days, hours, minutes, seconds) of each of Slurm's forms (``_get_time`` in Slurm's parse_time.c)
_TIME_RE = [
    (re.compile(r"^(\d+)$"), lambda m: (0, 0, int(m[1]), 0)),
    (re.compile(r"^(\d+):(\d+)$"), lambda m: (0, 0, int(m[1]), int(m[2]))),
    (re.compile(r"^(\d+):(\d+):(\d+)$"), lambda m: (0, int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(r"^(\d+)-(\d+)$"), lambda m: (int(m[1]), int(m[2]), 0, 0)),
    (re.compile(r"^(\d+)-(\d+):(\d+)$"), lambda m: (int(m[1]), int(m[2]), int(m[3]), 0)),
    (re.compile(r"^(\d+)-(\d+):(\d+):(\d+)$"), lambda m: (int(m[1]), int(m[2]), int(m[3]), int(m[4]))),
]
NO_LIMIT = 0.0  # what slurm_time gives for none: 0, UNLIMITED, INFINITE or -1 (JobSubmitted.time_limit_s 0)


def slurm_time(text: str) -> float:
    """Slurm's ``--time``, as its ``time_str2mins`` reads it, in seconds: a bare number is **minutes**,
    ``MM:SS`` minutes and seconds, ``HH:MM:SS`` hours, minutes and seconds; a limit is whole minutes,
    seconds rounded up to the next minute (``"0:05"`` -> 60.0, ``"1:30"`` -> 120.0, ``"90"`` -> 5400.0,
    ``"1-12"`` -> 129600.0). No limit (``0``, ``0:00``, ``UNLIMITED``, ``INFINITE``, ``-1``) is
    ``NO_LIMIT`` (0.0): what it becomes is the caller's (sbatch's ``--time``: the partition's MaxTime,
    else the cluster's longest; docs/slurm.md)."""
    value = text.strip()
    if value.upper() in ("INFINITE", "UNLIMITED", "-1"):
        return NO_LIMIT
    for pattern, parts in _TIME_RE:
        m = pattern.match(value)
        if m:
            days, hours, minutes, seconds = parts(m)
            total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
            return float(-(-total // 60) * 60)  # Slurm: "second values are rounded up to the next minute"
    raise Problem(f"{text!r} is not a time; accepted: {_TIME_FORMS}")


_MEM_RE = re.compile(r"^(\d+)(?:([KMGTkmgt])[Bb]?)?$")
_MEM_MIB = {"": 1, "m": 1, "g": 1 << 10, "t": 1 << 20}  # mebibytes per unit


def slurm_memory(text: str) -> int:
    """Slurm's memory sizes, as its ``str_to_mbytes`` reads them, in bytes: a whole number of mebibytes,
    or with a unit K, M, G or T in either case, which a ``B`` may follow; every unit is binary (``16GB``
    is 16 GiB, ``8000MB`` 8000 MiB), and kibibytes are rounded up to whole mebibytes, since Slurm
    counts memory in MiB (``100K`` is 1 MiB). ``"4G"`` -> 4 GiB; ``"0"`` -> 0 (for ``--mem``: all of
    each node's memory).

    ``horizon submit --memory`` reads its sizes otherwise (``events/resources.py``: ``16GB`` is
    decimal there, as in Kubernetes); this is the ``#SBATCH`` reading only."""
    m = _MEM_RE.match(text.strip())
    if m is None:
        raise Problem(f"{text!r} is not a memory size; accepted: a whole number of megabytes, or with a "
                       "K, M, G or T suffix, which B may follow (4000, 16G, 16GB, 512M)")
    number, unit = int(m[1]), (m[2] or "").lower()
    mebibytes = -(-number // 1024) if unit == "k" else number * _MEM_MIB[unit]
    return mebibytes << 20


def whole_number(text: str, what: str, minimum: int = 1) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) < minimum:
        raise Problem(f"{text!r} is not {what} (a whole number of at least {minimum})")
    return int(value)


_DEP_KINDS = {"after": "after", "afterok": "after-ok", "afternotok": "after-not-ok", "afterany": "after-any",
              "aftercheckpoint": "after-checkpoint", "afterdata": "after-data"}
_DEP_UNSUPPORTED = {
    "aftercorr": "aftercorr (array task by array task) is not supported: Horizon waits for the whole array",
    "afterburstbuffer": "Horizon has no burst buffers",
    "expand": "Horizon does not grow running jobs",
}


def parse_dependencies(text: str) -> list[c.Dependency]:
    """Slurm's ``--dependency``: ``afterok:a:b,afterany:c`` (all must be met); also ``after``, ``afternotok``,
    and Horizon's ``aftercheckpoint`` (the job's first checkpoint) and ``afterdata:NAME`` (a dataset
    announced available; ``after-data`` entries, which ``split_datasets`` takes out).
    ``singleton`` is not a dependency on a job: ``parse_dependency_list`` reads it."""
    deps, singleton = parse_dependency_list(text)
    if singleton:
        raise Problem("singleton is not a dependency on a job here: use horizon sbatch --dependency=singleton")
    return deps


def split_datasets(deps: list[c.Dependency]) -> tuple[list[c.Dependency], list[str]]:
    """(the dependencies on jobs, the datasets of ``afterdata:NAME``: ``JobSubmitted.after_datasets``)."""
    return [d for d in deps if d.kind != "after-data"], [d.job_id for d in deps if d.kind == "after-data"]


def parse_dependency_list(text: str) -> tuple[list[c.Dependency], bool]:
    """``parse_dependencies`` with ``singleton`` (one running job of a name and user at a time) among
    them: (the dependencies on jobs, whether ``singleton`` was given)."""
    singleton = False
    if "?" in text:
        raise Problem("'?' (any one of them) is not supported: Horizon starts a job when every dependency is met; "
                       "separate them with ','")
    out: list[c.Dependency] = []
    for part in text.split(","):
        kind, _, ids = part.strip().partition(":")
        kind = kind.strip().lower()
        if kind == "singleton" and not ids:
            singleton = True
            continue
        if kind in _DEP_UNSUPPORTED:
            raise Problem(_DEP_UNSUPPORTED[kind])
        if kind not in _DEP_KINDS:
            raise Problem(f"{part.strip()!r} is not KIND:JOB[:JOB...]; kinds: {', '.join(_DEP_KINDS)}")
        if not ids:
            raise Problem(f"{part.strip()!r} names no job")
        for job in ids.split(":"):
            if "+" in job:
                raise Problem(f"{kind}:{job}: a delay after the job starts (+minutes) is not supported")
            if not valid_token(job):
                raise Problem(f"{job!r} is not a {'dataset name' if kind == 'afterdata' else 'job id'}")
            out.append(c.Dependency(kind=_DEP_KINDS[kind], job_id=job))
    return out, singleton


def gpu_spec(text: str, what: str) -> tuple[str | None, int]:
    """``[type:]count`` -> (type, count)."""
    if "," in text:
        raise Problem(f"{text!r}: GPUs of several types in one job are not supported")
    kind, sep, count = text.strip().rpartition(":")
    if not sep:
        kind, count = "", count
    n = whole_number(count, f"a number of {what}", minimum=0)
    return _gpu_type(kind), n


def _gpu_type(kind: str) -> str | None:
    if not kind:
        return None
    try:
        return str(parse_gpu_model(kind, "GPU type"))
    except ResourceError as exc:
        raise Problem(f"{kind!r}: {exc.problem}; accepted: {exc.accepted}") from None


def gres(text: str) -> tuple[str | None, int]:
    """``--gres``: ``gpu``, ``gpu:N``, ``gpu:TYPE:N`` or ``gpu:TYPE`` per node; ``none``."""
    if text.strip().lower() == "none":
        return None, 0
    found: tuple[str | None, int] | None = None
    for item in text.split(","):
        item = item.strip()
        if item.startswith("gres/"):
            item = item[5:]
        parts = item.split(":")
        if parts[0] != "gpu":
            raise Problem(f"{parts[0]!r}: only the gpu resource is supported (gpu, gpu:N or gpu:TYPE:N)")
        if found is not None:
            raise Problem(f"{text!r}: GPUs of several types in one job are not supported")
        if len(parts) == 1:
            found = (None, 1)
        elif len(parts) == 2:
            found = (None, whole_number(parts[1], "a number of GPUs", 0)) if parts[1].isdigit() else (_gpu_type(parts[1]), 1)
        elif len(parts) == 3:
            found = (_gpu_type(parts[1]), whole_number(parts[2], "a number of GPUs", 0))
        else:
            raise Problem(f"{item!r} is not gpu[:TYPE][:COUNT]")
    assert found is not None
    return found


def slurm_signal(text: str) -> tuple[c.LimitSignal, bool]:
    """``--signal=[{R|B}:]SIG[@TIME]``: the signal, ``TIME`` seconds (default 60, at most 65535) before the
    time limit, to the batch shell alone with ``B``; and whether ``R`` was given (Slurm's overlap with
    a reservation's MaxStartDelay, which has no meaning here)."""
    value = text.strip()
    flags, colon, rest = value.partition(":")
    if colon and flags and set(flags.upper()) <= {"R", "B"}:
        value = rest
    else:
        flags = ""
    name_text, at, seconds_text = value.partition("@")
    name = signal_name(name_text)
    if name is None:
        raise Problem(f"{name_text!r} is not a signal (a name such as USR1 or SIGUSR1, or a number)")
    before = 60
    if at:
        if not seconds_text.isdigit() or int(seconds_text) > MAX_SIGNAL_LEAD_S:
            raise Problem(f"{seconds_text!r} is not a number of seconds from 0 to {MAX_SIGNAL_LEAD_S}")
        before = int(seconds_text)
    return c.LimitSignal(signal=name, before_s=float(before), batch_only="B" in flags.upper()), "R" in flags.upper()


def checkpoint_signal(name: str) -> str:
    """A signal as ``JobSubmitted.checkpoint_signal`` keeps it: ``SIGUSR1``; a real-time number as it is."""
    return name if name.isdigit() else f"SIG{name}"


def parse_checkpoint_signal(text: str) -> tuple[str, c.LimitSignal | None]:
    """``horizon submit --checkpoint-signal SIG[@SECONDS]``: the job's checkpoint signal, and with
    ``@SECONDS`` the same signal to its main process that long before its time limit (Slurm's
    ``--signal=B:SIG@SECONDS``, from 0 to 65535)."""
    name_text, at, seconds_text = text.strip().partition("@")
    name = signal_name(name_text)
    if name is None:
        raise Problem(f"{name_text!r} is not a signal (a name such as USR1 or SIGUSR1, or a number)")
    if not at:
        return checkpoint_signal(name), None
    if not seconds_text.isdigit() or int(seconds_text) > MAX_SIGNAL_LEAD_S:
        raise Problem(f"{seconds_text!r} is not a number of seconds from 0 to {MAX_SIGNAL_LEAD_S}")
    return checkpoint_signal(name), c.LimitSignal(signal=name, before_s=float(seconds_text), batch_only=True)


def host_list(text: str) -> list[str]:
    """A Slurm host list (``node[01-04],gpu-7``) -> its names, in order."""
    try:
        names = expand(text)
    except HostlistError as exc:
        raise Problem(str(exc)) from None
    if not names:
        raise Problem("names no node")
    return names


_BEGIN_WORDS = {"midnight": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0), "teatime": (16, 0)}
_BEGIN_UNITS = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "min": 60, "mins": 60, "minute": 60,
                "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
                "w": 604800, "week": 604800, "weeks": 604800}
_BEGIN_FORMS = ("HH:MM[:SS] [AM|PM], midnight, noon, elevenses, fika, teatime, today, tomorrow, YYYY-MM-DD, "
                "MM/DD[/YY], MMDDYY, a date and time as YYYY-MM-DDTHH:MM[:SS], or now[+COUNT[seconds|minutes|"
                "hours|days|weeks]]")


def slurm_begin(text: str, now: datetime) -> float:
    """Slurm's ``--begin``: the time (seconds since the epoch) a job may start, read in the time zone of
    ``now`` (the submitter's clock, as sbatch reads it). A time of day already past is tomorrow's; a date
    without a year whose day has passed is next year's; ``now+60`` is in seconds."""
    value = text.strip().lower()
    m = re.fullmatch(r"now(?:\s*\+\s*(\d+)\s*([a-z]*))?", value)
    if m is not None:
        unit = m[2] or ""
        if unit not in _BEGIN_UNITS:
            raise Problem(f"{text!r}: {unit!r} is not a unit of time (seconds, minutes, hours, days, weeks)")
        return now.timestamp() + int(m[1] or 0) * _BEGIN_UNITS[unit]
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if value in ("today", "tomorrow"):
        return (day + timedelta(days=value == "tomorrow")).timestamp()
    date_text, sep, time_text = value.partition("t") if re.match(r"^\d{4}-\d{2}-\d{2}t", value) else ("", "", value)
    if not sep and re.fullmatch(r"\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(?:/\d{2,4})?|\d{6}", value):
        date_text, time_text = value, ""
    clock = _clock(time_text, text) if time_text else (0, 0, 0)
    if not date_text:  # a time of day: today's, or tomorrow's once it has passed
        at = day.replace(hour=clock[0], minute=clock[1], second=clock[2])
        return (at if at > now else at + timedelta(days=1)).timestamp()
    try:
        if "-" in date_text:
            year, month, mday = (int(x) for x in date_text.split("-"))
            guessed_year = False
        elif "/" in date_text:
            parts = [int(x) for x in date_text.split("/")]
            month, mday = parts[0], parts[1]
            year = (parts[2] + 2000 if parts[2] < 100 else parts[2]) if len(parts) == 3 else now.year
            guessed_year = len(parts) == 2
        else:
            month, mday, year = int(date_text[:2]), int(date_text[2:4]), 2000 + int(date_text[4:])
            guessed_year = False
        at = day.replace(year=year, month=month, day=mday, hour=clock[0], minute=clock[1], second=clock[2])
    except ValueError:
        raise Problem(f"{text!r} is not a date; accepted: {_BEGIN_FORMS}") from None
    if guessed_year and at < now:
        at = at.replace(year=at.year + 1)
    return at.timestamp()


def _clock(text: str, whole: str) -> tuple[int, int, int]:
    if text in _BEGIN_WORDS:
        return (*_BEGIN_WORDS[text], 0)
    m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?", text)
    if m is None:
        raise Problem(f"{whole!r} is not a time; accepted: {_BEGIN_FORMS}")
    hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
    if m[4]:
        if not 1 <= hour <= 12:
            raise Problem(f"{whole!r}: {hour} is not an hour of {m[4].upper()}")
        hour = hour % 12 + (12 if m[4] == "pm" else 0)
    if hour > 23 or minute > 59 or second > 59:
        raise Problem(f"{whole!r} is not a time of day")
    return hour, minute, second
