from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from memcairn.core.errors import ValidationError
from memcairn.core.models import NewItem
from memcairn.mirror.sync import VectorHit
from memcairn.search import SearchService, render_full, render_index, render_timeline
from memcairn.search.render import display_title, file_of
from memcairn.store import Store

GOLDEN = Path(__file__).parent / "golden"
MINUTE = 60_000
DAY1 = int(datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp() * 1000)
DAY2 = DAY1 + 86_400_000
NOW = DAY2 + 86_400_000


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/<name>; UPDATE_GOLDEN=1 rewrites the file instead."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


class FixedMirror:
    available = True

    def __init__(self, distances: dict[int, float]) -> None:
        self.distances = distances

    def query(self, text: str, *, projects: Sequence[str] | None = None, limit: int = 50) -> list[VectorHit]:
        ranked = sorted(self.distances.items(), key=lambda kv: kv[1])
        return [VectorHit(i, "observation", d, f"obs_{i}") for i, d in ranked]


@pytest.fixture
def story(mem_store: Store) -> Store:
    """A morning on the auth module over two days, in two projects, with every kind of item."""
    def put(minutes: int, day: int = DAY1, **fields: object) -> None:
        fields.setdefault("project", "webapp")
        fields.setdefault("kind", "observation")
        mem_store.add_item(NewItem(created_at_epoch=day + minutes * MINUTE, **fields))  # type: ignore[arg-type]

    put(0, kind="prompt", text="Why do users get logged out after an hour? Look at the session code.",
        session="s1", platform_source="claude-code")
    put(3, type="discovery", title="Session tokens are checked against local time",
        narrative="auth/session.py compares token expiry with datetime.now() instead of UTC, so tokens expire "
                  "early east of Greenwich.", files_read=["auth/session.py"], session="s1",
        platform_source="claude-code")
    put(9, type="bugfix", title="Compare token expiry in UTC", narrative="Switched to datetime.now(UTC).",
        facts=["expiry is stored in UTC"], files_modified=["auth/session.py"], session="s1",
        platform_source="claude-code")
    put(12, type="change", title="Regression test for token expiry across time zones, covering UTC+14 and UTC-12 "
                                 "edge cases that used to fail",
        narrative="Added a parametrised test.", files_modified=["tests/test_session.py"], session="s1",
        platform_source="claude-code")
    put(20, kind="summary", title="Fixed early logouts", request="Users were logged out early",
        learned="token expiry compared local time with UTC", completed="expiry check uses UTC",
        session="s1", platform_source="claude-code")
    put(30, day=DAY2, kind="manual", type="note", title="Token expiry policy: one hour, UTC",
        text="Decided with the team.")
    put(45, day=DAY2, project="billing", type="decision", title="Invoices keep UTC timestamps",
        narrative="Same token expiry lesson applied to invoices.", files_modified=["billing/invoice.py"])
    return mem_store


def test_golden_index_of_a_hybrid_search(story: Store) -> None:
    service = SearchService(story, FixedMirror({2: 0.1, 7: 0.2, 5: 0.3}), fusion="rrf")
    result = service.search(query="token expiry", now=NOW)
    assert result.strategy == "hybrid"
    check_golden("index_hybrid.md", render_index(result, tz=UTC))


def test_golden_index_of_a_keyword_fallback_with_notes(story: Store) -> None:
    result = SearchService(story, None).search(query="token expiry UTC", projects=["webapp", "mobile"], limit=500,
                                               now=NOW)
    check_golden("index_keyword_fallback.md", render_index(result, tz=UTC))


def test_golden_index_of_filter_only(story: Store) -> None:
    result = SearchService(story).search(order="oldest")
    check_golden("index_filter_only.md", render_index(result, tz=UTC))


def test_golden_timeline(story: Store) -> None:
    timeline = SearchService(story).timeline(anchor=3, depth_before=10, depth_after=10)
    check_golden("timeline.md", render_timeline(timeline, tz=UTC))


