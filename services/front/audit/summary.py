"""The audit's report as JSON (``horizon audit --json``): counts, every mismatch with the fields that
differ, the log's span, the configuration and each service's tally."""

from __future__ import annotations

from typing import Any

from events.codec import decode_json
from services.front.audit.config import AuditConfig
from services.runtime.replay import AuditReport, differing_fields

__all__ = ["summary_json", "mismatch_json"]


def _json_or_text(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return decode_json(text)
    except ValueError:
        return text


def mismatch_json(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    out["recorded"] = _json_or_text(m["recorded"])
    out["replayed"] = _json_or_text(m["replayed"])
    if m["recorded"] is not None and m["replayed"] is not None:
        out["differs"] = differing_fields(m["recorded"].encode(), m["replayed"].encode())
    return out


def summary_json(report: AuditReport, url: str, config: AuditConfig, first: int, last: int | None,
                  hint: str | None) -> dict[str, Any]:
    return {
        "decisions": report.decisions,
        "reproduced": report.reproduced,
        "mismatches": [mismatch_json(m) for m in report.mismatches],
        "observations": report.observations,
        "leader_claims": report.claims,
        "records": report.records,
        "log": {"url": url, "first_seq": report.first_seq, "last_seq": report.last_seq},
        "checked": {"from": first, "to": last if last is not None else report.last_seq},
        "config": config.as_json(),
        "services": {name: vars(t) for name, t in report.services.items()},
        "hint": hint,
    }
