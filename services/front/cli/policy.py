"""Operator and user commands about scheduling policy.

* ``horizon account set NAME`` — an account of the fair-share tree: parent, shares, quota, borrowing, boost,
  the highest priority class its tenants may ask for;
* ``horizon fairshare set`` — decay half-life and the resource weights of usage;
* ``horizon policy set`` — queue policy, multifactor weights, maximum age, QOS boosts, restart backoff;
* ``horizon usage`` — shares, usage and fair-share factor per account and user (like sshare);
* ``horizon profile set NAME`` — a placement profile: score weights, backfilling mode and depth;
* ``horizon reservation create|cancel NAME`` — advance reservations of nodes for an account.

``horizon show JOB`` (one job: its priority factor by factor, why it waits) is ``show.py``.

Configuration goes into the log on ``horizon.in._admin.<verb>``; the command
then asks the scheduler's read model whether it was applied or rejected (and
why), so an operator sees the answer, not just "published".
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import click
from rich.table import Table

from events import catalogue as c
from events.resources import ResourceError, parse_cpus, parse_duration, parse_memory
from events.subjects import valid_token
from events.vocabulary import RUNTIME_ESTIMATES
from services.front.client.client import default_user, query, query_all, session
from services.front.client.job_numbers import resolve_id
from services.front.client.configure import configure
from services.front.cli.options import console, nats_option
from services.placement.core import check_reservation
from services.preemption.core import VICTIM_ORDERS, PreemptionConfig
from services.domain.fit.framework import SCORE_PLUGINS
from services.domain.fit.profile import BACKFILL_MODES, check_profile
from services.domain.policy import POLICIES, WEIGHT_NAMES

__all__ = ["register", "report_config"]


def _parse(fn: Any, value: str | None, hint: str) -> Any:
    if value is None:
        return None
    try:
        return fn(value, hint)
    except ResourceError as exc:
        raise click.BadParameter(f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}", param_hint=hint) from None


def _pairs(items: tuple[str, ...], hint: str, cast: Any = float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint=hint)
        try:
            out[key] = cast(value)
        except ValueError:
            raise click.BadParameter(f"{value!r} in {item!r} is not a number", param_hint=hint) from None
    return out


def report_config(result: dict[str, Any], what: str, as_json: bool) -> None:
    """An operator's configuration input answered: applied, published with no answer yet, or rejected (an error)."""
    if as_json:
        click.echo(json.dumps(result))
    elif result["applied"]:
        click.echo(f"{what} applied (log seq {result['seq']})")
    elif result["applied"] is None:
        click.echo(f"{what} published (log seq {result['seq']}); {result['reason']}")
    if result["applied"] is False:
        raise click.ClickException(f"{what} rejected: {result['reason']}")


@click.group()
def account() -> None:
    """Accounts of the fair-share tree (operators)."""


@account.command(name="set")
@nats_option
@click.argument("name")
@click.option("--parent", default=None, help="Parent account (default: top level). Configure parents first.")
@click.option("--shares", type=float, default=1.0, show_default=True, help="Shares among its siblings.")
@click.option("--quota-gpus", type=int, default=None, help="At most this many GPUs held at once.")
@click.option("--quota-cpus", default=None, help="At most this many CPUs (2, 2.5, 500m).")
@click.option("--quota-mem", default=None, help="At most this much memory (64Gi, 512g).")
@click.option("--quota-jobs", type=int, default=None, help="At most this many running jobs.")
@click.option("--quota-gpu-type", "gpu_types", multiple=True, help="TYPE=N: at most N GPUs of a type (repeatable).")
@click.option("--borrowing/--no-borrowing", default=False, show_default=True,
              help="May run beyond the quota on idle siblings' unused quota (reclaimable).")
@click.option("--boost", type=float, default=0.0, show_default=True, help="Added to its jobs' priority.")
@click.option("--max-priority-class", "max_class", type=click.Choice(list(c.PRIORITY_CLASSES)), default=None,
              help="The highest class a tenant may give jobs of this account and the accounts below it, at "
                   "submission or by an update (default: no limit; operators are not limited).")
@click.option("--tenant", "tenants", multiple=True,
              help="A tenant whose jobs may charge this account (repeatable; default: any tenant's). Setting the "
                   "account again replaces its tenants too: name them every time.")
