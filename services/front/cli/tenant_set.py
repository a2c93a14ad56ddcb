"""``horizon tenant set NAME``: a tenant's limits at the door (operators).

Publishes ``TenantConfigured`` on ``horizon.in._admin.tenant`` as the operator and waits until the
log's readers have seen it. Every submission instance folds it: the intake applies the rate and
burst to the tenant's next inputs, the submission core the pending and array limits to its next
submissions (docs/tenants.md, Limits and fairness). A limit not given takes its default, 0 is no
limit: setting a tenant again replaces all its limits, so name every one you changed each time.
"""

from __future__ import annotations

import dataclasses
import json
import time

import click

from events import catalogue as c
from events.subjects import valid_token
from events.vocabulary import TenantLimits
from services.front.client.client import default_user
from services.front.cli.options import nats_option
from services.front.client.configure import configure

__all__ = ["tenant_set", "describe_limits"]

_COUNT = click.IntRange(min=0)
_D = TenantLimits()  # the defaults


def describe_limits(limits: TenantLimits) -> str:
    """The limits in words, 0 as "no limit"."""
    def n(value: float, what: str) -> str:
        return f"{value:,g} {what}" if value else f"no limit on {what}"

    burst = limits.burst or max(1, int(limits.max_inputs_per_s))
    rate = (f"{limits.max_inputs_per_s:,g} inputs a second (burst {burst:,})" if limits.max_inputs_per_s
            else "no limit on inputs a second")
    return ", ".join([rate, n(limits.max_pending_jobs, "pending jobs"), n(limits.max_array_tasks, "tasks per array"),
                      n(limits.max_pending_array_tasks, "pending array tasks")])


@click.command(name="set")
@nats_option
@click.argument("name")
@click.option("--max-inputs-per-s", "rate", type=click.FloatRange(min=0), default=None,
              help=f"Inputs a second the intake stores for it, on average; 0: no limit "
                   f"[default: {_D.max_inputs_per_s:g}].")
@click.option("--burst", type=_COUNT, default=None,
              help=f"Inputs it may send at once before the rate applies; 0: one second's worth "
                   f"[default: {_D.burst}].")
@click.option("--max-pending-jobs", type=_COUNT, default=None,
              help=f"Its jobs waiting in the queue (each array task one); 0: no limit "
                   f"[default: {_D.max_pending_jobs}].")
@click.option("--max-array-tasks", type=_COUNT, default=None,
              help=f"Tasks of one array; 0: the cluster's own bound only [default: {_D.max_array_tasks}].")
@click.option("--max-pending-array-tasks", type=_COUNT, default=None,
              help=f"Its arrays' tasks waiting in the queue, all together; 0: no limit "
                   f"[default: {_D.max_pending_array_tasks}].")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"tenant", "limits", "seq", "applied"}: the limits it has now, all of them.')
def tenant_set(nats_url: str, name: str, rate: float | None, burst: int | None, max_pending_jobs: int | None,
               max_array_tasks: int | None, max_pending_array_tasks: int | None, as_json: bool) -> None:
    """Set tenant NAME's limits at the door; a limit not given takes its default (it replaces them all).

    Under `horizon up --auth`, a tenant's input over its rate is refused by the intake before it is
    stored, and a submission over a pending or array limit is rejected naming the limit. Operators'
    inputs, and a Horizon without accounts, are not limited.
    """
    if not valid_token(name) or name.startswith("_"):
        raise click.BadParameter(f"{name!r} is not a tenant name (letters, digits, '_' or '-', not starting with '_')",
                                 param_hint="NAME")
    event = c.TenantConfigured(ts=time.time(), source="horizon-cli", correlation_id=name, tenant=name,
                               max_inputs_per_s=rate, burst=burst, max_pending_jobs=max_pending_jobs,
                               max_array_tasks=max_array_tasks, max_pending_array_tasks=max_pending_array_tasks,
                               user=default_user())
    limits = TenantLimits(**{k: v for k, v in (("max_inputs_per_s", rate), ("burst", burst),
                                               ("max_pending_jobs", max_pending_jobs),
                                               ("max_array_tasks", max_array_tasks),
                                               ("max_pending_array_tasks", max_pending_array_tasks)) if v is not None})
    result = configure(nats_url, "tenant", event)
    if as_json:
        click.echo(json.dumps({"tenant": name, "limits": dataclasses.asdict(limits), **result}))
        return
    if result["applied"] is None:
        click.echo(f"tenant {name}'s limits published (log seq {result['seq']}); {result['reason']}")
    else:
        click.echo(f"tenant {name}'s limits set (log seq {result['seq']}): {describe_limits(limits)}")
