"""A memory's freshness from its anchors and the files under its root now (``search.freshness`` for the states).

It lives in context/, not search/: it reads files with capture's own blob id (``capture.anchors.blob_id``) and
identifier match (``held_identifiers``), and only the layers below capture may import them; the search service
is handed a checker instead (``SearchService(freshness=...)``).

Cheap enough for every read: a file's id is kept by (path, size, mtime_ns), so a file nobody touched costs one
``stat``; a changed file is read once per new (size, mtime_ns), and which identifiers its content holds is kept
by its id. ``token`` says whether any file checked so far moved since (one ``stat`` each), for a memo of texts
built from the states.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from typing import Any

from memcairn.capture.anchors import MAX_HASH_BYTES, blob_id, held_identifiers
from memcairn.core.clock import now_ms
from memcairn.core.models import MemoryItem
from memcairn.search.freshness import CHANGED, CURRENT, STALE, UNKNOWN, Freshness

MAX_FILES_KEPT = 50_000  # ids kept at most; past it the cache starts over
MAX_HELD_KEPT = 50_000


class _Gone:
    """The file is not there, in a directory that is."""


class _Unreadable:
    """Nothing can be said of the file (a directory, a permission, its directory gone)."""


GONE, UNREADABLE = _Gone(), _Unreadable()


class FreshnessChecker:
    """Freshness of memories by their anchors; thread-safe (the worker reads on a pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, tuple[int, int, str, str]] = {}  # full path -> (size, mtime_ns, id, by)
        self._held: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}  # (file id, names) -> names held
        self._generation = 0  # how many times a file's kept id was replaced (or all were dropped)

    # -- public ------------------------------------------------------------------------------------
    def check(self, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
        now = now_ms()
        roots: dict[str, bool] = {}
        return {item.id: self._one(item.anchors or {}, now, roots) for item in items}

    def token(self) -> tuple[int, int]:
        """(ids replaced so far, files whose size or mtime moved since they were read): a value no earlier
        state of the files had once any of them moved, read or not."""
        with self._lock:
            known = list(self._ids.items())
            generation = self._generation
        moved = 0
        for full, (size, mtime, _, _) in known:
            try:
                stat = os.stat(full)
            except OSError:
                moved += 1
                continue
            if (stat.st_size, stat.st_mtime_ns) != (size, mtime):
                moved += 1
        return generation, moved

    # -- one memory --------------------------------------------------------------------------------
    def _one(self, anchors: dict[str, Any], now: int, roots: dict[str, bool]) -> Freshness:
        files = [f for f in anchors.get("files") or () if isinstance(f, dict) and isinstance(f.get("path"), str)]
        root = anchors.get("root") if isinstance(anchors.get("root"), str) else None
        if not files or not any(f.get("id") for f in files):
            return Freshness(UNKNOWN, ("no file ids",) if files else ("no anchors",), now)
        if root is not None:
            if root not in roots:
                roots[root] = os.path.isdir(root)
            if not roots[root]:
                return Freshness(UNKNOWN, (f"{root} is not on this machine",), now)
        stale: list[str] = []
        changed: list[str] = []
        changed_paths: list[str] = []
        contents: list[tuple[str, str]] = []  # (path, file id) of files there now, for the identifiers
        checked = 0
        for entry in files:
            path, then = entry["path"], entry.get("id")
            full = _full(root, path)
            if full is None:
                continue
            now_id = self._file_id(full, root, entry.get("by"))
            if now_id is UNREADABLE:
                continue
            if now_id is GONE:
                if then:
                    stale.append(f"{path} deleted since")
                continue
            assert isinstance(now_id, tuple)
            file_id, readable = now_id
            if readable:
                contents.append((full, file_id))
            if not then:
                if entry.get("absent"):
                    changed.append(f"{path} is back since")
                continue
            checked += 1
            if file_id != then:
                changed.append(f"{path} changed since")
                changed_paths.append(path)
        names = tuple(n for n in anchors.get("identifiers") or () if isinstance(n, str))
        if changed and names and contents:
            held: set[str] = set()
            for full, file_id in contents:
                held |= self._held_in(full, file_id, names)
            where = changed_paths[0] if len(changed_paths) == 1 else "its files"
            stale += [f"`{n}` no longer in {where}" for n in names if n not in held and _last(n) not in held]
        if stale:
            return Freshness(STALE, tuple(stale), now)
        if changed:
            return Freshness(CHANGED, tuple(changed), now)
        return Freshness(CURRENT if checked else UNKNOWN, (), now)

    # -- files -------------------------------------------------------------------------------------
    def _file_id(self, full: str, root: str | None, by: str | None) -> tuple[str, bool] | _Gone | _Unreadable:
        """(the file's id now, whether it is hashed content), ``GONE`` or ``UNREADABLE``."""
        try:
            stat = os.stat(full)
        except FileNotFoundError:
            under = root if root is not None and full.startswith(os.path.join(root, "")) else os.path.dirname(full)
            return GONE if os.path.isdir(under) else UNREADABLE
        except OSError:
            return UNREADABLE
        size, mtime = stat.st_size, stat.st_mtime_ns
        with self._lock:
            known = self._ids.get(full)
        if known is not None and known[0] == size and known[1] == mtime:
            return known[2], known[3] != "size-mtime"
        if size > MAX_HASH_BYTES or by == "size-mtime":
            found, kind = f"{size}:{mtime}", "size-mtime"
        else:
            try:
                with open(full, "rb") as fh:
                    found, kind = blob_id(fh.read(MAX_HASH_BYTES + 1)), "blob"
            except IsADirectoryError:
                return UNREADABLE
            except OSError:
                return UNREADABLE
        with self._lock:
            if len(self._ids) >= MAX_FILES_KEPT:
                self._ids.clear()
                self._generation += 1
            if full in self._ids:
                self._generation += 1
            self._ids[full] = (size, mtime, found, kind)
        return found, kind != "size-mtime"

    def _held_in(self, full: str, file_id: str, names: tuple[str, ...]) -> frozenset[str]:
        key = (file_id, names)
        with self._lock:
            found = self._held.get(key)
        if found is not None:
            return found
        try:
            with open(full, "rb") as fh:
                content = fh.read(MAX_HASH_BYTES + 1)
        except OSError:
            return frozenset(names)  # unreadable now: nothing is said to be gone
        if blob_id(content) != file_id:  # written again since it was hashed: judged at the next check
            return frozenset(names)
        found = frozenset(held_identifiers(names, [content]))
        with self._lock:
            if len(self._held) >= MAX_HELD_KEPT:
                self._held.clear()
            self._held[key] = found
        return found


def _full(root: str | None, path: str) -> str | None:
    if path.startswith("~"):  # the recording machine's home
        return None
    full = os.path.join(root, path) if root is not None and not os.path.isabs(path) else path
    return os.path.normpath(full) if os.path.isabs(full) else None


def _last(name: str) -> str:
    """``add_item`` of ``Store.add_item``: a file holding the member still holds what the memory named."""
    return re.split(r"\.|::", name.lstrip("-"))[-1]


_shared: FreshnessChecker | None = None
_shared_lock = threading.Lock()


def shared_checker() -> FreshnessChecker:
    """The process's checker: every reader of one worker shares its cache."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = FreshnessChecker()
        return _shared
