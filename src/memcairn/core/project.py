"""Project identity from a working directory, using only the standard library (hooks call it).

- Inside a git checkout: the basename of its top-level directory.
- Inside a git worktree: ``parent/worktree``; reads also cover ``parent``.
- Outside git: the directory's basename.

A name is at most ``MAX_PROJECT_CHARS`` characters (the store's limit): a longer directory name is cut, so
an event from such a directory is filed under a name the store takes, not refused.

The ``.git`` entries are read directly instead of running ``git``: a subprocess per hook event would
cost more than the rest of the hook. For the same reason paths are handled with ``os.path`` and the
identity is a plain class: ``pathlib`` and ``dataclasses`` would add ~10 ms to every hook's start.
"""

from __future__ import annotations

import os

MAX_PROJECT_CHARS = 200


def _name(raw: str) -> str:
    """A directory name as a project name the store takes: at most ``MAX_PROJECT_CHARS`` characters, and a
    byte that is not UTF-8 (Python decodes it to a lone surrogate, which SQLite cannot store) or a control
    character (``models.CONTROL_CHARACTER``, which the store refuses in a new name) becomes U+FFFD."""
    name = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" or ch < " " or "\x7f" <= ch <= "\x9f" else ch
                   for ch in raw[:MAX_PROJECT_CHARS])
    return name.strip() or "root"


def _start_directory(cwd: str | os.PathLike[str] | None) -> str:
    """The absolute directory to name. The process's own directory may have been deleted (``getcwd`` fails):
    the shell's ``PWD`` still names it. A path with a NUL (from a malformed event) cannot be resolved."""
    if cwd:
        start = os.path.expanduser(os.fspath(cwd))
    else:
        try:
            start = os.getcwd()
        except OSError:
            start = os.environ.get("PWD") or os.sep
    try:
        return os.path.realpath(start)
    except (OSError, ValueError):
        return os.path.abspath(start)


class ProjectIdentity:
    """``name`` and ``chain`` (the projects whose memories this directory reads, own name first); immutable,
    compared and hashed by value."""

    __slots__ = ("name", "chain")

    name: str
    chain: tuple[str, ...]

    def __init__(self, name: str, chain: tuple[str, ...]) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "chain", chain)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {key!r}: ProjectIdentity is immutable")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"cannot delete field {key!r}: ProjectIdentity is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProjectIdentity) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self.name, self.chain) == (other.name, other.chain)

    def __hash__(self) -> int:
        return hash((self.name, self.chain))

    def __repr__(self) -> str:
        return f"ProjectIdentity(name={self.name!r}, chain={self.chain!r})"

    def __reduce__(self) -> tuple[type[ProjectIdentity], tuple[str, tuple[str, ...]]]:
        return (self.__class__, (self.name, self.chain))


def _find_git_entry(start: str) -> str | None:
    """The nearest ``.git`` (directory or file) in ``start`` or one of its parents."""
    directory = start
    while True:
        candidate = os.path.join(directory, ".git")
        if os.path.exists(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _worktree_main_top(git_file: str) -> str | None:
    """For a ``.git`` file of a linked worktree, the main checkout's top-level directory."""
    try:
        with open(git_file, encoding="utf-8", errors="replace") as fh:
            first = fh.read().splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    gitdir = first.split(":", 1)[1].strip()
    if os.path.isabs(gitdir):
        gitdir = os.path.normpath(gitdir)
    else:
        gitdir = os.path.realpath(os.path.join(os.path.dirname(git_file), gitdir))
    # Worktrees live at <main>/.git/worktrees/<name>; submodules at <super>/.git/modules/<name>.
    parent = os.path.dirname(gitdir)
    if os.path.basename(parent) != "worktrees":
        return None
    common = os.path.dirname(parent)
    return os.path.dirname(common) if os.path.basename(common) == ".git" else None


def project_from_cwd(cwd: str | os.PathLike[str] | None = None) -> ProjectIdentity:
    start = _start_directory(cwd)
    entry = _find_git_entry(start)
    if entry is None:
        name = _name(os.path.basename(start))
        return ProjectIdentity(name, (name,))
    top = os.path.dirname(entry)
    if os.path.isfile(entry):
        main_top = _worktree_main_top(entry)
        if main_top is not None:
            parent = _name(os.path.basename(main_top))
            name = _name(f"{parent}/{os.path.basename(top)}")
            return ProjectIdentity(name, (name, parent))
    name = _name(os.path.basename(top))
    return ProjectIdentity(name, (name,))
