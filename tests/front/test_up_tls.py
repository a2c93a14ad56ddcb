"""`horizon up --tls`, with and without --auth: mutual TLS between every part and the server, certificates
made in the data dir; clients present one (HORIZON_TLS_CA/CERT/KEY) or are refused."""

from __future__ import annotations

import json
import ssl
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.front.test_up_auth import Up, clean_env, horizon, start_up, stop_up

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def up_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    running = start_up(tmp_path_factory.mktemp("up-tls"), "--auth", "--tls", "--executor", "sim")
    try:
        yield running
    finally:
        stop_up(running)


def _context(files: dict[str, str], with_cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=files["ca"])
    if with_cert:
        context.load_cert_chain(files["cert"], files["key"])
    return context


async def test_parts_and_tenants_connect_over_mutual_tls(up_tls: Up):
    assert up_tls.first_line == f"tls://127.0.0.1:{up_tls.port}"
    tls_dir = up_tls.data_dir / "tls"
    assert stat.S_IMODE(tls_dir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(key.stat().st_mode) == 0o600 for key in tls_dir.rglob("*.key"))
    done = horizon("tenant", "add", "acme", "--json", "--data-dir", str(up_tls.data_dir))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    url, files = answer["nats_url"], answer["tls"]
    assert url.startswith("tls://acme:") and Path(files["cert"]).parent == tls_dir / "tenants"

    # The tenant with its certificate: connects, and submits through the intake (the services, the
    # projections and the agent all answer over their own mutual-TLS connections).
    nc = await nats.connect(url, tls=_context(files))
    await nc.close()
    env = clean_env(HORIZON_NATS_URL=url, HORIZON_TLS_CA=files["ca"], HORIZON_TLS_CERT=files["cert"],
                    HORIZON_TLS_KEY=files["key"])
    done = horizon("submit", "--json", "--gpus", "1", "--sim-runtime", "0.2", "--job-id", "t-1", "--", "true", env=env)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    while True:
        rows = {r["job_id"]: r["state"] for r in json.loads(horizon("jobs", "--json", env=env).stdout)}
        if rows.get("t-1") == "SUCCEEDED":
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)

    # Without a client certificate, or without TLS at all: refused.
    for attempt in ({"tls": _context(files, with_cert=False)}, {}):
        with pytest.raises(Exception):
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2, **attempt)
    # The CLI says why, at once: with the CA but no certificate (the server refuses it), and with no
    # TLS variables at all (the client refuses the server's CA; nats-py alone then hangs for good
    # closing the connection, nats-io/nats.py#718).
    for tls_env in ({"HORIZON_TLS_CA": files["ca"]}, {}):
        started = time.monotonic()
        refused = horizon("jobs", "--json", env=clean_env(HORIZON_NATS_URL=url, **tls_env))
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert refused.stderr.startswith("Error: cannot connect to NATS at tls://acme:***@"), refused.stderr
        assert "TLS handshake failed" in refused.stderr and "HORIZON_TLS_CERT" in refused.stderr, refused.stderr
        assert time.monotonic() - started < 10

    # The operator's commands beside it present the machine's certificate from the data dir.
    done = horizon("account", "set", "acme", "--tenant", "acme", "--data-dir", str(up_tls.data_dir), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["applied"] is True, done.stderr
    assert "eof_received" not in done.stderr


def test_tls_without_accounts(tmp_path: Path):
    up = start_up(tmp_path, "--tls", "--executor", "sim", "--nodes", "1")
    try:
        assert up.first_line == f"tls://127.0.0.1:{up.port}"
        assert not (up.data_dir / "auth").exists()
        machine = {name: str(up.data_dir / "tls" / f"{stem}") for name, stem in
                   (("HORIZON_TLS_CA", "ca.pem"), ("HORIZON_TLS_CERT", "client.pem"), ("HORIZON_TLS_KEY", "client.key"))}
        done = horizon("nodes", "--json", env=clean_env(HORIZON_NATS_URL=up.first_line, **machine))
        assert done.returncode == 0 and len(json.loads(done.stdout)) == 1, done.stderr
        refused = horizon("nodes", "--json", env=clean_env(HORIZON_NATS_URL=up.first_line,
                                                           HORIZON_TLS_CA=machine["HORIZON_TLS_CA"]))
        assert refused.returncode == 1
        # the operator commands find the server and the certificate in the data dir
        done = horizon("fairshare", "set", "--half-life", "7d", "--data-dir", str(up.data_dir), "--json")
        assert done.returncode == 0, done.stderr
    finally:
        assert stop_up(up) == 0