@click.option("--json", "as_json", is_flag=True)
def account_set(nats_url: str, name: str, parent: str | None, shares: float, quota_gpus: int | None,
                quota_cpus: str | None, quota_mem: str | None, quota_jobs: int | None, gpu_types: tuple[str, ...],
                borrowing: bool, boost: float, max_class: str | None, tenants: tuple[str, ...], as_json: bool) -> None:
    """Create or replace account NAME: its place in the tree, shares, quota, class limit and tenants."""
    for tenant in tenants:
        if not valid_token(tenant) or tenant.startswith("_"):
            raise click.BadParameter(f"{tenant!r} is not a tenant name (letters, digits, '_' or '-', not starting "
                                     f"with '_')", param_hint="--tenant")
    quota = c.Quota(gpus=quota_gpus, cpus_milli=_parse(parse_cpus, quota_cpus, "--quota-cpus"),
                    memory_bytes=_parse(parse_memory, quota_mem, "--quota-mem"), running_jobs=quota_jobs,
                    gpus_by_type=_pairs(gpu_types, "--quota-gpu-type", int))
    event = c.AccountConfigured(ts=time.time(), source="horizon-cli", correlation_id=name, account=name,
                                parent=parent, shares=shares, quota=quota, borrowing=borrowing,
                                priority_boost=boost, max_priority_class=max_class,  # type: ignore[arg-type]
                                tenants=list(dict.fromkeys(tenants)), user=default_user())
    report_config(configure(nats_url, "account", event), f"account {name}", as_json)


@click.group()
def fairshare() -> None:
    """Fair-share settings (operators)."""


@fairshare.command(name="set")
@nats_option
@click.option("--half-life", required=True, help="Usage decay half-life (7d, 12h, 3600).")
@click.option("--gpu-weight", type=float, default=1.0, show_default=True, help="Usage per GPU-second.")
@click.option("--cpu-weight", type=float, default=0.0625, show_default=True, help="Usage per core-second.")
@click.option("--memory-weight", type=float, default=0.0, show_default=True, help="Usage per GiB-second.")
@click.option("--dominant", is_flag=True, help="Bill the largest weighted resource, not the sum (MAX_TRES).")
@click.option("--json", "as_json", is_flag=True)
def fairshare_set(nats_url: str, half_life: str, gpu_weight: float, cpu_weight: float, memory_weight: float,
                  dominant: bool, as_json: bool) -> None:
    """Set how usage is counted and how fast it is forgotten."""
    event = c.FairShareConfigured(ts=time.time(), source="horizon-cli", correlation_id="fairshare",
                                  half_life_s=_parse(parse_duration, half_life, "--half-life"),
                                  gpu_weight=gpu_weight, cpu_weight=cpu_weight, memory_weight=memory_weight,
                                  dominant_share=dominant, user=default_user())
    report_config(configure(nats_url, "fairshare", event), "fair-share settings", as_json)


@click.group()
def policy() -> None:
    """The queue policy (operators)."""


@policy.command(name="set")
@nats_option
@click.option("--policy", "name", type=click.Choice(list(POLICIES)), default=None, help="The queue policy.")
@click.option("--weight", "weights", multiple=True,
              help=f"NAME=VALUE multifactor weight, NAME one of {', '.join(WEIGHT_NAMES)} (repeatable).")
@click.option("--max-age", default=None, help="Age at which the age factor is full (7d).")
@click.option("--estimate-ref", default=None, help="Estimate at which the estimate factor is 1/2 (1h).")
@click.option("--qos-boost", "qos", multiple=True, help="QOS=VALUE in [0, 1] (repeatable).")
@click.option("--backoff-base", default=None, help="Wait before the first retry of a failed job (10s).")
@click.option("--backoff-max", default=None, help="Longest wait between retries (10m).")
@click.option("--json", "as_json", is_flag=True)
def policy_set(nats_url: str, name: str | None, weights: tuple[str, ...], max_age: str | None,
               estimate_ref: str | None, qos: tuple[str, ...], backoff_base: str | None, backoff_max: str | None,
               as_json: bool) -> None:
    """Change the queue policy or its parameters; what is not given stays as it is."""
    event = c.PolicyConfigured(
        ts=time.time(), source="horizon-cli", correlation_id="policy", policy=name,
        weights=_pairs(weights, "--weight"), max_age_s=_parse(parse_duration, max_age, "--max-age"),
        estimate_ref_s=_parse(parse_duration, estimate_ref, "--estimate-ref"), qos_boost=_pairs(qos, "--qos-boost"),
        backoff_base_s=_parse(parse_duration, backoff_base, "--backoff-base"),
        backoff_max_s=_parse(parse_duration, backoff_max, "--backoff-max"), user=default_user(),
    )
    report_config(configure(nats_url, "policy", event), "policy", as_json)


