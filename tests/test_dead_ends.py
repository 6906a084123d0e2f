"""Dead ends are not facts: a hypothesis the agent later said did not hold is what was tried
(``capture.offline.dead_ends``), and a change a later edit undid is marked reverted (``capture.reverts``); through
the real queue and pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from capture_queue import send

from memcairn.capture.offline.dead_ends import dead_ends
from memcairn.capture.pipeline import CapturePipeline
from memcairn.context.build import render_context
from memcairn.core.corrections import state_of
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store import Store
from memcairn.wire.config import Settings


@pytest.mark.parametrize(("texts", "tried"), [
    (["I think the cache is stale, so the totals lag.", "Checked the cache keys.",
      "It wasn't the cache: the tz offset was applied twice."], "I think the cache is stale, so the totals lag."),
    (["The flaky test is probably a race in `SessionStore.flush`.",
      "Ruled out the `SessionStore.flush` race: the test fails with one worker too."],
     "The flaky test is probably a race in `SessionStore.flush`."),
    (["My guess is the migration didn't run on CI.", "The migration is not the problem after all; it ran."],
     "My guess is the migration didn't run on CI."),
    (["This might be the proxy dropping long requests.", "The proxy was a red herring, the client times out first."],
     "This might be the proxy dropping long requests."),
])
def test_a_hypothesis_refuted_later_is_a_dead_end(texts: list[str], tried: str) -> None:
    assert [end.hypothesis for end in dead_ends(texts)] == [tried]


@pytest.mark.parametrize("texts", [
    ["I think the cache is stale.", "Cleared the cache and the totals are right now."],  # never refuted
    ["I think the cache is stale.", "It wasn't the network either."],  # refutes something else
    ["The only failure is the e2e test that needs ClickHouse — not related to our changes."],  # no hypothesis
    ["It wasn't the cache.", "I think the cache is stale."],  # refuted before it was said
])
def test_nothing_else_is_a_dead_end(texts: list[str]) -> None:
    assert dead_ends(texts) == []


def call(cid: str, narration: str = "", **payload: Any) -> dict[str, Any]:
    return {"tool_use_id": cid, "narration": narration, **payload}


def bash(cid: str, command: str, narration: str = "") -> dict[str, Any]:
    return call(cid, narration, tool_name="Bash", tool_input={"command": command},
                tool_response={"stdout": "ok", "stderr": "", "exit_code": 0})


def edit(cid: str, old: str, new: str, path: str = "/work/shop/totals.py", narration: str = "") -> dict[str, Any]:
    return call(cid, narration, tool_name="Edit", tool_input={"file_path": path, "old_string": old, "new_string": new},
                tool_response={"filePath": path, "oldString": old, "newString": new})


def turn(store: Store, settings: Settings, prompt: str, *calls: dict[str, Any], reply: str = "Done.",
         pipeline: CapturePipeline | None = None) -> None:
    send(store, settings, "user_prompt", prompt=prompt)
    for one in calls:
        send(store, settings, "tool_use", **one)
    send(store, settings, "stop", last_assistant_message=reply)
    assert (pipeline or CapturePipeline(store, settings)).drain().failed == 0


def test_a_turn_summary_keeps_a_refuted_hypothesis_out_of_what_was_learned(store: Store,
                                                                           settings: Settings) -> None:
    send(store, settings, "session_start")
    turn(store, settings, "Why do the daily totals lag?",
         bash("b1", "redis-cli keys 'totals:*'", narration="I think the totals cache is stale, because it is never "
              "invalidated at midnight."),
         edit("e1", "offset = tz_offset(user) + tz_offset(user)", "offset = tz_offset(user)",
              narration="It wasn't the totals cache: the `tz_offset` was applied twice, since both calls add it."),
         reply="Fixed: the totals lagged because `tz_offset` was applied twice.")
    summary = store.list_items(ItemFilter(kinds=["summary"]), limit=1)[0]
    assert "cache is stale" not in (summary.learned or "")
    assert "`tz_offset` was applied twice" in (summary.learned or "")
    assert (summary.investigated or "").startswith("Ruled out: I think the totals cache is stale")
    assert "It wasn't the totals cache" in (summary.investigated or "")


def observations(store: Store) -> list[MemoryItem]:
    return sorted(store.list_items(ItemFilter(kinds=["observation"]), limit=100), key=lambda i: i.id)


@pytest.mark.parametrize("one_pipeline", [True, False], ids=["edits-read-once", "session-read-whole"])
def test_a_change_a_later_edit_undid_is_marked_reverted_until_it_is_made_again(store: Store, settings: Settings,
                                                                             one_pipeline: bool) -> None:
    kept = CapturePipeline(store, settings) if one_pipeline else None
    send(store, settings, "session_start")
    turn(store, settings, "Round the totals", edit("e1", "return total", "return round(total, 2)"), pipeline=kept)
    first = observations(store)[0]
    turn(store, settings, "Keep both", edit("e2", "LIMIT = 5", "LIMIT = 9", path="/work/shop/limits.py"),
         edit("e3", "def cap(x):", "def cap(x: int):", path="/work/shop/limits.py"), pipeline=kept)
    both = observations(store)[-1]
    assert "round(total, 2)" in " ".join(first.facts) and state_of(first) is None
    assert f"#{first.id} " in render_context(store, settings, projects=["shop"])

    turn(store, settings, "Undo the rounding", edit("e4", "return round(total, 2)", "return total"),
         edit("e5", "LIMIT = 9", "LIMIT = 5", path="/work/shop/limits.py"), pipeline=kept)
    undone = store.get_item(first.id)
    assert state_of(undone) == "reverted" and undone.correction["source"] == "capture"
    assert undone.correction["why"] == "its change to totals.py was undone by a later edit"
    assert state_of(store.get_item(both.id)) is None  # one of its two changes still stands
    assert f"#{first.id} " not in render_context(store, settings, projects=["shop"])

    turn(store, settings, "Round after all", edit("e6", "return total", "return round(total, 2)"), pipeline=kept)
    again = store.get_item(first.id)
    assert state_of(again) is None and again.correction["undone"][0]["state"] == "reverted"


def patch(cid: str, old: str, new: str, path: str = "src/totals.ts") -> dict[str, Any]:
    """Codex's apply_patch as its rollouts carry it: the envelope as the call's whole input."""
    envelope = (f"*** Begin Patch\n*** Update File: {path}\n@@ export function total(items) {{\n"
                f"   const sum = items.reduce(add, 0);\n-{old}\n+{new}\n }}\n*** End Patch\n")
    return call(cid, "", tool_name="apply_patch", tool_input=envelope,
                tool_response=f"Success. Updated the following files:\nM {path}\n")


def test_a_codex_patch_a_later_patch_undid_is_marked_reverted(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    turn(store, settings, "Round the totals", patch("p1", "  return sum;", "  return Math.round(sum * 100) / 100;"))
    first = observations(store)[0]
    assert state_of(first) is None
    turn(store, settings, "Leave the totals unrounded",
         patch("p2", "  return Math.round(sum * 100) / 100;", "  return sum;"))
    undone = store.get_item(first.id)
    assert state_of(undone) == "reverted" and "totals.ts" in undone.correction["why"]


def test_a_commit_git_revert_undid_is_marked_reverted(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    turn(store, settings, "Round the totals and commit",
         edit("e1", "return total", "return round(total, 2)"),
         call("c1", "", tool_name="Bash", tool_input={"command": "git commit -am 'Round the totals'"},
              tool_response={"stdout": "[main 3bb8701] Round the totals\n 1 file changed, 1 insertion(+)",
                             "stderr": "", "exit_code": 0}))
    made = [o for o in observations(store) if any("(3bb8701)" in f for f in o.facts)]
    assert made and state_of(made[0]) is None
    turn(store, settings, "That broke the invoices, take it back",
         call("r1", "", tool_name="Bash", tool_input={"command": "git revert --no-edit 3bb8701"},
              tool_response={"stdout": "[main 9f1c2aa] Revert \"Round the totals\"", "stderr": "", "exit_code": 0}))
    undone = store.get_item(made[0].id)
    assert state_of(undone) == "reverted" and undone.correction["why"] == "its commit 3bb8701 was undone by git revert"
