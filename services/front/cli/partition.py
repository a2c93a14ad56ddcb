"""Partitions on the command line: ``horizon partition set|remove|list`` (operators) and ``horizon sinfo``.

``horizon partition set NAME`` changes the options it is given and keeps the others (as Slurm's
``scontrol update PartitionName=...``): it reads the partition's configuration from the
scheduler's view (``horizon.query.partitions``), publishes the whole of it with the changes as a
``PartitionConfigured`` on ``horizon.in._admin.partition``, and waits until the scheduler has
applied it or says why not (``policy.configure``). ``--unknown default|reject`` sets the cluster's
rule for a partition name it does not define (``PartitionPolicyConfigured``), with or without NAME.

``horizon sinfo`` is Slurm's ``sinfo`` over the partitions and the nodes read models: one line per
partition and node state (``-N``: per node and partition; ``-s``: per partition), with its
columns, ``-o`` format letters, ``-p``/``-t``/``-n`` filters and ``--json``. Node states are
Slurm's: idle, mix, alloc, drain (cordoned or drained), drng (draining with jobs), down* (lost),
unk (registered, not ready yet); the lines themselves: ``services/front/slurm/sinfo_format.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import click

from events import catalogue as c
from events.subjects import valid_partition
from events.vocabulary import PARTITION_STATES, PRIORITY_TIER_MAX, UNKNOWN_PARTITION
from services.front.client.client import default_user, query, query_all, session
from services.front.cli.options import nats_option
from services.front.cli.slurm_getopt import SlurmCommand
from services.front.client.configure import configure
from services.front.slurm.sinfo_format import (DEFAULT_FORMAT, LONG_FORMAT, NODE_FORMAT, NODE_LONG_FORMAT,
                                               SUMMARY_FORMAT, FormatError, availability, limit_text, memory_text,
                                               node_state, parse_format, partition_members, sinfo_lines, sinfo_rows)
from services.front.slurm.slurm_values import Problem, slurm_memory, slurm_time
from services.domain.hostlist import HostlistError, NodePattern, compress, expand
from services.runtime.log import LogError

__all__ = ["partition", "sinfo", "register"]

_NONE = ("none", "unlimited", "infinite", "")


# --------------------------------------------------------------------------
# horizon partition
# --------------------------------------------------------------------------


@click.group()
def partition() -> None:
    """Partitions: named sets of nodes with defaults and limits, as Slurm's (operators)."""


