"""The ``horizon`` command imports a command's module when the command is asked for, and a process
running one service imports that service alone (services/front/cli/main.py ``COMMAND_MODULES``,
services/front/registry.py): importing everything made every ``horizon`` process spend ~1.5 CPU-seconds
before doing anything, which a benchmark's "from the services' start" and every `horizon submit` paid."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import click

import services.front.cli as cli_package
from services.front.cli.main import COMMAND_MODULES, _speaking_click, cli


def _imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=60)
    return set(out.stdout.split())


def test_the_table_names_every_command_each_module_registers() -> None:
    registered: dict[str, str] = {}
    for info in pkgutil.iter_modules(cli_package.__path__):
        module = importlib.import_module(f"services.front.cli.{info.name}")
        if info.name == "main" or not hasattr(module, "register"):
            continue
        scratch = click.Group()
        module.register(scratch)
        registered.update({name: info.name for name in scratch.commands})
    assert COMMAND_MODULES == registered
    assert sorted(cli.commands) == sorted([*registered, "nats", "schema"])


def test_a_command_is_found_by_name_and_speaks_click() -> None:
    command = cli.commands["submit"]
    assert isinstance(command, click.Command) and command.name == "submit"
    assert cli.get_command(click.Context(cli), "whatif") is cli.commands["whatif"]
    assert "no-such" not in cli.commands and cli.get_command(click.Context(cli), "no-such") is None
    speaking = _speaking_click(lambda: None).__code__  # speak_click's wrapper: on the command, once
    assert command.callback.__code__ is speaking  # type: ignore[union-attr]
    assert command.callback.__wrapped__.__code__ is not speaking  # type: ignore[union-attr]


def test_starting_the_command_line_imports_no_service_and_no_command() -> None:
    loaded = _imported_after("import services.front.cli.main")
    heavy = sorted(m for m in loaded if m.startswith(("services.placement", "services.scheduling", "projections",
                                                      "services.front.cli.bench", "services.front.host.launch",
                                                      "cryptography")))
    assert heavy == []


def test_one_service_imports_itself_alone() -> None:
    loaded = _imported_after("from services.front.registry import SERVICES\nSERVICES['scheduling']\n"
                             "import services.front.host.launch_service")
    assert "services.scheduling.core" in loaded
    others = sorted(m for m in loaded if m.startswith(("services.placement", "services.submission",
                                                       "services.preemption", "services.inventory", "projections",
                                                       "services.nodes.agent", "cryptography")))
    assert others == []
