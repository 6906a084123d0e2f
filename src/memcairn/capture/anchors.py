"""What a memory rests on, read at capture: its files' content ids, the identifiers it names, the commit.

``anchors`` of a memory (``core.fields``)::

    {"root": "/home/me/app", "commit": "4e1d…", "branch": "main",
     "files": [{"path": "src/db.py", "id": "9f2c…", "by": "git-blob"},
               {"path": "old.py", "id": null, "absent": true}],
     "identifiers": ["open_pool", "WAL_MODE"]}

A file's ``id`` is the sha1 of ``b"blob <size>\\0" + content``: git's blob id (``git hash-object`` without
filters) inside a git checkout (``by: git-blob``), the same content hash elsewhere (``by: sha1-blob``), or
``"<size>:<mtime_ns>"`` for a file over ``MAX_HASH_BYTES`` (``by: size-mtime``: not read). It is null when the
file does not exist in a directory that does (``absent``: deleted, or moved away) or cannot be read (a
directory, or the root is gone: a transcript imported on another machine without ``--root``); glob patterns the
memory names are left out. ``commit`` and ``branch`` are read from ``.git`` directly and
are absent outside a checkout (``branch`` also on a detached HEAD). ``identifiers`` are the code-like tokens of
the memory's text (backticked, snake_case, camelCase, dotted, ``--flags``) that one of its files held then.

Capture calls this for every tool batch, so the work is bounded: ``MAX_FILES`` files a memory, ``MAX_HASH_BYTES``
read a file, one read per file a batch (``AnchorReader`` caches), no subprocess.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("memcairn.capture")

ANCHOR_ROOT = "anchor_root"  # in an event's body: the directory its files are read from (an import's --root)
MAX_FILES = 20  # files anchored a memory; the rest are left out
MAX_HASH_BYTES = 1 << 20  # larger files are identified by size and mtime instead of read
MAX_CANDIDATES = 40  # code-like tokens of a memory's text looked for in its files
MAX_IDENTIFIERS = 20

_GLOB = re.compile(r"[*?\[]")  # a pattern the memory names (``test/**/*_test.exs``) is no file to anchor
_BACKTICKED = re.compile(r"`([^`\n]{3,80})`")
_TOKEN = re.compile(r"--?[A-Za-z][\w-]*|[A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_]\w*)*")
_IDENTIFIER = re.compile(r"(?:--?[A-Za-z][\w-]+|[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)*)(?:\(\))?")


@dataclass(frozen=True)
class _FileId:
    id: str | None
    by: str | None
    content: bytes | None  # kept for the identifier search while the batch lasts
    absent: bool = False


@dataclass(frozen=True)
class _Git:
    commit: str | None
    branch: str | None


class AnchorReader:
    """Reads the files and the git state anchors name; one a batch, so each file and HEAD are read once."""

    def __init__(self) -> None:
        self._files: dict[str, _FileId] = {}
        self._git: dict[str, _Git | None] = {}

    def anchors(self, root: str | None, files: Iterable[str], texts: Iterable[str | None]) -> dict[str, Any]:
        """The anchors of a memory naming ``files`` (relative to ``root``, or absolute) and saying ``texts``."""
        paths = list(dict.fromkeys(p for p in files if isinstance(p, str) and p.strip() and not _GLOB.search(p)))
        paths = paths[:MAX_FILES]
        if root is None and not paths:
            return {}
        out: dict[str, Any] = {}
        if root is not None:
            out["root"] = root
            git = self._git_state(root)
            if git is not None and git.commit:
                out["commit"] = git.commit
                if git.branch:
                    out["branch"] = git.branch
        in_git = root is not None and self._git_state(root) is not None
        entries = []
        contents = []
        for path in paths:
            found = self._file(root, path, in_git)
            entry: dict[str, Any] = {"path": path, "id": found.id}
            if found.by is not None:
                entry["by"] = found.by
            if found.absent:
                entry["absent"] = True
            entries.append(entry)
            if found.content is not None:
                contents.append(found.content)
        out["files"] = entries
        out["identifiers"] = held_identifiers(candidates(texts, paths), contents)
        return out

    def _file(self, root: str | None, path: str, in_git: bool) -> _FileId:
        if path.startswith("~"):  # the recording machine's home: not this one's to read
            return _FileId(None, None, None)
        full = os.path.join(root, path) if root is not None and not os.path.isabs(path) else path
        if not os.path.isabs(full):
            return _FileId(None, None, None)
        full = os.path.normpath(full)
        cached = self._files.get(full)
        if cached is None:
            cached = self._files[full] = _read_id(full, root, in_git)
        return cached

    def _git_state(self, root: str) -> _Git | None:
        if root not in self._git:
            self._git[root] = git_state(root)
        return self._git[root]


def _read_id(full: str, root: str | None, in_git: bool) -> _FileId:
    try:
        stat = os.stat(full)
    except FileNotFoundError:
        # absent only when the directory it is named from is there (the root; for an absolute path outside it, its
        # own directory): otherwise nothing is known of it
        under = root if root is not None and _under(full, root) else os.path.dirname(full)
        return _FileId(None, None, None, absent=os.path.isdir(under))
    except OSError:
        return _FileId(None, None, None)
    if not os.path.isfile(full):
        return _FileId(None, None, None)
    if stat.st_size > MAX_HASH_BYTES:
        return _FileId(f"{stat.st_size}:{stat.st_mtime_ns}", "size-mtime", None)
    try:
        with open(full, "rb") as fh:
            content = fh.read(MAX_HASH_BYTES + 1)
    except OSError:
        return _FileId(None, None, None)
    return _FileId(blob_id(content), "git-blob" if in_git else "sha1-blob", content)


def _under(path: str, root: str) -> bool:
    return path.startswith(os.path.normpath(root).rstrip(os.sep) + os.sep)


def blob_id(content: bytes) -> str:
    """Git's blob id of ``content`` (what ``git hash-object`` prints for a file without filters)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def git_state(root: str) -> _Git | None:
    """The commit and branch HEAD names in the git checkout ``root`` lies in; None outside one."""
    gitdir = _git_dir(root)
    if gitdir is None:
        return None
    head = _read(os.path.join(gitdir, "HEAD"))
    if head is None:
        return _Git(None, None)
    if not head.startswith("ref:"):
        return _Git(head if _is_sha(head) else None, None)
    ref = head[4:].strip()
    branch = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None
    return _Git(_resolve_ref(gitdir, ref), branch)