@click.group()
def profile() -> None:
    """Placement profiles: score weights and backfilling (operators)."""


@profile.command(name="set")
@nats_option
@click.argument("name")
@click.option("--weight", "weights", multiple=True,
              help=f"PLUGIN=VALUE score weight, PLUGIN one of {', '.join(SCORE_PLUGINS)} (repeatable).")
@click.option("--backfill", type=click.Choice(list(BACKFILL_MODES)), default="easy", show_default=True)
@click.option("--depth", "reservation_depth", type=int, default=16, show_default=True,
              help="With --backfill conservative: how many blocked jobs get a reservation.")
@click.option("--runtime-estimate", type=click.Choice(list(RUNTIME_ESTIMATES)), default="limit", show_default=True,
              help="Backfilling's run times: the jobs' time limits, or 'predicted' from each user's last two run "
                   "times (EASY++; the limit is still enforced).")
@click.option("--json", "as_json", is_flag=True)
def profile_set(nats_url: str, name: str, weights: tuple[str, ...], backfill: str, reservation_depth: int,
                runtime_estimate: str, as_json: bool) -> None:
    """Create or replace placement profile NAME (jobs choose it with their profile field)."""
    event = c.ProfileConfigured(ts=time.time(), source="horizon-cli", correlation_id=name, name=name,
                                weights=_pairs(weights, "--weight"), backfill=backfill,
                                reservation_depth=reservation_depth, runtime_estimate=runtime_estimate,
                                user=default_user())
    why = check_profile(event)
    if why:
        raise click.BadParameter(why)
    report_config(configure(nats_url, "profile", event), f"profile {name}", as_json)


def _when(text: str, hint: str, now: float) -> float:
    """``+2h`` (from now), an ISO date-time (``2026-12-01T09:00``, local time), or epoch seconds."""
    if text.startswith("+"):
        return now + _parse(parse_duration, text[1:], hint)  # type: ignore[no-any-return]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        from datetime import datetime

        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise click.BadParameter(f"{text!r} is not +DURATION, an ISO date-time or epoch seconds",
                                 param_hint=hint) from None


@click.group()
def reservation() -> None:
    """Advance reservations: nodes held for one account over a window (operators)."""


@reservation.command(name="create")
@nats_option
@click.argument("name")
@click.option("--account", required=True, help="The account whose jobs may use the nodes in the window.")
@click.option("--nodes", "node_list", required=True, help="Comma-separated node names.")
@click.option("--start", required=True, help="+DURATION from now, an ISO date-time, or epoch seconds.")
@click.option("--end", required=True, help="Same forms; after --start.")
@click.option("--json", "as_json", is_flag=True)
def reservation_create(nats_url: str, name: str, account: str, node_list: str, start: str, end: str,
                       as_json: bool) -> None:
    """Hold NODES for ACCOUNT from START to END (replaces a reservation of the same name)."""
    now = time.time()
    event = c.ReservationConfigured(ts=now, source="horizon-cli", correlation_id=name, name=name, account=account,
                                    nodes=[n for n in node_list.split(",") if n], start_ts=_when(start, "--start", now),
                                    end_ts=_when(end, "--end", now), user=default_user())
    why = check_reservation(event)
    if why:
        raise click.BadParameter(why)
    report_config(configure(nats_url, "reservation", event), f"reservation {name}", as_json)


