"""``--backend``: what runs the jobs of one ``horizon up``, one backend or several at once.

``agent`` (Horizon's node agent: this machine, or a development cluster of simulated nodes), ``slurm``
(a Slurm partition's nodes) and ``kubernetes`` (a Kubernetes cluster's nodes), alone or as a comma
list (``agent,slurm,kubernetes``): one queue over all of their nodes, each node offered by one of them
(docs/backends.md, "One queue over several backends"). A node is one backend's: two that offer a
node of the same name are an error said before the second one starts (``shared_names``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.front.client.problems import BadValue

__all__ = ["BACKENDS", "parse_backends", "shared_names"]

BACKENDS = ("agent", "slurm", "kubernetes")  # in the order ``up`` starts them (the agent last: see launch.py)


def parse_backends(text: str | Iterable[str]) -> tuple[str, ...]:
    """``--backend``'s names, each once, in ``BACKENDS``' order; ``BadValue`` for a name that is none of
    them, a name given twice or nothing."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        what = ", ".join(repr(n) for n in unknown) if unknown else "nothing"
        raise BadValue(f"{what} is not a backend: choose agent, slurm or kubernetes, or several separated by "
                       "commas (agent,slurm,kubernetes)", "--backend")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadValue(f"{', '.join(twice)} named twice", "--backend")
    return tuple(b for b in BACKENDS if b in names)


def shared_names(offered: Mapping[str, Iterable[str]]) -> str | None:
    """What is wrong when two backends offer nodes of the same name (backend -> its node names), or None.

    A node's name is its identity in the log: two backends offering ``gpu01`` would each run jobs
    placed on the other's node. (An agent beside a Slurm node names its node after the host, as Slurm
    often does: ``horizon service agent --node-name`` renames it.)"""
    seen: dict[str, str] = {}
    clashes: list[str] = []
    for backend, names in offered.items():
        for name in sorted(names):
            other = seen.setdefault(name, backend)
            if other != backend:
                clashes.append(f"{name} ({other} and {backend})")
    if not clashes:
        return None
    return (f"two backends offer nodes of the same name: {', '.join(clashes)}; a node is one backend's. "
            "Name the agent's node apart (horizon service agent --node-name NAME) or leave one backend out")

