from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from memcairn.cli.app import run
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import NewItem
from memcairn.search import SearchService
from memcairn.store import Store

MINUTE = 60_000
T0 = int(datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def timeline_store(mem_store: Store) -> dict[str, int]:
    """Twelve items a minute apart (#1..#12) of every kind; #6 is a summary, #9 in another project."""
    ids = {}
    for n in range(1, 13):
        kind = {4: "prompt", 6: "summary", 11: "manual"}.get(n, "observation")
        fields: dict[str, object] = {"title": f"step {n}"}
        if kind == "prompt":
            fields = {"text": f"prompt {n}"}
        elif kind == "summary":
            fields["learned"] = "how it works"
        else:
            fields["narrative"] = f"did thing {n}"
        project = "other" if n == 9 else "p"
        item = NewItem(project=project, kind=kind, created_at_epoch=T0 + n * MINUTE, **fields)  # type: ignore[arg-type]
        ids[f"#{n}"] = mem_store.add_item(item).id
    assert list(ids.values()) == list(range(1, 13))
    return ids


def tl_ids(timeline) -> list[int]:  # noqa: ANN001
    return [i.id for i in timeline.items]


@pytest.mark.parametrize("anchor", [5, "5", "#5", " #5 "])
def test_an_item_id_anchor_in_every_form(mem_store: Store, timeline_store: dict[str, int], anchor: object) -> None:
    timeline = SearchService(mem_store).timeline(anchor=anchor, depth_before=2, depth_after=3)
    assert timeline.anchor_id == 5 and tl_ids(timeline) == [3, 4, 5, 6, 7, 8]


def test_items_of_every_kind_are_merged_by_time(mem_store: Store, timeline_store: dict[str, int]) -> None:
    timeline = SearchService(mem_store).timeline(anchor=6)
    assert tl_ids(timeline) == list(range(1, 13))
    assert {i.kind for i in timeline.items} == {"observation", "prompt", "summary", "manual"}


def test_depth_is_clamped_at_both_ends_of_the_store(mem_store: Store, timeline_store: dict[str, int]) -> None:
    service = SearchService(mem_store)
    assert tl_ids(service.timeline(anchor=2, depth_before=5, depth_after=1)) == [1, 2, 3]
    assert tl_ids(service.timeline(anchor=11, depth_before=1, depth_after=5)) == [10, 11, 12]
    assert tl_ids(service.timeline(anchor=1, depth_before=0, depth_after=0)) == [1]


def test_depth_out_of_range_is_clamped_and_said(mem_store: Store, timeline_store: dict[str, int]) -> None:
    timeline = SearchService(mem_store).timeline(anchor=5, depth_before=500, depth_after=-2)
    assert tl_ids(timeline) == [1, 2, 3, 4, 5]
    assert timeline.notes == ["depth_before 500 clamped to 50", "depth_after -2 clamped to 0"]
    with pytest.raises(ValidationError, match="whole number"):
        SearchService(mem_store).timeline(anchor=5, depth_before="many")


@pytest.mark.parametrize("anchor", ["S6", "s6", "S#6"])
def test_s_anchor_names_a_summary_item(mem_store: Store, timeline_store: dict[str, int], anchor: str) -> None:
    timeline = SearchService(mem_store).timeline(anchor=anchor, depth_before=1, depth_after=1)
    assert timeline.anchor_id == 6 and tl_ids(timeline) == [5, 6, 7] and timeline.anchor_label == "summary"


def test_s_anchor_on_another_kind_or_unknown_id_is_not_found(mem_store: Store, timeline_store: dict[str, int]) -> None:
    service = SearchService(mem_store)
    with pytest.raises(NotFoundError, match="#5 is of kind observation; use 5 as the anchor"):
        service.timeline(anchor="S5")
    with pytest.raises(NotFoundError, match="no summary with id 99"):
        service.timeline(anchor="S99")


def test_unknown_anchor_id_is_not_found(mem_store: Store, timeline_store: dict[str, int]) -> None:
    with pytest.raises(NotFoundError, match="no memory with id 999"):
        SearchService(mem_store).timeline(anchor="#999")


def test_a_timestamp_anchors_on_the_first_item_at_or_after_it(mem_store: Store, timeline_store: dict[str, int]) -> None:
    service = SearchService(mem_store)
    between = service.timeline(anchor="2026-12-01T09:04:30Z", depth_before=1, depth_after=1)
    assert between.anchor_id == 5 and tl_ids(between) == [4, 5, 6]
    assert between.anchor_label == "first memory at or after 2026-12-01T09:04:30Z"
    exact = service.timeline(anchor="2026-12-01T09:07:00", depth_before=0, depth_after=0, tz=UTC)
    assert exact.anchor_id == 7
    day = service.timeline(anchor="2026-12-01", depth_before=3, depth_after=1, tz=UTC)
    assert day.anchor_id == 1 and tl_ids(day) == [1, 2]


def test_a_timestamp_after_everything_shows_what_came_before(mem_store: Store, timeline_store: dict[str, int]) -> None:
    timeline = SearchService(mem_store).timeline(anchor="2027-01-01T00:00:00Z", depth_before=2)
    assert timeline.anchor_id is None and tl_ids(timeline) == [11, 12]
    assert "showing the ones before it" in timeline.notes[0]


def test_a_relative_anchor_counts_back_from_now(mem_store: Store, timeline_store: dict[str, int]) -> None:
    timeline = SearchService(mem_store).timeline(anchor="3m", now=T0 + 10 * MINUTE, depth_before=0, depth_after=0)
    assert timeline.anchor_id == 7


def test_a_query_anchors_on_the_best_hit(mem_store: Store, timeline_store: dict[str, int]) -> None:
    timeline = SearchService(mem_store).timeline(query="did thing 8", depth_before=1, depth_after=1)
    assert timeline.anchor_id == 8 and tl_ids(timeline) == [7, 8, 9]
    assert (timeline.strategy, timeline.fallback_reason) == ("keyword", "vector_unavailable")
    assert timeline.anchor_label == "best match for the query"
    empty = SearchService(mem_store).timeline(query="nothing like this anywhere")
    assert empty.anchor_id is None and empty.items == [] and "nothing matched" in empty.notes[-1]


def test_anchor_and_query_together_or_neither_are_refused(mem_store: Store, timeline_store: dict[str, int]) -> None:
    service = SearchService(mem_store)
    with pytest.raises(ValidationError, match="either an anchor or a query, not both"):
        service.timeline(anchor=5, query="thing")
    with pytest.raises(ValidationError, match="give an anchor"):
        service.timeline()
    with pytest.raises(ValidationError, match="give an anchor"):
        service.timeline(anchor="  ", query="")


@pytest.mark.parametrize("anchor", ["yesterday-ish", "12/01/2026", "#", "S", 0, -4, True, 1.5])
def test_malformed_anchors_list_the_accepted_forms(mem_store: Store, timeline_store: dict[str, int],
                                                   anchor: object) -> None:
    with pytest.raises(ValidationError, match="S<id> for a summary"):
        SearchService(mem_store).timeline(anchor=anchor)


@pytest.mark.parametrize("anchor", ["99999999999999999999999", "#99999999999999999999", "S99999999999999999999",
                                    2**63, "0", "S0"])
def test_an_id_no_item_can_have_is_a_clear_error_never_an_overflow(mem_store: Store, timeline_store: dict[str, int],
                                                                   anchor: object) -> None:
    with pytest.raises(ValidationError, match="is not an item id; use an item id"):
        SearchService(mem_store).timeline(anchor=anchor)


def test_a_timestamp_anchor_with_nothing_around_it_does_not_claim_to_show_anything(mem_store: Store) -> None:
    empty = SearchService(mem_store).timeline(anchor="2026-12-01T00:00:00Z")
    assert empty.items == [] and empty.notes == ["no memory at or after 2026-12-01T00:00:00Z, and none before it"]
    mem_store.add_item(NewItem(project="p", kind="manual", title="early", created_at_epoch=T0))
    none_asked = SearchService(mem_store).timeline(anchor="2027-01-01T00:00:00Z", depth_before=0)
    assert none_asked.items == [] and "depth_before 0 shows none before it" in none_asked.notes[0]


def test_cli_timeline_with_an_absurd_id_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    run(["add", "--project", "demo", "--title", "first"])
    capsys.readouterr()
    assert run(["timeline", "--local", "--anchor", "99999999999999999999999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: anchor '99999999999999999999999' is not an item id") and "Traceback" not in err


def test_projects_limit_the_slice_and_refuse_an_outside_anchor(mem_store: Store,
                                                               timeline_store: dict[str, int]) -> None:
    service = SearchService(mem_store)
    scoped = service.timeline(anchor=8, depth_before=1, depth_after=1, projects=["p"])
    assert tl_ids(scoped) == [7, 8, 10]
    with pytest.raises(ValidationError, match="belongs to project 'other'"):
        service.timeline(anchor=9, projects="p")
    mem_store.merge_project("other", "p")
    assert tl_ids(service.timeline(anchor=9, depth_before=1, depth_after=1, projects=["p"])) == [8, 9, 10]


def test_unknown_projects_give_an_empty_timeline_with_a_note(mem_store: Store, timeline_store: dict[str, int]) -> None:
    timeline = SearchService(mem_store).timeline(anchor=5, projects=["nope"])
    assert timeline.items == [] and timeline.notes == ["unknown project 'nope'; known projects: other, p"]


def test_cli_timeline_prints_markdown_and_json(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    for title in ("first", "second", "third"):
        run(["add", "--project", "demo", "--title", title])
    capsys.readouterr()
    assert run(["timeline", "--anchor", "#2", "--before", "1", "--after", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Timeline around #2 · 1 before, 1 after") and re.search(r"second · ~\d+ tok <- ANCHOR", out)
    assert run(["timeline", "--query", "third", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["anchor_id"] == 3 and data["strategy"] == "keyword" and data["results"][-1]["anchor"] is True
    assert run(["timeline", "--anchor", "2", "--query", "x"]) == 2
    assert "not both" in capsys.readouterr().err
    assert run(["timeline", "--anchor", "77"]) == 2
    assert "no memory with id 77" in capsys.readouterr().err
