from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcairn.core.errors import NotFoundError, SchemaTooNewError, StoreError, ValidationError
from memcairn.core.models import AddResult, ItemFilter, NewItem
from memcairn.store import Store
from memcairn.store.item_writes import content_hash
from memcairn.store.validation import MAX_FIELD_BYTES, validate_item


def obs(title: str, narrative: str = "", project: str = "alpha", **kw) -> NewItem:
    return NewItem(project=project, kind="observation", type=kw.pop("type", "discovery"), title=title,
                   narrative=narrative, **kw)


def test_duplicate_content_is_stored_once_and_returns_the_same_id(store: Store) -> None:
    first = store.add_item(obs("Fix login", "expiry in UTC", session="s1", platform_source="claude-code"))
    again = store.add_item(obs("Fix login", "expiry in UTC", session="s1", platform_source="claude-code"))
    assert first.created and not again.created
    assert again.id == first.id
    assert store.stats()["items"] == 1


def test_same_content_in_another_session_is_a_separate_memory(store: Store) -> None:
    a = store.add_item(obs("Fix login", "x", session="s1"))
    b = store.add_item(obs("Fix login", "x", session="s2"))
    assert a.id != b.id


def test_items_without_a_session_dedupe_within_their_project(store: Store) -> None:
    a = store.add_item(obs("Note", "same"))
    b = store.add_item(obs("Note", "same"))
    c = store.add_item(obs("Note", "same", project="beta"))
    assert a.id == b.id and c.id != a.id


def test_content_hash_is_sixteen_hex_chars_and_separates_fields() -> None:
    h1 = content_hash(obs("ab", "c"))
    h2 = content_hash(obs("a", "bc"))
    assert len(h1) == 16 and int(h1, 16) >= 0
    assert h1 != h2


_items = st.builds(
    lambda t, n, s: obs(t, n, session=s),
    st.text(min_size=1, max_size=20),
    st.text(max_size=30),
    st.sampled_from([None, "s1", "s2"]),
)


def _storable(item: NewItem) -> bool:
    try:
        validate_item(item)
    except ValidationError:
        return False
    return True


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(_items, min_size=1, max_size=12), seed=st.randoms())
def test_replaying_items_in_any_order_never_duplicates(items: list[NewItem], seed) -> None:
    with Store(":memory:") as s:
        items = [i for i in items if _storable(i)]  # what the store refuses (no content once cleaned) is not replayed
        if not items:
            return
        first = s.add_items(items)
        shuffled = list(items)
        seed.shuffle(shuffled)
        second = s.add_items(shuffled)
        ids_by_hash = {content_hash(i): r.id for i, r in zip(items, first, strict=True)}
        assert all(ids_by_hash[content_hash(i)] == r.id for i, r in zip(shuffled, second, strict=True))
        assert not any(r.created for r in second)
        assert s.stats()["items"] == len(ids_by_hash)


def test_batch_insert_is_one_transaction(store: Store) -> None:
    good = obs("good one", "fine")
    bad = NewItem(project="alpha", kind="observation", title="x", facts="not a list")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        store.add_items([good, bad])
    assert store.stats()["items"] == 0


def test_get_items_returns_the_order_asked_and_skips_unknown_ids(store: Store) -> None:
    ids = [r.id for r in store.add_items([obs(f"item {i}") for i in range(5)])]
    got = store.get_items([ids[3], 999, ids[0], ids[3]])
    assert [i.id for i in got] == [ids[3], ids[0]]
    with pytest.raises(NotFoundError):
        store.get_item(999)


def test_json_columns_round_trip_and_bad_json_never_breaks_a_read(store: Store) -> None:
    r = store.add_item(obs("t", "n", facts=["a", "b"], concepts=["how-it-works"], metadata={"k": 1}))
    item = store.get_item(r.id)
    assert item.facts == ["a", "b"] and item.metadata == {"k": 1}
    store._conn.execute(
        "UPDATE memory_items SET facts = '{broken', concepts = '[oops', metadata = 'nope' WHERE id = ?", (r.id,)
    )
    item = store.get_item(r.id)
    assert item.facts == ["{broken"] and item.metadata == {"_raw": "nope"}
    assert store.list_items(ItemFilter(concepts=["how-it-works"])) == []


