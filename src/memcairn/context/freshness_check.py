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

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from memcairn.capture.anchors import MAX_HASH_BYTES, blob_id, held_identifiers
from memcairn.context.git_renames import GitRenames
from memcairn.core.clock import now_ms
from memcairn.core.models import MemoryItem
from memcairn.search.freshness import CHANGED, CURRENT, STALE, UNKNOWN, Freshness

log = logging.getLogger("memcairn.context")

MAX_FILES_KEPT = 50_000  # ids kept at most; past it the cache starts over
MAX_HELD_KEPT = 50_000


class _Gone:
    """The file is not there, in a directory that is."""


class _Unreadable:
    """Nothing can be said of the file (a directory, a permission, its directory gone)."""


GONE, UNREADABLE = _Gone(), _Unreadable()
_UNSET: Any = object()


class FreshnessChecker:
    """Freshness of memories by their anchors; thread-safe (the worker reads on a pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, tuple[int, int, str, str]] = {}  # full path -> (size, mtime_ns, id, by)
        self._held: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}  # (file id, names) -> names held
        self._generation = 0  # how many times a file's kept id was replaced (or all were dropped)
        self._fulls: dict[tuple[str | None, str], str | None] = {}  # (root, anchored path) -> full path
        self._homes: dict[tuple[str, str], bool] = {}  # (file id, qualifier) -> whether the file declares it
        self._renames = GitRenames()

    # -- public ------------------------------------------------------------------------------------
    def check(self, items: Iterable[MemoryItem], roots: Mapping[str, str] | None = None) -> dict[int, Freshness]:
        """Each item's freshness; ``roots`` (project name -> directory) says where a project's working directory
        is on this machine, read instead of the one its memories were captured in (``memcairn projects root``)."""
        now = now_ms()
        seen = _Seen()
        out = {}
        for item in items:
            anchors = item.anchors or {}
            moved_root = (roots or {}).get(item.project)
            out[item.id] = self._one(_rooted(anchors, moved_root) if moved_root else anchors, now, seen)
        return out

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
    def _one(self, anchors: dict[str, Any], now: int, seen: _Seen) -> Freshness:
        files = [f for f in anchors.get("files") or () if isinstance(f, dict) and isinstance(f.get("path"), str)]
        root = anchors.get("root") if isinstance(anchors.get("root"), str) else None
        if not files or not any(f.get("id") for f in files):
            return Freshness(UNKNOWN, ("no file ids",) if files else ("no anchors",), now)
        if root is not None:
            if root not in seen.roots:
                seen.roots[root] = os.path.isdir(root)
            if not seen.roots[root]:
                return Freshness(UNKNOWN, (f"{root} is not on this machine",), now)
        stale: list[str] = []
        changed: list[str] = []
        changed_paths: list[str] = []
        moves: list[str] = []  # said with the stale reasons too: where the file went
        contents: list[tuple[str, str, str]] = []  # (full path, file id, path shown) of files there now
        checked = 0
        for entry in files:
            path, then = entry["path"], entry.get("id")
            key = (root, path)
            full = self._fulls.get(key, _UNSET)
            if full is _UNSET:
                if len(self._fulls) >= MAX_FILES_KEPT:
                    self._fulls.clear()
                full = self._fulls[key] = _full(root, path)
            if full is None:
                continue
            now_id = self._file_id(full, root, entry.get("by"))
            if now_id is UNREADABLE:
                continue
            if now_id is GONE:
                if then:
                    moved = self._moved(root, anchors.get("commit"), full, seen)
                    if moved is None:
                        stale.append(f"{path} deleted since")
                    else:
                        moves.append(f"{path} moved to {moved[0]}")
                        changed.append(moves[-1])
                        changed_paths.append(moved[0])
                        contents.append((moved[1], moved[2], moved[0]))
                continue
            assert isinstance(now_id, tuple)
            file_id, readable = now_id
            if readable:
                contents.append((full, file_id, path))
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
            for full, file_id, shown in contents:
                found = self._held_in(full, file_id, names)
                held |= {n for n in names if n in found
                         or (_last(n) in found and self._is_home(full, file_id, shown, n))}
            where = changed_paths[0] if len(changed_paths) == 1 else "its files"
            stale += [f"`{n}` no longer in {where}" for n in names if n not in held]
        if stale:
            return Freshness(STALE, tuple(stale + moves), now)
        if changed:
            return Freshness(CHANGED, tuple(changed), now)
        return Freshness(CURRENT if checked else UNKNOWN, (), now)

    def _moved(self, root: str | None, since: Any, full: str, seen: _Seen) -> tuple[str, str, str] | None:
        """(new path relative to the root, its full path, its id) when git knows the file was renamed since the
        memory's commit and the new file is there; None otherwise."""
        if root is None or not isinstance(since, str) or not full.startswith(os.path.join(root, "")):
            return None
        if root not in seen.heads:
            seen.heads[root] = self._renames.head(root)
        head = seen.heads[root]
        if head is None:
            return None
        new = self._renames.moved_to(root, since, head, os.path.relpath(full, root))
        if new is None:
            return None
        new_full = os.path.join(root, new)
        found = self._file_id(new_full, root, None)
        if not isinstance(found, tuple) or not found[1]:
            return None
        return new, new_full, found[0]

    def _is_home(self, full: str, file_id: str, shown: str, name: str) -> bool:
        """Whether the file is where a qualified ``name``'s qualifier says its last part lives: ``paths`` of
        ``paths.ValidateSessionID`` is a directory or file of its path (``cli/paths/paths.go``) or something it
        declares (``package paths``, ``class Paths``, ``defmodule App.Paths``). An unqualified name (or one
        qualified by ``self``) is at home anywhere."""
        qualifier = _qualifier(name)
        if qualifier is None:
            return True
        wanted = _folded(qualifier)
        if any(_folded(part.split(".")[0]) == wanted for part in re.split(r"[/\\]", shown) if part):
            return True
        key = (file_id, qualifier)
        with self._lock:
            known = self._homes.get(key)
        if known is not None:
            return known
        content = _head(full)
        if content is None:
            return True  # unreadable now: nothing is said to be gone
        found = bool(re.search(_DECLARES % re.escape(qualifier).encode(), content))
        with self._lock:
            if len(self._homes) >= MAX_HELD_KEPT:
                self._homes.clear()
            self._homes[key] = found
        return found

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
        content = _head(full)
        if content is None:
            return frozenset(names)  # unreadable now: nothing is said to be gone
        if blob_id(content) != file_id:  # written again since it was hashed: judged at the next check
            return frozenset(names)
        found = frozenset(held_identifiers(names, [content]))
        with self._lock:
            if len(self._held) >= MAX_HELD_KEPT:
                self._held.clear()
            self._held[key] = found
        return found


