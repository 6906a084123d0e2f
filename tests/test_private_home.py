"""MEMCAIRN_HOME is its owner's alone: the folder 0700 and every file memcairn makes in it 0600 (the database with
its -wal and -shm, logs, pid and lock files, settings.json), after a real worker ran and after a command-line
import, whatever the umask they were started with; a home an earlier release made 0755 is tightened."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import free_port

from memcairn.wire import lifecycle
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import load_settings


def memcairn(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command line as a person runs it, with the usual umask (022): memcairn must not rely on it."""
    return subprocess.run([sys.executable, "-m", "memcairn", *args], env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: os.umask(0o022))


def modes(home: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for path in home.rglob("*"):
        found[str(path.relative_to(home))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def open_to_others(home: Path) -> dict[str, str]:
    return {name: oct(mode) for name, mode in modes(home).items() if mode & 0o077}


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    yield dict(os.environ)
    lifecycle.stop(load_settings(), timeout=10)


def test_a_worker_makes_its_home_and_files_owner_only_and_tightens_an_old_home(env: dict[str, str],
                                                                               isolated_home: Path) -> None:
    isolated_home.mkdir(mode=0o755)
    os.chmod(isolated_home, 0o755)  # as an earlier release left it
    started = memcairn(env, "worker", "start", "--json")
    assert started.returncode == 0, started.stderr
    cfg = load_settings()
    WorkerClient(settings=cfg).post_json("/api/memory/save", {"text": "owner only", "project": "demo"})
    made = modes(isolated_home)
    for name in ("memcairn.db", "memcairn.db-wal", "memcairn.db-shm", "worker.pid", "worker.lock",
                 "logs/worker.log", "logs/worker-stderr.log"):
        assert made.get(name) == 0o600, (name, oct(made.get(name, 0)))
    assert made["."] == 0o700 and made["logs"] == 0o700
    assert open_to_others(isolated_home) == {}


def test_a_command_line_import_and_settings_make_owner_only_files(env: dict[str, str], tmp_path: Path) -> None:
    source = {**env, "MEMCAIRN_HOME": str(tmp_path / "source"), "MEMCAIRN_WORKER_AUTOSTART": "false"}
    assert memcairn(source, "add", "--project", "demo", "--kind", "manual", "--title", "t",
                    "--text", "exported and imported").returncode == 0
    export = tmp_path / "export.jsonl"
    assert memcairn(source, "export", "-o", str(export)).returncode == 0

    home = tmp_path / "fresh"
    fresh = {**env, "MEMCAIRN_HOME": str(home), "MEMCAIRN_WORKER_AUTOSTART": "false"}
    done = memcairn(fresh, "import", "jsonl", str(export), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["items"] == 1
    assert memcairn(fresh, "settings", "set", "context_token_budget", "3000").returncode == 0
    made = modes(home)
    assert made["memcairn.db"] == 0o600 and made["settings.json"] == 0o600 and made["."] == 0o700
    assert open_to_others(home) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder to another user needs root")
def test_a_home_holding_another_users_cluster_is_left_open_to_it(tmp_path: Path) -> None:
    """As root, the team server's embedded PostgreSQL runs as an unprivileged user inside the home
    (``postgres/``): a 0700 home would lock it out of its cluster, so such a home keeps its mode."""
    home = tmp_path / "home"
    (home / "postgres").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chown(home / "postgres", 65534, 65534)
    code = ("from pathlib import Path; from memcairn.wire.config import private_home; "
            f"private_home(Path({str(home)!r}), create=True)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert stat.S_IMODE(home.stat().st_mode) == 0o755
    os.chown(home / "postgres", 0, 0)  # ours again: the home is tightened
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