def _git_dir(root: str) -> str | None:
    directory = os.path.abspath(root)
    while True:
        entry = os.path.join(directory, ".git")
        if os.path.isdir(entry):
            return entry
        if os.path.isfile(entry):  # a worktree or a submodule: "gitdir: <path>"
            first = _read(entry) or ""
            if not first.startswith("gitdir:"):
                return None
            return os.path.normpath(os.path.join(directory, first[len("gitdir:"):].strip()))
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _resolve_ref(gitdir: str, ref: str) -> str | None:
    """The commit a ref names: its loose file (in the worktree's directory or the common one), else packed-refs.
    None for a branch without commits yet."""
    common = _read(os.path.join(gitdir, "commondir"))
    dirs = [gitdir] + ([os.path.normpath(os.path.join(gitdir, common))] if common else [])
    for directory in dirs:
        value = _read(os.path.join(directory, *ref.split("/")))
        if value is not None and _is_sha(value):
            return value
    for directory in dirs:
        packed = _read(os.path.join(directory, "packed-refs"), whole=True) or ""
        for line in packed.splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and _is_sha(sha):
                return sha
    return None


def _read(path: str, *, whole: bool = False) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20) if whole else fh.readline()
    except OSError:
        return None
    return text if whole else text.strip()


def _is_sha(value: str) -> bool:
    return len(value) in (40, 64) and all(c in "0123456789abcdef" for c in value)


def candidates(texts: Iterable[str | None], paths: Sequence[str] = ()) -> list[str]:
    """The code-like tokens of ``texts``: any identifier in backticks, and outside them the names whose shape
    says code (an underscore, an inner capital, a dot or ``::`` between names, a leading ``--``). A file's own
    name is not one of them."""
    names = {os.path.basename(p) for p in paths} | set(paths)
    found: list[str] = []
    for text in texts:
        if not text:
            continue
        for span in _BACKTICKED.findall(text):
            span = span.strip()
            if _IDENTIFIER.fullmatch(span):
                found.append(span.removesuffix("()"))
        for token in _TOKEN.findall(_BACKTICKED.sub(" ", text)):
            if _code_shaped(token):
                found.append(token)
    kept = [t for t in dict.fromkeys(found) if len(t.lstrip("-")) >= 3 and t not in names]
    return kept[:MAX_CANDIDATES]


def _code_shaped(token: str) -> bool:
    bare = token.lstrip("-")
    if token.startswith("--"):
        return len(bare) >= 2
    parts = re.split(r"\.|::", bare)
    if len(parts) > 1:  # a module or a member (``pkg.mod``, ``Store.add_item``), not a file name (``setup.py``)
        return parts[-1].lower() not in _EXTENSIONS and len(parts[0]) > 1
    return "_" in bare.strip("_") or bool(re.search(r"[a-z][A-Z]", bare))


_EXTENSIONS = frozenset(
    "py pyi js mjs cjs ts tsx jsx json md rst txt toml yaml yml ini cfg lock ex exs erl rs go rb java kt c h cc cpp "
    "hpp cs swift sh bash zsh sql html css scss vue svelte xml csv log env db sqlite gz zip org com net io".split())


def held_identifiers(names: Sequence[str], contents: Sequence[bytes]) -> list[str]:
    """Those of ``names`` one of ``contents`` holds as a whole word; a dotted name the file holds only the last
    part of (``Store.add_item``: ``add_item``) is kept as that part."""
    if not names or not contents:
        return []
    wanted: dict[str, str] = {}
    for name in names:
        wanted.setdefault(name, name)
        last = re.split(r"\.|::", name.lstrip("-"))[-1]
        if last != name and _code_shaped(last):
            wanted.setdefault(last, last)
    pattern = re.compile(rb"(?<![\w-])(" + b"|".join(re.escape(w.encode()) for w in
                                                     sorted(wanted, key=len, reverse=True)) + rb")(?![\w-])")
    held: set[str] = set()
    for content in contents:
        held.update(m.decode("utf-8", "replace") for m in pattern.findall(content))
    out = []
    for name in names:
        last = re.split(r"\.|::", name.lstrip("-"))[-1]
        if name in held:
            out.append(name)
        elif last in held and last in wanted:
            out.append(last)
    return list(dict.fromkeys(out))[:MAX_IDENTIFIERS]


def safe_anchors(reader: AnchorReader, root: str | None, files: Iterable[str],
                 texts: Iterable[str | None]) -> dict[str, Any]:
    """``reader.anchors``, or ``{}`` when reading them failed: anchors never fail capture (logged once)."""
    try:
        found = reader.anchors(root, files, texts)
        json.dumps(found, ensure_ascii=False).encode("utf-8")  # what the store takes (no lone surrogate)
        return found
    except Exception:
        global _warned
        if not _warned:
            _warned = True
            log.warning("could not read the anchors of a memory; it is kept without them", exc_info=True)
        return {}


_warned = False
