"""Project identity from a working directory, using only the standard library (hooks call it).

- Inside a git checkout: the basename of its top-level directory.
- Inside a git worktree: ``parent/worktree``; reads also cover ``parent``.
- Outside git: the directory's basename.

The ``.git`` entries are read directly instead of running ``git``: a subprocess per hook event would
cost more than the rest of the hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProjectIdentity:
    name: str
    chain: tuple[str, ...]  # the projects whose memories this directory reads, own name first


def _find_git_entry(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / ".git"
        if candidate.exists():
            return candidate
    return None


def _worktree_main_top(git_file: Path) -> Path | None:
    """For a ``.git`` file of a linked worktree, the main checkout's top-level directory."""
    try:
        first = git_file.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    gitdir = Path(first.split(":", 1)[1].strip())
    if not gitdir.is_absolute():
        gitdir = (git_file.parent / gitdir).resolve()
    # Worktrees live at <main>/.git/worktrees/<name>; submodules at <super>/.git/modules/<name>.
    if gitdir.parent.name != "worktrees":
        return None
    common = gitdir.parent.parent
    return common.parent if common.name == ".git" else None


def project_from_cwd(cwd: str | Path | None = None) -> ProjectIdentity:
    start = Path(cwd or Path.cwd()).expanduser()
    try:
        start = start.resolve()
    except OSError:
        pass
    entry = _find_git_entry(start)
    if entry is None:
        name = start.name or "root"
        return ProjectIdentity(name, (name,))
    top = entry.parent
    if entry.is_file():
        main_top = _worktree_main_top(entry)
        if main_top is not None:
            parent = main_top.name or "root"
            name = f"{parent}/{top.name}"
            return ProjectIdentity(name, (name, parent))
    name = top.name or "root"
    return ProjectIdentity(name, (name,))
