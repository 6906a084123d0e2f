"""Git alone, for ``bench freshness``: a clone, the commit at a time, the files' blob ids, and the labels.

A memory with anchored files is labelled between a base commit (where it was captured) and a later one:
``stale`` when a file it anchors was deleted (``git diff -M --name-status``: D, or gone from the tree and not
renamed), or an identifier it names was in one of its files at base and is in none of them later (a renamed
file read at its new path); ``current`` when every file has the same blob id; ``changed`` otherwise, a file
renamed with the names it held still there included (``Label.moved``). Files that are not tracked at base say
nothing.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memcairn.capture.anchors import held_identifiers
from memcairn.search.freshness import CHANGED, CURRENT, STALE


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def clone(source: str, into: Path) -> str:
    """Clone ``source`` (a bundle or a repository) into ``into``; the default branch's HEAD commit."""
    subprocess.run(["git", "clone", "-q", source, str(into)], check=True, capture_output=True, text=True)
    found = subprocess.run(["git", "-C", str(into), "rev-parse", "--verify", "-q", "HEAD"], capture_output=True,
                           text=True).stdout.strip()
    if found:
        return found
    # a bundle without HEAD: its main (or master) branch, else its first
    branches = git(into, "for-each-ref", "--format=%(refname)", "refs/remotes/origin").split()
    if not branches:
        raise ValueError(f"{source} holds no branch")
    named = {b.rsplit("/", 1)[-1]: b for b in branches}
    return git(into, "rev-parse", named.get("main") or named.get("master") or branches[0])


def commit_at(repo: Path, head: str, when: datetime) -> str | None:
    """The last commit of ``head``'s history at or before ``when`` (None: none is that old)."""
    found = git(repo, "rev-list", "-1", f"--before={when.isoformat()}", head)
    return found or None


def commit_time(repo: Path, commit: str) -> datetime:
    return datetime.fromisoformat(git(repo, "show", "-s", "--format=%cI", commit))


def checkout(repo: Path, commit: str) -> None:
    git(repo, "checkout", "-q", "--detach", commit)


@dataclass(frozen=True)
class Label:
    state: str
    deleted: tuple[str, ...] = ()  # anchored files deleted
    lost: tuple[str, ...] = ()  # identifiers held at base and by none of its files later
    moved: tuple[str, ...] = ()  # anchored files renamed (their identifiers read at the new path)


@dataclass
class Tree:
    """Blob ids of a commit's tracked files, and their contents read on demand."""

    repo: Path
    commit: str
    blobs: dict[str, str] = field(default_factory=dict)
    _contents: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def of(cls, repo: Path, commit: str) -> Tree:
        tree = cls(repo, commit)
        out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", commit], check=True,
                             capture_output=True).stdout
        for entry in out.split(b"\0"):
            if entry:
                meta, _, path = entry.partition(b"\t")
                tree.blobs[path.decode("utf-8", "replace")] = meta.split()[2].decode()
        return tree

    def content(self, path: str) -> bytes:
        if path not in self._contents:
            self._contents[path] = subprocess.run(["git", "-C", str(self.repo), "cat-file", "blob", self.blobs[path]],
                                                  check=True, capture_output=True).stdout
        return self._contents[path]


def deleted_since(repo: Path, base: str, step: str) -> set[str]:
    """Paths of ``base`` deleted or renamed away by ``step``."""
    out = git(repo, "diff", "--name-status", "-M", base, step)
    gone = set()
    for line in out.splitlines():
        parts = line.split("\t")
        if parts[0][:1] in ("D", "R") and len(parts) > 1:
            gone.add(parts[1])
    return gone


def renamed_since(repo: Path, base: str, step: str) -> dict[str, str]:
    """Paths of ``base`` git sees renamed by ``step``: old -> new."""
    out = {}
    for line in git(repo, "diff", "--name-status", "-M", base, step).splitlines():
        parts = line.split("\t")
        if parts[0][:1] == "R" and len(parts) > 2:
            out[parts[1]] = parts[2]
    return out


def tracked_paths(anchors: dict[str, Any], checkout_dir: Path, base: Tree) -> list[str]:
    """The memory's anchored files (with an id at capture) that ``base`` tracks, relative to the checkout."""
    root = anchors.get("root") or str(checkout_dir)
    out = []
    for entry in anchors.get("files") or ():
        if not isinstance(entry, dict) or not entry.get("id") or not isinstance(entry.get("path"), str):
            continue
        full = os.path.normpath(os.path.join(root, entry["path"]))
        rel = os.path.relpath(full, checkout_dir)
        if not rel.startswith("..") and rel in base.blobs:
            out.append(rel)
    return list(dict.fromkeys(out))


def label(anchors: dict[str, Any], checkout_dir: Path, base: Tree, step: Tree, deleted: set[str],
          renamed: dict[str, str] | None = None) -> Label | None:
    """The memory's label between ``base`` and ``step``; None when none of its files is tracked at base."""
    paths = tracked_paths(anchors, checkout_dir, base)
    if not paths:
        return None
    moved = {p: new for p in paths if (new := (renamed or {}).get(p)) is not None and new in step.blobs}
    gone = tuple(p for p in paths if (p in deleted or p not in step.blobs) and p not in moved)
    later_paths = [moved.get(p, p) for p in paths if moved.get(p, p) in step.blobs]
    names = [n for n in anchors.get("identifiers") or () if isinstance(n, str)]
    lost: tuple[str, ...] = ()
    if names:
        then = held_identifiers(names, [base.content(p) for p in paths])
        later = set(held_identifiers(then, [step.content(p) for p in later_paths]))
        lost = tuple(n for n in then if n not in later)
    if gone or lost:
        return Label(STALE, gone, lost, tuple(moved))
    if moved:
        return Label(CHANGED, moved=tuple(moved))
    if all(base.blobs[p] == step.blobs.get(p) for p in paths):
        return Label(CURRENT)
    return Label(CHANGED)