def test_fts_follows_inserts_updates_and_deletes(store: Store) -> None:
    r = store.add_item(obs("Parser rewrite", "tokenizer handles unicode"))
    assert [i.id for i, _ in store.keyword_search("tokenizer")] == [r.id]
    store.update_item(r.id, narrative="lexer handles emoji")
    assert store.keyword_search("tokenizer") == []
    assert [i.id for i, _ in store.keyword_search("emoji")] == [r.id]
    store.delete_items([r.id])
    assert store.keyword_search("emoji") == []
    assert store.fts_integrity_ok()


def test_porter_stemming_lets_running_find_run(store: Store) -> None:
    r = store.add_item(obs("How to run the suite", "pytest -q"))
    assert [i.id for i, _ in store.keyword_search("running")] == [r.id]


def test_multi_word_query_is_not_phrase_only(store: Store) -> None:
    a = store.add_item(obs("Worker crashed on startup", "port already in use"))
    b = store.add_item(obs("Cache eviction", "LRU with a port of the old code"))
    hits = [i.id for i, _ in store.keyword_search("startup port conflict")]
    assert hits[0] == a.id and b.id in hits


@pytest.mark.parametrize("text", ['"', "*", "NEAR(a b)", "title:x", "a AND", "(", ")", "-x", "^", "'", "AND OR NOT",
                                  '""""', "\x00", "col:\"", "a*b", "🙂", ""])
def test_fts_syntax_in_a_query_is_just_text(store: Store, text: str) -> None:
    store.add_item(obs("title x near", "a and b"))
    store.keyword_search(text)  # must not raise


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_no_input_string_surfaces_as_an_sqlite_error(mem_store: Store, text: str) -> None:
    mem_store.keyword_search(text, ItemFilter(projects=[text or "p"], files=[text], concepts=[text]))


def test_filters_by_kind_type_concept_file_date_platform(store: Store) -> None:
    a = store.add_item(obs("A", "x", type="bugfix", concepts=["gotcha"], files_modified=["src/app.py"],
                           created_at_epoch=1_000, platform_source="codex", session="s", ))
    b = store.add_item(NewItem(project="alpha", kind="summary", title="B", learned="y", created_at_epoch=5_000))
    ids = lambda flt: {i.id for i in store.list_items(flt)}  # noqa: E731
    assert ids(ItemFilter(kinds=["summary"])) == {b.id}
    assert ids(ItemFilter(types=["bugfix"])) == {a.id}
    assert ids(ItemFilter(concepts=["gotcha"])) == {a.id}
    assert ids(ItemFilter(files=["app.py"])) == {a.id}
    assert ids(ItemFilter(date_start=2_000)) == {b.id}
    assert ids(ItemFilter(date_end=2_000)) == {a.id}
    assert ids(ItemFilter(platform_source="codex")) == {a.id}
    assert [i.id for i in store.list_items(order="oldest")] == [a.id, b.id]
    assert [i.id for i in store.list_items(order="newest")] == [b.id, a.id]
    assert [i.id for i in store.list_items(limit=1, offset=1)] == [a.id]


def test_a_merged_project_still_finds_its_memories(store: Store) -> None:
    old = store.add_item(obs("legacy note", "from the old name", project="old-name"))
    new = store.add_item(obs("fresh note", "new name", project="new-name"))
    store.merge_project("old-name", "new-name")
    found = {i.id for i in store.list_items(ItemFilter(projects=["new-name"]))}
    assert found == {old.id, new.id}
    assert [i.id for i, _ in store.keyword_search("legacy", ItemFilter(projects=["new-name"]))] == [old.id]
    assert {i.id for i in store.list_items(ItemFilter(projects=["old-name"]))} == {old.id}


