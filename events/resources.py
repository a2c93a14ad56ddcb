"""Resource quantities: parsing of the strings people write, into exact integers.

Everything the scheduler compares is an integer, so that two replays of the
same log can never disagree by a rounding step:

* CPUs are **millicores** (``2.5`` -> 2500, ``"500m"`` -> 500, ``"2"`` -> 2000);
* memory is **bytes**;
* a GPU model is a ``GpuModel`` (type, variant), written ``a100`` or ``h100-80gb``.

Memory units. Horizon's users come from Slurm and from Kubernetes, whose
single-letter suffixes disagree (Slurm's ``--mem=8G`` is 8 GiB, Kubernetes'
``8G`` is 8 * 10^9 and its ``512m`` is half a byte). We follow Slurm for
single letters because ``#SBATCH`` scripts are where such strings come from,
and accept the explicit forms of both worlds:

===================  ==========================================
form                 meaning
===================  ==========================================
``1073741824``       bytes (an integer, or a string of digits)
``512k 512m 8g 2t``  binary, any case: KiB, MiB, GiB, TiB (Slurm)
``16Ki 16Mi 16Gi``   binary (Kubernetes), also ``Ti``, ``Pi``
``16KB 16MB 16GB``   decimal (SI), also ``TB``, ``PB``
===================  ==========================================

Every error is a ``ResourceError`` that names the field, repeats the value
and lists the accepted forms, so a rejection can be shown to a person as is.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

__all__ = [
    "ResourceError",
    "GpuModel",
    "parse_cpus",
    "parse_memory",
    "parse_gpu_model",
    "parse_count",
    "parse_duration",
    "format_memory",
    "format_cpus",
]


class ResourceError(ValueError):
    """A resource value that cannot be understood; the message says why and what is allowed."""

    def __init__(self, field: str, value: object, problem: str, accepted: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.accepted = accepted
        super().__init__(f"{field}: {value!r} {problem}; accepted: {accepted}")


MEMORY_FORMS = (
    "bytes as an integer (1073741824) or a number with a unit: "
    "512m, 8g, 2t (binary, Slurm style), 16Mi, 16Gi (binary), 16MB, 16GB (decimal)"
)
CPU_FORMS = "a positive number of cores (2, 2.5, \"4\") or millicores (\"500m\")"
GPU_MODEL_FORMS = "a GPU type, optionally with a variant: a100, h100, h100-80gb, a100-40gb"
DURATION_FORMS = (
    "seconds (90), a number with a unit (30s, 10m, 2h, 1d), or Slurm's "
    "[days-]hours:minutes:seconds (1-02:00:00, 02:30:00, 90:00)"
)

_KI = 1024
_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    # single letters, any case: binary (Slurm)
    "k": _KI, "m": _KI**2, "g": _KI**3, "t": _KI**4, "p": _KI**5,
    # Kubernetes binary suffixes
    "ki": _KI, "mi": _KI**2, "gi": _KI**3, "ti": _KI**4, "pi": _KI**5,
    # SI decimal
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
}
# Suffixes as typed, mapped to the table key; "Gi" is binary but "gi" typed in
# lower case is accepted too (nobody means anything else by it).
_MEMORY_RE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<unit>[A-Za-z]*)\s*$")
# Largest memory we accept for one request: 1 EiB (a typo guard, not a limit of any cluster).
MAX_MEMORY_BYTES = 2**60


def parse_memory(value: object, field: str = "memory") -> int:
    """Parse a memory size into bytes. ``"16Gi"`` -> 17179869184."""
    if isinstance(value, bool):
        raise ResourceError(field, value, "is a boolean, not a memory size", MEMORY_FORMS)
    if isinstance(value, int):
        amount = Decimal(value)
        unit = ""
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ResourceError(field, value, "is not a finite number", MEMORY_FORMS)
        amount = Decimal(repr(value))
        unit = ""
    elif isinstance(value, str):
        match = _MEMORY_RE.match(value)
        if match is None:
            raise ResourceError(field, value, "is not a memory size", MEMORY_FORMS)
        try:
            amount = Decimal(match["num"])
        except InvalidOperation:  # pragma: no cover - the regex admits only decimals
            raise ResourceError(field, value, "is not a memory size", MEMORY_FORMS) from None
        unit = match["unit"]
        if unit.lower() not in _UNITS:
            raise ResourceError(field, value, f"has an unknown unit {unit!r}", MEMORY_FORMS)
    else:
        raise ResourceError(field, value, f"is a {type(value).__name__}, not a memory size", MEMORY_FORMS)
    if amount < 0:
        raise ResourceError(field, value, "is negative", MEMORY_FORMS)
    total = amount * _UNITS[unit.lower()]
    if total != total.to_integral_value():
        # 1.5k is 1536 bytes; 0.3 bytes is nonsense. Round up to whole bytes only
        # when a unit was given (a fractional byte count without unit is an error).
        if unit == "" or unit.lower() == "b":
            raise ResourceError(field, value, "is a fractional number of bytes", MEMORY_FORMS)
        total = total.to_integral_value(rounding="ROUND_CEILING")
    result = int(total)
    if result > MAX_MEMORY_BYTES:
        raise ResourceError(field, value, "is larger than 1 EiB", MEMORY_FORMS)
    return result


_CPU_RE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<milli>m?)\s*$")
MAX_CPUS_MILLI = 10**9  # a million cores: a typo guard


def parse_cpus(value: object, field: str = "cpus") -> int:
    """Parse a CPU amount into millicores. ``2.5`` -> 2500, ``"500m"`` -> 500.

    Fractions finer than a millicore are rounded up (asking for 0.0001 cores
    still asks for something).
    """
    if isinstance(value, bool):
        raise ResourceError(field, value, "is a boolean, not a CPU amount", CPU_FORMS)
    if isinstance(value, int):
        milli = Decimal(value) * 1000
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ResourceError(field, value, "is not a finite number", CPU_FORMS)
        milli = Decimal(repr(value)) * 1000
    elif isinstance(value, str):
        match = _CPU_RE.match(value)
        if match is None:
            raise ResourceError(field, value, "is not a CPU amount", CPU_FORMS)
        num = Decimal(match["num"])
        milli = num if match["milli"] else num * 1000
    else:
        raise ResourceError(field, value, f"is a {type(value).__name__}, not a CPU amount", CPU_FORMS)
    if milli < 0:
        raise ResourceError(field, value, "is negative", CPU_FORMS)
    result = int(milli.to_integral_value(rounding="ROUND_CEILING"))
    if result > MAX_CPUS_MILLI:
        raise ResourceError(field, value, "is more than a million cores", CPU_FORMS)
    return result


def parse_count(value: object, field: str, *, minimum: int = 0, maximum: int = 1_000_000) -> int:
    """A whole count (GPUs, nodes, tasks) within bounds."""
    accepted = f"a whole number from {minimum} to {maximum}"
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ResourceError(field, value, "is not a whole number", accepted)
    if value < minimum:
        problem = "is negative" if value < 0 else f"is below the minimum of {minimum}"
        raise ResourceError(field, value, problem, accepted)
    if value > maximum:
        raise ResourceError(field, value, f"is above the maximum of {maximum}", accepted)
    return value


class GpuModel(NamedTuple):
    """A GPU model as the scheduler matches it: ``type`` (``h100``) and optional ``variant`` (``80gb``)."""

    type: str
    variant: str | None = None

    def __str__(self) -> str:
        return self.type if self.variant is None else f"{self.type}-{self.variant}"


_GPU_RE = re.compile(r"^[a-z0-9][a-z0-9_]*(?:-[a-z0-9][a-z0-9_.]*)?$")


def parse_gpu_model(value: object, field: str = "gpu_type") -> GpuModel:
    """``"h100-80gb"`` -> GpuModel("h100", "80gb"); case-insensitive; the first ``-`` splits type from variant."""
    if not isinstance(value, str):
        raise ResourceError(field, value, f"is a {type(value).__name__}, not a GPU model", GPU_MODEL_FORMS)
    text = value.strip().lower()
    if not text or len(text) > 64 or _GPU_RE.match(text) is None:
        raise ResourceError(field, value, "is not a GPU model", GPU_MODEL_FORMS)
    gpu_type, _, variant = text.partition("-")
    return GpuModel(gpu_type, variant or None)


_DURATION_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>s|sec|m|min|h|hr|d|day|days)?\s*$", re.I)
_CLOCK_RE = re.compile(r"^\s*(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?\s*$")
_DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400, "days": 86400}


def parse_duration(value: object, field: str = "time_limit") -> float:
    """Parse a duration into seconds: ``90``, ``"10m"``, ``"2h"``, ``"1-02:00:00"``, ``"30:00"``.

    Slurm's bare ``--time=30`` means 30 *minutes*; here a bare number is
    seconds (the unit of every ``*_s`` field), and the ``sbatch`` reader
    converts Slurm's forms before they reach this function.
    """
    if isinstance(value, bool):
        raise ResourceError(field, value, "is a boolean, not a duration", DURATION_FORMS)
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise ResourceError(field, value, "is not a non-negative finite number", DURATION_FORMS)
        return float(value)
    if not isinstance(value, str):
        raise ResourceError(field, value, f"is a {type(value).__name__}, not a duration", DURATION_FORMS)
    match = _DURATION_RE.match(value)
    if match is not None:
        unit = (match["unit"] or "s").lower()
        return float(Decimal(match["num"]) * _DURATION_UNITS[unit])
    match = _CLOCK_RE.match(value)
    if match is not None and (match["b"] is not None or match["days"] is not None):
        days = int(match["days"] or 0)
        parts = [int(p) for p in (match["a"], match["b"], match["c"]) if p is not None]
        if len(parts) == 3:
            hours, minutes, seconds = parts
        elif len(parts) == 2 and match["days"] is not None:
            hours, minutes, seconds = parts[0], parts[1], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[0], 0, 0
        return float(days * 86400 + hours * 3600 + minutes * 60 + seconds)
    raise ResourceError(field, value, "is not a duration", DURATION_FORMS)


def format_memory(num_bytes: int) -> str:
    """Bytes to the shortest exact binary form: 17179869184 -> ``16Gi``; else one decimal."""
    for suffix, size in (("Pi", _KI**5), ("Ti", _KI**4), ("Gi", _KI**3), ("Mi", _KI**2), ("Ki", _KI)):
        if num_bytes >= size:
            if num_bytes % size == 0:
                return f"{num_bytes // size}{suffix}"
            return f"{num_bytes / size:.1f}{suffix}"
    return str(num_bytes)


def format_cpus(milli: int) -> str:
    """Millicores to cores as people write them: 2500 -> ``2.5``, 2000 -> ``2``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli / 1000:g}"


