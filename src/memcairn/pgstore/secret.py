"""The server secret: 32 random bytes in ``$MEMCAIRN_HOME/server/secret`` (0600), made on first use.

API keys are stored as HMAC-SHA256 under it and the application role's database password is derived from
it, so every process of one server (and ``memcairn server keys``) must read the same file.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from memcairn.core.errors import ConfigError

SECRET_BYTES = 32


def server_dir(home: Path) -> Path:
    return home / "server"


def load_or_create_secret(home: Path) -> bytes:
    folder = server_dir(home)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / "secret"
    if not path.exists():
        # Written whole under another name, then linked: a second process sees no file or the whole secret.
        staging = folder / f".secret.{os.getpid()}"
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_bytes(SECRET_BYTES).hex() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(staging, path)
        except FileExistsError:
            pass
        finally:
            staging.unlink()
    try:
        data = bytes.fromhex(path.read_text(encoding="ascii").strip())
    except ValueError:
        data = b""
    if len(data) != SECRET_BYTES:
        raise ConfigError(f"{path} does not hold a server secret ({SECRET_BYTES} bytes as hex); "
                          "restore it from a backup (keys made with another secret no longer match)")
    return data


def load_or_create_password(home: Path, name: str) -> str:
    """A random password kept in ``server/<name>`` (0600): the embedded cluster's superuser's."""
    path = server_dir(home) / name
    server_dir(home).mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists():
        return path.read_text(encoding="ascii").strip()
    value = secrets.token_hex(16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(value + "\n")
    return value
