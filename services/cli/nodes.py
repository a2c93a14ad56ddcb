"""Client commands about nodes: ``horizon nodes`` (like sinfo) and ``horizon node ACTION NODE``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import click
from rich.table import Table

from events import catalogue as c
from events.resources import format_cpus, format_memory
from events.subjects import admin_subject
from services.cli.client import await_answer, default_user, publish_input, query, session
from services.cli.jobs import console, nats_option
from services.inventory.core import NODE_ACTIONS

__all__ = ["register"]


@click.command()
@nats_option
@click.option("--json", "as_json", is_flag=True)
def nodes(nats_url: str, as_json: bool) -> None:
    """Nodes with their state, capacity and use (like sinfo)."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query(nc, "nodes", {})

    body = asyncio.run(go())
    if as_json:
        click.echo(json.dumps(body["nodes"]))
        return
    table = Table(box=None, header_style="bold")
    for col in ("NODE", "STATE", "CPUS(used/total)", "MEMORY(used/total)", "GPUS(used/total)", "GPU TYPES", "JOBS"):
        table.add_column(col)
    for n in body["nodes"]:
        table.add_row(n["node"], n["state"], f"{format_cpus(n['cpus_used_milli'])}/{format_cpus(n['cpus_milli'])}",
                      f"{format_memory(n['memory_used_bytes'])}/{format_memory(n['memory_bytes'])}",
                      f"{n['gpus_used']}/{n['gpus']}", ",".join(n["gpu_types"]) or "-", str(len(n["jobs"])))
    console().print(table)


@click.command()
@nats_option
@click.argument("action", type=click.Choice(list(NODE_ACTIONS)))
@click.argument("node")
@click.option("--reason", default="")
def node(nats_url: str, action: str, node: str, reason: str) -> None:
    """Cordon, uncordon, drain or remove a node (an operator command)."""
    event = c.NodeCommandIssued(ts=time.time(), source="horizon-cli", correlation_id=node, node=node, action=action,
                                reason=reason, user=default_user())

    async def go() -> dict[str, Any] | None:
        async with session(nats_url) as nc:
            sub = await nc.subscribe(f"horizon.evt.inventory.*.{node}")
            await publish_input(nc, admin_subject("node"), event, msg_id=f"node/{node}/{action}/{uuid.uuid4().hex}")
            return await await_answer(sub, {"NodeCordoned", "NodeUncordoned", "NodeDraining", "NodeRemoved",
                                            "RequestRejected"}, timeout_s=10.0)

    answer = asyncio.run(go())
    if answer is None:
        raise click.ClickException(f"no answer about {node} within 10 s (the command is in the log)")
    if answer["type"] == "RequestRejected":
        raise click.ClickException(f"node {action} {node}: {answer['reason']}")
    click.echo(f"{node}: {answer['type'][4:].lower()}")


def register(group: click.Group) -> None:
    group.add_command(nodes)
    group.add_command(node)