def test_neighbours_in_time_of_an_item(store: Store) -> None:
    ids = [store.add_item(obs(f"step {i}", created_at_epoch=1000 + i)).id for i in range(10)]
    before, after = store.neighbours(1005, before=2, after=3, anchor_id=ids[5])
    assert [i.id for i in before] == ids[3:5]
    assert [i.id for i in after] == ids[5:8]
    before, after = store.neighbours(1000, before=5, after=2, anchor_id=ids[0])
    assert before == [] and [i.id for i in after] == ids[0:2]


def test_integrity_trigger_rejects_an_item_in_another_projects_session(store: Store) -> None:
    store.add_item(obs("in alpha", session="shared", platform_source="claude-code"))
    with pytest.raises(ValidationError, match="must belong"):
        store.add_item(obs("in beta", project="beta", session="shared", platform_source="claude-code"))
    with pytest.raises(sqlite3.IntegrityError, match="must belong"):
        beta = store._conn.execute("INSERT INTO projects(name, created_at_epoch) VALUES ('gamma', 0) RETURNING id")
        pid = beta.fetchone()[0]
        store._conn.execute(
            "INSERT INTO memory_items(uuid, project_id, session_id, kind, type, content_hash, created_at_epoch, "
            "updated_at_epoch) VALUES ('u', ?, 1, 'manual', 'note', 'h', 0, 0)", (pid,))


def test_integrity_trigger_rejects_moving_a_session_that_has_items(store: Store) -> None:
    beta = store._conn.execute("INSERT INTO projects(name, created_at_epoch) VALUES ('beta', 0) RETURNING id")
    pid = beta.fetchone()[0]
    move = "UPDATE sessions SET project_id = ? WHERE platform_source = 'claude-code' AND agent_session_id = ?"
    store.ensure_session("empty", "alpha", "claude-code")
    store._conn.execute(move, (pid, "empty"))  # no items yet: allowed
    store.add_item(obs("x", session="busy", platform_source="claude-code"))
    with pytest.raises(sqlite3.IntegrityError):
        store._conn.execute(move, (pid, "busy"))


