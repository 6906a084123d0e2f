"""A real git repository in a test's temporary directory, for the tests of anchors and freshness."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def committed_repo(path: Path, files: dict[str, str]) -> Path:
    """``path`` made a repository on branch ``trunk`` holding ``files`` (name → text) in one commit."""
    path.mkdir()
    git(path, "init", "-q", "-b", "trunk")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "T")
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "start")
    return path
