"""The team server's context takes freshness from its caller (``server/told_freshness.py``): only changed or
stale, by API id, reasons cut short; anything else is refused with a 400 that says the shape."""

from __future__ import annotations

import json

import pytest

from memcairn.core.models import MemoryItem
from memcairn.search.freshness import Freshness
from memcairn.server.http import ApiError
from memcairn.server.told_freshness import REASON_CHARS, ToldFreshness, parse_states


def _item(item_id: int, anchors: dict[str, object]) -> MemoryItem:
    return MemoryItem(id=item_id, uuid="", project="ledger", merged_into_project=None, session=None,
                      kind="observation", type="change", title=f"memory {item_id}", subtitle=None, text=None,
                      narrative=None, facts=[], concepts=[], files_read=[], files_modified=[], metadata={},
                      request=None, investigated=None, learned=None, completed=None, next_steps=None, notes=None,
                      prompt_number=None, platform_source=None, content_hash="h", created_at_epoch=1,
                      updated_at_epoch=1, anchors=anchors)


def test_states_are_read_by_id_and_cut_short() -> None:
    told = parse_states(json.dumps({"12": {"state": "stale", "reasons": ["billing.py deleted since", "x" * 999]},
                                    "3": {"state": "changed"}}))
    assert told[12].state == "stale" and told[12].reasons[0] == "billing.py deleted since"
    assert len(told[12].reasons[1]) == REASON_CHARS and told[3] == Freshness("changed")
    assert parse_states(None) == {} and parse_states("") == {}


@pytest.mark.parametrize("raw", ["not json", "[]", json.dumps({"12": {"state": "current"}}),
                                 json.dumps({"twelve": {"state": "stale"}}), json.dumps({"\u00b2": {"state": "stale"}}),
                                 json.dumps({"12": {"state": "stale", "reasons": "gone"}}),
                                 json.dumps({"12": {"state": "stale", "reasons": ["a\u0000b"]}}),
                                 json.dumps({str(n): {"state": "stale"} for n in range(201)})])
def test_malformed_states_are_refused(raw: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_states(raw)
    assert caught.value.status == 400


def test_the_check_answers_what_it_was_told_and_lists_the_anchored_it_was_asked_about() -> None:
    told = ToldFreshness({1: Freshness("stale", ("a.py deleted since",))})
    states = told.check([_item(1, {"files": [{"path": "a.py"}]}), _item(2, {})])
    assert states == {1: Freshness("stale", ("a.py deleted since",))}
    assert told.anchored() == [{"id": 1, "project": "ledger", "anchors": {"files": [{"path": "a.py"}]}}]
