"""The quota providers' I/O: a source read, account configurations published into the log.

A source is Slurm (``sacctmgr show assoc/qos -P``, which asks ``slurmdbd``) or a Kubernetes API
server (its ResourceQuotas). One sync reads the source, reads the last configuration of every
account from the log, and publishes the configurations that differ, as an operator would with
``horizon account set``. Each publish is fenced on the account
subject's last sequence: a configuration that someone else published in between makes the sync
read again rather than overwrite it. The scheduler applies them like any other operator input, so
``horizon audit`` replays the decisions they led to.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import admin_subject
from services.domain.protocol import Record
from services.quota import kubernetes
from services.quota.accounts import Planned, Provider, Wanted, plan
from services.quota.slurm import SLURM, TresError, desired, parse_table, read_limits
from services.runtime.follow import each, read_through
from services.runtime.jetstream import JetStreamLog
from services.runtime.kubeapi import KubeAPI, KubeError, load_kubeconfig
from services.runtime.log import LogConflict, LogError

__all__ = ["QuotaSource", "SlurmQuotaSource", "KubernetesQuotaSource", "SyncResult", "QuotaSourceError", "sync",
           "current_accounts", "keep_in_sync"]

logger = logging.getLogger("horizon.quota")

ASSOC_FORMAT = "Cluster,Account,User,ParentName,Share,GrpTRES,GrpJobs,QOS,DefaultQOS"
QOS_FORMAT = "Name,GrpTRES,GrpJobs"


class QuotaSourceError(RuntimeError):
    """The source could not be read (sacctmgr missing, slurmdbd down, an API server that does not
    answer, output it cannot parse)."""


class QuotaSource(Protocol):
    """Where a provider's limits are kept: ``read`` gives the accounts as wanted, the notes on what
    did not map, and the name of the cluster read (``QuotaSourceError`` if it cannot)."""

    @property
    def provider(self) -> Provider: ...

    async def read(self) -> tuple[list[Wanted], list[str], str]: ...


@dataclass(frozen=True, slots=True)
class SlurmQuotaSource:
    """Where the limits come from: ``sacctmgr`` with this ``slurm.conf`` (its accounting storage
    settings name the slurmdbd), for this cluster (default: the ``ClusterName`` of the conf)."""

    slurm_conf: str | None = None
    cluster: str | None = None
    sacctmgr: str = "sacctmgr"
    timeout_s: float = 30.0
    provider: Provider = SLURM

    def env(self) -> Mapping[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def cluster_name(self) -> str:
        if self.cluster:
            return self.cluster
        path = self.slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        try:
            with open(path, encoding="utf-8") as conf:
                for line in conf:
                    key, sep, value = line.split("#", 1)[0].partition("=")
                    if sep and key.strip().lower() == "clustername":
                        return value.strip()
        except OSError as exc:
            raise QuotaSourceError(f"cannot read {path}: {exc.strerror}; give --slurm-conf or --cluster") from None
        raise QuotaSourceError(f"{path} names no ClusterName; give --cluster")

    async def run(self, *args: str) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.sacctmgr, "-P", *args, env=self.env(),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError:
            raise QuotaSourceError(f"{self.sacctmgr} not found: install Slurm's client commands "
                                   f"(Debian: slurm-client)") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise QuotaSourceError(f"sacctmgr {' '.join(args)} did not answer in {self.timeout_s:g} s "
                                   f"(is slurmdbd running?)") from None
        if proc.returncode != 0:
            why = err.decode(errors="replace").strip() or f"exit code {proc.returncode}"
            raise QuotaSourceError(f"sacctmgr {' '.join(args)}: {why}")
        return out.decode(errors="replace")

    async def read(self) -> tuple[list[Wanted], list[str], str]:
        cluster = self.cluster_name()
        assoc = await self.run("show", "assoc", f"cluster={cluster}", f"format={ASSOC_FORMAT}")
        qos = await self.run("show", "qos", f"format={QOS_FORMAT}")
        try:
            limits = read_limits(cluster, parse_table(assoc), parse_table(qos))
        except TresError as exc:
            raise QuotaSourceError(f"sacctmgr printed what this provider cannot read: {exc}") from None
        wanted, notes = desired(limits)
        return wanted, notes, cluster


@dataclass(frozen=True, slots=True)
class KubernetesQuotaSource:
    """The ResourceQuotas of every namespace of the API server a kubeconfig names (its current
    context, or ``context``)."""

    kubeconfig: str
    context: str | None = None
    timeout_s: float = 30.0
    provider: Provider = kubernetes.KUBERNETES

    def api(self) -> KubeAPI:
        try:
            return KubeAPI(load_kubeconfig(self.kubeconfig, self.context), timeout_s=self.timeout_s)
        except (ValueError, OSError) as exc:  # no such file, context or server; certificates it cannot load
            raise QuotaSourceError(str(exc)) from None

    async def read(self) -> tuple[list[Wanted], list[str], str]:
        api = self.api()
        try:
            found = await api.list("/api/v1/resourcequotas")
        except KubeError as exc:
            raise QuotaSourceError(f"the ResourceQuotas of {api.config.server}: {exc}") from None
        try:
            wanted, notes = kubernetes.desired(found.get("items") or [])
        except kubernetes.QuantityError as exc:
            raise QuotaSourceError(f"the API server gave what this provider cannot read: {exc}") from None
        return wanted, notes, api.config.server


@dataclass(slots=True)
class SyncResult:
    cluster: str
    accounts: int  # how many accounts Slurm has
    published: list[tuple[int, Planned]] = field(default_factory=list)  # (log seq, what)
    notes: list[str] = field(default_factory=list)


async def current_accounts(log: JetStreamLog) -> tuple[dict[str, tuple[int, c.AccountConfigured]], int]:
    """Every account's last configuration in the log, and the account subject's last sequence."""
    subject = admin_subject("account")
    last = await log.last_seq(subject)
    out: dict[str, tuple[int, c.AccountConfigured]] = {}

    def note(record: Record, event: Event) -> None:
        if isinstance(event, c.AccountConfigured):  # the only type the subject admits
            out[event.account] = (record.seq, event)

    if last:  # a malformed input is skipped here: it is the scheduler's to dead-letter
        await read_through(log, each(note), subjects=[subject], until_seq=last)
    return out, last


async def sync(log: JetStreamLog, source: QuotaSource, now: float, user: str = "",
               attempts: int = 5) -> SyncResult:
    """Read the source, publish what differs; fenced, so a concurrent ``horizon account set`` is never
    overwritten with a stale view (the sync reads again and re-plans)."""
    wanted, notes, cluster = await source.read()
    result = SyncResult(cluster, len(wanted), notes=notes)
    subject = admin_subject("account")
    for _ in range(attempts):
        current, last = await current_accounts(log)
        todo = plan(source.provider, wanted, current, now, user)
        try:
            for planned in todo:
                ack = await log.publish(subject, encode(planned.event), msg_id=planned.msg_id,
                                        expected_last_subject_seq=last)
                result.published.append((ack.seq, planned))
                last = ack.seq
            return result
        except LogConflict:
            continue  # someone configured an account meanwhile: read again
    raise QuotaSourceError(f"the account configurations kept changing under {attempts} syncs; try again")


async def keep_in_sync(log: JetStreamLog, source: QuotaSource, every_s: float, ready: asyncio.Event,
                       clock: Callable[[], float], user: str = "") -> None:
    """Sync now and every ``every_s`` until cancelled (``horizon up --quota-provider slurm|kubernetes``).
    A sync that fails (slurmdbd or the API server down, the log unreachable) is logged and tried again
    at the next one; each note on what does not map is logged once."""
    noted: set[str] = set()
    system = source.provider.system
    while True:
        try:
            result = await sync(log, source, clock(), user)
        except (QuotaSourceError, LogError) as exc:
            logger.warning("quota sync from %s failed: %s; next in %g s", system, exc, every_s)
        else:
            for seq, planned in result.published:
                logger.info("account %s from %s cluster %s (%s), log seq %d", planned.event.account, system,
                            result.cluster, planned.change, seq)
            for note in result.notes:
                if note not in noted:
                    noted.add(note)
                    logger.warning("quota sync from %s: %s", system, note)
        ready.set()
        await asyncio.sleep(every_s)
