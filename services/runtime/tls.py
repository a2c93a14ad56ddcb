"""The client side of mutual TLS for every Horizon process: ``HORIZON_TLS_CA``, ``_CERT``, ``_KEY``.

Each process that connects to NATS (a service, the agent, the projections, the
CLI) reads three variables, so one setting serves ``horizon up``'s own parts,
a systemd unit (an ``EnvironmentFile``) and a user's shell alike:

* ``HORIZON_TLS_CA``: the CA file the server's certificate must be signed by
  (without it, the system's trust store);
* ``HORIZON_TLS_CERT`` and ``HORIZON_TLS_KEY``: this client's certificate and
  key, for a server that verifies its clients (``verify: true``; ``horizon up
  --tls``). The key file may be the certificate file (one PEM with both).

None of them set: no TLS context is made, and nats-py does as it always does
(TLS with the default context for a ``tls://`` URL or a server that requires it).
"""

from __future__ import annotations

import logging
import os
import ssl

__all__ = ["TLS_VARIABLES", "TlsSettingsError", "client_tls", "quiet_ssl_eof"]

TLS_VARIABLES = ("HORIZON_TLS_CA", "HORIZON_TLS_CERT", "HORIZON_TLS_KEY")


class TlsSettingsError(ValueError):
    """The TLS variables name files that cannot be used; the message says which."""


def client_tls(environ: dict[str, str] | None = None) -> ssl.SSLContext | None:
    """The TLS context the variables describe, or None when none is set."""
    env = os.environ if environ is None else environ
    ca, cert, key = (env.get(name) or None for name in TLS_VARIABLES)
    if ca is None and cert is None:
        return None
    if key is not None and cert is None:
        raise TlsSettingsError("HORIZON_TLS_KEY is set without HORIZON_TLS_CERT")
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSettingsError(f"HORIZON_TLS_CA={ca}: {exc}") from None
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSettingsError(f"HORIZON_TLS_CERT={cert}, HORIZON_TLS_KEY={key}: {exc}") from None
    return context


class _SslEofNoise(logging.Filter):
    """asyncio warns "returning true from eof_received() has no effect when using ssl" each time a
    TLS connection of nats-py's closes: nats-py's protocol asks to keep a half-closed socket open,
    which TLS cannot do, and nothing is lost. Dropped, so that a CLI's output stays its answer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


_NOISE = _SslEofNoise()


def quiet_ssl_eof() -> None:
    """Drop that one asyncio warning in this process (idempotent)."""
    logging.getLogger("asyncio").addFilter(_NOISE)
