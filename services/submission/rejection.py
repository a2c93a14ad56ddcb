"""``Rejection``: why a submission is refused, naming the field, what was wrong and what is allowed. Pure.

Raised by the steps of ``services.submission.normalise`` and the checks against the log in
``services.submission.against_log``; ``JobRejected.reason`` shows it to the person who submitted.
"""

from __future__ import annotations

__all__ = ["Rejection", "choice"]


class Rejection(Exception):
    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    """``value`` if it is one of ``allowed``, else the ``Rejection`` listing them."""
    if value not in allowed:
        raise Rejection(field, f"{value!r} is not one of {', '.join(allowed)}")
    return value