# --------------------------------------------------------------------------
# The same rules as regular expressions, for the published JSON Schema
# (events/asyncapi.py). They are written in the subset of syntax that Python
# and JSON Schema (ECMA-262) read alike, and tests/contract/test_asyncapi.py holds them
# against the parsers above, string by string.
# --------------------------------------------------------------------------

_DECIMAL = r"(?:\d+(?:\.\d*)?|\.\d+)"
_WHOLE = r"(?:\d+(?:\.0*)?|\.0+)"  # a decimal that is a whole number: 512, 512., 512.00
_ZERO = r"(?:0+(?:\.0*)?|\.0+)"
_NONZERO = r"(?=[0-9.]*[1-9])"  # the number ahead has a digit other than 0


def _any_case(text: str) -> str:
    return "".join(f"[{ch.lower()}{ch.upper()}]" if ch.isalpha() else re.escape(ch) for ch in text)


def memory_pattern(*, positive: bool = False) -> str:
    """The memory strings ``parse_memory`` accepts (``positive``: and that are more than 0 bytes).

    A number then a unit of ``_UNITS`` in any case, blanks around and between them allowed; a number
    without a unit or with ``b`` must be whole (a fraction of a byte is refused), with another unit
    it may have a fraction (rounded up to whole bytes); ``-`` only before a zero. What no pattern
    says: at most ``MAX_MEMORY_BYTES``.
    """
    scaled = "|".join(_any_case(unit) for unit in sorted(_UNITS, key=lambda u: (-len(u), u)) if unit not in ("", "b"))
    lead = _NONZERO if positive else ""
    forms = [rf"\+?{lead}{_WHOLE}\s*(?:[bB])?", rf"\+?{lead}{_DECIMAL}\s*(?:{scaled})"]
    if not positive:
        forms.append(rf"-{_ZERO}\s*(?:[bB]|{scaled})?")
    return rf"^\s*(?:{'|'.join(forms)})\s*$"


def cpus_pattern(*, positive: bool = True) -> str:
    """The CPU strings ``parse_cpus`` accepts: cores (``"2"``, ``"0.5"``) or millicores (``"500m"``, a
    lower-case ``m`` only); ``positive``: more than 0 after rounding up to a millicore, as submission
    requires. What no pattern says: at most a million cores."""
    if positive:
        return rf"^\s*\+?{_NONZERO}{_DECIMAL}\s*m?\s*$"
    return rf"^\s*(?:\+?{_DECIMAL}|-{_ZERO})\s*m?\s*$"


# Letters in any case (the parser lowers them), blanks around (it strips them), at most 64 characters.
GPU_MODEL_PATTERN = r"^\s*(?=\S{1,64}\s*$)[A-Za-z0-9][A-Za-z0-9_]*(?:-[A-Za-z0-9][A-Za-z0-9_.]*)?\s*$"
