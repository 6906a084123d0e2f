"""Paths of a call: relative ones joined to where it ran, then written relative to the project directory."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memcairn.capture.offline.text import _unique


def _is_abs(path: str) -> bool:
    return path.startswith(("/", "~", "\\\\")) or bool(re.match(r"^[A-Za-z]:[\\/]", path))


def _norm(path: str) -> str:
    if "\\" in path and "/" not in path:
        return path.rstrip("\\") or path
    if path.startswith("~"):
        return path.rstrip("/") or path
    return posixpath.normpath(path)


def outermost(*dirs: str | None) -> str | None:
    """The directory the others lie under, when they nest (``/p`` of ``/p`` and ``/p/assets``); else the first.

    A shell's working directory moves (``cd assets && npx vitest``) and the turn's cwd moves with it, while the
    files the agent writes stay where they are: paths are made relative to the outermost of the directories a
    call and its turn ran in, so ``/p/test/x_test.exs`` is ``test/x_test.exs`` whichever of them the turn ended
    in."""
    given = [_norm(d) for d in dirs if d]
    if not given:
        return None
    for candidate in sorted(given, key=len):
        inner = [d for d in given if d == candidate or d.startswith(candidate.rstrip("/") + "/")]
        if len(inner) == len(given):
            return candidate
    return given[0]


@dataclass(frozen=True)
class _Paths:
    """Resolves paths: relative ones against ``anchor`` (where the call ran), then relative to ``base`` (the
    project directory: the outermost of the turn's and the call's cwd, ``outermost``) when under it, else to the
    first of ``roots`` they lie under (a worktree the agent runs its commands in beside the session's checkout:
    ``/p__worktrees/fix-1/src/a.ts`` is ``src/a.ts``); others stay absolute."""

    base: str | None
    anchor: str | None
    roots: tuple[str, ...] = ()  # other checkouts the session works in (``workdirs``)

    def resolve(self, raw: Any) -> str | None:
        if not isinstance(raw, str):
            return None
        path = raw.strip()
        if path.startswith("file://"):
            path = path[7:]
        if not path or len(path) > 500 or any(ch in path for ch in "\n\x00$`") or path.startswith("-"):
            return None
        anchor = self.anchor
        if not _is_abs(path) and anchor:
            path = posixpath.join(anchor, path) if "\\" not in anchor else f"{anchor}\\{path}"
        path = _norm(path)
        if _is_abs(path):
            for root in (self.base, *self.roots):
                if not root:
                    continue
                base = _norm(root)
                for sep in ("/", "\\"):
                    if path == base:
                        return None
                    if path.startswith(base.rstrip(sep) + sep):
                        return path[len(base.rstrip(sep)) + 1 :] or None
        return None if path in (".", "") else path

    def resolve_all(self, raws: Iterable[Any]) -> list[str]:
        return _unique(filter(None, (self.resolve(raw) for raw in raws)))


WORKDIR_KEYS = ("workdir", "directory", "cwd")  # where a shell call says it runs (Codex, Gemini CLI, others)


def workdirs(inputs: Iterable[Any], base: str | None) -> tuple[str, ...]:
    """The absolute working directories shell calls name (``WORKDIR_KEYS``) that lie outside ``base``, outermost
    first: other checkouts of the project (git worktrees) the agent works in."""
    found: list[str] = []
    for data in inputs:
        if not isinstance(data, dict):
            continue
        for key in WORKDIR_KEYS:
            value = data.get(key)
            if isinstance(value, str) and _is_abs(value.strip()):
                found.append(_norm(value.strip()))
    outside = [d for d in _unique(found) if not base or not (d == _norm(base)
                                                              or d.startswith(_norm(base).rstrip("/") + "/"))]
    return tuple(sorted(outside, key=len))
