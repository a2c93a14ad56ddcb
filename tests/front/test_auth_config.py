"""The generated configuration of `horizon up --auth` (services/front/host/auth.py), its reload, and its TLS
pieces, on a real nats-server without the stack: fast checks of what tests/front/test_up_auth.py then runs
whole."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import stat
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest

from services.front.client.client import tenant_of_url
from services.front.host.auth import (
    HORIZON_USERS,
    Registry,
    check_tenant_name,
    render_config,
    service_permissions,
    tenant_imports,
    user_url,
)
from services.front.host.running import Running
from services.front.host.tenants import open_doors
from services.front.host.tls import ensure_machine_certificates, tenant_certificate
from services.runtime.natsserver import NatsServer
from services.runtime.tls import TlsSettingsError, client_tls
from services.submission.intake_rules import screen

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
AUTH_CONF = ROOT / "deploy" / "nats" / "auth.conf"


# ------------------------------------------------------------------ the hand-written model stays in step

def _strip_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())  # no '#' inside its strings


def _user_block(conf: str, user: str) -> str:
    start = conf.index(f"{{ user: {user},")
    following = conf.find("{ user:", start + 1)
    return conf[start:following if following > 0 else len(conf)]


def test_auth_conf_grants_what_the_generator_grants():
    """deploy/nats/auth.conf (the annotated example) and services/front/host/auth.py (what `up --auth` runs)
    give every user of HORIZON the same subjects, and a tenant the same imports."""
    conf = _strip_comments(AUTH_CONF.read_text())
    for user, perms in service_permissions().items():
        block = _user_block(conf, user)
        block = block[block.index("permissions:"):]  # not the password
        publish, _, subscribe = block.partition("subscribe:")
        allowed = set(re.findall(r'"([^"]+)"', publish.split("deny:")[0]))
        assert allowed == set(perms.publish), (user, allowed ^ set(perms.publish))
        assert set(re.findall(r'"([^"]+)"', publish.split("deny:")[1] if "deny:" in publish else "")) == set(
            perms.deny_publish), user
        assert set(re.findall(r'"([^"]+)"', subscribe)) == set(perms.subscribe), user
        assert ("allow_responses: true" in block) == perms.allow_responses, user
    acme = conf[conf.index("ACME {"):conf.index("GLOBEX {")]
    imports = {(m[0], m[1] or m[0]) for m in re.findall(r'subject: "([^"]+)" \}\s*(?:,\s*to:\s*"([^"]+)")?', acme)}
    generated = set()
    for entry in tenant_imports("acme"):
        subject = (entry.get("service") or entry["stream"])["subject"]
        generated.add((subject, entry.get("to", subject)))
    assert imports == generated


def test_only_the_intake_and_the_operator_write_client_inputs():
    writers = {user for user, p in service_permissions().items()
               if any(s in (">", "horizon.in.>") for s in p.publish)}
    assert writers == {"submission", "admin"}


# ------------------------------------------------------------------ names, URLs, files

def test_tenant_names():
    assert check_tenant_name("acme-1_x") == "acme-1_x"
    for bad in ("_admin", "a.b", "a*", "", "x" * 129, "admin", "submission", "projections"):
        with pytest.raises(ValueError):
            check_tenant_name(bad)


def test_the_cli_reads_the_tenant_from_a_tenants_url():
    assert tenant_of_url(user_url("nats", "acme", "p@ss:/word", "127.0.0.1", 4222)) == "acme"
    assert tenant_of_url("tls://globex:x@host:1,tls://globex:x@other:1") == "globex"
    assert tenant_of_url("nats://admin:x@127.0.0.1:4222") is None  # the operator is no tenant
    assert tenant_of_url("nats://127.0.0.1:4222") is None
    assert tenant_of_url(None) is None


def test_the_registry_keeps_passwords_private_and_adds_idempotently(tmp_path: Path):
    with Registry.locked(tmp_path) as registry:
        first, new = registry.add_tenant("acme")
        assert new and set(registry.users) == set(HORIZON_USERS)
        registry.write_config(None)
    with Registry.locked(tmp_path) as registry:
        again, new = registry.add_tenant("acme")
        assert not new and again["password"] == first["password"]
    auth = tmp_path / "auth"
    assert stat.S_IMODE(auth.stat().st_mode) == 0o700
    for name in ("users.json", "tenants.json", "nats.conf"):
        assert stat.S_IMODE((auth / name).stat().st_mode) == 0o600, name
    assert len({*Registry.read_users(tmp_path).values()}) == len(HORIZON_USERS)  # each its own password


def test_the_intake_ignores_the_header_the_server_adds_across_accounts():
    kept, refused = screen("acme", {"Nats-Msg-Id": "a-1", "Nats-Request-Info": '{"acc":"tenant-acme","rtt":1}'})
    assert refused == [] and "Nats-Request-Info" not in kept and kept["Nats-Msg-Id"] == "in/acme/a-1"


def test_client_tls_from_the_environment(tmp_path: Path):
    assert client_tls({}) is None
    server, client = ensure_machine_certificates(tmp_path)
    assert isinstance(client_tls(client.env()), ssl.SSLContext)
    with pytest.raises(TlsSettingsError, match="HORIZON_TLS_CERT"):
        client_tls({**client.env(), "HORIZON_TLS_CERT": str(tmp_path / "missing.pem")})
    assert stat.S_IMODE(client.key.stat().st_mode) == 0o600
    again = ensure_machine_certificates(tmp_path)  # kept, not made anew
    assert again[0].cert.read_bytes() == server.cert.read_bytes()


# ------------------------------------------------------------------ on a real server

def _start(tmp_path: Path, tenants: list[str], tls: dict[str, str] | None = None) -> tuple[NatsServer, Running]:
    with Registry.locked(tmp_path) as registry:
        for tenant in tenants:
            registry.add_tenant(tenant)
        config = registry.write_config(tls).resolve()
    server = NatsServer(store_dir=tmp_path / "js", port=0, config=config, log_file=tmp_path / "nats.log").start()
    assert server.pid is not None
    return server, Running("127.0.0.1", server.port, server.pid, auth=True, tls=tls is not None, config=str(config))


def _url(tmp_path: Path, running: Running, user: str) -> str:
    users = Registry.read_users(tmp_path)
    tenants = json.loads((tmp_path / "auth" / "tenants.json").read_text())
    password = users[user] if user in users else tenants[user]["password"]
    return user_url(running.scheme, user, password, running.host, running.port)


async def test_a_tenant_added_to_a_running_server_is_served_after_its_reloads(tmp_path: Path):
    """The tenant's js.publish on horizon.in.<t>.submit reaches HORIZON on horizon.intake.<t>.submit (a
    service import mapped with wildcards) and the intake's answer comes back as the PubAck; a tenant
    added while the server runs gets the same once open_doors has reloaded it (twice, measured)."""
    server, running = _start(tmp_path, ["acme"])
    clients: list[Any] = []
    try:
        intake = await nats.connect(_url(tmp_path, running, "submission"))
        clients.append(intake)
        arrived: list[tuple[str, str]] = []

        async def answer(msg: Any) -> None:
            arrived.append((msg.subject, msg.headers.get("Nats-Msg-Id", "") if msg.headers else ""))
            await msg.respond(json.dumps({"stream": "HORIZON", "seq": len(arrived)}).encode())

        await intake.subscribe("horizon.intake.*.*", queue="intake", cb=answer)
        await intake.flush()
        acme = await nats.connect(_url(tmp_path, running, "acme"))
        clients.append(acme)
        ack = await acme.jetstream(timeout=5).publish("horizon.in.acme.submit", b"{}", headers={"Nats-Msg-Id": "a-1"})
        assert (ack.stream, ack.seq) == ("HORIZON", 1)
        assert arrived == [("horizon.intake.acme.submit", "a-1")]
        with pytest.raises(nats.js.errors.NoStreamResponseError):  # no door to another tenant's intake
            await acme.jetstream(timeout=5).publish("horizon.in.globex.submit", b"{}")

        with Registry.locked(tmp_path) as registry:
            registry.add_tenant("globex")
            registry.write_config(None)
        globex_url = _url(tmp_path, running, "globex")
        reloads = await open_doors(running, _url(tmp_path, running, "admin"), "globex", globex_url)
        assert reloads >= 2  # one reload alone leaves the new account's imports unwired (nats-server 2.15)
        globex = await nats.connect(globex_url)
        clients.append(globex)
        ack = await globex.jetstream(timeout=5).publish("horizon.in.globex.submit", b"{}")
        assert arrived[-1][0] == "horizon.intake.globex.submit"
        # acme's door still works after the reloads, on its connection from before them
        await acme.jetstream(timeout=5).publish("horizon.in.acme.cancel", b"{}")
        assert arrived[-1][0] == "horizon.intake.acme.cancel"
        assert await open_doors(running, _url(tmp_path, running, "admin"), "globex", globex_url, changed=False) == 0
    finally:
        for nc in clients:
            await nc.close()
        server.stop()


async def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path):
    server_files, client = ensure_machine_certificates(tmp_path)
    tls = {"ca": str(server_files.ca), "cert": str(server_files.cert), "key": str(server_files.key)}
    server, running = _start(tmp_path, ["acme"], tls)
    try:
        mine = tenant_certificate(tmp_path, "acme")
        context = ssl.create_default_context(cafile=str(mine.ca))
        context.load_cert_chain(str(mine.cert), str(mine.key))
        url = _url(tmp_path, running, "acme")
        assert url.startswith("tls://acme:") and url.endswith(f"@127.0.0.1:{server.port}")
        nc = await nats.connect(url, tls=context)
        await nc.close()
        ca_only = ssl.create_default_context(cafile=str(mine.ca))
        for attempt in (dict(tls=ca_only), {}):  # no client certificate; and not even the CA
            with pytest.raises(Exception):
                await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2,
                                   **attempt)
        await asyncio.sleep(0.1)
        assert "certificate" in (tmp_path / "nats.log").read_text()  # the server says why it refused
    finally:
        server.stop()


def test_render_config_without_accounts_is_tls_alone():
    text = render_config(None, {}, {"ca": "/ca.pem", "cert": "/s.pem", "key": "/s.key"})
    body = json.loads(text[text.index("{"):])
    assert "accounts" not in body and body["tls"]["verify"] is True


def test_sbatch_takes_the_tenant_from_a_tenants_url():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("HORIZON_TENANT", "HORIZON_NATS_URL")}
    done = subprocess.run([sys.executable, "-m", "services.front.cli.main", "sbatch", "--nats", "nats://acme:pw@127.0.0.1:1",
                           "--dry-run", "--wrap", "true"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tenant"] == "acme"
