"""Dataset names (``JobSubmitted.datasets``, ``NodeCommandIssued.datasets``): what submission and
inventory accept. Pure. Placement's ``locality`` score is ``services/domain/fit/scores/data.py``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from events.vocabulary import DATASET_NAME_MAX, DATASET_PATTERN, MAX_DATASETS

__all__ = ["check_datasets"]

_NAME = re.compile(DATASET_PATTERN)


def check_datasets(names: Sequence[str], empty_ok: bool = False) -> str:
    """Why these dataset names are refused, or "" (letters, digits and ``_ . : / @ + -``, starting
    with a letter or digit, at most ``DATASET_NAME_MAX`` characters, at most ``MAX_DATASETS``)."""
    if not names and not empty_ok:
        return "datasets: name at least one dataset"
    if len(names) > MAX_DATASETS:
        return f"datasets: {len(names)} names, at most {MAX_DATASETS}"
    for name in names:
        if not isinstance(name, str) or len(name) > DATASET_NAME_MAX or not _NAME.fullmatch(name):
            return (f"datasets: {str(name)[:200]!r} is not a dataset name (letters, digits and _ . : / @ + -, "
                    f"starting with a letter or digit, at most {DATASET_NAME_MAX} characters)")
    return ""
