"""Who a job runs as on its node, and doing things as that user.

A job runs as the Unix user who submitted it, as Slurm's ``slurmstepd`` runs a job as the
submitting uid (docs/tenants.md, "The data plane"):

* under accounts, the submission core stamps the **authenticated** user's ``uid``, ``gid`` and
  ``groups`` on the job's spec, from the operator's ``UserConfigured`` (``horizon user add``);
* without accounts, the spec names a user (the CLI's ``$USER``) and the node's passwd says
  who that is, as Slurm resolves a uid on the node; a name the node does not know is a label
  (every client is trusted without accounts, and users are fair share's and prediction's names):
  the job runs as the agent's own user;
* an agent that is not root cannot become anyone else: every job then runs as the agent's own
  user (the local case: a non-root ``horizon up`` runs everything as you).

``Identity.enter`` is what a job's process does between fork and exec (join the attempt's cgroup
while still root, then drop to the user: groups, gid, uid, in that order, and only then enter
its working directory, so the user's permissions decide where it may run). ``as_user`` runs a
small function in a forked child that has dropped to the user, for what must be decided by the
user's permissions but reported clearly by the supervisor: whether it may enter a working
directory, and opening its output files (created by the user, so they are the user's).
``owned_by`` opens a file the agent reads on the job's behalf (its output for ``horizon logs``,
its checkpoint reference) only if the job's user owns it: a job may replace its own output file
with a link to ``/etc/shadow``, and the agent, root, must not read that for it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Identity", "identity_for", "own_identity", "submitted_environment", "as_user", "open_as", "owned_by",
           "NOBODY"]

NOBODY = "nobody"
# What a job of another user than the agent's keeps of the agent's environment: where commands are
# and how text is read. The rest (the agent's own variables, credentials among them) is not its.
_KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM")


@dataclass(frozen=True, slots=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str
    home: str
    shell: str

    def to_json(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups), "user": self.user,
                "home": self.home, "shell": self.shell}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Identity | None:
        if not data:
            return None
        return cls(int(data["uid"]), int(data["gid"]), tuple(int(g) for g in data.get("groups") or ()),
                   str(data.get("user") or ""), str(data.get("home") or "/"), str(data.get("shell") or "/bin/sh"))

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` (the agent's environment) as this user's job starts from it: only ``_KEPT_ENV`` of
        the agent's when the user is another, and the user's ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``."""
        env = dict(base) if self.uid == os.geteuid() else {k: v for k, v in base.items()
                                                          if k in _KEPT_ENV or k.startswith("LC_")}
        env.update(HOME=self.home, USER=self.user, LOGNAME=self.user, SHELL=self.shell)
        return env

    def drop(self) -> None:
        """Become this user (in a child, never in the agent): groups first, then gid, then uid, so the
        process can change neither back."""
        if os.geteuid() == self.uid and os.getegid() == self.gid:
            return
        os.setgroups(list(self.groups))
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)

    def enter(self, cwd: str | None = None, before: Callable[[], None] | None = None) -> Callable[[], None]:
        """The ``preexec_fn`` of a job's process: ``before`` (join the cgroup: root's to do), drop to
        the user, then enter ``cwd`` as the user."""

        def go() -> None:
            if before is not None:
                before()
            self.drop()
            if cwd:
                os.chdir(cwd)

        return go


def identity_for(uid: int | None, gid: int | None, groups: Sequence[int], user: str) -> Identity | None:
    """Who a job runs as here; None: as the agent itself (an agent that is not root, or a job that names
    no uid and no user this node knows: see the module doc)."""
    if os.geteuid() != 0:
        return None  # only root can become another user: everything runs as the agent's own
    if uid is not None:
        try:
            entry: pwd.struct_passwd | None = pwd.getpwuid(uid)
        except KeyError:
            entry = None  # a uid with no name here (an operator's --uid): it still runs as that uid
        primary = gid if gid is not None else (entry.pw_gid if entry is not None else uid)
        return Identity(uid, primary, tuple(groups) or _groups(entry, primary),
                        entry.pw_name if entry is not None else (user or str(uid)),
                        entry.pw_dir if entry is not None else "/", entry.pw_shell if entry is not None else "/bin/sh")
    if not user:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return Identity(entry.pw_uid, entry.pw_gid, _groups(entry, entry.pw_gid), entry.pw_name, entry.pw_dir,
                    entry.pw_shell or "/bin/sh")