@reservation.command(name="cancel")
@nats_option
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def reservation_cancel(nats_url: str, name: str, as_json: bool) -> None:
    """Withdraw reservation NAME."""
    event = c.ReservationConfigured(ts=time.time(), source="horizon-cli", correlation_id=name, name=name,
                                    account="-", cancelled=True, user=default_user())
    report_config(configure(nats_url, "reservation", event), f"reservation {name} cancel", as_json)


@click.group()
def dataset() -> None:
    """Datasets that jobs wait for (--dependency afterdata:NAME; operators)."""


@dataset.command(name="announce")
@nats_option
@click.argument("name")
@click.option("--reason", default="", help="Why, for the log (e.g. the run that produced it).")
@click.option("--json", "as_json", is_flag=True)
def dataset_announce(nats_url: str, name: str, reason: str, as_json: bool) -> None:
    """Announce dataset NAME available (DatasetAvailable on horizon.in._admin.dataset): jobs waiting for
    it (afterdata:NAME) may start. It stays available."""
    if not valid_token(name):
        raise click.BadParameter(f"{name!r} is not a dataset name (letters, digits, ._-)", param_hint="NAME")
    event = c.DatasetAvailable(ts=time.time(), source="horizon-cli", correlation_id=name, dataset=name,
                               reason=reason, user=default_user())
    report_config(configure(nats_url, "dataset", event), f"dataset {name} announcement", as_json)


@click.group()
def preemption() -> None:
    """Preemption settings (operators)."""


@preemption.command(name="set")
@nats_option
@click.option("--victims", type=click.Choice(list(VICTIM_ORDERS)), default=None, help="How victims are chosen.")
@click.option("--rule", "rules", multiple=True,
              help="CLASS=LOWER,LOWER: the classes CLASS may preempt, e.g. high=normal,low,scavenger (repeatable).")
@click.option("--grace", default=None, help="Grace period between the stop signal and SIGKILL (30s).")
@click.option("--max-preemptions", type=int, default=None, help="A job preempted this often is never chosen again.")
@click.option("--per-minute", type=int, default=None, help="At most this many preemptions per minute, cluster-wide.")
@click.option("--per-account-per-minute", type=int, default=None, help="... and of one victim account.")
@click.option("--json", "as_json", is_flag=True)
def preemption_set(nats_url: str, victims: str | None, rules: tuple[str, ...], grace: str | None,
                   max_preemptions: int | None, per_minute: int | None, per_account_per_minute: int | None,
                   as_json: bool) -> None:
    """Change who may preempt whom and how gently; what is not given stays as it is."""
    parsed = {}
    for rule in rules:
        cls, sep, lower = rule.partition("=")
        if not sep:
            raise click.BadParameter(f"{rule!r} is not CLASS=LOWER,LOWER", param_hint="--rule")
        parsed[cls] = [x for x in lower.split(",") if x]
    event = c.PreemptionConfigured(ts=time.time(), source="horizon-cli", correlation_id="preemption", rules=parsed,
                                   victims=victims, grace_period_s=_parse(parse_duration, grace, "--grace"),
                                   max_preemptions=max_preemptions, per_minute=per_minute,
                                   per_account_per_minute=per_account_per_minute, user=default_user())
    why = PreemptionConfig().check(event)
    if why:
        raise click.BadParameter(why)
    report_config(configure(nats_url, "preemption", event), "preemption settings", as_json)


