"""``horizon submit -- CMD``: a job (or an array) from command-line options, as a ``JobSubmitted``.

Click wiring: the options come in groups (``services/front/cli/submit_options.py``), each decoded into a
small dataclass; what the CLI can check alone is checked there, with the messages the submission
service would give; the rest is the service's verdict, which ``services/front/client/submitter.py``
waits for.
"""

from __future__ import annotations

import json

import click

from services.front.cli.options import nats_option, tenant_option
from services.front.cli.submit_options import (
    Environment,
    Gang,
    Identity,
    Lifecycle,
    Placement,
    Resources,
    Runtime,
    SlurmOrder,
    environment_options,
    gang_options,
    identity_options,
    job_submitted,
    lifecycle_options,
    placement_options,
    resource_options,
    runtime_options,
    slurm_order_options,
)
from services.front.client.submitter import check_submission, print_warnings, report_check, send_submission

__all__ = ["submit", "register"]


@click.command(context_settings={"ignore_unknown_options": False})
@nats_option
@tenant_option
@identity_options
@resource_options
@gang_options
@lifecycle_options
@slurm_order_options
@environment_options
@placement_options
@runtime_options
@click.option("--no-wait", is_flag=True, help="Do not wait for acceptance.")
@click.option("--check", is_flag=True, help="Only ask a submission instance whether the job would be accepted "
                                           "(the validation queue group); submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"job_id\": …, \"state\": …} as JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(nats_url: str, tenant: str, identity: Identity, resources: Resources, gang: Gang, lifecycle: Lifecycle,
           slurm: SlurmOrder, environment: Environment, placement: Placement, runtime: Runtime, no_wait: bool,
           check: bool, as_json: bool, command: tuple[str, ...]) -> None:
    """Submit a job: horizon submit --gpus 2 -- python train.py"""
    event = job_submitted(tenant, identity, resources, gang, lifecycle, slurm, environment, placement, runtime,
                          command)
    job_id = event.job_id
    if check:
        report_check(check_submission(nats_url, event), job_id, as_json)
        return
    result = send_submission(nats_url, event, no_wait=no_wait)
    print_warnings(result, "horizon submit")
    if as_json:
        click.echo(json.dumps(result))
    elif result["state"] != "REJECTED" and (no_wait or result["state"] != "SUBMITTED"):
        click.echo(job_id)
    if result["state"] == "REJECTED":
        raise click.ClickException(f"job {job_id} rejected: {result['reason']}")
    if result["state"] == "SUBMITTED" and not no_wait:
        raise click.ClickException(f"job {job_id}: {result['reason']}")


def register(group: click.Group) -> None:
    group.add_command(submit)
