"""``memcairn bench freshness`` end to end on a tiny real repository and transcript: a memory about a file the
next commit deletes is labelled stale from git and shown stale; one about an untouched file stays current."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from transcript_builder import CWD, Transcript

from memcairn.cli.app import cli

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def commit(repo: Path, message: str, when: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    for args in (["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "shop"
    path.mkdir()
    for args in (["init", "-q", "-b", "trunk"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "T"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)
    (path / "cart.py").write_text("def cart_total(items):\n    return sum(items)\n")
    (path / "tax.py").write_text("def tax_rate(region):\n    return 0.2\n")
    commit(path, "start", "2026-03-01T09:00:00Z")
    (path / "cart.py").unlink()
    commit(path, "drop the cart", "2026-03-01T12:00:00Z")
    return path


def test_a_deleted_files_memory_is_labelled_and_shown_stale(tmp_path: Path, repo: Path) -> None:
    session = (Transcript()
               .prompt("Why is cart_total off by one?")
               .tool("t1", "Read", {"file_path": f"{CWD}/cart.py"})
               .result("t1", "def cart_total(items):\n    return sum(items)\n")
               .text("`cart_total` in cart.py sums the items; it is not off by one.")
               .prompt("What does tax_rate return?")
               .tool("t2", "Read", {"file_path": f"{CWD}/tax.py"})
               .result("t2", "def tax_rate(region):\n    return 0.2\n")
               .text("`tax_rate` in tax.py returns 0.2 for every region.")
               .write(tmp_path / "session.jsonl"))
    out = tmp_path / "result.json"
    run = CliRunner().invoke(cli, ["bench", "freshness", "--sessions", str(session), "--repo", str(repo),
                                   "--steps", "1d,HEAD", "--runs", "1", "--json", str(out)])
    assert run.exit_code == 0, run.output
    assert "| step |" in run.output
    result = json.loads(out.read_text())
    assert result["base_time"].startswith("2026-03-01T09:00:00")
    for step in result["steps"]:
        assert step["label_stale"] >= 1 and step["label_current"] >= 1
        assert step["stale_shown_stale"] == 1.0 and step["stale_with_reason"] == 1.0
        assert step["current_flagged"] == 0.0
        assert step["session_start_ms"] > 0


def test_a_renamed_file_whose_names_hold_is_labelled_changed_and_shown_moved(tmp_path: Path) -> None:
    path = tmp_path / "shop"
    path.mkdir()
    for args in (["init", "-q", "-b", "trunk"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "T"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)
    (path / "tax.py").write_text("def tax_rate(region):\n    return 0.2\n")
    (path / "cart.py").write_text("def cart_total(items):\n    return sum(items)\n")
    commit(path, "start", "2026-03-01T09:00:00Z")
    (path / "rates").mkdir()
    subprocess.run(["git", "-C", str(path), "mv", "tax.py", "rates/tax.py"], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(path), "mv", "cart.py", "basket.py"], check=True, capture_output=True)
    (path / "basket.py").write_text("def basket_total(items):\n    return sum(items)\n")
    commit(path, "move the rates, rename the cart", "2026-03-01T12:00:00Z")
    session = (Transcript()
               .prompt("What does tax_rate return?")
               .tool("t1", "Read", {"file_path": f"{CWD}/tax.py"})
               .result("t1", "def tax_rate(region):\n    return 0.2\n")
               .text("`tax_rate` in tax.py returns 0.2 for every region.")
               .prompt("Why is cart_total off by one?")
               .tool("t2", "Read", {"file_path": f"{CWD}/cart.py"})
               .result("t2", "def cart_total(items):\n    return sum(items)\n")
               .text("`cart_total` in cart.py sums the items; it is not off by one.")
               .write(tmp_path / "session.jsonl"))
    out = tmp_path / "result.json"
    run = CliRunner().invoke(cli, ["bench", "freshness", "--sessions", str(session), "--repo", str(path),
                                   "--steps", "HEAD", "--runs", "1", "--json", str(out)])
    assert run.exit_code == 0, run.output
    step = json.loads(out.read_text())["steps"][0]
    assert step["label_moved"] >= 1 and step["moved_said"] == 1.0
    assert step["label_stale"] >= 1 and step["stale_shown_stale"] == 1.0
