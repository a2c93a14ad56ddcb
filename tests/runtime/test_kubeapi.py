"""services/runtime/kubeapi.py's pure parts: Kubernetes quantities and kubeconfig files. Its requests
are tried against the real test cluster in tests/nodes/test_kubernetes_backend.py."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from services.runtime.kubeapi import load_kubeconfig, quantity


@pytest.mark.parametrize(("text", "scale", "expected"), [
    ("2", 1000, 2000), ("500m", 1000, 500), ("1.5", 1000, 1500), ("1Gi", 1, 1 << 30),
    ("3977232Ki", 1, 3977232 * 1024), ("100M", 1, 100_000_000), ("1e3", 1, 1000), ("0.1", 1, 1), (4, 1, 4),
    ("", 1, 0), (None, 1, 0),
])
def test_quantities(text: object, scale: float, expected: int) -> None:
    assert quantity(text, scale) == expected  # type: ignore[arg-type]


def test_no_quantity_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity("two")


def test_a_kubeconfig_with_files_relative_to_it_and_inline_data(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("CA")
    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode()
    (tmp_path / "config").write_text(f"""
apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {{server: "https://10.0.0.1:6443/", certificate-authority: ca.crt}}
- name: b
  cluster: {{server: "https://b:443", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{client-certificate-data: "{pem}", client-key: /keys/u.key}}
- name: t
  user: {{token: abc}}
contexts:
- name: one
  context: {{cluster: a, user: u, namespace: ml}}
- name: two
  context: {{cluster: b, user: t}}
current-context: one
""")
    one = load_kubeconfig(tmp_path / "config")
    assert one.server == "https://10.0.0.1:6443"
    assert one.ca_file == str(tmp_path / "ca.crt")
    assert one.cert_data == b"-----BEGIN CERTIFICATE-----" and one.key_file == "/keys/u.key"
    assert one.namespace == "ml"
    two = load_kubeconfig(tmp_path / "config", "two")
    assert (two.server, two.token, two.insecure, two.namespace) == ("https://b:443", "abc", True, "default")
    with pytest.raises(ValueError, match="no context named 'three'"):
        load_kubeconfig(tmp_path / "config", "three")
