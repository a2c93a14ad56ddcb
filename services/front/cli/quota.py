"""``horizon quota sync``: take accounts' limits from a quota provider into the log (operators).

``--provider slurm`` reads Slurm's associations and QOS through ``sacctmgr``, ``--provider kubernetes``
each namespace's ResourceQuotas from the API server of ``--kubeconfig`` (docs/backends.md, "Quota
providers"); ``--every DURATION`` keeps doing so on a schedule until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import click
import msgspec

from events.resources import parse_duration
from services.front.client.client import default_user
from services.front.cli.options import nats_option
from services.domain.quotas import describe_quota
from services.quota.app import (KubernetesQuotaSource, QuotaSource, QuotaSourceError, SlurmQuotaSource, SyncResult,
                                sync)
from services.runtime.jetstream import JetStreamLog

__all__ = ["register"]

PROVIDERS = ("slurm", "kubernetes")


def _as_json(result: SyncResult, provider: str) -> dict[str, Any]:
    return {
        "provider": provider, "cluster": result.cluster, "accounts": result.accounts,
        "published": [{"seq": seq, "account": p.event.account, "change": p.change, "parent": p.event.parent,
                       "shares": p.event.shares, "quota": msgspec.to_builtins(p.event.quota)}
                      for seq, p in result.published],
        "notes": result.notes,
    }


def _report(result: SyncResult, source: QuotaSource, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_as_json(result, source.provider.system.lower())))
        return
    when = time.strftime("%H:%M:%S")
    if not result.published:
        click.echo(f"{when} {source.provider.system} cluster {result.cluster}: {result.accounts} accounts, "
                   f"all as in Horizon")
    for seq, p in result.published:
        click.echo(f"{when} account {p.event.account} ({p.change}): {describe_quota(p.event.quota)}  [log seq {seq}]")
    for note in result.notes:
        click.echo(f"  note: {note}", err=True)


@click.group()
def quota() -> None:
    """Accounts' limits from a quota provider (operators)."""


@quota.command(name="sync")
@nats_option
@click.option("--provider", type=click.Choice(PROVIDERS), default="slurm", show_default=True,
              help="Where the limits come from.")
@click.option("--slurm-conf", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The slurm.conf whose accounting storage (slurmdbd) sacctmgr asks [default: $SLURM_CONF, "
                   "else /etc/slurm/slurm.conf].")
@click.option("--cluster", default=None, help="The Slurm cluster whose associations to take [default: the "
                                              "conf's ClusterName].")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--provider kubernetes: the kubeconfig of the cluster whose ResourceQuotas to take (its "
                   "current context).")
@click.option("--every", default=None, help="Sync again every DURATION (5m, 1h) until Ctrl-C; a failed read is "
                                            "reported and retried at the next one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sync.")
def quota_sync(nats_url: str, provider: str, slurm_conf: str | None, cluster: str | None, kubeconfig: Path | None,
               every: str | None, as_json: bool) -> None:
    """Make Horizon's accounts (tree, shares, quotas) match Slurm's associations and QOS limits, or
    their quotas match each Kubernetes namespace's ResourceQuotas (an account per namespace).

    Publishes an account configuration only for the accounts that differ; what the provider has no
    notion of (tenants, borrowing, boost, class limit; with Kubernetes also parent and shares) stays
    as set in Horizon."""
    period = None
    if every is not None:
        try:
            period = parse_duration(every)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--every") from None
        if period <= 0:
            raise click.BadParameter("must be more than 0", param_hint="--every")
    source: QuotaSource
    if provider == "kubernetes":
        if kubeconfig is None:
            raise click.UsageError("--provider kubernetes reads the cluster's ResourceQuotas: give --kubeconfig")
        source = KubernetesQuotaSource(str(kubeconfig.resolve()))
    else:
        source = SlurmQuotaSource(slurm_conf=slurm_conf, cluster=cluster)

    async def go() -> None:
        log = await JetStreamLog.open(nats_url, name="horizon-quota-sync", create=False)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if period is not None:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        try:
            while True:
                try:
                    _report(await sync(log, source, time.time(), default_user()), source, as_json)
                except QuotaSourceError as exc:
                    if period is None:
                        raise click.ClickException(str(exc)) from None
                    click.echo(f"{time.strftime('%H:%M:%S')} sync failed: {exc}; next in {every}", err=True)
                if period is None:
                    return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)
                if stop.is_set():
                    return
        finally:
            await log.close()

    asyncio.run(go())


def register(group: click.Group) -> None:
    group.add_command(quota)
