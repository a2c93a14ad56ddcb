"""Signal names as jobs write them (``USR1``, ``SIGUSR1``, ``10``), read the same on every machine. Pure.

The table is Linux's numbering (the nodes Horizon runs on), written out rather than read from the
``signal`` module of whichever machine validates a submission, so that submission's verdict on a
``LimitSignal`` replays the same anywhere. The agent turns the name into the signal its kernel
knows (``services/nodes/backends/process/signals.py``).
"""

from __future__ import annotations

__all__ = ["SIGNALS", "signal_name", "MAX_SIGNAL_LEAD_S"]

SIGNALS: dict[str, int] = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9, "USR1": 10,
    "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19,
    "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28,
    "IO": 29, "PWR": 30, "SYS": 31,
}
_BY_NUMBER = {number: name for name, number in SIGNALS.items()}
_ALIASES = {"POLL": "IO", "IOT": "ABRT", "CLD": "CHLD"}
MAX_SIGNAL_LEAD_S = 65535  # Slurm's bound on --signal's @TIME


def signal_name(text: str) -> str | None:
    """``"SIGUSR1"``, ``"usr1"`` or ``"10"`` -> ``"USR1"``; a real-time number (34-64) stays a number;
    ``None`` for anything else."""
    value = text.strip().upper()
    if value.isdigit():
        number = int(value)
        if number in _BY_NUMBER:
            return _BY_NUMBER[number]
        return str(number) if 34 <= number <= 64 else None
    name = value.removeprefix("SIG")
    name = _ALIASES.get(name, name)
    return name if name in SIGNALS else None
