"""Freshness at read time: a memory captured in a real git checkout is current while its files are untouched,
changed when a file changed but still holds what it names, stale when the file is deleted or an identifier it names
is gone, and unknown without anchors; records carry the state, the search index and the digest mark it, the digest
leaves stale rows out and a search ranks them below current ones."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from capture_queue import edit, send
from git_repo import committed_repo
from starlette.testclient import TestClient
from worker_app import store_of

from memcairn.capture.anchors import AnchorReader
from memcairn.capture.pipeline import CapturePipeline
from memcairn.context.freshness_check import FreshnessChecker
from memcairn.core.models import ItemFilter, MemoryItem, NewItem
from memcairn.search.freshness import CHANGED, CURRENT, STALE, UNKNOWN, mark
from memcairn.store import Store
from memcairn.wire.config import Settings

CART = "from decimal import Decimal\n\n\ndef cart_total(items):\n    total = Decimal(0)\n    return total\n"
TAX = "def tax_rate(region):\n    return 0.2\n"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "shop", {"cart.py": CART, "tax.py": TAX})


def captured(store: Store, settings: Settings, repo: Path) -> MemoryItem:
    """The observation the capture pipeline makes of an edit of cart.py in ``repo``."""
    where = {"cwd": str(repo)}
    send(store, settings, "session_start", **where)
    send(store, settings, "user_prompt", prompt="Fix the rounding of cart_total", **where)
    send(store, settings, "tool_use", **where, **edit("e1", str(repo / "cart.py")))
    send(store, settings, "stop", last_assistant_message="Fixed: `cart_total` uses Decimal now.", **where)
    assert CapturePipeline(store, settings).drain().failed == 0
    items = store.list_items(ItemFilter(kinds=["observation"]), limit=10)
    return next(i for i in items if "cart.py" in i.files_modified)


def anchored(store: Store, repo: Path, path: str, title: str, text: str) -> int:
    anchors = AnchorReader().anchors(str(repo), [path], [title, text])
    return store.add_item(NewItem(project="shop", kind="manual", type="decision", title=title, text=text,
                                  anchors=anchors)).id


def state(item: MemoryItem) -> tuple[str, tuple[str, ...]]:
    found = FreshnessChecker().check([item])[item.id]
    return found.state, found.reasons


def test_a_captured_edit_is_current_then_changed_then_stale_as_its_file_moves_on(
        store: Store, settings: Settings, repo: Path) -> None:
    item = captured(store, settings, repo)
    assert "cart_total" in item.anchors["identifiers"]
    checker = FreshnessChecker()
    untouched = checker.check([item])[item.id]
    assert (untouched.state, untouched.reasons, mark(untouched)) == (CURRENT, (), "")
    assert untouched.checked_at > 0

    (repo / "cart.py").write_text(CART + "\n\ndef cart_count(items):\n    return len(items)\n")
    changed = checker.check([item])[item.id]
    assert (changed.state, changed.reasons, mark(changed)) == (CHANGED, ("cart.py changed since",),
                                                               "[changed since]")

    (repo / "cart.py").write_text(CART.replace("cart_total", "basket_total"))
    gone = checker.check([item])[item.id]
    assert gone.state == STALE and "`cart_total` no longer in cart.py" in gone.reasons

    (repo / "cart.py").unlink()
    deleted = checker.check([item])[item.id]
    assert (deleted.state, deleted.reasons[0], mark(deleted)) == (STALE, "cart.py deleted since",
                                                                  "[stale: cart.py deleted]")


def test_without_anchors_or_without_the_root_nothing_is_said(store: Store, repo: Path, tmp_path: Path) -> None:
    plain = store.get_item(store.add_item(NewItem(project="shop", kind="manual", text="no anchors here")).id)
    assert state(plain)[0] == UNKNOWN and mark(FreshnessChecker().check([plain])[plain.id]) == ""
    moved = tmp_path / "elsewhere"
    item = store.get_item(anchored(store, repo, "cart.py", "cart_total is a Decimal", "`cart_total`"))
    shutil.move(repo, moved)  # the root is not on this machine any more: not a deletion
    assert state(item)[0] == UNKNOWN


def test_a_file_read_again_only_when_its_size_or_mtime_moved(store: Store, repo: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    item = store.get_item(anchored(store, repo, "cart.py", "cart_total is a Decimal", "`cart_total`"))
    checker = FreshnessChecker()
    before = checker.token()
    assert checker.check([item])[item.id].state == CURRENT
    reads: list[str] = []
    real_open = open

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting)
    assert checker.check([item, item])[item.id].state == CURRENT and reads == []
    assert checker.token() == before
    (repo / "cart.py").write_text(CART + "# more\n")
    assert checker.token() != before  # a memo keyed on it renders again
    assert checker.check([item])[item.id].state == CHANGED and reads


def test_the_worker_shows_freshness_in_records_search_and_digest(client: TestClient, app: Any, repo: Path) -> None:
    store = store_of(app)
    kept = anchored(store, repo, "tax.py", "Zephyr rate lives in tax_rate", "the zephyr rate is `tax_rate`")
    gone = anchored(store, repo, "cart.py", "Zephyr totals come from cart_total",
                    "zephyr zephyr totals: `cart_total` sums the zephyr items")
    plain = store.add_item(NewItem(project="shop", kind="manual", type="decision", title="Zephyr plain note",
                                   text="zephyr without files")).id
    first = client.get("/api/search", params={"query": "zephyr", "projects": "shop", "format": "json"}).json()
    before = [r["id"] for r in first["results"]]
    assert before.index(gone) < before.index(kept)  # the more relevant one leads while its file is there

    (repo / "cart.py").unlink()
    (repo / "tax.py").write_text(TAX + "\n\ndef tax_free(region):\n    return False\n")

    record = client.get(f"/api/memory/{gone}").json()
    assert record["freshness"]["state"] == STALE and record["freshness"]["reasons"] == ["cart.py deleted since"]
    assert record["freshness"]["checked_at"]
    batch = client.post("/api/observations/batch", json={"ids": [kept, gone, plain]}).json()
    states = {r["id"]: r["freshness"]["state"] for r in batch["items"]}
    assert states == {kept: CHANGED, gone: STALE, plain: UNKNOWN}
    agent = client.post("/api/observations/batch", json={"ids": [kept, gone, plain], "format": "agent"}).json()
    shown = {r["id"]: r.get("freshness", {}).get("reasons") for r in agent["items"]}
    assert shown == {kept: ["tax.py changed since"], gone: ["cart.py deleted since"], plain: None}

    found = client.get("/api/search", params={"query": "zephyr", "projects": "shop", "format": "json"}).json()
    after = [r["id"] for r in found["results"]]
    assert after.index(kept) < after.index(gone) and after[-1] == gone  # demoted, not removed
    index = client.get("/api/search", params={"query": "zephyr", "projects": "shop"}).json()["text"]
    assert "Zephyr totals come from cart_total [stale: cart.py deleted]" in index
    assert "Zephyr rate lives in tax_rate [changed since]" in index
    assert "Zephyr plain note ·" in index

    digest = client.get("/api/context/inject", params={"projects": "shop"}).text
    rows, _, rest = digest.partition("## No longer true")
    assert "Zephyr totals" not in rows and "Zephyr rate lives in tax_rate [changed since]" in rows
    assert f"#{gone} Zephyr totals come from cart_total [stale: cart.py deleted]" in rest
    assert "Zephyr plain note\n" in rows


def test_the_memoized_digest_follows_a_file_deleted_without_any_write(client: TestClient, app: Any,
                                                                     repo: Path) -> None:
    store = store_of(app)
    anchored(store, repo, "cart.py", "Totals come from cart_total", "`cart_total` sums the items")
    first = client.get("/api/context/inject", params={"projects": "shop"}).text
    assert "Totals come from cart_total" in first and "No longer true" not in first
    (repo / "cart.py").unlink()
    again = client.get("/api/context/inject", params={"projects": "shop"}).text
    assert "## No longer true (1, the code moved on)" in again


def test_the_command_line_search_says_a_memory_is_stale(repo: Path, isolated_home: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`memcairn search` without a worker reads the store itself and says the same as the worker would."""
    import json

    from memcairn.cli.app import run
    from memcairn.wire.config import load_settings

    with Store(load_settings().db_path) as home_store:
        gone = anchored(home_store, repo, "tax.py", "Tax rate is read from tax.py", "`tax_rate` comes from tax.py")
    (repo / "tax.py").unlink()
    assert run(["search", "tax rate", "--project", "shop", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    found = next(r for r in results if r["id"] == gone)
    assert found["freshness"]["state"] == STALE and "tax.py deleted since" in found["freshness"]["reasons"]
