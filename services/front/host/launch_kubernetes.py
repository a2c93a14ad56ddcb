"""``--backend kubernetes`` (``horizon up``) and ``horizon service kubernetes``: the Kubernetes backend's
settings from the command's options, checked before anything starts (docs/backends.md, Kubernetes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.front.client.problems import Failure, UsageProblem
from services.front.host.launch_backends import parse_backends

__all__ = ["kubernetes_options", "kubernetes_settings", "describe"]


def kubernetes_options(backend: str, dev: bool, executor: str, processes: bool, kubeconfig: Path | None,
                       namespace: str, image: str | None) -> bool:
    """Whether kubernetes is among ``backend``'s names (a comma list; "": none), or a usage error for
    options that cannot go with it (``dev``: shape options given, and no agent to take them). Touches
    nothing: ``up`` asks it before any backend is reached."""
    if "kubernetes" not in (parse_backends(backend) if backend else ()):
        if kubeconfig is not None or namespace or image:
            raise UsageProblem("--kubeconfig, --namespace and --default-image go with --backend kubernetes")
        return False
    if dev:
        raise UsageProblem("--backend kubernetes takes its nodes from the cluster: no --nodes or other shape options")
    if executor != "process" or processes:
        raise UsageProblem("--backend kubernetes runs jobs as pods: no --executor sim or --processes")
    return True


def kubernetes_settings(backend: str, dev: bool, executor: str, processes: bool, kubeconfig: Path | None,
                        namespace: str, image: str | None) -> Any:
    """``--backend kubernetes``'s settings (None without kubernetes among ``backend``'s names), or a usage
    error for options that cannot go with it (``kubernetes_options``); a cluster that does not answer, or
    has no nodes or no such namespace, is said now."""
    if not kubernetes_options(backend, dev, executor, processes, kubeconfig, namespace, image):
        return None
    from services.nodes.backends.kubernetes.backend import (DEFAULT_IMAGE, KubernetesSettings, KubernetesUnavailable,
                                                            reachable)

    settings = KubernetesSettings(kubeconfig=str(kubeconfig.resolve()) if kubeconfig is not None else "",
                                  namespace=namespace, image=image or DEFAULT_IMAGE)
    try:  # before anything starts: a cluster that does not answer is said at once
        reachable(settings)
    except KubernetesUnavailable as exc:
        raise Failure(str(exc)) from None
    return settings


def describe(settings: Any) -> str:
    """What runs the jobs, as ``up`` says it."""
    where = settings.kubeconfig or "this pod's service account"
    namespace = settings.namespace or "(the context's)"
    return f"Kubernetes cluster of {where}, pods in namespace {namespace}"