@click.command()
@nats_option
@click.argument("job_id")
@click.option("--dry-run", is_flag=True, required=True, help="Show what preempting for JOB would do (nothing is stopped).")
@click.option("--json", "as_json", is_flag=True)
def preempt(nats_url: str, job_id: str, dry_run: bool, as_json: bool) -> None:
    """Which running jobs the preemption policy would stop for JOB now, and why each (--dry-run)."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            return await query(nc, "preempt", {"job_id": await resolve_id(nc, job_id)})  # a number too

    body = asyncio.run(go())
    if as_json:
        click.echo(json.dumps(body))
        return
    if body.get("shrinks"):  # elastic jobs give back nodes above their least: nobody is stopped
        click.echo(f"preempting for {job_id} would stop nobody: elastic jobs give back nodes "
                   f"{', '.join(body['nodes'])}")
        for s in body["shrinks"]:
            click.echo(f"  {s['job_id']} ({s['account']}) on {','.join(s['nodes'])} gives back "
                       f"{','.join(s['gives_back'])}: {s['why']}")
        return
    if not body["victims"]:
        click.echo(f"no preemption for {job_id}: {body['why_not']}")
        return
    cost = body["cost"]
    click.echo(f"preempting for {job_id} ({body['order']}) would stop {len(body['victims'])} job(s) and free nodes "
               f"{', '.join(body['nodes'])}: {cost['gpus']:g} GPUs, {cost['work_lost_s'] / 3600:.2f} GPU-h of work "
               f"since their last checkpoints")
    table = Table(box=None, header_style="bold")
    for col in ("VICTIM", "ACCOUNT", "CLASS", "NODES", "GPUS", "LOST(GPU-h)", "RUNNING", "WHY"):
        table.add_column(col)
    for v in body["victims"]:
        table.add_row(v["job_id"], v["account"], v["priority_class"], ",".join(v["nodes"]), f"{v['gpus']:g}",
                      f"{v['work_lost_s'] / 3600:.2f}", f"{v['running_s'] / 60:.0f} min", v["why"])
    console().print(table)


def _num(value: Any, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


@click.command()
@nats_option
@click.option("--history", "account_history", default=None, metavar="ACCOUNT",
              help="The account's usage and fair-share factor at each hour of log time instead.")
@click.option("-A", "--account", default=None, help="Only this account's rows (as sshare -A).")
@click.option("-u", "--user", default=None, help="Only this user's rows (as sshare -u).")
@click.option("--tenant", default=None, help="Only the accounts this tenant's jobs were charged under.")
@click.option("--json", "as_json", is_flag=True)
def usage(nats_url: str, account_history: str | None, account: str | None, user: str | None, tenant: str | None,
          as_json: bool) -> None:
    """Shares, decayed usage and fair-share factor per account and user (like sshare)."""

    async def go() -> dict[str, Any]:
        async with session(nats_url) as nc:
            if account_history:
                return await query_all(nc, "usage", {"history": True, "account": account_history}, "history")
            request = {k: v for k, v in (("account", account), ("user", user), ("tenant", tenant)) if v is not None}
            return await query_all(nc, "usage", request, "rows")

    body = asyncio.run(go())
    if as_json:
        click.echo(json.dumps(body))
        return
    if account_history:
        for h in body.get("history", []):
            click.echo(f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(h['ts']))}  {h['account']:<20} "
                       f"usage {h['usage'] / 3600:10.2f} GPU-h  running {h['running']:>4}  "
                       f"fairshare {'' if h['fairshare'] is None else format(h['fairshare'], '.3f')}")
        return
    table = Table(box=None, header_style="bold")
    for col in ("ACCOUNT", "USER", "RAWSHARES", "NORMSHARES", "RAWUSAGE(GPU-h)", "NORMUSAGE", "LEVELFS",
                "FAIRSHARE", "RUNNING", "QUOTA"):
        table.add_column(col)
    for row in body["rows"]:
        indent = " " * row["depth"]
        sources = row["quota"].get("sources", {})
        quota = ",".join(f"{k}={v}" + (f" ({sources[k]})" if k in sources else "")
                         for k, v in row["quota"].items() if k != "sources")
        table.add_row(indent + (row["account"] if not row["user"] else ""), row["user"], f"{row['raw_shares']:g}",
                      _num(row["norm_shares"]), f"{row['raw_usage'] / 3600:.2f}", _num(row["norm_usage"]),
                      "inf" if row["level_fs"] is None else _num(row["level_fs"]), _num(row["fairshare"]),
                      str(row["running"]), quota + (" +borrow" if row["borrowing"] else ""))
    console().print(table)
    click.echo(f"half-life {body['half_life_s'] / 86400:g} d; usage billed per second: "
               f"{body['weights']['gpu']:g}/GPU + {body['weights']['cpu']:g}/core + "
               f"{body['weights']['memory_gib']:g}/GiB{' (dominant)' if body['weights']['dominant_share'] else ''}; "
               f"log seq {body['last_seq']}")


def register(group: click.Group) -> None:
    for command in (account, fairshare, policy, profile, reservation, preemption, preempt, usage, dataset):
        group.add_command(command)
