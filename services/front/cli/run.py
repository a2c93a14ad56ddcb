"""Commands that run Horizon: ``horizon up`` (everything on one machine) and ``horizon service``.

Click wiring: composing ``up`` is ``services/front/host/launch.py``'s (``--processes``:
``launch_processes.py``), running one part ``launch_service.py``'s, their HTTP side ``launch_web.py``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from events.vocabulary import BACKFILL_MODES
from services.front.host.launch import (DEV_CPUS, DEV_GPU_TYPE, DEV_GPUS, DEV_MEMORY, DEV_NODES, Shape, UpOptions,
                                        launch_up)
from services.front.host.launch_service import ServiceOptions, launch_service
from services.front.host.launch_web import UI_PORT
from services.front.registry import SERVICES

__all__ = ["register"]

_SHAPE_HELP = "Development cluster (simulated nodes): "


def shape_options(command: Any) -> Any:
    """--nodes, --gpus-per-node, --gpu-type, --cpus-per-node, --memory-per-node: any of them makes a
    development cluster of simulated nodes; none of them, this machine as it is."""
    for option in reversed([
        click.option("--nodes", type=click.IntRange(min=0), default=None,
                     help=f"{_SHAPE_HELP}how many [default: {DEV_NODES} when any shape option is given]. "
                          "Without any shape option: this machine is the one node, as discovered."),
        click.option("--gpus-per-node", type=click.IntRange(min=0), default=None,
                     help=f"{_SHAPE_HELP}GPUs of each [default: {DEV_GPUS}]."),
        click.option("--gpu-type", default=None, help=f"{_SHAPE_HELP}their GPU model, e.g. h100-80gb "
                                                      f"[default: {DEV_GPU_TYPE}]."),
        click.option("--cpus-per-node", default=None, help=f"{_SHAPE_HELP}CPUs of each [default: {DEV_CPUS}]."),
        click.option("--memory-per-node", default=None, help=f"{_SHAPE_HELP}memory of each [default: {DEV_MEMORY}]."),
    ]):
        command = option(command)
    return command


@click.command()
@click.option("--data-dir", type=click.Path(path_type=Path, resolve_path=True), default=Path(".horizon"),
              show_default=True, help="Where the log and the read models live (made absolute at start: every part "
                                      "and every job's supervisor uses it whatever its own directory).")
@click.option("--port", type=int, default=4222, show_default=True, help="NATS client port (0: a free one).")
@shape_options
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True,
              help="process: run the commands for real; sim: jobs only take their sim runtime.")
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True, help="Seconds before a silent node is lost.")
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True,
              help="Queue order within a priority class.")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy",
              show_default=True, help="What a job that does not fit means for the jobs behind it.")
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--ui-port", type=click.IntRange(min=0, max=65535), default=None,
              help=f"HTTP port on 127.0.0.1 serving the web dashboard (/) and /metrics (Prometheus text) for every part `up` runs "
                   f"[default: {UI_PORT}, or a free port if that one is taken; 0: a free port].")
@click.option("--processes", is_flag=True,
              help="Run every part as its own OS process (`horizon service NAME`), restarted if it dies; "
                   "logs in DATA_DIR/logs/, PIDs in DATA_DIR/processes.json.")
@click.option("--auth", is_flag=True,
              help="NATS accounts and permissions: each part and the operator its own user, each tenant an "
                   "account of its own (add them with `horizon tenant add NAME`); credentials in "
                   "DATA_DIR/auth/, never printed. See docs/tenants.md.")
@click.option("--tls", "use_tls", is_flag=True,
              help="Mutual TLS between every part and the server: a CA and certificates made in DATA_DIR/tls/; "
                   "other clients need HORIZON_TLS_CA, HORIZON_TLS_CERT and HORIZON_TLS_KEY.")
@click.option("--backend", default="agent", show_default=True, metavar="NAME[,NAME...]",
              help="What runs the jobs: agent (Horizon's node agent, on this machine or a development cluster), "
                   "slurm (an existing Slurm cluster's partition: Horizon decides, Slurm runs) or kubernetes (a "
                   "Kubernetes cluster's nodes: Horizon binds each job's pods), or several at once, one queue "
                   "over all their nodes: agent,slurm,kubernetes (a gang stays within one; "
                   "--node-selector horizon.io/backend=NAME pins a job; docs/backends.md).")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--backend kubernetes (and --quota-provider kubernetes): the cluster's kubeconfig (its current "
                   "context) [default: this pod's service account].")
@click.option("--namespace", default="", help="--backend kubernetes: where Horizon's pods go [default: the "
              "context's namespace].")
@click.option("--default-image", default=None, help="--backend kubernetes: the image of a job that names no "
              "--image [default: busybox:1.35].")
@click.option("--slurm-conf", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="--backend slurm: the cluster's slurm.conf [default: $SLURM_CONF, else Slurm's own].")
@click.option("--slurm-partition", default="", help="--backend slurm: the partition whose nodes Horizon schedules "
              "onto [default: every node].")
@click.option("--slurm-bin", default="/usr/bin", show_default=True,
              help="--backend slurm: where Slurm's sbatch, scontrol and scancel are.")
@click.option("--quota-provider", type=click.Choice(["local", "slurm", "kubernetes"]), default="local",
              show_default=True,
              help="Where accounts' limits come from: local (horizon account set), slurm (Slurm's associations "
                   "and QOS through sacctmgr, with --slurm-conf) or kubernetes (each namespace's ResourceQuotas, "
                   "with --kubeconfig); synced every --quota-every; docs/backends.md.")
@click.option("--quota-every", default="5m", show_default=True,
              help="--quota-provider slurm|kubernetes: how often to sync (also at start; `horizon quota sync` "
                   "syncs now).")
@click.option("--verbose", is_flag=True)
def up(data_dir: Path, port: int, nodes: int | None, gpus_per_node: int | None, gpu_type: str | None,
       cpus_per_node: str | None, memory_per_node: str | None, executor: str, heartbeat_timeout: float, policy: str,
       backfill_mode: str, otel: str, ui_port: int | None, processes: bool, auth: bool, use_tls: bool,
       backend: str, slurm_conf: Path | None, slurm_partition: str, slurm_bin: str, quota_provider: str,
       quota_every: str, kubeconfig: Path | None, namespace: str, default_image: str | None,
       verbose: bool) -> None:
    """Start everything on this machine: nats-server, the five services, projections, and a node.

    Without shape options the node is this machine as it is: its CPUs, memory and GPUs (found
    through NVML). With any of --nodes, --gpus-per-node, --gpu-type, --cpus-per-node,
    --memory-per-node it is a development cluster of simulated nodes of that shape instead (their
    GPUs are not real devices; jobs still run for real with the process executor).

    One `horizon up` per data directory: a second one on the same --data-dir says who holds it and
    exits non-zero.

    It has partitions of its own nodes, as the operator configures them: main (the default, every
    node), gpu (the nodes with GPUs) and cpu (those without, when there are both); an operator's
    `horizon partition set` is never overwritten.

    With --auth the same stack runs with NATS accounts: the services, the agent, the projections and
    the operator are users of their own with only the subjects they need, and each tenant an account
    of its own whose inputs reach the log only through the submission service's intake. The operator
    commands run beside it find the operator's credentials in the data dir (--data-dir).

    With --backend slurm the nodes are a Slurm partition's (--slurm-conf, --slurm-partition) and
    each job placed on them runs as a Slurm batch job pinned to the nodes Horizon chose. With
    --quota-provider slurm the accounts, their shares and limits are Slurm's (sacctmgr), synced into
    the log at start and every --quota-every; with --quota-provider kubernetes each namespace's
    ResourceQuotas are the limits of the account of its name (--kubeconfig). With --backend
    kubernetes the nodes are a Kubernetes cluster's (--kubeconfig) and each job placed on them runs
    as a pod (--image, else --default-image) in --namespace that Horizon binds to the node it chose.
    With --backend agent,slurm,kubernetes (any two or all three) one queue runs over all of their nodes:
    one fair share, quota tree, preemption order and audit; a multi-node job takes all its nodes from
    one backend, and `horizon nodes` says each node's.
    """
    shape = Shape(nodes, gpus_per_node, gpu_type, cpus_per_node, memory_per_node)
    launch_up(UpOptions(data_dir=data_dir, port=port, shape=shape, executor=executor,
                        heartbeat_timeout=heartbeat_timeout, policy=policy, backfill_mode=backfill_mode, otel=otel,
                        ui_port=ui_port, processes=processes, auth=auth, use_tls=use_tls, backend=backend,
                        slurm_conf=slurm_conf, slurm_partition=slurm_partition, slurm_bin=slurm_bin,
                        quota_provider=quota_provider, quota_every=quota_every, verbose=verbose,
                        kubeconfig=kubeconfig, namespace=namespace, default_image=default_image))


@click.command()
@click.argument("name", metavar="NAME[,SERVICE...]", callback=lambda ctx, param, value: part_names(value))
@click.option("--nats", "nats_url", envvar="HORIZON_NATS_URL", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, resolve_path=True), default=Path(".horizon"),
              show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True, help="Stream replicas (3 on a NATS cluster).")
@shape_options
@click.option("--node-prefix", default="node", show_default=True,
              help="agent, development cluster: node name prefix (nodes PREFIX-00, PREFIX-01, ...).")
@click.option("--node-name", default=None,
              help="agent, this machine: the node's name [default: the short host name].")
@click.option("--executor", type=click.Choice(["process", "sim"]), default="process", show_default=True)
@click.option("--heartbeat-timeout", type=float, default=10.0, show_default=True)
@click.option("--policy", type=click.Choice(["fcfs", "sjf", "f1", "multifactor"]), default="multifactor", show_default=True)
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy",
              show_default=True)
@click.option("--otel", type=click.Choice(["none", "console", "otlp"]), default="none", show_default=True,
              help="OpenTelemetry traces and metrics: printed (console) or sent to OTLP "
                   "($OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None, envvar="HORIZON_METRICS_PORT",
              help="Serve /metrics (Prometheus text) on this port (0: a free one, printed) [default: none].")
@click.option("--metrics", "metrics_std", is_flag=True,
              help="Serve /metrics on the part's own port: submission 9471, scheduling 9472, placement 9473, "
                   "preemption 9474, inventory 9475, projections 9476, agent 9477 (unless --metrics-port).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address --metrics-port listens on (0.0.0.0: every interface, for a scraper elsewhere).")
@click.option("--metrics-token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              envvar="HORIZON_METRICS_TOKEN_FILE",
              help="Answer /metrics only with 'Authorization: Bearer <the token in this file>' (or "
                   "$HORIZON_METRICS_TOKEN_FILE); under accounts its series name tenants [default: open].")
@click.option("--lease-ttl", type=click.IntRange(min=1), default=10, show_default=True,
              help="Seconds a service's leader lease lasts unrenewed: how long a standby waits after its "
                   "leader dies. Must exceed the longest decision round.")
@click.option("--slurm-conf", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="slurm: the cluster's slurm.conf [default: $SLURM_CONF, else Slurm's own].")
@click.option("--slurm-partition", default="", help="slurm: the partition whose nodes Horizon schedules onto "
              "[default: every node].")
@click.option("--slurm-bin", default="/usr/bin", show_default=True, help="slurm: where Slurm's commands are.")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="kubernetes: the cluster's kubeconfig (its current context) [default: this pod's "
                   "service account].")
@click.option("--namespace", default="", help="kubernetes: where Horizon's pods go [default: the "
              "context's namespace].")
@click.option("--default-image", default=None, help="kubernetes: the image of a job that names no "
              "--image [default: busybox:1.35].")
@click.option("--partition", "partitions", multiple=True, metavar="NAME",
              help="scheduling, placement: lead only these partitions' jobs (repeat for several), under "
                   "their own subjects, lease and snapshots (docs/scaling.md) [default: the whole cluster].")
@click.option("--verbose", is_flag=True)
def service(name: str, nats_url: str, data_dir: Path, replicas: int, nodes: int | None, gpus_per_node: int | None,
            gpu_type: str | None, cpus_per_node: str | None, memory_per_node: str | None, node_prefix: str,
            node_name: str | None, executor: str, heartbeat_timeout: float, policy: str, backfill_mode: str,
            otel: str, metrics_port: int | None, metrics_std: bool, metrics_host: str,
            metrics_token_file: Path | None, lease_ttl: int,
            slurm_conf: Path | None, slurm_partition: str, slurm_bin: str, kubeconfig: Path | None, namespace: str,
            default_image: str | None, partitions: tuple[str, ...], verbose: bool) -> None:
    """Run one part alone against any NATS (the distributed shape), or several decision services in one process.

    NAME is one of submission, scheduling, placement, preemption, inventory, projections, agent,
    slurm, kubernetes; or decision services separated by commas (`horizon service
    scheduling,placement,preemption`), which run as they would alone (each its own lease, fence and
    snapshots) but read the log together: one consumer, each record read and decoded once.

    --nats takes one URL or several separated by commas (the servers of a NATS cluster). Once the
    part has caught up with the log it says READY=1 on $NOTIFY_SOCKET if set (systemd Type=notify).

    Run a service as many times as you like: every instance folds the log, the one holding the
    service's lease (KV bucket HORIZON_LEASES) decides, the others are hot standbys that take over
    within --lease-ttl seconds of its death (at once when it stops gracefully).

    The agent hosts this machine as one node (its CPUs, memory and GPUs, as discovered) unless a
    shape option makes it host a development cluster of simulated nodes instead. `slurm` is the
    Slurm backend instead of an agent: a Slurm partition's nodes (--slurm-conf, --slurm-partition;
    docs/backends.md). `kubernetes` is the Kubernetes backend: a cluster's nodes (--kubeconfig,
    --namespace), each job a pod Horizon binds.

    Scheduling and placement scale out by partition: `--partition gpu` runs the leader of partition
    gpu's jobs and nodes only, beside the leaders of the others (each pair on its own subjects;
    fair share and quotas stay global; docs/scaling.md).
    """
    launch_service(ServiceOptions(
        name=name, nats_url=nats_url, data_dir=data_dir, replicas=replicas, nodes=nodes, gpus_per_node=gpus_per_node,
        gpu_type=gpu_type, cpus_per_node=cpus_per_node, memory_per_node=memory_per_node, node_prefix=node_prefix,
        node_name=node_name, executor=executor, heartbeat_timeout=heartbeat_timeout, policy=policy,
        backfill_mode=backfill_mode, otel=otel, metrics_port=metrics_port, metrics_std=metrics_std,
        metrics_host=metrics_host, metrics_token_file=metrics_token_file, lease_ttl=lease_ttl, slurm_conf=slurm_conf,
        slurm_partition=slurm_partition, slurm_bin=slurm_bin, partitions=partitions, kubeconfig=kubeconfig,
        namespace=namespace, default_image=default_image), verbose)


def part_names(value: str) -> str:
    """NAME: one part, or several decision services separated by commas (checked, as given)."""
    parts = [*SERVICES, "projections", "agent", "slurm", "kubernetes"]
    names = [n.strip() for n in value.split(",")]
    for n in names:
        if n not in parts:
            raise click.BadParameter(f"{n!r} is not a part: use one of {', '.join(parts)}", param_hint="NAME")
    if len(set(names)) != len(names):
        raise click.BadParameter(f"{value!r} names a service twice", param_hint="NAME")
    if len(names) > 1 and any(n not in SERVICES for n in names):
        raise click.BadParameter(f"{value!r}: only decision services ({', '.join(SERVICES)}) run several to a "
                                 f"process; run {', '.join(n for n in names if n not in SERVICES)} on its own",
                                 param_hint="NAME")
    return ",".join(names)


def register(group: click.Group) -> None:
    group.add_command(up)
    group.add_command(service)
