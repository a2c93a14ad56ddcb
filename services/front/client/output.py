"""A job's output, from the agent of the node that ran it (``horizon.logs.<node>``,
``services/nodes/agent/logs.py``): what ``horizon logs`` copies and the dashboard's job page shows."""

from __future__ import annotations

import base64
import json
from typing import Any

from events.codec import decode_json
from services.runtime.log import LogError

__all__ = ["output_chunk", "output_tail"]


async def output_chunk(nc: Any, node: str, request: dict[str, Any]) -> dict[str, Any]:
    """One chunk of an attempt's stream (``request``: job_id, attempt, stream, offset); LogError when the
    agent does not answer or answers an error."""
    import nats.errors

    try:
        msg = await nc.request(f"horizon.logs.{node}", json.dumps(request).encode(), timeout=10)
    except nats.errors.NoRespondersError:
        raise LogError(f"the agent of node {node} does not answer (horizon.logs.{node}): is it running?") from None
    except nats.errors.TimeoutError:
        raise LogError(f"the agent of node {node} did not answer within 10 s") from None
    answer = json.loads(msg.data)
    if "error" in answer:
        raise LogError(answer["error"])
    return answer  # type: ignore[no-any-return]


async def output_tail(nc: Any, body: dict[str, Any], tenant: str | None = None) -> dict[str, Any]:
    """The tail of the latest attempt's standard output of the job ``body`` describes (a ``job`` query's
    answer), or a note saying why there is none; ``tenant``: asked on the tenant's scoped subject."""
    import nats.errors

    row = body["job"]
    attempts = {a["attempt"]: a for a in body.get("attempts") or []}
    found = attempts.get(row.get("attempt") or 0)
    node = ((found or {}).get("node") or "").split(",")[0]
    if not node:
        return {"text": "", "note": "it has not run yet"}
    subject = f"horizon.logs.{node}" + (f".{tenant}" if tenant is not None else "")
    ask = {"job_id": row["job_id"], "attempt": row["attempt"], "stream": "stdout", "offset": -4096}
    try:
        msg = await nc.request(subject, json.dumps(ask).encode(), timeout=3)
        answer = decode_json(msg.data)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError, ValueError):
        return {"text": "", "note": f"the agent of {node} does not answer"}
    if "error" in answer:
        return {"text": "", "note": str(answer["error"])}
    return {"text": base64.b64decode(answer.get("data") or "").decode("utf-8", "replace"), "node": node,
            "size": answer.get("size")}
