"""The dashboard as ``horizon ui`` and ``horizon up`` start it: over which connection (a tenant's own URL
shows that tenant alone), with which login token, kept in the data dir by ``horizon up --auth``."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from services.front.client.client import tenant_of_url

__all__ = ["TOKEN_FILE", "METRICS_TOKEN_FILE", "has_password", "dashboard_for", "keep_token"]

TOKEN_FILE = "dashboard-token"  # under DIR/auth/: the operator's login token of `horizon up --auth`'s dashboard
METRICS_TOKEN_FILE = "metrics-token"  # under DIR/auth/: the scrape credential of its /metrics (Bearer)


def has_password(url: str) -> bool:
    try:
        return bool(urlsplit(url.split(",")[0].strip()).password)
    except ValueError:
        return False


def dashboard_for(url: str, *, login: bool, token: str | None = None, policy: str = "multifactor",
                  backfill: str = "easy") -> Any:
    """The dashboard over ``url``'s connection: a tenant's own URL shows that tenant alone."""
    from services.front.host.dashboard import Dashboard

    return Dashboard(url, login=login, tenant=tenant_of_url(url) if has_password(url) else None, token=token,
                     policy=policy, backfill=backfill)


def keep_token(data_dir: Path, name: str = TOKEN_FILE) -> str:
    """``horizon up --auth``'s operator token for its dashboard (``name``: another token of the same
    kind, the scrape credential ``metrics-token``), made once and kept (0600) beside the other
    credentials, never printed."""
    auth = Path(data_dir) / "auth"
    path = auth / name
    try:
        token = path.read_text().strip()
        if token:
            return token
    except OSError:
        pass
    auth.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token
