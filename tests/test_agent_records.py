"""The record an agent reads: a file its text already names is not listed again."""

from __future__ import annotations

from datetime import UTC

from memcairn.core.models import MemoryItem
from memcairn.search.records import agent_record, record_tokens


def _item(**fields: object) -> MemoryItem:
    base: dict[str, object] = dict(
        id=7, uuid="u", project="p", merged_into_project=None, session="s", kind="observation", type="change",
        title=None, subtitle=None, text=None, narrative=None, facts=[], concepts=[], files_read=[],
        files_modified=[], metadata={}, request=None, investigated=None, learned=None, completed=None,
        next_steps=None, notes=None, prompt_number=None, platform_source=None, content_hash="h",
        created_at_epoch=0, updated_at_epoch=0,
    )
    base.update(fields)
    return MemoryItem(**base)  # type: ignore[arg-type]


def test_files_named_in_the_text_are_not_listed_again() -> None:
    item = _item(title="Changed lib/a.ex", facts=["edited lib/b.ex: added run/1", "read lib/c.ex"],
                 files_modified=["lib/a.ex", "lib/b.ex", "lib/d.ex"], files_read=["lib/c.ex"])
    record = agent_record(item, UTC)
    assert record["files_modified"] == ["lib/d.ex"]
    assert "files_read" not in record
    assert record_tokens(item, UTC) < record_tokens(_item(files_modified=["lib/a.ex", "lib/b.ex",
                                                                                   "lib/d.ex"]), UTC) + 40


def test_a_file_only_partly_named_stays_listed() -> None:
    record = agent_record(_item(narrative="see a.ex", files_read=["lib/a.ex", "a.ex"]), UTC)
    assert record["files_read"] == ["lib/a.ex"]


def test_ids_and_facets_an_agent_cannot_act_on_are_left_out() -> None:
    record = agent_record(_item(title="Fixed the guard", concepts=["gotcha"], session="4f9c-uuid"), UTC)
    assert set(record) == {"id", "time", "project", "kind", "type", "title"}
