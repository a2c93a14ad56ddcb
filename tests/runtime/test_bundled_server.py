"""The bundled nats-server: found, started on a free or chosen port, stopped by PID, clear errors."""

from __future__ import annotations

import os
import socket

import pytest

from services.runtime.natsserver import NatsServer, NatsServerError, find_nats_server


def test_binary_is_found():
    path = find_nats_server()
    assert path.name == "nats-server" and os.access(path, os.X_OK)


def test_missing_binary_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HORIZON_NATS_SERVER", str(tmp_path / "nope"))
    with pytest.raises(NatsServerError, match="not an executable"):
        find_nats_server()


def test_free_port_start_and_stop_by_pid(tmp_path):
    server = NatsServer(store_dir=tmp_path / "s", port=0).start()
    pid = server.pid
    assert server.port > 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_port_taken_is_a_clear_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(NatsServerError, match=f"port {port} .* already in use"):
            NatsServer(store_dir=tmp_path / "s", port=port).start()
