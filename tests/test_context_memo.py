"""The memo of rendered SessionStart contexts (memcairn.context.memo), on real SQLite files: a hit is
byte-identical to a fresh render, and any commit to the database (this store, another connection, another
process) or a new minute makes the next answer a fresh render."""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from memcairn.context.build import render_context
from memcairn.context.memo import MEMO, RENDERED, ContextMemo
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire.config import Settings

MINUTE = 60_000
NOW = int(datetime(2026, 12, 3, 14, 0, 20, tzinfo=UTC).timestamp() * 1000)  # 14:00:20 UTC


def settings(tmp_path: Path, **overrides: object) -> Settings:
    return dataclasses.replace(Settings(home=tmp_path), **overrides)


def put(store: Store, title: str, project: str = "webapp", **fields: Any) -> int:
    fields.setdefault("kind", "observation")
    fields.setdefault("created_at_epoch", NOW - 60 * MINUTE)
    return store.add_item(NewItem(project=project, title=title, **fields)).id


@pytest.fixture
def filled(store: Store) -> Store:
    put(store, "Parser handles tabs", type="bugfix", platform_source="claude-code", session="s1")
    put(store, "Build runs in parallel", type="feature", platform_source="codex", session="s2")
    store.add_item(NewItem(project="webapp", kind="summary", session="s1", request="Fix the parser",
                           completed="tabs handled", created_at_epoch=NOW - 30 * MINUTE))
    put(store, "Invoices keep UTC timestamps", project="billing", type="decision")
    return store


@pytest.fixture
def memo(filled: Store) -> Any:
    m = ContextMemo.for_store(filled)
    yield m
    m.close()


def ask(memo: ContextMemo, store: Store, cfg: Settings, **kwargs: Any) -> tuple[str, str]:
    kwargs.setdefault("projects", ["webapp"])
    kwargs.setdefault("now_ms", NOW)
    kwargs.setdefault("tz", UTC)
    answer = memo.render(store, cfg, **kwargs)
    return answer.text, answer.source


def fresh(store: Store, cfg: Settings, **kwargs: Any) -> str:
    kwargs.setdefault("projects", ["webapp"])
    kwargs.setdefault("now_ms", NOW)
    kwargs.setdefault("tz", UTC)
    return render_context(store, cfg, **kwargs)


