"""Certificates for ``horizon up --tls``: a private CA and the certificates it signs, for one machine.

Mutual TLS: the server proves itself to every client with a certificate the
clients check against the CA, and every client (each part of the stack, the
operator's CLI, each tenant) proves itself with a client certificate signed by
the same CA (``verify: true`` in the server's ``tls`` block). Passwords still
say *who* a client is (``services/front/host/auth.py``); the certificate says it may
talk to the server at all, and the channel is encrypted.

Layout under ``<data dir>/tls/`` (the directory 0700, every key 0600):

==========================  ===============================================================
``ca.pem`` / ``ca.key``     the CA (10 years); its key signs the others and never leaves
``server.pem``/``.key``     nats-server's, for ``localhost``, ``127.0.0.1`` and this host's name
``client.pem``/``.key``     this machine's Horizon parts and its operator (``horizon up``'s
                            processes, ``horizon tenant add``, the operator commands)
``tenants/<t>.pem``/``.key``  tenant ``t``'s, made by ``horizon tenant add`` under ``--tls``
==========================  ===============================================================

Made once and kept: a second ``horizon up --tls`` on the data dir reuses them, so
certificates already handed out stay valid. Keys are ECDSA P-256. Other machines
(agents, services, tenants elsewhere): deploy/nats/TLS.md.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

# ``cryptography`` is imported where certificates are made or read, not with this module: every
# Horizon process reads ``TlsFiles`` (services/front/host/running.py), and x509 alone costs a service's
# start ~70 ms.

__all__ = ["TlsFiles", "ensure_machine_certificates", "ensure_client_certificate", "tenant_certificate"]

CA_DAYS = 3650
LEAF_DAYS = 825  # the longest validity clients such as browsers and Apple's stacks accept for a leaf


@dataclass(frozen=True)
class TlsFiles:
    """One party's files: the CA it trusts, its certificate and its key."""

    ca: Path
    cert: Path
    key: Path

    def env(self) -> dict[str, str]:
        """The variables every Horizon process reads (services/runtime/jetstream.py ``client_tls``)."""
        return {"HORIZON_TLS_CA": str(self.ca), "HORIZON_TLS_CERT": str(self.cert), "HORIZON_TLS_KEY": str(self.key)}

    def as_json(self) -> dict[str, str]:
        return {"ca": str(self.ca), "cert": str(self.cert), "key": str(self.key)}


def _write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only, from its creation on (no window at 0644)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def _new_key() -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load(cert: Path, key: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    return x509.load_pem_x509_certificate(cert.read_bytes()), private


def _ensure_ca(where: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    cert_path, key_path = where / "ca.pem", where / "ca.key"
    if cert_path.exists() and key_path.exists():
        return _load(cert_path, key_path)
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Horizon CA ({socket.gethostname()})")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(key_path, _key_bytes(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _issue(where: Path, stem: str, common_name: str, *, server: bool) -> TlsFiles:
    """``<stem>.pem`` and ``<stem>.key`` signed by the CA in ``where`` (made if missing); kept if present."""
    cert_path, key_path = where / f"{stem}.pem", where / f"{stem}.key"
    files = TlsFiles(where / "ca.pem", cert_path, key_path)
    if cert_path.exists() and key_path.exists():
        return files
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    cert_path.parent.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ensure_ca(where)
    key = _new_key()
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if server:
        # The names clients dial on this machine. Other machines dial its network name: a
        # certificate per server with that name (deploy/nats/TLS.md).
        names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                         x509.IPAddress(ipaddress.ip_address("::1"))]
        host = socket.gethostname()
        if host and host != "localhost":
            names.append(x509.DNSName(host))
        builder = (builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_private(key_path, _key_bytes(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return files


def _tls_dir(data_dir: Path) -> Path:
    where = Path(data_dir) / "tls"
    where.mkdir(parents=True, exist_ok=True)
    os.chmod(where, 0o700)
    return where


def ensure_machine_certificates(data_dir: Path) -> tuple[TlsFiles, TlsFiles]:
    """The server's files and this machine's client files (the CA made first if missing)."""
    where = _tls_dir(data_dir)
    return (_issue(where, "server", "Horizon NATS server", server=True),
            _issue(where, "client", f"Horizon parts ({socket.gethostname()})", server=False))


def ensure_client_certificate(data_dir: Path, stem: str, common_name: str) -> TlsFiles:
    """A client certificate ``tls/<stem>.pem`` signed by the data dir's CA (``stem`` may name a subfolder)."""
    return _issue(_tls_dir(data_dir), stem, common_name, server=False)


def tenant_certificate(data_dir: Path, tenant: str) -> TlsFiles:
    """Tenant ``tenant``'s client certificate, made if missing (``horizon tenant add`` under ``--tls``)."""
    return ensure_client_certificate(data_dir, f"tenants/{tenant}", f"Horizon tenant {tenant}")
