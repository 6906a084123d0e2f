"""Deletion marks travel with an export, and a merged project keeps the marks of the projects merged into it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcairn.cli.app import run
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.transfer.jsonl import export_to_file, import_jsonl
from memcairn.wire.config import load_settings

MS = 1_700_000_000_000


def _obs(title: str, project: str = "alpha", **kw: object) -> NewItem:
    return NewItem(project=project, kind="observation", type="discovery", title=title, narrative="n " + title, **kw)


def _marks(store: Store) -> set[tuple[str, str, str, int]]:
    return {tuple(r) for r in store._conn.execute(
        "SELECT p.name, f.content_hash, f.kind, f.forgotten_at_epoch FROM forgotten_items f "
        "JOIN projects p ON p.id = f.project_id")}


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- export and import of the marks ---------------------------------------------------------------
def test_a_store_restored_from_an_export_keeps_deleted_content_deleted(tmp_path: Path, store: Store) -> None:
    kept = store.add_item(_obs("Retry with jitter"))
    doomed = store.add_item(_obs("Use port 8080", source=("transcript", "t.jsonl", "1")))
    doomed_hash = store.get_item(doomed.id).content_hash
    store.delete_items([doomed.id])
    out = tmp_path / "e.jsonl"
    counts = export_to_file(store, out)

    records = _records(out)
    assert counts == {"projects": 1, "sessions": 0, "items": 1, "forgotten": 1}
    assert records[-1] == {"record": "end", **counts}
    assert [r["record"] for r in records] == ["header", "project", "item", "forgotten", "end"]
    mark = records[-2]
    assert (mark["project"], mark["content_hash"], mark["kind"]) == ("alpha", doomed_hash, "observation")
    assert mark["forgotten_at_epoch"] == next(iter(_marks(store)))[3]

    with Store(tmp_path / "restored.db") as restored:
        report = import_jsonl(restored, out)
        assert (report.items, report.forgotten_marks, report.forgotten_marks_skipped, report.malformed) == (1, 1, 0, 0)
        assert report.to_dict()["forgotten_marks"] == 1 and report.notes == []
        assert _marks(restored) == _marks(store)
        # the same transcript (or claude-mem database) replayed into the restored store: still deleted
        again = restored.add_item(_obs("Use port 8080", source=("transcript", "t.jsonl", "1")))
        assert again.forgotten and restored.count_items() == 1
        assert [i.uuid for i in restored.list_items()] == [store.get_item(kept.id).uuid]
        # an explicit save still brings it back
        assert restored.add_item(_obs("Use port 8080"), revive=True).created


def test_importing_the_same_marks_twice_adds_nothing(tmp_path: Path, store: Store) -> None:
    for title in ("one", "two", "three"):
        store.delete_items([store.add_item(_obs(title, project="beta" if title == "two" else "alpha")).id])
    out = tmp_path / "e.jsonl"
    export_to_file(store, out)
    with Store(tmp_path / "copy.db") as copy:
        first = import_jsonl(copy, out)
        assert (first.projects, first.forgotten_marks, first.existing) == (2, 3, 0)
        before = _marks(copy)
        again = import_jsonl(copy, out)
        assert (again.projects, again.forgotten_marks, again.forgotten_marks_skipped) == (0, 0, 0)
        assert again.existing == 2 + 3 and again.malformed == 0
        assert _marks(copy) == before == _marks(store)
    # into the store it came from: every mark is already there, and keeps its time
    report = import_jsonl(store, out)
    assert (report.forgotten_marks, report.existing) == (0, 5)


def test_a_mark_for_content_the_receiving_store_holds_is_skipped(tmp_path: Path, store: Store) -> None:
    store.delete_items([store.add_item(_obs("Cache keys are per user")).id])
    store.delete_items([store.add_item(_obs("Cache TTL is five minutes")).id])
    out = tmp_path / "e.jsonl"
    export_to_file(store, out)
    with Store(tmp_path / "other.db") as other:
        held = other.add_item(_obs("Cache keys are per user"))
        report = import_jsonl(other, out)
        assert (report.forgotten_marks, report.forgotten_marks_skipped, report.malformed) == (1, 1, 0)
        assert [i.id for i in other.list_items()] == [held.id]  # the receiving store's item stays
        marks = _marks(other)
        assert len(marks) == 1 and other.get_item(held.id).content_hash not in {m[1] for m in marks}
        assert other.add_item(_obs("Cache keys are per user")).id == held.id  # a plain duplicate, not refused
        assert other.add_item(_obs("Cache TTL is five minutes")).forgotten
        # importing it again skips it again and records nothing
        again = import_jsonl(other, out)
        assert (again.forgotten_marks, again.forgotten_marks_skipped, again.existing) == (0, 1, 2)


def test_an_export_without_marks_is_the_previous_format(tmp_path: Path, store: Store) -> None:
    store.add_item(_obs("Retry with jitter"))
    out = tmp_path / "e.jsonl"
    assert export_to_file(store, out) == {"projects": 1, "sessions": 0, "items": 1}
    records = _records(out)
    assert records[0]["version"] == 1
    assert records[-1] == {"record": "end", "projects": 1, "sessions": 0, "items": 1}
    assert "forgotten" not in {r["record"] for r in records}


def test_a_file_written_by_the_previous_release_imports_as_before(tmp_path: Path, store: Store) -> None:
    """Lines as the release without forgotten records wrote them: no forgotten records, three counts."""
    lines = [
        {"record": "header", "format": "memcairn-export", "version": 1, "exported_at": MS},
        {"record": "project", "name": "alpha", "merged_into_project": None, "created_at_epoch": MS},
        {"record": "item", "uuid": "6f1c7a52-2f6e-4c7e-9d1a-0a4b7f3e9c11", "project": "alpha", "session": None,
         "kind": "manual", "type": "note", "title": "Use WAL", "subtitle": None, "text": "SQLite runs in WAL mode",
         "narrative": None, "facts": [], "concepts": [], "files_read": [], "files_modified": [], "metadata": {},
         "request": None, "investigated": None, "learned": None, "completed": None, "next_steps": None,
         "notes": None, "prompt_number": None, "platform_source": None, "content_hash": "0123456789abcdef",
         "created_at_epoch": MS, "updated_at_epoch": MS, "sources": []},
        {"record": "end", "projects": 1, "sessions": 0, "items": 1},
    ]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    store.delete_items([store.add_item(_obs("Flaky test pinned")).id])
    marks = _marks(store)

    report = import_jsonl(store, old)
    assert (report.projects, report.items, report.existing, report.malformed) == (0, 1, 1, 0)
    assert (report.forgotten_marks, report.forgotten_marks_skipped, report.notes) == (0, 0, [])
    assert _marks(store) == marks  # the store's own marks are untouched
    assert store.list_items()[0].uuid == "6f1c7a52-2f6e-4c7e-9d1a-0a4b7f3e9c11"


def test_a_malformed_forgotten_record_is_reported_and_the_rest_imports(tmp_path: Path, store: Store) -> None:
    store.delete_items([store.add_item(_obs("Use port 8080")).id])
    out = tmp_path / "e.jsonl"
    export_to_file(store, out)
    lines = out.read_text(encoding="utf-8").splitlines()
    good = json.loads(lines[-2])
    bad = [{**good, "kind": "bogus"}, {**good, "content_hash": ""}, {**good, "forgotten_at_epoch": -1},
           {k: v for k, v in good.items() if k != "project"}]
    target = tmp_path / "bad.jsonl"
    target.write_text("\n".join([*lines[:-1], *(json.dumps(b) for b in bad), lines[-1]]) + "\n", encoding="utf-8")
    with Store(tmp_path / "copy.db") as copy:
        report = import_jsonl(copy, target)
        assert report.malformed == 4 and report.forgotten_marks == 1
        assert any("unknown kind" in e for e in report.errors)
        assert _marks(copy) == _marks(store)


def test_marks_are_exported_page_by_page_in_key_order(tmp_path: Path, store: Store) -> None:
    ids = [store.add_item(_obs(f"note {n}", project=("alpha", "beta")[n % 2])).id for n in range(7)]
    store.delete_items(ids)
    rows = list(store.export_forgotten(page_size=2))
    assert len(rows) == 7
    assert {(r["project"], r["content_hash"], r["kind"], r["forgotten_at_epoch"]) for r in rows} == _marks(store)
    keys = [(store._conn.execute("SELECT id FROM projects WHERE name = ?", (r["project"],)).fetchone()[0],
             r["content_hash"]) for r in rows]
    assert keys == sorted(keys)


# -- merged projects ------------------------------------------------------------------------------
def test_content_deleted_under_a_merged_project_is_not_stored_under_its_target(store: Store) -> None:
    store.delete_items([store.add_item(_obs("Token expiry uses UTC", project="old")).id])
    store.merge_project("old", "new")
    assert store.add_item(_obs("Token expiry uses UTC", project="new")).forgotten
    assert store.count_items() == 0
    # only projects merged into the item's project count: an unrelated project stores it
    assert store.add_item(_obs("Token expiry uses UTC", project="other")).created
    # and other content is stored under the target as ever
    assert store.add_item(_obs("Token expiry uses local time", project="new")).created


def test_marks_follow_a_chain_of_merges_in_either_order(store: Store) -> None:
    store.delete_items([store.add_item(_obs("first", project="a")).id])
    store.merge_project("a", "b")
    store.merge_project("b", "c")  # a -> b -> c
    assert store.add_item(_obs("first", project="c")).forgotten

    store.delete_items([store.add_item(_obs("second", project="x")).id])
    store.add_item(_obs("seed", project="y"))
    store.merge_project("y", "z")
    store.merge_project("x", "y")  # merged into y after y was merged into z: x -> y -> z
    assert store.add_item(_obs("second", project="z")).forgotten
    assert store.add_item(_obs("second", project="y")).forgotten


def test_content_deleted_under_the_old_name_after_a_merge_stays_deleted(store: Store) -> None:
    store.add_item(_obs("seed", project="old"))
    store.merge_project("old", "new")
    late = store.add_item(_obs("Captured under the old directory", project="old"))
    store.delete_items([late.id])
    assert store.add_item(_obs("Captured under the old directory", project="new")).forgotten


def test_a_merge_cycle_ends_the_lookup(store: Store) -> None:
    store.delete_items([store.add_item(_obs("loop", project="a")).id])
    store.add_item(_obs("seed", project="b"))
    store.merge_project("a", "b")
    store.merge_project("b", "a")
    assert store.add_item(_obs("loop", project="b")).forgotten
    assert store.add_item(_obs("loop", project="a")).forgotten


def test_a_save_or_an_edit_under_the_target_is_kept_as_a_plain_duplicate(store: Store) -> None:
    store.delete_items([store.add_item(_obs("Cache keys are per user", project="old")).id])
    store.delete_items([store.add_item(_obs("Cache keys are global", project="old")).id])
    store.merge_project("old", "new")

    saved = store.add_item(_obs("Cache keys are per user", project="new"), revive=True)
    assert saved.created
    again = store.add_item(_obs("Cache keys are per user", project="new"))
    assert (again.id, again.created, again.forgotten) == (saved.id, False, False)

    kept = store.add_item(_obs("Cache TTL is five minutes", project="new"))
    store.update_item(kept.id, title="Cache keys are global", narrative="n Cache keys are global")
    assert store.add_item(_obs("Cache keys are global", project="new")).id == kept.id


def test_a_merge_and_its_marks_restored_from_an_export_keep_content_deleted(tmp_path: Path, store: Store) -> None:
    store.delete_items([store.add_item(_obs("Use port 8080", project="old")).id])
    store.add_item(_obs("Retry with jitter", project="new"))
    store.merge_project("old", "new")
    out = tmp_path / "e.jsonl"
    export_to_file(store, out)
    with Store(tmp_path / "restored.db") as restored:
        import_jsonl(restored, out)
        assert restored.add_item(_obs("Use port 8080", project="new")).forgotten
        assert restored.count_items() == 1


def test_the_cli_says_how_many_marks_it_exported_and_recorded(tmp_path: Path, isolated_home: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with Store(load_settings().db_path) as home_store:
        kept = home_store.add_item(NewItem(project="alpha", kind="manual", text="kept")).id
        gone = home_store.add_item(NewItem(project="alpha", kind="manual", text="deleted")).id
        home_store.delete_items([gone])
    out = tmp_path / "backup.jsonl"
    assert run(["export", "--output", str(out)]) == 0
    assert "1 items and 1 deletion marks to" in capsys.readouterr().out
    assert run(["import", "jsonl", str(out)]) == 0  # into the same store: the mark is there already
    said = capsys.readouterr().out
    assert "deletion marks" not in said and kept
    with Store(load_settings().db_path) as home_store:
        home_store._conn.execute("DELETE FROM forgotten_items")
    assert run(["import", "jsonl", str(out)]) == 0
    assert "; 1 deletion marks recorded" in capsys.readouterr().out
