"""Freshness follows what git knows: a file renamed since the memory's commit is `changed` ("x moved to y") while
the names the memory states are still at the new path and `stale` once they are not, asking git once per commit
pair; and a qualified name (`paths.ValidateSessionID`, `Store.add_item`) is looked for where its qualifier says, so
the same member name in an unrelated file does not keep a memory whose module lost it from being stale."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from git_repo import committed_repo, git

from memcairn.capture.anchors import AnchorReader
from memcairn.context.freshness_check import FreshnessChecker
from memcairn.core.models import MemoryItem, NewItem
from memcairn.search.freshness import CHANGED, STALE
from memcairn.store import Store

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

CART = "def cart_total(items):\n    return sum(items)\n" + "".join(
    f"\n\ndef line_{n}(item):\n    return item.price * {n}\n" for n in range(12))  # long enough to be seen renamed
OTHER = "def tax_rate(region):\n    return 0.2\n"


def memory(store: Store, repo: Path, paths: list[str], text: str) -> MemoryItem:
    anchors = AnchorReader().anchors(str(repo), paths, [text])
    return store.get_item(store.add_item(NewItem(project="shop", kind="manual", text=text, anchors=anchors)).id)


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def test_a_file_git_renamed_is_changed_while_its_names_hold_and_stale_when_they_do_not(
        store: Store, tmp_path: Path) -> None:
    repo = committed_repo(tmp_path / "shop", {"cart.py": CART, "tax.py": OTHER})
    item = memory(store, repo, ["cart.py"], "`cart_total` in cart.py sums the items")
    assert item.anchors["commit"] and item.anchors["identifiers"] == ["cart_total"]
    (repo / "billing").mkdir()
    git(repo, "mv", "cart.py", "billing/cart.py")
    commit(repo, "move the cart")
    checker = FreshnessChecker()
    moved = checker.check([item])[item.id]
    assert (moved.state, moved.reasons) == (CHANGED, ("cart.py moved to billing/cart.py",))

    (repo / "billing" / "cart.py").write_text(CART.replace("cart_total", "basket_total"))
    commit(repo, "rename the function")
    gone = checker.check([item])[item.id]
    assert gone.state == STALE
    assert gone.reasons == ("`cart_total` no longer in billing/cart.py", "cart.py moved to billing/cart.py")


def test_a_file_deleted_rather_than_renamed_stays_deleted(store: Store, tmp_path: Path) -> None:
    repo = committed_repo(tmp_path / "shop", {"cart.py": CART, "tax.py": OTHER})
    item = memory(store, repo, ["cart.py"], "`cart_total` in cart.py sums the items")
    (repo / "cart.py").unlink()
    commit(repo, "drop the cart")
    found = FreshnessChecker().check([item])[item.id]
    assert (found.state, found.reasons) == (STALE, ("cart.py deleted since",))


def test_git_is_asked_once_per_commit_pair_not_at_every_read(store: Store, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    repo = committed_repo(tmp_path / "shop", {"cart.py": CART, "tax.py": OTHER})
    items = [memory(store, repo, ["cart.py"], f"`cart_total` in cart.py, note {n}") for n in range(3)]
    git(repo, "mv", "cart.py", "basket.py")
    commit(repo, "rename")
    calls: list[Any] = []
    real = subprocess.run

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting)
    checker = FreshnessChecker()
    for _ in range(3):
        states = checker.check(items)
        assert {f.reasons for f in states.values()} == {("cart.py moved to basket.py",)}
    assert len(calls) == 1
    (repo / "tax.py").write_text(OTHER + "# more\n")
    commit(repo, "another commit: a new pair")
    calls.clear()
    checker.check(items)
    checker.check(items)
    assert len(calls) == 1


GO_PATHS = "package paths\n\nfunc ValidateSessionID(id string) error {\n\treturn nil\n}\n"
GO_MAIN = "package main\n\nfunc run(id string) error {\n\treturn paths.ValidateSessionID(id)\n}\n"


def test_a_qualified_name_moved_to_another_package_is_stale_though_its_member_name_is_elsewhere(
        store: Store, tmp_path: Path) -> None:
    repo = committed_repo(tmp_path / "cli", {"README.md": "cli\n"})
    (repo / "paths").mkdir()
    (repo / "cmd").mkdir()
    (repo / "paths" / "paths.go").write_text(GO_PATHS)
    (repo / "cmd" / "main.go").write_text(GO_MAIN)
    commit(repo, "start")
    item = memory(store, repo, ["paths/paths.go", "cmd/main.go"],
                  "Session ids are checked by `paths.ValidateSessionID` before use")
    assert "paths.ValidateSessionID" in item.anchors["identifiers"]

    (repo / "paths" / "paths.go").write_text("package paths\n\nconst Root = \".entire\"\n")
    (repo / "cmd" / "main.go").write_text(GO_MAIN.replace("paths.", "validation."))
    found = FreshnessChecker().check([item])[item.id]
    assert found.state == STALE and "`paths.ValidateSessionID` no longer in its files" in found.reasons


def test_a_qualified_name_whose_member_stays_in_its_qualifiers_module_still_holds(
        store: Store, tmp_path: Path) -> None:
    """Any language: a directory or file named as the qualifier, or a file declaring it, is where it lives."""
    repo = committed_repo(tmp_path / "app", {"notes.md": "Call Store.add_item to save.\n"})
    (repo / "store").mkdir()
    (repo / "store" / "writes.py").write_text("class Writes:\n    def add_item(self):\n        pass\n")
    (repo / "lib.ex").write_text("defmodule App.Sync do\n  def sync_all, do: :ok\nend\n# App.Sync.sync_all\n")
    (repo / "app.js").write_text("const Hooks = {}\nHooks.TextSelection = { mounted() {} }\n")
    commit(repo, "start")
    item = memory(store, repo, ["notes.md", "store/writes.py", "lib.ex", "app.js"],
                  "Save through `Store.add_item`; `App.Sync.sync_all` syncs; `Hooks.TextSelection` reads it")
    assert {"Store.add_item", "App.Sync.sync_all", "Hooks.TextSelection"} <= set(item.anchors["identifiers"])

    (repo / "notes.md").write_text("Saving is documented elsewhere.\n")
    (repo / "lib.ex").write_text("defmodule App.Sync do\n  def sync_all, do: :ok\nend\n")
    (repo / "app.js").write_text("const Hooks = {\n  TextSelection: { mounted() {} },\n}\n")
    found = FreshnessChecker().check([item])[item.id]
    assert found.state == CHANGED, found.reasons
