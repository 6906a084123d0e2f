from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memcairn.cli import run


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
