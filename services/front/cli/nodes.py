"""Client commands about nodes: ``horizon nodes`` (like sinfo) and ``horizon node ACTION NODE [TAINT]``."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from events import catalogue as c
from events.resources import ResourceError, format_cpus, format_memory, parse_duration
from services.front.client.client import default_user, query_all, session
from services.front.client.drain import drain_note, plan_lines
from services.front.client.node_commands import send_node_command
from services.front.cli.options import console, nats_option
from services.inventory.core import NODE_ACTIONS
from services.domain.taints import TaintSyntaxError, parse_taint, taint_text

__all__ = ["register"]


@click.command()
@nats_option
@click.option("-t", "--state", "states", multiple=True,
              help="Only nodes in this state: idle, mixed, allocated, cordoned, draining, drained, lost, removed, registered (repeatable).")
@click.option("--gpu-type", default=None, help="Only nodes with this GPU model (a100 also matches a100-80gb).")
@click.option("-n", "--nodes", "names", multiple=True, help="Only these nodes (repeatable).")
@click.option("--limit", type=int, default=None, help="At most this many nodes (default: all).")
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many nodes (paging).")
@click.option("--json", "as_json", is_flag=True)
def nodes(nats_url: str, states: tuple[str, ...], gpu_type: str | None, names: tuple[str, ...], limit: int | None,
          offset: int, as_json: bool) -> None:
    """Nodes with their state, capacity and use (like sinfo).

    KIND says whether a node is this machine as its agent found it or a simulated development node
    (its GPUs are not real devices); ISOLATION how its agent confines jobs (NONE, loudly, when it
    cannot); unhealthy GPUs are counted in GPUS and listed below the table with the reason. BACKEND
    is what offers the node and runs its jobs: agent, slurm or kubernetes (its label
    horizon.io/backend, which --node-selector matches).
    """
    if (limit is not None and limit < 0) or offset < 0:
        raise click.BadParameter("must not be negative", param_hint="--limit/--offset")

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query_all(nc, "nodes", {"states": list(states), "gpu_type": gpu_type, "node": list(names),
                                                 "offset": offset}, "nodes", limit=limit)

    body = asyncio.run(go())
    if as_json:  # the backend by name, the agent's too (it registers none: "")
        click.echo(json.dumps([{**n, "backend": n.get("backend") or "agent"} for n in body["nodes"]]))
        return
    out = console()
    table, notes = nodes_table(body["nodes"])
    out.print(table)
    for note in notes:
        out.print(note)
    if body["total"] > len(body["nodes"]):
        click.echo(f"{len(body['nodes'])} of {body['total']} nodes shown (--offset {offset}"
                   f"{'' if limit is None else f', --limit {limit}'})")


def nodes_table(rows: list[dict[str, Any]]) -> tuple[Table, list[Text]]:
    """The table of ``horizon nodes`` and the lines below it (unhealthy GPUs, unconfined jobs)."""
    table = Table(box=None, header_style="bold")
    for col in ("NODE", "STATE", "KIND", "CPUS(used/total)", "MEMORY(used/total)", "GPUS(used/total)", "GPU TYPES",
                "JOBS", "TAINTS", "ISOLATION", "BACKEND"):
        table.add_column(col)
    notes: list[Text] = []
    for n in rows:
        taints = ",".join(taint_text(c.Taint(**t)) for t in n.get("taints", []))
        unhealthy = n.get("unhealthy") or {}
        gpus = f"{n['gpus_used']}/{n['gpus']}" + (f" ({len(unhealthy)} unhealthy)" if unhealthy else "")
        table.add_row(n["node"], n["state"], "simulated" if n.get("simulated") else "machine",
                      f"{format_cpus(n['cpus_used_milli'])}/{format_cpus(n['cpus_milli'])}"
                      + _overcommit(n.get("cpu_overcommit")),
                      f"{format_memory(n['memory_used_bytes'])}/{format_memory(n['memory_bytes'])}"
                      + _overcommit(n.get("memory_overcommit")),
                      Text(gpus, style="bold red") if unhealthy else gpus, ",".join(n["gpu_types"]) or "-",
                      str(len(n["jobs"])), taints or "-", _isolation(n.get("isolation") or ""),
                      n.get("backend") or "agent")
        for device, why in unhealthy.items():
            notes.append(Text(f"{n['node']} {device} unhealthy: {why}", style="bold red"))
        if _unconfined(n.get("isolation") or ""):
            notes.append(Text(f"{n['node']}: jobs are NOT isolated ({n['isolation']}): no memory, CPU or device "
                              "limits", style="bold red"))
        note = drain_note(n)
        if note:
            notes.append(Text(note))
    return table, notes


def _overcommit(ratio: float | None) -> str:
    """`` x2`` after a node's CPUs or memory when burstable jobs may be packed past them (horizon node set)."""
    return f" x{ratio:g}" if ratio and ratio != 1.0 else ""


def _unconfined(isolation: str) -> bool:
    """The agent said it cannot confine jobs ("none: ...")."""
    return isolation.lower().startswith("none")


def _isolation(isolation: str) -> Text | str:
    if _unconfined(isolation):
        return Text(isolation.upper() if isolation.lower() == "none" else "NONE" + isolation[4:], style="bold red")
    return isolation or "-"


@click.command()
@nats_option
@click.argument("action", type=click.Choice(list(NODE_ACTIONS)))
@click.argument("node")
@click.argument("taint", required=False)
@click.option("--reason", default="")
@click.option("--cpu-overcommit", type=float, default=None,
              help="node set: pack burstable and best-effort jobs' CPU requests against CPUs x this (1: none).")
