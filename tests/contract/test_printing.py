"""Free text is stored as sent and printed safely (issue 31, item 3; services/front/client/terminal.py).

A job's name, a cancel's reason, a user's name ... reached the terminal as they were written:
ESC sequences, NUL, carriage returns and bidi overrides (U+202E) acted on it. Now every command's
text goes through ``printable`` once (its streams, and rich's cells), so they show as visible
escapes; a job's own output, printed by ``horizon logs``, stays the job's bytes.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys

import pytest
from rich.table import Table

from services.nodes.spec import local_nodes
from services.front.client.terminal import PrintableText, printable, printable_output
from tests.front.test_cli_slurm import horizon, publish_in_order
from tests.e2e import job_json

pytestmark = pytest.mark.timeout(120)

# What must never reach a terminal from data: C0 but tab and newline, DEL, C1, bidi, separators.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
HOSTILE = "ev\x1b[31mil\x00\r\u202etxt.exe\x9b2J"


def test_printable_worked_example():
    # ESC, NUL and CR below U+007F as \xHH; C1's CSI and the RLO as \uHHHH (JSON reads those back)
    assert printable(HOSTILE) == "ev\\x1b[31mil\\x00\\x0d\\u202etxt.exe\\u009b2J"
    assert printable("plain ünïcödé, 𝛑, tab\tand\nnewline") == "plain ünïcödé, 𝛑, tab\tand\nnewline"
    assert printable("\ud800") == "\\ud800"  # a lone surrogate: a UTF-8 terminal could not even be sent it
    assert json.loads(json.dumps({"n": printable("a\u202eb\u0085")}, ensure_ascii=False).replace("\\\\u", "\\u")) \
        == {"n": "a\u202eb\u0085"}  # in a JSON string the escape is the character again


def test_the_streams_escape_text_and_pass_bytes():
    raw = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    out = PrintableText(raw)
    out.write("name: " + HOSTILE + "\n")
    out.buffer.write(b"\x1b[32mthe job's own output\x1b[0m\n")  # bytes: as they are (horizon logs)
    out.flush()
    written = raw.buffer.getvalue()
    assert written.startswith(b"\x1b[32mthe job's own output")  # the buffer's bytes came first (unbuffered)
    assert b"name: ev\\x1b[31mil" in written and b"\x1b[31m" not in written
    with pytest.raises(TypeError):
        out.write(b"")  # what click asks to tell a binary stream


def test_a_table_escapes_its_cells_and_keeps_its_columns():
    from services.front.cli.options import console

    with printable_output():
        table = Table(box=None)
        table.add_column("NAME")
        table.add_column("STATE")
        table.add_row(HOSTILE, "PENDING")
        table.add_row("x", "RUNNING")
        c = console()
        with c.capture() as cap:
            c.print(table)
    lines = cap.get().splitlines()
    assert not RAW.search(cap.get())
    assert lines[1].startswith(" " + printable(HOSTILE)) and lines[1].index("PENDING") == lines[2].index("RUNNING")


async def test_no_command_prints_a_control_character_of_data(running_horizon):
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=2), executor="sim")
    url = h.url
    await publish_in_order(url, [
        ("horizon.in.default.submit", job_json("j1", tenant="default", name=HOSTILE, resources={"gpus": 1},
                                               sim_runtime_s=600), "j1"),
        ("horizon.in.default.submit", job_json("j2", tenant="default", name=HOSTILE, resources={"gpus": 2},
                                               sim_runtime_s=600), "j2"),
        ("horizon.in.default.submit", job_json("j3", tenant="default", name=HOSTILE,
                                               user="eve\x1b]0;pwned\x07"), "j3"),  # rejected: no such user
    ])
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        code, out, err = await horizon(url, "jobs", "--json")
        rows = {r["job_id"]: r for r in json.loads(out or "[]")} if code == 0 else {}
        if rows.get("j1", {}).get("state") == "RUNNING" and "j2" in rows and "j3" in rows:
            break
        assert asyncio.get_running_loop().time() < deadline, (out, err)
        await asyncio.sleep(0.2)
    assert rows["j1"]["name"] == HOSTILE  # stored as sent
    code, _, err = await horizon(url, "hold", "j2", "--reason", "because \x1b[2J\u202e")
    assert code == 0, err
    for command in (("jobs",), ("jobs", "--json"), ("show", "j1"), ("show", "j2"), ("queue",), ("queue", "--why"),
                    ("squeue", "-a", "-t", "all", "-o", "%i %j %u %R"), ("sacct", "-a", "-S", "now-1day"),
                    ("scontrol", "show", "job", "j1"), ("jobs", "--user", HOSTILE), ("show", "j3")):
        code, out, err = await horizon(url, *command)
        assert not RAW.search(out) and not RAW.search(err), (command, out, err)
        if command[0] in ("jobs", "show", "squeue", "sacct") and "--user" not in command:
            # the name, visibly (click drops an ESC sequence itself when the output is no terminal)
            assert "\\u202etxt.exe" in out, (command, out)
    # squeue under its own name (the shims' dispatcher), in a process of its own
    shim = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "services.front.cli.slurm_dispatch", "squeue",
                                                    "--nats", url, "-t", "all", "-o", "%i %j"],
                                   capture_output=True, text=True, timeout=60)
    assert shim.returncode == 0 and "\\u202etxt.exe" in shim.stdout and not RAW.search(shim.stdout), shim
    await h.stop()
