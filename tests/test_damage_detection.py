"""Damage that would answer wrongly in silence: a keyword index whose damaged blocks read as empty, a keyword
table dropped under a running worker, a page damaged while it runs. Real files, real worker processes."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memcairn.bench.damage import corrupt_page, damage_keyword_index, drop_keyword_table
from memcairn.bench.faults_harness import Worker, _env, _request
from memcairn.bench.hooks import free_port
from memcairn.core.errors import KeywordIndexDamagedError, StoreDamagedError
from memcairn.core.models import ItemFilter, NewItem
from memcairn.store import Store

pytestmark = pytest.mark.slow

# 200 rows, nine in ten holding "zebra": after damage_keyword_index(every_block=True) FTS5 reads the word's
# postings as empty, without an error (found by trying; the test asserts that it is so).
ROWS = 200


def _text(i: int) -> str:
    return f"fts-{i} zebra fault campaign text {i} about things" if i % 10 else f"other thing {i}"


def _zebras() -> set[int]:
    return {i + 1 for i in range(ROWS) if i % 10}


def _fill(store: Store) -> None:
    for i in range(ROWS):  # one transaction each, as the worker's saves: the index's blocks fall alike
        store.add_item(NewItem(project="p", kind="manual", text=_text(i)))


def _silently_empty(db: Path) -> None:
    """The damage is the silent kind: FTS5 itself answers the query with no row and no error."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT rowid FROM memory_items_fts WHERE memory_items_fts MATCH 'zebra'").fetchall() == []
    finally:
        conn.close()