def _head(full: str) -> bytes | None:
    """The part of a file its id is computed over (None when it cannot be read now)."""
    try:
        with open(full, "rb") as fh:
            return fh.read(MAX_HASH_BYTES + 1)
    except OSError:
        return None


def _full(root: str | None, path: str) -> str | None:
    if path.startswith("~"):  # the recording machine's home
        return None
    full = os.path.join(root, path) if root is not None and not os.path.isabs(path) else path
    return os.path.normpath(full) if os.path.isabs(full) else None


def _last(name: str) -> str:
    """``add_item`` of ``Store.add_item``: the member a qualified name names."""
    return re.split(r"\.|::", name.lstrip("-"))[-1]


def _qualifier(name: str) -> str | None:
    """``Store`` of ``app.Store.add_item``; None for a name without one, or qualified by the object at hand."""
    parts = re.split(r"\.|::", name.lstrip("-"))
    if len(parts) < 2 or parts[-2] in _SELF:
        return None
    return parts[-2]


def _folded(word: str) -> str:
    return word.lower().replace("_", "").replace("-", "")


def _rooted(anchors: dict[str, Any], root: str) -> dict[str, Any]:
    """The anchors as if captured in ``root``: files named relative to the recorded directory, or absolute
    under it, are read under ``root``."""
    recorded = anchors.get("root")
    files = []
    for entry in anchors.get("files") or ():
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str) and isinstance(recorded, str) and os.path.isabs(path):
            inside = os.path.relpath(os.path.normpath(path), os.path.normpath(recorded))
            if not inside.startswith(".."):
                entry = {**entry, "path": inside}
        files.append(entry)
    return {**anchors, "root": os.path.normpath(root), "files": files}


class _Seen:
    """What one ``check`` call read once for all its memories: whether each root is there, and its HEAD."""

    def __init__(self) -> None:
        self.roots: dict[str, bool] = {}
        self.heads: dict[str, str | None] = {}


_SELF = frozenset({"self", "this", "cls", "super", "Self"})
# a file declaring the qualifier: package paths, class Paths, defmodule App.Paths, mod paths, namespace App\Paths...
_DECLARES = (rb"(?:^|[\s;{])(?:package|class|module|defmodule|struct|interface|type|object|namespace|mod|trait|"
             rb"enum|impl|record|protocol|extension|const|let|var|val)\s+(?:[\w.:\\]+[.:\\])?%s(?![\w])")


class ProjectRoots(Protocol):
    def project_roots(self) -> Mapping[str, str]:
        """Project name -> the directory ``memcairn projects root`` recorded for it (or for the project it was
        merged into)."""
        ...


class RootedCheck:
    """The process's checker, reading each project's files where the store says its working directory is now
    (one small query a check; a store without roots, the team store's, reads where the memories were made)."""

    def __init__(self, store: object, checker: FreshnessChecker | None = None) -> None:
        self._store = store
        self._checker = checker or shared_checker()

    def check(self, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
        return self._checker.check(items, self.roots())

    def roots(self) -> Mapping[str, str]:
        read = getattr(self._store, "project_roots", None)
        if read is None:
            return {}
        try:
            return read()
        except Exception:  # noqa: BLE001 - never fails a read: the recorded directories are read instead
            log.warning("could not read the projects' roots; checking where the memories were made", exc_info=True)
            return {}

    def token(self) -> tuple[int, int]:
        return self._checker.token()


_shared: FreshnessChecker | None = None
_shared_lock = threading.Lock()


def shared_checker() -> FreshnessChecker:
    """The process's checker: every reader of one worker shares its cache (``checker_for`` adds the roots)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = FreshnessChecker()
        return _shared


def checker_for(store: object) -> RootedCheck:
    """The process's checker with ``store``'s project roots."""
    return RootedCheck(store)