def test_sources_make_an_import_idempotent(store: Store) -> None:
    item = obs("imported", "n", source=("claude-mem", "observations", "42"))
    a = store.add_item(item)
    b = store.add_item(obs("imported but edited", "n2", source=("claude-mem", "observations", "42")))
    assert a.created and not b.created and a.id == b.id


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (NewItem(project="p", kind="bogus", title="x"), "unknown kind"),
        (NewItem(project="p", kind="observation", type="Bad Type!", title="x"), "type"),
        (NewItem(project="p", kind="observation", title="x", facts="abc"), "facts must be a list"),  # type: ignore
        (NewItem(project="p", kind="observation", title="x", facts=[1, 2]), "facts must be a list"),  # type: ignore
        (NewItem(project="p", kind="observation", title="x" * (MAX_FIELD_BYTES + 1)), "256 KiB"),
        (NewItem(project="", kind="observation", title="x"), "project is required"),
        (NewItem(project="p", kind="observation"), "needs some content"),
        (NewItem(project="p", kind="observation", title="x", metadata=[]), "metadata"),  # type: ignore
        (NewItem(project="p", kind="observation", title="x", created_at_epoch=-5), "created_at_epoch"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(store: Store, item: NewItem, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        store.add_item(item)
    assert store.stats()["items"] == 0


def test_a_corrupt_database_file_gives_an_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "memcairn.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=str(path)):
        Store(path)


def test_an_unwritable_location_gives_an_error_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="file"):
        Store(blocker / "sub" / "memcairn.db")


def test_a_database_from_a_newer_memcairn_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memcairn.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO _memcairn_migrations VALUES (999, 'm999_future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNewError, match="newer memcairn"):
        Store(path)


def test_update_rejects_unknown_fields_and_missing_ids(store: Store) -> None:
    r = store.add_item(obs("x", "y"))
    with pytest.raises(ValidationError, match="cannot edit"):
        store.update_item(r.id, project="other")
    with pytest.raises(NotFoundError):
        store.update_item(12345, title="z")


def test_large_stores_rank_a_bounded_set_and_still_find_the_rare_term(store: Store, monkeypatch) -> None:
    from memcairn.store import fts

    monkeypatch.setattr(fts, "RANK_BUDGET", 20)
    store.add_items([obs(f"common error {i}", "the build failed with an error") for i in range(60)])
    target = store.add_item(obs("zanzibar exception", "rare word in an otherwise ordinary note"))
    both = store.add_item(obs("error build failed", "error build failed"))
    plan = fts.plan_match(store._conn, "zanzibar build error failed", total_docs=62, budget=20)
    assert plan is not None and plan.startswith('"zanzibar"') and "AND" in plan
    hits = [i.id for i, _ in store.keyword_search("zanzibar build error failed", limit=5)]
    assert hits[0] == target.id
    assert both.id in hits


def test_an_unfiltered_search_ranks_only_the_newest_matches_past_the_cap(store: Store, monkeypatch) -> None:
    from memcairn.store import fts

    monkeypatch.setattr(fts, "RANK_CAP", 10)
    best_but_old = store.add_item(obs("deadlock deadlock deadlock", "deadlock in the writer", type="bugfix"))
    store.add_items([obs(f"note {i}", f"a deadlock was seen once {'padding ' * (i % 7)}") for i in range(29)])
    newest = store.add_items([obs("deadlock deadlock", "deadlock twice in the reader")])[0]
    ranked = store.keyword_ids("deadlock", limit=50)
    assert len(ranked) == 10  # 31 rows match; the cap ranks the 10 newest
    assert ranked[0][0] == newest.id and best_but_old.id not in [i for i, _ in ranked]
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    # A filtered search joins every match instead, so the old best row is found there.
    filtered = store.keyword_ids("deadlock", ItemFilter(types=("bugfix",)), limit=50)
    assert [i for i, _ in filtered] == [best_but_old.id]
    monkeypatch.setattr(fts, "RANK_CAP", 3000)
    assert store.keyword_ids("deadlock", limit=1)[0][0] == best_but_old.id


def test_the_default_cap_still_finds_an_old_best_match_among_thousands(store: Store) -> None:
    """The cap bounds pathological queries; it must not hide old memories from a word that a few thousand
    newer rows also hold (a cap of 1,000 lost most pooled LongMemEval keyword recall)."""
    best_but_old = store.add_item(obs("retry storm retry storm", "a retry storm in the uploader"))
    store.add_items([obs(f"note {i}", f"one retry in job {i} {'padding ' * (i % 5)}") for i in range(2500)])
    assert store.keyword_ids("retry storm", limit=5)[0][0] == best_but_old.id
    assert store.keyword_ids("retry", limit=5)[0][0] == best_but_old.id


def test_document_frequencies_are_remembered_for_a_while(store: Store, monkeypatch) -> None:
    from memcairn.store import fts

    store.add_items([obs(f"cache miss {i}", "the cache missed again") for i in range(5)])
    cache = fts.FrequencyCache(ttl=60)
    counted: list[list[str]] = []
    original = fts._count_documents

    def spy(conn, tokens):  # noqa: ANN001, ANN202
        counted.append(list(tokens))
        return original(conn, tokens)

    monkeypatch.setattr(fts, "_count_documents", spy)
    assert fts._document_frequencies(store._conn, ["cache", "missed", "nowhere"], cache) == [5, 5, 0]
    assert fts._document_frequencies(store._conn, ["missed", "again"], cache) == [5, 5]
    assert counted == [["cache", "missed", "nowhere"], ["again"]]  # "missed" came from the cache
    cache.ttl = 0  # expired: counted again
    assert fts._document_frequencies(store._conn, ["cache"], cache) == [5]
    assert counted[-1] == ["cache"]
    small = fts.FrequencyCache(size=2)
    small.remember({"a": 1, "b": 2})
    small.remember({"c": 3})  # over the bound: the old counts go
    assert small.known(["a", "b", "c"]) == {"c": 3}


def _damage_page_of(path: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with garbage, as a bad sector or a torn write would."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with path.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)


def test_a_damaged_keyword_index_page_opens_read_only_with_an_error_naming_the_path(tmp_path: Path) -> None:
    from memcairn.core.errors import StoreDamagedError

    path = tmp_path / "memcairn.db"
    with Store(path) as store:
        store.add_items([obs(f"note {i}", "some narrative " * 20) for i in range(50)])
    _damage_page_of(path, "memory_items_fts_docsize")  # read by the drift check on open
    with Store(path) as store:  # reads go on as far as the pages allow; writes would spread the damage
        assert store.damage is not None
        assert store.get_item(1).title == "note 0"
        with pytest.raises(StoreDamagedError, match=str(path)):
            store.add_item(obs("one more", "x"))


def _make_read_only(path: Path) -> None:
    import os
    import subprocess

    path.chmod(0o444)
    if os.geteuid() == 0:  # root ignores permissions; the immutable flag binds root too
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("cannot make a file read-only for root here")


def test_a_read_only_database_file_is_refused_on_open_not_at_the_first_write(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "memcairn.db"
    with Store(path) as store:
        store.add_item(obs("kept", "x"))
    _make_read_only(path)
    try:
        with pytest.raises(StoreError, match="cannot write .*permissions"):
            Store(path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        path.chmod(0o644)
    with Store(path) as store:
        assert store.count_items() == 1


def test_a_database_locked_past_the_busy_timeout_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.store import db

    path = tmp_path / "memcairn.db"
    Store(path).close()
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 200)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            Store(path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_the_keyword_index_check_does_not_call_a_locked_database_a_bad_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.store import db

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 200)
    with Store(tmp_path / "memcairn.db") as store:
        store.add_item(obs("kept", "x"))
        holder = sqlite3.connect(tmp_path / "memcairn.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                store.fts_integrity_ok()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert store.fts_integrity_ok()


def test_a_lone_surrogate_is_a_validation_error_naming_the_field(store: Store) -> None:
    for item in (NewItem(project="p", kind="manual", title="cut \ud83d"),
                 NewItem(project="p\udcff", kind="manual", title="x"),
                 NewItem(project="p", kind="manual", title="x", facts=["\udc80"]),
                 NewItem(project="p", kind="manual", title="x", metadata={"k": "\ud800"})):
        with pytest.raises(ValidationError, match="not valid Unicode"):
            store.add_item(item)
    assert store.stats()["items"] == 0


def test_a_nul_inside_a_field_cannot_make_two_memories_collide(store: Store) -> None:
    first = store.add_item(NewItem(project="p", kind="manual", title="a\x00", narrative="b"))
    second = store.add_item(NewItem(project="p", kind="manual", title="a", narrative="\x00b"))
    assert second.created and second.id != first.id
    assert store.get_item(first.id).title == "a\ufffd"


def test_whitespace_only_fields_are_no_content(store: Store) -> None:
    with pytest.raises(ValidationError, match="needs some content"):
        store.add_item(NewItem(project="p", kind="manual", title="  \n\t ", text=" "))
    added = store.add_item(NewItem(project="p", kind="manual", title="   ", text="real"))
    assert store.get_item(added.id).title is None


def test_facts_given_as_a_generator_are_kept(store: Store) -> None:
    added = store.add_item(NewItem(project="p", kind="manual", title="gen", facts=(f for f in ["one", "two"])))
    assert store.get_item(added.id).facts == ["one", "two"]


@pytest.mark.parametrize("field,value", [
    ("created_at_epoch", 2**70), ("created_at_epoch", 10**16), ("created_at_epoch", True),
    ("prompt_number", 2**70), ("prompt_number", True), ("platform_source", 5),
])
def test_absurd_numbers_and_types_are_validation_errors(store: Store, field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        store.add_item(NewItem(project="p", kind="manual", title="x", **{field: value}))


def test_a_refused_duplicate_uses_up_no_id(store: Store) -> None:
    first = store.add_item(NewItem(project="p", kind="manual", text="same"))
    for _ in range(3):
        assert store.add_item(NewItem(project="p", kind="manual", text="same")) == AddResult(first.id, False)
    assert store.add_items([NewItem(project="p", kind="manual", text="same"),
                            NewItem(project="p", kind="manual", text="other")])[1].id == first.id + 1
