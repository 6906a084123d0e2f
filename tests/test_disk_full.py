"""A full disk: the worker answers 507 with the CLI's words, its log writer drops lines instead of failing,
and hook events that failed for lack of space are tried again by themselves once there is room."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from memcairn.core.errors import DiskFullError
from memcairn.core.models import NewItem
from memcairn.wire.config import load_settings
from memcairn.worker.app import make_app
from memcairn.worker.logs import CappedRotatingFileHandler

PORT = 37877


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs (needs the right to mount, as root in a container; skipped elsewhere)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill_up(path: Path) -> None:
    """Write ``path`` until the disk has no room left."""
    with open(path, "ab") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def test_a_full_disk_answers_507_and_failed_events_are_retried_once_there_is_room(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMCAIRN_HOME", str(small_disk / "home"))
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    monkeypatch.setenv("MEMCAIRN_PORT", str(PORT))
    monkeypatch.setenv("MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS", "0")
    cfg = load_settings()
    app = make_app(None, cfg, static_dir=tmp_path / "static")
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}") as client:
        deadline = time.monotonic() + 20
        while app.state.worker.phase != "ready":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        store = app.state.worker.runtime.store
        upkeep = app.state.worker.upkeep
        event_id, _ = store.enqueue_ingest_event("s1", "claude-code", "session_init",
                                                 {"project": "p", "prompt": "the disk fills"}, None)
        (small_disk / "reserve").write_bytes(b"\0" * 200_000)
        _fill_up(small_disk / "ballast")
        answer = None
        for n in range(200):
            answer = client.post("/api/memory/save", json={"project": "p", "text": f"memory {n} " + "x" * 20000})
            if answer.status_code != 200:
                break
        assert answer is not None and answer.status_code == 507, answer.text
        assert answer.json()["error"] == "disk_full"
        assert "the disk is full" in answer.json()["detail"] and "free some space" in answer.json()["detail"]
        store_health = client.get("/api/health").json()["store"]
        assert store_health["state"] == "disk_full" and "free some space" in store_health["problems"][0]["fix"]
        with pytest.raises(DiskFullError) as raised:
            store.add_item(NewItem(project="p", kind="manual", text="y" * 50000))
        # Some room comes back (too little for work): the pipeline records such a failure so, and the event
        # stays failed while the disk is that full.
        os.remove(small_disk / "reserve")
        store.mark_ingest_event(event_id, "failed", error=f"{type(raised.value).__name__}: {raised.value}")
        assert upkeep.retry_disk_full_events() == 0
        assert store.failed_ingest_count() == 1
        os.remove(small_disk / "ballast")
        deadline = time.monotonic() + 30
        while store.ingest_queue()["done"] < 1:  # queued again by the upkeep, then processed
            assert time.monotonic() < deadline, store.ingest_queue()
            time.sleep(0.1)
        assert store.failed_ingest_count() == 0
        assert client.get("/api/health").json()["store"]["state"] == "ok"
        assert client.post("/api/memory/save", json={"project": "p", "text": "room again"}).status_code == 200


def test_the_log_writer_drops_lines_on_a_full_disk_and_says_so_later(tmp_path: Path) -> None:
    path = tmp_path / "worker.log"
    handler = CappedRotatingFileHandler(path, maxBytes=1_000_000, backupCount=1, encoding="utf-8")
    logger = logging.getLogger("test-full-disk")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.warning("before")
        handler.stream.close()
        handler.stream = None  # type: ignore[assignment]
        handler._open = lambda: open("/dev/full", "w", encoding="utf-8")  # type: ignore[method-assign]
        logger.warning("lost one")  # every write: ENOSPC
        logger.warning("lost two")
        assert handler.dropped == 2
        del handler._open  # room again: the file is opened again for the next line
        logger.warning("after")
        text = path.read_text()
        assert "before" in text and "after" in text and "lost" not in text.replace("2 log line", "")
        assert "2 log line(s) could not be written" in text
    finally:
        logger.removeHandler(handler)
        handler.close()
