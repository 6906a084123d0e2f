"""A memory's anchors (what it rests on): stored and read back, edited, exported and imported, written and read
over the worker's HTTP API, and never searched or embedded."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from memcairn.core.models import NewItem
from memcairn.mirror.documents import documents_for
from memcairn.store.items import Store
from memcairn.store.migrations import MIGRATIONS, migrate
from memcairn.transfer.jsonl import export_to_file, import_jsonl

ANCHORS: dict[str, Any] = {"files": [{"path": "src/db.py", "sha256": "9f2c"}], "identifiers": ["zanzibarfn"],
                           "commit": "4e1d2a", "branch": "main"}


def _note(text: str = "SQLite runs in WAL mode", **changes: Any) -> NewItem:
    return NewItem(project="demo", kind="manual", title="WAL mode", text=text, **changes)


def test_a_store_keeps_anchors_and_an_edit_changes_them(store: Store) -> None:
    item_id = store.add_item(_note(anchors=ANCHORS)).id
    assert store.get_item(item_id).anchors == ANCHORS
    assert store.add_item(_note(text="no anchors")).id and store.list_items()[0].anchors == {}
    assert store.update_item(item_id, anchors={"commit": "77aa"}).anchors == {"commit": "77aa"}


def test_anchors_are_neither_searched_nor_embedded(store: Store) -> None:
    item = store.get_item(store.add_item(_note(anchors=ANCHORS)).id)
    assert store.keyword_search("zanzibarfn") == []
    assert store.keyword_search("WAL")
    assert not any("zanzibarfn" in d.text for d in documents_for(item))


def test_an_item_stored_before_anchors_reads_back_without_any(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, path, [m for m in MIGRATIONS if m.version < 17])
    conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (1, 'demo', 0)")
    conn.execute("INSERT INTO memory_items(uuid, project_id, kind, type, text, content_hash, created_at_epoch, "
                 "updated_at_epoch) VALUES ('u1', 1, 'manual', 'note', 'older memory', 'h1', 0, 0)")
    conn.close()
    store = Store(path)
    try:
        assert [(i.text, i.anchors) for i in store.list_items()] == [("older memory", {})]
    finally:
        store.close()


def test_anchors_survive_an_export_and_an_import(store: Store, tmp_path: Path) -> None:
    store.add_item(_note(anchors=ANCHORS))
    store.add_item(_note(text="no anchors"))
    export_to_file(store, tmp_path / "out.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["anchors"] for r in lines if r["record"] == "item"] == [ANCHORS, {}]
    other = Store(tmp_path / "other.db")
    try:
        report = import_jsonl(other, tmp_path / "out.jsonl")
        assert (report.items, report.malformed) == (2, 0)
        assert sorted((i.text, str(i.anchors)) for i in other.list_items()) == sorted(
            (i.text, str(i.anchors)) for i in store.list_items())
    finally:
        other.close()


def test_the_worker_saves_and_answers_anchors(client: TestClient) -> None:
    body = {"project": "demo", "text": "SQLite runs in WAL mode",
            "anchors": {**ANCHORS, "note": "<private>for Alice</private> checked"}}
    saved = client.post("/api/memory/save", json=body)
    assert saved.status_code == 200, saved.text
    item_id = saved.json()["id"]
    item = client.get(f"/api/memory/{item_id}").json()
    assert item["anchors"] == {**ANCHORS, "note": "checked"}
    batch = client.post("/api/observations/batch", json={"ids": [item_id]}).json()
    assert batch["items"][0]["anchors"] == item["anchors"]
    bad = client.post("/api/memory/save", json={"text": "x", "anchors": ["src/db.py"]})
    assert bad.status_code == 400 and "anchors must be a JSON object" in bad.json()["detail"]
    schemas = client.get("/openapi.json").json()
    assert schemas["components"]["schemas"]["MemoryItem"]["properties"]["anchors"]["type"] == "object"
    save_body = schemas["paths"]["/api/memory/save"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert save_body["properties"]["anchors"]["type"] == ["object", "null"]
