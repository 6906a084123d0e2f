"""Where git says a file went: the renames between the commit a memory was captured at and HEAD now.

The freshness check asks only for a file that is gone, and the answer for a pair of commits never changes, so
one ``git diff -M --name-status`` runs per (repository, capture commit, HEAD) and is kept; a repository without
that commit (history rewritten, recorded elsewhere) or without git is remembered as knowing no rename. Renames
not committed yet are not seen.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

from memcairn.capture.anchors import git_state

GIT_TIMEOUT = 5.0  # seconds; a repository slower than that says nothing
MAX_PAIRS_KEPT = 256


class GitRenames:
    """Renames by commit pair; thread-safe (the worker checks on a pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pairs: dict[tuple[str, str, str], dict[str, str]] = {}  # (root, from, to) -> old -> new, root-relative
        self._git = shutil.which("git")

    def head(self, root: str) -> str | None:
        """The commit HEAD names under ``root`` now (read from ``.git``, no subprocess)."""
        state = git_state(root)
        return state.commit if state is not None else None

    def moved_to(self, root: str, since: str, head: str, path: str) -> str | None:
        """Where ``path`` (relative to ``root``) went between ``since`` and ``head``; None when git knows no
        rename of it."""
        if since == head or self._git is None:
            return None
        key = (root, since, head)
        with self._lock:
            renames = self._pairs.get(key)
        if renames is None:
            renames = self._read(root, since, head)
            with self._lock:
                if len(self._pairs) >= MAX_PAIRS_KEPT:
                    self._pairs.clear()
                self._pairs[key] = renames
        return renames.get(os.path.normpath(path))

    def _read(self, root: str, since: str, head: str) -> dict[str, str]:
        assert self._git is not None
        try:
            done = subprocess.run([self._git, "-C", root, "diff", "--relative", "-M", "--name-status", "-z",
                                   "--diff-filter=R", since, head], capture_output=True, timeout=GIT_TIMEOUT)
        except (OSError, subprocess.SubprocessError):
            return {}
        if done.returncode != 0:
            return {}
        fields = done.stdout.decode("utf-8", "replace").split("\0")
        out: dict[str, str] = {}
        i = 0
        while i + 2 < len(fields):
            status, old, new = fields[i], fields[i + 1], fields[i + 2]
            if not status.startswith("R"):
                break
            out[os.path.normpath(old)] = os.path.normpath(new)
            i += 3
        return out
