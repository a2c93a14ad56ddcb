"""``horizon up --backend``: one backend or several at once (services/front/host/launch_backends.py). What
the list may hold, the options that go with it, and two backends offering a node of one name, each said
as a usage error before anything starts. The backends running together are tests/nodes/test_backends_together.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from services.front.client.problems import BadValue
from services.front.host.launch_backends import parse_backends, shared_names


def test_backends_are_a_comma_list_each_once_in_a_fixed_order() -> None:
    assert parse_backends("agent") == ("agent",)
    assert parse_backends("kubernetes,agent, slurm") == ("agent", "slurm", "kubernetes")
    for text, said in (("lsf", "'lsf' is not a backend"), ("agent,", "'' is not a backend"),
                       ("slurm,slurm", "slurm named twice")):
        with pytest.raises(BadValue) as info:
            parse_backends(text)
        assert said in str(info.value) and info.value.option == "--backend"


def test_a_node_is_one_backend_s() -> None:
    assert shared_names({"slurm": ["s1", "s2"], "kubernetes": ["localhost"], "agent": ["gpu01"]}) is None
    said = shared_names({"slurm": ["gpu01", "s2"], "agent": ["gpu01"]})
    assert said is not None and said.startswith("two backends offer nodes of the same name: gpu01 (slurm and "
                                                "agent); a node is one backend's")
    assert "--node-name" in said


def test_up_says_what_is_wrong_with_the_backends(tmp_path: Path) -> None:
    from services.front.cli.main import cli  # through the group: the command's problems become click's

    for args, said in ((["--backend", "agent,lsf"], "'lsf' is not a backend: choose agent, slurm or kubernetes"),
                       (["--backend", "agent,agent"], "agent named twice"),
                       (["--backend", "slurm,kubernetes", "--nodes", "2"], "--backend slurm,kubernetes has no agent"),
                       (["--backend", "agent,slurm", "--executor", "sim"], "no --executor sim"),
                       (["--backend", "agent,kubernetes", "--processes"], "no --executor sim or --processes"),
                       (["--backend", "agent", "--slurm-partition", "p"], "go with --backend slurm"),
                       (["--backend", "agent,slurm", "--namespace", "ns"], "go with --backend kubernetes")):
        done = CliRunner().invoke(cli, ["up", "--data-dir", str(tmp_path / "d"), *args])
        assert done.exit_code == 2 and said in done.output, (args, done.output)
        assert not (tmp_path / "d").exists()  # said before anything was touched


def test_up_stops_before_its_agent_registers_a_node_another_backend_offers() -> None:
    """``up`` starts its agent last (launch._start_agent): a node name Slurm already offers is a failure
    said before the agent registers anything; apart, every node is offered, the agent's first."""
    import asyncio
    from types import SimpleNamespace

    from services.front.client.problems import Failure
    from services.front.host.launch import _start_agent
    from services.nodes.spec import NodeSpec

    started: list[str] = []

    def stack(slurm_nodes: list[str]) -> SimpleNamespace:
        async def start_agent() -> None:
            started.append("agent")
        backend = SimpleNamespace(agent=SimpleNamespace(nodes={n: NodeSpec(n, 4000, 1 << 30, backend="slurm")
                                                              for n in slurm_nodes}))
        return SimpleNamespace(parts={"slurm": SimpleNamespace(obj=backend)}, nodes=[], start_agent=start_agent)

    mine = [NodeSpec("gpu01", 2000, 1 << 30)]
    with pytest.raises(Failure) as info:
        asyncio.run(_start_agent(stack(["gpu01", "gpu02"]), mine, "process"))  # type: ignore[arg-type]
    assert "gpu01 (slurm and agent)" in str(info.value) and started == []
    nodes, executors = asyncio.run(_start_agent(stack(["s1"]), mine, "process"))  # type: ignore[arg-type]
    assert [n.name for n in nodes] == ["gpu01", "s1"] and executors == ["process", "slurm"] and started == ["agent"]
