"""Reading and writing the agents' files safely, and remembering what an install changed.

- Files are read and written as text without newline translation, so bytes we do not touch stay as
  they were. A write goes to a temporary file beside the target and is renamed over it (keeping the
  file's mode); a symlinked settings file is written through the link, so a dotfiles repository keeps
  its link.
- Before any write, the file is copied to ``<file>.memcairn-bak-<YYYYmmdd-HHMMSS>``.
- ``$MEMCAIRN_HOME/install-state.json`` records, per file, what existed before the first install: whether
  the file existed, its hash and backup, the containers the install created and any entry it replaced.
  Uninstall uses it to give back the very bytes the user had; once it has, the file's backups and the folders
  the install made (``.codex/``, ``.gemini/``, ``MEMCAIRN_HOME`` itself) are removed again: nothing is left that
  was not there.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from memcairn.core.errors import ConfigError
from memcairn.wire.config import memcairn_home

STATE_FILE = "install-state.json"
BACKUP_INFIX = ".memcairn-bak-"


def read_text(path: Path) -> str | None:
    """The file's text, or None when it does not exist.

    Raises:
        ConfigError: it exists but cannot be read as UTF-8 text.
    """
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; nothing was changed") from None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def backup(path: Path) -> Path:
    """Copy ``path`` to a new ``<path>.memcairn-bak-<timestamp>`` and return the copy's path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}-{n}")
    data = Path(os.path.realpath(path)).read_bytes()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode_of(path) or 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return target


def _mode_of(path: Path) -> int | None:
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        return None


def _nearest_dir(path: Path) -> Path:
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def check_writable(path: Path) -> None:
    """
    Raises:
        ConfigError: the file (or the file a symlink points to) is read-only, or a directory where it,
            its temporary copy or its backup goes cannot be written.
    """
    real = Path(os.path.realpath(path))
    shown = f"{path} (-> {real})" if real != Path(os.path.abspath(path)) else str(path)
    mode = _mode_of(real)
    if mode is not None and (not mode & 0o200 or not os.access(real, os.W_OK)):
        raise ConfigError(f"{shown} is read-only; make it writable (chmod u+w) or add memcairn's entries by "
                          "hand, nothing was changed")
    for folder in {_nearest_dir(real.parent), _nearest_dir(Path(os.path.abspath(path)).parent)}:
        if not os.access(folder, os.W_OK):
            raise ConfigError(f"cannot write in {folder} (for {shown}); nothing was changed")


def write_text(path: Path, text: str) -> None:
    """Replace the file's content atomically (through a symlink; parent directories are made)."""
    real = Path(os.path.realpath(path))
    real.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_of(real)
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode if mode is not None else 0o644)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_file(path: Path) -> None:
    Path(os.path.realpath(path)).unlink(missing_ok=True)


def unified_diff(path: Path, before: str | None, after: str | None) -> str:
    old = (before or "").splitlines(keepends=True)
    new = (after or "").splitlines(keepends=True)
    label_old = str(path) if before is not None else "/dev/null"
    label_new = str(path) if after is not None else "/dev/null"
    lines = []
    for line in difflib.unified_diff(old, new, label_old, label_new):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)


def state_path() -> Path:
    """Where the install records live: the user's, not a memcairn home's (the agents' files are the user's, so an
    uninstall run with another ``MEMCAIRN_HOME`` than the install still finds them)."""
    return Path(os.path.expanduser("~")) / ".memcairn" / STATE_FILE


class InstallState:
    """``~/.memcairn/install-state.json``: ``{"version": 1, "files": {path: record}}`` (read from
    ``$MEMCAIRN_HOME/install-state.json`` too, where older versions kept it)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_path()
        self.legacy = None if path else memcairn_home() / STATE_FILE
        if self.legacy == self.path:
            self.legacy = None
        self.files: dict[str, dict[str, Any]] = {}
        self.made_home = False  # the first install made the state's folder: the last uninstall removes it
        text = read_text(self.path)
        if not text and self.legacy is not None:
            text = read_text(self.legacy)
        if text:
            try:
                data = json.loads(text)
                self.files = dict(data.get("files", {}))
                self.made_home = data.get("made_home") is True
            except (ValueError, AttributeError):
                self.files = {}  # a damaged state file only costs the byte-identical restore

    def get(self, path: Path) -> dict[str, Any] | None:
        return self.files.get(str(path))

    def put(self, path: Path, record: dict[str, Any] | None) -> None:
        if record is None:
            self.files.pop(str(path), None)
        else:
            self.files[str(path)] = record

    def save(self) -> None:
        if self.legacy is not None and self.legacy.exists():
            self.legacy.unlink()  # moved to self.path (or no longer needed)
        if not self.files:
            if self.path.exists():
                self.path.unlink()
                if self.made_home:
                    try:
                        self.path.parent.rmdir()  # only when empty: no store, logs or settings were made since
                    except OSError:
                        pass
            return
        if not self.path.parent.exists():
            self.made_home = True
        data: dict[str, Any] = {"version": 1, "files": self.files}
        if self.made_home:
            data["made_home"] = True
        write_text(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
