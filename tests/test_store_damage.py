"""A damaged store: the keyword index (damaged, drifted, dropped) is repaired, a file that fails SQLite's
check refuses writes, a full disk says so; the worker finds each by itself and ``/api/health`` and ``memcairn
doctor`` name the fix."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memcairn.bench.damage import corrupt_page, damage_keyword_index, drift_content, drop_keyword_table
from memcairn.core.errors import KeywordIndexDamagedError, StoreDamagedError
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.store.doctor import run_checks
from memcairn.wire.config import Settings, load_settings
from memcairn.worker.app import make_app

PORT = 37877
BASE = f"http://127.0.0.1:{PORT}"


def _fill(store: Store, n: int = 40, size: int = 1) -> list[int]:
    return [store.add_item(NewItem(project="p", kind="manual", title=f"note {i}",
                                   text=f"body {i} zebra " + "filler words here " * size)).id for i in range(n)]


@pytest.fixture
def cfg(monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    monkeypatch.setenv("MEMCAIRN_PORT", str(PORT))
    monkeypatch.setenv("MEMCAIRN_INTEGRITY_CHECK_SECONDS", "1")
    return load_settings()


@pytest.fixture
def worker(cfg: Settings, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Any, TestClient]]:
    """An in-process worker; ``@pytest.mark.parametrize("worker", [False], indirect=True)`` turns its in-memory
    keyword copy off, so keyword searches read FTS5 itself."""
    cfg = dataclasses.replace(cfg, worker_keyword_index=getattr(request, "param", True))
    app = make_app(None, cfg, static_dir=tmp_path / "static")
    with TestClient(app, base_url=BASE) as client:
        deadline = time.monotonic() + 20
        while app.state.worker.phase != "ready":
            assert app.state.worker.phase == "starting", app.state.worker.detail
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield app, client


def _wait(predicate: Any, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- item 3: a damaged keyword index ------------------------------------------------------------------
def test_a_damaged_keyword_index_says_so_instead_of_failing_the_store(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with Store(path) as store:
        _fill(store)
    damage_keyword_index(path)
    with Store(path) as store:
        assert store.fts_counts() == (40, 40)  # a count cannot see it
        heard: list[str] = []
        store.add_damage_listener(lambda kind, detail: heard.append(kind))
        with pytest.raises(KeywordIndexDamagedError, match="doctor --fix"):
            store.keyword_ids("zebra")
        assert heard == ["corrupt"]
        assert store.repair_keyword_index() == ["rebuilt the keyword index (it disagreed with the stored rows)"]
        assert len(store.keyword_ids("zebra", limit=100)) == 40


def test_the_in_memory_keyword_copy_keeps_answering_over_a_damaged_index(worker: tuple[Any, TestClient],
                                                                         cfg: Settings) -> None:
    """The copy was read while the index was sound and follows the rows, not the index: it stays right."""
    app, client = worker
    _fill(app.state.worker.runtime.store)
    assert app.state.worker.runtime.store._keyword_index.wait(10)
    app.state.worker.upkeep.interval = 3600.0
    damage_keyword_index(cfg.db_path)
    body = client.get("/api/search", params={"query": "zebra", "format": "json", "mode": "keyword",
                                            "min_score": "0"}).json()
    assert body["strategy"] == "keyword" and len(body["results"]) == 20


@pytest.mark.parametrize("worker", [False], indirect=True)
def test_worker_search_answers_from_the_semantic_leg_and_repairs_the_index(worker: tuple[Any, TestClient],
                                                                           cfg: Settings) -> None:
    app, client = worker
    store = app.state.worker.runtime.store
    ids = _fill(store)
    _wait(lambda: app.state.worker.runtime.mirror.status()["rows"]
          and sum(r["lag"] for r in app.state.worker.runtime.mirror.status()["rows"]) == 0, what="mirror")
    app.state.worker.upkeep.interval = 3600.0  # only the damage report may start the repair
    damage_keyword_index(cfg.db_path)
    answer = client.get("/api/search", params={"query": "zebra", "format": "json", "mode": "keyword"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["fallback_reason"] == "keyword_index_damaged"
    assert body["strategy"] == "semantic" and body["results"]
    assert {r["id"] for r in body["results"]} <= set(ids)
    _wait(lambda: any("rebuilt" in r for r in app.state.worker.upkeep.repairs), what="the repair")
    again = client.get("/api/search", params={"query": "zebra", "format": "json", "mode": "keyword"}).json()
    assert again["fallback_reason"] is None and again["strategy"] == "keyword" and len(again["results"]) == 20
    assert client.get("/api/health").json()["store"]["state"] == "ok"


def test_worker_finds_content_drift_by_itself(worker: tuple[Any, TestClient], cfg: Settings) -> None:
    app, client = worker
    ids = _fill(app.state.worker.runtime.store, 5)
    drift_content(cfg.db_path, ids[0], "giraffe")
    # No search, no person: the periodic check (every second here, once idle) finds and repairs it.
    _wait(lambda: any("disagreed" in r for r in app.state.worker.upkeep.repairs), what="the drift repair")
    hits = client.get("/api/search", params={"query": "giraffe", "format": "json", "mode": "keyword"}).json()
    assert [r["id"] for r in hits["results"]] == [ids[0]]


# -- item 4: a dropped keyword table ------------------------------------------------------------------
def test_opening_the_store_recreates_a_dropped_keyword_table(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with Store(path) as store:
        _fill(store, 5)
    drop_keyword_table(path)
    with Store(path) as store:
        assert store.repaired_at_open
        assert store.missing_triggers() == []
        assert len(store.keyword_ids("zebra")) == 5
        store.add_item(NewItem(project="p", kind="manual", text="a new zebra"))
        assert len(store.keyword_ids("zebra")) == 6 and store.fts_integrity_ok()


def test_cli_add_and_doctor_fix_work_after_the_keyword_table_was_dropped(cfg: Settings) -> None:
    with Store(cfg.db_path) as store:
        _fill(store, 3)
    drop_keyword_table(cfg.db_path)
    report = run_checks(cfg, fix=True)
    assert report["healthy"], report
    assert any(c["name"] == "keyword index table" and c["status"] == "fixed" for c in report["checks"])
    drop_keyword_table(cfg.db_path)
    added = subprocess.run([sys.executable, "-m", "memcairn", "add", "--project", "p", "--text", "another zebra"],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr


@pytest.mark.parametrize("worker", [False], indirect=True)
def test_worker_repairs_a_keyword_table_dropped_while_it_runs(worker: tuple[Any, TestClient], cfg: Settings) -> None:
    app, client = worker
    _fill(app.state.worker.runtime.store, 5)
    app.state.worker.upkeep.interval = 3600.0
    drop_keyword_table(cfg.db_path)
    answer = client.get("/api/search", params={"query": "zebra", "format": "json"})
    assert answer.status_code == 200 and answer.json()["fallback_reason"] == "keyword_index_damaged"
    _wait(lambda: any("missing keyword index" in r for r in app.state.worker.upkeep.repairs), what="the table")
    assert client.get("/api/health").json()["store"]["state"] == "ok"
    saved = client.post("/api/memory/save", json={"project": "p", "text": "zebra after the repair"})
    assert saved.status_code == 200, saved.text


# -- item 5: a file that fails SQLite's check -------------------------------------------------------------
def _corrupted(cfg: Settings, where: str = "memory_items") -> None:
    with Store(cfg.db_path) as store:
        _fill(store, 60, size=30)
    corrupt_page(cfg.db_path, where)


def test_a_store_that_fails_its_check_refuses_writes(cfg: Settings) -> None:
    _corrupted(cfg)
    with Store(cfg.db_path) as store:
        assert store.damage is not None
        with pytest.raises(StoreDamagedError, match="memcairn doctor"):
            store.add_item(NewItem(project="p", kind="manual", text="into a damaged file"))
    added = subprocess.run([sys.executable, "-m", "memcairn", "add", "--project", "p", "--text", "into a damaged file"],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 2 and "refuses to write" in added.stderr and "memcairn export" in added.stderr
    report = run_checks(cfg)
    assert not report["healthy"]
    assert any("memcairn import jsonl" in c["detail"] for c in report["checks"] if c["status"] == "problem")


@pytest.mark.parametrize("where", ["memory_items", "ix_memory_items_updated"])
def test_worker_reports_a_damaged_file_and_refuses_writes(cfg: Settings, tmp_path: Path, where: str) -> None:
    """A damaged page of the rows fails the context too; one of an index it does not read leaves it readable."""
    _corrupted(cfg, where)
    app = make_app(None, cfg, static_dir=tmp_path / "static")
    with TestClient(app, base_url=BASE) as client:
        _wait(lambda: app.state.worker.phase == "ready", what="ready")
        health = client.get("/api/health").json()
        assert health["store"]["state"] == "damaged"
        assert "memcairn doctor" in health["store"]["problems"][0]["fix"]
        saved = client.post("/api/memory/save", json={"project": "p", "text": "lost?"})
        assert saved.status_code == 500 and saved.json()["error"] == "store_damaged"
        context = client.get("/api/context/inject", params={"project": "p"})
        if where == "memory_items":
            assert context.status_code == 500 and context.json()["error"] == "store_damaged"
            assert "memcairn doctor" in context.json()["detail"]
        else:  # given, with the damage on top
            assert context.status_code == 200 and "note 59" in context.text
            assert "memory is read-only" in context.text and "memcairn doctor" in context.text


def test_worker_notices_damage_that_appears_while_it_runs(worker: tuple[Any, TestClient], cfg: Settings) -> None:
    app, client = worker
    store = app.state.worker.runtime.store
    _fill(store, 60, size=30)
    app.state.worker.upkeep.interval = 3600.0
    corrupt_page(cfg.db_path)
    listed = client.get("/api/search", params={"format": "json", "orderBy": "oldest", "limit": 100})
    assert listed.status_code == 500 and listed.json()["error"] == "store_damaged"
    _wait(lambda: store.damage is not None, what="the check after the damage report")
    assert client.get("/api/health").json()["store"]["state"] == "damaged"
    saved = client.post("/api/memory/save", json={"project": "p", "text": "not into a damaged file"})
    assert saved.json()["error"] == "store_damaged"


def test_a_file_too_large_to_check_at_open_is_checked_by_the_worker(cfg: Settings, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.store import integrity

    _corrupted(cfg)
    monkeypatch.setattr(integrity, "CHECK_AT_OPEN_BYTES", 0)  # every file counts as large: open stays cheap
    with Store(cfg.db_path) as store:
        assert store.damage is None and store.checked_at is None
    app = make_app(None, cfg, static_dir=tmp_path / "static")
    with TestClient(app, base_url=BASE) as client:
        _wait(lambda: app.state.worker.phase == "ready", what="ready")
        _wait(lambda: client.get("/api/health").json()["store"]["state"] == "damaged", what="the background check")
        assert client.post("/api/memory/save", json={"project": "p", "text": "x"}).json()["error"] == "store_damaged"
