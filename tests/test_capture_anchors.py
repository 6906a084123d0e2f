"""Anchors at capture: a memory made by the pipeline records its files' content ids (git blob ids in a checkout),
the identifiers of its text its files held, and the commit and branch, read from real files and a real git
repository; an import reads them under ``--root``; a directory that is gone never fails capture."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from capture_queue import edit, send
from click.testing import CliRunner
from git_repo import committed_repo, git
from transcript_builder import CWD, Transcript

from memcairn.capture import anchors
from memcairn.capture.anchors import MAX_HASH_BYTES, candidates, held_identifiers
from memcairn.capture.pipeline import CapturePipeline
from memcairn.cli.app import cli
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.wire.config import Settings, load_settings

CART = "def cart_total(items):\n    total = Decimal(0)\n    return total\n"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "shop", {"cart.py": CART, "old.py": "LEGACY = 1\n"})


def bash(tool_use_id: str, command: str, output: str = "") -> dict[str, object]:
    return {"tool_name": "Bash", "tool_use_id": tool_use_id, "tool_input": {"command": command},
            "tool_response": {"stdout": output, "stderr": "", "interrupted": False}}


def capture(store: Store, settings: Settings, cwd: Path, *calls: dict[str, object]) -> list[MemoryItem]:
    where = {"cwd": str(cwd)}
    send(store, settings, "session_start", **where)
    send(store, settings, "user_prompt", prompt="Fix the rounding of cart_total", **where)
    for call in calls:
        send(store, settings, "tool_use", **where, **call)
    send(store, settings, "stop", last_assistant_message="Fixed: `cart_total` uses Decimal now.", **where)
    report = CapturePipeline(store, settings).drain()
    assert report.failed == 0
    return store.list_items(ItemFilter(kinds=["observation", "summary"]), limit=100)


def anchored(items: list[MemoryItem], path: str) -> dict[str, Any]:
    """The file entry for ``path`` of the first memory that anchors it."""
    for item in items:
        for entry in item.anchors.get("files", []):
            if entry["path"] == path:
                return entry
    raise AssertionError(f"no memory anchors {path}: {[i.anchors for i in items]}")


def test_an_edit_anchors_the_file_by_its_git_blob_id_and_the_commit(store: Store, settings: Settings,
                                                                      repo: Path) -> None:
    items = capture(store, settings, repo, edit("e1", str(repo / "cart.py")))
    entry = anchored(items, "cart.py")
    assert entry["id"] == git(repo, "hash-object", "cart.py") and entry["by"] == "git-blob"
    edited = next(i for i in items if "cart.py" in i.files_modified)
    assert edited.anchors["commit"] == git(repo, "rev-parse", "HEAD")
    assert edited.anchors["branch"] == git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "trunk"
    assert edited.anchors["root"] == str(repo)
    summary = next(i for i in items if i.kind == "summary")
    assert "cart_total" in summary.anchors["identifiers"]


def test_a_deleted_file_is_anchored_with_a_null_id(store: Store, settings: Settings, repo: Path) -> None:
    (repo / "old.py").unlink()
    items = capture(store, settings, repo, bash("r1", "rm old.py"))
    assert anchored(items, "old.py") == {"path": "old.py", "id": None, "absent": True}


def test_the_commit_follows_a_packed_ref_and_a_detached_head(store: Store, settings: Settings, repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "trunk").exists()
    items = capture(store, settings, repo, edit("e1", str(repo / "cart.py")))
    assert {i.anchors["commit"] for i in items} == {git(repo, "rev-parse", "HEAD")}
    git(repo, "checkout", "-q", "--detach")
    send(store, settings, "user_prompt", prompt="Look again", cwd=str(repo))
    send(store, settings, "tool_use", cwd=str(repo), **bash("c1", "cat cart.py", CART))
    CapturePipeline(store, settings).drain()
    latest = store.list_items(ItemFilter(kinds=["observation"]), order="newest", limit=1)[0]
    assert latest.anchors["commit"] == git(repo, "rev-parse", "HEAD") and "branch" not in latest.anchors


def test_outside_git_a_file_is_anchored_by_its_content_hash(store: Store, settings: Settings,
                                                            tmp_path: Path, repo: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "cart.py").write_text(CART)
    big = plain / "big.bin"
    big.write_bytes(b"x" * (MAX_HASH_BYTES + 1))
    items = capture(store, settings, plain, edit("e1", str(plain / "cart.py")), bash("c1", "cat big.bin", "x"))
    entry = anchored(items, "cart.py")
    # the same content hash git would give (cart.py is byte-identical in the repository), said to be a plain one
    assert entry == {"path": "cart.py", "id": git(repo, "hash-object", "cart.py"), "by": "sha1-blob"}
    stat = big.stat()
    assert anchored(items, "big.bin") == {"path": "big.bin", "id": f"{stat.st_size}:{stat.st_mtime_ns}",
                                          "by": "size-mtime"}
    assert all("commit" not in i.anchors and "branch" not in i.anchors for i in items)


def test_capture_does_not_fail_when_the_directory_is_gone(store: Store, settings: Settings, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    items = capture(store, settings, gone, edit("e1", str(gone / "cart.py")))
    entry = anchored(items, "cart.py")
    assert entry == {"path": "cart.py", "id": None}  # unknown, not deleted: the directory is not there
    assert all(i.anchors["root"] == str(gone) for i in items)


def test_an_import_with_root_reads_the_files_there(store: Store, settings: Settings, tmp_path: Path,
                                                   repo: Path) -> None:
    """The transcript was recorded in a directory this machine does not have; --root says where it is."""
    path = (Transcript()
            .prompt("Fix the rounding of cart_total")
            .tool("t1", "Edit", {"file_path": f"{CWD}/cart.py", "old_string": "total = 0",
                                 "new_string": "total = Decimal(0)"})
            .result("t1", "The file has been updated.")
            .text("Done: `cart_total` returns a Decimal.")
            .write(tmp_path / "session.jsonl"))
    run = CliRunner().invoke(cli, ["import", "transcripts", str(path), "--offline", "--root", str(repo), "--json"])
    assert run.exit_code == 0, run.output
    imported = Store(load_settings().db_path)
    try:
        items = imported.list_items(ItemFilter(kinds=["observation", "summary"]), limit=100)
    finally:
        imported.close()
    assert anchored(items, "cart.py")["id"] == git(repo, "hash-object", "cart.py")
    assert {i.anchors["root"] for i in items} == {str(repo.resolve())}
    assert {i.anchors["commit"] for i in items} == {git(repo, "rev-parse", "HEAD")}


def test_only_identifiers_a_file_held_are_kept() -> None:
    text = ("Renamed `open_pool` to connect_pool; the --dry-run flag and Store.add_item stay, e.g. in setup.py. "
            "Also mentions ghost_function and plain words.")
    found = candidates([text], ["setup.py"])
    assert found == ["open_pool", "connect_pool", "--dry-run", "Store.add_item", "ghost_function"]
    content = b"def connect_pool():\n    parser.add('--dry-run')\n    store.add_item(x)\n# open_pooled\n"
    assert held_identifiers(found, [content]) == ["connect_pool", "--dry-run", "add_item"]


def test_an_import_without_root_keeps_the_paths_with_unknown_ids(store: Store, settings: Settings,
                                                                 tmp_path: Path) -> None:
    path = (Transcript().prompt("Fix it")
            .tool("t1", "Edit", {"file_path": f"{CWD}/cart.py", "old_string": "a", "new_string": "b"})
            .result("t1", "The file has been updated.").write(tmp_path / "session.jsonl"))
    import_transcripts(store, settings, [path])
    items = store.list_items(ItemFilter(kinds=["observation"]), limit=10)
    assert anchored(items, "cart.py") == {"path": "cart.py", "id": None}
    assert {i.anchors["root"] for i in items} == {CWD}


def test_a_failure_to_read_anchors_leaves_them_empty_and_is_logged_once(
        store: Store, settings: Settings, repo: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: object) -> dict[str, Any]:
        raise OSError("disk went away")

    monkeypatch.setattr(anchors.AnchorReader, "anchors", broken)
    monkeypatch.setattr(anchors, "_warned", False)
    items = capture(store, settings, repo, edit("e1", str(repo / "cart.py")), bash("c1", "cat old.py", "x"))
    assert len(items) >= 2 and all(i.anchors == {} for i in items)
    assert len([r for r in caplog.records if "anchors" in r.getMessage()]) == 1


def test_patterns_are_left_out_and_a_file_outside_the_root_is_absent_only_where_its_directory_is(
        tmp_path: Path) -> None:
    root = tmp_path / "app"
    root.mkdir()
    found = anchors.AnchorReader().anchors(str(root), ["test/**/*_test.exs", str(tmp_path / "plans" / "a.md"),
                                                       "~/.claude/plans/c.md", str(tmp_path / "b.md")], [])
    assert found["files"] == [{"path": str(tmp_path / "plans" / "a.md"), "id": None},
                              {"path": "~/.claude/plans/c.md", "id": None},
                              {"path": str(tmp_path / "b.md"), "id": None, "absent": True}]