@click.option("--mem-overcommit", "memory_overcommit", type=float, default=None,
              help="node set: the same for memory.")
@click.option("--migrate", is_flag=True,
              help="drain: checkpoint the node's checkpointable jobs now and requeue them to resume elsewhere.")
@click.option("--deadline", default=None,
              help="drain: stop what still runs on the node this long from now (90, 30m, 2h): requeued, or "
                   "ended if it may not be requeued. Without it the other jobs run to their end.")
@click.option("--grace", default=None,
              help="drain: the time each stopped job gets to checkpoint and exit (as kubectl drain's "
                   "--grace-period; default 30 s).")
@click.option("--json", "as_json", is_flag=True, help="drain: the answer and its plan as JSON.")
def node(nats_url: str, action: str, node: str, taint: str | None, reason: str, cpu_overcommit: float | None,
         memory_overcommit: float | None, migrate: bool, deadline: str | None, grace: str | None,
         as_json: bool) -> None:
    """Cordon, uncordon, drain, remove, taint or untaint a node, or say which datasets it holds (an operator command).

    \b
    horizon node taint NODE KEY[=VALUE]:EFFECT     EFFECT: NoSchedule, PreferNoSchedule or NoExecute;
                                                   a taint with the same key and effect is replaced
    horizon node untaint NODE KEY[=VALUE][:EFFECT] without VALUE or EFFECT: whatever the value or effect
    horizon node add-datasets NODE NAME[,NAME...]  the node holds these datasets (placement's locality
                                                   score prefers it for jobs of --dataset NAME)
    horizon node remove-datasets NODE NAME[,NAME...]
    horizon node set NODE --cpu-overcommit 2 --mem-overcommit 1.5
                                                   overcommit: requests of burstable and best-effort
                                                   jobs packed against capacity x ratio, guaranteed
                                                   jobs' against the capacity (docs/scheduling-policy.md)

    horizon node drain NODE [--migrate] [--deadline 2h] [--grace 5m] [--json]
                                                   no new jobs; --migrate: checkpointable jobs are
                                                   checkpointed and resume elsewhere; --deadline: what
                                                   still runs then is stopped and requeued (ended if
                                                   --no-requeue); prints what happens to each job

    A NoExecute taint also evicts the jobs on the node that do not tolerate it: they are stopped
    (checkpoint signal first, if they have one) and requeued.
    """
    if (migrate or deadline is not None or grace is not None or as_json) and action != "drain":
        raise click.UsageError(f"--migrate, --deadline, --grace and --json are for node drain, not node {action}")
    deadline_s, grace_s = _seconds(deadline, "--deadline"), _seconds(grace, "--grace")
    if action in ("taint", "untaint"):
        if taint is None:
            raise click.UsageError(f"node {action} needs a taint: KEY[=VALUE]:EFFECT")
        try:
            parsed = parse_taint(taint, effect_required=action == "taint")
        except TaintSyntaxError as exc:
            raise click.BadParameter(str(exc), param_hint="TAINT") from None
    elif action in ("add-datasets", "remove-datasets"):
        if not taint:
            raise click.UsageError(f"node {action} needs dataset names: NAME[,NAME...]")
        parsed = None
    elif taint is not None:
        raise click.UsageError(f"node {action} takes no taint")
    elif action == "set" and cpu_overcommit is None and memory_overcommit is None:
        raise click.UsageError("node set needs --cpu-overcommit or --mem-overcommit (or both)")
    else:
        parsed = None
    datasets = sorted({n.strip() for n in taint.split(",") if n.strip()}) if parsed is None and taint else []
    event = c.NodeCommandIssued(ts=time.time(), source="horizon-cli", correlation_id=node, node=node, action=action,
                                reason=reason, user=default_user(), taint=parsed, datasets=datasets,
                                cpu_overcommit=cpu_overcommit if action == "set" else None,
                                memory_overcommit=memory_overcommit if action == "set" else None,
                                migrate=migrate, deadline_s=deadline_s, grace_s=grace_s)

    async def go() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        async with session(nats_url) as nc:
            return await send_node_command(nc, event)

    answer, plan = asyncio.run(go())
    if answer is None:
        raise click.ClickException(f"no answer about {node} within 10 s (the command is in the log)")
    if answer["type"] == "RequestRejected":
        raise click.ClickException(f"node {action} {node}: {answer['reason']}")
    if answer["type"] == "NodeTaintsChanged":
        taints = ", ".join(taint_text(c.Taint(**t)) for t in answer["taints"])
        click.echo(f"{node}: taints {taints}" if taints else f"{node}: no taints")
        return
    if answer["type"] == "NodeDatasetsChanged":
        held = ", ".join(answer["datasets"])
        click.echo(f"{node}: datasets {held}" if held else f"{node}: no datasets")
        return
    if answer["type"] == "NodeDraining":
        if as_json:
            click.echo(json.dumps({**answer, "plan": plan}))
        else:
            click.echo("\n".join(plan_lines(node, answer, plan)))
        return
    if answer["type"] == "NodeOvercommitChanged":
        click.echo(f"{node}: overcommit cpu x{answer['cpu_overcommit']:g}, memory x{answer['memory_overcommit']:g}")
        return
    click.echo(f"{node}: {answer['type'][4:].lower()}")


def _seconds(text: str | None, flag: str) -> float | None:
    """A duration option (90, 30m, 2h) in seconds; None if not given."""
    if text is None:
        return None
    try:
        return parse_duration(text, flag)
    except ResourceError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def register(group: click.Group) -> None:
    group.add_command(nodes)
    group.add_command(node)