def test_a_hit_is_byte_identical_to_a_fresh_render(filled: Store, memo: ContextMemo, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    assert memo.enabled
    first, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Parser handles tabs" in first
    later_in_the_minute = NOW + 39_000  # 14:00:59
    again, how = ask(memo, filled, cfg, now_ms=later_in_the_minute)
    assert how == MEMO
    assert again == first == fresh(filled, cfg, now_ms=later_in_the_minute)
    assert (memo.hits, memo.misses) == (1, 1)


def test_fresh_skips_the_lookup_but_keeps_the_text(filled: Store, memo: ContextMemo, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    first, _ = ask(memo, filled, cfg)
    text, how = ask(memo, filled, cfg, fresh=True)
    assert (text, how) == (first, RENDERED)
    assert ask(memo, filled, cfg)[1] == MEMO and len(memo) == 1


def test_a_write_through_the_store_makes_the_next_call_a_miss(filled: Store, memo: ContextMemo,
                                                            tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    ask(memo, filled, cfg)
    assert ask(memo, filled, cfg)[1] == MEMO
    put(filled, "Cache writer no longer races", type="bugfix")
    text, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Cache writer no longer races" in text
    assert text == fresh(filled, cfg)
    filled.add_items([NewItem(project="webapp", kind="manual", title="Release on Tuesdays", text="by hand",
                              created_at_epoch=NOW - MINUTE)])
    text, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Release on Tuesdays" in text


def test_a_write_from_another_connection_or_process_invalidates(filled: Store, memo: ContextMemo,
                                                               tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    ask(memo, filled, cfg)
    other = Store(filled.path)  # a second Store (its own connections) on the same file
    try:
        put(other, "Written by another store", type="change")
    finally:
        other.close()
    text, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Written by another store" in text
    assert ask(memo, filled, cfg)[1] == MEMO

    script = ("import sys; from memcairn.store import Store; from memcairn.core.models import NewItem\n"
              "s = Store(sys.argv[1]); s.add_item(NewItem(project='webapp', kind='observation', "
              f"title='Written by another process', type='change', created_at_epoch={NOW - MINUTE})); s.close()")
    subprocess.run([sys.executable, "-c", script, str(filled.path)], check=True, timeout=60)
    text, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Written by another process" in text

    raw = sqlite3.connect(filled.path)  # a plain connection; a commit that touches no memory counts too
    with raw:
        raw.execute("UPDATE memory_items SET title = 'Renamed by hand' WHERE title = 'Parser handles tabs'")
    raw.close()
    text, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Renamed by hand" in text and "Parser handles tabs" not in text


def test_a_merge_by_another_process_is_not_served_stale(filled: Store, memo: ContextMemo, tmp_path: Path) -> None:
    """A Store reads the projects table at most once a second, so a render just after another process merged
    a project still sees it unmerged; that text must not outlive the store's next read of the table."""
    from memcairn.store.projects import PROJECTS_TTL

    cfg = settings(tmp_path)
    assert "Invoices keep UTC timestamps" not in ask(memo, filled, cfg)[0]
    other = Store(filled.path)
    try:
        other.merge_project("billing", "webapp")
    finally:
        other.close()
    ask(memo, filled, cfg)  # may still be rendered with the table read before the merge
    time.sleep(PROJECTS_TTL + 0.1)
    text, _ = ask(memo, filled, cfg)
    assert "Invoices keep UTC timestamps" in text and text == fresh(filled, cfg)


def test_a_delete_invalidates(filled: Store, memo: ContextMemo, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    doomed = put(filled, "Soon deleted", type="note")
    assert "Soon deleted" in ask(memo, filled, cfg)[0]
    filled.delete_items([doomed])
    text, how = ask(memo, filled, cfg)
    assert how == RENDERED and "Soon deleted" not in text and text == fresh(filled, cfg)


@pytest.mark.parametrize("change", [
    {"projects": ["billing"]}, {"projects": ["webapp", "billing"]}, {"projects": None}, {"colors": True},
    {"full": True}, {"platform_source": "codex"}, {"tz": timezone(timedelta(hours=2))},
])
def test_each_parameter_has_its_own_entry(filled: Store, memo: ContextMemo, tmp_path: Path,
                                          change: dict[str, Any]) -> None:
    cfg = settings(tmp_path, context_observations=1)  # so that full shows more
    base, _ = ask(memo, filled, cfg)
    text, how = ask(memo, filled, cfg, **change)
    assert how == RENDERED and text != base and text == fresh(filled, cfg, **change)
    assert ask(memo, filled, cfg, **change) == (text, MEMO)
    assert ask(memo, filled, cfg) == (base, MEMO)


def test_the_settings_that_shape_the_text_are_part_of_the_key(filled: Store, memo: ContextMemo,
                                                             tmp_path: Path) -> None:
    base, _ = ask(memo, filled, settings(tmp_path))
    for changed in (settings(tmp_path, context_observations=1), settings(tmp_path, context_types="feature"),
                    settings(tmp_path, context_summaries=0), settings(tmp_path, context_token_budget=80)):
        text, how = ask(memo, filled, changed)
        assert how == RENDERED and text != base and text == fresh(filled, changed)
    assert ask(memo, filled, settings(tmp_path, port=1234)) == (base, MEMO)  # not a context setting


def test_a_new_minute_is_served_restamped_byte_identical_to_a_render(filled: Store, memo: ContextMemo,
                                                                     tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    first, _ = ask(memo, filled, cfg)
    assert "2026-12-03 14:00 UTC" in first
    for later in (NOW + 40_000, NOW + 99_000, NOW + 3 * 3_600_000 + 5 * MINUTE):  # 14:01, 14:01, 17:05
        text, how = ask(memo, filled, cfg, now_ms=later)
        assert how == MEMO and text == fresh(filled, cfg, now_ms=later)
    assert "2026-12-03 17:05 UTC" in text and "14:00 UTC" not in text.splitlines()[1]
    colored, _ = ask(memo, filled, cfg, colors=True)
    again, how = ask(memo, filled, cfg, colors=True, now_ms=NOW + 7 * MINUTE)
    assert how == MEMO and again == fresh(filled, cfg, colors=True, now_ms=NOW + 7 * MINUTE) != colored


def test_restamping_needs_the_clock_in_the_header() -> None:
    from memcairn.context.clock import restamp

    text = "<memory>\n# memcairn memory · p · 2026-12-03 14:00 UTC\nrow 14:00 UTC\n</memory>\n"
    assert restamp(text, "2026-12-03 14:00 UTC", "2026-12-03 14:07 UTC") == text.replace(
        "p · 2026-12-03 14:00", "p · 2026-12-03 14:07")
    assert restamp(text, "2026-12-03 14:00 UTC", "2026-12-03 14:00 UTC") is text
    assert restamp(text, "2026-12-03 14:00 UTC", "2026-12-03 14:07 CEST") is None  # another width
    assert restamp(text, "2026-12-03 13:00 UTC", "2026-12-03 14:07 UTC") is None  # not this text's clock
    assert restamp("memcairn: no memories yet for p", "2026-12-03 14:00 UTC", "2026-12-03 14:07 UTC") == (
        "memcairn: no memories yet for p")


def test_notices_bypass_the_memo_and_are_shown(filled: Store, memo: ContextMemo, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    plain, _ = ask(memo, filled, cfg)
    text, how = ask(memo, filled, cfg, notices=["model backend unreachable"])
    assert how == RENDERED and text.startswith("memcairn notice: model backend unreachable")
    assert text == fresh(filled, cfg, notices=["model backend unreachable"])
    assert ask(memo, filled, cfg) == (plain, MEMO)  # the noticed text was not kept
    assert memo.bypassed == 1


def test_the_memo_is_bounded(filled: Store, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    memo = ContextMemo.for_store(filled, capacity=3)
    try:
        def key(n: int) -> dict[str, Any]:  # five different requests
            return {"projects": ["alpha"] if n % 2 else None, "colors": n >= 2, "full": n >= 4}

        for n in range(5):
            ask(memo, filled, cfg, **key(n))
        assert len(memo) == 3
        assert ask(memo, filled, cfg, **key(4))[1] == MEMO  # newest kept
        assert ask(memo, filled, cfg, **key(0))[1] == RENDERED  # oldest dropped
        ask(memo, filled, cfg, **key(2))  # used: kept over 3
        ask(memo, filled, cfg, full=True, projects=["alpha"])
        assert ask(memo, filled, cfg, **key(2))[1] == MEMO
        assert ask(memo, filled, cfg, **key(3))[1] == RENDERED
    finally:
        memo.close()
    small = ContextMemo.for_store(filled, max_chars=1)  # no text fits: always rendered, nothing kept
    try:
        assert [ask(small, filled, cfg)[1] for _ in range(2)] == [RENDERED, RENDERED] and len(small) == 0
    finally:
        small.close()


def test_an_in_memory_store_bypasses_the_memo(mem_store: Store, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    put(mem_store, "Kept in memory only")
    memo = ContextMemo.for_store(mem_store)
    assert not memo.enabled and memo.version() is None
    answers = [ask(memo, mem_store, cfg) for _ in range(2)]
    assert [a[1] for a in answers] == [RENDERED, RENDERED] and "Kept in memory only" in answers[0][0]
    assert len(memo) == 0 and memo.bypassed == 2


def test_a_file_that_cannot_be_opened_bypasses_the_memo(filled: Store, tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    for path in (tmp_path / "missing" / "store.db", tmp_path):  # absent; a directory
        memo = ContextMemo(path)
        assert not memo.enabled
        assert [ask(memo, filled, cfg)[1] for _ in range(2)] == [RENDERED, RENDERED]
    closed = ContextMemo.for_store(filled)
    closed.close()
    assert ask(closed, filled, cfg)[1] == RENDERED


def test_the_memo_never_writes(filled: Store, memo: ContextMemo, tmp_path: Path) -> None:
    ask(memo, filled, settings(tmp_path))
    with pytest.raises(sqlite3.OperationalError):
        memo._conn.execute("CREATE TABLE nope (x)")  # read-only connection


def test_the_route_takes_the_caller_s_zone_whole_project_names_and_a_lower_budget(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import time

    from starlette.testclient import TestClient

    from memcairn.wire.config import load_settings
    from memcairn.worker.app import make_app

    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    app = make_app(None, load_settings(), static_dir=tmp_path / "static")
    with TestClient(app, base_url="http://127.0.0.1:37877") as client:
        while app.state.worker.phase == "starting":
            time.sleep(0.01)
        store = app.state.worker.runtime.store
        late = int(datetime(2026, 12, 1, 20, 30, tzinfo=UTC).timestamp() * 1000)
        for project in ("a,b", "a", "b"):
            put(store, f"Work in {project} " + "x" * 300, project=project, created_at_epoch=late)

        def get(**params: str) -> str:
            response = client.get("/api/context/inject", params=params)
            assert response.status_code == 200, response.text
            return response.text

        tokyo, utc = get(project="a,b", tz="Asia/Tokyo"), get(project="a,b", tz="UTC")
        assert "### 2026-12-02\n" in tokyo and " 05:30 " in tokyo and "### 2026-12-01\n" in utc
        assert "Work in a,b" in tokyo and "Work in a " not in tokyo and "Work in b " not in tokyo
        assert "Work in a " in get(projects="a,b")  # the list form still splits on commas
        small = get(project="a,b", tz="UTC", maxTokens="100")
        assert len(small) <= 400 and "Work in a,b" not in small
        assert get(project="a,b", tz="UTC", maxTokens="1000000") == utc  # a lower budget only, never higher
        for bad in ({"tz": "Mars/Olympus"}, {"maxTokens": "many"}, {"maxTokens": "0"}, {"maxTokens": ""}):
            assert client.get("/api/context/inject", params=bad).status_code == 400
