"""Tenants as a person meets them: the README's block (``horizon up --auth``, a tenant added, its job
through its own URL, the operator's account) and docs/tenants.md's try-it (two tenants with the
same job id, each seeing its own; an account open to one of them) with the page's reference blocks,
each in a folder of the person's with its relative ``.horizon``. Where a doc shows a tenant's URL
(``nats://acme:…@127.0.0.1:4222``) the person puts the one ``tenant add --json`` printed."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.journeys.conftest import Up, start_up, submitted_id
from tests.journeys.docblocks import Command, block
from tests.journeys.person import Person

pytestmark = pytest.mark.timeout(300)


def _text(command: Command) -> str:
    return command.text.split("  #")[0].strip()


def _added(person: Person, command: Command | str, up: Up, tenant: str) -> str:
    """``horizon tenant add NAME --json``: its answer, and the URL it carries (the person's to use)."""
    answer = json.loads(person.run(command).out)
    port = urlsplit(up.url).port
    assert answer["tenant"] == tenant and set(answer) == {"tenant", "nats_url"}, answer
    assert re.fullmatch(rf"nats://{tenant}:[A-Za-z0-9_-]{{16,}}@127\.0\.0\.1:{port}", answer["nats_url"]), answer
    return answer["nats_url"]


def _as(url: str, command: str) -> str:
    return f"HORIZON_NATS_URL='{url}' {command}"


def _wait_ended(person: Person, url: str, job: str, timeout: float = 90.0, env_file: Path | None = None) -> dict:
    """What the tenant does: its own `horizon jobs` again until its job has ended (as its URL says,
    or with its variables from ``env_file``)."""
    def ended(result: object) -> bool:
        rows = json.loads(getattr(result, "out") or "[]") if getattr(result, "rc") == 0 else []
        return any(r["job_id"] == job and r["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for r in rows)

    command = f"set -a; . {env_file}; set +a; horizon jobs --json" if env_file else _as(url, "horizon jobs --json")
    rows = json.loads(person.until(command, ended, timeout=timeout).out)
    return next(r for r in rows if r["job_id"] == job)


def _no_password_printed(person: Person, up: Up, cluster: str) -> None:
    """Passwords are generated and never printed by `up`, nor written to its log."""
    data = person.folder(cluster) / ".horizon"
    secrets = [*json.loads((data / "auth" / "users.json").read_text()).values(),
               *json.loads((data / "auth" / "tenants.json").read_text()).values()]
    said = up.bg.out + up.bg.err + (data / "horizon.log").read_text(errors="replace")
    assert secrets and not [s for s in secrets if isinstance(s, str) and len(s) >= 16 and s in said]


def test_readme_tenants_block(person: Person) -> None:
    up_cmd, add, submit, account = block("readme-tenants").commands
    person.cwd = person.folder("cluster")
    assert _text(up_cmd) == "horizon up --auth", up_cmd
    up = start_up(person, up_cmd.text, cwd=person.cwd)
    assert "Accounts on" in up.bg.err, up.bg.err
    # up's own hint for adding a tenant is a command that prints the URL
    hint = next(line.strip() for line in up.bg.err.splitlines() if line.strip().startswith("horizon tenant add"))
    assert "--json" in hint.split("#")[0], hint

    url = _added(person, add, up, "acme")
    shown = json.loads(add.text.split("#", 1)[1])  # the answer's shape, as the block's comment shows it
    assert set(shown) == {"tenant", "nats_url"} and shown["tenant"] == "acme"
    person.subs[submit.text.split("'")[1]] = url  # the doc's nats://acme:…@127.0.0.1:4222
    job = submitted_id(person.run(submit))
    row = _wait_ended(person, url, job)
    assert row["state"] == "SUCCEEDED", row
    assert person.run(_as(url, f"horizon logs {job}")).out.strip() == socket.gethostname()

    applied = person.run(account)
    assert re.search(r"account acme applied \(log seq \d+\)", applied.out), applied
    # the operator sees the tenant's job by its key in the log; the tenant by its own id
    operator_rows = json.loads(person.run("horizon jobs --json").out)
    assert f"acme:{job}" in [r["job_id"] for r in operator_rows], operator_rows
    _no_password_printed(person, up, "cluster")
    assert up.bg.interrupt() == 0, up.bg.err


def test_tenants_try_it_and_the_reference_blocks(person: Person) -> None:
    commands = block("tenants-try-it").commands
    person.cwd = person.folder("cluster")
    assert _text(commands[0]) == "horizon up --auth"
    up = start_up(person, commands[0].text, cwd=person.cwd)
    urls: dict[str, str] = {}
    for command in commands[1:]:
        text = _text(command)
        tenant = next((t for t in ("acme", "globex") if f"nats://{t}:" in text), None)
        if text.startswith("horizon tenant add"):
            name = text.split()[3]
            urls[name] = _added(person, command, up, name)
            person.subs[f"nats://{name}:…@127.0.0.1:4222"] = urls[name]
            continue
        if tenant and " jobs" in text:  # the tenant's table: its eval-7 alone, once it has ended
            assert _wait_ended(person, urls[tenant], "eval-7")["state"] == "SUCCEEDED"
            table = person.run(command).out
            assert [line for line in table.splitlines() if "eval-7" in line], table
            assert len([line for line in table.splitlines() if "eval-7" in line]) == 1, table
            assert "globex" not in table and "acme:" not in table, table
            continue
        if tenant and " logs " in text:
            assert person.run(command).out.strip() == f"hello from {tenant}"
            continue
        if text == "horizon jobs":  # the operator's: both, by their keys in the log
            _wait_ended(person, urls["globex"], "eval-7")
            table = person.run(command).out
            assert "acme:eval-7" in table and "globex:eval-7" in table, table
            continue
        if "--account research" in text and tenant == "globex":  # refused, as the text under the block says
            refused = person.run(command, ok=False)
            assert refused.rc == 1, refused
            assert "account 'research' is not open to tenant 'globex'" in refused.out + refused.err, refused
            continue
        result = person.run(command)
        if text.startswith("horizon account set"):
            assert re.search(r"account research applied \(log seq \d+\)", result.out), result
        elif tenant and "--account research" in text:
            row = _wait_ended(person, urls[tenant], submitted_id(result))
            assert row["state"] == "SUCCEEDED", row
        elif "--job-id eval-7" in text:
            assert result.out.strip() == "eval-7", result

    # "Accounts belong to tenants": the operator's command as the section shows it (setting an
    # account again replaces its configuration with the same: still acme's alone)
    (account,) = block("tenants-account-set").commands
    assert re.search(r"account research applied", person.run(account).out)
    refused = person.run(_as(urls["globex"], "horizon submit --account research -- true"), ok=False)
    assert "account 'research' is not open to tenant 'globex'" in refused.out + refused.err, refused

    # "Tenants: horizon tenant add NAME": the answer as shown; adding a tenant again prints the same
    (again,) = block("tenants-add-json").commands
    assert _text(again) == "horizon tenant add acme --json"
    shown = again.shown[0]
    assert shown.replace("<password>", "PASSWORD") == json.dumps(
        {"tenant": "acme", "nats_url": "nats://acme:PASSWORD@127.0.0.1:4222"}), shown
    assert _added(person, again, up, "acme") == urls["acme"]
    assert (person.cwd / ".horizon" / "auth" / "tenants" / "acme.env").stat().st_mode & 0o777 == 0o600
    _no_password_printed(person, up, "cluster")
    assert up.bg.interrupt() == 0, up.bg.err


def test_tenants_over_mutual_tls(person: Person) -> None:
    """"Mutual TLS": the tenant's answer carries its certificate, its .env file works from anywhere,
    the operator's commands find this machine's certificate, and a client without one is refused
    with a word (nats-py alone would hang for good)."""
    up_cmd, add, loaded, operator, refused = block("tenants-tls").commands
    person.cwd = person.folder("cluster")
    assert _text(up_cmd) == "horizon up --auth --tls"
    up = start_up(person, up_cmd.text, cwd=person.cwd)
    assert up.url.startswith("tls://127.0.0.1:"), up.url
    answer = json.loads(person.run(add).out)
    port = urlsplit(up.url).port
    assert re.fullmatch(rf"tls://acme:[A-Za-z0-9_-]{{16,}}@127\.0\.0\.1:{port}", answer["nats_url"]), answer
    data = person.cwd / ".horizon"
    assert answer["tls"] == {"ca": str(data / "tls" / "ca.pem"), "cert": str(data / "tls" / "tenants" / "acme.pem"),
                             "key": str(data / "tls" / "tenants" / "acme.key")}, answer
    person.subs["tls://acme:…@127.0.0.1:4222"] = answer["nats_url"]

    job = submitted_id(person.run(loaded))
    elsewhere = person.folder("elsewhere")  # the file handed over works from another folder too
    env_file = data / "auth" / "tenants" / "acme.env"
    row = _wait_ended(person, answer["nats_url"], job, env_file=env_file)
    assert row["state"] == "SUCCEEDED", row
    mine = person.run(f"set -a; . {env_file}; set +a; horizon logs {job}", cwd=elsewhere)
    assert mine.out.strip() == socket.gethostname(), mine
    table = person.run(operator).out
    assert f"acme:{job}" in table, table
    said = person.run(refused, ok=False, timeout=30)
    assert "TLS handshake failed" in said.err and "HORIZON_TLS_CA" in said.err, said
    assert "Traceback" not in said.err, said
    assert up.bg.interrupt() == 0, up.bg.err
