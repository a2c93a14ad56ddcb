"""A person at a shell: runs the docs' commands as typed, in folders of their own, with the defaults.

A ``Person`` has a home folder of its own, the clone's ``.venv/bin`` first on PATH (as after
``source .venv/bin/activate``) and none of the variables a test session sets (HORIZON_*, PYTHON*),
so what it sees is what someone who just followed the README sees. Commands run through ``bash -c``
exactly as the doc prints them, after the doc's placeholders (``JOB_ID``) are replaced by what the
person has at hand (the id ``submit`` printed). A foreground command that runs until Ctrl-C
(``horizon up``, ``watch``, ``logs -f``) is started with ``start`` and stopped with ``interrupt``:
SIGINT to its process group, as a terminal's Ctrl-C sends it; processes are stopped by their PID.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from services.runtime.natsserver import port_is_free
from tests.journeys.docblocks import Command


@dataclass
class Result:
    command: str
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"$ {self.command}\n[exit {self.rc}]\n{self.out}{self.err}"


class Background:
    """A command left running, as in a terminal of its own (``up``, ``watch``)."""

    def __init__(self, command: str, cwd: Path, env: Mapping[str, str], logs: Path) -> None:
        self.command = command
        logs.mkdir(parents=True, exist_ok=True)
        stem = f"bg-{time.monotonic_ns()}"
        self.out_path, self.err_path = logs / f"{stem}.out", logs / f"{stem}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err, start_new_session=True)

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 120.0, stream: str = "err") -> re.Match[str]:
        """The first match of ``pattern`` in its output; fails if it exits or the time runs out first."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.err if stream == "err" else self.out
            found = re.search(pattern, text)
            if found:
                return found
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.command!r} exited {self.proc.returncode} before {pattern!r}:\n"
                                     f"{self.out}{self.err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.command!r}: no {pattern!r} after {timeout:g} s:\n{self.out}{self.err}")
            time.sleep(0.2)

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C: SIGINT to its process group; waits for it to end (SIGKILL after ``timeout``)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.command!r} did not stop on Ctrl-C within {timeout:g} s:\n{self.err}")
        return self.proc.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


class Person:
    def __init__(self, home: Path, bin_dir: Path, cwd: Path | None = None) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd or home
        self.bin_dir = bin_dir
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("HORIZON_", "PYTHON", "PYTEST", "VIRTUAL_ENV", "SLURM_", "NOTIFY_SOCKET"))}
        # pip's cache stays where it was (a person's is warm after their first install)
        base.setdefault("XDG_CACHE_HOME", str(Path(os.environ.get("HOME", "/root")) / ".cache"))
        self.env: dict[str, str] = {**base, "HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', '')}",
                                    "VIRTUAL_ENV": str(bin_dir.parent)}
        self.subs: dict[str, str] = {}  # placeholder in the docs -> what the person has at hand
        self.started: list[Background] = []

    def folder(self, name: str) -> Path:
        """A folder of the person's (made if missing), e.g. a project to submit from."""
        path = self.home / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def typed(self, command: Command | str) -> str:
        """The command as the person types it: the doc's text with its placeholders filled in."""
        text = command.text if isinstance(command, Command) else command
        for placeholder, value in self.subs.items():
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", placeholder):
                text = re.sub(rf"(?<![A-Za-z0-9_$]){placeholder}(?![A-Za-z0-9_])", lambda _m: value, text)
            else:
                text = text.replace(placeholder, value)
        return text

    def run(self, command: Command | str, *, cwd: Path | None = None, timeout: float = 120.0,
            ok: bool | None = True, env: Mapping[str, str] | None = None) -> Result:
        """Run one command to its end. ``ok``: True, it must exit 0; False, it must fail; None, either."""
        text = self.typed(command)
        proc = subprocess.run(["bash", "-c", text], cwd=cwd or self.cwd, env={**self.env, **(env or {})},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        result = Result(text, proc.returncode, proc.stdout, proc.stderr)
        if ok is True:
            assert proc.returncode == 0, f"a documented command failed:\n{result}"
        elif ok is False:
            assert proc.returncode != 0, f"a documented command should have failed:\n{result}"
        return result

    def start(self, command: Command | str, *, cwd: Path | None = None,
              env: Mapping[str, str] | None = None) -> Background:
        bg = Background(self.typed(command), cwd or self.cwd, {**self.env, **(env or {})}, self.home / ".journey-logs")
        self.started.append(bg)
        return bg

    def until(self, command: Command | str, check: Callable[[Result], bool], timeout: float = 60.0,
              **kw: object) -> Result:
        """Run ``command`` again until ``check`` holds of its result (what a person does with `jobs`)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.run(command, ok=None, **kw)  # type: ignore[arg-type]
            if check(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up after {timeout:g} s waiting on:\n{result}")
            time.sleep(0.5)

    def adopt(self, command: Command | str, **kw: object) -> Result:
        """Run a command that changes the shell itself (``eval "$(...)"``, ``export``, ``source``) and
        keep what it changed for every command after it, as the person's terminal would."""
        marker = "\0journey-env\0"
        text = self.typed(command)
        result = self.run(f"{text}\nstatus=$?; printf '\\0journey-env\\0'; env -0; exit $status", **kw)  # type: ignore[arg-type]
        out, _, env = result.out.partition(marker)
        if env:
            after = dict(item.split("=", 1) for item in env.split("\0") if "=" in item)
            for name in ("PWD", "OLDPWD", "SHLVL", "_"):
                after.pop(name, None)
            self.env = after
        return Result(text, result.rc, out, result.err)

    def without(self, *commands: str) -> Path:
        """A machine without these commands (say, no Slurm installed): PATH becomes the clone's
        ``.venv/bin`` and one folder of links to every other command PATH finds, first found first."""
        folder = self.home / ".journey-path"
        folder.mkdir(parents=True, exist_ok=True)
        for directory in self.env.get("PATH", "").split(os.pathsep):
            if not directory or Path(directory) == self.bin_dir or not Path(directory).is_dir():
                continue
            for entry in Path(directory).iterdir():
                link = folder / entry.name
                if entry.name not in commands and not link.is_symlink():
                    link.symlink_to(entry)
        self.env["PATH"] = os.pathsep.join([str(self.bin_dir), str(folder)])
        return folder

    def stop_all(self) -> None:
        for bg in reversed(self.started):
            if bg.proc.poll() is None:
                try:
                    bg.interrupt(timeout=30)
                except AssertionError:
                    pass
        self.started.clear()


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    return port_is_free(host, port)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