def _wait(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def _running(home: Path, **env: str) -> Iterator[Worker]:
    port = free_port()
    worker = Worker(home, port, _env(home, port, MEMCAIRN_EMBEDDING_MODEL="hash", **env))
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def _health(worker: Worker) -> dict[str, Any]:
    return _request(worker.port, "GET", "/api/health")[1]["store"]


def _repaired(worker: Worker) -> bool:
    return any("rebuilt" in r for r in _health(worker)["repairs"])


# -- a keyword index that answers nothing ----------------------------------------------------------------
def test_a_damaged_index_that_answers_nothing_is_found_and_repaired(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    with Store(db) as store:
        _fill(store)
    damage_keyword_index(db, every_block=True)
    _silently_empty(db)
    with Store(db) as store:
        heard: list[str] = []
        store.add_damage_listener(lambda kind, _detail: heard.append(kind))
        with pytest.raises(KeywordIndexDamagedError, match="holds 'zebra'"):
            store.keyword_ids("zebra", limit=500)
        assert heard == ["keyword_damaged"]
        assert any("rebuilt the keyword index (memory" in r for r in store.repair_keyword_index())
        assert {i for i, _ in store.keyword_ids("zebra", limit=500)} == _zebras()
        assert store.keyword_disagreement is None


def test_a_healthy_search_that_finds_nothing_is_no_damage(tmp_path: Path) -> None:
    with Store(tmp_path / "h.db") as store:
        _fill(store)
        assert store.keyword_ids("okapi") == []  # in no row: the probe finds nothing to disagree with
        assert store.keyword_ids("zeb") == []  # a substring of a word is no FTS5 match
        assert {i for i, _ in store.keyword_ids("zebra", limit=500)} == _zebras()
        assert store.keyword_disagreement is None


def test_the_worker_answers_from_the_semantic_leg_and_repairs_the_index(tmp_path: Path) -> None:
    """Without the in-memory copy every keyword search reads FTS5 itself."""
    with _running(tmp_path, MEMCAIRN_VECTOR_BACKEND="sqlite-vec", MEMCAIRN_WORKER_KEYWORD_INDEX="0") as worker:
        for i in range(ROWS):
            assert _request(worker.port, "POST", "/api/memory/save", {"project": "p", "text": _text(i)})[0] == 200
        _wait(lambda: _request(worker.port, "GET", "/api/stats")[1]["mirror"]["lag"] == 0, what="the mirror")
        damage_keyword_index(tmp_path / "memcairn.db", every_block=True)
        _silently_empty(tmp_path / "memcairn.db")
        status, body = _request(worker.port, "GET", "/api/search?query=zebra&format=json&min_score=0&limit=100")
        assert status == 200
        assert body["fallback_reason"] == "keyword_index_damaged" and body["strategy"] == "semantic"
        assert body["results"]  # the semantic leg's
        _wait(lambda: _repaired(worker), what="the repair")
        assert _health(worker)["state"] == "ok"
        status, body = _request(worker.port, "GET", "/api/search?query=zebra&format=json&mode=keyword&min_score=0"
                                                    "&limit=100")
        assert body["fallback_reason"] is None and body["strategy"] == "keyword"
        assert len(body["results"]) == 100


def test_after_an_unclean_shutdown_the_worker_checks_the_keyword_index_at_once(tmp_path: Path) -> None:
    db = tmp_path / "memcairn.db"
    port = free_port()
    worker = Worker(tmp_path, port, _env(tmp_path, port, MEMCAIRN_EMBEDDING_MODEL="hash"))
    worker.start()
    try:
        with Store(db) as store:
            _fill(store)
        worker.kill()  # SIGKILL: no clean stop
        damage_keyword_index(db, every_block=True)
        worker.start()
        # No search and no idle time needed: the first pass after an unclean stop runs FTS5's own check.
        _wait(lambda: _repaired(worker), what="the repair after the unclean stop")
        status, body = _request(port, "GET", "/api/search?query=zebra&format=json&mode=keyword&min_score=0"
                                             "&limit=100")
        assert status == 200 and body["fallback_reason"] is None and len(body["results"]) == 100
    finally:
        worker.stop()
    assert not (tmp_path / "memcairn.db.upkeep").exists()  # a clean stop leaves no marker


# -- the keyword table dropped while the worker runs -----------------------------------------------------
def test_a_save_and_a_hook_event_succeed_after_the_keyword_table_was_dropped(tmp_path: Path) -> None:
    from memcairn.bench.faults_harness import _event

    with _running(tmp_path) as worker:
        assert _request(worker.port, "POST", "/api/memory/save", {"project": "p", "text": "zebra one"})[0] == 200
        drop_keyword_table(tmp_path / "memcairn.db")
        status, body = _request(worker.port, "POST", "/api/memory/save", {"project": "p", "text": "zebra two"})
        assert status == 200 and body["id"], body
        drop_keyword_table(tmp_path / "memcairn.db")
        assert _request(worker.port, "POST", "/api/sessions/observations", _event(1, "drop"))[0] == 202
        worker.drain()
        _, stats = _request(worker.port, "GET", "/api/stats")
        assert stats["ingest"]["failed"] == 0 and stats["ingest"]["done"] >= 1
        status, body = _request(worker.port, "GET", "/api/search?query=zebra&format=json&mode=keyword&min_score=0")
        assert body["fallback_reason"] is None and len(body["results"]) == 2
    with Store(tmp_path / "memcairn.db") as store:
        assert store.missing_triggers() == [] and store.fts_integrity_ok()


def test_store_writes_recreate_a_keyword_table_dropped_under_them(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with Store(db) as store:
        first = store.add_item(NewItem(project="p", kind="manual", text="zebra first")).id
        drop_keyword_table(db)
        store.add_item(NewItem(project="p", kind="manual", text="zebra second"))
        drop_keyword_table(db)
        store.update_item(first, text="zebra edited")
        drop_keyword_table(db)
        assert store.delete_items([first]) == [first]
        assert [store.get_item(i).text for i, _ in store.keyword_ids("zebra")] == ["zebra second"]


# -- a page damaged while the worker runs ----------------------------------------------------------------
def test_reported_damage_makes_the_next_write_check_the_file(tmp_path: Path) -> None:
    """No timer and no upkeep thread: the error a read met is enough to refuse the next write."""
    db = tmp_path / "c.db"
    with Store(db) as store:
        store.add_items([NewItem(project="p", kind="manual", text=f"row {i} " + "words " * 150) for i in range(60)])
        assert store.damage is None
        corrupt_page(db)
        with pytest.raises(sqlite3.DatabaseError) as met:
            store.list_items(ItemFilter(), order="oldest", limit=100)
        assert store.note_error(met.value) == "corrupt"  # what the worker does with an error a route met
        with pytest.raises(StoreDamagedError, match="refuses to write"):
            store.add_item(NewItem(project="p", kind="manual", text="not into a damaged file"))
        assert store.damage is not None


@pytest.mark.parametrize("code", [sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT])
def test_io_errors_and_a_file_that_is_no_database_count_as_damage(code: int) -> None:
    from memcairn.store.db import error_kind

    exc = sqlite3.DatabaseError("error")
    exc.sqlite_errorcode = code | (3 << 8)  # an extended code, as SQLite gives them
    assert error_kind(exc) == "corrupt"


def test_the_worker_refuses_saves_once_a_read_met_a_damaged_page(tmp_path: Path) -> None:
    with _running(tmp_path) as worker:
        for n in range(60):
            assert _request(worker.port, "POST", "/api/memory/save",
                            {"project": "p", "text": f"row {n} " + "words " * 150})[0] == 200
        corrupt_page(tmp_path / "memcairn.db")
        status, body = _request(worker.port, "GET", "/api/search?format=json&orderBy=oldest&limit=100")
        assert status == 500 and body["error"] == "store_damaged"
        status, body = _request(worker.port, "POST", "/api/memory/save", {"project": "p", "text": "after"})
        assert status == 500 and body["error"] == "store_damaged" and "refuses to write" in body["detail"]
        assert _health(worker)["state"] == "damaged"
