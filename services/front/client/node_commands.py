"""An operator's command about a node (``horizon node ...``, the dashboard's cordon and uncordon),
sent on ``horizon.in._admin.node`` and answered by inventory on ``horizon.evt.inventory.*.<node>``."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Collection
from typing import Any

from events import catalogue as c
from events.subjects import admin_subject
from services.front.client.client import await_answer, publish_input
from services.front.client.drain import PLAN_SUBJECT, collect_plan

__all__ = ["NODE_ANSWERS", "send_node_command"]

NODE_ANSWERS = frozenset({"NodeCordoned", "NodeUncordoned", "NodeDraining", "NodeRemoved", "NodeTaintsChanged",
                          "NodeDatasetsChanged", "NodeOvercommitChanged", "RequestRejected"})


async def send_node_command(nc: Any, event: c.NodeCommandIssued, answers: Collection[str] = NODE_ANSWERS,
                            timeout_s: float = 10.0) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Publish ``event`` and wait for inventory's answer to it (None: none within ``timeout_s``); with a
    drain's answer, its plan job by job (``services/front/client/drain.py``)."""
    node, action = event.node, event.action
    sub = await nc.subscribe(f"horizon.evt.inventory.*.{node}")
    plans = await nc.subscribe(PLAN_SUBJECT) if action == "drain" else None  # the drain's plan, per job
    try:
        seq = await publish_input(nc, admin_subject("node"), event, msg_id=f"node/{node}/{action}/{uuid.uuid4().hex}")
        # The answer names its request (causation seq:<n>): another operator's command about
        # the same node, answered meanwhile, is not ours.
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            answer = await await_answer(sub, set(answers), timeout_s=left)
            if answer is None:
                return None, []
            if answer.get("causation_id") == f"seq:{seq}":
                draining = plans is not None and answer["type"] == "NodeDraining"
                return answer, (await collect_plan(plans, answer, []) if draining else [])
        return None, []
    finally:
        for s in (sub, plans):
            if s is not None:
                with contextlib.suppress(Exception):
                    await s.unsubscribe()
