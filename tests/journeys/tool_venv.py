"""A workflow tool from PyPI in a venv of its own, as its users install it (issue 34, the tools as
acceptance): ``tool_venv("submitit==1.5.4")`` is the folder of a venv holding exactly those pinned
packages, made once and kept outside the checkout, in ``~/.cache/horizon-test-tools/<pins>/``.

Made with ``python -m venv`` (the interpreter running the tests) and ``pip install`` of the pins, the
way the tool's own docs say to install it; a file ``installed`` is written last, so a venv left
half-made (a run stopped mid-install) is made again. Two runs making the same venv take turns
(``flock`` on a lock file beside it). The tool's packages never enter Horizon's own venv.

Where PyPI cannot be reached (or pip fails), the test is skipped with pip's reason; in CI
(``CI=true``, ``.ci/run``) it fails instead: the tools' acceptance must run there.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CACHE", "tool_venv", "with_the_shims"]

CACHE = Path(os.environ.get("HORIZON_TEST_TOOLS", Path.home() / ".cache" / "horizon-test-tools"))
DONE = "installed"


def _unavailable(why: str) -> None:
    """Skip, saying why; in CI fail: the tools' tests must run there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the workflow tools' acceptance, but {why}")
    pytest.skip(why)


def tool_venv(*pins: str, timeout_s: float = 600.0) -> Path:
    """The venv with ``pins`` installed (``submitit==1.5.4``, ...), made if missing; its folder."""
    key = "+".join(re.sub(r"[^A-Za-z0-9._-]+", "-", pin) for pin in pins)
    venv = CACHE / key
    if (venv / DONE).exists():
        return venv
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run making it: wait for it, then use what it made
        if (venv / DONE).exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            _unavailable(f"python -m venv {venv} failed: {made.stderr.strip()[-2000:]}")
        # --timeout/--retries: an unreachable index fails in seconds, not pip's minutes
        command = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                   "--timeout", "30", "--retries", "2", *pins]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            shutil.rmtree(venv, ignore_errors=True)
            _unavailable(f"pip install {' '.join(pins)} took more than {timeout_s:g} s")
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            _unavailable(f"pip install {' '.join(pins)} failed (is PyPI reachable?): "
                         f"{(done.stderr or done.stdout).strip()[-2000:]}")
        (venv / DONE).write_text(" ".join(pins) + "\n")
    return venv


def with_the_shims(someone: Any, url: str, venv: Path, *absent: str) -> None:
    """``someone`` as the tools' docs set up a machine with no Slurm of its own (CI installs one): the
    shims on PATH talking to the Horizon at ``url`` (docs/slurm.md), the tool's venv active; ``absent``:
    more of Slurm's commands to hide."""
    from services.runtime.command_shims import SLURM_COMMANDS

    someone.env["HORIZON_NATS_URL"] = url
    someone.without(*SLURM_COMMANDS, *absent)
    someone.adopt('eval "$(horizon slurm-shims ~/.horizon/bin)"')
    someone.adopt(f"source {venv}/bin/activate")
