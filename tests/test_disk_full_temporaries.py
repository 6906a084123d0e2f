"""A write through a temporary file and a rename that fails on a full disk leaves no temporary file behind:
the worker's pid file, the team link's files, the Chroma store id (a real full tmpfs; needs the right to
mount). The hook state and the spool are in ``test_disk_full_hooks.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcairn.bench.faults_disk_hooks import fill_up
from memcairn.vectors.factory import chroma_store_id
from memcairn.wire import lifecycle, team_client
from memcairn.wire.config import load_settings


def _full_home(disk: Path) -> Path:
    home = disk / "home"
    home.mkdir()
    fill_up(disk / "ballast")
    return home


def _leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir())


def test_the_pid_file_on_a_full_disk(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = _full_home(small_disk)
    monkeypatch.setenv("MEMCAIRN_HOME", str(home))
    with pytest.raises(OSError):
        lifecycle.write_pid_file(load_settings(), {"pid": 1, "port": 1, "version": "x" * 100_000})
    assert _leftovers(home) == []


def test_the_team_link_files_on_a_full_disk(small_disk: Path) -> None:  # noqa: F811
    home = _full_home(small_disk)
    with pytest.raises(OSError):
        team_client.write_status(home, {"detail": "x" * 100_000})
    with pytest.raises(OSError):
        team_client.save_remote(home, team_client.RemoteConfig("http://127.0.0.1:1", "k" * 100_000, {}))
    assert _leftovers(home) == []


def test_the_chroma_store_id_on_a_full_disk(small_disk: Path) -> None:  # noqa: F811
    home = _full_home(small_disk)
    with pytest.raises(OSError):
        chroma_store_id(home)
    assert _leftovers(home) == []