def test_golden_timeline_from_a_query_in_one_project(story: Store) -> None:
    timeline = SearchService(story).timeline(query="early logouts", depth_before=2, depth_after=1,
                                             projects=["webapp"])
    check_golden("timeline_query.md", render_timeline(timeline, tz=UTC))


def test_an_empty_result_is_one_line_plus_the_notes(story: Store) -> None:
    result = SearchService(story, None).search(query="zebra", projects=["nope"])
    assert render_index(result, tz=UTC) == (
        "No memories matched (strategy: keyword (fallback: vector_unavailable)).\n"
        "Note: unknown project 'nope'; known projects: billing, webapp\n"
    )
    assert render_index(SearchService(story).search(query="zebra"), tz=UTC).startswith("No memories matched")


def test_empty_timelines_render(story: Store) -> None:
    service = SearchService(story)
    assert render_timeline(service.timeline(query="zebra"), tz=UTC).startswith(
        "Timeline: nothing to show · strategy: keyword (fallback: vector_unavailable)\nNote: "
    )
    after_all = render_timeline(service.timeline(anchor="2030-01-01T00:00Z", depth_before=1), tz=UTC)
    assert after_all.startswith("Timeline with no anchor · 1 before\nNote: no memory at or after")


def test_rows_stay_compact(story: Store) -> None:
    text = render_index(SearchService(story).search(limit=100), tz=UTC)
    rows = [line for line in text.splitlines() if line.startswith("- #")]
    assert len(rows) == 7
    assert all(len(row) / 4 <= 100 for row in rows)  # ~chars/4 tokens: at most 100 per row


def test_titles_are_truncated_and_fall_back_to_text(story: Store) -> None:
    long = story.get_item(4)
    assert len(display_title(long)) == 90 and display_title(long).endswith("…")
    assert display_title(story.get_item(1)).startswith("Why do users get logged out")
    assert display_title(story.get_item(5)) == "Fixed early logouts"
    item = story.get_item(2)
    assert file_of(item) == "auth/session.py" and file_of(story.get_item(1)) == "(no file)"
    assert file_of(story.get_item(3)) == "auth/session.py"


def test_stored_control_characters_never_reach_the_output(mem_store: Store) -> None:
    # a project name with a control character is refused now; an earlier release may have stored one
    mem_store._conn.execute("INSERT INTO projects(name, created_at_epoch) VALUES (?, 0)", ("p\x1b[2J",))
    mem_store.add_item(NewItem(project="p\x1b[2J", kind="observation", type="bugfix", created_at_epoch=DAY1,
                               title="\x1b[31mred\x1b[0m title\nsecond line\u202e", narrative="x",
                               files_modified=["src/\x1b]0;pwned\x07main.py"]))
    mem_store.add_item(NewItem(project="q", kind="observation", created_at_epoch=DAY1 + MINUTE, title=" \x00 ",
                               narrative="the narrative stands in"))
    service = SearchService(mem_store)
    index = render_index(service.search(now=NOW), tz=UTC)
    timeline = render_timeline(service.timeline(anchor="1", now=NOW), tz=UTC)
    for text in (index, timeline):
        assert not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f or c == "\u202e" for c in text), text
    assert "[31mred[0m title second line" in index and "the narrative stands in" in index
    assert "**src/]0;pwnedmain.py**" in timeline and "bugfix" in timeline


def test_rendering_follows_the_time_zone_given(story: Store) -> None:
    result = SearchService(story).search(order="oldest", limit=2)
    tokyo = render_index(result, tz=timezone(timedelta(hours=9)))
    assert "### 2026-12-01\n- #1 18:00 prompt" in tokyo
    west = render_index(result, tz=timezone(timedelta(hours=-10)))
    assert "### 2026-11-30\n- #1 23:00 prompt" in west


def test_full_records_are_json_in_the_order_asked(story: Store) -> None:
    items = story.get_items([3, 1, 99])
    records = json.loads(render_full(items))
    assert [r["id"] for r in records] == [3, 1] and records[0]["facts"] == ["expiry is stored in UTC"]
    with pytest.raises(ValidationError, match="ids are required"):
        render_full([])
