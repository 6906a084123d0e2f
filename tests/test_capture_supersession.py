"""Automatic supersession at capture (``capture/supersession.py``), through the real queue and pipeline: a
command that failed and later ran well, a file written whole twice; and what must not supersede anything."""

from __future__ import annotations

from typing import Any

from capture_queue import send

from memcairn.capture.pipeline import CapturePipeline
from memcairn.context.build import render_context
from memcairn.core.corrections import state_of
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store import Store
from memcairn.wire.config import Settings


def bash(cid: str, command: str, ok: bool, output: str = "") -> dict[str, Any]:
    response = {"stdout": output or ("done" if ok else ""), "stderr": "" if ok else "error: remote not found",
                "exit_code": 0 if ok else 1}
    return {"tool_name": "Bash", "tool_use_id": cid, "tool_input": {"command": command}, "tool_response": response}


def write(cid: str, path: str, content: str) -> dict[str, Any]:
    return {"tool_name": "Write", "tool_use_id": cid, "tool_input": {"file_path": path, "content": content},
            "tool_response": {"type": "update", "filePath": path}}


def turn(store: Store, settings: Settings, prompt: str, *calls: dict[str, Any]) -> None:
    send(store, settings, "user_prompt", prompt=prompt)
    for call in calls:
        send(store, settings, "tool_use", **call)
    send(store, settings, "stop", last_assistant_message="Done.")
    assert CapturePipeline(store, settings).drain().failed == 0


def observations(store: Store) -> list[MemoryItem]:
    return sorted(store.list_items(ItemFilter(kinds=["observation"]), limit=100), key=lambda i: i.id)


def test_a_failed_command_is_superseded_when_it_runs_well_and_holds_again_when_it_fails_again(
        store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    turn(store, settings, "Deploy the site", bash("b1", "make deploy-site", ok=False))
    failed = next(o for o in observations(store) if o.title.startswith("Command failed"))
    assert state_of(failed) is None
    assert "make deploy-site" in render_context(store, settings, projects=["shop"])

    turn(store, settings, "Try other things", bash("b2", "make deploy-docs", ok=True))
    assert state_of(store.get_item(failed.id)) is None  # another command ran well: nothing said of this one

    turn(store, settings, "Deploy again", bash("b3", "make deploy-site", ok=True, output="deployed v2"))
    now = store.get_item(failed.id)
    later = max(o.id for o in observations(store) if "make deploy-site" in " ".join(o.facts) and o.id != failed.id)
    assert (state_of(now), now.correction["by"], now.correction["source"]) == ("superseded", later, "capture")
    assert now.correction["why"] == "`make deploy-site` ran well later"
    assert "Command failed (exit 1): `make deploy-site`" not in render_context(store, settings, projects=["shop"])

    turn(store, settings, "And again", bash("b4", "make deploy-site", ok=False))
    again = store.get_item(failed.id)
    assert state_of(again) is None and again.correction["undone"][0]["by"] == later


def fetcher(timeout: int, retries: int, extra: str = "") -> str:
    settings = "".join(f'{name} = "{name.lower()}-value"\n' for name in
                       ("USER_AGENT", "CACHE_DIR", "PROXY_URL", "LOG_LEVEL", "QUEUE_NAME", "REGION_CODE"))
    helpers = "".join(f"\n\ndef {name}(value):\n    return normalize_{name}(value, strict=True)\n"
                      for name in ("parse_page", "store_page", "clean_links", "score_links"))
    return (f'"""Fetches remote pages with retries."""\n\nTIMEOUT_SECONDS = {timeout}\nMAX_RETRIES = {retries}\n'
            f'{settings}{extra}\n\ndef fetch_remote(url):\n    return get(url, TIMEOUT_SECONDS)\n{helpers}')


def episode(cid: str, content: str) -> list[dict[str, Any]]:
    """A write of fetcher.py inside a longer piece of work (a card is made of it), other files written, tests
    run."""
    others = [write(f"{cid}-{n}", f"/work/shop/{n}.py", f'"""The {n} module."""\n\nLIMIT_{n.upper()} = 5\n\n\n'
                    f'def {n}_entry(value):\n    return value\n') for n in ("pages", "links", "scores")]
    return [write(f"{cid}-src", "/work/shop/fetcher.py", content), *others,
            bash(f"{cid}-run", "pytest -q", ok=True, output="4 passed in 0.01s")]


def test_a_file_written_whole_again_supersedes_its_earlier_card(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    turn(store, settings, "Add the fetcher", *episode("w1", fetcher(30, 3)))
    turn(store, settings, "Make it patient", *episode("w2", fetcher(90, 5, "BACKOFF_BASE = 2\n")))
    cards = [o for o in observations(store) if o.title.startswith("fetcher.py:")]
    assert len(cards) == 2, [o.title for o in observations(store)]
    old, new = cards
    assert "TIMEOUT_SECONDS = 30" in " ".join(old.facts) and "TIMEOUT_SECONDS = 90" in " ".join(new.facts)
    assert state_of(store.get_item(old.id)) == "superseded" and store.get_item(old.id).correction["by"] == new.id
    assert state_of(store.get_item(new.id)) is None
    assert {state_of(o) for o in observations(store) if o.id not in (old.id, new.id)} == {None}


def edit(cid: str, path: str, old: str, new: str) -> dict[str, Any]:
    return {"tool_name": "Edit", "tool_use_id": cid,
            "tool_input": {"file_path": path, "old_string": old, "new_string": new},
            "tool_response": {"filePath": path, "oldString": old, "newString": new}}


def test_an_edit_changing_a_setting_a_card_quotes_supersedes_the_card(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    turn(store, settings, "Add the fetcher", *episode("w1", fetcher(30, 3)))
    card = next(o for o in observations(store) if o.title.startswith("fetcher.py:"))
    links = next(o for o in observations(store) if o.title.startswith("links.py:"))
    turn(store, settings, "More", edit("e0", "/work/shop/fetcher.py", "MAX_RETRIES = 3",
                                       "MAX_RETRIES = 3\n\n\ndef jitter(value):\n    return value\n"))
    assert {state_of(o) for o in observations(store)} == {None}  # a definition added: the card still holds
    turn(store, settings, "Retry more", edit("e1", "/work/shop/fetcher.py", "MAX_RETRIES = 3", "MAX_RETRIES = 7"),
         bash("e1-run", "pytest -q", ok=True, output="4 passed in 0.01s"))
    edited = max(observations(store), key=lambda o: o.id)
    now = store.get_item(card.id)
    assert (state_of(now), now.correction["by"], now.correction["why"]) == ("superseded", edited.id,
                                                                             "MAX_RETRIES = 7 since")
    turn(store, settings, "Other limit", edit("e2", "/work/shop/pages.py", "LIMIT_PAGES = 5", "LIMIT_PAGES = 9"))
    assert state_of(store.get_item(links.id)) is None  # another file's card
    turn(store, settings, "Same value", edit("e3", "/work/shop/links.py", "LIMIT_LINKS = 5", "LIMIT_LINKS = 5  # ok"))
    assert state_of(store.get_item(links.id)) is None  # the same value
