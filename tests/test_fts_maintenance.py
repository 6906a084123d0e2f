from __future__ import annotations

from pathlib import Path

from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.store.doctor import run_checks
from memcairn.wire.config import load_settings


def _fill(store: Store, n: int = 5) -> list[int]:
    return [store.add_item(NewItem(project="p", kind="manual", title=f"note {i}", text=f"body {i} zebra")).id
            for i in range(n)]


def test_drift_after_rows_deleted_behind_the_triggers_back_heals_on_open(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with Store(path) as store:
        ids = _fill(store)
        conn = store._conn
        conn.execute("DROP TRIGGER memory_items_ad")
        conn.execute("DELETE FROM memory_items WHERE id IN (?, ?)", (ids[0], ids[1]))
        items, indexed = store.fts_counts()
        assert (items, indexed) == (3, 5)
        from memcairn.store.db import run_script
        from memcairn.store.schema import FTS_TRIGGERS

        run_script(conn, FTS_TRIGGERS)
    with Store(path) as store:  # the drift check on open rebuilds the index
        assert store.fts_counts() == (3, 3)
        assert len(store.keyword_search("zebra", limit=50)) == 3
        assert store.fts_integrity_ok()


def test_doctor_fix_catches_equal_counts_with_wrong_content(tmp_path: Path) -> None:
    cfg = load_settings()
    with Store(cfg.db_path) as store:
        ids = _fill(store)
        conn = store._conn
        conn.execute("DROP TRIGGER memory_items_au")
        conn.execute("UPDATE memory_items SET text = 'giraffe' WHERE id = ?", (ids[0],))
        assert store.fts_counts() == (5, 5)  # a count cannot see this
    report = run_checks(cfg)
    assert not report["healthy"]
    fixed = run_checks(cfg, fix=True)
    assert fixed["healthy"] and any(c["status"] == "fixed" for c in fixed["checks"])
    with Store(cfg.db_path) as store:
        assert [i.id for i, _ in store.keyword_search("giraffe")] == [ids[0]]
    after = run_checks(cfg)
    assert after["healthy"], after  # the dropped trigger was recreated by --fix too
    with Store(cfg.db_path) as store:
        assert store.missing_triggers() == []
