from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from memcairn.cli.app import run


@pytest.fixture(autouse=True)
def fast_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = run(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _seed(capsys: pytest.CaptureFixture[str], n: int = 4) -> None:
    for i in range(n):
        _json(capsys, "add", "--project", "demo", "--kind", "observation", "--title", f"title {i}",
              "--narrative", f"narrative {i}", "--fact", f"fact {i}", "--json")


@pytest.mark.parametrize("backend", ["sqlite-vec", "chroma"])
def test_backfill_status_and_rebuild_after_the_mirror_was_removed_by_hand(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path, backend: str) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", backend)
    _seed(capsys)
    status = _json(capsys, "sync", "status", "--json")
    assert status["rows"] == [{"project": "demo", "kind": "observation", "watermark": 0, "max_id": 4, "lag": 4}]
    result = _json(capsys, "sync", "backfill", "--json")
    assert result["documents"] == 8 and result["failed_batches"] == 0
    status = _json(capsys, "sync", "status", "--json")
    assert status["state"] == "ok" and status["rows"][0]["lag"] == 0 and status["rows"][0]["watermark"] == 4

    mirror_path = isolated_home / ("vectors.sqlite" if backend == "sqlite-vec" else "chroma")
    assert mirror_path.exists()
    if mirror_path.is_dir():
        shutil.rmtree(mirror_path)
    else:
        for p in isolated_home.glob("vectors.sqlite*"):
            p.unlink()
    rebuilt = _json(capsys, "sync", "rebuild", "--json")
    assert rebuilt["documents"] == 8
    assert _json(capsys, "sync", "status", "--json")["rows"][0]["lag"] == 0


def test_rebuild_repairs_a_corrupt_sqlite_vec_file(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    _seed(capsys, 2)
    _json(capsys, "sync", "backfill", "--json")
    (isolated_home / "vectors.sqlite").write_bytes(b"not a database at all" * 200)
    for p in isolated_home.glob("vectors.sqlite-*"):
        p.unlink()
    code = run(["sync", "status", "--json"])
    _, err = capsys.readouterr()
    assert code == 2 and "memcairn sync rebuild" in err
    assert _json(capsys, "sync", "rebuild", "--json")["documents"] == 4


def _use_server(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "chroma")
    monkeypatch.setenv("MEMCAIRN_CHROMA_URL", url)


@pytest.mark.parametrize("command", ["status", "backfill", "rebuild"])
def test_sync_commands_against_a_server_that_is_down_fail_in_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
        command: str) -> None:
    from chroma_server import free_port

    _use_server(monkeypatch, f"http://127.0.0.1:{free_port()}")
    _seed(capsys, 1)
    code = run(["sync", command, "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("error:") == 1 and "is a Chroma server running there" in err and "Traceback" not in err


def test_two_stores_on_one_server_mirror_their_own_items_and_rebuild_only_their_own(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
        chroma_url: str) -> None:
    _use_server(monkeypatch, chroma_url)
    _seed(capsys, 3)  # store A, project demo
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 6
    monkeypatch.setenv("MEMCAIRN_HOME", str(isolated_home.parent / "home-b"))
    _seed(capsys, 2)  # store B, the same project, ids 1-2 again
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 4
    assert _json(capsys, "sync", "status", "--json")["rows"][0]["watermark"] == 2
    assert _json(capsys, "sync", "rebuild", "--json")["documents"] == 4
    monkeypatch.setenv("MEMCAIRN_HOME", str(isolated_home))
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 0  # A's mirror survived B's rebuild
    assert _json(capsys, "sync", "rebuild", "--json")["documents"] == 6


def test_a_backfill_that_left_a_gap_exits_non_zero(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> None:
    from memcairn.mirror.sync import MirrorSync

    _seed(capsys, 2)

    def failing(self: MirrorSync, docs: list, project: str) -> None:  # noqa: ARG001
        raise RuntimeError("injected batch failure")

    monkeypatch.setattr(MirrorSync, "_write", failing)
    code = run(["sync", "backfill", "--json"])
    out, _ = capsys.readouterr()
    assert code == 1 and json.loads(out)["failed_batches"] == 1


def _seed_big(isolated_home: Path, n: int) -> None:
    """``n`` memories straight into the store, each large enough for the mirror file to span many pages."""
    from memcairn.core.models import NewItem
    from memcairn.store import Store

    with Store(isolated_home / "memcairn.db") as store:
        store.add_items([NewItem(project="demo", kind="observation", title=f"title {i}",
                                 narrative=" ".join(f"word{i}x{j}" for j in range(150))) for i in range(n)])


def test_rebuild_repairs_a_sqlite_vec_file_damaged_past_the_pages_opening_reads(
        capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    """Opening reads only the first pages: with a page further in broken, `sync rebuild` (which every error names
    as the cure) must still start afresh rather than fail on clearing the broken file."""
    _seed_big(isolated_home, 200)
    written = _json(capsys, "sync", "backfill", "--json")["documents"]
    path = isolated_home / "vectors.sqlite"
    data = bytearray(path.read_bytes())
    data[len(data) // 2:len(data) * 3 // 4] = b"\xab" * (len(data) * 3 // 4 - len(data) // 2)
    path.write_bytes(bytes(data))
    for p in isolated_home.glob("vectors.sqlite-*"):
        p.unlink()
    from memcairn.wire import lifecycle
    from memcairn.wire.config import load_settings

    held = lifecycle.try_flock(lifecycle.lock_path(load_settings()))  # as a running worker holds it
    try:
        assert run(["sync", "rebuild", "--json"]) == 0
        out, err = capsys.readouterr()
    finally:
        os.close(held)
    result = json.loads(out)
    assert result["documents"] == written and result["state"] == "ok"
    assert "worker restart" not in err  # a worker's sqlite-vec index reopens a replaced file by itself
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 0


def test_a_rebuild_whose_model_cannot_load_keeps_the_mirror(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> None:
    """A model setting that cannot load also leaves the mirror unopened; rebuild must say so and not delete the
    vectors first, since it cannot refill them."""
    if importlib.util.find_spec("sentence_transformers") is not None:
        pytest.skip("sentence-transformers is installed: the model name would be looked up online")
    _seed(capsys, 3)
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 6
    before = (isolated_home / "vectors.sqlite").stat().st_ino
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "sentence-transformers/all-MiniLM-L6-v2")
    code = run(["sync", "rebuild", "--json"])
    _, err = capsys.readouterr()
    assert code == 2 and "sentence-transformers" in err and "Traceback" not in err
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    assert (isolated_home / "vectors.sqlite").stat().st_ino == before
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 0


def test_status_after_the_mirror_was_removed_by_hand_shows_the_lag(
        capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    """The watermarks say everything is mirrored, but the file is gone: status must show the lag, not 0."""
    _seed(capsys, 3)
    _json(capsys, "sync", "backfill", "--json")
    for p in isolated_home.glob("vectors.sqlite*"):
        p.unlink()
    row = _json(capsys, "sync", "status", "--json")["rows"][0]
    assert (row["watermark"], row["max_id"], row["lag"]) == (0, 3, 3)
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 6
    assert _json(capsys, "sync", "status", "--json")["rows"][0]["lag"] == 0


def test_a_model_change_of_the_same_dimension_is_caught_and_rebuild_re_embeds(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> None:
    """hash and the bundled MiniLM are both 384-d: a mirror filled by one must not answer the other's queries
    (their vectors do not compare). Search says why it ran keyword only; `sync rebuild` re-embeds."""
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    _seed(capsys, 3)
    assert _json(capsys, "sync", "backfill", "--json")["documents"] == 6
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "all-MiniLM-L6-v2-int8")
    found = _json(capsys, "search", "narrative", "--project", "demo", "--json")
    assert found["strategy"] == "keyword" and found["fallback_reason"] == "vector_unavailable"
    assert any("'hash-384'" in note and "sync rebuild" in note for note in found["notes"]), found["notes"]
    assert run(["sync", "status", "--json"]) != 0
    assert "'hash-384'" in capsys.readouterr().err
    assert _json(capsys, "sync", "rebuild", "--json")["documents"] == 6
    assert _json(capsys, "search", "narrative", "--project", "demo", "--json")["strategy"] == "hybrid"


def test_the_progress_bar_counts_memories_and_ends_at_its_total(capsys: pytest.CaptureFixture[str],
                                                                 isolated_home: Path) -> None:
    """Memories make a varying number of documents (one per field): the bar counts memories, whose number is
    known before the run, so it ends at n/n (it showed 123/60 counting documents against memories × 3)."""
    for i in range(5):
        _json(capsys, "add", "--project", "demo", "--kind", "observation", "--title", f"title {i}", "--narrative",
              f"narrative {i}", "--fact", f"fact {i}", "--fact", f"another {i}", "--fact", f"third {i}", "--json")
    for args in (["sync", "backfill"], ["sync", "rebuild"]):
        assert run(args) == 0
        out, err = capsys.readouterr()
        shown = out + err
        assert "5/5" in shown and "memories" in shown, shown