def own_identity() -> Identity:
    """The agent's own user, who runs every job of an agent that is not root."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:  # a uid with no name here (a container's): what the agent's own environment says
        return Identity(uid, gid, (gid,), os.environ.get("USER") or str(uid), os.environ.get("HOME") or "/",
                        os.environ.get("SHELL") or "/bin/sh")
    return Identity(uid, gid, (gid,), entry.pw_name, entry.pw_dir, entry.pw_shell or "/bin/sh")


def submitted_environment(identity: Identity | None, node: Mapping[str, str],
                          submitted: Mapping[str, str]) -> dict[str, str]:
    """What a job that carries its submitting environment (sbatch's ``--export``) starts from: the node's
    ``PATH`` and locale (``_KEPT_ENV``, what that environment does not say itself) and the running user's
    ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL`` (``identity``; None: the agent's own user), then that
    environment over them. Nothing else of the agent's: as Slurm's job gets sbatch's environment, not
    slurmd's."""
    who = identity or own_identity()
    env = {k: v for k, v in node.items() if k in _KEPT_ENV or k.startswith("LC_")}
    env.update(HOME=who.home, USER=who.user, LOGNAME=who.user, SHELL=who.shell)
    env.update(submitted)
    return env


def _groups(entry: pwd.struct_passwd | None, gid: int) -> tuple[int, ...]:
    """The user's supplementary groups from the group database (its primary first)."""
    if entry is None:
        return (gid,)
    try:
        return tuple(dict.fromkeys([gid, *os.getgrouplist(entry.pw_name, gid)]))
    except OSError:
        return (gid,)


def as_user(identity: Identity | None, work: Callable[[], Any]) -> Any:
    """``work()`` run by ``identity`` (in a forked child that dropped to the user; in this process
    when None); its result, or the ``OSError`` it raised, raised here with its errno and filename.
    ``work`` returns open file descriptors as a list of ints (they are passed back), or None."""
    if identity is None or (identity.uid == os.geteuid() and identity.gid == os.getegid()):
        return work()
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the child: drop, work, send the answer; never return into the caller's code
        code = 0
        try:
            parent.close()
            identity.drop()
            fds = work() or []
            socket.send_fds(child, [b"ok"], list(fds))
        except OSError as exc:
            text = f"err\0{exc.errno or 0}\0{exc.strerror or exc}\0{exc.filename or ''}"
            with contextlib.suppress(OSError):
                child.sendall(text.encode(errors="replace"))
            code = 1
        except BaseException:  # noqa: BLE001 - the child must exit, whatever happened
            code = 2
        finally:
            os._exit(code)
    child.close()
    try:
        data, fds, _flags, _addr = socket.recv_fds(parent, 65536, 16)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if data.startswith(b"ok"):
        return fds
    if data.startswith(b"err"):
        _, errno_, strerror, filename = data.decode(errors="replace").split("\0", 3)
        raise OSError(int(errno_), strerror, filename or None)
    raise OSError(0, f"could not act as user {identity.user}")


def open_as(identity: Identity | None, paths: Sequence[str], mode: str) -> list[int]:
    """Open (create) ``paths`` for writing as the job's user: its permissions decide, and what it
    creates is its own. ``mode``: ``append`` or anything else for truncate. One descriptor per path."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if mode == "append" else os.O_TRUNC)

    def work() -> list[int]:
        fds: list[int] = []
        try:
            for path in paths:
                fds.append(os.open(path, flags, 0o600))
        except OSError:
            for fd in fds:  # the first opened, the second not: none is left open
                os.close(fd)
            raise
        return fds

    return list(as_user(identity, work))


def may_enter(identity: Identity | None, cwd: str) -> None:
    """Raise the ``OSError`` the job's user gets entering ``cwd`` (no such folder, permission denied)."""

    def work() -> None:
        os.stat(cwd)  # FileNotFoundError says "does not exist" before the permission question
        os.chdir(cwd)

    as_user(identity, work)


def owned_by(path: str, uid: int | None) -> int | None:
    """An open descriptor on ``path`` for reading, if it is a regular file owned by ``uid`` (any file
    when ``uid`` is None: the agent's own jobs); None otherwise (missing, a link, someone else's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
        os.close(fd)
        return None
    return fd
