"""The worker reads a transcript for a caller only when the caller's own user could read it: a real worker run
as root, asked over loopback by a process of another user (``nobody``) to read a root-only file, stores nothing
of it; the same file named by the worker's own user is read. Only regular ``*.jsonl`` files are read."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port
from transcript_builder import Transcript

from memcairn.store import Store
from memcairn.transfer.transcript_access import peer_uid
from memcairn.wire import lifecycle
from memcairn.wire.config import load_settings

pytestmark = [pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/net/tcp").exists(),
                                 reason="runs a root worker and a request of another user (Linux, root)"),
              pytest.mark.timeout(120)]
NOBODY = 65534
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")  # one another user may run (the venv may be closed)
POST = """
import json, sys, urllib.request
port, body = sys.argv[1], sys.argv[2]
req = urllib.request.Request(f"http://127.0.0.1:{port}/api/sessions/observations", data=body.encode(),
                             headers={"Content-Type": "application/json"}, method="POST")
with urllib.request.urlopen(req, timeout=30) as resp:
    print(resp.status)
"""


@pytest.fixture
def worker(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    monkeypatch.setenv("MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS", "3600")  # the queued bodies stay to be looked at
    started = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=dict(os.environ),
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    yield load_settings().port
    lifecycle.stop(load_settings(), timeout=10)


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder every user may enter (under /tmp, not the test's own 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="memcairn-transcripts-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def transcript(path: Path, call: str, said: str, mode: int) -> Path:
    Transcript().prompt("deploy").text(said, message_id="m1").tool(call, "Bash", {"command": "make"},
                                                                    message_id="m1").write(path)
    path.chmod(mode)
    return path


def post(port: int, body: dict[str, Any], uid: int | None) -> None:
    """POST the event from a process of ``uid`` (None: this one's user), as its hook would."""
    as_user = (lambda: (os.setgid(NOBODY), os.setuid(uid))) if uid is not None else None
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-c", POST, str(port), json.dumps(body)], capture_output=True,
                          text=True, timeout=60, preexec_fn=as_user, cwd="/")
    assert done.returncode == 0 and done.stdout.strip() == "202", done.stderr


def narrations() -> dict[str, Any]:
    with Store(load_settings().db_path) as store:
        return {e.tool_use_id: e.payload.get("narration") for e in store.session_events("unknown", "s1")}


def test_a_file_the_caller_may_not_read_is_never_stored(worker: int, folder: Path) -> None:
    secret = transcript(folder / "root-only.jsonl", "tu-1", "The root password is swordfish-0600.", 0o600)
    shared = transcript(folder / "shared.jsonl", "tu-2", "Everyone may read this line.", 0o644)
    event = {"session_id": "s1", "project": "demo", "tool_name": "Bash", "tool_input": {"command": "make"},
             "tool_response": "ok"}
    post(worker, {**event, "tool_use_id": "tu-1", "transcript_path": str(secret)}, NOBODY)
    post(worker, {**event, "tool_use_id": "tu-2", "transcript_path": str(shared)}, NOBODY)
    # a link the caller made does not lend it the worker's rights
    (folder / "to-secret.jsonl").symlink_to(transcript(folder / "root-too.jsonl", "tu-4", "swordfish again.", 0o600))
    post(worker, {**event, "tool_use_id": "tu-4", "transcript_path": str(folder / "to-secret.jsonl")}, NOBODY)
    assert narrations() == {"tu-1": None, "tu-2": "Everyone may read this line.", "tu-4": None}
    with Store(load_settings().db_path) as store:
        assert "swordfish" not in json.dumps([e.payload for e in store.session_events("unknown", "s1")])

    # the worker's own user (root here) may have its own file read
    post(worker, {**event, "session_id": "s1", "tool_use_id": "tu-3",
                  "transcript_path": str(transcript(folder / "own.jsonl", "tu-3", "Mine to read.", 0o600))}, None)
    assert narrations()["tu-3"] == "Mine to read."


def test_only_regular_transcript_files_are_read(worker: int, folder: Path) -> None:
    os.mkfifo(folder / "pipe.jsonl")  # would block a plain open for reading
    (folder / "environ.jsonl").symlink_to("/proc/self/environ")
    event = {"session_id": "s1", "project": "demo", "tool_name": "Bash", "tool_input": {"command": "make"},
             "tool_response": "ok"}
    post(worker, {**event, "tool_use_id": "tu-1", "transcript_path": str(folder / "pipe.jsonl")}, None)
    post(worker, {**event, "tool_use_id": "tu-2", "transcript_path": str(folder / "environ.jsonl")}, None)
    assert narrations() == {"tu-1": None, "tu-2": None}


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_peer_of_a_loopback_connection_is_found_with_its_user(family: int, host: str) -> None:
    try:
        server = socket.socket(family)
        server.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} here")
    with server:
        server.listen()
        with socket.create_connection(server.getsockname()[:2]) as client:
            accepted, peer = server.accept()
            with accepted:
                assert peer_uid(peer, accepted.getsockname()) == os.geteuid()
                assert peer_uid((host, 1), accepted.getsockname()) is None
            assert client.getsockname() == peer
