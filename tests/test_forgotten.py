"""What the user deletes stays deleted: replays and re-imports do not bring it back; an explicit save does."""

from __future__ import annotations

from pathlib import Path

from memcairn.core.models import NewItem
from memcairn.store import Store


def _obs(title: str, project: str = "alpha", **kw: object) -> NewItem:
    return NewItem(project=project, kind="observation", type="discovery", title=title, narrative="n " + title, **kw)


def test_deleted_content_is_not_stored_again_by_a_replay(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        first = store.add_item(_obs("Token expiry uses UTC"))
        assert store.delete_items([first.id]) == [first.id]

        again = store.add_item(_obs("Token expiry uses UTC"))
        assert (again.id, again.created, again.forgotten) == (0, False, True)
        assert store.count_items() == 0 and store.keyword_search("expiry") == []

        # the mark is per project and per content: other content and other projects are untouched
        assert store.add_item(_obs("Token expiry uses UTC", project="beta")).created
        assert store.add_item(_obs("Token expiry uses local time")).created


def test_an_explicit_save_or_an_edit_stores_deleted_content_again(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        item = store.add_item(_obs("Cache keys are per user"))
        store.delete_items([item.id])
        saved = store.add_item(_obs("Cache keys are per user"), revive=True)
        assert saved.created and not saved.forgotten
        assert store.add_item(_obs("Cache keys are per user")).id == saved.id  # a plain duplicate again

        other = store.add_item(_obs("Cache keys are global"))
        store.delete_items([other.id])
        kept = store.add_item(_obs("Cache TTL is five minutes"))
        store.update_item(kept.id, title="Cache keys are global", narrative="n Cache keys are global")
        assert store.add_item(_obs("Cache keys are global")).id == kept.id  # the edit lifted the mark


def test_the_mark_survives_a_reopen_and_a_repeated_delete(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Store(path) as store:
        store.delete_items([store.add_item(_obs("Flaky test pinned"), ).id])
        store.delete_items([store.add_item(_obs("Flaky test pinned"), revive=True).id])
    with Store(path) as store:
        assert store.add_item(_obs("Flaky test pinned")).forgotten
        assert store.count_items() == 0
