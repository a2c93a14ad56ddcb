"""An attempt's own files on its node: where they go (the spool, outside the data dir), how their folders
are made, and how the agent reads what the job wrote there (as the job's user's files only).
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from pathlib import Path

from services.nodes.backends.process.identity import Identity, owned_by

__all__ = ["default_spool", "spool_name", "private_dir", "read_checkpoint_ref", "stderr_tail", "STDERR_TAIL_LINES"]

STDERR_TAIL_LINES = 20


def default_spool(state_dir: Path) -> Path:
    """Where the jobs' own folders go when the agent is given none: for a root agent, which runs jobs as
    their users, ``/var/spool/horizon/<digest of the state dir>`` (as Slurm's SlurmdSpoolDir; no job
    learns the data dir's path from its files); for any other, beside the state dir (its jobs are its
    own user's anyway)."""
    if os.geteuid() == 0:
        digest = hashlib.sha1(str(Path(state_dir).absolute()).encode()).hexdigest()[:12]
        return Path("/var/spool/horizon") / digest
    return Path(state_dir).absolute().parent / "spool"


def spool_name(job_id: str, attempt: int) -> str:
    """The name of an attempt's own folder in the spool: ``+`` for the ``:`` of a tenant's job key ('+' is
    in no job id)."""
    return f"{job_id.replace(':', '+')}.{attempt}"


def private_dir(path: Path, owner: Identity | None = None, mode: int = 0o700) -> None:
    """``path`` made (parents too) with ``mode``, owned by ``owner`` when given (else by the agent)."""
    path.mkdir(parents=True, exist_ok=True)
    if owner is not None and os.geteuid() == 0:
        os.chown(path, owner.uid, owner.gid)
    os.chmod(path, mode)


def read_checkpoint_ref(path: Path, uid: int | None = None) -> str | None:
    """The checkpoint reference the job wrote: only from a file of the job's user (``owned_by``)."""
    fd = owned_by(str(path), uid)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        text = fh.read(64 * 1024).decode(errors="replace").strip()
    return text or None


def stderr_tail(path: str, uid: int | None = None) -> str:
    """The last ``STDERR_TAIL_LINES`` lines of a file (at most its last 8 KiB): only of a file of the
    job's user (a job may put a link to a file it may not read where its output was)."""
    fd = owned_by(path, uid)
    if fd is None:
        return ""
    with os.fdopen(fd, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 8192))
        lines = fh.read().decode(errors="replace").splitlines()
    return "\n".join(deque(lines, maxlen=STDERR_TAIL_LINES))