def _names(text: str, hint: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not re.match(r"^[A-Za-z0-9_-]{1,128}$", name):
            raise click.BadParameter(f"{name!r} must be 1-128 letters, digits, '_' or '-'", param_hint=hint)
    return names


def _time(text: str | None, hint: str) -> float | None | bool:
    """A Slurm time (a bare number is minutes); ``UNLIMITED``: none; not given: False (unchanged)."""
    if text is None:
        return False
    if text.strip().lower() in _NONE:
        return None
    try:
        return slurm_time(text) or None  # 0 is no limit, as UNLIMITED (slurm_time's NO_LIMIT)
    except Problem as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def _memory(text: str | None, hint: str) -> int | None | bool:
    """A Slurm memory size (a bare number is megabytes); ``none``: unset; not given: False."""
    if text is None:
        return False
    if text.strip().lower() in _NONE:
        return None
    try:
        return slurm_memory(text)
    except Problem as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


async def _current(nats_url: str, name: str) -> dict[str, Any] | None:
    async with session(nats_url) as nc:
        body = await query(nc, "partitions", {"name": name})
    return next((row for row in body["partitions"] if row["name"] == name), None)


@partition.command(name="set")
@nats_option
@click.argument("name", required=False)
@click.option("--nodes", "nodes", multiple=True,
              help="Its nodes: a Slurm host list (node[01-04],gpu-7), a glob (gpu-*) or ALL (repeatable; "
                   "replaces the list).")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE its nodes must also have (repeatable; replaces).")
@click.option("--default/--no-default", "default", default=None,
              help="The partition of jobs that name none (one at a time: the last set wins).")
@click.option("--state", type=click.Choice(PARTITION_STATES), default=None,
              help="up; down (jobs are accepted and wait); drain (no new jobs; those accepted run).")
@click.option("--max-time", default=None, help="MaxTime, as Slurm's --time (90 = 90 minutes, 1-00:00:00); "
                                               "UNLIMITED: none.")
@click.option("--default-time", default=None, help="DefaultTime of jobs that give none (else MaxTime).")
@click.option("--def-mem-per-cpu", default=None, help="DefMemPerCPU: memory per CPU of a job that gives "
                                                      "none (4000 = MB, 4G); none: unset.")
@click.option("--def-mem-per-gpu", default=None, help="DefMemPerGPU: memory per GPU of a job with GPUs "
                                                      "that gives none.")
@click.option("--max-nodes", default=None, help="MaxNodes of a job; UNLIMITED: none.")
@click.option("--allow-accounts", default=None, help="AllowAccounts: a,b (ALL: any).")
@click.option("--allow-qos", default=None, help="AllowQos: a,b (ALL: any).")
@click.option("--priority-tier", type=click.IntRange(0, PRIORITY_TIER_MAX), default=None,
              help="PriorityTier: a higher tier's pending jobs are considered first.")
@click.option("--profile", default=None, help="The placement profile of its jobs (horizon profile set); "
                                              "'' for default.")
@click.option("--unknown", type=click.Choice(UNKNOWN_PARTITION), default=None,
              help="The cluster's rule for a partition name it does not define: run in the default "
                   "partition with a warning, or reject the job (as Slurm).")
@click.option("--json", "as_json", is_flag=True)
def set_partition(nats_url: str, name: str | None, nodes: tuple[str, ...], labels: tuple[str, ...],
                  default: bool | None, state: str | None, max_time: str | None, default_time: str | None,
                  def_mem_per_cpu: str | None, def_mem_per_gpu: str | None, max_nodes: str | None,
                  allow_accounts: str | None, allow_qos: str | None, priority_tier: int | None, profile: str | None,
                  unknown: str | None, as_json: bool) -> None:
    """Create a partition or change the options given (the others stay): horizon partition set gpu
    --nodes 'gpu-[01-04]' --max-time 2-00:00:00 --def-mem-per-gpu 64G."""
    changes: dict[str, Any] = {}
    if nodes:
        try:
            NodePattern(nodes)
        except HostlistError as exc:
            raise click.BadParameter(str(exc), param_hint="--nodes") from None
        changes["nodes"] = list(nodes)
    if labels:
        pairs = {}
        for item in labels:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--label")
            pairs[key] = value
        changes["node_labels"] = pairs
    for field, value in (("default", default), ("state", state), ("priority_tier", priority_tier),
                         ("profile", profile)):
        if value is not None:
            changes[field] = value
    for field, value in (("max_time_s", _time(max_time, "--max-time")),
                         ("default_time_s", _time(default_time, "--default-time")),
                         ("default_mem_per_cpu", _memory(def_mem_per_cpu, "--def-mem-per-cpu")),
                         ("default_mem_per_gpu", _memory(def_mem_per_gpu, "--def-mem-per-gpu"))):
        if value is not False:
            changes[field] = value
    if max_nodes is not None:
        if max_nodes.strip().lower() in _NONE:
            changes["max_nodes"] = None
        elif not max_nodes.strip().isdigit() or int(max_nodes) < 1:
            raise click.BadParameter(f"{max_nodes!r} is not a number of nodes (1 or more, or UNLIMITED)",
                                     param_hint="--max-nodes")
        else:
            changes["max_nodes"] = int(max_nodes)
    for field, text, hint in (("allowed_accounts", allow_accounts, "--allow-accounts"),
                              ("allowed_qos", allow_qos, "--allow-qos")):
        if text is not None:
            changes[field] = [] if text.strip().upper() in ("ALL", "") else _names(text, hint)
    if name is None and (changes or unknown is None):
        raise click.UsageError("name the partition: horizon partition set NAME [OPTIONS] (only --unknown "
                               "goes without one)")
    results = []
    if name is not None:
        if not valid_partition(name):  # Slurm's test.q too
            raise click.BadParameter(f"{name!r} must be 1-128 letters, digits, '_', '-' or '.'", param_hint="NAME")
        current = asyncio.run(_current(nats_url, name))
        base: dict[str, Any] = {}
        if current is not None:
            base = {f: current[f] for f in c.PartitionConfigured.__struct_fields__ if f in current}
            base["default"] = current["default"]
        elif not (changes.get("nodes") or changes.get("node_labels")):
            raise click.UsageError(f"partition {name!r} is new: give its nodes (--nodes HOSTLIST, a glob or ALL) "
                                   "or --label KEY=VALUE")
        fields = {**base, **changes, "name": name, "user": default_user(), "removed": False}
        event = c.PartitionConfigured(ts=time.time(), source="horizon-cli", **fields)
        result = configure(nats_url, "partition", event)
        results.append(result)
        if not as_json:
            _report(result, f"partition {name}")
    if unknown is not None:
        event = c.PartitionPolicyConfigured(ts=time.time(), source="horizon-cli", unknown=unknown, user=default_user())
        result = configure(nats_url, "partition-policy", event)
        results.append(result)
        if not as_json:
            _report(result, f"unknown partition names: {unknown}")
    if as_json:
        click.echo(json.dumps(results[0] if len(results) == 1 else results))
        for result in results:
            if result["applied"] is False:
                raise click.ClickException(f"rejected: {result['reason']}")


@partition.command(name="remove")
@nats_option
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def remove_partition(nats_url: str, name: str, as_json: bool) -> None:
    """Withdraw a partition (its pending jobs wait until it exists again; running ones go on)."""
    event = c.PartitionConfigured(ts=time.time(), source="horizon-cli", name=name, removed=True, user=default_user())
    result = configure(nats_url, "partition", event)
    if as_json:
        click.echo(json.dumps(result))
        if result["applied"] is False:
            raise click.ClickException(f"rejected: {result['reason']}")
        return
    _report(result, f"partition {name} removal")


@partition.command(name="list")
@nats_option
@click.option("--json", "as_json", is_flag=True, help="The partitions as the scheduler's view answers.")
def list_partitions(nats_url: str, as_json: bool) -> None:
    """Every partition: nodes, default, state, limits, defaults, tier, profile."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query_all(nc, "partitions", {}, "partitions")

    body = asyncio.run(go())
    if as_json:
        click.echo(json.dumps({"partitions": body["partitions"], "default": body.get("default"),
                               "unknown": body.get("unknown")}))
        return
    header = ("PARTITION", "STATE", "NODES", "MEMBERS", "MAXTIME", "DEFTIME", "DEFMEM", "MAXNODES", "TIER",
              "ACCOUNTS", "QOS", "PROFILE")
    rows = [header]
    for row in body["partitions"]:
        mem = "/".join(x for x in (memory_text(row["default_mem_per_cpu"], "cpu"), memory_text(row["default_mem_per_gpu"], "gpu"))
                       if x) or "-"
        nodes = ",".join(row["nodes"]) + "".join(f" {k}={v}" for k, v in sorted(row["node_labels"].items()))
        rows.append((row["name"] + ("*" if row["default"] else ""), row["state"], nodes.strip() or "-",
                     f"{row['total_nodes']}", limit_text(row["max_time_s"]), limit_text(row["default_time_s"], "-"), mem,
                     str(row["max_nodes"] or "-"), str(row["priority_tier"]), ",".join(row["allowed_accounts"]) or "ALL",
                     ",".join(row["allowed_qos"]) or "ALL", row["profile"] or "default"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    click.echo(f"unknown partition names: {body.get('unknown', 'default')}"
               + (" (run in the default partition, with a warning)" if body.get("unknown") != "reject"
                  else " (rejected at submit)"))


def _report(result: dict[str, Any], what: str) -> None:
    if result["applied"]:
        click.echo(f"{what} applied (log seq {result['seq']})")
    elif result["applied"] is None:
        click.echo(f"{what} published (log seq {result['seq']}); {result['reason']}")
    else:
        raise click.ClickException(f"{what} rejected: {result['reason']}")


@click.command(cls=SlurmCommand, context_settings={"help_option_names": ["--help"]})
@nats_option
@click.option("-p", "--partition", "partitions", multiple=True, help="Only these partitions (a,b; repeatable).")
@click.option("-N", "--Node", "node_oriented", is_flag=True, help="One line per node (and partition).")
@click.option("-s", "--summarize", is_flag=True, help="One line per partition: nodes allocated/idle/other/total.")
@click.option("-l", "--long", is_flag=True, help="More columns, state names in full.")
@click.option("-o", "--format", "fmt", default=None,
              help="sinfo's format: %[.][WIDTH]FIELD; %P partition (* default), %R name, %a avail, %l time limit, "
                   "%L default time, %D nodes, %F nodes A/I/O/T, %t/%T state, %N node list, %c CPUs, "
                   "%C CPUs A/I/O/T, %m memory (MB), %G GRES, %s job size, %p priority tier.")
@click.option("-t", "--states", "states", default=None, help="Only nodes in these states (idle,mix,alloc,drain,...).")
@click.option("-n", "--nodes", "nodelist", default=None, help="Only these nodes (a host list).")
@click.option("-h", "--noheader", is_flag=True)
@click.option("-a", "--all", "show_all", is_flag=True, help="Accepted: Horizon hides no partition.")
@click.option("-e", "--exact", is_flag=True, help="Accepted: nodes are grouped by state only.")
@click.option("--json", "as_json", is_flag=True, help="The partitions with their nodes, as JSON.")
def sinfo(nats_url: str, partitions: tuple[str, ...], node_oriented: bool, summarize: bool, long: bool,
          fmt: str | None, states: str | None, nodelist: str | None, noheader: bool, show_all: bool, exact: bool,
          as_json: bool) -> None:
    """Partitions and their nodes, as Slurm's sinfo: one line per partition and node state."""
    wanted = [p for text in partitions for p in (x.strip() for x in text.split(",")) if p]
    if fmt is None:
        if summarize:
            fmt = SUMMARY_FORMAT
        elif node_oriented:
            fmt = NODE_LONG_FORMAT if long else NODE_FORMAT
        else:
            fmt = LONG_FORMAT if long else DEFAULT_FORMAT
    try:
        parse_format(fmt)  # a bad field is an error before anything is asked
    except FormatError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    only_nodes: set[str] | None = None
    if nodelist:
        try:
            only_nodes = set(expand(nodelist))
        except HostlistError as exc:
            raise click.BadParameter(str(exc), param_hint="--nodes") from None
    state_set = {s.strip().lower().rstrip("*") for s in (states or "").split(",") if s.strip()}

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        async with session(nats_url) as nc:
            parts = await query_all(nc, "partitions", {}, "partitions")
            nodes = await query_all(nc, "nodes", {}, "nodes")
            return parts, nodes

    try:
        parts_body, nodes_body = asyncio.run(go())
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    rows = parts_body["partitions"]
    if wanted:
        unknown = [w for w in wanted if w not in {r["name"] for r in rows}]
        rows = [r for r in rows if r["name"] in wanted]
        if unknown and not rows:
            click.echo(f"sinfo: no partition {', '.join(unknown)}", err=True)
    nodes = [n for n in nodes_body["nodes"] if n.get("state") != "removed"
             and (only_nodes is None or n["node"] in only_nodes)
             and (not state_set or node_state(n).rstrip("*") in state_set or node_state(n, True).rstrip("*") in state_set
                  or (n.get("state") or "") in state_set)]
    groups = sinfo_rows(rows, nodes, node_oriented=node_oriented, summarize=summarize, long=long)
    if only_nodes is not None or state_set:
        groups = [g for g in groups if g["nodes"]]
    if as_json:  # one entry per partition, its configuration and each of its nodes' state
        listed: list[dict[str, Any]] = []
        for part, members in partition_members(rows, nodes):
            listed.append({**(part or {"name": None, "default": False}), "avail": availability(part),
                           "node_list": compress(n["node"] for n in members),
                           "node_states": [{"node": n["node"], "state": node_state(n), "state_long": node_state(n, True)}
                                           for n in members]})
        click.echo(json.dumps({"partitions": listed}))
        return
    if long:
        click.echo(time.strftime("%a %b %d %H:%M:%S %Y"))
    for line in sinfo_lines(groups, fmt, header=not noheader):
        click.echo(line)


def register(group: click.Group) -> None:
    group.add_command(partition)
    group.add_command(sinfo)
